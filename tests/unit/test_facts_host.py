"""The smaller host facts: network (interfaces, listening ports, port holders), disk (space,
what a folder holds), access (the login, a file's mode), programs and the clock. Each
parser on recorded and hostile outputs, each fact once for real on this machine."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deskside.facts.access import FileAccess, file_access, login, parse_login
from deskside.facts.base import FactError, Unread, gather
from deskside.facts.clock import NodeClock, clock, parse_clock, skew
from deskside.facts.disk import disk_space, held_bytes, parse_held
from deskside.facts.network import (
    UNNAMED,
    interface_for_address,
    links,
    listening,
    parse_holders,
    parse_links,
    parse_listening,
    port_holders,
)
from deskside.facts.programs import Docker, docker, parse_docker, programs
from deskside.transport.local import LocalTransport

LOCAL = LocalTransport()

# -- network


def test_links_of_a_recorded_ip_addr() -> None:
    text = json.dumps(
        [
            {
                "ifname": "fpa",
                "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
                "mtu": 9000,
                "operstate": "UP",
                "addr_info": [
                    {"family": "inet", "local": "10.99.7.1", "prefixlen": 24},
                    {"family": "inet6", "local": "fe80::1", "prefixlen": 64},
                ],
            },
            {"ifname": "lo", "flags": ["LOOPBACK", "UP", "LOWER_UP"], "mtu": 65536,
             "operstate": "UNKNOWN", "addr_info": []},
            {"ifname": "down0", "flags": ["NO-CARRIER", "UP"], "mtu": 1500, "operstate": "DOWN"},
            {"not": "an interface"},
            {"ifname": "odd", "mtu": True, "flags": "UP", "addr_info": {"family": "inet"}},
        ]
    )  # fmt: skip
    got = parse_links(text)
    assert set(got) == {"fpa", "lo", "down0", "odd"}
    assert got["fpa"].ipv4 == ("10.99.7.1/24",) and got["fpa"].mtu == 9000 and got["fpa"].up
    assert got["lo"].up  # UNKNOWN with LOWER_UP
    assert not got["down0"].up
    assert got["odd"].mtu is None and got["odd"].flags == () and got["odd"].ipv4 == ()
    assert interface_for_address(got, "10.99.7.1") == "fpa"
    assert interface_for_address(got, "10.99.7.10") is None


@pytest.mark.parametrize("bad", ["{", '{"a": 1}', "[" * 100_000, "\x00"])
def test_links_refuse_what_is_not_ip_json(bad: str) -> None:
    with pytest.raises(FactError):
        parse_links(bad)


def test_links_and_listening_here() -> None:
    every, lo, gone = links(), links("lo"), links("no-such-if0")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        got = gather(LOCAL, every, lo, gone, listening(), port_holders([port, 1]))
        assert port in got.get(listening())
        holders = got.get(port_holders([]))
    assert interface_for_address(got.get(every), "127.0.0.1") == "lo"
    assert set(got.get(lo)) == {"lo"}
    assert isinstance(got.result(gone), Unread)
    assert 1 not in holders  # nobody listens there
    if holders:  # ss is installed: it names this process
        assert f"pid {os.getpid()}" in holders[port]


def test_listening_and_holders_of_recorded_outputs() -> None:
    assert parse_listening("0100007F:1F90\n00000000:0016\njunk\n0:FFFFFF\n") == {8080, 22}
    holders = parse_holders(
        'port 8888 LISTEN 0 4096 0.0.0.0:8888 0.0.0.0:* users:(("python3",pid=4100,fd=27))\n'
        "port 4000 LISTEN 0 4096 0.0.0.0:4000 0.0.0.0:*\n"
        "junk\nport x y\n"
    )
    assert holders == {8888: "python3 pid 4100", 4000: UNNAMED}


# -- disk


def test_disk_space_of_folders_that_exist_and_do_not(tmp_path: Path) -> None:
    later = str(tmp_path / "a" / "b")
    fact = disk_space(later, str(tmp_path))
    got = gather(LOCAL, fact).get(fact)
    st_ = os.statvfs(tmp_path)
    assert got[later].existing == str(tmp_path) and got[later].writable
    free = got[str(tmp_path)].free_bytes
    assert free is not None and abs(free - st_.f_bavail * st_.f_frsize) < 64 << 20
    # a folder with spaces and shell characters stays one folder
    odd = tmp_path / "a b $(x) 'q'"
    odd.mkdir()
    fact = disk_space(str(odd))
    assert gather(LOCAL, fact).get(fact)[str(odd)].existing == str(odd)


def test_disk_space_refuses_an_answer_short_of_a_folder() -> None:
    fact = disk_space("/a", "/b")
    with pytest.raises(FactError, match="no answer for /b"):
        fact.parse("0 writable=1 free_kib=10 existing=/\n9 writable=1 free_kib=1 existing=/\n")
    ok = fact.parse("1 writable=0 free_kib=junk existing=/\n0 writable=1 free_kib=4 existing=/\n")
    assert ok["/a"].free_bytes == 4096 and ok["/b"].free_bytes is None and not ok["/b"].writable


def test_held_bytes(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 100_000)
    fact, none = held_bytes(str(tmp_path)), held_bytes(str(tmp_path / "nothing"))
    got = gather(LOCAL, fact, none)
    assert got.get(fact) >= 100_000 and got.get(none) == 0
    for bad in ("", "12 34", "-1", "9" * 40):
        with pytest.raises(FactError):
            parse_held(bad)


# -- access and programs


def test_login_and_a_file_here(tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_text("k\n")
    secret.chmod(0o640)
    me, key, gone = login(), file_access(str(secret)), file_access(str(tmp_path / "none"))
    got = gather(LOCAL, me, key, gone)
    assert got.get(me).uid == os.getuid()
    assert got.get(key) == FileAccess(str(secret), 0o640, os.getuid())
    assert got.get(key).others_may_read
    assert got.get(gone) == FileAccess(str(tmp_path / "none"))


@pytest.mark.parametrize("bad", ["", "uid=", "uid=-1", "uid=1e3", "uid=" + "9" * 20])
def test_login_without_a_uid_is_refused(bad: str) -> None:
    with pytest.raises(FactError):
        parse_login(bad)


def test_a_file_mode_that_is_not_octal_is_refused() -> None:
    with pytest.raises(FactError):
        file_access("/k").parse("mode=999 owner=0\n")
    assert parse_login("uid=1000 sudo=1 systemd=1\nuid=0\n").sudo


def test_programs_and_docker_here() -> None:
    found, engine = programs(["sh", "no-such-program-x", "a;b"]), docker("no-such-compose")
    got = gather(LOCAL, found, engine)
    assert got.get(found) == {"sh"}
    assert got.get(engine).compose is None
    assert parse_docker("docker=27.3.1\ncompose=2.29.7\n") == Docker("27.3.1", "2.29.7")
    assert parse_docker("docker=\ncompose=\x1b[31m\n") == Docker(None, None)
    assert programs(["g++"]).parse("g++\nforged\n") == {"g++"}  # only what was asked


# -- clock


def test_clock_here_and_its_skew() -> None:
    before = time.time()
    got = gather(LOCAL, clock()).get(clock())
    after = time.time()
    assert before - 1 <= got.time <= after + 1
    offset, error = skew(got, before, after)
    assert abs(offset) <= error + 1


def test_clock_of_recorded_outputs() -> None:
    assert parse_clock("time=1767323045.123\nsynced=yes\n") == NodeClock(1767323045.123, True)
    assert parse_clock("time=1767323045.N\nsynced=no\n") == NodeClock(1767323045.0, False)
    assert parse_clock("time=5\nsynced=\n").synced is None
    for bad in ("", "time=", "time=nan", "time=inf", "time=abc"):
        with pytest.raises(FactError):
            parse_clock(bad)


@given(st.text(max_size=300))
def test_any_clock_text_parses_or_is_refused(text: str) -> None:
    try:
        got = parse_clock(text)
    except FactError:
        return
    assert got.time == got.time


# -- model folder


def test_a_snapshot_listing_with_hostile_lines() -> None:
    from deskside.facts.model_folder import parse_snapshot

    text = (
        "snapshot=present\n"
        "link\tconfig.json\t../../blobs/abc\n"
        "link\tsub/tok.json\t../../../blobs/def\n"
        "link\tevil.json\t/etc/passwd\n"
        "file\tconfig.json\t10\t1700000000.5\t1700000001.25\t42\n"
        "file\tsub/tok.json\t20\t1700000000\t1700000000\t43\n"
        "file\tevil.json\t30\t1\t1\t44\n"
        "file\tbad.json\tx\t1\t1\t1\n"  # not a size: skipped
        "file\ttime.json\t1\t-5\t1\t1\n"  # not a time: skipped
        "record\t" + "[" * 10_000 + "\n"  # nested beyond reason: no record
        "junk\n"
    )
    got = parse_snapshot(text)
    assert got.present and got.foreign == ["evil.json"]
    assert got.files == {
        "config.json": (10, 1_700_000_000_500_000_000, 1_700_000_001_250_000_000, 42),
        "sub/tok.json": (20, 1_700_000_000 * 10**9, 1_700_000_000 * 10**9, 43),
    }
    assert got.record == {}
    record = 'record\t{"files": {"config.json": {"sha256": "ab"}}}\n'
    assert parse_snapshot("snapshot=present\n" + record).record == {"config.json": {"sha256": "ab"}}
    assert parse_snapshot('snapshot=present\nrecord\t{"files": []}\n').record == {}
    assert not parse_snapshot("snapshot=absent\n").present
    with pytest.raises(FactError):
        parse_snapshot("what is this\n")
