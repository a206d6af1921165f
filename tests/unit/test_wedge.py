"""Wedge detection on recorded sequences: a look every 10 s at a two-node TP=2 cluster (the
head's API server + rank 0 on ai1, rank 1 on ai2), as the status loop would record it."""

from __future__ import annotations

from collections.abc import Callable

from deskside.survive.classify import (
    DEGRADED,
    DOWN,
    READY,
    STARTING,
    WEDGED,
    Observations,
    classify,
)
from deskside.survive.observe import EngineSample, Probe, ProcessSample, Thresholds

STEP = 10.0
Proc = Callable[[float], ProcessSample]


def rank(
    node: str,
    pid: int,
    cpu_rate: float = 1.0,
    state: str = "R",
    log_silent: float | None = 2.0,
    alive: bool = True,
    role: str | None = None,
    name: str | None = None,
    computes: bool = True,
) -> Proc:
    """A process that burns `cpu_rate` cores and whose log grew `log_silent` s ago."""

    def at(t: float) -> ProcessSample:
        return ProcessSample(
            at=t,
            node=node,
            role=role or ("head" if node == "ai1" else "worker"),
            pid=pid,
            alive=alive,
            state=state,
            cpu_seconds=1000.0 + cpu_rate * t,
            log_silent_seconds=log_silent,
            name=name,
            computes=computes,
        )

    return at


def record(
    seconds: float,
    procs: list[Proc],
    running: Callable[[float], float] = lambda t: 1.0,
    tokens: Callable[[float], float] = lambda t: 500.0,
    prompt: Callable[[float], float] = lambda t: 2000.0,
    steps: Callable[[float], float] = lambda t: 300.0,
    finished: float = 12.0,
    waiting: float = 0.0,
    accepted: Callable[[float], float | None] = lambda t: None,
) -> tuple[list[EngineSample], list[ProcessSample]]:
    """Looks at 0, 10, ... `seconds`."""
    engine: list[EngineSample] = []
    processes: list[ProcessSample] = []
    t = 0.0
    while t <= seconds + 1e-9:
        engine.append(
            EngineSample(
                at=t,
                up=True,
                running=running(t),
                waiting=waiting,
                generation_tokens=tokens(t),
                prompt_tokens=prompt(t),
                engine_steps=steps(t),
                finished_requests=finished,
                accepted=accepted(t),
            )
        )
        processes += [p(t) for p in procs]
        t += STEP
    return engine, processes


def api_server() -> Proc:
    # the API server idles while the ranks work: its CPU time is not compared with theirs
    return rank("ai1", 100, cpu_rate=0.001, state="S", name="API server", computes=False)


def healthy() -> list[Proc]:
    return [api_server(), rank("ai1", 101), rank("ai2", 200)]


def test_sigstopped_worker_is_wedged_and_named() -> None:
    procs = [
        api_server(),
        rank("ai1", 101, name="VllmWorker TP0"),
        rank("ai2", 200, cpu_rate=0.0, state="T", log_silent=90.0, name="VllmWorker TP1"),
    ]
    engine, processes = record(90, procs)
    v = classify(Observations(now=90, engine=engine, processes=processes, ever_ready=True))
    assert v.state == WEDGED
    assert v.suspects == ("ai2",)
    assert v.stalled_seconds == 90
    assert v.reasons[0].startswith("wedged: no token generated for 90 s while 1 request(s) run")
    text = "\n".join(v.reasons)
    assert "ai2 (worker): VllmWorker TP1 (pid 200) is stopped (state T)" in text
    assert "kill -CONT 200" in text
    assert "no log line for 90 s" in text
    assert "ai1" not in v.suspects


def test_rank_with_flat_cpu_while_the_other_spins_is_named() -> None:
    # an NCCL hang: rank 0 spins in its collective, rank 1 sleeps on something else
    procs = [api_server(), rank("ai1", 101), rank("ai2", 200, cpu_rate=0.0, state="S")]
    engine, processes = record(120, procs)
    v = classify(Observations(now=120, engine=engine, processes=processes, ever_ready=True))
    assert v.state == WEDGED and v.suspects == ("ai2",)
    assert "CPU time flat for 60 s while other ranks' advances" in v.reasons[1]


def test_uninterruptible_sleep_over_the_window_is_named() -> None:
    procs = [rank("ai1", 101), rank("ai2", 200, cpu_rate=0.0, state="D")]
    engine, processes = record(70, procs)
    v = classify(Observations(now=70, engine=engine, processes=processes, ever_ready=True))
    assert v.state == WEDGED and v.suspects == ("ai2",)
    assert "uninterruptible sleep (state D)" in v.reasons[1]


def test_every_rank_spinning_is_wedged_without_a_suspect() -> None:
    engine, processes = record(80, healthy())
    v = classify(Observations(now=80, engine=engine, processes=processes, ever_ready=True))
    assert v.state == WEDGED and v.suspects == ()
    assert "every process burns CPU" in v.reasons[1]


def test_probe_in_flight_counts_as_demand() -> None:
    procs = [rank("ai1", 101), rank("ai2", 200, state="T", cpu_rate=0.0)]
    engine, processes = record(100, procs, running=lambda t: 0.0)
    obs = Observations(
        now=100, engine=engine, processes=processes, probe=Probe(30.0), ever_ready=True
    )
    v = classify(obs)
    assert v.state == WEDGED and v.stalled_seconds == 70
    assert "deskside's probe waits" in v.reasons[0]


def test_long_prefill_of_a_known_prompt_is_busy_not_wedged() -> None:
    engine, processes = record(120, healthy())
    probe = Probe(0.0, prompt_tokens=100_000)  # 1000 s at the slowest prefill rate
    obs = Observations(now=120, engine=engine, processes=processes, probe=probe, ever_ready=True)
    v = classify(obs)
    assert v.state == READY
    assert v.reasons[0].startswith("busy: long prefill: a prompt of 100,000 tokens")
    # past the slowest rate's time for that prompt, it is a wedge
    engine, processes = record(1000, healthy())
    obs = Observations(now=1000, engine=engine, processes=processes, probe=probe, ever_ready=True)
    assert classify(obs).state == WEDGED


def test_long_running_prompt_known_from_the_proxy() -> None:
    engine, processes = record(120, healthy())
    obs = Observations(
        now=120,
        engine=engine,
        processes=processes,
        ever_ready=True,
        running_prompt_tokens=200_000,
    )
    assert classify(obs).state == READY


def test_long_prefill_with_a_stopped_rank_is_still_wedged() -> None:
    procs = [rank("ai1", 101), rank("ai2", 200, state="T", cpu_rate=0.0)]
    engine, processes = record(120, procs)
    obs = Observations(
        now=120, engine=engine, processes=processes, probe=Probe(0.0, 100_000), ever_ready=True
    )
    assert classify(obs).state == WEDGED


def test_prompt_counter_moving_is_a_prefill() -> None:
    engine, processes = record(120, healthy(), prompt=lambda t: 2000.0 + 10 * t)
    v = classify(Observations(now=120, engine=engine, processes=processes, ever_ready=True))
    assert v.state == READY and v.reasons[0].startswith("busy: long prefill")


def test_engine_steps_moving_is_not_a_wedge() -> None:
    engine, processes = record(120, healthy(), steps=lambda t: 300.0 + t)
    v = classify(Observations(now=120, engine=engine, processes=processes, ever_ready=True))
    assert v.state == READY and "the engine still steps" in v.reasons[0]


def test_first_request_autotune_is_starting() -> None:
    engine, processes = record(300, healthy(), tokens=lambda t: 0.0, finished=0.0)
    v = classify(Observations(now=300, engine=engine, processes=processes, ever_ready=True))
    assert v.state == STARTING
    assert "kernels compile or autotune" in v.reasons[0]


def test_first_request_with_a_silent_log_is_wedged() -> None:
    procs = [rank("ai1", 101, log_silent=300.0), rank("ai2", 200, log_silent=300.0)]
    engine, processes = record(300, procs, tokens=lambda t: 0.0, finished=0.0)
    v = classify(Observations(now=300, engine=engine, processes=processes, ever_ready=True))
    assert v.state == WEDGED


def test_start_up_autotune_is_starting() -> None:
    engine, processes = record(300, healthy(), running=lambda t: 0.0, tokens=lambda t: 0.0)
    v = classify(Observations(now=300, engine=engine, processes=processes, ever_ready=False))
    assert v.state == STARTING
    assert v.reasons[0].startswith("busy: starting")


def test_start_up_without_an_api_and_silent_flat_ranks() -> None:
    procs = [rank("ai1", 101, cpu_rate=0.0, log_silent=400.0, state="S")]
    _, processes = record(300, procs)
    v = classify(Observations(now=300, processes=processes, ever_ready=False))
    assert v.state == STARTING
    assert "it may be stuck" in v.reasons[-1]


def test_idle_is_ready() -> None:
    procs = [rank("ai1", 101, cpu_rate=0.002, state="S"), rank("ai2", 200, 0.0, state="S")]
    engine, processes = record(600, procs, running=lambda t: 0.0)
    v = classify(Observations(now=600, engine=engine, processes=processes, ever_ready=True))
    assert v == type(v)(READY)


def test_idle_with_a_stopped_rank_is_degraded() -> None:
    procs = [rank("ai1", 101, state="S"), rank("ai2", 200, 0.0, state="T")]
    engine, processes = record(600, procs, running=lambda t: 0.0)
    v = classify(Observations(now=600, engine=engine, processes=processes, ever_ready=True))
    assert v.state == DEGRADED and v.suspects == ("ai2",)
    assert v.reasons[-1] == "the next request will hang"


def test_a_request_sent_after_a_rank_froze_is_a_wedge() -> None:
    """A worker stopped while idle, then one request: the engine core blocks in its
    collective and its counters stop (num_requests_running still 0); the API server holds
    the request (its /load). Idle the verdict is DEGRADED; with the request it is WEDGED
    after the stopped threshold, naming the worker."""
    procs = [api_server(), rank("ai1", 101, state="S"), rank("ai2", 200, 0.0, state="T")]

    def accepted(t: float) -> float:
        return 1.0 if t >= 600 else 0.0

    zero = lambda t: 0.0  # noqa: E731
    engine, processes = record(590, procs, running=zero, accepted=accepted)
    v = classify(Observations(now=590, engine=engine, processes=processes, ever_ready=True))
    assert v.state == DEGRADED and v.reasons[-1] == "the next request will hang"
    engine, processes = record(610, procs, running=zero, accepted=accepted)
    v = classify(Observations(now=610, engine=engine, processes=processes, ever_ready=True))
    assert v.state == WEDGED and v.suspects == ("ai2",)
    assert v.stalled_seconds == 10
    assert v.reasons[0].startswith(
        "wedged: no token generated for 10 s while 1 request(s) accepted by the API server "
        "wait for the engine"
    )
    assert "ai2 (worker): pid 200 is stopped (state T)" in "\n".join(v.reasons)


def test_a_request_held_by_the_api_with_every_rank_alive_wedges_after_the_stall() -> None:
    """No process stopped, the core's counters still, the API server holding a request:
    the ordinary stall threshold applies (60 s), and no suspect stands out."""
    flat = [api_server(), rank("ai1", 101, 0.0, state="S"), rank("ai2", 200, 0.0, state="S")]
    engine, processes = record(
        100, flat, running=lambda t: 0.0, accepted=lambda t: 1.0 if t >= 40 else 0.0
    )
    v = classify(Observations(now=100, engine=engine, processes=processes, ever_ready=True))
    assert v.state == WEDGED and v.stalled_seconds == 60
    engine, processes = record(
        90, flat, running=lambda t: 0.0, accepted=lambda t: 1.0 if t >= 40 else 0.0
    )
    v = classify(Observations(now=90, engine=engine, processes=processes, ever_ready=True))
    assert v.state == READY and v.stalled_seconds == 50


def test_tokens_flowing_is_ready() -> None:
    engine, processes = record(600, healthy(), tokens=lambda t: 500.0 + 30 * t)
    v = classify(Observations(now=600, engine=engine, processes=processes, ever_ready=True))
    assert v.state == READY and v.reasons == ()


def test_every_process_gone_is_down() -> None:
    procs = [rank("ai1", 101, alive=False), rank("ai2", 200, alive=False)]
    engine, processes = record(30, procs)
    v = classify(Observations(now=30, engine=engine, processes=processes, ever_ready=True))
    assert v.state == DOWN and v.suspects == ("ai1", "ai2")


def test_one_node_gone_is_degraded() -> None:
    procs = [rank("ai1", 101), rank("ai2", 200, alive=False)]
    engine, processes = record(30, procs)
    v = classify(Observations(now=30, engine=engine, processes=processes, ever_ready=True))
    assert v.state == DEGRADED and v.reasons == ("ai2 (worker): pid 200 exited",)


def test_a_zombie_rank_counts_as_gone() -> None:
    procs = [rank("ai1", 101), rank("ai2", 200, state="Z")]
    engine, processes = record(30, procs)
    v = classify(Observations(now=30, engine=engine, processes=processes, ever_ready=True))
    assert v.state == DEGRADED and "zombie" in v.reasons[0]


def test_api_silent_after_ready_is_degraded() -> None:
    _, processes = record(30, healthy())
    obs = Observations(
        now=30, engine=[EngineSample(at=30, up=False)], processes=processes, ever_ready=True
    )
    assert classify(obs) == type(classify(obs))(DEGRADED, ("the engine API does not answer",))


def _stalled_at(now: float, threshold: float, state: str = "S") -> str:
    procs = [rank("ai1", 101), rank("ai2", 200, state=state, cpu_rate=0.0)]
    engine, processes = record(now, procs, tokens=lambda t: 500.0 if t < 20 else 510.0)
    obs = Observations(now=now, engine=engine, processes=processes, ever_ready=True)
    return classify(obs, Thresholds(stall_seconds=threshold, stopped_seconds=15)).state


def test_threshold_boundary() -> None:
    # the last token came at t=20: 60 s later is the threshold (a rank with flat CPU time)
    assert _stalled_at(70, 60) == READY
    assert _stalled_at(80, 60) == WEDGED
    assert _stalled_at(80, 61) == READY
    assert _stalled_at(80, 60.0) == WEDGED


def test_a_stopped_rank_wedges_after_the_shorter_threshold() -> None:
    # the same stall with the rank stopped (T): 15 s suffice
    assert _stalled_at(30, 60, state="T") == READY
    assert _stalled_at(35, 60, state="T") == WEDGED
    assert _stalled_at(35, 60, state="S") == READY


def test_stall_clock_starts_when_requests_start() -> None:
    # the counter has been still for long, but requests only run since t=50
    engine, processes = record(100, healthy(), running=lambda t: 1.0 if t >= 50 else 0.0)
    v = classify(Observations(now=100, engine=engine, processes=processes, ever_ready=True))
    assert v.state == READY and v.stalled_seconds == 50
    engine, processes = record(110, healthy(), running=lambda t: 1.0 if t >= 50 else 0.0)
    v = classify(Observations(now=110, engine=engine, processes=processes, ever_ready=True))
    assert v.state == WEDGED and v.stalled_seconds == 60


def test_an_engine_restart_resets_the_clock() -> None:
    engine, processes = record(100, healthy(), tokens=lambda t: 500.0 if t < 80 else 0.0)
    v = classify(Observations(now=100, engine=engine, processes=processes, ever_ready=True))
    assert v.state == READY and v.stalled_seconds == 20


def test_no_token_counter_is_never_called_a_wedge() -> None:
    procs = [rank("ai1", 101), rank("ai2", 200, state="T", cpu_rate=0.0)]
    _, processes = record(120, procs)
    engine = [EngineSample(at=t, up=True, running=1.0) for t in range(0, 121, 10)]
    v = classify(Observations(now=120, engine=engine, processes=processes, ever_ready=True))
    assert v.state == READY and "no generation token counter" in v.reasons[0]
