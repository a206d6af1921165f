"""The keys of a run's two doors, read where `deskside up` keeps them (never made here):
the engine's key in $DESKSIDE_HOME/secrets/<recipe>/engine.env, the proxy's master key
there too, or in `proxy.master_key_file` (on this machine for a local run, on the head for
an SSH run)."""

from __future__ import annotations

from pathlib import Path

from deskside import secrets
from deskside.errors import DesksideError
from deskside.recipe.types import Recipe
from deskside.records.run import RunRecord
from deskside.runtime.transports import transport_for

HINT = "probe from the machine that ran `deskside up` for this recipe: the keys live there"


def _bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


def engine_headers(run: RunRecord) -> dict[str, str] | None:
    """The engine's key header; None when no proxy fronts the engine (it has no key)."""
    if not run.keyed:
        return None
    path = secrets.engine_env_path(run.recipe_name)
    if not path.is_file():
        raise DesksideError(f"no engine key for {run.recipe_name} here ({path})", hint=HINT)
    return secrets.engine_auth(run.recipe_name, True)


def proxy_headers(
    recipe: Recipe, run: RunRecord, known_hosts: str | None = None
) -> dict[str, str] | None:
    """The proxy's master key header; None without a proxy."""
    if run.proxy_url is None:
        return None
    key_file = recipe.proxy.master_key_file
    if key_file is None:
        path = Path(secrets.master_key_file(recipe, secrets.secrets_dir(run.recipe_name)))
        if not path.is_file():
            raise DesksideError(
                f"no proxy master key for {run.recipe_name} here ({path})", hint=HINT
            )
        return _bearer(secrets.read_secret(path, secrets.PROXY_MASTER_KEY).reveal())
    if run.runtime == "local":
        return _bearer(secrets.read_secret(Path(key_file), secrets.PROXY_MASTER_KEY).reveal())
    head = next(n for n in run.nodes if n.role == "head")
    try:
        value = transport_for(head, known_hosts).get(key_file).decode().strip()
    except FileNotFoundError:
        raise DesksideError(
            f"{head.name}:{key_file}: no such file (proxy.master_key_file)",
            hint="the proxy's master key file must exist on the head",
        ) from None
    if not value:
        raise DesksideError(f"{head.name}:{key_file} is empty (proxy.master_key_file)")
    return _bearer(value)
