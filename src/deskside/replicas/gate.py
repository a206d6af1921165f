"""The replica set's drain gate (deskside's own drain): the LiteLLM proxy reaches each group
through a small relay beside it (`deskside.replicas.gate_server`, standard library only,
run with the proxy's Python), one port per group (`deskside.replicas.proxy.gate_port`).

Draining a group writes its name to the gate's drain file: new requests for it go to a
group still open (the proxy sees no failure, so nothing is retried or cooled down), the
requests it runs finish there. `in_flight` reads how many still run on each group's
engine; `open_all` puts every group back.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

import httpx

from deskside.engine.gate_files import DRAIN_FILE, GATE_CONFIG, GATE_SCRIPT, GATE_TIMEOUT
from deskside.errors import DesksideError
from deskside.httpclient import PROBE
from deskside.httpclient import client as bounded_client
from deskside.recipe.types import Recipe
from deskside.replicas import gate_server
from deskside.replicas.place import ProxyPlace
from deskside.replicas.proxy import backend_url, gate_port, gate_url, key_env, proxy_host
from deskside.transport.base import Transport


def gate_config(
    recipe: Recipe, groups: Mapping[str, Recipe], place: ProxyPlace
) -> dict[str, object]:
    return {
        "host": proxy_host(recipe),
        "groups": {
            group: {
                "port": gate_port(recipe, i),
                "upstream": backend_url(one),
                "key_env": key_env(group),
            }
            for i, (group, one) in enumerate(groups.items())
        },
        "keys_file": place.engines_env,
        "drain_file": f"{place.folder}/{DRAIN_FILE}",
        "timeout": GATE_TIMEOUT,
    }


def gate_files(
    recipe: Recipe, groups: Mapping[str, Recipe], place: ProxyPlace
) -> dict[str, tuple[str, int]]:
    """name -> (text, mode) in the proxy's folder."""
    script = Path(gate_server.__file__).read_text()
    config = json.dumps(gate_config(recipe, groups, place), indent=2, sort_keys=True) + "\n"
    return {GATE_SCRIPT: (script, 0o644), GATE_CONFIG: (config, 0o600)}


def gate_python(place: ProxyPlace, litellm: str) -> str:
    """The Python that runs the gate: this one here, the proxy's virtualenv's on a node."""
    if place.node is None:
        return sys.executable
    if "/" in litellm:
        return str(PurePosixPath(litellm).parent / "python3")
    return "python3"


def gate_argv(place: ProxyPlace, litellm: str) -> list[str]:
    return [
        gate_python(place, litellm),
        f"{place.folder}/{GATE_SCRIPT}",
        f"{place.folder}/{GATE_CONFIG}",
    ]


def set_drained(t: Transport, place: ProxyPlace, groups: list[str]) -> None:
    """Drain exactly `groups` (none: every group open)."""
    text = "".join(f"{g}\n" for g in groups)
    t.put(text.encode(), f"{place.folder}/{DRAIN_FILE}", 0o600)


def gate_state(recipe: Recipe, transport: httpx.BaseTransport | None = None) -> dict[str, object]:
    """The gate's answer: requests in flight per group's engine, relayed, drained."""
    url = f"{gate_url(recipe, 0)}/deskside/gate"
    try:
        with bounded_client(PROBE, transport) as client:
            r = client.get(url)
            data = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        data = None
    if not isinstance(data, dict):
        raise DesksideError(
            f"the set's drain gate does not answer at {url}",
            hint="deskside status shows the set; deskside down then up starts it again",
        )
    return data


def in_flight(recipe: Recipe, group: str, transport: httpx.BaseTransport | None = None) -> int:
    counts = gate_state(recipe, transport).get("in_flight")
    value = counts.get(group) if isinstance(counts, dict) else None
    return int(value) if isinstance(value, int) else 0


__all__ = [
    "DRAIN_FILE",
    "GATE_CONFIG",
    "GATE_SCRIPT",
    "gate_argv",
    "gate_config",
    "gate_files",
    "gate_state",
    "in_flight",
    "set_drained",
]
