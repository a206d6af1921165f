"""The HTTP client edge: every exchange deskside makes has a total deadline and a byte cap.

httpx's own timeouts are per operation: a server that sends one byte every half second
never trips a 3-second read timeout, and nothing bounds how much a body may hold. Here a
`Limits` (total seconds, most bytes) wraps an httpx transport:

- the deadline covers the whole exchange: connecting, sending, waiting for the headers and
  reading the body, streamed or not. In a sync client every socket read and write waits at
  most the time left (a network backend that sees the current exchange's deadline); in an
  async client each step runs under `asyncio.timeout`. Past it: `DeadlinePassed`, an
  `httpx.TimeoutException`, so existing `except httpx.HTTPError` handlers catch it.
- the body is counted as it arrives; past `max_bytes`: `BodyTooLarge`, an
  `httpx.TransportError`. Bodies are asked for uncompressed (`Accept-Encoding: identity`)
  and a compressed one is handed over as it came (never inflated), so a small gzip body
  cannot grow into gigabytes.

`client(limits, ...)` / `async_client(limits, ...)` build clients; `bounded(transport,
limits)` wraps a given transport (tests pass mock transports through the same wrapper). One
request may ask for a shorter deadline than its client's with `within(seconds)` as its
`extensions`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx


@dataclass(frozen=True)
class Limits:
    """At most `total` seconds and `max_bytes` of body per exchange."""

    total: float
    max_bytes: int

    def __post_init__(self) -> None:
        if not self.total > 0 or self.max_bytes < 0:
            raise ValueError(f"bad HTTP limits: {self.total} s, {self.max_bytes} bytes")


PROBE = Limits(total=10.0, max_bytes=1 << 20)
"""A health check, /v1/models, a short completion."""
METRICS = Limits(total=10.0, max_bytes=16 << 20)
"""A /metrics scrape (vLLM's is about 100 KiB with every histogram) or a Prometheus query."""


class DeadlinePassed(httpx.TimeoutException):
    """The exchange ran past its total deadline."""


class BodyTooLarge(httpx.TransportError):
    """The response body ran past its byte cap."""


_now = time.monotonic
_local = threading.local()


def _left(timeout: float | None) -> float | None:
    """`timeout`, shortened to what is left of the current exchange's deadline."""
    end: float | None = getattr(_local, "deadline", None)
    if end is None:
        return timeout
    left = end - _now()
    if left <= 0:
        raise httpcore.ReadTimeout("the exchange's total deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, _left(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """httpcore's sync backend whose every wait ends by the current exchange's deadline."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(
            self._inner.connect_tcp(host, port, _left(timeout), local_address, socket_options)
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_unix_socket(path, _left(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _passed(request: httpx.Request, limits: Limits) -> DeadlinePassed:
    return DeadlinePassed(
        f"{request.url.host}: no complete answer within {limits.total:g} s", request=request
    )


def _too_large(request: httpx.Request, limits: Limits) -> BodyTooLarge:
    return BodyTooLarge(
        f"{request.url.host}: answer larger than {limits.max_bytes:,} bytes", request=request
    )


DEADLINE_KEY = "deskside_deadline"


def within(seconds: float) -> dict[str, Any]:
    """Request extensions asking for a total deadline shorter than the client's."""
    return {DEADLINE_KEY: float(seconds)}


def _total(request: httpx.Request, limits: Limits) -> float:
    asked = request.extensions.get(DEADLINE_KEY)
    return min(limits.total, asked) if isinstance(asked, float) and asked > 0 else limits.total


def _identity(request: httpx.Request) -> None:
    request.headers["Accept-Encoding"] = "identity"


def _raw(response: httpx.Response) -> None:
    """Hand a compressed body over as it came: httpx inflates what Content-Encoding names."""
    if "content-encoding" in response.headers:
        response.headers["X-Deskside-Content-Encoding"] = response.headers["content-encoding"]
        del response.headers["content-encoding"]


def _check_read(response: httpx.Response, request: httpx.Request, limits: Limits) -> None:
    """A response made with its body already read (a mock transport's) is measured whole."""
    content = getattr(response, "_content", None)
    if content is not None and len(content) > limits.max_bytes:
        raise _too_large(request, limits)


class _Body(httpx.SyncByteStream):
    def __init__(
        self, inner: httpx.SyncByteStream, end: float, limits: Limits, request: httpx.Request
    ) -> None:
        self._inner, self._end, self._limits, self._request = inner, end, limits, request

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        chunks = iter(self._inner)
        while True:
            if _now() >= self._end:
                raise _passed(self._request, self._limits)
            before = getattr(_local, "deadline", None)
            _local.deadline = self._end
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except httpx.TimeoutException as exc:
                if _now() >= self._end:
                    raise _passed(self._request, self._limits) from exc
                raise
            finally:
                _local.deadline = before
            seen += len(chunk)
            if seen > self._limits.max_bytes:
                raise _too_large(self._request, self._limits)
            yield chunk

    def close(self) -> None:
        self._inner.close()


class BoundedTransport(httpx.BaseTransport):
    """`inner` with every exchange held to `limits` (see the module docstring)."""

    def __init__(self, inner: httpx.BaseTransport, limits: Limits) -> None:
        self._inner, self.limits = inner, limits

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        _identity(request)
        end = _now() + _total(request, self.limits)
        before = getattr(_local, "deadline", None)
        _local.deadline = end if before is None else min(before, end)
        try:
            response = self._inner.handle_request(request)
        except httpx.TimeoutException as exc:
            if _now() >= end:
                raise _passed(request, self.limits) from exc
            raise
        finally:
            _local.deadline = before
        _raw(response)
        _check_read(response, request, self.limits)
        assert isinstance(response.stream, httpx.SyncByteStream)
        response.stream = _Body(response.stream, end, self.limits, request)
        return response

    def close(self) -> None:
        self._inner.close()


class _AsyncBody(httpx.AsyncByteStream):
    def __init__(
        self, inner: httpx.AsyncByteStream, end: float, limits: Limits, request: httpx.Request
    ) -> None:
        self._inner, self._end, self._limits, self._request = inner, end, limits, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        chunks = self._inner.__aiter__()
        while True:
            left = self._end - _now()
            if left <= 0:
                raise _passed(self._request, self._limits)
            try:
                async with asyncio.timeout(left):
                    chunk = await chunks.__anext__()
            except StopAsyncIteration:
                return
            except TimeoutError as exc:
                raise _passed(self._request, self._limits) from exc
            seen += len(chunk)
            if seen > self._limits.max_bytes:
                raise _too_large(self._request, self._limits)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class AsyncBoundedTransport(httpx.AsyncBaseTransport):
    """The async twin of `BoundedTransport`."""

    def __init__(self, inner: httpx.AsyncBaseTransport, limits: Limits) -> None:
        self._inner, self.limits = inner, limits

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        _identity(request)
        end = _now() + _total(request, self.limits)
        try:
            async with asyncio.timeout(end - _now()):
                response = await self._inner.handle_async_request(request)
        except TimeoutError as exc:
            raise _passed(request, self.limits) from exc
        _raw(response)
        _check_read(response, request, self.limits)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _AsyncBody(response.stream, end, self.limits, request)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def http_transport() -> httpx.HTTPTransport:
    """httpx's transport whose socket waits end by the current exchange's deadline."""
    transport = httpx.HTTPTransport()
    # httpcore.ConnectionPool takes a network backend; httpx does not pass one through
    transport._pool._network_backend = _Backend()
    return transport


def bounded(transport: httpx.BaseTransport | None, limits: Limits) -> BoundedTransport:
    """`transport` (default: a real one) held to `limits`."""
    return BoundedTransport(transport or http_transport(), limits)


def client(
    limits: Limits, transport: httpx.BaseTransport | None = None, **kwargs: Any
) -> httpx.Client:
    """An httpx.Client whose every exchange is held to `limits`; per-operation timeouts
    default to the total."""
    kwargs.setdefault("timeout", limits.total)
    return httpx.Client(transport=bounded(transport, limits), **kwargs)


def async_client(
    limits: Limits, transport: httpx.AsyncBaseTransport | None = None, **kwargs: Any
) -> httpx.AsyncClient:
    """An httpx.AsyncClient whose every exchange is held to `limits`."""
    kwargs.setdefault("timeout", limits.total)
    inner = transport or httpx.AsyncHTTPTransport()
    return httpx.AsyncClient(transport=AsyncBoundedTransport(inner, limits), **kwargs)
