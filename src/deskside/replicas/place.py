"""Where a replica set's proxy runs and keeps its files, and the Transport that reaches it.

A set on this machine (its first head is a network namespace or this machine): the root
namespace, which reaches every group's bridge; its files in $DESKSIDE_HOME. A set of
`ssh:` nodes: the first group's head, its files under `runtime.root`/<set>/ there, like a
deployed recipe's (`deskside.layout`)."""

from __future__ import annotations

from dataclasses import dataclass

from deskside import secrets
from deskside.layout import NodeLayout
from deskside.recipe.types import Recipe
from deskside.records.replica_set import SetRecord
from deskside.records.run import load_run
from deskside.records.where import run_dir
from deskside.runtime.transports import transport_for
from deskside.transport.base import Transport
from deskside.transport.local import LocalTransport

PROXY_FOLDER = "proxy"
ENGINES_ENV = "engines.env"


@dataclass(frozen=True)
class ProxyPlace:
    node: str | None  # the node the proxy runs on; None: this machine's root namespace
    folder: str  # config.yaml and run-proxy.sh
    secrets: str  # the 0700 folder of the keys
    master_key: str  # the master key file there (the recipe's own, or deskside's)
    logs: str

    @property
    def engines_env(self) -> str:
        return f"{self.secrets}/{ENGINES_ENV}"


def proxy_place(recipe: Recipe) -> ProxyPlace:
    front = recipe.head
    if front.ssh is None:
        folder = run_dir(recipe.name) / PROXY_FOLDER
        keys = secrets.secrets_dir(recipe.name)
        master = secrets.master_key_file(recipe, keys)
        return ProxyPlace(None, str(folder), str(keys), master, str(folder))
    layout = NodeLayout.of(recipe)
    master = secrets.master_key_file(recipe, layout.secrets)
    return ProxyPlace(
        front.name, f"{layout.recipe_dir}/{PROXY_FOLDER}", layout.secrets, master, layout.logs
    )


def proxy_transport(recipe: Recipe, known_hosts: str | None) -> Transport:
    front = recipe.head
    return LocalTransport() if front.ssh is None else transport_for(front, known_hosts)


def recorded_transport(record: SetRecord) -> Transport | None:
    """The Transport to the host a recorded proxy runs on (None when no group's record
    names that node any more)."""
    if record.proxy_node is None:
        return LocalTransport()
    for group in record.groups:
        run = load_run(record.group_run(group))
        for node in run.nodes if run is not None else []:
            if node.name == record.proxy_node:
                return transport_for(node, record.known_hosts)
    return None


__all__ = ["ENGINES_ENV", "ProxyPlace", "proxy_place", "proxy_transport", "recorded_transport"]
