"""Open-loop schedules (pure): Poisson gaps average 1 / rate for a seed, constant gaps are
exact, counts and durations bound the schedule; the synthetic server's prefix cache."""

from __future__ import annotations

import statistics
from itertools import pairwise

import pytest

from deskside.bench.arrivals import arrival_times, schedule_rate
from deskside.bench.synthetic_cache import PrefixCache


def test_constant_schedule_is_exact() -> None:
    times = arrival_times(20.0, "constant", count=100)
    assert times == [i / 20.0 for i in range(100)]
    assert schedule_rate(times) == pytest.approx(20.0, rel=1e-12)
    assert arrival_times(4.0, "constant", duration_s=1.0) == [0.0, 0.25, 0.5, 0.75]
    # the shorter of count and duration
    assert len(arrival_times(4.0, "constant", count=2, duration_s=10.0)) == 2
    assert len(arrival_times(4.0, "constant", count=100, duration_s=1.0)) == 4


@pytest.mark.parametrize("seed", [0, 1, "run-7"])
def test_poisson_gaps_average_one_over_rate(seed: object) -> None:
    times = arrival_times(20.0, "poisson", count=20_000, seed=seed)
    gaps = [b - a for a, b in pairwise(times)]
    assert times[0] == 0.0 and all(g >= 0 for g in gaps)
    # 20,000 exponential gaps: the mean's standard error is 0.7 % of 1/rate
    assert statistics.fmean(gaps) == pytest.approx(1 / 20.0, rel=0.03)
    # exponential: the standard deviation equals the mean (constant gaps would give 0)
    assert statistics.stdev(gaps) == pytest.approx(1 / 20.0, rel=0.05)


def test_poisson_is_a_pure_function_of_the_seed() -> None:
    a = arrival_times(5.0, "poisson", duration_s=30.0, seed=42)
    assert a == arrival_times(5.0, "poisson", duration_s=30.0, seed=42)
    assert a != arrival_times(5.0, "poisson", duration_s=30.0, seed=43)
    assert max(a) < 30.0


def test_bad_schedules_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        arrival_times(0.0, "constant", count=3)
    with pytest.raises(ValueError, match="count or a duration"):
        arrival_times(1.0, "poisson")
    with pytest.raises(ValueError, match="arrivals must be"):
        arrival_times(1.0, "bursty", count=3)  # type: ignore[arg-type]
    assert schedule_rate([1.0]) is None and schedule_rate([]) is None


def test_prefix_cache_counts_whole_blocks_of_the_longest_common_prefix() -> None:
    cache = PrefixCache(4)
    first = list("abcdefghij")  # 10 tokens: blocks abcd, efgh cached
    assert cache.admit(first) == 0
    assert cache.admit(first) == 8  # the same prompt: at most n - 1 = 9, in whole blocks
    assert cache.admit(list("abcdefgXYZ")) == 4  # diverges inside the second block
    assert cache.admit(list("abcdefghijklmnop")) == 8  # a longer prompt: the shared blocks
    assert cache.lookup(list("abcdefghijklmnop")) == 12  # its own blocks now too (< 16 - 1)
    assert cache.admit(list("zbcdefgh")) == 0  # block hashes chain: no hit after a miss
    assert cache.lookup(list("abcd")) == 0  # a 4-token prompt computes its last token
