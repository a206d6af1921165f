"""Serving the node's collection: one exposition (`--once`), its samples as JSON, or an
HTTP server answering `/metrics` until SIGTERM or Ctrl-C (bounded: see `_Server`)."""

from __future__ import annotations

import asyncio
import math
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
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


MAX_CONNECTIONS = 64
"""Connections open at once. A new one past it closes the oldest connection still sending
its request head (a scraper sends it at once, an idle one never does), so idle connections
cannot starve Prometheus; with none of those, the new one is closed."""
REQUEST_SECONDS = 5.0
"""The whole request head must arrive within this (bytes trickling in do not extend it)."""
REQUEST_BYTES = 8192
COLLECT_SECONDS = 20.0
"""One collection's bound; every source it reads has a shorter deadline of its own."""


class _Server:
    """A small asyncio HTTP/1.1 server for `/metrics`: an event loop instead of a thread
    per connection, a cap on open connections (see MAX_CONNECTIONS), a total deadline and
    a size cap on each request head, one collection at a time in a worker thread,
    `Connection: close`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.open = 0
        self.waiting: dict[int, asyncio.StreamWriter] = {}  # still sending their head, oldest first
        self.collecting = asyncio.Lock()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="collect")

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open >= MAX_CONNECTIONS:
            if not self.waiting:
                writer.close()
                return
            oldest = next(iter(self.waiting))
            self.waiting.pop(oldest).transport.abort()
        self.open += 1
        key = id(writer)
        self.waiting[key] = writer
        try:
            status, body = await self.answer(reader, lambda: self.waiting.pop(key, None))
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {CONTENT_TYPE_LATEST}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            async with asyncio.timeout(REQUEST_SECONDS):
                await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self.waiting.pop(key, None)
            self.open -= 1
            writer.close()

    async def answer(
        self, reader: asyncio.StreamReader, arrived: Callable[[], object]
    ) -> tuple[str, bytes]:
        try:
            async with asyncio.timeout(REQUEST_SECONDS):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            return "431 Request Header Fields Too Large", b"request head too large\n"
        arrived()
        words = head.split(b"\r\n", 1)[0].split()
        if len(words) != 3 or not words[2].startswith(b"HTTP/1."):
            return "400 Bad Request", b"not an HTTP/1.x request\n"
        if words[0] not in (b"GET", b"HEAD"):
            return "405 Method Not Allowed", b"GET /metrics\n"
        if words[1].split(b"?", 1)[0] not in (b"/metrics", b"/"):
            return "404 Not Found", b"GET /metrics\n"
        async with self.collecting:
            loop = asyncio.get_running_loop()
            try:
                async with asyncio.timeout(COLLECT_SECONDS):
                    text = await loop.run_in_executor(self.pool, exposition, self.registry)
            except TimeoutError:
                return "503 Service Unavailable", b"collection took too long\n"
        return "200 OK", (b"" if words[0] == b"HEAD" else text.encode())


def serve(
    registry: CollectorRegistry,
    host: str,
    port: int,
    ready: Callable[[str, int], None] = lambda host, port: None,
) -> None:
    """Answer `GET /metrics` on host:port until SIGTERM (returns) or Ctrl-C (propagates)."""
    server = _Server(registry)

    async def main() -> None:
        try:
            listener = await asyncio.start_server(
                server.handle, host, port, limit=REQUEST_BYTES, reuse_address=True
            )
        except OSError as exc:
            raise DesksideError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                hint="another exporter may already run there: pick --port, or --host 127.0.0.1",
            ) from None
        stopped = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stopped.set)
        try:
            bound = listener.sockets[0].getsockname()
            ready(host, int(bound[1]))
            async with listener:
                await stopped.wait()
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    try:
        asyncio.run(main())
    finally:
        server.pool.shutdown(wait=False, cancel_futures=True)
