"""Properties of the wedge classifier over generated sequences of looks."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from deskside.survive.classify import DOWN, WEDGED, Observations, classify
from deskside.survive.observe import (
    STOPPED_STATES,
    EngineSample,
    Probe,
    ProcessSample,
    Thresholds,
    latest_processes,
)

STATES = st.sampled_from(["R", "S", "D", "T"])


@st.composite
def observations(draw: st.DrawFn) -> Observations:
    n = draw(st.integers(min_value=1, max_value=15))
    step = draw(st.floats(min_value=1.0, max_value=30.0))
    engine = []
    tokens = 0.0
    for i in range(n):
        tokens += draw(st.sampled_from([0.0, 0.0, 5.0]))
        engine.append(
            EngineSample(
                at=i * step,
                up=True,
                running=draw(st.sampled_from([0.0, 1.0, 3.0])),
                generation_tokens=tokens,
                prompt_tokens=100.0,
                engine_steps=10.0,
                finished_requests=draw(st.sampled_from([0.0, 4.0])),
            )
        )
    processes = []
    for node, pid in (("ai1", 1), ("ai2", 2)):
        cpu = 0.0
        for i in range(n):
            cpu += draw(st.sampled_from([0.0, 0.5, step]))
            processes.append(
                ProcessSample(
                    at=i * step,
                    node=node,
                    role="head" if node == "ai1" else "worker",
                    pid=pid,
                    alive=True,
                    state=draw(STATES),
                    cpu_seconds=cpu,
                    log_silent_seconds=draw(st.sampled_from([1.0, 500.0])),
                )
            )
    probe = draw(st.one_of(st.none(), st.builds(Probe, st.floats(0, n * step))))
    return Observations(
        now=(n - 1) * step, engine=engine, processes=processes, probe=probe, ever_ready=True
    )


@settings(max_examples=200, deadline=None)
@given(observations(), st.floats(min_value=5.0, max_value=300.0))
def test_wedged_means_stalled_past_the_threshold(obs: Observations, threshold: float) -> None:
    limits = Thresholds(stall_seconds=threshold)
    v = classify(obs, limits)
    latest = latest_processes(obs.processes).values()
    if any(p.state in STOPPED_STATES for p in latest):  # a stopped rank: the shorter limit
        threshold = min(threshold, limits.stopped_seconds)
    if v.state == WEDGED:
        assert v.stalled_seconds is not None and v.stalled_seconds >= threshold
        assert v.reasons and v.reasons[0].startswith("wedged:")


@settings(max_examples=200, deadline=None)
@given(observations())
def test_idle_is_never_wedged(obs: Observations) -> None:
    idle = [EngineSample(at=s.at, up=True, running=0.0, generation_tokens=0.0) for s in obs.engine]
    v = classify(Observations(now=obs.now, engine=idle, processes=obs.processes, ever_ready=True))
    assert v.state != WEDGED


@settings(max_examples=200, deadline=None)
@given(observations())
def test_tokens_within_the_threshold_are_never_a_wedge(obs: Observations) -> None:
    moving = [
        EngineSample(at=s.at, up=True, running=1.0, generation_tokens=s.at) for s in obs.engine
    ]
    v = classify(Observations(now=obs.now, engine=moving, processes=obs.processes, ever_ready=True))
    assert v.state != WEDGED and v.state != DOWN


@settings(max_examples=100, deadline=None)
@given(observations(), st.randoms(use_true_random=False))
def test_the_order_of_the_samples_does_not_matter(obs: Observations, rnd: random.Random) -> None:
    engine, processes = list(obs.engine), list(obs.processes)
    rnd.shuffle(engine)
    rnd.shuffle(processes)
    shuffled = Observations(obs.now, engine, processes, obs.probe, obs.ever_ready)
    assert classify(shuffled) == classify(obs)


@settings(max_examples=100, deadline=None)
@given(observations())
def test_suspects_are_observed_nodes(obs: Observations) -> None:
    assert set(classify(obs).suspects) <= {"ai1", "ai2"}
