"""The launch-time GID snippet, run by a real POSIX sh against the fixture trees, must agree
with the Python selector on every tree: same index, or both refuse."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from deskside.fabric.gid import ipv4_mapped_gid, resolve_node
from deskside.fabric.launch_sh import gid_snippet, node_gid_snippet
from deskside.fabric.sysfs import DirSource, read_snapshot
from deskside.recipe.load import load_recipe

ROOT = Path(__file__).parents[2]
FIXTURES = Path(__file__).parent / "fixtures" / "sysfs"
F0 = "enp1s0f0np0"
SHELLS = [s for s in ("sh", "dash", "bash", "busybox") if shutil.which(s)]

# (case, address, interface, hcas)
SCENARIOS = [
    ("gb10-head", "192.168.100.1", F0, ["rocep1s0f0"]),
    ("gb10-head", "192.168.100.1", F0, ["rocep1s0f0:1"]),
    ("gb10-head", "192.168.100.1", F0, ["rocep1s0f0", "rocep1s0f1"]),
    ("gb10-head", "192.168.101.1", "enp1s0f1np1", ["rocep1s0f1"]),
    ("gb10-head", "192.168.100.9", F0, ["rocep1s0f0"]),
    ("gb10-head", "192.168.100.1", F0, ["mlx5_0"]),
    ("gb10-head", "192.168.100.1", F0, ["rocep1s0f0:2"]),
    ("gb10-head", "192.168.100.1", "enp1s0f1np1", ["rocep1s0f0"]),
    ("gb10-worker", "192.168.100.2", F0, ["rocep1s0f0"]),
    ("gb10-worker", "192.168.100.2", F0, ["rocep1s0f0", "rocep1s0f1"]),
    ("no-v2", "192.168.100.1", F0, ["rocep1s0f0"]),
    ("two-matches", "192.168.100.1", F0, ["rocep1s0f0"]),
    ("port-down", "192.168.100.1", F0, ["rocep1s0f0"]),
    ("empty-files", "192.168.100.1", F0, ["rocep1s0f0"]),
    ("empty-files", "192.168.100.1", "enp1s0f1np1", ["rocep1s0f1"]),
]


def run_snippet(
    root: Path, address: str, interface: str, hcas: list[str], shell: str = "sh"
) -> subprocess.CompletedProcess[str]:
    script = "set -eu\n" + gid_snippet(address, interface, hcas)
    script += 'printf "index=%s\\n" "$NCCL_IB_GID_INDEX"\n'
    argv = [shell, "sh", "-c", script] if shell == "busybox" else [shell, "-c", script]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DESKSIDE_SYSFS_ROOT": str(root)}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30)


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(("case", "address", "interface", "hcas"), SCENARIOS)
def test_snippet_agrees_with_python(
    shell: str, case: str, address: str, interface: str, hcas: list[str]
) -> None:
    root = FIXTURES / case / "sys"
    expected = resolve_node(read_snapshot(DirSource(root)), address, hcas, interface)
    done = run_snippet(root, address, interface, hcas, shell)
    if expected.ok:
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"index={expected.gid_index}\n"
        assert done.stderr == ""
    else:
        assert done.returncode == 1, done.stdout
        assert "index=" not in done.stdout  # nothing after the refusal ran
        assert expected.error is not None
        assert f"deskside: {expected.error['kind']}:" in done.stderr
        assert "refusing to start" in done.stderr


def test_refusal_lists_what_was_found() -> None:
    done = run_snippet(FIXTURES / "no-v2" / "sys", "192.168.100.1", F0, ["rocep1s0f0"])
    assert done.returncode == 1
    assert "[2] 0000:0000:0000:0000:0000:ffff:c0a8:6401 IB/RoCE v1 on enp1s0f0np0" in done.stderr
    assert "[0] fe80:0000:0000:0000:5e25:73ff:fe2a:10c0 IB/RoCE v1" in done.stderr


def test_ambiguous_names_both_indexes() -> None:
    done = run_snippet(FIXTURES / "two-matches" / "sys", "192.168.100.1", F0, ["rocep1s0f0"])
    assert done.returncode == 1 and "(indexes 7 9)" in done.stderr


def _tree_with_match_at(tmp_path: Path, index: int, slots: int = 256) -> Path:
    """A port with `slots` GID files, all zero except the fabric address at `index`."""
    port = tmp_path / "class/infiniband/rocep1s0f0/ports/1"
    (port / "gids").mkdir(parents=True)
    (port / "gid_attrs/types").mkdir(parents=True)
    (port / "gid_attrs/ndevs").mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    for i in range(slots):
        value = ipv4_mapped_gid("10.1.2.3") if i == index else "0" * 4 + ":0000" * 7
        (port / "gids" / str(i)).write_text(value + "\n")
    (port / "gid_attrs/types" / str(index)).write_text("RoCE v2\n")
    (port / "gid_attrs/ndevs" / str(index)).write_text("eth9\n")
    return tmp_path


@pytest.mark.parametrize("index", [0, 12, 255])
def test_full_256_slot_table(tmp_path: Path, index: int) -> None:
    """A real port has 256 slots; two-digit and three-digit indexes sort after '2' in a
    glob. Index 0 is legitimate when the table really says so."""
    root = _tree_with_match_at(tmp_path, index)
    done = run_snippet(root, "10.1.2.3", "eth9", ["rocep1s0f0"])
    assert (done.returncode, done.stdout) == (0, f"index={index}\n"), done.stderr
    res = resolve_node(read_snapshot(DirSource(root)), "10.1.2.3", ["rocep1s0f0"], "eth9")
    assert res.gid_index == index


def test_uppercase_gid_matches_in_both(tmp_path: Path) -> None:
    root = _tree_with_match_at(tmp_path, 5, slots=8)
    gid_file = root / "class/infiniband/rocep1s0f0/ports/1/gids/5"
    gid_file.write_text(gid_file.read_text().upper())
    done = run_snippet(root, "10.1.2.3", "eth9", ["rocep1s0f0"])
    assert done.stdout == "index=5\n"
    res = resolve_node(read_snapshot(DirSource(root)), "10.1.2.3", ["rocep1s0f0"], "eth9")
    assert res.gid_index == 5


def test_hostile_names_are_quoted(tmp_path: Path) -> None:
    done = run_snippet(tmp_path, "10.1.2.3", "eth9", ["x'; touch pwned; '"])
    assert done.returncode == 1 and "no_device" in done.stderr
    assert not (Path.cwd() / "pwned").exists()


def test_node_snippet_for_the_flagship_and_none_for_socket() -> None:
    flagship = load_recipe(ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml")
    head = flagship.head
    snippet = node_gid_snippet(flagship, head)
    assert snippet is not None
    assert "deskside_gid_index 0000:0000:0000:0000:0000:ffff:c0a8:6401 enp1s0f0np0" in snippet
    assert "c0a8:6401 enp1s0f0np0 rocep1s0f0) ||" in snippet
    assert snippet.rstrip().endswith("export NCCL_IB_GID_INDEX")
    local = load_recipe(ROOT / "recipes" / "local-tiny.yaml")
    assert node_gid_snippet(local, local.head) is None
