"""Serving the node's collection: one exposition (`--once`), its samples as JSON, or an
HTTP server answering `/metrics` until SIGTERM or Ctrl-C."""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from deskside.errors import DesksideError


def exposition(registry: CollectorRegistry) -> str:
    """The text format Prometheus scrapes (one fresh collection)."""
    text: bytes = generate_latest(registry)
    return text.decode()


def samples(registry: CollectorRegistry) -> list[dict[str, Any]]:
    """Every sample of one fresh collection: name (as exposed), labels, value."""
    rows: list[dict[str, Any]] = []
    for family in registry.collect():
        for s in family.samples:
            value = float(s.value)
            rows.append(
                {
                    "name": s.name,
                    "labels": dict(s.labels),
                    "value": int(value) if value.is_integer() and math.isfinite(value) else value,
                }
            )
    return rows


class _Stop(Exception):
    """SIGTERM: leave the serving loop."""


def _stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def serve(
    registry: CollectorRegistry,
    host: str,
    port: int,
    ready: Callable[[str, int], None] = lambda host, port: None,
) -> None:
    """Answer `GET /metrics` on host:port until SIGTERM (returns) or Ctrl-C (propagates)."""
    from prometheus_client import start_http_server

    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise DesksideError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            hint="another exporter may already run there: pick --port, or --host 127.0.0.1",
        ) from None
    bound = server.server_address[1]
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        ready(host, int(bound))
        while True:
            time.sleep(3600)
    except _Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
