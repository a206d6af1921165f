"""Secrets deskside hands to services: the LiteLLM proxy's master key (and any token of
the same kind). A secret is generated, or read from a file; it is written with mode 0600
only, never printed (its repr is masked), and never put in a rendered file or the lock —
rendered files name the secret's file on the node instead
(`deskside.render.proxy.master_key_path`).

The machine running deskside keeps each recipe's generated secrets under
`$DESKSIDE_HOME/secrets/<recipe>/`; the deploy copies them to the head with mode 0600.
"""

from __future__ import annotations

import os
import secrets as _random
import stat
from dataclasses import dataclass, field
from pathlib import Path

from deskside.errors import UsageError
from deskside.home import deskside_home
from deskside.layout import ENGINE_ENV_FILE, ENGINE_KEY_ENV

PROXY_MASTER_KEY = "proxy-master-key"


@dataclass(frozen=True)
class Secret:
    """A secret value that does not print itself."""

    name: str
    _value: str = field(repr=False)

    def reveal(self) -> str:
        """The value, for the one place that must write or send it."""
        return self._value

    def __str__(self) -> str:
        return f"<secret {self.name}>"

    def __repr__(self) -> str:
        return f"Secret({self.name!r}, '********')"


def new_master_key() -> str:
    """A LiteLLM master key: LiteLLM expects keys starting with 'sk-'."""
    return "sk-" + _random.token_urlsafe(32)


def secrets_dir(recipe_name: str) -> Path:
    return deskside_home() / "secrets" / recipe_name


def _check_private(path: Path) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise UsageError(
            f"{path}: secret file is readable by others (mode {mode:04o})",
            hint=f"chmod 600 {path}",
        )


def write_secret(path: Path, value: str) -> None:
    """Write `value` to `path` with mode 0600, atomically; an existing file is replaced."""
    if not value or "\n" in value.rstrip("\n"):
        raise UsageError(f"{path}: a secret is one non-empty line")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (value.rstrip("\n") + "\n").encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_secret(path: Path, name: str | None = None) -> Secret:
    """Read a secret file (first line, stripped); refuse one that others can read."""
    try:
        _check_private(path)
        text = path.read_text()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such secret file") from None
    value = text.strip()
    if not value or "\n" in value:
        raise UsageError(f"{path}: a secret file holds one non-empty line")
    return Secret(name or path.name, value)


def load_or_create(path: Path, name: str | None = None) -> Secret:
    """The secret in `path`, generating a new master key there (0600) if there is none."""
    if not path.exists():
        write_secret(path, new_master_key())
    return read_secret(path, name)


def proxy_master_key(recipe_name: str, key_file: Path | None = None) -> Secret:
    """The proxy master key of a recipe: read from `key_file` when given (a file on this
    machine), else generated once and kept in $DESKSIDE_HOME/secrets/<recipe>/."""
    if key_file is not None:
        return read_secret(key_file, PROXY_MASTER_KEY)
    return load_or_create(secrets_dir(recipe_name) / PROXY_MASTER_KEY, PROXY_MASTER_KEY)


def engine_env_path(recipe_name: str) -> Path:
    return secrets_dir(recipe_name) / ENGINE_ENV_FILE


def engine_api_key(recipe_name: str) -> Secret:
    """The key the engine requires when a proxy fronts it (only the proxy and deskside hold
    it), kept as the engine's environment file `VLLM_API_KEY=...` in
    $DESKSIDE_HOME/secrets/<recipe>/engine.env (0600), generated at first use."""
    path = engine_env_path(recipe_name)
    if not path.exists():
        write_secret(path, f"{ENGINE_KEY_ENV}={new_master_key()}")
    name, _, value = read_secret(path, ENGINE_ENV_FILE).reveal().partition("=")
    if name != ENGINE_KEY_ENV or not value:
        raise UsageError(
            f"{path}: holds no {ENGINE_KEY_ENV}=... line",
            hint="remove the file: deskside makes a new key at the next `deskside up`",
        )
    return Secret(ENGINE_KEY_ENV, value)


def engine_env_text(key: Secret) -> bytes:
    """The engine's secret environment file (`VLLM_API_KEY=...`, sourced by launch.sh and
    run-proxy.sh, an env_file for Compose)."""
    return f"{ENGINE_KEY_ENV}={key.reveal()}\n".encode()


def engine_auth(recipe_name: str, proxy_enabled: bool) -> dict[str, str] | None:
    """The header the engine requires when a proxy fronts it (its /v1 answers only with the
    key); None when no proxy does."""
    if not proxy_enabled:
        return None
    return {"Authorization": f"Bearer {engine_api_key(recipe_name).reveal()}"}
