"""What the bench sends: the prompt-length x concurrency matrix, prompts of an exact token
length, and request bodies.

Prompts are random words drawn from a seeded generator, so each request's prompt differs
from its first words on and the prefix cache cannot flatter the result (unless
``shared_prefix``: then every request of a cell sends the same prompt). Their length is
checked against a :class:`TokenCounter` - the server's ``/tokenize`` (the same template and
special tokens the server will count) or, failing that, a local tokenizer - and adjusted a
word at a time until the count is exact; the server's ``usage.prompt_tokens`` is checked
again for every request afterwards.
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from deskside.bench.client import StreamRequest
from deskside.bench.models import BenchConfig, Endpoint
from deskside.errors import DesksideError

# A few hundred plain English words: short, common, mostly one or two tokens in any
# trained vocabulary.
_WORD_TEXT = """
time year people way day man thing woman life child world school state family
student group country problem hand part place case week company system program
question work government number night point home water room mother area money story
fact month lot right study book eye job word business issue side kind head house
service friend father power hour game line end member law car city community name
president team minute idea kid body information back parent face others level office
door health person art war history party result change morning reason research girl
guy moment air teacher force education foot boy age policy music market sense nation
plan college interest death experience effect use class control care field
development role effort rate heart drug show leader light voice wife police mind
price report decision son view relationship town road arm difference value building
action model season society tax director position player record paper space ground
form event official matter center couple site project activity star table need court
oil situation cost industry figure street image phone data picture practice piece
land product doctor wall patient worker news test movie north love support
technology step baby computer type attention film tree source organization hair
window evidence population truth song energy rock bank ball river bird sea sun moon
cloud rain snow wind stone glass bread milk fish horse dog cat apple green blue red
black white small large long short early late young old good new first last great
little own other right big high different local social important open run walk talk
read write sing play build grow hold bring begin keep start turn
"""
WORDS: tuple[str, ...] = tuple(_WORD_TEXT.split())

# Words that are tried, in order, to add exactly one token at the end of a prompt.
FILLERS: tuple[str, ...] = ("the", "a", "of", "and", "to", "in", "is", "it", "x", "0", "1", ".")


class TokenCounter(Protocol):
    """Counts the prompt tokens the server will see for a given user text."""

    method: str

    async def count(self, text: str) -> int: ...

    async def count_messages(self, messages: list[dict[str, str]]) -> int: ...


@dataclass(frozen=True)
class Prompt:
    text: str
    tokens: int
    target: int

    @property
    def exact(self) -> bool:
        return self.tokens == self.target


@dataclass(frozen=True)
class Cell:
    prompt_len: int
    concurrency: int
    request_rate: float | None = None  # open loop (concurrency: max in flight, 0 = no cap)

    @property
    def label(self) -> str:
        return str(self.concurrency) if self.request_rate is None else f"{self.request_rate:g}/s"


def matrix(config: BenchConfig) -> list[Cell]:
    """Cells in table order: prompt length outer, concurrency (or request rate) inner."""
    if config.request_rates is not None:
        cap = config.max_in_flight or 0
        return [Cell(p, cap, r) for p in config.prompt_lens for r in config.request_rates]
    return [Cell(p, c) for p in config.prompt_lens for c in config.concurrency]


def prompt_words(seed: int | None, key: str, n: int) -> list[str]:
    """``n`` words, a pure function of (seed, key)."""
    rng = random.Random(f"deskside-bench:{seed}:{key}")
    return rng.choices(WORDS, k=n)


class PromptError(DesksideError):
    """A prompt of the exact length could not be built."""


async def build_prompt(
    counter: TokenCounter,
    target: int,
    words: list[str],
    calibration: dict[str, float] | None = None,
    max_calls: int = 40,
) -> Prompt:
    """The longest word prefix with count <= target, topped up with one-token fillers.

    Token counts of space-separated words are (close to) additive under the pre-tokenizers
    of BPE and SentencePiece vocabularies, so a secant step lands within a word or two and
    the rest is done one word, then one filler token, at a time. ``calibration`` (the
    template's own tokens and tokens per word) may be shared between calls with the same
    counter: it saves two tokenizer calls per prompt."""
    calls = 0

    async def count(text: str) -> int:
        nonlocal calls
        calls += 1
        if calls > max_calls:
            raise PromptError(
                f"could not build a prompt of exactly {target} tokens in {max_calls} "
                f"tokenizer calls ({counter.method})"
            )
        return await counter.count(text)

    def text_of(w: int) -> str:
        return " ".join(words[:w])

    cal = calibration if calibration is not None else {}
    if "overhead" not in cal:
        cal["overhead"] = await count("")
    overhead = int(cal["overhead"])
    if target <= overhead:
        raise PromptError(
            f"a prompt of {target} tokens is shorter than the fixed template ({overhead})"
        )
    if "per_word" not in cal:
        probe = min(len(words), 64)
        cal["per_word"] = max(0.25, (await count(text_of(probe)) - overhead) / probe)
    per_word = cal["per_word"]
    w = min(len(words), max(0, int((target - overhead) / per_word)))
    c = await count(text_of(w))
    for _ in range(8):
        if c == target:
            return Prompt(text_of(w), c, target)
        step = int((target - c) / per_word)
        if step == 0 or (c < target and w == len(words)):
            break
        w = min(len(words), max(0, w + step))
        c = await count(text_of(w))
    while c > target and w > 0:
        w -= 1
        c = await count(text_of(w))
    text = text_of(w)
    while c < target:
        for filler in FILLERS:
            candidate = f"{text} {filler}" if text else filler
            n = await count(candidate)
            if n == c + 1:
                text, c = candidate, n
                break
        else:
            break
    return Prompt(text, c, target)


def words_needed(target: int) -> int:
    return target + 64


# --------------------------------------------------------------------------- counters


Poster = Callable[[str, dict[str, Any]], Awaitable[tuple[int, Any]]]


class ServerTokenCounter:
    """The server's ``POST /tokenize`` (vLLM): the template and special tokens it applies."""

    def __init__(self, post: Poster, model: str, endpoint: Endpoint) -> None:
        self.post = post
        self.model = model
        self.endpoint = endpoint
        self.method = "server /tokenize"
        self.max_model_len: int | None = None

    async def count(self, text: str) -> int:
        if self.endpoint == "chat":
            return await self.count_messages([{"role": "user", "content": text}])
        return await self._count({"model": self.model, "prompt": text})

    async def count_messages(self, messages: list[dict[str, str]]) -> int:
        """A whole chat (a multi-turn history), with the generation prompt."""
        body = {"model": self.model, "messages": messages, "add_generation_prompt": True}
        return await self._count(body)

    async def _count(self, body: dict[str, Any]) -> int:
        status, answer = await self.post("/tokenize", body)
        if status != 200 or not isinstance(answer, dict) or "count" not in answer:
            raise PromptError(f"/tokenize answered HTTP {status}: {str(answer)[:300]}")
        if isinstance(answer.get("max_model_len"), int):
            self.max_model_len = answer["max_model_len"]
        return int(answer["count"])


class LocalTokenCounter:
    """A local ``tokenizer.json`` (+ the chat template of ``tokenizer_config.json``)."""

    def __init__(self, path: str | Path, endpoint: Endpoint) -> None:
        from tokenizers import Tokenizer

        p = Path(path)
        folder = p if p.is_dir() else p.parent
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise PromptError(f"no tokenizer.json at {path}")
        self.tokenizer = Tokenizer.from_file(str(file))
        self.endpoint = endpoint
        self.method = f"local tokenizer {file}"
        self.template: Any = None
        self.template_vars: dict[str, Any] = {}
        config_file = folder / "tokenizer_config.json"
        if endpoint == "chat" and config_file.is_file():
            config = json.loads(config_file.read_text())
            source = config.get("chat_template")
            if isinstance(source, str):
                from jinja2.sandbox import ImmutableSandboxedEnvironment

                env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
                self.template = env.from_string(source)
                for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
                    value = config.get(key)
                    if isinstance(value, dict):
                        value = value.get("content")
                    self.template_vars[key] = value or ""
        self.chat_template_used = self.template is not None

    async def count(self, text: str) -> int:
        if self.endpoint == "chat" and self.template is not None:
            return await self.count_messages([{"role": "user", "content": text}])
        return len(self.tokenizer.encode(text, add_special_tokens=True).ids)

    async def count_messages(self, messages: list[dict[str, str]]) -> int:
        if self.template is None:  # no template: the contents, one after the other
            return await self.count(" ".join(m["content"] for m in messages))
        rendered = self.template.render(
            messages=messages, add_generation_prompt=True, **self.template_vars
        )
        return len(self.tokenizer.encode(rendered, add_special_tokens=False).ids)


# --------------------------------------------------------------------------- requests


def request_body(
    config: BenchConfig,
    model: str,
    prompt: str,
    max_tokens: int,
    history: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """``history``: earlier messages of a conversation, sent before ``prompt`` (chat), or
    their contents before it as one text (completions)."""
    body: dict[str, Any] = {"model": model}
    earlier = history or []
    if config.endpoint == "chat":
        body["messages"] = [*earlier, {"role": "user", "content": prompt}]
    else:
        body["prompt"] = " ".join([*(m["content"] for m in earlier), prompt])
    body.update(
        {
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    if config.ignore_eos:
        body["ignore_eos"] = True
    body.update(config.extra_body)
    return body


def stream_request(
    config: BenchConfig,
    model: str,
    index: int,
    prompt: Prompt,
    max_tokens: int,
    warmup: bool = False,
    history: list[dict[str, str]] | None = None,
) -> StreamRequest:
    """``history`` (multi-turn): earlier messages; ``prompt.target`` is then the whole
    conversation's length and the reply's text is captured for the next turn."""
    chat = config.endpoint == "chat"
    body = request_body(config, model, prompt.text, max_tokens, history)
    return StreamRequest(
        index=index,
        path="/v1/chat/completions" if chat else "/v1/completions",
        body=json.dumps(body).encode(),
        prompt_len=prompt.target,
        max_tokens=max_tokens,
        chat=chat,
        warmup=warmup,
        capture=history is not None,
    )


async def cell_prompts(
    counter: TokenCounter,
    config: BenchConfig,
    cell: Cell,
    kind: str,
    n: int,
    calibration: dict[str, float],
) -> list[Prompt]:
    """``n`` prompts of the cell's length, unique per cell, kind and request (no cell
    reuses another's prompts: prefix cache), or one repeated (``shared_prefix``)."""
    out: list[Prompt] = []
    for i in range(n):
        if config.shared_prefix:
            key = f"{cell.prompt_len}:shared"
        else:
            key = f"{cell.prompt_len}:{cell.concurrency}:{kind}{i}"
            if cell.request_rate is not None:
                key = f"{cell.prompt_len}:{cell.request_rate:g}/s:{kind}{i}"
        if config.shared_prefix and out:
            out.append(out[0])
            continue
        words = prompt_words(config.seed, key, words_needed(cell.prompt_len))
        out.append(await build_prompt(counter, cell.prompt_len, words, calibration))
    return out
