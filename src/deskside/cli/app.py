"""The `deskside` command: a thin face over the library. Each command parses its flags,
calls one library function, and prints a rich summary or, with --json, one JSON object."""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from types import FrameType

import typer

from deskside.cli.common import err, fail
from deskside.cli.lazy import Entry, lazy_group
from deskside.errors import DesksideError
from deskside.terminal import shown

RUN = "Plan and run"
CHECK = "Is it healthy?"
WORK = "Models, benchmarks and the fabric"
SETUP = "Recipes and set-up"

COMMANDS = (
    Entry(
        "plan",
        "deskside.cli.plan:plan",
        "Memory planned as vLLM will: KV tokens, "
        "concurrency, the unified-memory floor; exit 3 when refused.",
        RUN,
    ),
    Entry(
        "tune",
        "deskside.cli.tune:tune",
        "The feasible frontier of engine settings (planned, no engine); with --sla, "
        "frontier points benchmarked and the best written as an overlay.",
        RUN,
    ),
    Entry(
        "up",
        "deskside.cli.run:up",
        "Start every node (workers first, then the head) and wait until every served name answers.",
        RUN,
    ),
    Entry(
        "status",
        "deskside.cli.run:status",
        "READY / STARTING / DEGRADED / WEDGED / DOWN per node and for the run, with reasons.",
        RUN,
    ),
    Entry(
        "logs",
        "deskside.cli.run:logs",
        "Print (and follow) the engine logs of the run's nodes.",
        RUN,
    ),
    Entry("down", "deskside.cli.run:down", "Stop what the run started (and only that).", RUN),
    Entry(
        "upgrade",
        "deskside.cli.upgrade:upgrade",
        "A replica set to the recipe as it is now, one group at a time, no request failing.",
        RUN,
    ),
    Entry(
        "demo",
        "deskside.cli.run:demo",
        "The embedded two-node run on this machine, end to end, then torn down.",
        RUN,
    ),
    Entry(
        "render",
        "deskside.cli.render:render",
        "Write every file of the deployment: per node and for the cluster.",
        RUN,
    ),
    Entry(
        "diff",
        "deskside.cli.render:diff",
        "Per host, what applying the recipe over the deployed release would change.",
        RUN,
    ),
    Entry(
        "doctor",
        "deskside.cli.doctor:doctor",
        "Before up: what holds memory, disk and ports on each node; do the nodes match?",
        CHECK,
    ),
    Entry(
        "probe",
        "deskside.cli.probe:probe",
        "A running run, as a client sees it: batch invariance, keys, tool calls, long context.",
        CHECK,
    ),
    Entry(
        "top",
        "deskside.cli.monitor:top",
        "A live view of the running cluster: memory, fabric, KV cache, tokens per second.",
        CHECK,
    ),
    Entry(
        "diagnose",
        "deskside.cli.diagnose:diagnose",
        "One scrubbed tar.gz of a misbehaving run: logs, process trees, stacks, metrics.",
        CHECK,
    ),
    Entry(
        "monitor",
        "deskside.cli.monitor:app",
        "Every dashboard and alert expression checked against the live Prometheus.",
        CHECK,
        group=True,
    ),
    Entry(
        "fabric",
        "deskside.cli.fabric:app",
        "RDMA devices, RoCEv2 GID indexes, NCCL environment; link, MTU and all-reduce gates.",
        WORK,
        group=True,
    ),
    Entry(
        "model",
        "deskside.cli.recipe:model_app",
        "Pull the pinned revision, manifest, verify, sync to the workers; tiny models.",
        WORK,
        group=True,
    ),
    Entry(
        "image",
        "deskside.cli.image:app",
        "The engine image on every node by digest: from the head over the fabric, or pulled.",
        WORK,
        group=True,
    ),
    Entry(
        "bench",
        "deskside.cli.bench:app",
        "TTFT, prefill and decode tok/s over prompt length x concurrency or request rate.",
        WORK,
        group=True,
    ),
    Entry(
        "setup",
        "deskside.cli.setup:setup",
        "Day 0 on every node: the fabric link's address and MTU, SSH from the head, a GPU "
        "clock cap; shown first, recorded, undoable.",
        SETUP,
    ),
    Entry(
        "validate",
        "deskside.cli.recipe:validate",
        "Load a recipe and report its problems, located.",
        SETUP,
    ),
    Entry(
        "schema", "deskside.cli.recipe:schema", "Print the recipe JSON Schema (for editors).", SETUP
    ),
    Entry(
        "proxy", "deskside.cli.proxy:app", "Install the pinned LiteLLM proxy.", SETUP, group=True
    ),
    Entry(
        "node",
        "deskside.cli.node:app",
        "Daemons that run on a node: the exporter, the memory guard, the watcher.",
        SETUP,
        group=True,
    ),
    # the node daemons' old spellings, kept for one release
    Entry(
        "exporter",
        "deskside.cli.exporter:exporter",
        "",
        hidden=True,
        deprecated="use `deskside node exporter`",
    ),
    Entry(
        "guard", "deskside.cli.guard:guard", "", hidden=True, deprecated="use `deskside node guard`"
    ),
    Entry(
        "watch", "deskside.cli.watch:watch", "", hidden=True, deprecated="use `deskside node watch`"
    ),
)

app = typer.Typer(
    name="deskside",
    help="Serve frontier LLMs across a few deskside GPU nodes with vLLM - planned exactly, "
    "launched in order, and proven.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    cls=lazy_group(*COMMANDS),
)


@app.callback()
def _deskside() -> None:
    """Serve frontier LLMs across a few deskside GPU nodes with vLLM - planned exactly,
    launched in order, and proven."""


class Interrupted(BaseException):
    """Ctrl-C (SIGINT) while a command runs. Not a KeyboardInterrupt, which click turns
    into "Aborted!" and exit 1; not an Exception, so no `except Exception` swallows it,
    while `finally` blocks and `except BaseException: undo; raise` still run."""


def _interrupted(signum: int, frame: FrameType | None) -> None:
    # a second Ctrl-C while the first one's clean-up runs: leave at once
    signal.signal(signal.SIGINT, _interrupted_again)
    raise Interrupted


def _interrupted_again(signum: int, frame: FrameType | None) -> None:
    sys.stderr.write("interrupted again: exiting without cleaning up\n")
    sys.stderr.flush()
    os._exit(130)


def main() -> None:
    """Console entry point: user errors print without a traceback; internal errors say
    how to get one; Ctrl-C prints "interrupted" and exits 130."""
    if threading_main():
        signal.signal(signal.SIGINT, _interrupted)
    try:
        app()
    except DesksideError as exc:  # raised outside a command's own handling
        try:
            fail(exc)
        except typer.Exit as done:
            sys.exit(done.exit_code)
    except (Interrupted, KeyboardInterrupt):
        signal.signal(signal.SIGINT, _interrupted_again)
        err.print("interrupted", highlight=False)
        sys.exit(130)
    except Exception as exc:  # a bug of ours, not the user's mistake
        if os.environ.get("DESKSIDE_DEBUG"):
            traceback.print_exc()
        err.print(
            f"[bold red]internal error:[/] {type(exc).__name__}: {shown(exc)}\n"
            "  [dim]hint:[/] this is a deskside bug; rerun with DESKSIDE_DEBUG=1 for the "
            "traceback and report it",
            highlight=False,
        )
        sys.exit(70)


def threading_main() -> bool:
    """Whether this is the main thread (the only one that may set signal handlers)."""
    return threading.current_thread() is threading.main_thread()


if __name__ == "__main__":
    main()
