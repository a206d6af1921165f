"""`deskside model sync` for real: two network-namespace hosts with sshd
(`tests/sshd_hosts.py`), each with its own Hugging Face cache in its private folder. The
head holds a fake hub-cache entry of the recipe's pinned revision (random bytes, a few
hundred MB, blobs and snapshot links as the hub writes them). A sync copies it over the
fabric address into the same layout on the worker; a second sync copies nothing; a byte
flipped on the worker (size and mtime kept) is found by `model verify` and makes `up`
refuse in preflight, naming the node and the file; the next sync repairs it.

Needs root, iproute2 and openssh-server (scripts/system-deps installs them)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deskside.transport import ssh

from ..cli_process import deskside
from ..deploy_cases import hub_recipe
from ..sshd_hosts import SshHosts, can_run, ssh_hosts
from ..unit.model_cache import REPO, REVISION, flip_byte, make_entry

pytestmark = pytest.mark.integration

SHARD = 100 << 20
ENTRY = Path("hf", "hub", "models--" + REPO.replace("/", "--"))


@dataclass(frozen=True)
class Setup:
    hosts: SshHosts
    recipe: Path
    manifest: Path  # the head's manifest
    home: Path
    total: int

    def snapshot(self, host: int) -> Path:
        return self.hosts.hosts[host].private_dir / ENTRY / "snapshots" / REVISION


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    ok, why = can_run()
    if not ok:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("model-sync")
    with ssh_hosts(base / "hosts", "s", 2, base / "node-root") as hosts:
        h0 = hosts.hosts[0]
        files = {"config.json": b'{"model_type": "tiny"}', "tokenizer.json": b"{}"}
        files |= {f"model-0000{i}-of-00003.safetensors": os.urandom(SHARD) for i in (1, 2, 3)}
        snap = make_entry(h0.private_dir / "hf", files)
        recipe = hub_recipe(hosts, base / "recipes", "sync-tiny", REPO, REVISION)
        manifest = base / "head-manifest.json"
        r = deskside("model", "manifest", str(snap), "--out", str(manifest), home=base / "home")
        assert r.returncode == 0, r.stderr
        try:
            yield Setup(hosts, recipe, manifest, base / "home", sum(map(len, files.values())))
        finally:
            ssh.close_all()


def _sync(s: Setup) -> dict:  # type: ignore[type-arg]
    r = deskside(
        "model",
        "sync",
        str(s.recipe),
        "--known-hosts",
        str(s.hosts.known_hosts),
        "--json",
        home=s.home,
        timeout=120,
    )
    report = json.loads(r.stdout)
    assert (r.returncode == 0) == report["ok"], r.stdout + r.stderr
    return report  # type: ignore[no-any-return]


def _verify(s: Setup) -> tuple[int, dict]:  # type: ignore[type-arg]
    r = deskside(
        "model", "verify", str(s.snapshot(1)), "--manifest", str(s.manifest), "--json", home=s.home
    )
    return r.returncode, json.loads(r.stdout)


def test_sync_copies_the_snapshot_then_nothing(setup: Setup) -> None:
    first = _sync(setup)
    assert first["ok"], first
    [node] = first["nodes"]
    assert node["node"] == "node1" and node["address"] == setup.hosts.hosts[1].address
    assert node["files"] == 5 and node["bytes"] == setup.total
    snap = setup.snapshot(1)
    link = snap / "model-00001-of-00003.safetensors"
    assert link.is_symlink() and os.readlink(link).startswith("../../blobs/")
    assert (snap.parent.parent / "refs" / "main").read_text() == REVISION  # as on the head
    assert _verify(setup)[0] == 0
    second = _sync(setup)
    assert second["ok"] and second["nodes"][0]["files"] == 0
    assert second["nodes"][0]["skipped"] == 5 and second["nodes"][0]["hashed"] == 0


def test_a_flipped_byte_is_found_refused_by_up_and_repaired(setup: Setup) -> None:
    _sync(setup)
    shard = "model-00002-of-00003.safetensors"
    flip_byte(Path(os.path.realpath(setup.snapshot(1) / shard)), SHARD // 2)
    rc, report = _verify(setup)
    assert rc == 1 and [(d["path"], d["kind"]) for d in report["differences"]] == [
        (shard, "differs")
    ]
    r = deskside(
        "up",
        str(setup.recipe),
        "--known-hosts",
        str(setup.hosts.known_hosts),
        "--json",
        home=setup.home,
        timeout=120,
    )
    up = json.loads(r.stdout)
    assert r.returncode != 0 and up["failed_stage"] == "preflight", up
    assert "node1" in up["error"] and shard in up["error"], up["error"]
    assert "deskside model sync" in up["hint"]
    repaired = _sync(setup)
    assert repaired["ok"] and repaired["nodes"][0]["files"] == 1
    assert repaired["nodes"][0]["bytes"] == SHARD
    assert _verify(setup)[0] == 0
