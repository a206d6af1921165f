"""Value types of a recipe: one field's value, checked on its own.

Each type is an `Annotated` pydantic type whose validator refuses a bad value with one
`Problem` (raised as `RecipeProblems`): what is wrong and what to write instead. Rules that
look at more than one field live in `deskside.recipe.rules`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, WithJsonSchema

from deskside.hardware import PROFILES
from deskside.recipe.problems import did_you_mean, refuse
from deskside.recipe.text import AbsolutePath, NoSpace
from deskside.units import TIB, parse_bytes

# Every recipe model: unknown keys refused, frozen, and strict about types (YAML already types
# its scalars, so `port: "8000"` is refused rather than quietly converted).
MODEL_CONFIG = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def _matching(
    pattern: str, what: str, example: str, extra: Callable[[str], str | None] | None = None
) -> Callable[[str], str]:
    """An after-validator refusing strings that do not match `pattern`."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if compiled.fullmatch(value) is None:
            raise refuse(f"{value!r} is not {what}", f"write {what}, e.g. {example}")
        if extra is not None:
            problem = extra(value)
            if problem is not None:
                raise refuse(problem, f"write {what}, e.g. {example}")
        return value

    return check


Slug = Annotated[
    str,
    AfterValidator(
        _matching(
            r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?",
            "a slug (lowercase letters, digits and '-', at most 63 characters, not starting "
            "or ending with '-')",
            "'dual-spark-deepseek-v4-flash'",
        )
    ),
]

NodeName = Annotated[
    str,
    AfterValidator(
        _matching(
            r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}",
            "a node name (letters, digits, '.', '_' or '-', at most 63 characters)",
            "'ai1'",
        )
    ),
]

NetnsName = Annotated[
    str,
    AfterValidator(
        _matching(
            r"[a-z0-9][a-z0-9_-]{0,11}",
            "a network namespace name (lowercase letters, digits, '_' or '-', at most 12 "
            "characters, so derived interface names fit Linux's 15)",
            "'ds-node0'",
        )
    ),
]

_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME_RE = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*\.?")
_DOTTED_RE = re.compile(r"[0-9.]+")


def _check_host(value: str) -> str:
    """An IPv4 address or a DNS hostname."""
    if _DOTTED_RE.fullmatch(value):
        try:
            ipaddress.IPv4Address(value)
        except ValueError:
            raise refuse(
                f"{value!r} is not a valid IPv4 address",
                "write four numbers 0-255 separated by dots, e.g. 192.168.0.27",
            ) from None
        return value
    if ":" in value:
        raise refuse(
            f"{value!r} looks like an IPv6 address; deskside uses IPv4 addresses or hostnames",
            "write the node's IPv4 address (e.g. 192.168.0.27) or its hostname",
        )
    if len(value) > 253 or _HOSTNAME_RE.fullmatch(value) is None:
        raise refuse(
            f"{value!r} is neither an IPv4 address nor a hostname",
            "write the node's IPv4 address (e.g. 192.168.0.27) or its hostname (e.g. ai1.lan)",
        )
    return value


HostAddress = Annotated[str, AfterValidator(_check_host)]

InterfaceName = Annotated[
    str,
    AfterValidator(
        _matching(
            r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}",
            "a network interface name (at most 15 characters: letters, digits, '_', '.', '-')",
            "'enp1s0f0np0'",
        )
    ),
]

HcaName = Annotated[
    str,
    AfterValidator(
        _matching(
            r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(?::[0-9]{1,3})?",
            "an RDMA device name (as listed in /sys/class/infiniband), optionally with ':port'",
            "'rocep1s0f0'",
        )
    ),
]

_ENV_NAME = (
    "an environment variable name (letters, digits and '_', not starting with a digit, at "
    "most 128 characters)"
)
EnvName = Annotated[
    str, AfterValidator(_matching(r"[A-Za-z_][A-Za-z0-9_]{0,127}", _ENV_NAME, "'NCCL_DEBUG'"))
]

Port = Annotated[int, Field(ge=1, le=65535)]

# --------------------------------------------------------------------------- limits
# vLLM checks only that these numbers are positive (ModelConfig.max_model_len ge=-1,
# SchedulerConfig max_num_seqs / max_num_batched_tokens ge=1, ParallelConfig sizes ge=1,
# SpeculativeConfig.num_speculative_tokens gt=0). The upper bounds are what any model or
# machine deskside serves can hold, so a slip (an extra digit, 1e12) is refused at its key.
MAX_MODEL_LEN = 2**24  # 16,777,216 tokens, beyond the longest context any model ships
MAX_BATCHED_TOKENS = 2**24
MAX_NUM_SEQS = 65_536
MAX_SPECULATIVE_TOKENS = 32  # drafts past a few tokens are almost never accepted
MAX_NODES = 64
MAX_GPUS_PER_NODE = 16  # the most GPUs one machine carries (HGX/DGX-2 class)
MAX_RANKS = MAX_NODES * MAX_GPUS_PER_NODE
MAX_BYTES = 64 * TIB  # any memory or cache size
MAX_LIST = 256  # items of a list or mapping a user writes (extra_args, env, aliases)

# vLLM's CacheConfig typed block_size as Literal[1, 8, 16, 32, 64, 128, 256]; since then it
# takes any int > 0, and each attention backend's get_supported_kernel_block_sizes asks for a
# multiple of 16 (GPU kernels: FlashAttention, Triton, FlashInfer, FlexAttention) or of 32
# (CPU attention; CpuPlatform.check_and_update_config forces 16 for MLA). The sizes of that
# Literal every backend takes:
BLOCK_SIZES = (16, 32, 64, 128, 256)


def _check_block_size(value: int) -> int:
    if value in BLOCK_SIZES:
        return value
    sizes = ", ".join(str(size) for size in BLOCK_SIZES)
    raise refuse(
        f"block_size {value} is not one vLLM's attention backends take (one of {sizes})",
        "write one of " + sizes + ", or remove block_size to keep the backend's default",
    )


BlockSize = Annotated[
    int, AfterValidator(_check_block_size), WithJsonSchema({"enum": list(BLOCK_SIZES)})
]

_BYTES_PATTERN = r"^\s*([0-9]+(\.[0-9]*)?|\.[0-9]+)\s*([KkMmGgTtPp][Ii]?[Bb]?|[Bb])?\s*$"


def _to_bytes(value: object) -> object:
    """Before-validator for byte sizes: ints pass, strings like '1GiB' are parsed."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise refuse(
            "expected a byte size",
            "write a whole number of bytes or a size with a unit, e.g. '1GiB' or '512 MiB'",
        )
    try:
        return parse_bytes(value)
    except ValueError as exc:
        raise refuse(
            str(exc),
            "write a whole number of bytes or a size with a unit, e.g. '1GiB' or '512 MiB'",
        ) from None


def _byte_size_schema(minimum: int) -> dict[str, Any]:
    return {
        "anyOf": [
            {"type": "integer", "minimum": minimum, "maximum": MAX_BYTES},
            {"type": "string", "pattern": _BYTES_PATTERN},
        ]
    }


ByteSize = Annotated[
    int,
    BeforeValidator(_to_bytes),
    Field(ge=0, le=MAX_BYTES),
    WithJsonSchema(_byte_size_schema(0)),
]
PositiveByteSize = Annotated[
    int,
    BeforeValidator(_to_bytes),
    Field(ge=1, le=MAX_BYTES),
    WithJsonSchema(_byte_size_schema(1)),
]


def _to_max_model_len(value: object) -> object:
    if value == "auto" and isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise refuse(
                f"must be at least 1 token, got {value}",
                "write a context length in tokens (e.g. 204800) or 'auto'",
            )
        if value > MAX_MODEL_LEN:
            raise refuse(
                f"{value} tokens is longer than any model's context (at most {MAX_MODEL_LEN})",
                "write a context length in tokens (e.g. 204800) or 'auto'",
            )
        return value
    raise refuse(
        "expected a whole number of tokens or 'auto'",
        "write a context length in tokens (e.g. 204800), or 'auto' to let deskside plan it",
    )


MaxModelLen = Annotated[
    int | Literal["auto"],
    BeforeValidator(_to_max_model_len),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": MAX_MODEL_LEN},
                {"const": "auto"},
            ]
        }
    ),
]


def _check_hardware(value: str) -> str:
    if value in PROFILES:
        return value
    known = ", ".join(PROFILES)
    guess = did_you_mean(value, list(PROFILES))
    raise refuse(
        f"unknown hardware profile {value!r} (known: {known})",
        f"did you mean {guess!r}?" if guess else f"write one of the known profiles: {known}",
    )


HardwareName = Annotated[str, AfterValidator(_check_hardware)]


def _check_repo(value: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}", value):
        return value
    raise refuse(
        f"{value!r} is not a Hugging Face repository id",
        "write it as 'organisation/name', e.g. 'deepseek-ai/DeepSeek-V4-Flash-0731'",
    )


Repo = Annotated[str, AfterValidator(_check_repo)]


REVISION_HINT = (
    "pin the exact commit: copy the 40-character hash from the repository's 'Files and "
    "versions' → 'History' page, or run `git ls-remote https://huggingface.co/ORG/NAME "
    "refs/heads/main`"
)


def _check_revision(value: str) -> str:
    if re.fullmatch(r"[0-9a-f]{40}", value):
        return value
    if re.fullmatch(r"[0-9A-Fa-f]{40}", value):
        raise refuse(f"revision {value!r} must be written in lowercase", REVISION_HINT)
    raise refuse(
        f"revision {value!r} is not a commit hash: a revision must be a 40-character "
        "lowercase hex commit, not a branch or tag name (branches move, so the weights "
        "could change under you)",
        REVISION_HINT,
    )


Revision = Annotated[str, AfterValidator(_check_revision)]


_PROM_DURATION = re.compile(r"(?:[0-9]+(?:ms|s|m|h|d|w|y))+")


_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
MAX_SCRAPE_SECONDS = 86_400


def _check_duration(value: str) -> str:
    if len(value) <= 32 and _PROM_DURATION.fullmatch(value) and re.search(r"[1-9]", value):
        seconds = sum(
            int(number) * _DURATION_UNITS[unit]
            for number, unit in re.findall(r"([0-9]+)(ms|s|m|h|d|w|y)", value)
        )
        if seconds > MAX_SCRAPE_SECONDS:
            raise refuse(
                f"{value!r} is longer than a day",
                "Prometheus scrapes every few seconds; write e.g. '15s' or '1m'",
            )
        return value
    raise refuse(
        f"{value!r} is not a Prometheus duration",
        "write a number with a unit: ms, s, m, h, d, w or y, e.g. '15s' or '1m30s'",
    )


PromDuration = Annotated[str, AfterValidator(_check_duration)]

PinnedImage = Annotated[
    str,
    AfterValidator(
        _matching(
            r"(?!-)[!-~]{1,400}@sha256:[0-9a-f]{64}",
            "a container image pinned by digest (name:tag@sha256:<64 hex digits>)",
            "'prom/prometheus:v2.55.1@sha256:<digest>'",
        )
    ),
]
"""A container image pinned by digest: a tag can be re-pushed, a digest cannot."""


_SHM_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}


def _check_shm(value: str) -> str:
    match = re.fullmatch(r"([0-9]{1,20}(?:\.[0-9]{1,20})?) ?([kKmMgGtTpP]?)[iI]?[bB]?", value)
    if match and re.search(r"[1-9]", value):
        if float(match.group(1)) * _SHM_UNITS[match.group(2).lower()] > MAX_BYTES:
            raise refuse(
                f"{value!r} is more memory than any machine has (at most 64 TiB)",
                "write a size as Docker takes it, e.g. '64g' or '16384m'",
            )
        return value
    raise refuse(
        f"{value!r} is not a shared-memory size",
        "write a size as Docker takes it, e.g. '64g' or '16384m'",
    )


ShmSize = Annotated[str, AfterValidator(_check_shm)]

UserName = Annotated[
    str,
    AfterValidator(
        _matching(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}", "a user name", "'root' or 'ubuntu'")
    ),
]

SpeculativeMethod = Annotated[
    str,
    AfterValidator(
        _matching(r"[A-Za-z0-9_]{1,64}", "a speculative method name", "'mtp' or 'dspark'")
    ),
]


__all__ = [
    "BLOCK_SIZES",
    "MAX_BATCHED_TOKENS",
    "MAX_BYTES",
    "MAX_GPUS_PER_NODE",
    "MAX_LIST",
    "MAX_MODEL_LEN",
    "MAX_NODES",
    "MAX_NUM_SEQS",
    "MAX_RANKS",
    "MAX_SPECULATIVE_TOKENS",
    "MODEL_CONFIG",
    "REVISION_HINT",
    "AbsolutePath",
    "BlockSize",
    "ByteSize",
    "EnvName",
    "HardwareName",
    "HcaName",
    "HostAddress",
    "InterfaceName",
    "MaxModelLen",
    "NetnsName",
    "NoSpace",
    "NodeName",
    "PinnedImage",
    "Port",
    "PositiveByteSize",
    "PromDuration",
    "Repo",
    "Revision",
    "ShmSize",
    "Slug",
    "SpeculativeMethod",
    "UserName",
]
