"""Probe commands and their pure parsers, on outputs recorded from iputils ping over a veth
pair between two network namespaces, the all-reduce rank program, and perftest."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from deskside.fabric import probe
from deskside.transport.base import Result

PING_OK = """PING 10.99.7.2 (10.99.7.2) from 10.99.7.1 fpa: 8972(9000) bytes of data.
8980 bytes from 10.99.7.2: icmp_seq=1 ttl=64 time=0.055 ms
8980 bytes from 10.99.7.2: icmp_seq=2 ttl=64 time=0.062 ms
8980 bytes from 10.99.7.2: icmp_seq=3 ttl=64 time=0.067 ms

--- 10.99.7.2 ping statistics ---
3 packets transmitted, 3 received, 0% packet loss, time 407ms
rtt min/avg/max/mdev = 0.055/0.061/0.067/0.005 ms
"""
# The sender's own MTU is 1500: the kernel refuses the 9000-byte packet.
PING_TOO_BIG_OUT = """PING 10.99.7.1 (10.99.7.1) from 10.99.7.2 fpb: 8972(9000) bytes of data.

--- 10.99.7.1 ping statistics ---
3 packets transmitted, 0 received, +3 errors, 100% packet loss, time 412ms

"""
PING_TOO_BIG_ERR = "ping: local error: message too long, mtu=1500\n" * 3
# The receiver's MTU is 1500: the frames are dropped silently.
PING_LOST = """PING 10.99.7.2 (10.99.7.2) from 10.99.7.1 fpa: 8972(9000) bytes of data.

--- 10.99.7.2 ping statistics ---
3 packets transmitted, 0 received, 100% packet loss, time 2004ms

"""
PING_PARTIAL = """--- 10.0.0.2 ping statistics ---
3 packets transmitted, 2 received, 33.3333% packet loss, time 402ms
rtt min/avg/max/mdev = 0.051/0.052/0.053/0.001 ms
"""

IB_WRITE_BW = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : rocep1s0f0
 Number of qps   : 4\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 Mtu             : 4096[B]
 Link type       : Ethernet
 GID index       : 7
---------------------------------------------------------------------------------------
 local address: LID 0000 QPN 0x0108 PSN 0x3a6b8c RKey 0x1fe4ed VAddr 0x00ffff8c3a1000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:100:01
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      1706489          0.00               93.19  \t\t   0.177738
---------------------------------------------------------------------------------------
"""


def test_ping_command_sends_full_mtu_frames_with_df() -> None:
    argv = probe.ping_command("fpa", "10.99.7.2", 9000)
    assert argv[:6] == ["ping", "-n", "-M", "do", "-s", "8972"]
    assert argv[-3:] == ["-I", "fpa", "10.99.7.2"]
    assert "-c" in argv and argv[argv.index("-c") + 1] == "3"
    assert probe.ping_command("x", "y", 1500)[5] == "1472"


def test_parse_ping_ok() -> None:
    r = probe.parse_ping(Result(0, PING_OK, ""))
    assert r.ok and (r.transmitted, r.received, r.loss_percent) == (3, 3, 0.0)
    assert r.rtt_avg_ms == 0.061 and not r.too_big
    assert r.message == "3/3 replies, avg 0.061 ms"


def test_parse_ping_local_mtu_too_small() -> None:
    r = probe.parse_ping(Result(1, PING_TOO_BIG_OUT, PING_TOO_BIG_ERR))
    assert not r.ok and r.too_big and r.path_mtu == 1500 and r.received == 0
    assert r.message == "packet larger than the path MTU (mtu 1500)"


def test_parse_ping_silent_drop_and_partial() -> None:
    lost = probe.parse_ping(Result(1, PING_LOST, ""))
    assert not lost.ok and not lost.too_big and lost.loss_percent == 100.0
    assert lost.message == "0/3 replies (100% loss)"
    partial = probe.parse_ping(Result(1, PING_PARTIAL, ""))
    assert (
        not partial.ok and partial.received == 2 and partial.loss_percent == pytest.approx(33.3333)
    )


def test_parse_ping_error_without_statistics() -> None:
    r = probe.parse_ping(Result(2, "", "ping: SO_BINDTODEVICE nosuch: No such device\n"))
    assert not r.ok and r.transmitted is None
    assert r.message == "ping: SO_BINDTODEVICE nosuch: No such device"
    missing = probe.parse_ping(Result(127, "", ""))
    assert missing.message == "ping failed (exit 127)"


@pytest.mark.parametrize(
    ("rc", "out", "gbps"),
    [(0, "10000\n", 10.0), (0, "200000", 200.0), (0, "-1\n", None), (1, "", None), (0, "x", None)],
)
def test_parse_speed(rc: int, out: str, gbps: float | None) -> None:
    assert probe.parse_speed_gbps(Result(rc, out, "")) == gbps


def test_interface_for_address() -> None:
    links = probe.parse_addr(
        Result(
            0,
            json.dumps(
                [
                    {"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1"}]},
                    {"ifname": "eth1", "addr_info": [{"family": "inet", "local": "10.0.0.2"}]},
                ]
            ),
            "",
        )
    )
    assert probe.interface_for_address(links, "10.0.0.2") == "eth1"
    assert probe.interface_for_address(links, "10.0.0.3") is None
    assert probe.parse_addr(Result(1, "", "ip: not found")) == {}


def test_bus_bandwidth_follows_nccl_tests() -> None:
    alg, bus = probe.bus_bandwidth_gbps(64 * 2**20, 0.1, 2)
    assert alg == pytest.approx(5.368709, rel=1e-6) and bus == pytest.approx(alg)
    alg8, bus8 = probe.bus_bandwidth_gbps(10**9, 1.0, 8)
    assert (alg8, bus8) == (8.0, pytest.approx(14.0))
    assert probe.bus_bandwidth_gbps(1, 0.0, 2) == (0.0, 0.0)


def test_allreduce_command_ships_the_rank_program() -> None:
    argv = probe.allreduce_command(
        "docker exec vllm python3",
        backend="gloo",
        master_addr="10.0.0.1",
        master_port=25000,
        rank=1,
        world_size=2,
        size_bytes=1024,
        iterations=3,
        warmup=1,
        timeout=30,
    )
    assert argv[:5] == ["docker", "exec", "vllm", "python3", "-c"]
    assert "dist.init_process_group" in argv[5]
    assert argv[argv.index("--rank") + 1] == "1"
    assert argv[argv.index("--master-port") + 1] == "25000"


def test_rank_program_runs_alone_with_world_size_1() -> None:
    """The real program, as a node runs it (python -c), on this machine's loopback."""
    argv = probe.allreduce_command(
        sys.executable,
        backend="gloo",
        master_addr="127.0.0.1",
        master_port=0,
        rank=0,
        world_size=1,
        size_bytes=4096,
        iterations=2,
        warmup=1,
        timeout=30,
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    rank = probe.parse_allreduce(Result(done.returncode, done.stdout, done.stderr))
    assert rank.ok, (rank.error, done.stderr[-2000:])
    assert rank.correct and rank.size_bytes == 4096 and rank.iterations == 2
    assert rank.seconds_per_iteration is not None and rank.seconds_per_iteration > 0


def test_parse_allreduce_failures() -> None:
    line = json.dumps({"rank": 1, "backend": "gloo", "ok": False, "error": "RuntimeError: x"})
    bad = probe.parse_allreduce(Result(1, "noise\n" + line + "\n", ""))
    assert not bad.ok and bad.rank == 1 and bad.error == "RuntimeError: x"
    silent = probe.parse_allreduce(Result(124, "", "a\nb\nTimeout\n"), rank=0)
    assert not silent.ok and silent.rank == 0
    assert silent.error == "no report from the rank (timed out): a | b | Timeout"


def test_ib_write_bw() -> None:
    assert probe.parse_ib_write_bw(IB_WRITE_BW) == 93.19
    assert probe.parse_ib_write_bw("Couldn't connect to 10.0.0.2:18515") is None
    server = probe.ib_write_bw_command("rocep1s0f0", 1, 3)
    client = probe.ib_write_bw_command("rocep1s0f0", 1, 7, server="192.168.100.2")
    assert server[:8] == ["ib_write_bw", "-d", "rocep1s0f0", "-i", "1", "-x", "3", "-F"]
    assert "--report_gbits" in server and client[-1] == "192.168.100.2"
    assert client[:-1] == [*server[:6], "7", *server[7:]]
