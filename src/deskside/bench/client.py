"""The bench's HTTP client: one streaming OpenAI-compatible client (chat and completions).

Measured streams go over a pool of HTTP/1.1 keep-alive connections driven by an
``asyncio.Protocol`` and parsed by ``httptools`` (llhttp, the parser uvicorn uses). Why not
httpx for the streams: per streamed chunk, httpx + httpcore + h11 + anyio cost about 130 us
of client CPU on this project's machines, against about 55 us here, and every timestamp
would be taken after several coroutine hops. Here a chunk's arrival time is read from the
monotonic clock in ``data_received`` - before any parsing - and the whole stream is
parsed inside that callback; the awaiting task wakes once, at the end.

What the client does about the known pitfalls of benchmark clients (docs/bench.md):

- connection set-up is never inside TTFT: a connection is taken from the pool (or opened,
  timed as ``connect_s``) *before* the request's ``sent`` timestamp;
- no read-size or line-length limit: the kernel's autotuned receive buffer is drained
  every time the socket is readable and SSE events of any size are reassembled;
- client queue time is recorded (``queued_s``: ready to send -> written);
- TTFT ends at the first chunk that carries a generated token (content, reasoning or tool
  call), not at the first chunk (vLLM's chat stream starts with an empty role chunk);
- token counts come from ``usage`` (``stream_options.include_usage``), never from chunks;
- errors, HTTP statuses and timeouts end up in the record; ``stream`` never raises for them.

Control-plane calls (``/tokenize``, ``/metrics``, ``/v1/models``) use a shared httpx client.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

import httptools
import httpx

from deskside.bench.models import RequestRecord
from deskside.bench.stream_events import SLOW, TOKEN, StreamSink
from deskside.httpclient import METRICS, Limits, async_client
from deskside.terminal import snippet

_Sink = StreamSink  # the name the tests use
__all__ = ["SLOW", "TOKEN", "BenchClient", "StreamClient", "StreamRequest"]

Clock = Callable[[], float]

MAX_ERROR_BODY = 64 * 1024
MAX_EVENT_BYTES = 1 << 20
"""An SSE event longer than this (a stream without separators) ends the request."""
MAX_STREAM_BYTES = 64 << 20
"""A streamed answer longer than this (an endless stream) ends the request; a 32k-token
answer is a few MiB."""

# A proxy's word on which replica answered, most telling first: LiteLLM's proxy sets
# x-litellm-model-api-base and x-litellm-model-id (ProxyBaseLLMRequestProcessing.
# get_custom_headers, streaming responses included).
BACKEND_HEADERS = (b"x-litellm-model-api-base", b"x-litellm-model-id")


def backend_of(headers: dict[bytes, bytes]) -> str | None:
    for name in BACKEND_HEADERS:
        if value := headers.get(name):
            return value.decode("latin-1")
    return None


@dataclass(frozen=True)
class StreamRequest:
    """One request to stream: the body is final JSON bytes (built by the workload)."""

    index: int
    path: str
    body: bytes
    prompt_len: int
    max_tokens: int
    chat: bool
    warmup: bool = False
    capture: bool = False  # keep the reply's text (multi-turn)


class BenchClient(Protocol):
    """What the bench runner needs from a client (the inner layer's interface)."""

    async def stream(self, request: StreamRequest, epoch: float) -> RequestRecord: ...

    async def get_json(self, path: str) -> tuple[int, Any]: ...

    async def post_json(self, path: str, body: dict[str, Any]) -> tuple[int, Any]: ...

    async def get_text(self, url: str) -> tuple[int, str]: ...

    async def aclose(self) -> None: ...


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection carrying one request at a time."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.sink: StreamSink | None = None
        self.done: asyncio.Future[None] | None = None
        self.status: int | None = None
        self.keep_alive = True
        self.closed = False
        self.now = 0.0
        self.completed_at: float | None = None
        self.backend: dict[bytes, bytes] = {}
        self._buf = b""
        self._error_body = bytearray()
        self._seen = 0

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing asyncio.Transport
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError(f"connection closed mid-response ({exc})"))

    def data_received(self, data: bytes) -> None:
        self.now = self.clock()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.done is not None and not self.done.done():
                self.done.set_exception(ConnectionError(f"bad HTTP response: {exc}"))
            if self.transport is not None:
                self.transport.abort()

    # -- httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in BACKEND_HEADERS:
            self.backend[name.lower()] = value

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        if self.status != 200:
            if len(self._error_body) < MAX_ERROR_BODY:
                self._error_body += body[: MAX_ERROR_BODY - len(self._error_body)]
            return
        sink = self.sink
        if sink is None:
            return
        self._seen += len(body)
        if self._seen > MAX_STREAM_BYTES:
            self._refuse(f"the stream ran past {MAX_STREAM_BYTES:,} bytes")
            return
        buf = self._buf + body if self._buf else body
        if b"\r" in buf:
            hold = buf.endswith(b"\r")
            tail = b"\r" if hold else b""
            if hold:
                buf = buf[:-1]
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        else:
            tail = b""
        start = 0
        now = self.now
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            block = buf[start:end]
            start = end + 2
            if block.startswith(b"data: ") and b"\n" not in block:
                sink.event(block[6:], now)
                continue
            data = [
                line[6:] if line.startswith(b"data: ") else line[5:]
                for line in block.split(b"\n")
                if line.startswith(b"data:")
            ]
            if data:
                sink.event(b"\n".join(data), now)
        self._buf = buf[start:] + tail
        if len(self._buf) > MAX_EVENT_BYTES:
            self._refuse(f"an event ran past {MAX_EVENT_BYTES:,} bytes without its end")

    def _refuse(self, why: str) -> None:
        self.sink = None
        self._buf = b""
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError(why))
        if self.transport is not None:
            self.transport.abort()

    def on_message_complete(self) -> None:
        self.completed_at = self.now
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    # -- use
    def send(self, data: bytes, sink: StreamSink) -> asyncio.Future[None]:
        assert self.transport is not None
        self.sink = sink
        self.status = None
        self.completed_at = None
        self.backend = {}
        self._buf = b""
        self._error_body = bytearray()
        self._seen = 0
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self.done

    def error_text(self) -> str:
        return bytes(self._error_body).decode("utf-8", "replace")

    @property
    def reusable(self) -> bool:
        return (
            not self.closed
            and self.keep_alive
            and self.transport is not None
            and not self.transport.is_closing()
        )

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class StreamPool:
    """Keep-alive connections to one origin; one in-flight request per connection."""

    def __init__(self, url: str, clock: Clock, connect_timeout_s: float = 30.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl: ssl.SSLContext | None = (
            ssl.create_default_context() if parts.scheme == "https" else None
        )
        default_port = self.port == (443 if self.ssl else 80)
        self.host_header = self.host if default_port else f"{self.host}:{self.port}"
        self.clock = clock
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()

    async def acquire(self) -> tuple[_Connection, float | None]:
        """An idle connection, or a new one with its set-up time."""
        while self._idle:
            conn = self._idle.pop()
            if conn.reusable:
                return conn, None
            self._all.discard(conn)
        started = self.clock()
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(
                lambda: _Connection(self.clock),
                self.host,
                self.port,
                ssl=self.ssl,
                server_hostname=self.host if self.ssl else None,
            ),
            self.connect_timeout_s,
        )
        self._all.add(conn)
        return conn, self.clock() - started

    def release(self, conn: _Connection) -> None:
        if conn.reusable and conn.done is not None and conn.done.done():
            self._idle.append(conn)
        else:
            conn.close()
            self._all.discard(conn)

    async def aclose(self) -> None:
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)


def _root(url: str) -> str:
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class StreamClient:
    """The real client: streams over :class:`StreamPool`, control calls over httpx."""

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        timeout_s: float = 900.0,
        clock: Clock = time.monotonic,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = _root(url)
        self.base_path = urlsplit(self.url).path.rstrip("/")
        self.clock = clock
        self.timeout_s = timeout_s
        self.pool = StreamPool(self.url, clock)
        headers = {"user-agent": "deskside-bench"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._auth = f"authorization: Bearer {api_key}\r\n" if api_key else ""
        self.http = http or async_client(
            Limits(total=timeout_s, max_bytes=METRICS.max_bytes),
            base_url=self.url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=min(30.0, timeout_s)),
        )

    def _request_bytes(self, path: str, body: bytes) -> bytes:
        head = (
            f"POST {self.base_path}{path} HTTP/1.1\r\n"
            f"host: {self.pool.host_header}\r\n"
            "user-agent: deskside-bench\r\n"
            "content-type: application/json\r\n"
            "accept: text/event-stream\r\n"
            "accept-encoding: identity\r\n"
            f"{self._auth}"
            f"content-length: {len(body)}\r\n\r\n"
        )
        return head.encode("latin-1") + body

    async def stream(self, request: StreamRequest, epoch: float) -> RequestRecord:
        ready = self.clock()
        record = RequestRecord(
            index=request.index,
            warmup=request.warmup,
            prompt_len=request.prompt_len,
            max_tokens=request.max_tokens,
        )
        data = self._request_bytes(request.path, request.body)
        for attempt in (1, 2):
            try:
                conn, connect_s = await self.pool.acquire()
            except (OSError, TimeoutError) as exc:
                record.sent_s = ready - epoch
                record.error_kind = "connection"
                record.error = f"cannot connect: {exc or type(exc).__name__}"
                return record
            record.new_connection = connect_s is not None
            record.connect_s = connect_s
            sink = StreamSink(request.chat, request.capture)
            sent = self.clock()
            record.queued_s = sent - ready - (connect_s or 0.0)
            record.sent_s = sent - epoch
            done = conn.send(data, sink)
            try:
                await asyncio.wait_for(done, self.timeout_s)
            except TimeoutError:
                record.error_kind = "timeout"
                record.error = f"no complete response within {self.timeout_s:g} s"
                conn.close()
            except ConnectionError as exc:
                # A kept-alive connection the server closed as we reused it: nothing was
                # answered, so send once more on a fresh connection (as HTTP clients do).
                if attempt == 1 and connect_s is None and conn.status is None:
                    self.pool.release(conn)
                    continue
                record.error_kind = "connection"
                record.error = str(exc)
            self.pool.release(conn)
            break
        record.http_status = conn.status
        return self._finish(record, sink, conn, sent)

    @staticmethod
    def _finish(
        record: RequestRecord, sink: StreamSink, conn: _Connection, sent: float
    ) -> RequestRecord:
        if sink.first is not None:
            record.ttft_s = sink.first - sent
            record.e2e_s = sink.chunks[-1] - sent
            record.chunk_offsets_s = [t - sent for t in sink.chunks]
        end = conn.completed_at if conn.completed_at is not None else None
        record.end_s = end - sent if end is not None else None
        record.response_id = sink.response_id
        record.finish_reason = sink.finish_reason
        record.backend = backend_of(conn.backend)
        if sink.capture:
            record.reply = "".join(sink.text)
        usage = sink.usage or {}
        record.prompt_tokens = usage.get("prompt_tokens")
        record.output_tokens = usage.get("completion_tokens")
        details = usage.get("prompt_tokens_details") or {}
        record.cached_tokens = details.get("cached_tokens") if details else None
        if record.error is None:
            if conn.status != 200:
                record.error_kind = "http"
                record.error = f"HTTP {conn.status}: {snippet(conn.error_text(), 500)}"
            elif sink.error is not None:
                record.error_kind = "stream"
                record.error = sink.error
            elif sink.first is None:
                record.error_kind = "stream"
                record.error = "stream ended without a generated token"
            elif record.output_tokens is None:
                record.error_kind = "stream"
                record.error = "no usage in the stream (stream_options.include_usage ignored?)"
        record.ok = record.error is None
        return record

    async def get_json(self, path: str) -> tuple[int, Any]:
        response = await self.http.get(path)
        return response.status_code, _json_or_text(response)

    async def post_json(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        response = await self.http.post(path, json=body)
        return response.status_code, _json_or_text(response)

    async def get_text(self, url: str) -> tuple[int, str]:
        response = await self.http.get(url)
        return response.status_code, response.text

    async def aclose(self) -> None:
        await self.pool.aclose()
        with contextlib.suppress(Exception):
            await self.http.aclose()


def _json_or_text(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text
