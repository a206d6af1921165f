"""Secrets deskside hands to services: the LiteLLM proxy's master key (and any token of
the same kind). A secret is generated, or read from a file; it is written with mode 0600
only, never printed (its repr is masked), and never put in a rendered file or the lock —
rendered files name the secret's file on the node instead (`master_key_file`).

The machine running deskside keeps each recipe's generated secrets under
`$DESKSIDE_HOME/secrets/<recipe>/`; the deploy copies them to the head with mode 0600.
"""

from __future__ import annotations

import os
import secrets as _random
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path

from deskside.errors import Location, UsageError
from deskside.layout import ENGINE_ENV_FILE, ENGINE_KEY_ENV
from deskside.recipe.types import Recipe
from deskside.safefs import PRIVATE_DIR, create_file, deskside_home, write_file

PROXY_MASTER_KEY = "proxy-master-key"
SECRET_MODE = 0o600
MAX_SECRET_BYTES = 4096


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


def _q(path: Path | str) -> str:
    return shlex.quote(str(path))


def new_master_key() -> str:
    """A LiteLLM master key: LiteLLM expects keys starting with 'sk-'."""
    return "sk-" + _random.token_urlsafe(32)


def secrets_dir(recipe_name: str) -> Path:
    return deskside_home() / "secrets" / recipe_name


def master_key_file(recipe: Recipe, secrets_folder: str | Path) -> str:
    """Where the proxy's master key is on the host the proxy runs on: the recipe's
    `proxy.master_key_file`, else the key deskside generates, in its 0700 secrets folder
    there (`secrets_folder`: $DESKSIDE_HOME/secrets/<recipe> on this machine,
    `runtime.root`/<recipe>/secrets on a node)."""
    return recipe.proxy.master_key_file or f"{secrets_folder}/{PROXY_MASTER_KEY}"


def master_key_here(recipe: Recipe) -> Path:
    """The proxy's master key file of a run on this machine."""
    return Path(master_key_file(recipe, secrets_dir(recipe.name)))


def _refuse(path: Path, message: str, hint: str) -> UsageError:
    return UsageError(f"{path}: {message}", hint=hint, location=Location(str(path)))


def _check_file(path: Path, st: os.stat_result) -> None:
    """A secret file is a regular file of the user's that nobody else can read or change."""
    uid = os.geteuid()
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(
            path,
            "a secret file must be a regular file",
            f"move it away (mv -- {_q(path)} {_q(str(path) + '.old')}) and give a regular file",
        )
    if st.st_uid != uid:
        raise _refuse(
            path,
            f"secret file belongs to uid {st.st_uid}, not to you (uid {uid}); someone else "
            "could have chosen its value",
            f"if you wrote it: chown {uid} {_q(path)} && chmod 600 {_q(path)}; otherwise "
            f"remove it: rm -- {_q(path)}",
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        what = "readable" if mode & 0o044 else "writable" if mode & 0o022 else "executable"
        raise _refuse(
            path,
            f"secret file is {what} by others (mode {mode:04o})",
            f"chmod 600 {_q(path)}",
        )


def _check_folder(path: Path) -> None:
    """The folder of a secret file belongs to the user (or root) and others cannot change
    it (they could replace the file)."""
    folder = path.parent
    try:
        st = folder.stat()
    except OSError as exc:
        raise _refuse(
            folder,
            f"cannot read the folder of secret file {path.name}: {exc.strerror}",
            f"ls -ld {_q(folder)}",
        ) from None
    uid = os.geteuid()
    if st.st_uid not in (uid, 0):
        raise _refuse(
            folder,
            f"the folder of secret file {path.name} belongs to uid {st.st_uid}, not to you "
            f"(uid {uid})",
            f"keep the secret in a folder you own (mkdir -m 700 ~/.secrets), or if the "
            f"folder is yours: chown {uid} {_q(folder)}",
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise _refuse(
            folder,
            f"the folder of secret file {path.name} is writable by others (mode {mode:04o}); "
            "they could replace the secret",
            f"chmod 700 {_q(folder)}",
        )


def write_secret_file(path: Path, data: bytes) -> None:
    """Write a secret file of several lines (an environment file) with mode 0600, folders
    made 0700, atomically."""
    write_file(path, data, SECRET_MODE, dir_mode=PRIVATE_DIR)


def _line(value: str) -> bytes:
    return (value.rstrip("\n") + "\n").encode()


def read_secret(path: Path, name: str | None = None) -> Secret:
    """Read a secret file (first line, stripped). It must be a regular file (not a link)
    of the user's that others can neither read nor change, in a folder others cannot
    change; anything else is refused with the fix."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such secret file") from None
    except OSError as exc:
        if path.is_symlink():
            raise _refuse(
                path,
                f"a secret file must not be a link (it points to {os.readlink(path)})",
                f"give the file itself: {_q(os.path.realpath(path))}",
            ) from None
        raise _refuse(
            path, f"cannot read the secret file: {exc.strerror}", f"ls -l {_q(path)}"
        ) from None
    try:
        _check_file(path, os.fstat(fd))
        _check_folder(path)
        data = os.read(fd, MAX_SECRET_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_SECRET_BYTES:
        raise UsageError(
            f"{path}: a secret file holds one line of at most {MAX_SECRET_BYTES} bytes"
        )
    value = data.decode(errors="replace").strip()
    if not value or "\n" in value:
        raise UsageError(f"{path}: a secret file holds one non-empty line")
    return Secret(name or path.name, value)


def load_or_create(path: Path, name: str | None = None) -> Secret:
    """The secret in `path`, generating a new master key there (0600, in a 0700 folder) if
    there is none. Created exclusively: two commands at once agree on one key."""
    if not path.is_symlink() and not path.exists():
        create_file(path, _line(new_master_key()), SECRET_MODE, dir_mode=PRIVATE_DIR)
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
    if not path.is_symlink() and not path.exists():
        line = _line(f"{ENGINE_KEY_ENV}={new_master_key()}")
        create_file(path, line, SECRET_MODE, dir_mode=PRIVATE_DIR)
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
