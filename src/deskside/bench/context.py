"""What every cell of a run shares (server, model, token counter, clock, where /metrics is),
and the progress reports it sends to whoever shows them (the runner never prints)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from deskside.bench.client import BenchClient
from deskside.bench.models import BenchConfig, RequestRecord
from deskside.bench.workload import Cell, TokenCounter


@dataclass(frozen=True)
class Progress:
    """One progress report: ``stage`` is prompts, warmup, measure, turn N, cell-done or
    probe."""

    stage: str
    cell: Cell | None
    done: int
    total: int
    message: str = ""


ProgressFn = Callable[[Progress], None]


@dataclass
class RunContext:
    client: BenchClient
    config: BenchConfig
    model: str
    counter: TokenCounter
    epoch: float
    metrics_url: str | None
    progress: ProgressFn = field(default=lambda _: None)
    clock: Callable[[], float] = time.monotonic

    def counting(self, stage: str, cell: Cell, total: int) -> Callable[[RequestRecord], None]:
        """A per-request callback reporting ``stage`` done/total."""
        done = 0

        def on_done(_: RequestRecord) -> None:
            nonlocal done
            done += 1
            self.progress(Progress(stage, cell, done, total))

        return on_done
