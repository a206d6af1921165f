"""Reading a model's config.json from disk, bounded: a regular file only (a FIFO, a device
or a folder is refused without waiting on it), at most MAX_CONFIG_BYTES, UTF-8 JSON
nested at most MAX_JSON_DEPTH deep, with finite numbers only (NaN, Infinity and 1e999 are
refused). Every refusal is a ModelConfigError that names the file and says how to fix it.

`located` turns a value error found later (ConfigValueError, which names a key) into one
that also names the file.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from deskside.errors import Location, ModelConfigError
from deskside.planner.bounds import MAX_CONFIG_BYTES, MAX_JSON_DEPTH
from deskside.planner.families.config_values import ConfigValueError

_FIX = "point --model-dir (or the recipe's model) at a model folder with a valid config.json"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_bytes(path: Path, limit: int = MAX_CONFIG_BYTES) -> bytes:
    """The bytes of `path`, a regular file (links followed) of at most `limit` bytes.
    Opened non-blocking, so a FIFO or a device is refused at once instead of waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ModelConfigError(f"{path}: no such file", hint="point at a model folder") from None
    except OSError as exc:
        raise ModelConfigError(f"{path}: cannot read it ({exc.strerror})", hint=_FIX) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ModelConfigError(
                f"{path}: is {_kind(info.st_mode)}; expected a regular config.json file",
                hint=_FIX,
            )
        if info.st_size > limit:
            raise ModelConfigError(
                f"{path}: is {info.st_size:,} bytes; a config.json is at most {limit:,}",
                hint="this is not a model config; " + _FIX,
            )
        with os.fdopen(fd, "rb", closefd=True) as f:
            fd = -1
            data = f.read(limit + 1)
    except OSError as exc:
        raise ModelConfigError(f"{path}: cannot read it ({exc.strerror})", hint=_FIX) from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:
        raise ModelConfigError(
            f"{path}: is over {limit:,} bytes; a config.json is at most {limit:,}", hint=_FIX
        )
    return data


def json_depth(value: object, limit: int = MAX_JSON_DEPTH) -> int:
    """How deep objects and lists nest in a parsed JSON value (1 for a flat object),
    counted without recursion; stops counting past `limit`."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_config(data: bytes, path: Path) -> dict[str, Any]:
    """The JSON object in `data` (the bytes of `path`), bounded in depth, numbers finite."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ModelConfigError(f"{path}: is not UTF-8 text (byte {exc.start})", hint=_FIX) from None
    try:
        parsed = json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ModelConfigError(
            f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})",
            hint="fix the JSON syntax at that place",
        ) from None
    except RecursionError:
        raise _too_deep(path, None) from None
    except ValueError as exc:
        # _finite, _no_constant, and Python's limit on the digits of an integer
        raise ModelConfigError(
            f"{path}: not valid JSON ({str(exc)[:120]})",
            hint="numbers in a config.json are finite and of reasonable size",
        ) from None
    if not isinstance(parsed, dict):
        raise ModelConfigError(f"{path}: config.json must be a JSON object", hint=_FIX)
    if (depth := json_depth(parsed)) > MAX_JSON_DEPTH:
        raise _too_deep(path, depth)
    return parsed


def _too_deep(path: Path, depth: int | None) -> ModelConfigError:
    deep = f"{depth} deep" if depth is not None else "too deep to read"
    return ModelConfigError(
        f"{path}: nests objects and lists {deep}; a config.json nests at most {MAX_JSON_DEPTH}",
        hint="this is not a model config; " + _FIX,
    )


def read_config_json(path: Path) -> dict[str, Any]:
    """The parsed config.json at `path`, read bounded (see the module docstring)."""
    return parse_config(read_bytes(path), path)


def located(exc: ModelConfigError, path: Path | str) -> ModelConfigError:
    """`exc` naming the file it is about (and the key, for a ConfigValueError)."""
    if exc.location is not None:
        return exc
    if isinstance(exc, ConfigValueError):
        return ModelConfigError(
            f"{exc.key} {exc.problem}",
            hint=exc.hint or f"fix {exc.key} in {Path(path).name}, or plan another model",
            location=Location(str(path), field=exc.key),
        )
    return ModelConfigError(exc.message, hint=exc.hint, location=Location(str(path)))
