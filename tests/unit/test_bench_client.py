"""The streaming client.

Exact: a scripted server on a virtual clock feeds the client's connection byte pieces at
known instants (split at awkward places: mid-event, mid-chunk-header, CRLF events), so
TTFT, E2E and every chunk time are known to the bit. Real: the same client over loopback
against the synthetic server, whose own send timestamps bound what the client measures.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from deskside.bench.client import StreamClient, StreamRequest, _Connection, _Sink
from deskside.bench.metrics import cell_metrics
from deskside.bench.models import RequestRecord
from deskside.bench.synthetic import Behaviour, ThreadedServer, start_in_thread

# --------------------------------------------------------------------------- virtual clock


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chat_events(tokens_per_chunk: list[int], prompt: int, cached: int = 0) -> list[bytes]:
    """vLLM-shaped chat stream: role chunk (no token), token chunks, usage, [DONE]."""
    out = [sse({"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant"}}]})]
    for i, n in enumerate(tokens_per_chunk):
        key = "reasoning_content" if i == 0 else "content"  # reasoning counts as a token
        delta = {key: "x" * n}
        out.append(sse({"id": "c1", "choices": [{"index": 0, "delta": delta}]}))
    out.append(
        sse(
            {
                "id": "c1",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
            }
        )
    )
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": sum(tokens_per_chunk),
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    out.append(sse({"id": "c1", "choices": [], "usage": usage}))
    out.append(b"data: [DONE]\n\n")
    return out


class ScriptedTransport(asyncio.Transport):
    """On write (the request), plays the script: (seconds after send, bytes) pieces."""

    def __init__(self, clock: Clock, script: list[tuple[float, bytes]]) -> None:
        super().__init__()
        self.clock = clock
        self.script = script
        self.conn: _Connection | None = None
        self.requests: list[bytes] = []
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.requests.append(bytes(data))
        assert self.conn is not None
        sent = self.clock.now
        for offset, piece in self.script:
            self.clock.now = sent + offset
            self.conn.data_received(piece)

    def is_closing(self) -> bool:
        return self.closing

    def abort(self) -> None:
        self.closing = True


class ScriptedPool:
    def __init__(self, clock: Clock, scripts: Iterator[list[tuple[float, bytes]]]) -> None:
        self.clock = clock
        self.scripts = scripts
        self.transports: list[ScriptedTransport] = []
        self.host_header = "127.0.0.1:9"

    async def acquire(self) -> tuple[_Connection, float | None]:
        conn = _Connection(self.clock)
        transport = ScriptedTransport(self.clock, next(self.scripts))
        transport.conn = conn
        conn.connection_made(transport)
        self.transports.append(transport)
        return conn, None

    def release(self, conn: _Connection) -> None:
        pass

    async def aclose(self) -> None:
        pass


def script_for(
    ttft: float, gaps: list[float], tokens: list[int], prompt: int, cached: int = 0
) -> list[tuple[float, bytes]]:
    """Events at ttft, ttft+gap1, ...; the role chunk at 0; pieces split awkwardly."""
    events = chat_events(tokens, prompt, cached)
    times = [0.0]
    t = ttft
    for i in range(len(tokens)):
        if i:
            t += gaps[i - 1]
        times.append(t)
    times += [t, t, t]  # finish chunk, usage, [DONE] with the last token
    script: list[tuple[float, bytes]] = [(0.0, HEAD[:20]), (0.0, HEAD[20:])]
    for when, event in zip(times, events, strict=True):
        frame = chunked(event)
        # split inside the chunk-size line and inside the event
        script += [(when, frame[:2]), (when, frame[2:9]), (when, frame[9:])]
    script.append((t, b"0\r\n\r\n"))
    return script


def make_client(clock: Clock, scripts: list[list[tuple[float, bytes]]]) -> StreamClient:
    client = StreamClient("http://127.0.0.1:9", clock=clock)
    client.pool = ScriptedPool(clock, iter(scripts))  # type: ignore[assignment]
    return client


def request(index: int = 0, chat: bool = True) -> StreamRequest:
    return StreamRequest(
        index=index,
        path="/v1/chat/completions" if chat else "/v1/completions",
        body=b'{"model":"m"}',
        prompt_len=256,
        max_tokens=9,
        chat=chat,
    )


async def _stream(client: StreamClient, req: StreamRequest, epoch: float) -> RequestRecord:
    try:
        return await client.stream(req, epoch)
    finally:
        await client.aclose()


def test_exact_times_with_multi_token_chunks() -> None:
    clock = Clock()
    # TTFT 0.5 s; then chunks of 4 and 4 tokens 0.25 and 0.75 s apart: 9 tokens.
    client = make_client(clock, [script_for(0.5, [0.25, 0.75], [1, 4, 4], prompt=256, cached=128)])
    record = asyncio.run(_stream(client, request(), epoch=90.0))
    assert record.ok, record.error
    assert record.sent_s == 10.0
    assert record.ttft_s == 0.5  # the role chunk at 0 s carries no token
    assert record.e2e_s == 1.5
    assert record.end_s == 1.5
    assert record.chunk_offsets_s == [0.5, 0.75, 1.5]
    assert (record.prompt_tokens, record.cached_tokens, record.output_tokens) == (256, 128, 9)
    assert record.finish_reason == "length"
    assert record.response_id == "c1"
    m = cell_metrics([record], concurrency=1)
    assert m.decode_tok_s == 8.0  # 8 tokens over 1.0 s, whatever the chunking
    assert m.prefill_tok_s == 256.0  # (256 - 128) / 0.5
    assert m.tokens_per_chunk == 3.0
    assert m.chunk_gap_s is not None and m.chunk_gap_s.max == 0.75
    sent = client.pool.transports[0].requests[0]  # type: ignore[attr-defined]
    assert sent.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:9\r\n")
    assert sent.endswith(b'\r\n\r\n{"model":"m"}')


def test_crlf_events_and_comments() -> None:
    clock = Clock()
    body = (
        b": keep-alive\r\n\r\n"
        b'data: {"choices":[{"index":0,"text":"hi"}]}\r\n\r\n'
        b'data: {"choices":[{"index":0,"text":""}]}\r\n\r\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":1}}\r\n\r\n'
        b"data: [DONE]\r\n\r\n"
    )
    # the first piece ends with the text event complete and the empty-text event's
    # terminator cut after its first CR, which must not be taken for an event end
    empty = body.index(b'"text":""')
    cut = body.index(b"\r\n\r\n", empty) + 1
    script = [
        (0.0, HEAD),
        (0.25, chunked(body[:cut])),
        (0.5, chunked(body[cut:])),
        (0.5, b"0\r\n\r\n"),
    ]
    client = make_client(clock, [script])
    record = asyncio.run(_stream(client, request(chat=False), epoch=clock.now))
    assert record.ok, record.error
    assert record.ttft_s == 0.25
    assert record.chunk_offsets_s == [0.25]  # the empty-text chunk is not a token chunk
    assert record.output_tokens == 1


def test_http_error_and_missing_usage_are_recorded_not_raised() -> None:
    clock = Clock()
    error = b'{"error":{"message":"model not found"}}'
    bad = [(0.0, b"HTTP/1.1 404 Not Found\r\ncontent-length: %d\r\n\r\n%s" % (len(error), error))]
    no_usage_events = [sse({"choices": [{"index": 0, "text": "a"}]}), b"data: [DONE]\n\n"]
    no_usage = [(0.0, HEAD), *[(0.1, chunked(e)) for e in no_usage_events], (0.1, b"0\r\n\r\n")]
    no_token = [(0.0, HEAD), (0.1, chunked(b"data: [DONE]\n\n")), (0.1, b"0\r\n\r\n")]
    client = make_client(clock, [bad, no_usage, no_token])

    async def run() -> list[RequestRecord]:
        try:
            return [await client.stream(request(i, chat=False), clock.now) for i in range(3)]
        finally:
            await client.aclose()

    r404, r_usage, r_token = asyncio.run(run())
    assert (r404.ok, r404.error_kind, r404.http_status) == (False, "http", 404)
    assert r404.error is not None and "model not found" in r404.error
    assert (r_usage.ok, r_usage.error_kind) == (False, "stream")
    assert r_usage.error is not None and "usage" in r_usage.error
    assert r_token.error == "stream ended without a generated token"


# --------------------------------------------------------------------------- real sockets


@pytest.fixture(scope="module")
def spec_server() -> Iterator[ThreadedServer]:
    server = start_in_thread(
        Behaviour(ttft_s=0.04, chunk_interval_s=0.004, tokens_per_chunk=(3,), model="m")
    )
    yield server
    server.stop()


def body(prompt: str, max_tokens: int, chat: bool) -> bytes:
    data: dict[str, Any] = {"model": "m", "max_tokens": max_tokens, "stream": True}
    data["stream_options"] = {"include_usage": True}
    if chat:
        data["messages"] = [{"role": "user", "content": prompt}]
    else:
        data["prompt"] = prompt
    return json.dumps(data).encode()


def real_request(i: int, prompt: str, max_tokens: int, chat: bool) -> StreamRequest:
    return StreamRequest(
        index=i,
        path="/v1/chat/completions" if chat else "/v1/completions",
        body=body(prompt, max_tokens, chat),
        prompt_len=0,
        max_tokens=max_tokens,
        chat=chat,
    )


async def _serial(url: str, reqs: list[StreamRequest], timeout: float = 30) -> list[RequestRecord]:
    client = StreamClient(url, timeout_s=timeout)
    try:
        epoch = client.clock()
        return [await client.stream(r, epoch) for r in reqs]
    finally:
        await client.aclose()


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completions"])
def test_real_stream_against_server_log(spec_server: ThreadedServer, chat: bool) -> None:
    reqs = [real_request(i, "one two three four", 10, chat) for i in range(3)]
    records = asyncio.run(_serial(spec_server.url, reqs))
    log = {s.id: s for s in spec_server.server.sent}
    for r in records:
        assert r.ok, r.error
        sent = log[r.response_id or ""]
        # 10 tokens: first 1, then 3 + 3 + 3 -> 4 chunks
        assert r.output_tokens == 10 == sent.completion_tokens
        assert len(r.chunk_offsets_s) == 4 == len(sent.chunk_sent)
        assert r.prompt_tokens == sent.prompt_tokens == (10 if chat else 5)
        assert r.ttft_s is not None and r.e2e_s is not None
        # never before the server's scheduled first token
        assert r.ttft_s >= 0.04
        assert sent.first_token_sent is not None
    # keep-alive: one connection opened, then reused
    assert [r.new_connection for r in records] == [True, False, False]
    assert records[0].connect_s is not None and records[0].connect_s < 1.0


def test_real_arrivals_follow_server_sends(spec_server: ThreadedServer) -> None:
    """Absolute check on the shared monotonic clock: every chunk arrives after the server
    sent it and within 20 ms (loopback; the server runs in this process's other thread)."""

    async def run() -> tuple[list[RequestRecord], float]:
        client = StreamClient(spec_server.url)
        try:
            epoch = client.clock()
            req = real_request(0, "a b c", 16, True)
            return [await client.stream(req, epoch) for _ in range(3)], epoch
        finally:
            await client.aclose()

    records, epoch = asyncio.run(run())
    log = {s.id: s for s in spec_server.server.sent}
    for r in records:
        sent = log[r.response_id or ""]
        arrivals = [epoch + r.sent_s + off for off in r.chunk_offsets_s]
        for arrived, server_sent in zip(arrivals, sent.chunk_sent, strict=True):
            assert 0.0 <= arrived - server_sent < 0.02


def test_faults_are_counted_not_raised(spec_server: ThreadedServer) -> None:
    reqs = [
        real_request(0, "please [[status:503]]", 8, True),
        real_request(1, "please [[drop:2]]", 8, True),
        real_request(2, "please [[hang]]", 8, True),
        real_request(3, "fine again", 8, True),
    ]
    records = asyncio.run(_serial(spec_server.url, reqs, timeout=0.5))
    kinds = [(r.ok, r.error_kind, r.http_status) for r in records]
    assert kinds[0] == (False, "http", 503)
    assert kinds[1][:2] == (False, "connection")
    assert kinds[2][:2] == (False, "timeout")
    assert kinds[3] == (True, None, 200)
    assert records[1].chunk_offsets_s  # the two chunks before the drop were seen
    m = cell_metrics(records, concurrency=1)
    assert (m.succeeded, m.failed) == (1, 3)
    assert m.errors == {"connection": 1, "http": 1, "timeout": 1}


def test_unreachable_server_is_a_record() -> None:
    records = asyncio.run(_serial("http://127.0.0.1:9", [real_request(0, "x", 4, True)]))
    assert records[0].error_kind == "connection"
    assert not records[0].ok


def test_token_detection_fast_and_full_paths_agree() -> None:
    """After the first token most chunks skip json.loads; both paths must classify alike."""
    payloads = [
        (b'{"choices":[{"index":0,"delta":{"content":"a"}}]}', True),
        (b'{"choices":[{"index":0,"delta":{"content":""}}]}', False),
        (b'{"choices":[{"index":0,"delta":{"content": "spaced"}}]}', True),
        (b'{"choices":[{"index":0,"delta":{"content":null,"reasoning":"r"}}]}', True),
        (b'{"choices":[{"index":0,"delta":{"reasoning_content":"\\"q\\""}}]}', True),
        (b'{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}', True),
        (b'{"choices":[{"index":0,"delta":{"tool_calls":[]}}]}', False),
        (b'{"choices":[{"index":0,"delta":{"content":"say \\"usage\\":{ x"}}]}', True),
        (b'{"choices":[{"index":0,"text":"","token_ids":[17]}]}', True),
        (b'{"choices":[{"index":0,"text":"z"}],"usage":null}', True),
    ]
    for payload, carries in payloads:
        fast = _Sink(chat=b'"delta"' in payload)
        fast.first = 0.0  # past the first token: the fast path applies
        fast.event(payload, 1.0)
        full = _Sink(chat=b'"delta"' in payload)
        full.event(payload, 1.0)  # before the first token: always parsed
        assert (fast.chunks == [1.0]) is carries, payload
        assert (full.chunks == [1.0]) is carries, payload
    usage = _Sink(chat=False)
    usage.first = 0.0
    usage.event(b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}', 2.0)
    assert usage.usage == {"prompt_tokens": 3, "completion_tokens": 2} and usage.chunks == []
    finish = _Sink(chat=False)
    finish.first = 0.0
    finish.event(b'{"choices":[{"index":0,"text":"x","finish_reason":"length"}]}', 3.0)
    assert finish.finish_reason == "length" and finish.chunks == [3.0]


@pytest.mark.parametrize(
    ("mode", "kind", "why"),
    [
        ("drip-sse", "timeout", "no complete response within 1 s"),
        ("silent", "timeout", "no complete response within 1 s"),
        ("endless-sse", "connection", "the stream ran past 4,194,304 bytes"),
        ("no-separator-sse", "connection", "an event ran past 1,048,576 bytes"),
    ],
)
def test_a_hostile_server_ends_the_request_within_its_bounds(
    mode: str, kind: str, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream that drips, never answers, never ends, or never separates its events: the
    request ends with its reason, within --timeout (the caps end the fast ones sooner; the
    stream cap is lowered here to keep the test short)."""
    from tests.hostile_http import hostile_server

    monkeypatch.setattr("deskside.bench.client.MAX_STREAM_BYTES", 4 << 20)
    timeout = 1.0 if "drip" in mode or mode == "silent" else 60.0
    with hostile_server(mode) as url:
        t0 = time.monotonic()
        (record,) = asyncio.run(_serial(url, [real_request(0, "x", 4, True)], timeout=timeout))
        assert time.monotonic() - t0 < timeout + 1.5
    assert (record.ok, record.error_kind) == (False, kind)
    assert why in (record.error or "")


def test_control_calls_are_bounded_too() -> None:
    """/v1/models, /metrics and friends: the same total deadline and a byte cap."""
    from tests.hostile_http import hostile_server

    async def get(url: str) -> None:
        client = StreamClient(url, timeout_s=1.0)
        try:
            await client.get_text(url + "/metrics")
        finally:
            await client.aclose()

    for mode in ("drip-body", "huge"):
        with hostile_server(mode) as url:
            t0 = time.monotonic()
            with pytest.raises(httpx.HTTPError):
                asyncio.run(get(url))
            assert time.monotonic() - t0 < 3
