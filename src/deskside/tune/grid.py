"""The grid of engine settings a tune enumerates: one axis per setting, by default the
recipe's own value and steps around it. Pure."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

from deskside.errors import UsageError
from deskside.hardware import HardwareProfile

# the settings a tune varies, in the order points are printed
AXES = (
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_dtype",
    "num_speculative_tokens",
    "gpu_memory_utilization",
)


@dataclass(frozen=True, order=True)
class Settings:
    """One point of the grid (None: the axis is not varied for this recipe)."""

    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_dtype: str
    num_speculative_tokens: int | None = None
    gpu_memory_utilization: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def key(self) -> str:
        """A stable text key (state files, tables)."""
        return ",".join(f"{k}={v}" for k, v in self.to_dict().items() if v is not None)


@dataclass(frozen=True)
class Grid:
    max_model_len: tuple[int, ...]
    max_num_seqs: tuple[int, ...]
    max_num_batched_tokens: tuple[int, ...]
    kv_cache_dtype: tuple[str, ...]
    num_speculative_tokens: tuple[int | None, ...] = (None,)
    gpu_memory_utilization: tuple[float | None, ...] = (None,)

    @property
    def size(self) -> int:
        return math.prod(len(getattr(self, name)) for name in AXES)

    def points(self) -> Iterator[Settings]:
        for values in itertools.product(*(getattr(self, name) for name in AXES)):
            yield Settings(*values)

    def to_dict(self) -> dict[str, list[Any]]:
        return {name: list(getattr(self, name)) for name in AXES}


@dataclass(frozen=True)
class Base:
    """The recipe's resolved values (from its own plan) the default steps surround."""

    max_model_len: int
    model_max_len: int  # the model's limit (max_position_embeddings)
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_dtype: str
    num_speculative_tokens: int | None
    gpu_memory_utilization: float | None  # None: not an axis (CPU, or explicit KV memory)


def _steps(value: int, factors: Sequence[float], low: int, high: int | None = None) -> list[int]:
    out = {max(low, round(value * f)) for f in factors}
    if high is not None:
        out = {min(v, high) for v in out}
    return sorted(out)


def gmu_ceiling(hw: HardwareProfile, floor: int | None) -> float:
    """The largest gpu_memory_utilization (in hundredths) that leaves the safety floor
    outside vLLM's budget on a unified-memory node."""
    floor = hw.safety_floor_bytes if floor is None else floor
    return math.floor((hw.total_bytes - floor) / hw.total_bytes * 100) / 100


def default_grid(base: Base, hw: HardwareProfile, floor: int | None) -> Grid:
    """The recipe's values and steps around them: context 1/4x..4x up to the model's
    limit (and the limit itself), sequences 1/2x..4x, batch budget 1/4x..2x, the recipe's
    KV dtype and its fp8 sibling, draft tokens -1..+1, and on unified-memory GPUs
    gpu_memory_utilization in 0.02 steps below the recipe's value, never past the floor."""
    lens = _steps(base.max_model_len, (0.25, 0.5, 1, 2, 4), 16, base.model_max_len)
    lens = sorted({*lens, base.model_max_len}) if base.model_max_len > lens[-1] else lens
    seqs = _steps(base.max_num_seqs, (0.5, 1, 1.5, 2, 4), 1)
    batched = _steps(base.max_num_batched_tokens, (0.25, 0.5, 1, 2), 16)
    sibling = "fp8_ds_mla" if base.kv_cache_dtype.endswith("_ds_mla") else "fp8"
    if base.kv_cache_dtype == sibling:
        sibling = "auto" if sibling == "fp8" else "nvfp4_ds_mla"
    dtypes = [base.kv_cache_dtype, sibling]
    spec: list[int | None] = [None]
    if base.num_speculative_tokens is not None:
        n = base.num_speculative_tokens
        spec = list(range(max(1, n - 1), n + 2))
    gmu: list[float | None] = [None]
    if base.gpu_memory_utilization is not None and hw.unified and hw.total_bytes > 0:
        g = base.gpu_memory_utilization
        top = min(g, gmu_ceiling(hw, floor))
        gmu = [*sorted({round(top - 0.02 * i, 2) for i in range(4)} | {round(g, 2)})]
    return Grid(tuple(lens), tuple(seqs), tuple(batched), tuple(dtypes), tuple(spec), tuple(gmu))


def parse_axis(text: str, flag: str, kind: type) -> tuple[Any, ...]:
    """A comma-separated list of values for one axis (`4096,8192`, `auto,fp8`, `0.8,0.82`)."""
    values: list[Any] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        value: Any
        try:
            value = kind(part.replace("_", "")) if kind is not str else part
        except ValueError:
            raise UsageError(
                f"{flag} takes comma-separated {kind.__name__} values, not {text!r}"
            ) from None
        if kind is int and value < 1:
            raise UsageError(f"{flag} needs positive values, not {text!r}")
        if kind is float and not 0 < value <= 1:
            raise UsageError(f"{flag} takes fractions in (0, 1], not {text!r}")
        values.append(value)
    if not values:
        raise UsageError(f"{flag} needs at least one value")
    return tuple(sorted(set(values)))
