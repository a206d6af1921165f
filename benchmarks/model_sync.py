"""`deskside model sync` against `rsync -a -e ssh` between the same two hosts, same files.

Two network-namespace hosts with sshd (`tests/sshd_hosts.py`), each with its own private
folder; the head holds a fake hub-cache entry of the recipe's pinned revision (random
shards, blobs and snapshot links as the hub writes them; the head's manifest is recorded
beforehand, as after a pull). Each run times both copies, each into an empty destination
(the worker's cache and the rsync copy are deleted and the file system synced before each
timed copy, so neither pays for the other's writeback); the order alternates between runs.

- deskside: the Python API (`Sync.run`): both nodes' state over SSH, the receiver and the
  sender, the copy over TCP with its streams, the sha256 of every file on arrival, each
  file on disk (fdatasync) before its rename, the snapshot's links.
- rsync: `rsync -a -e ssh` of the same cache entry, then `sync --file-system` of the
  destination: its time counts until its copy is on disk, as deskside's does (printed
  also without that sync).

For reference, one plain TCP stream between the two namespaces (a Python socket sender and
receiver). Each run's seconds are printed, then the medians. Needs root, iproute2,
openssh-server and rsync (scripts/system-deps installs them). The last line is
`rsync_ratio: <float>`: the median over the runs of rsync's time / deskside's (deskside's
throughput over rsync's; target >= 1.5).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from deskside.models.manifest import manifest_of
from deskside.models.sync import Sync
from deskside.recipe.load import load_recipe
from deskside.runtime.transports import transport_for
from deskside.transport import ssh

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.deploy_cases import hub_recipe
from tests.sshd_hosts import SshHost, can_run, ssh_hosts
from tests.unit.model_cache import REPO, REVISION, make_entry

RECEIVE = """
import socket, sys
s = socket.create_server((sys.argv[1], 0)); print(s.getsockname()[1], flush=True)
c, _ = s.accept(); n = 0; buf = bytearray(8 << 20)
while (k := c.recv_into(buf)): n += k
print(n, flush=True)
"""
SEND = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2]))); buf = b"\\0" * (8 << 20)
for _ in range(int(sys.argv[3]) // len(buf)): c.sendall(buf)
c.close()
"""


def tcp_stream(src: SshHost, dst: SshHost, size: int) -> float:
    """Bytes per second of one plain TCP stream from `src` to `dst`."""
    rx = subprocess.Popen(
        ["ip", "netns", "exec", dst.netns, sys.executable, "-c", RECEIVE, dst.address],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert rx.stdout is not None
    port = rx.stdout.readline().strip()
    t0 = time.monotonic()
    subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            src.netns,
            sys.executable,
            "-c",
            SEND,
            dst.address,
            port,
            str(size),
        ],
        check=True,
    )
    got = int(rx.stdout.readline())
    rx.wait()
    return got / (time.monotonic() - t0)


def _fresh(*folders: Path) -> None:
    """An empty destination, and nothing of it left to write back."""
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    subprocess.run(["sync"], check=True)


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mib", type=int, default=256)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    ok, why = can_run()
    if not ok or shutil.which("rsync") is None:
        sys.exit(f"cannot run: {why or 'rsync is not installed (scripts/system-deps)'}")
    base = Path(tempfile.mkdtemp(prefix="deskside-bench-sync-"))
    runs: list[tuple[float, float, float]] = []  # deskside, rsync, rsync before its sync
    load = _load()
    try:
        with ssh_hosts(base / "hosts", "b", 2, base / "node-root") as hosts:
            h0, h1 = hosts.hosts
            files = {"config.json": b"{}"}
            for i in range(args.shards):
                files[f"model-{i:05d}.safetensors"] = os.urandom(args.shard_mib << 20)
            total = sum(map(len, files.values()))
            snap = make_entry(h0.private_dir / "hf", files)
            manifest_of(snap)  # the head's record, as after a pull
            recipe = load_recipe(hub_recipe(hosts, base / "recipes", "bench-sync", REPO, REVISION))
            known = str(hosts.known_hosts)
            transports = {n.name: transport_for(n, known) for n in recipe.cluster.nodes}
            for t in transports.values():
                t.run(["true"])  # connections up before the clock starts
            entry = snap.parent.parent
            rsh = (
                f"ssh -i {hosts.identity_file} -o UserKnownHostsFile={known} "
                "-o StrictHostKeyChecking=yes -o BatchMode=yes"
            )
            dest = f"root@{h1.address}:{hosts.private_root}/rsync-copy/"
            copied = h1.private_dir / "rsync-copy"

            def deskside() -> float:
                _fresh(h1.private_dir / "hf", copied)
                t0 = time.monotonic()
                _, results = Sync(recipe, transports, streams=args.streams).run()
                seconds = time.monotonic() - t0
                assert all(r.ok for r in results) and results[0].bytes == total, results
                return seconds

            def rsync() -> tuple[float, float]:
                _fresh(h1.private_dir / "hf", copied)
                t0 = time.monotonic()
                argv = ["rsync", "-a", "-e", rsh, f"{entry}/", dest]
                subprocess.run(["ip", "netns", "exec", h0.netns, *argv], check=True)
                cached = time.monotonic() - t0
                # deskside's copy is done when every file is on disk (fdatasync before each
                # rename); rsync's when the same holds for its copy
                subprocess.run(["sync", "--file-system", str(h1.private_dir)], check=True)
                seconds = time.monotonic() - t0
                assert (copied / "snapshots" / REVISION / "config.json").read_bytes() == b"{}"
                return seconds, cached

            for i in range(args.runs):
                if i % 2 == 0:
                    d = deskside()
                    r, rc = rsync()
                else:
                    r, rc = rsync()
                    d = deskside()
                runs.append((d, r, rc))
                print(
                    f"run {i + 1}: deskside_s {d:.2f}, rsync_ssh_s {r:.2f} "
                    f"({rc:.2f} before its sync), ratio {r / d:.2f}, load {_load()}",
                    flush=True,
                )
            _fresh(h1.private_dir / "hf", copied)
            tcp = tcp_stream(h0, h1, 1 << 30)
    finally:
        ssh.close_all()
        shutil.rmtree(base, ignore_errors=True)
    mb = total / 1e6
    d, r, rc = (statistics.median(run[k] for run in runs) for k in range(3))
    print(f"bytes: {total} ({args.shards} shards of {args.shard_mib} MiB + config.json)")
    print(f"runs: {len(runs)} (1-min load average {load} at the start, {_load()} at the end)")
    print(f"deskside_sync_s: {d:.2f} median ({mb / d:,.0f} MB/s, {args.streams} streams)")
    print(f"rsync_ssh_s: {r:.2f} median ({mb / r:,.0f} MB/s, on disk)")
    print(f"rsync_ssh_page_cache_s: {rc:.2f} median (before its data reached the disk)")
    print(f"tcp_single_stream_MBps: {tcp / 1e6:,.0f}")
    print(f"rsync_ratio: {statistics.median(x[1] / x[0] for x in runs):.2f}")


if __name__ == "__main__":
    main()
