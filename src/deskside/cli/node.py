"""`deskside node ...`: the daemons that run on a node beside its engine (started by `up`,
the rendered units and Compose files): the exporter, the memory guard and the watcher."""

from __future__ import annotations

import typer

from deskside.cli.lazy import Entry, lazy_group

app = typer.Typer(
    help="Daemons that run on a node: the exporter, the memory guard, the watcher.",
    no_args_is_help=True,
    cls=lazy_group(
        Entry(
            "exporter",
            "deskside.cli.exporter:exporter",
            "This node's deskside_* series on /metrics for Prometheus.",
        ),
        Entry(
            "guard",
            "deskside.cli.guard:guard",
            "Stop this node's engine when available memory stays under the plan's floor.",
        ),
        Entry(
            "watch",
            "deskside.cli.watch:watch",
            "Look at the run every few seconds; on WEDGED, bundle and restart within budget.",
        ),
    ),
)


@app.callback()
def _node() -> None:
    """Daemons that run on a node: the exporter, the memory guard, the watcher."""
