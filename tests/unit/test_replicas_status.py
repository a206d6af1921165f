"""The replica set's verdict from its groups' states and the proxy's, and the proxy's
health from a real HTTP answer (an httpx mock transport)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from deskside.operate.set_status import proxy_health, set_verdict
from deskside.records.replica_set import ProxyProcess, SetRecord


@pytest.mark.parametrize(
    ("groups", "proxy", "state"),
    [
        ({"a": "READY", "b": "READY"}, "healthy", "READY"),
        ({"a": "READY", "b": "DEGRADED"}, "healthy", "DEGRADED"),
        ({"a": "READY", "b": None}, "healthy", "DEGRADED"),
        ({"a": "READY", "b": "READY"}, "stopped", "DEGRADED"),
        ({"a": "WEDGED", "b": "DOWN"}, "healthy", "WEDGED"),
        ({"a": "STARTING", "b": "DOWN"}, "healthy", "STARTING"),
        ({"a": "DOWN", "b": None}, "healthy", "DOWN"),
        ({"a": "DOWN", "b": "DOWN"}, "stopped", "DOWN"),
    ],
)
def test_set_verdict(groups: dict[str, str | None], proxy: str, state: str) -> None:
    got, reasons = set_verdict(groups, proxy)
    assert got == state
    assert (reasons == []) == (state == "READY")


def test_degraded_names_the_group_and_what_still_serves() -> None:
    state, reasons = set_verdict({"a": "READY", "b": "DEGRADED"}, "healthy")
    assert state == "DEGRADED"
    assert "group b is DEGRADED: the proxy routes around it" in reasons
    assert "1 of 2 groups serve (a)" in reasons
    _, reasons = set_verdict({"a": "READY", "b": "READY"}, "unreachable")
    assert reasons[0].startswith("the proxy is unreachable")


def record(proxy: ProxyProcess | None) -> SetRecord:
    return SetRecord(
        recipe="/r.yaml",
        recipe_name="rs",
        runtime="local",
        groups=["a", "b"],
        proxy_url="http://127.0.0.1:4100",
        proxy=proxy,
        started_at="2026-01-01T00:00:00+00:00",
    )


def test_proxy_health_asks_the_liveness_url() -> None:
    seen: list[str] = []

    def answer(status: int) -> httpx.Client:
        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(str(request.url))
            return httpx.Response(status)

        return httpx.Client(transport=httpx.MockTransport(handler))

    running = record(
        ProxyProcess(pid=99, pid_start=1, run_tag="rs/proxy/20260101000000/proxy", log="/l")
    )
    assert proxy_health(running, True, answer(200)) == "healthy"
    assert seen == ["http://127.0.0.1:4100/health/liveliness"]
    assert proxy_health(running, True, answer(503)) == "unreachable"
    assert proxy_health(running, False, answer(200)) == "stopped"
    assert proxy_health(record(None), True, answer(200)) == "stopped"


def test_a_run_command_given_a_set_names_its_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deskside.errors import DesksideError
    from deskside.records.names import find_run
    from deskside.records.replica_set import load_set, save_set

    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    save_set(record(None))
    loaded = load_set("rs")
    assert loaded is not None and loaded.groups == ["a", "b"]
    with pytest.raises(DesksideError) as info:
        find_run("rs")
    assert "replica set" in info.value.message and "rs-<group>" in (info.value.hint or "")


def test_status_without_a_name_finds_the_only_set(tmp_path: Path) -> None:
    """With one replica set recorded and no other run, `status` reads the set: here its
    groups have no run and its proxy none, so it is DOWN (exit 1) with both groups named."""
    import json

    from deskside.records.replica_set import save_set

    from ..cli_process import deskside

    home = tmp_path / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DESKSIDE_HOME", str(home))
        save_set(record(None))
    done = deskside("status", "--json", home=home, timeout=120)
    assert done.returncode == 1, done.stderr
    st = json.loads(done.stdout)
    assert st["recipe"] == "rs" and st["cluster"] == "DOWN" and st["proxy"] == "stopped"
    assert st["groups"] == {"a": None, "b": None}
    assert "group a is DOWN" in st["reasons"] and "group b is DOWN" in st["reasons"]
