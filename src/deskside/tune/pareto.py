"""The Pareto frontier of planned points. Pure.

Among the points that start, a point is on the frontier when no other point of the same
speed settings (KV dtype, batch budget, draft tokens: what only a benchmark can judge) is
at least as good in every one of: context (max_model_len), sequences at once
(max_num_seqs), full-length requests the KV cache holds at once (vLLM's maximum
concurrency) and headroom, and better in one. Settings that cost no memory are pushed to
their largest value; settings that cost memory stay where they trade against another."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from deskside.tune.points import Point

SPEED_AXES = ("kv_cache_dtype", "max_num_batched_tokens", "num_speculative_tokens")


def objectives(p: Point) -> tuple[float, ...]:
    return (
        float(p.max_model_len),
        float(p.settings["max_num_seqs"]),
        p.max_concurrency,
        float(p.headroom_bytes),
    )


def speed_key(p: Point) -> tuple[object, ...]:
    return tuple(p.settings.get(k) for k in SPEED_AXES)


def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x >= y for x, y in zip(a, b, strict=True)) and a != b


def frontier_flags(points: Sequence[Point]) -> list[bool]:
    """Whether each point is on the frontier (a point that does not start never is)."""
    groups: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for i, p in enumerate(points):
        if p.fits:
            groups[speed_key(p)].append(i)
    flags = [False] * len(points)
    for members in groups.values():
        # sort by the objectives, best first: a point can only be dominated by one before it
        ordered = sorted(members, key=lambda i: objectives(points[i]), reverse=True)
        kept: list[tuple[float, ...]] = []
        for i in ordered:
            o = objectives(points[i])
            if not any(dominates(k, o) for k in kept):
                kept.append(o)
                flags[i] = True
    return flags


def mark_frontier(points: list[Point]) -> list[Point]:
    for p, on in zip(points, frontier_flags(points), strict=True):
        p.frontier = on
    return points
