"""The record store's one reader and one writer, on real files: a record is read only when
it is a regular file of its size, not through a link, of bounded JSON depth and of its
model's types; anything else is a clear refusal (what, where, what to do) within a second,
never a traceback and never a hang."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from deskside.layout import NodeLayout
from deskside.records.guard import GuardRecord
from deskside.records.looks import append_look_line, look_lines
from deskside.records.node import NodeState, read_state, write_state
from deskside.records.node_files import read_guard, read_survive, write_guard, write_survive
from deskside.records.read import MAX_DEPTH, BadState, nesting, read_here, read_on_node
from deskside.records.replica_set import SetRecord, load_set, save_set
from deskside.records.run import MAX_RUN_BYTES, RunRecord, load_run, save_run
from deskside.records.survive import SurviveRecord
from deskside.records.where import looks_file, run_file, set_file
from deskside.records.write import record_bytes, write_here
from deskside.safefs import WriteRefused
from deskside.transport.base import Result
from deskside.transport.fake import FakeTransport
from deskside.transport.local import LocalTransport

from ..monitor_stub import node_state, run_record

NAME = "store-run"
GIB = 1 << 30
QUICK = 2.0  # seconds a refusal may take (a FIFO must not block the reader)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("DESKSIDE_HOME", str(home))
    return home


def refused(call: object, *fragments: str) -> BadState:
    """`call()` refuses with every fragment in its message, quickly, with a hint."""
    t0 = time.monotonic()
    with pytest.raises(BadState) as info:
        call()  # type: ignore[operator]
    assert time.monotonic() - t0 < QUICK
    for fragment in fragments:
        assert fragment in info.value.message, info.value.message
    assert info.value.hint and info.value.exit_code == 2
    return info.value


def state(recipe_dir: str) -> NodeState:
    tag, log = f"{NAME}/node0/20260101000000/engine", f"{recipe_dir}/logs/engine.log"
    return node_state(NAME, pid=4321, pid_start=99, run_tag=tag, log=log)


# -- a run record on this machine


def test_a_run_record_round_trips_private(home: Path) -> None:
    run = run_record(NAME, "http://127.0.0.1:9")
    assert load_run(NAME) is None
    save_run(run)
    assert load_run(NAME) == run
    assert stat.S_IMODE(run_file(NAME).stat().st_mode) == 0o600
    assert stat.S_IMODE(run_file(NAME).parent.stat().st_mode) == 0o700


def test_a_link_at_the_record_is_refused_even_to_a_good_record(home: Path) -> None:
    good = home.parent / "elsewhere.json"
    good.write_bytes(record_bytes(run_record(NAME, "http://127.0.0.1:9")))
    run_file(NAME).parent.mkdir(parents=True)
    run_file(NAME).symlink_to(good)
    refused(lambda: load_run(NAME), "is a link", "not a regular file", str(run_file(NAME)))


def test_a_link_to_dev_zero_is_refused(home: Path) -> None:
    run_file(NAME).parent.mkdir(parents=True)
    run_file(NAME).symlink_to("/dev/zero")
    refused(lambda: load_run(NAME), "is a link (to /dev/zero), not a regular file")


def test_a_linked_run_folder_is_refused(home: Path) -> None:
    elsewhere = home.parent / "planted"
    elsewhere.mkdir()
    (elsewhere / "run.json").write_bytes(record_bytes(run_record(NAME, "http://127.0.0.1:9")))
    (home / "runs").mkdir(parents=True)
    (home / "runs" / NAME).symlink_to(elsewhere)
    refused(lambda: load_run(NAME), f"{home / 'runs' / NAME} is a link")


def test_a_fifo_is_refused_without_blocking(home: Path) -> None:
    run_file(NAME).parent.mkdir(parents=True)
    os.mkfifo(run_file(NAME))
    refused(lambda: load_run(NAME), "is a FIFO, not a regular file")


def test_a_device_and_a_folder_are_refused() -> None:
    refused(
        lambda: read_here(Path("/dev/zero"), RunRecord, 1024, "a run record", "hint"),
        "/dev/zero is a character device, not a regular file",
    )
    refused(
        lambda: read_here(Path("/"), RunRecord, 1024, "a run record", "hint"),
        "is a directory, not a regular file",
    )


def test_a_huge_sparse_record_is_refused_unread(home: Path) -> None:
    run_file(NAME).parent.mkdir(parents=True)
    with open(run_file(NAME), "wb") as f:
        f.truncate(3 << 30)
    refused(lambda: load_run(NAME), "holds 3,221,225,472 bytes, not a run record")
    assert MAX_RUN_BYTES < 3 << 30


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000 + "]" * 100_000, '{"a":' * 40 + "1" + "}" * 40],
    ids=["deep-array", "deep-object"],
)
def test_deep_json_is_refused_with_its_depth(home: Path, text: str) -> None:
    run_file(NAME).parent.mkdir(parents=True)
    run_file(NAME).write_text(text)
    refused(
        lambda: load_run(NAME),
        "is not a run record deskside wrote",
        f"nests deeper than {MAX_DEPTH} levels",
    )


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "is not a run record deskside wrote"),
        (b"\xff\xfe\x00garbage", "is not a run record deskside wrote"),
        (b"null", "is not a run record deskside wrote"),
        (b"[1, 2]", "is not a run record deskside wrote"),
        (b'{"recipe": 7}', "recipe: Input should be a valid string"),
    ],
    ids=["empty", "binary", "null", "list", "wrong-type"],
)
def test_what_is_not_a_run_record_is_refused(home: Path, data: bytes, fragment: str) -> None:
    run_file(NAME).parent.mkdir(parents=True)
    run_file(NAME).write_bytes(data)
    refused(lambda: load_run(NAME), fragment)


def test_an_ill_typed_field_is_named(home: Path) -> None:
    run = run_record(NAME, "http://127.0.0.1:9").model_dump(mode="json")
    run["nodes"][0]["node_rank"] = "first"
    run_file(NAME).parent.mkdir(parents=True)
    run_file(NAME).write_text(json.dumps(run))
    refused(lambda: load_run(NAME), "nodes.0.node_rank: Input should be a valid integer")


def test_a_record_of_another_run_is_refused(home: Path) -> None:
    other = run_record("other", "http://127.0.0.1:9")
    run_file(NAME).parent.mkdir(parents=True)
    run_file(NAME).write_bytes(record_bytes(other))
    refused(lambda: load_run(NAME), "names recipe 'other'")


def test_nesting_skips_strings_and_stops_early() -> None:
    assert nesting(b'{"a": [1, {"b": "[[[{{{"}], "c": "\\"]]"}') == 3
    assert nesting(b"[" * 1_000_000) == MAX_DEPTH + 1
    t0 = time.monotonic()
    # an unterminated string of escaped quotes: one pass, not one per quote
    assert nesting(b'"' + b'\\"' * 500_000) == 0
    assert time.monotonic() - t0 < QUICK


def test_a_write_replaces_a_planted_link_and_leaves_its_target(home: Path) -> None:
    victim = home.parent / "victim"
    victim.write_text("untouched")
    run_file(NAME).parent.mkdir(parents=True)
    run_file(NAME).symlink_to(victim)
    run = run_record(NAME, "http://127.0.0.1:9")
    write_here(run_file(NAME), run)
    assert victim.read_text() == "untouched"
    assert not run_file(NAME).is_symlink() and load_run(NAME) == run


# -- a replica set's record: the same reader


def _set() -> SetRecord:
    return SetRecord(
        recipe="/r/rs.yaml",
        recipe_name="rs",
        runtime="local",
        groups=["a", "b"],
        proxy_url=None,
        started_at="2026-01-01T00:00:00Z",
    )


def test_a_set_record_round_trips_and_refuses_a_link_and_a_fifo(home: Path) -> None:
    save_set(_set())
    assert load_set("rs") == _set()
    assert stat.S_IMODE(set_file("rs").stat().st_mode) == 0o600
    good = home.parent / "rs.json"
    good.write_bytes(set_file("rs").read_bytes())
    set_file("rs").unlink()
    set_file("rs").symlink_to(good)
    refused(lambda: load_set("rs"), "is a link", "not a replica-set record")
    set_file("rs").unlink()
    os.mkfifo(set_file("rs"))
    refused(lambda: load_set("rs"), "is a FIFO, not a regular file")


def test_a_set_record_of_another_set_is_refused(home: Path) -> None:
    set_file("other").parent.mkdir(parents=True)
    set_file("other").write_bytes(record_bytes(_set()))
    refused(lambda: load_set("other"), "records 'rs', not 'other'")


# -- a node's records, through its Transport (here: this machine's)


def test_a_node_state_round_trips_through_a_transport(tmp_path: Path) -> None:
    layout = NodeLayout.at(str(tmp_path / "node"), NAME)
    t = LocalTransport()
    assert read_state(t, layout, NAME) is None
    write_state(t, layout, state(layout.recipe_dir))
    assert read_state(t, layout, NAME) == state(layout.recipe_dir)


def test_a_node_record_that_is_a_link_a_fifo_or_huge_is_refused(tmp_path: Path) -> None:
    layout = NodeLayout.at(str(tmp_path / "node"), NAME)
    Path(layout.recipe_dir).mkdir()
    path = Path(layout.state_file)
    t = LocalTransport()
    path.symlink_to("/dev/zero")
    error = refused(lambda: read_state(t, layout, NAME), "is a link")
    assert f"deskside down --forget {NAME}" in (error.hint or "")
    path.unlink()
    os.mkfifo(path)
    refused(lambda: read_state(t, layout, NAME), "is not a regular file")
    path.unlink()
    with open(path, "wb") as f:
        f.truncate(1 << 30)
    refused(lambda: read_state(t, layout, NAME), f"holds {1 << 30} bytes")
    path.unlink()
    path.write_bytes(b"\xff\xfe not text")
    refused(lambda: read_state(t, layout, NAME), "is not a state file deskside wrote")
    path.write_text("[" * 50 + "]" * 50)
    refused(lambda: read_state(t, layout, NAME), "nests deeper than")


def test_a_node_handing_back_too_much_is_refused() -> None:
    t = FakeTransport(default=lambda argv: Result(0, "x" * 100, ""))
    refused(
        lambda: read_on_node(t, "/r/state.json", NodeState, 10, "a state file", "hint"),
        "holds more than 10 bytes",
    )


def test_a_state_naming_paths_outside_its_node_is_refused(tmp_path: Path) -> None:
    layout = NodeLayout.at(str(tmp_path / "node"), NAME)
    t = LocalTransport()
    write_state(t, layout, state(layout.recipe_dir).model_copy(update={"log": "/etc/passwd"}))
    refused(lambda: read_state(t, layout, NAME), "its log '/etc/passwd' is not under")


def test_the_guard_and_watcher_records_round_trip_on_a_node(tmp_path: Path) -> None:
    t, folder = LocalTransport(), str(tmp_path / "node")
    assert read_guard(t, folder) is None and read_survive(t, folder) is None
    guard = GuardRecord(
        recipe=NAME,
        node="node0",
        at="2026-01-01T00:00:30+00:00",
        source="MemAvailable",
        available_bytes=3 * GIB,
        floor_bytes=5 * GIB,
        window_seconds=30,
        low_seconds=30,
        run_started_at="2026-01-01T00:00:00+00:00",
        stopped="process 1234",
        how="kill",
        ok=True,
    )
    survive = SurviveRecord(recipe=NAME, run_started_at="s", at=1.0, interval=5, state="READY")
    write_guard(t, folder, guard)
    write_survive(t, folder, survive)
    assert read_guard(t, folder) == guard and read_survive(t, folder) == survive
    (tmp_path / "node" / "guard.json").write_text('{"recipe": "x"}')
    refused(lambda: read_guard(t, folder), "is not a guard record deskside wrote")


# -- the series of looks


def test_looks_append_read_and_skip_what_cannot_be_a_look(home: Path) -> None:
    append_look_line(NAME, '{"at": 1}')
    append_look_line(NAME, '{"at": 2}\n')
    with open(looks_file(NAME), "a") as f:
        f.write("[1, 2]\n" + '{"deep":' + "[" * 100 + "]" * 100 + "}\n" + '{"at": 3')
    assert look_lines(NAME) == ['{"at": 1}', '{"at": 2}', '{"at": 3']
    assert stat.S_IMODE(looks_file(NAME).stat().st_mode) == 0o600


def test_a_long_series_keeps_its_newer_half(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("deskside.records.looks.MAX_LOOKS_BYTES", 100)
    for i in range(20):
        append_look_line(NAME, f'{{"at": {i}}}')
    kept = [int(line.split(":")[1].strip(" }")) for line in look_lines(NAME)]
    assert kept[-1] == 19 and len(kept) < 20 and kept == sorted(kept)
    assert looks_file(NAME).stat().st_size < 200


def test_a_fifo_or_link_series_is_refused_without_blocking(home: Path) -> None:
    looks_file(NAME).parent.mkdir(parents=True)
    os.mkfifo(looks_file(NAME))
    t0 = time.monotonic()
    assert look_lines(NAME) == []
    with pytest.raises(WriteRefused, match="not a regular file"):
        append_look_line(NAME, '{"at": 1}')
    looks_file(NAME).unlink()
    victim = home.parent / "victim"
    victim.write_text("untouched\n")
    looks_file(NAME).symlink_to(victim)
    assert look_lines(NAME) == []
    with pytest.raises(WriteRefused, match="is a link"):
        append_look_line(NAME, '{"at": 1}')
    assert victim.read_text() == "untouched\n"
    assert time.monotonic() - t0 < QUICK


def test_a_series_in_a_linked_run_folder_is_neither_read_nor_written(home: Path) -> None:
    elsewhere = home.parent / "planted"
    elsewhere.mkdir()
    (elsewhere / "looks.jsonl").write_text('{"at": 1}\n')
    (home / "runs").mkdir(parents=True)
    (home / "runs" / NAME).symlink_to(elsewhere)
    assert look_lines(NAME) == []
    with pytest.raises(WriteRefused, match="is a link"):
        append_look_line(NAME, '{"at": 2}')
    assert (elsewhere / "looks.jsonl").read_text() == '{"at": 1}\n'


def test_forget_and_down_never_delete_through_a_linked_node_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node folder replaced by a link to elsewhere: `down --forget` and `down` remove the
    link's own records at most, never a state.json the link leads to."""
    from deskside.layout import NodeLayout
    from deskside.records.node import remove_state
    from deskside.records.run import forget
    from deskside.records.where import run_dir
    from deskside.transport.local import LocalTransport

    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path / "home"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "state.json").write_text("{}")
    base = run_dir("lnk")
    (base / "nodes").mkdir(parents=True)
    (base / "nodes" / "n0").symlink_to(elsewhere)
    (base / "run.json").write_text("{}")
    removed = forget("lnk")
    assert removed == [str(base / "run.json")]
    assert (elsewhere / "state.json").exists()
    r = remove_state(LocalTransport(), NodeLayout.at(str(base / "nodes" / "n0"), "lnk"))
    assert r.rc == 3 and "is a link" in r.stderr
    assert (elsewhere / "state.json").exists()
