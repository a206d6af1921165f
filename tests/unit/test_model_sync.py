from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from deskside.facts.base import FactError, Unread, gather
from deskside.facts.model_folder import parse_snapshot, snapshot
from deskside.models import node_copy, node_disk
from deskside.models.check import NodeModel, differences, node_model
from deskside.models.manifest import manifest_of
from deskside.models.node_files import RECORD_DIR
from deskside.models.sync import node_program, plan_copy
from deskside.transport.local import LocalTransport

from .model_cache import REVISION, flip_byte, make_entry

FILES = {
    "config.json": b"{}",
    "model-1.safetensors": os.urandom(300_000),
    "model-2.safetensors": os.urandom(200_000),
    "sub/tok.json": b"tok",
}


def _entry(snap: Path) -> str:
    return str(snap.parent.parent)


def _copy(head: dict[str, Any], head_snap: Path, worker_entry: str) -> dict[str, Any]:
    """One sync, in this process: the worker's state, the plan, receiver and sender on
    127.0.0.1."""
    state = node_copy.state({"entry": worker_entry, "revision": REVISION})
    plan = plan_copy(head, state)
    refs = node_copy.state({"entry": _entry(head_snap), "revision": REVISION})["refs"]
    progress = os.path.join(worker_entry, ".deskside", "sync.progress")
    recv = node_copy.Receiver(
        {
            "entry": worker_entry,
            "revision": REVISION,
            "token": "t0ken",
            "listen": "127.0.0.1",
            "need": plan.need,
            "files": head["files"],
            "refs": refs,
            "progress": progress,
        }
    )
    answer: dict[str, Any] = {}
    th = threading.Thread(target=lambda: answer.update(recv.run()))
    th.start()
    sent: dict[str, Any] = {}
    if plan.need:
        while not os.path.exists(progress):
            pass
        port = int(Path(progress).read_text().split("\n")[0].split("=")[1])
        sent = node_copy.send(
            {
                "entry": _entry(head_snap),
                "revision": REVISION,
                "token": "t0ken",
                "address": "127.0.0.1",
                "port": port,
                "streams": 3,
                "items": plan.need,
            }
        )
    th.join()
    return {"plan": plan, "received": answer, "sent": sent}


def test_plan_skips_files_whose_hash_matches_and_counts_partials() -> None:
    head = {
        "files": [
            {"path": "a", "size": 10, "sha256": "a" * 64, "blob": "ba"},
            {"path": "b", "size": 20, "sha256": "b" * 64, "blob": "bb"},
            {"path": "c", "size": 30, "sha256": "c" * 64, "blob": "bc"},
            {"path": "c2", "size": 30, "sha256": "c" * 64, "blob": "bc"},
        ]
    }
    worker = {
        "present": True,
        "manifest": {
            "files": [
                {"path": "a", "size": 10, "sha256": "a" * 64, "blob": "ba"},
                {"path": "b", "size": 20, "sha256": "0" * 64, "blob": "bb"},
                {"path": "z", "size": 1, "sha256": "z" * 64, "blob": "bz"},
            ]
        },
        "partials": {"bc": 12},
    }
    plan = plan_copy(head, worker)
    assert [f["blob"] for f in plan.need] == ["bb", "bc"]  # a shared blob travels once
    assert plan.skipped == 1 and plan.extra == ["z"]
    assert plan.to_receive == 20 + 18


def test_copy_makes_the_hub_layout_then_copies_nothing_then_repairs(tmp_path: Path) -> None:
    head_snap = make_entry(tmp_path / "head", FILES)
    head, _ = manifest_of(head_snap)
    worker_entry = str(tmp_path / "worker" / "hub" / "models--org--tiny-model")
    first = _copy(head, head_snap, worker_entry)
    assert first["received"]["files"] == 4 and not first["sent"]["failed"]
    wsnap = Path(worker_entry) / "snapshots" / REVISION
    for path, data in FILES.items():
        link = wsnap / path
        assert link.is_symlink() and os.readlink(link).startswith("../")
        assert "/blobs/" in os.readlink(link) and link.read_bytes() == data
    assert manifest_of(wsnap)[0]["files"] == head["files"]
    assert manifest_of(wsnap)[1] == 0  # the receiver recorded what it checked
    assert (Path(worker_entry) / "refs" / "main").read_text() == REVISION  # as on the head
    assert first["received"]["refs"] == 1 and first["received"]["errors"] == []
    second = _copy(head, head_snap, worker_entry)
    assert second["plan"].need == [] and second["plan"].skipped == 4
    flip_byte(Path(os.path.realpath(wsnap / "model-1.safetensors")), 7)
    third = _copy(head, head_snap, worker_entry)
    assert [f["path"] for f in third["plan"].need] == ["model-1.safetensors"]
    assert (wsnap / "model-1.safetensors").read_bytes() == FILES["model-1.safetensors"]


def test_a_partial_file_continues_and_a_wrong_one_is_sent_again(tmp_path: Path) -> None:
    head_snap = make_entry(tmp_path / "head", FILES)
    head, _ = manifest_of(head_snap)
    worker_entry = tmp_path / "worker" / "hub" / "models--org--tiny-model"
    blobs = worker_entry / "blobs"
    blobs.mkdir(parents=True)
    data1, data2 = FILES["model-1.safetensors"], FILES["model-2.safetensors"]
    sha1, sha2 = (hashlib.sha256(d).hexdigest() for d in (data1, data2))
    (blobs / f".{sha1}.deskside-partial").write_bytes(data1[:100_000])  # a good start
    (blobs / f".{sha2}.deskside-partial").write_bytes(b"\0" * 50_000)  # a wrong start
    got = _copy(head, head_snap, str(worker_entry))
    assert got["plan"].to_receive == sum(map(len, FILES.values())) - 100_000 - 50_000
    assert got["received"]["bad"] == [sha2] and got["received"]["missing"] == []
    assert (blobs / sha1).read_bytes() == data1 and (blobs / sha2).read_bytes() == data2
    assert not list(blobs.glob(".*partial"))


def test_writes_land_whole_with_and_without_o_direct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole blocks go with O_DIRECT (where the file system takes it), a file's odd end and
    an odd starting offset without; the bytes are the same either way."""
    data = os.urandom(2 * node_copy.CHUNK + 5000)
    for direct in (node_disk.DIRECT, 0):
        monkeypatch.setattr(node_disk, "DIRECT", direct)
        for start in (0, 4096, 777):
            path = tmp_path / f"f-{direct}-{start}"
            path.write_bytes(data[:start])
            fd = os.open(path, os.O_RDWR)
            node_disk.go_direct(fd)
            land = node_disk.Landing()
            pos = start
            while pos < len(data):
                buf = land.buffer()
                n = min(node_copy.CHUNK, len(data) - pos)
                buf[:n] = data[pos : pos + n]
                land.write(fd, buf, n, pos)
                pos += n
            land.drain()
            land.close()
            os.close(fd)
            assert path.read_bytes() == data, (direct, start)


def test_a_disk_error_on_arrival_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, view: memoryview, pos: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(node_disk, "put", full)
    monkeypatch.setattr(node_copy, "IDLE_SECONDS", 4.0)
    head_snap = make_entry(tmp_path / "head", {"model.safetensors": os.urandom(100_000)})
    head, _ = manifest_of(head_snap)
    got = _copy(head, head_snap, str(tmp_path / "w" / "hub" / "models--org--tiny-model"))
    assert got["received"]["missing"] and got["sent"]["failed"]
    assert any(
        e.startswith("model.safetensors: ") and "No space left" in e
        for e in got["received"]["errors"]
    ), got["received"]


def test_a_wrong_token_is_refused(tmp_path: Path) -> None:
    head_snap = make_entry(tmp_path / "head", {"a.bin": b"a" * 10})
    head, _ = manifest_of(head_snap)
    worker_entry = str(tmp_path / "w" / "hub" / "models--org--tiny-model")
    recv = node_copy.Receiver(
        {
            "entry": worker_entry,
            "revision": REVISION,
            "token": "right",
            "listen": "127.0.0.1",
            "need": head["files"],
            "files": head["files"],
            "progress": os.path.join(worker_entry, "p"),
        }
    )
    node_copy.IDLE_SECONDS, old = 2.0, node_copy.IDLE_SECONDS
    try:
        th = threading.Thread(target=recv.run)
        th.start()
        while not os.path.exists(os.path.join(worker_entry, "p")):
            pass
        port = int(Path(worker_entry, "p").read_text().split("\n")[0].split("=")[1])
        cfg = {"entry": _entry(head_snap), "revision": REVISION, "token": "wrong"}
        cfg |= {"address": "127.0.0.1", "port": port, "streams": 1, "items": head["files"]}
        sent = node_copy.send(cfg)
        th.join()
    finally:
        node_copy.IDLE_SECONDS = old
    assert sent["sent_bytes"] == 0 and sent["failed"]
    assert not (Path(worker_entry) / "blobs" / head["files"][0]["blob"]).exists()


def test_the_node_program_runs_with_a_plain_python(tmp_path: Path) -> None:
    snap = make_entry(tmp_path, FILES)
    r = subprocess.run(
        [sys.executable, "-I", "-c", node_program(), "state"],
        input=json.dumps({"entry": _entry(snap), "revision": REVISION}),
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    out = json.loads(r.stdout)
    assert out["present"] and out["hashed"] == 4 and out["free_bytes"] > 0


def test_the_quick_fact_reads_the_record(tmp_path: Path) -> None:
    head_snap = make_entry(tmp_path / "h", FILES)
    work_snap = make_entry(tmp_path / "w", FILES)

    def fact(snap: Path) -> NodeModel:
        wanted = snapshot(_entry(snap), REVISION, RECORD_DIR)
        got = gather(LocalTransport(), wanted).result(wanted)
        assert not isinstance(got, Unread), got
        return node_model(got)

    head = fact(head_snap)
    assert head.present
    assert all(sha is None for _, sha in head.files.values())  # never hashed yet
    manifest_of(head_snap)
    manifest_of(work_snap)
    head, work = fact(head_snap), fact(work_snap)
    assert differences(head, work) == {}
    flip_byte(Path(os.path.realpath(work_snap / "config.json")))
    (work_snap / "sub" / "tok.json").unlink()
    work = fact(work_snap)
    assert differences(head, work) == {
        "changed since hashed": ["config.json"],
        "missing": ["sub/tok.json"],
    }
    absent = fact(tmp_path / "none" / "models--x--y" / "snapshots" / "r")
    assert not absent.present
    with pytest.raises(FactError):
        parse_snapshot("")


def _receiver(tmp_path: Path, need: list[dict[str, Any]]) -> tuple[node_copy.Receiver, int]:
    entry = str(tmp_path / "worker" / "hub" / "models--org--tiny-model")
    progress = os.path.join(entry, ".deskside", "sync.progress")
    recv = node_copy.Receiver(
        {
            "entry": entry,
            "revision": REVISION,
            "token": "t0ken",
            "listen": "127.0.0.1",
            "need": need,
            "files": [],
            "refs": [],
            "progress": progress,
        }
    )
    return recv, 0


def _run_in_thread(recv: node_copy.Receiver) -> tuple[threading.Thread, dict[str, Any], int]:
    answer: dict[str, Any] = {}
    th = threading.Thread(target=lambda: answer.update(recv.run()), daemon=True)
    th.start()
    progress = recv.cfg["progress"]
    deadline = time.monotonic() + 10
    while not os.path.exists(progress) and time.monotonic() < deadline:
        time.sleep(0.01)
    port = int(Path(progress).read_text().split("\n")[0].split("=")[1])
    return th, answer, port


def test_a_peer_without_the_token_cannot_keep_the_receiver_alive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines that trickle in without the token neither authenticate nor reset the idle
    time; a few hundred such connections neither crash the receiver nor delay its end."""
    monkeypatch.setattr(node_copy, "IDLE_SECONDS", 4.0)
    monkeypatch.setattr(node_copy, "AUTH_SECONDS", 1.0)
    need = [{"blob": "b1", "size": 10, "sha256": "0" * 64, "path": "f"}]
    recv, _ = _receiver(tmp_path, need)
    th, answer, port = _run_in_thread(recv)
    t0 = time.monotonic()
    idle: list[socket.socket] = []
    for _ in range(300):  # past the listen backlog some are refused: that is fine
        with contextlib.suppress(OSError):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=1))
    assert len(idle) >= node_copy.MAX_CONNECTIONS
    stop = threading.Event()

    def drip() -> None:  # a line without the token, again and again, on new connections
        while not stop.is_set():
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(b"x\n")
            time.sleep(0.2)

    threading.Thread(target=drip, daemon=True).start()
    th.join(timeout=20)
    stop.set()
    for s in idle:
        s.close()
    assert not th.is_alive(), "the receiver is still waiting"
    assert time.monotonic() - t0 < 4.0 + 1.0 + 5.0 + 3.0
    assert answer["files"] == 0 and answer["missing"] == ["b1"]


@pytest.mark.parametrize("name", [".", "..", ".hidden", "a/b", "", "x" * 129])
def test_blob_names_are_plain_file_names(name: str) -> None:
    assert not node_copy.BLOB.fullmatch(name)
