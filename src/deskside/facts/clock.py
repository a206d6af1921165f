"""A node's clock: its time when it answered, and whether it says its clock is synchronized
(systemd's NTPSynchronized, as `timedatectl` shows it; unknown without systemd).

The time is read inside a round trip whose local send and receive times the caller knows,
so the node's offset against this machine is `time - midpoint`, give or take half the
round trip (`skew`)."""

from __future__ import annotations

from dataclasses import dataclass

from deskside.facts.base import Fact, FactError

CLOCK_SH = r"""
echo "time=$(date +%s.%N)"
if command -v timedatectl >/dev/null 2>&1; then
  echo "synced=$(timeout 5 timedatectl show -p NTPSynchronized --value 2>/dev/null)"
fi
"""


@dataclass(frozen=True)
class NodeClock:
    time: float  # Unix seconds
    synced: bool | None = None  # None: the node does not say


def parse_clock(text: str) -> NodeClock:
    values = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and len(line) < 256
    )
    stamp = values.get("time", "").strip()
    try:
        time = float(stamp)
    except ValueError:  # a date(1) without %N prints it as is
        head = stamp.split(".", 1)[0]
        if not head.isdigit():
            raise FactError("no time") from None
        time = float(head)
    if time != time or time in (float("inf"), float("-inf")):
        raise FactError("no time")
    synced = {"yes": True, "no": False}.get(values.get("synced", "").strip())
    return NodeClock(time, synced)


def clock() -> Fact[NodeClock]:
    return Fact("clock", CLOCK_SH, parse_clock, cap=4096)


def skew(node: NodeClock, sent: float, received: float) -> tuple[float, float]:
    """(the node's clock less the midpoint of the local send and receive times, half the
    round trip: the measurement's error either way)."""
    return node.time - (sent + received) / 2, (received - sent) / 2
