"""The drain gate of a one-group recipe run on this machine behind its proxy: LiteLLM reaches
the engine through the replica set's gate (`deskside.replicas.gate_server`) with two
"groups", the engine's two slots:

    a   the recipe's engine.port: where `up` starts the engine
    b   engine.port + SLOT_OFFSET: where a blue/green upgrade starts the second copy

LiteLLM always calls slot a's gate port (proxy.port + 1); the gate relays to a unless its
drain file names a, then to b (slot b's gate port, proxy.port + 2, is not called). A
blue/green upgrade (`deskside.replicas.bluegreen_run`) starts the new copy on the slot not
serving, drains the serving one (new requests go to the new copy, the ones running finish)
and stops it. `up` starts the gate with nothing drained: slot a serves. Pure, but for
`write_gate_files`.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from deskside.engine.gate_files import DRAIN_FILE, GATE_CONFIG, GATE_SCRIPT, GATE_TIMEOUT
from deskside.engine.services import PROXY_CONFIG, Service, ServiceSite
from deskside.layout import ENGINE_KEY_ENV
from deskside.recipe.types import Recipe
from deskside.safefs import write_file

# the replica set's gate (`deskside.replicas.gate`): its script, read as a file (the runtime
# imports nothing of replica sets); the names of its files are deskside.engine.gate_files'
GATE_SERVER = ("deskside.replicas", "gate_server.py")

SLOTS = ("a", "b")
SLOT_OFFSET = 1000  # slot b's engine and rendezvous ports: slot a's + this
GATE_FOLDER = "gate"


def gated(recipe: Recipe) -> bool:
    """A one-group recipe whose proxy fronts a keyed engine: LiteLLM goes through the gate."""
    return recipe.replicas is None and recipe.replica_set is None and recipe.runs_proxy


def slot_port(recipe: Recipe, slot: str) -> int:
    return recipe.engine.port + (SLOT_OFFSET if slot == "b" else 0)


def green_master_port(recipe: Recipe, slot: str) -> int:
    """The rendezvous port of a copy an upgrade starts on `slot`: master_port + SLOT_OFFSET on
    b, + 2 x SLOT_OFFSET on a, so it never meets the running copy's (`up`'s master_port, or
    the other slot's)."""
    return recipe.cluster.fabric.master_port + SLOT_OFFSET * (1 if slot == "b" else 2)


def running_slots(folder: str) -> dict[str, str]:
    """slot -> upstream URL, as the running gate was started (its gate.json)."""
    data = json.loads(Path(folder, GATE_CONFIG).read_text())
    return {slot: str(one["upstream"]) for slot, one in data["groups"].items()}


def slot_url(recipe: Recipe, slot: str) -> str:
    return f"http://{recipe.head.address}:{slot_port(recipe, slot)}"


def slot_of(recipe: Recipe, api_url: str) -> str:
    """The slot an engine answering at `api_url` runs on."""
    return "b" if api_url.rstrip("/").endswith(f":{slot_port(recipe, 'b')}") else "a"


def gate_port(recipe: Recipe, slot: str) -> int:
    return recipe.proxy.port + 1 + SLOTS.index(slot)


def gate_base(recipe: Recipe) -> str:
    """Where LiteLLM reaches the engine: slot a's gate port, on the head."""
    return f"http://{recipe.head.address}:{gate_port(recipe, 'a')}"


def gate_folder(cluster: str) -> str:
    return f"{cluster}/{GATE_FOLDER}"


def gate_config(recipe: Recipe, folder: str, keys_file: str) -> dict[str, object]:
    return {
        "host": recipe.head.address,
        "groups": {
            slot: {
                "port": gate_port(recipe, slot),
                "upstream": slot_url(recipe, slot),
                "key_env": ENGINE_KEY_ENV,
            }
            for slot in SLOTS
        },
        "keys_file": keys_file,
        "drain_file": f"{folder}/{DRAIN_FILE}",
        "timeout": GATE_TIMEOUT,
    }


def write_gate_files(recipe: Recipe, folder: str, keys_file: str) -> None:
    """gate.py, gate.json and an empty drain file (slot a serves) in `folder`."""
    base = Path(folder)
    script = resources.files(GATE_SERVER[0]).joinpath(GATE_SERVER[1]).read_bytes()
    write_file(base / GATE_SCRIPT, script, 0o644)
    config = json.dumps(gate_config(recipe, folder, keys_file), indent=2, sort_keys=True) + "\n"
    write_file(base / GATE_CONFIG, config.encode(), 0o600)
    write_file(base / DRAIN_FILE, b"", 0o600)


def gate_service(recipe: Recipe, folder: str, python: str) -> Service:
    """The gate as a service of the head, run with `python` (standard library only)."""
    return Service(
        name="gate",
        node=recipe.head.name,
        program=python,
        argv=(python, f"{folder}/{GATE_SCRIPT}", f"{folder}/{GATE_CONFIG}"),
        container=None,
        in_container=False,
        ready_url=f"{gate_base(recipe)}/deskside/gate",
        ports=tuple(gate_port(recipe, slot) for slot in SLOTS),
        workdir=folder,
    )


def via_gate(config_text: str, engine_base: str, recipe: Recipe) -> str:
    """LiteLLM's rendered config with the engine's API base replaced by the gate's."""
    return config_text.replace(f"{engine_base}/v1", f"{gate_base(recipe)}/v1")


def with_gate(
    recipe: Recipe, launches: list[Service], site: ServiceSite, keyed: bool
) -> list[Service]:
    """A run's services with the gate first when LiteLLM goes through it (run by the
    Python that runs deskside's own services)."""
    if not (keyed and gated(recipe)) or not any(s.name == "proxy" for s in launches):
        return launches
    return [gate_service(recipe, gate_folder(site.cluster), site.deskside[0]), *launches]


def write_here(recipe: Recipe, site: ServiceSite, engine_base: str, keyed: bool) -> None:
    """The gate's files, and LiteLLM's rendered config pointed at the gate (after the
    services' files are written), when LiteLLM goes through it."""
    if not (keyed and gated(recipe)):
        return
    write_gate_files(recipe, gate_folder(site.cluster), site.engine_env)
    config = Path(site.proxy_dir) / PROXY_CONFIG
    text = via_gate(config.read_text(), engine_base, recipe)
    write_file(config, text.encode(), config.stat().st_mode & 0o777)


__all__ = [
    "DRAIN_FILE",
    "SLOTS",
    "SLOT_OFFSET",
    "gate_base",
    "gate_config",
    "gate_folder",
    "gate_port",
    "gate_service",
    "gated",
    "green_master_port",
    "running_slots",
    "slot_of",
    "slot_port",
    "slot_url",
    "via_gate",
    "with_gate",
    "write_gate_files",
    "write_here",
]
