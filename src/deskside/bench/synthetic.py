"""A synthetic OpenAI-compatible streaming server whose timings and token counts are known.

It exists so that the bench client can be tested, and its overhead measured, against a
server that says exactly what it did: every request's receipt time, the send time of its
first token chunk and of every later chunk (``time.monotonic()``, the same system-wide
clock the client uses), its token counts, and vLLM-named Prometheus counters derived from
what it actually sent.

Behaviour (:class:`Behaviour`):

- tokenizer: one token per whitespace-separated word, plus ``bos_tokens`` for completions
  or ``chat_template_tokens`` for chat. ``POST /tokenize`` answers with the same rule, and
  a completions ``prompt`` given as a list of token ids counts its length;
- the first token chunk is sent ``ttft_s`` after the request is read; then one decode chunk
  every ``chunk_interval_s`` carrying ``tokens_per_chunk[i % len]`` tokens (several tokens
  per chunk is what speculative decoding produces), the last one truncated to
  ``max_tokens``; EOS is never emitted (as with ``ignore_eos``);
- chat streams send a role chunk with empty content at receipt - before any token - so a
  client that times the first chunk instead of the first token is caught;
- speculative counters: each decode chunk of ``n`` tokens is one draft of
  ``num_speculative_tokens`` tokens with ``n - 1`` accepted (positions ``0..n-2``);
- prefix caching: a prompt's cached tokens are its longest common prefix with any earlier
  prompt in whole blocks, at most ``n - 1`` (:mod:`deskside.bench.synthetic_cache`; a chat
  prompt's tokens are the template's, then every message's words in order), reported in
  ``usage.prompt_tokens_details.cached_tokens`` and vLLM's prefix-cache counters;
- ``backends``: answer as a LiteLLM proxy over these replicas would, round robin: each
  stream's response headers name one (``x-litellm-model-api-base``, ``x-litellm-model-id``);
- faults: every ``fail_every_n``-th streamed request answers HTTP 500; and by markers in
  the prompt text: ``[[status:500]]`` answers that HTTP status,
  ``[[hang]]`` never answers, ``[[drop:K]]`` closes the connection after ``K`` chunks.

Run it with ``python -m deskside.bench.synthetic --port 8000`` (it prints ``listening on
HOST:PORT`` once ready), or in-process with :func:`start_in_thread`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from prometheus_client import generate_latest

from deskside.bench.synthetic_cache import PrefixCache
from deskside.bench.synthetic_metrics import SyntheticMetrics

FAULT = re.compile(rb"\[\[(status|hang|drop)(?::(\d+))?\]\]")


@dataclass(frozen=True)
class Behaviour:
    """What the synthetic server does; every timing is in seconds."""

    ttft_s: float = 0.02
    chunk_interval_s: float = 0.005
    tokens_per_chunk: tuple[int, ...] = (1,)
    num_speculative_tokens: int = 0
    bos_tokens: int = 1
    chat_template_tokens: int = 6
    prefix_block_size: int = 16
    model: str = "synthetic"
    max_model_len: int = 1 << 20
    role_chunk_at_receipt: bool = True
    fail_every_n: int = 0  # every n-th streamed request answers HTTP 500 (0: never)
    tokenize: bool = True  # False: no /tokenize route (404), as on non-vLLM servers
    api_key: str | None = None  # like vLLM's VLLM_API_KEY: /v1 answers 401 without it
    backends: tuple[str, ...] = ()  # replica api bases a proxy would name, round robin


@dataclass
class SentRequest:
    """What the server did for one streamed request (monotonic seconds)."""

    id: str
    endpoint: str
    received: float
    prompt_tokens: int
    cached_tokens: int
    max_tokens: int
    first_token_sent: float | None = None
    last_token_sent: float | None = None
    chunk_sent: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    completion_tokens: int = 0
    finished: bool = False
    request_id: str | None = None  # the client's x-request-id header, if any
    backend: str | None = None  # the replica named in the response headers
    prompt: str = ""  # the prompt's words (chat: every message's), for tests


class SyntheticServer:
    """The asyncio server. Create it inside the loop that will run it."""

    def __init__(self, behaviour: Behaviour | None = None) -> None:
        self.behaviour = behaviour or Behaviour()
        self.sent: list[SentRequest] = []
        self.metrics = SyntheticMetrics(self.behaviour.model)
        self.cache = PrefixCache(self.behaviour.prefix_block_size)
        self._ids = itertools.count()
        self._streams = 0
        self._server: asyncio.base_events.Server | None = None
        if self.behaviour.num_speculative_tokens:
            for pos in range(self.behaviour.num_speculative_tokens):
                self.metrics.accepted_at(pos)  # exported from the start, like vLLM

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self._server = await asyncio.start_server(self._connection, host, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    # ------------------------------------------------------------------ HTTP

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        key, value = line.split(":", 1)
                        headers[key.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                received = time.monotonic()
                keep = await self._route(
                    method, path.split("?", 1)[0], body, received, writer, headers
                )
                if not keep or headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    def _respond(writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Error")
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n"
            f"content-length: {len(body)}\r\n\r\n".encode("latin-1")
            + body
        )

    def _json(self, writer: asyncio.StreamWriter, data: Any, status: int = 200) -> None:
        self._respond(writer, status, json.dumps(data).encode(), "application/json")

    async def _route(
        self,
        method: str,
        path: str,
        body: bytes,
        received: float,
        writer: asyncio.StreamWriter,
        headers: dict[str, str],
    ) -> bool:
        b = self.behaviour
        if b.api_key and path.startswith("/v1") and not self._authorized(headers):
            self._json(writer, {"error": "Unauthorized"}, 401)
        elif method == "GET" and path == "/metrics":
            self._respond(writer, 200, generate_latest(self.metrics.registry), "text/plain")
        elif method == "GET" and path == "/v1/models":
            card = {"id": b.model, "object": "model", "max_model_len": b.max_model_len}
            self._json(writer, {"object": "list", "data": [card]})
        elif method == "GET" and path == "/version":
            self._json(writer, {"version": "synthetic"})
        elif method == "GET" and path == "/health":
            self._respond(writer, 200, b"", "text/plain")
        elif method == "GET" and path == "/synthetic/log":
            self._json(writer, [asdict(s) for s in self.sent])
        elif method == "POST" and path == "/tokenize" and b.tokenize:
            request = json.loads(body)
            count = self.count_prompt(request)
            tokens = list(range(count))
            self._json(writer, {"count": count, "max_model_len": b.max_model_len, "tokens": tokens})
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            return await self._stream(path, body, received, writer, headers.get("x-request-id"))
        else:
            self._json(writer, {"error": {"message": f"no route {method} {path}"}}, 404)
        await writer.drain()
        return True

    def _authorized(self, headers: dict[str, str]) -> bool:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and token == self.behaviour.api_key

    def count_prompt(self, request: dict[str, Any]) -> int:
        return len(self.prompt_tokens(request))

    def prompt_tokens(self, request: dict[str, Any]) -> Sequence[object]:
        """One token per word, after the template's (chat) or BOS (completions) tokens."""
        b = self.behaviour
        if "messages" in request:
            words = " ".join(str(m.get("content") or "") for m in request["messages"]).split()
            return ["<template>"] * b.chat_template_tokens + words
        prompt = request.get("prompt", "")
        if isinstance(prompt, list):
            return list(prompt)
        add_special = request.get("add_special_tokens", True)
        return ["<s>"] * (b.bos_tokens if add_special else 0) + str(prompt).split()

    # ------------------------------------------------------------------ streaming

    def _chunk_sizes(self, total: int) -> Iterator[int]:
        if total <= 0:
            return
        yield 1
        left = total - 1
        for n in itertools.cycle(self.behaviour.tokens_per_chunk):
            if left <= 0:
                return
            take = min(max(1, n), left)
            left -= take
            yield take

    async def _stream(
        self,
        path: str,
        body: bytes,
        received: float,
        writer: asyncio.StreamWriter,
        request_id: str | None = None,
    ) -> bool:
        b = self.behaviour
        m = self.metrics
        self._streams += 1
        if b.fail_every_n and self._streams % b.fail_every_n == 0:
            self._json(writer, {"error": {"message": "injected failure"}}, 500)
            await writer.drain()
            return True
        fault = FAULT.search(body) if b"[[" in body else None
        if fault and fault.group(1) == b"status":
            status = int(fault.group(2) or 500)
            self._json(writer, {"error": {"message": "injected fault"}}, status)
            await writer.drain()
            return True
        if fault and fault.group(1) == b"hang":
            await asyncio.sleep(3600)
            return False
        drop_after = int(fault.group(2) or 0) if fault and fault.group(1) == b"drop" else None

        request = json.loads(body)
        chat = path.endswith("chat/completions")
        tokens = self.prompt_tokens(request)
        prompt_tokens = len(tokens)
        cached = self.cache.admit(tokens)
        max_tokens = int(request.get("max_tokens") or request.get("max_completion_tokens") or 16)
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        seq = next(self._ids)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-synthetic-{seq}"
        word = b"tok%d " % seq  # one token; differs per request, so replies can be told apart
        record = SentRequest(
            rid, "chat" if chat else "completions", received, prompt_tokens, cached, max_tokens
        )
        record.request_id = request_id
        record.prompt = " ".join(str(t) for t in tokens if t not in ("<template>", "<s>"))
        if b.backends:
            record.backend = b.backends[(len(self.sent)) % len(b.backends)]
        self.sent.append(record)
        m.prompt_tokens.inc(prompt_tokens)
        m.prompt_cached.inc(cached)
        m.prefix_queries.inc(prompt_tokens)
        m.prefix_hits.inc(cached)
        m.queue_time.observe(0.0)
        m.running.inc()

        created = int(time.time())
        model = json.dumps(b.model)
        if chat:
            obj = b'"object":"chat.completion.chunk"'
            head = (
                f'data: {{"id":"{rid}",'.encode()
                + obj
                + (f',"created":{created},"model":{model},"choices":[{{"index":0,"delta":').encode()
            )
        else:
            obj = b'"object":"text_completion"'
            head = (
                f'data: {{"id":"{rid}",'.encode()
                + obj
                + (f',"created":{created},"model":{model},"choices":[{{"index":0,').encode()
            )

        def frame(data: bytes) -> bytes:
            return b"%x\r\n%s\r\n" % (len(data), data)

        def token_event(n: int, last: bool) -> bytes:
            text = word * n
            finish = b'"length"' if last else b"null"
            if chat:
                return (
                    head
                    + b'{"content":"'
                    + text
                    + b'"},"logprobs":null,"finish_reason":'
                    + finish
                    + b"}]}\n\n"
                )
            return (
                head
                + b'"text":"'
                + text
                + b'","logprobs":null,"finish_reason":'
                + finish
                + b',"stop_reason":null}]}\n\n'
            )

        proxy = ""
        if record.backend is not None:
            replica = b.backends.index(record.backend)
            proxy = f"x-litellm-model-api-base: {record.backend}\r\n"
            proxy += f"x-litellm-model-id: replica-{replica}\r\n"
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            + proxy.encode("latin-1")
            + b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        if chat and b.role_chunk_at_receipt:
            writer.write(
                frame(
                    head + b'{"role":"assistant","content":""},"logprobs":null,'
                    b'"finish_reason":null}]}\n\n'
                )
            )
        await writer.drain()

        sizes = list(self._chunk_sizes(max_tokens))
        target = received + b.ttft_s
        for i, n in enumerate(sizes):
            if drop_after is not None and i >= drop_after:
                m.running.dec()
                return False
            delay = target - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            event = frame(token_event(n, i == len(sizes) - 1))
            now = time.monotonic()
            writer.write(event)
            if i == 0:
                record.first_token_sent = now
                m.ttft.observe(now - received)
            else:
                k = b.num_speculative_tokens
                if k:
                    m.drafts.inc()
                    m.draft_tokens.inc(k)
                    m.accepted.inc(min(n - 1, k))
                    for pos in range(min(n - 1, k)):
                        m.accepted_at(pos).inc()
            record.last_token_sent = now
            record.chunk_sent.append(now)
            record.chunk_tokens.append(n)
            record.completion_tokens += n
            m.generation_tokens.inc(n)
            await writer.drain()
            target += b.chunk_interval_s
        if include_usage:
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": record.completion_tokens,
                "total_tokens": prompt_tokens + record.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": cached},
            }
            tail = (
                f'data: {{"id":"{rid}",'.encode()
                + obj
                + f',"created":{created},"model":{model},"choices":[],"usage":'.encode()
                + json.dumps(usage).encode()
                + b"}\n\n"
            )
            writer.write(frame(tail))
        writer.write(frame(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        record.finished = True
        m.running.dec()
        await writer.drain()
        return True


@dataclass
class ThreadedServer:
    """A synthetic server running on its own event loop in a daemon thread."""

    server: SyntheticServer
    port: int
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        async def shutdown() -> None:
            await self.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        fut = asyncio.run_coroutine_threadsafe(shutdown(), self.loop)
        with contextlib.suppress(Exception):
            fut.result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def start_in_thread(
    behaviour: Behaviour | None = None, host: str = "127.0.0.1", port: int = 0
) -> ThreadedServer:
    """Start a synthetic server on `host` (`port`, default a free one) in a background
    thread."""
    loop = asyncio.new_event_loop()
    ready: dict[str, Any] = {}
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def boot() -> None:
            server = SyntheticServer(behaviour)
            ready["server"] = server
            ready["port"] = await server.start(host, port)

        loop.run_until_complete(boot())
        started.set()
        loop.run_forever()
        loop.close()

    thread = threading.Thread(target=run, name="synthetic-openai", daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("synthetic server did not start")
    return ThreadedServer(ready["server"], int(ready["port"]), loop, thread)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft", type=float, default=Behaviour.ttft_s)
    parser.add_argument("--chunk-interval", type=float, default=Behaviour.chunk_interval_s)
    parser.add_argument("--tokens-per-chunk", default="1", help="comma-separated cycle")
    parser.add_argument("--num-speculative-tokens", type=int, default=0)
    parser.add_argument("--model", default=Behaviour.model)
    args = parser.parse_args(argv)
    behaviour = Behaviour(
        ttft_s=args.ttft,
        chunk_interval_s=args.chunk_interval,
        tokens_per_chunk=tuple(int(x) for x in args.tokens_per_chunk.split(",")),
        num_speculative_tokens=args.num_speculative_tokens,
        model=args.model,
    )

    async def serve() -> None:
        server = SyntheticServer(behaviour)
        port = await server.start(args.host, args.port)
        print(f"listening on {args.host}:{port}", flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
