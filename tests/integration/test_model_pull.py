"""`deskside model pull` as users run it, against a local stand-in for the Hugging Face Hub
(tests/fake_hub.py, HF_ENDPOINT=http://127.0.0.1:PORT): huggingface_hub does the real
requests; only loopback is used."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deskside.home import embedded_recipes
from tests.fake_hub import FakeHub, small_model, with_big_shard

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
TOKEN = "hf_fakeTokenThatMustNotLeak123"


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    server = small_model().start()
    yield server
    server.stop()


def recipe_file(tmp_path: Path, hub: FakeHub, revision: str | None = None) -> Path:
    text = embedded_recipes()["local-tiny"]
    model = f"  repo: {hub.repo}\n  revision: {revision or hub.commit}\n"
    text = text.replace("  path: models/tiny-deepseek-v3\n", model)
    text = text.replace("runtime:\n", f"runtime:\n  hf_cache: {tmp_path / 'hf-cache'}\n", 1)
    path = tmp_path / "pull.yaml"
    path.write_text(text)
    return path


def env_for(tmp_path: Path, hub: FakeHub, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HF_", "HUGGING_FACE_"))
        and k.lower() not in ("http_proxy", "https_proxy")
    }
    env.update(
        HF_ENDPOINT=hub.url,
        HF_HOME=str(tmp_path / "user-hf-home"),  # no token file, no shared state
        HF_TOKEN=TOKEN,
        NO_PROXY="127.0.0.1,localhost",
        DESKSIDE_HOME=str(tmp_path / "deskside-home"),
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
    )
    env.update(extra)
    return env


def run(tmp_path: Path, hub: FakeHub, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "deskside.cli", "model", "pull", *args],
        capture_output=True,
        text=True,
        env=env_for(tmp_path, hub, **extra),
        cwd=ROOT,
        timeout=60,
    )
    assert TOKEN not in proc.stdout + proc.stderr
    return proc


def snapshot(tmp_path: Path, hub: FakeHub) -> Path:
    folder = "models--" + hub.repo.replace("/", "--")
    return tmp_path / "hf-cache" / "hub" / folder / "snapshots" / hub.commit


def test_pull_fetches_the_pinned_revision_and_the_engine_reads_it_offline(
    tmp_path: Path, hub: FakeHub
) -> None:
    recipe = recipe_file(tmp_path, hub)
    proc = run(tmp_path, hub, str(recipe), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["ok"] and result["token"] is True
    assert result["endpoint"] == hub.url
    assert {f["path"]: f["status"] for f in result["files"]} == dict.fromkeys(
        hub.files, "downloaded"
    )
    snap = snapshot(tmp_path, hub)
    for name, f in hub.files.items():
        link = snap / name
        assert link.is_symlink() and link.resolve().parent.name == "blobs"
        assert link.resolve().name == f.etag
        assert link.read_bytes() == f.data
    assert not list(snap.parent.parent.glob("blobs/*.incomplete"))
    # the token reached the hub as huggingface_hub sends it, and only there
    resolves = [r for r in hub.requests if "/resolve/" in r.path]
    assert resolves and all(r.authorization == f"Bearer {TOKEN}" for r in resolves)

    # again: nothing is downloaded, everything is checked
    hub.requests.clear()
    again = json.loads(run(tmp_path, hub, str(recipe), "--json").stdout)
    assert again["ok"] and {f["status"] for f in again["files"]} == {"cached"}
    assert not [r for r in hub.requests if "/resolve/" in r.path]

    # the engine's view: HF_HOME=runtime.hf_cache, HF_HUB_OFFLINE=1, the pinned revision
    code = (
        "from huggingface_hub import snapshot_download; "
        f"print(snapshot_download({hub.repo!r}, revision={hub.commit!r}))"
    )
    hub.requests.clear()
    offline = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env_for(tmp_path, hub, HF_HOME=str(tmp_path / "hf-cache"), HF_HUB_OFFLINE="1"),
        timeout=60,
    )
    assert offline.returncode == 0, offline.stderr
    assert offline.stdout.strip() == str(snap)
    assert hub.model_requests() == []


def test_a_corrupted_download_is_caught_and_not_left_in_the_cache(
    tmp_path: Path, hub: FakeHub
) -> None:
    bad = "model-00003-of-00003.safetensors"
    hub.corrupt.add(bad)
    recipe = recipe_file(tmp_path, hub)
    proc = run(tmp_path, hub, str(recipe), "--json")
    assert proc.returncode == 1
    files = {f["path"]: f for f in json.loads(proc.stdout)["files"]}
    report = files.pop(bad)
    assert report["status"] == "mismatch" and report["algorithm"] == "sha256"
    assert report["expected"] == hub.files[bad].sha256 != report["actual"]
    snap = snapshot(tmp_path, hub)
    blob = snap.parent.parent / "blobs" / hub.files[bad].sha256
    assert sorted(report["removed"]) == sorted([str(blob), str(snap / bad)])
    assert not os.path.lexists(blob) and not os.path.lexists(snap / bad)
    assert {f["status"] for f in files.values()} == {"downloaded"}

    # the hub mends its ways: a second pull fetches that one file and nothing else
    hub.corrupt.clear()
    hub.requests.clear()
    proc = run(tmp_path, hub, str(recipe))
    assert proc.returncode == 0, proc.stderr
    assert "1 downloaded" in proc.stdout
    assert [r.path.rsplit("/", 1)[1] for r in hub.gets_of_files()] == [bad]
    assert (snap / bad).read_bytes() == hub.files[bad].data


def test_an_interrupted_download_resumes_with_a_range_request(tmp_path: Path, hub: FakeHub) -> None:
    name = "model-00002-of-00003.safetensors"
    hub.drop_once[name] = 11 << 20  # past huggingface_hub's first 10 MiB chunk
    proc = run(tmp_path, hub, str(recipe_file(tmp_path, hub)), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["retries"] == 1
    gets = hub.gets(name)
    assert [g.range for g in gets] == [None, f"bytes={10 << 20}-"]
    data = (snapshot(tmp_path, hub) / name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == hub.files[name].sha256


def test_refusals_say_what_to_do(tmp_path: Path, hub: FakeHub) -> None:
    unknown = "f" * 40
    proc = run(tmp_path, hub, str(recipe_file(tmp_path, hub, unknown)))
    assert proc.returncode == 1
    assert f"has no commit {unknown}" in proc.stderr and "hint:" in proc.stderr

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run(tmp_path, hub, str(recipe_file(tmp_path, hub)), "--cache", str(blocker / "c"))
    assert proc.returncode == 1
    assert "--cache" in proc.stderr and "hint:" in proc.stderr


def test_a_killed_pull_resumes_its_big_file_from_the_partial_file(
    tmp_path: Path, hub: FakeHub
) -> None:
    name = with_big_shard(hub)
    big = hub.files[name]
    cut = 20 << 20
    hub.pause_once[name] = cut
    recipe = recipe_file(tmp_path, hub)
    blobs = snapshot(tmp_path, hub).parent.parent / "blobs"
    partial = blobs / f".{big.sha256}.deskside-partial"
    first = subprocess.Popen(
        [sys.executable, "-m", "deskside.cli", "model", "pull", str(recipe), "--include", name],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env_for(tmp_path, hub),
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 20
        while not (partial.exists() and partial.stat().st_size >= cut):
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
    finally:
        first.kill()  # SIGKILL: nothing of the pull runs after this
        first.wait()
        hub.release.set()
    assert partial.stat().st_size == cut and not (blobs / big.sha256).exists()

    hub.requests.clear()
    proc = run(tmp_path, hub, str(recipe), "--json")
    assert proc.returncode == 0, proc.stderr
    files = {f["path"]: f for f in json.loads(proc.stdout)["files"]}
    assert files[name]["status"] == "downloaded" and files[name]["resumed_from"] == cut
    assert [g.range for g in hub.gets(name)] == [f"bytes={cut}-"]
    data = (snapshot(tmp_path, hub) / name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == big.sha256
    link = snapshot(tmp_path, hub) / name
    assert os.readlink(link) == f"../../blobs/{big.sha256}"
    assert not partial.exists()
