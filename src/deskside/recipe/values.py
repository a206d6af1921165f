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
from deskside.units import parse_bytes

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

_ENV_NAME = "an environment variable name (letters, digits and '_', not starting with a digit)"
EnvName = Annotated[
    str, AfterValidator(_matching(r"[A-Za-z_][A-Za-z0-9_]*", _ENV_NAME, "'NCCL_DEBUG'"))
]

NoSpace = Annotated[
    str,
    AfterValidator(
        _matching(r"\S{1,256}", "a non-empty word without spaces", "'deepseek-v4-flash'")
    ),
]

AbsolutePath = Annotated[
    str,
    AfterValidator(
        _matching(r"/\S*", "an absolute path on the nodes (starting with '/')", "'/opt/deskside'")
    ),
]

Port = Annotated[int, Field(ge=1, le=65535)]

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
            {"type": "integer", "minimum": minimum},
            {"type": "string", "pattern": _BYTES_PATTERN},
        ]
    }


ByteSize = Annotated[
    int, BeforeValidator(_to_bytes), Field(ge=0), WithJsonSchema(_byte_size_schema(0))
]
PositiveByteSize = Annotated[
    int, BeforeValidator(_to_bytes), Field(ge=1), WithJsonSchema(_byte_size_schema(1))
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
        return value
    raise refuse(
        "expected a whole number of tokens or 'auto'",
        "write a context length in tokens (e.g. 204800), or 'auto' to let deskside plan it",
    )


MaxModelLen = Annotated[
    int | Literal["auto"],
    BeforeValidator(_to_max_model_len),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1}, {"const": "auto"}]}),
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


def _check_duration(value: str) -> str:
    if _PROM_DURATION.fullmatch(value) and re.search(r"[1-9]", value):
        return value
    raise refuse(
        f"{value!r} is not a Prometheus duration",
        "write a number with a unit: ms, s, m, h, d, w or y, e.g. '15s' or '1m30s'",
    )


PromDuration = Annotated[str, AfterValidator(_check_duration)]


def _check_shm(value: str) -> str:
    if re.fullmatch(r"[0-9]+(?:\.[0-9]+)? ?[kKmMgGtTpP]?[iI]?[bB]?", value) and re.search(
        r"[1-9]", value
    ):
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
    "MODEL_CONFIG",
    "REVISION_HINT",
    "AbsolutePath",
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
