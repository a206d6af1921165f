"""The guard's loop: sample the node's available memory every `interval`, decide
(`deskside.guard.decide`), and stop the node's engine when it stayed under the floor for
the window (`deskside.guard.act`). `deskside node exporter` runs it as a thread beside its
HTTP server when the recipe enforces it (the exporter only reads it); `deskside node guard`
runs it alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from deskside.errors import DesksideError
from deskside.facts.memory import Available, read_available
from deskside.guard.act import Low, stop_engine
from deskside.guard.decide import Decision, decide
from deskside.layout import NodeLayout
from deskside.recipe.types import Recipe
from deskside.records.guard import GuardRecord
from deskside.transport.base import Transport
from deskside.transport.local import LocalTransport
from deskside.units import format_bytes


def read_sample(proc_root: Path, cgroup: Path | None) -> Available:
    """The node's available memory now (`deskside.facts.memory.read_available`), read in
    this process: no process is started when memory is short."""
    folder = str(cgroup) if cgroup is not None else None
    return read_available(LocalTransport(), str(proc_root), folder)


@dataclass
class Guardian:
    """One node's guard (see the module doc)."""

    recipe: Recipe
    node: str
    floor: int
    layout: NodeLayout  # where the node's state.json (and guard.json) live
    proc_root: Path = Path("/proc")
    cgroup: Path | None = None  # the watched scope's memory cgroup folder; None: none
    transport: Transport = field(default_factory=LocalTransport)
    clock: Callable[[], float] = time.monotonic
    log: Callable[[str], None] = field(default=lambda message: None)
    on_stop: Callable[[GuardRecord], None] = field(default=lambda record: None)
    stops: int = 0
    last: Decision = field(default_factory=lambda: Decision("unknown", None, 0.0))
    _since: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def window(self) -> float:
        return self.recipe.guard.window

    @property
    def interval(self) -> float:
        return self.recipe.guard.interval

    def step(self) -> Decision:
        """Take one sample, decide, act when the window is over."""
        sample = read_sample(self.proc_root, self.cgroup)
        now = self.clock()
        d = decide(self._since, now, sample.available, self.floor, self.window)
        if d.verdict == "low" and self._since is None:
            assert sample.available is not None
            self.log(
                f"{sample.source} {format_bytes(sample.available)} is below the floor "
                f"{format_bytes(self.floor)}: the engine is stopped if it stays there for "
                f"{self.window:g} s"
            )
        elif d.verdict == "ok" and self._since is not None:
            self.log(f"{sample.source} is back over the floor {format_bytes(self.floor)}")
        with self._lock:
            self._since, self.last = d.low_since, d
        if d.verdict == "act":
            assert sample.available is not None
            low = Low(sample.source, sample.available, self.floor, self.window, d.low_seconds)
            self._act(low)
        return d

    def _act(self, low: Low) -> None:
        try:
            record = stop_engine(self.transport, self.recipe, self.layout, self.node, low)
        except DesksideError as exc:
            self.log(f"cannot stop the engine: {exc.message}")
            return
        if record is None:
            self.log("memory stayed below the floor, but no engine deskside started runs here")
            return
        with self._lock:
            self.stops += 1
        self.log(f"{record.reason()}; stopped {record.stopped} ({record.how})")
        self.on_stop(record)

    def low_seconds(self) -> float:
        with self._lock:
            return self.last.low_seconds

    def run(self, until: threading.Event) -> None:
        """Sample every `interval` until `until` is set."""
        while not until.is_set():
            started = self.clock()
            self.step()
            until.wait(max(self.interval - (self.clock() - started), 0.0))

    def start(self) -> tuple[threading.Thread, threading.Event]:
        """Run in a daemon thread; set the event to end it."""
        until = threading.Event()
        thread = threading.Thread(target=self.run, args=(until,), name="guard", daemon=True)
        thread.start()
        return thread, until
