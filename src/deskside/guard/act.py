"""What the guard stops, and how: the node's engine only, through the stop deskside itself
uses for the node's kind of control (`deskside.runtime.control`), never anything else.

- process (a run on this machine): the stop of `deskside.identity` with the pid, start time
  and run tag recorded in the node's state: SIGTERM to the engine's tagged session, SIGKILL
  after the grace; nothing when the pid is another process now, and nothing (`Unproven`,
  logged) when the state lacks any of the three.
- systemd: `systemctl stop` of the engine's unit. Stopped, not disabled: a reboot starts it
  again (deskside down disables it).
- compose: `docker compose stop` of the engine's project (the containers stay for their
  logs).

The services beside the engine (proxy, monitoring, this exporter) keep running."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from datetime import UTC, datetime

from deskside.errors import DesksideError
from deskside.identity import stop_command
from deskside.layout import NodeLayout
from deskside.recipe.types import Recipe
from deskside.records.guard import GuardRecord
from deskside.records.node import NodeState, read_state
from deskside.records.node_files import write_guard
from deskside.runtime.control import Control, engine_claim
from deskside.transport.base import Transport

GRACE_SECONDS = 20.0  # as `deskside down`: SIGTERM, then SIGKILL after this long


@dataclass(frozen=True)
class Stop:
    what: str  # what is stopped
    argv: list[str]
    how: str  # the stop as users read it


def engine_stop(control: Control, state: NodeState, grace: float = GRACE_SECONDS) -> Stop | None:
    """The command that stops the engine `state` describes (None: nothing to stop);
    `Unproven` when the state does not prove the process deskside's."""
    if control.kind == "systemd":
        unit = control.layout.unit_name
        argv = [*control.sudo, "systemctl", "stop", unit]
        return Stop(f"unit {unit}", argv, " ".join(argv))
    if control.kind == "compose":
        argv = control.compose("stop", "--timeout", str(max(1, round(grace))))
        return Stop(f"Compose project {control.layout.compose_project}", argv, " ".join(argv))
    if state.pid is None:
        return None
    return Stop(
        f"process {state.pid}",
        stop_command(engine_claim(state), grace),
        f"SIGTERM to the processes of session {state.pid} tagged {state.run_tag}, SIGKILL "
        f"after {grace:.0f} s",
    )


def node_control(recipe: Recipe, layout: NodeLayout, state: NodeState, root: bool) -> Control:
    """The node's Control, as `deskside up` made it (sudo -n when not root and not a
    process of this user)."""
    control = Control(
        kind=state.control,
        runtime=recipe.runtime.kind,
        layout=layout,
        compose_program=recipe.runtime.compose,
    )
    return control if root or state.control == "process" else control.with_sudo(("sudo", "-n"))


@dataclass(frozen=True)
class Low:
    """What the guard saw when it decided to act."""

    source: str
    available: int
    floor: int
    window: float
    low_seconds: float


def stop_engine(
    t: Transport, recipe: Recipe, layout: NodeLayout, node: str, low: Low
) -> GuardRecord | None:
    """Stop the node's engine and write `guard.json`; None when deskside started nothing
    here (no state file) or its engine no longer runs. BadState when the state file cannot
    be trusted, `Unproven` when it does not name pid, start time and run tag (nothing is
    signalled then)."""
    state = read_state(t, layout, recipe.name)
    if state is None:
        return None
    control = node_control(recipe, layout, state, os.geteuid() == 0)
    stop = engine_stop(control, state)
    if stop is None or not control.alive(t, state):
        return None
    r = t.run(stop.argv, timeout=GRACE_SECONDS + 300)
    record = GuardRecord(
        recipe=recipe.name,
        node=node,
        at=datetime.now(UTC).isoformat(timespec="seconds"),
        source=low.source,
        available_bytes=low.available,
        floor_bytes=low.floor,
        window_seconds=low.window,
        low_seconds=round(low.low_seconds, 1),
        run_started_at=state.started_at,
        stopped=stop.what,
        how=stop.how,
        ok=r.ok,
    )
    # the stop matters more than its record; the guard's log line says it too
    with contextlib.suppress(OSError, DesksideError):
        write_guard(t, layout.recipe_dir, record)
    return record
