"""Files deskside writes never go through a link it did not make; folders it owns are 0700
whatever the umask; a model folder is copied by contents, never through a link out of it.
Real files in tmp_path, real processes for the umask."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from deskside import safefs
from deskside.deploy.stages import model_manifest
from deskside.errors import UsageError
from deskside.render.bundle import Bundle
from deskside.safefs import WriteRefused, folder_files, write_file
from deskside.transport.local import LocalTransport


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def snapshot(top: Path, skip: Path | None = None) -> dict[str, tuple[int, bytes | str]]:
    """Every entry under `top` (but `skip`): its mode and contents or link target."""
    out: dict[str, tuple[int, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            if skip is not None and (path == skip or skip in path.parents):
                continue
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                body: bytes | str = os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                body = path.read_bytes()
            else:
                body = ""
            out[str(path)] = (st.st_mode, body)
    return out


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A private file that is not deskside's, outside every folder deskside writes."""
    path = tmp_path / "elsewhere" / "secret.txt"
    path.parent.mkdir()
    path.write_text("not deskside's\n")
    path.chmod(0o600)
    return path


def two_files() -> Bundle:
    bundle = Bundle()
    bundle.add("ai1/launch.sh", b"#!/bin/sh\n", 0o755)
    bundle.add("ai1/node.env", b"A=1\n", 0o644)
    return bundle


# --------------------------------------------------------------------------- render bundle


def test_a_link_planted_at_a_bundle_file_is_replaced_not_followed(
    tmp_path: Path, victim: Path
) -> None:
    out = tmp_path / "out"
    (out / "ai1").mkdir(parents=True)
    (out / "ai1" / "launch.sh").symlink_to(victim)
    before = snapshot(tmp_path, skip=out)
    two_files().write(out)
    assert snapshot(tmp_path, skip=out) == before  # nothing outside `out` changed
    assert victim.read_text() == "not deskside's\n" and mode(victim) == 0o600
    launch = out / "ai1" / "launch.sh"
    assert not launch.is_symlink() and launch.read_bytes() == b"#!/bin/sh\n"
    assert mode(launch) == 0o755
    assert sorted(p.name for p in (out / "ai1").iterdir()) == ["launch.sh", "node.env"]


@pytest.mark.parametrize("where", ["ai1", "."])
def test_a_folder_link_in_the_bundle_folder_is_refused(
    tmp_path: Path, victim: Path, where: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    if where == ".":  # a link below a real `ai1`
        (out / "ai1").mkdir()
        (out / "ai1" / "sub").symlink_to(victim.parent)
        bundle = Bundle()
        bundle.add("ai1/sub/x.sh", b"#!/bin/sh\n", 0o755)
        link = out / "ai1" / "sub"
    else:
        (out / "ai1").symlink_to(victim.parent)
        bundle = two_files()
        link = out / "ai1"
    before = snapshot(victim.parent)
    with pytest.raises(WriteRefused, match="is a link") as exc:
        bundle.write(out)
    assert exc.value.exit_code == 2
    assert exc.value.location is not None and exc.value.location.path == str(link)
    assert f"rm -- {link}" in (exc.value.hint or "")
    assert snapshot(victim.parent) == before


def test_render_cli_through_planted_links_writes_nothing_outside(
    tmp_path: Path, victim: Path
) -> None:
    """The real command in a real process: links planted at a node folder's files."""
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "out"
    (out / "ai1").mkdir(parents=True)
    (out / "ai1" / "launch.sh").symlink_to(victim)
    (out / "ai1" / "node.env").symlink_to(victim)
    (out / "cluster").mkdir()
    (out / "cluster" / "deskside.lock").symlink_to(victim)
    before = snapshot(tmp_path, skip=out)
    env = {**os.environ, "DESKSIDE_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    env["PYTHONPATH"] = str(root / "src")
    recipe = root / "recipes" / "dual-spark-deepseek-v4-flash.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "deskside.cli", "render", str(recipe), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    after = snapshot(tmp_path, skip=out)
    new = {k for k in after if k not in before}
    assert all(Path(k).is_relative_to(tmp_path / "home") for k in new), new
    assert {k: v for k, v in after.items() if k in before} == before
    assert victim.read_text() == "not deskside's\n" and mode(victim) == 0o600
    for rel in ("ai1/launch.sh", "ai1/node.env", "cluster/deskside.lock"):
        assert not (out / rel).is_symlink()
    assert mode(out / "ai1" / "launch.sh") == 0o755


def test_temporary_files_are_random_and_left_nowhere(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "ai1").mkdir(parents=True)
    # what the old fixed temporary name was: a link planted there changes nothing
    (out / "ai1" / ".launch.sh.deskside-tmp").symlink_to(tmp_path / "planted")
    two_files().write(out)
    two_files().write(out)
    names = sorted(p.name for p in (out / "ai1").iterdir())
    assert names == [".launch.sh.deskside-tmp", "launch.sh", "node.env"]
    assert not (tmp_path / "planted").exists()


# --------------------------------------------------------------------------- umask 000


UMASK_0 = """
import os, sys
from pathlib import Path
os.umask(0)
from deskside.render.bundle import Bundle
from deskside.secrets import proxy_master_key
from deskside.transport.local import LocalTransport
from deskside.home import runs_dir
tmp = Path(sys.argv[1])
proxy_master_key("demo")
LocalTransport().put(b"{}", str(runs_dir() / "demo" / "run.json"), 0o600)
LocalTransport().put(b"x", str(runs_dir() / "demo" / "nodes" / "n1" / "state.json"), 0o644)
b = Bundle()
b.add("ai1/launch.sh", b"#!/bin/sh\\n", 0o755)
b.add("cluster/prometheus/rules/r.yml", b"x: 1\\n", 0o644)
b.write(tmp / "bundle" / "out")
"""


def test_umask_000_yields_private_folders(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    home = tmp_path / "home"
    env = {**os.environ, "DESKSIDE_HOME": str(home), "PYTHONPATH": str(root / "src")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(UMASK_0), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for folder in [
        home,
        home / "secrets",
        home / "secrets" / "demo",
        home / "runs",
        home / "runs" / "demo",
        home / "runs" / "demo" / "nodes" / "n1",
        tmp_path / "bundle",
        tmp_path / "bundle" / "out",
        tmp_path / "bundle" / "out" / "ai1",
        tmp_path / "bundle" / "out" / "cluster" / "prometheus" / "rules",
    ]:
        assert mode(folder) == 0o700, folder
    assert mode(home / "secrets" / "demo" / "proxy-master-key") == 0o600
    assert mode(home / "runs" / "demo" / "run.json") == 0o600
    assert mode(home / "runs" / "demo" / "nodes" / "n1" / "state.json") == 0o644
    assert mode(tmp_path / "bundle" / "out" / "ai1" / "launch.sh") == 0o755
    assert mode(tmp_path / "bundle" / "out" / "cluster" / "prometheus" / "rules" / "r.yml") == 0o644


def test_a_folder_under_home_someone_else_can_write_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("DESKSIDE_HOME", str(home))
    (home / "runs").mkdir(parents=True)
    (home / "runs").chmod(0o777)
    with pytest.raises(WriteRefused, match=r"writable by others \(mode 0777\)") as exc:
        LocalTransport().put(b"{}", str(home / "runs" / "x" / "run.json"))
    assert "chmod 700" in (exc.value.hint or "")
    assert not (home / "runs" / "x").exists()
    home.chmod(0o777)
    (home / "runs").chmod(0o700)
    with pytest.raises(WriteRefused, match=r"writable by others \(mode 0777\)"):
        LocalTransport().put(b"{}", str(home / "runs" / "x" / "run.json"))


def test_a_link_below_home_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("DESKSIDE_HOME", str(home))
    home.mkdir()
    (tmp_path / "other").mkdir()
    (home / "runs").symlink_to(tmp_path / "other")
    with pytest.raises(WriteRefused, match="is a link"):
        LocalTransport().put(b"{}", str(home / "runs" / "x" / "run.json"))
    assert list((tmp_path / "other").iterdir()) == []


# --------------------------------------------------------------------------- model folders


def model_folder(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "sub" / "weights.bin").write_bytes(b"\0" * 64)
    (model / "tokenizer.json").symlink_to("sub/weights.bin")  # inside: copied as content
    return model


def test_folder_files_copies_links_inside_as_contents(tmp_path: Path) -> None:
    model = model_folder(tmp_path)
    files = folder_files(model)
    assert [rel for rel, _ in files] == ["config.json", "sub/weights.bin", "tokenizer.json"]
    assert dict(files)["tokenizer.json"] == (model / "sub" / "weights.bin").resolve()


@pytest.mark.parametrize(
    "target", ["{victim}", "../../elsewhere/secret.txt", "../sub/../../elsewhere/secret.txt"]
)
def test_a_link_out_of_the_model_folder_is_refused_with_where_and_how(
    tmp_path: Path, victim: Path, target: str
) -> None:
    model = model_folder(tmp_path)
    link = model / "sub" / "leak.bin"
    link.symlink_to(target.format(victim=victim))
    with pytest.raises(WriteRefused) as exc:
        folder_files(model)
    err = exc.value
    assert err.exit_code == 2
    assert str(link) in err.message and "outside the folder" in err.message
    assert err.location is not None and err.location.path == str(link)
    assert "cp --remove-destination" in (err.hint or "") and "cp -rL" in (err.hint or "")


def test_a_link_to_a_folder_or_a_fifo_in_the_model_folder_is_refused(tmp_path: Path) -> None:
    model = model_folder(tmp_path)
    (model / "again").symlink_to("sub")
    with pytest.raises(WriteRefused, match="link to the folder"):
        folder_files(model)
    (model / "again").unlink()
    os.mkfifo(model / "pipe")
    with pytest.raises(WriteRefused, match="not a regular file"):
        folder_files(model)


def test_model_manifest_refuses_a_link_out_before_anything_is_pushed(
    tmp_path: Path, victim: Path
) -> None:
    model = model_folder(tmp_path)
    (model / "leak").symlink_to(victim)
    with pytest.raises(UsageError, match="outside the folder") as exc:
        model_manifest(model)
    assert exc.value.exit_code == 2


def test_pushing_a_model_folder_with_links_changes_no_mode_outside(
    tmp_path: Path, victim: Path
) -> None:
    """A model folder pushed file by file (as the deploy does) with a link inside it, to a
    node folder where a link to a private file waits at every name: nothing outside the
    node folder changes, the private file keeps its mode."""
    model = model_folder(tmp_path)
    node = tmp_path / "node" / "model"
    (node / "sub").mkdir(parents=True)
    for rel in ("config.json", "sub/weights.bin", "tokenizer.json"):
        (node / rel).symlink_to(victim)
    before = snapshot(tmp_path, skip=tmp_path / "node")
    t = LocalTransport()
    for rel, source in folder_files(model):
        t.put_file(source, str(node / rel), 0o644)
    assert snapshot(tmp_path, skip=tmp_path / "node") == before
    assert mode(victim) == 0o600 and victim.read_text() == "not deskside's\n"
    assert (node / "tokenizer.json").read_bytes() == b"\0" * 64
    assert not (node / "tokenizer.json").is_symlink() and mode(node / "tokenizer.json") == 0o644


def test_put_file_never_reads_through_a_link(tmp_path: Path, victim: Path) -> None:
    link = tmp_path / "shard"
    link.symlink_to(victim)
    with pytest.raises(WriteRefused, match="is a link"):
        LocalTransport().put_file(link, str(tmp_path / "copy"))
    assert not (tmp_path / "copy").exists()


# --------------------------------------------------------------------------- the primitives


def test_write_file_sets_the_exact_mode_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        write_file(tmp_path / "a" / "f", b"x", 0o755)
    finally:
        os.umask(old)
    assert mode(tmp_path / "a" / "f") == 0o755


def test_create_file_creates_once(tmp_path: Path) -> None:
    path = tmp_path / "k"
    assert safefs.create_file(path, b"one", 0o600)
    assert not safefs.create_file(path, b"two", 0o600)
    assert path.read_bytes() == b"one" and sorted(os.listdir(tmp_path)) == ["k"]


def test_open_append_refuses_a_link_and_a_fifo(tmp_path: Path, victim: Path) -> None:
    (tmp_path / "log").symlink_to(victim)
    with pytest.raises(WriteRefused, match="is a link"):
        safefs.open_append(tmp_path / "log", 0o644)
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(WriteRefused, match="not a regular file"):
        safefs.open_append(tmp_path / "pipe", 0o644)
    fd = safefs.open_append(tmp_path / "new.log", 0o640)
    os.close(fd)
    assert mode(tmp_path / "new.log") == 0o640
    assert victim.read_text() == "not deskside's\n"
