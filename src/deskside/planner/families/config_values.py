"""Typed, bounded values of a parsed config.json: every number a family reads is an
integer (or a number) in a range, every flag a boolean, every name a short string, and an
error names the key, what it holds and what is expected:

    config.json: num_hidden_layers is 1000000000; expected 1 to 1000

A JSON null counts as a missing key, as transformers' configs treat it. A bool is never a
number (Python counts True as 1); a float is an integer only when it is whole (1e3 reads
as 1000). Pure: takes the parsed JSON.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from deskside.errors import ModelConfigError

_REQUIRED: Final = object()
_SAFE_TEXT = re.compile(r"[A-Za-z0-9_.+\-/ ]{0,60}")
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}")


class ConfigValueError(ModelConfigError):
    """A config.json value of the wrong type, out of range or inconsistent. `key` is its
    place in the file ("num_hidden_layers", "rope_scaling.factor", "compress_ratios[3]")."""

    def __init__(self, key: str, problem: str, hint: str | None = None) -> None:
        super().__init__(f"config.json: {key} {problem}", hint=hint)
        self.key = key
        self.problem = problem

    def under(self, prefix: str) -> ConfigValueError:
        """The same error for a key read inside `prefix` (e.g. "text_config")."""
        return ConfigValueError(f"{prefix}.{self.key}", self.problem, self.hint)


def show(value: object) -> str:
    """A short rendering of a config value for a message: numbers as written, short
    plain strings quoted, anything else by its kind (never a long or unprintable text)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if abs(value) < 10**40:
            return str(value)
        digits = len(str(abs(value)))
        return f"a {'negative ' if value < 0 else ''}{digits}-digit number"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if value.is_integer() and abs(value) < 1e40:
            return str(int(value))
        return repr(value)
    if isinstance(value, str):
        if _SAFE_TEXT.fullmatch(value):
            return repr(value)
        return f"a string of {len(value)} characters"
    if isinstance(value, Mapping):
        return f"an object of {len(value)} keys"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)} items"
    return f"a {type(value).__name__}"


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return show(value)


def as_int(key: str, value: object) -> int:
    """`value` as an integer (a whole float counts), or a ConfigValueError naming `key`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigValueError(key, f"is {_kind(value)}; expected an integer")
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise ConfigValueError(key, f"is {show(value)}; expected an integer")
        return int(value)
    return value


def _range(lo: int | float, hi: int | float, note: str | None) -> str:
    text = f"expected {show(lo)} to {show(hi)}"
    return f"{text} ({note})" if note else text


def integer(
    cfg: Mapping[str, Any],
    key: str,
    lo: int,
    hi: int,
    default: Any = _REQUIRED,
    *,
    prefix: str = "",
    note: str | None = None,
) -> Any:
    """cfg[key] as an integer in [lo, hi]; `default` when missing or null (returned as
    is, unchecked), or an error naming the key when there is no default."""
    name = f"{prefix}{key}"
    value = cfg.get(key)
    if value is None:
        if default is _REQUIRED:
            raise ConfigValueError(
                name,
                "is missing" if key not in cfg else "is null",
                hint="deskside needs it to size the model and its KV cache; is this a causal "
                "LM config?",
            )
        return default
    n = as_int(name, value)
    if not lo <= n <= hi:
        raise ConfigValueError(name, f"is {show(value)}; {_range(lo, hi, note)}")
    return n


def number(
    cfg: Mapping[str, Any],
    key: str,
    lo: float,
    hi: float,
    default: Any = _REQUIRED,
    *,
    prefix: str = "",
) -> Any:
    """cfg[key] as a finite number with lo < value <= hi (`default` when missing or null)."""
    name = f"{prefix}{key}"
    value = cfg.get(key)
    if value is None:
        if default is _REQUIRED:
            raise ConfigValueError(name, "is missing")
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigValueError(name, f"is {_kind(value)}; expected a number")
    if not (math.isfinite(value) and lo < value <= hi):
        raise ConfigValueError(
            name, f"is {show(value)}; expected more than {show(lo)}, at most {show(hi)}"
        )
    return float(value)


def flag(cfg: Mapping[str, Any], key: str, default: bool, *, prefix: str = "") -> bool:
    """cfg[key] as a boolean (true/false in JSON; `default` when missing or null)."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigValueError(f"{prefix}{key}", f"is {show(value)}; expected true or false")
    return value


def text(
    cfg: Mapping[str, Any], key: str, default: Any = None, *, prefix: str = "", name: bool = False
) -> Any:
    """cfg[key] as a string (`default` when missing or null); with `name`, a short
    identifier (letters, digits, `_.-`) such as a class, a model type or a dtype."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ConfigValueError(f"{prefix}{key}", f"is {_kind(value)}; expected a string")
    if name and not _NAME.fullmatch(value):
        raise ConfigValueError(
            f"{prefix}{key}",
            f"is {show(value)}; expected a name of letters, digits, '_', '.' or '-' "
            "(at most 200 characters)",
        )
    return value


def mapping(cfg: Mapping[str, Any], key: str, *, prefix: str = "") -> Mapping[str, Any] | None:
    """cfg[key] as a JSON object, or None when missing or null."""
    value = cfg.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConfigValueError(f"{prefix}{key}", f"is {_kind(value)}; expected an object")
    return value


def items(
    cfg: Mapping[str, Any], key: str, at_least: int, what: str, *, prefix: str = ""
) -> Sequence[Any] | None:
    """cfg[key] as a list of at least `at_least` entries (`what` says why), or None when
    missing or null. The entries are the caller's to check."""
    value = cfg.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise ConfigValueError(f"{prefix}{key}", f"is {_kind(value)}; expected a list")
    if len(value) < at_least:
        raise ConfigValueError(
            f"{prefix}{key}",
            f"has {len(value)} entries; expected at least {at_least} ({what})",
        )
    return value


def entry_in(key: str, index: int, value: object, allowed: Sequence[object]) -> Any:
    """One list entry that must be one of `allowed` (integers compared as integers)."""
    name = f"{key}[{index}]"
    if any(isinstance(a, int) for a in allowed):
        value = as_int(name, value)
    if value not in allowed:
        choices = ", ".join(show(a) for a in allowed)
        raise ConfigValueError(name, f"is {show(value)}; expected one of {choices}")
    return value


def divisible(key: str, value: int, by_key: str, by: int) -> None:
    """`value` (of `key`) must be a multiple of `by` (of `by_key`)."""
    if by < 1 or value % by:
        raise ConfigValueError(
            key,
            f"is {value}, not a multiple of {by_key} ({by})",
            hint=f"{key} must divide evenly by {by_key}; check both values",
        )


def positive_quotient(key: str, value: int, by_key: str, by: int) -> int:
    """value // by, which must be at least 1 (e.g. hidden_size // num_attention_heads)."""
    quotient = value // by if by >= 1 else 0
    if quotient < 1:
        raise ConfigValueError(
            key,
            f"is {value}, smaller than {by_key} ({by}): the head size would be 0",
            hint="set head_dim, or check hidden_size and num_attention_heads",
        )
    return quotient


def sub_config_reader(
    values: Mapping[str, Any], defaults: Mapping[str, int], prefix: str
) -> Callable[[str, int], int]:
    """read(key, hi): `values[key]` as an integer in [1, hi], the config class's default
    when it is missing; errors name the key after `prefix` (e.g. "vision_config.")."""

    def read(key: str, hi: int) -> int:
        return int(integer(values, key, 1, hi, defaults[key], prefix=prefix))

    return read
