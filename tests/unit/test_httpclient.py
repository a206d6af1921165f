"""Every exchange has a total deadline and a byte cap: against a real hostile server on
loopback, sync and async, buffered and streamed."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from deskside.httpclient import BodyTooLarge, DeadlinePassed, Limits, async_client, client
from tests.hostile_http import OK_BODY, hostile_server

QUICK = Limits(total=1.0, max_bytes=1 << 20)


def test_a_well_behaved_server_is_read_whole() -> None:
    with hostile_server("ok") as url, client(QUICK) as http:
        r = http.get(url)
    assert r.status_code == 200 and r.content == OK_BODY


@pytest.mark.parametrize("mode", ["drip-headers", "drip-body", "drip-sse", "silent"])
def test_a_dripping_or_silent_server_ends_at_the_deadline(mode: str) -> None:
    with hostile_server(mode) as url, client(QUICK) as http:
        t0 = time.monotonic()
        with pytest.raises(DeadlinePassed, match="within 1 s"):
            http.get(url)
        assert time.monotonic() - t0 < 2.0


def test_a_streamed_drip_ends_at_the_deadline_too() -> None:
    with hostile_server("drip-sse") as url, client(QUICK) as http:
        t0 = time.monotonic()
        with pytest.raises(DeadlinePassed), http.stream("GET", url) as r:
            for _ in r.iter_lines():
                pass
        assert time.monotonic() - t0 < 2.0


@pytest.mark.parametrize("mode", ["huge", "endless", "endless-sse", "no-separator-sse"])
def test_a_body_past_the_cap_is_refused(mode: str) -> None:
    with hostile_server(mode) as url, client(Limits(total=20, max_bytes=1 << 20)) as http:
        with pytest.raises(BodyTooLarge, match="larger than 1,048,576 bytes"):
            http.get(url)
        with pytest.raises(BodyTooLarge), http.stream("GET", url) as r:
            for _ in r.iter_lines():
                pass


def test_a_gzip_bomb_is_not_inflated() -> None:
    with hostile_server("gzip-bomb") as url, client(Limits(10, 1 << 20)) as http:
        r = http.get(url)
    assert len(r.content) < (1 << 20)
    assert r.headers["x-deskside-content-encoding"] == "gzip"
    assert r.request.headers["accept-encoding"] == "identity"


def test_garbage_is_an_http_error_not_a_crash() -> None:
    with hostile_server("garbage") as url, client(QUICK) as http, pytest.raises(httpx.HTTPError):
        http.get(url)


def test_the_limits_hold_for_async_clients() -> None:
    async def go(url: str, limits: Limits) -> None:
        async with async_client(limits) as http:
            await http.get(url)

    for mode, error in (("drip-body", DeadlinePassed), ("drip-headers", DeadlinePassed)):
        with hostile_server(mode) as url:
            t0 = time.monotonic()
            with pytest.raises(error):
                asyncio.run(go(url, QUICK))
            assert time.monotonic() - t0 < 2.0
    with hostile_server("endless-sse") as url, pytest.raises(BodyTooLarge):
        asyncio.run(go(url, Limits(total=20, max_bytes=1 << 20)))


def test_mock_transports_go_through_the_same_limits() -> None:
    big = httpx.MockTransport(lambda request: httpx.Response(200, content=b"x" * 2048))
    limits = Limits(total=5, max_bytes=1024)
    with client(limits, transport=big) as http, pytest.raises(BodyTooLarge):
        http.get("http://engine/metrics")


def test_limits_must_bound_something() -> None:
    with pytest.raises(ValueError):
        Limits(total=0, max_bytes=10)
