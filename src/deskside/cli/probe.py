"""`deskside probe RECIPE`: black-box correctness checks of a running cluster."""

from __future__ import annotations

from typing import Annotated

import typer

from deskside.cli.common import RunArg, emit_json, fail, out, steps
from deskside.errors import DesksideError
from deskside.terminal import shown

STYLE = {"PASS": "green", "FAIL": "bold red", "SKIPPED": "yellow"}


def probe(
    recipe: RunArg = None,
    known_hosts: Annotated[
        str | None,
        typer.Option(
            help="ssh: nodes: known_hosts file, to read proxy.master_key_file on the head."
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print one JSON object: {ok, results: [{name, result, detail}]}."
        ),
    ] = False,
) -> None:
    """Black-box checks of the running cluster (RUN: its name or recipe file; optional when
    only one run is up), through its API as a client sees it:
    batch invariance (greedy output alone equals the output beside other requests), every
    served name at the proxy with its master key and at the engine with its key (and
    refused without them), a forced tool call with JSON-object arguments, a stop string
    inside the reasoning that must not end the answer (when the recipe asks for that), and
    a prompt that fills max_model_len. Each prints PASS, FAIL or SKIPPED with why; exits 1
    when any FAILs."""
    from deskside.probe.client import run_probes
    from deskside.probe.find import find_target

    try:
        target = find_target(recipe, known_hosts)
        with steps("probing") as say:
            results = run_probes(target, say=lambda name: say(f"probing: {name}"))
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(
            {
                "ok": not any(r.result == "FAIL" for r in results),
                "results": [r.to_dict() for r in results],
            }
        )
    else:
        width = max(len(r.name) for r in results)
        for r in results:
            out.print(
                f"[{STYLE[r.result]}]{r.result:<7}[/] {r.name:<{width}}  {shown(r.detail)}",
                highlight=False,
            )
    if any(r.result == "FAIL" for r in results):
        raise typer.Exit(1)
