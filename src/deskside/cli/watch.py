"""`deskside watch`: the wedge watcher and recovery policy of a running cluster
(deskside.operate.watch), writing `deskside diagnose`'s bundle before a restart."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from deskside.cli.common import JsonFlag, OldRunOpt, RunArg, chosen_run, emit_json, err, fail, out
from deskside.cli.run import KnownHosts
from deskside.errors import DesksideError
from deskside.terminal import shown

if TYPE_CHECKING:
    from deskside.records.run import RunRecord
    from deskside.transport.base import Transport


def watch(
    run: RunArg = None,
    once: Annotated[bool, typer.Option("--once", help="One look, then exit.")] = False,
    interval: Annotated[
        float | None,
        typer.Option(help="Seconds between looks (default: the recipe's survive.interval)."),
    ] = None,
    known_hosts: KnownHosts = None,
    old_run: OldRunOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Look at the running cluster every few seconds: READY / STARTING / DEGRADED / WEDGED /
    DOWN, as `deskside status` says, with the history status reads. On WEDGED, with the
    recipe's survive.recover.enabled: write a diagnostic bundle, then restart the engines
    (workers first), within the recovery budget; never in a loop. Runs until the run is
    stopped (`deskside down`) or SIGTERM. A run on this machine starts one by itself."""
    from deskside.operate.watch import Watch
    from deskside.records.names import find_run

    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    try:
        name = find_run(chosen_run(run, old_run)).recipe_name
        last: list[str] = []

        def say(msg: str) -> None:
            if not as_json:
                err.print(f"{time.strftime('%H:%M:%S')} {shown(msg)}", highlight=False)

        w = Watch(name, known_hosts, say, bundle=write_diagnose_bundle)
        while not stopping:
            record = w.once()
            if record is None:
                say(f"{name}: the run is gone; the watch ends")
                return
            if as_json:
                emit_json(record.model_dump(mode="json"), indent=None)
            elif [record.state, _gist(record.decision)] != last:
                when = time.strftime("%H:%M:%S")
                out.print(f"{when} {shown(record.state)} {shown(name)}", highlight=False)
                for reason in [*record.reasons, record.decision]:
                    if reason:
                        out.print(f"- {shown(reason)}", highlight=False)
            last = [record.state, _gist(record.decision)]
            if once:
                return
            _sleep(interval if interval is not None else record.interval, lambda: stopping)
    except DesksideError as exc:
        fail(exc, as_json)


def write_diagnose_bundle(
    run: RunRecord, folder: Path, reason: str, transports: Mapping[str, Transport]
) -> str:
    """`deskside diagnose`'s bundle, as the recovery writes it before a restart."""
    from deskside.diagnose.bundle import write_bundle

    return str(write_bundle(run, folder, transports=transports, reason=reason).path)


def _gist(decision: str) -> str:
    """A decision without its counts (a new line only when its kind changes)."""
    return "".join(ch for ch in decision.split(":")[0] if not ch.isdigit())


def _sleep(seconds: float, stopped: Callable[[], bool]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stopped():
        time.sleep(max(0.0, min(0.5, deadline - time.monotonic())))
