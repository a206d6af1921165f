"""Secret files are used only when they are the user's own regular files nobody else can
read or change; anything else is refused with what is wrong and how to fix it."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import pytest

from deskside.errors import UsageError
from deskside.recipe.load import load_recipe
from deskside.secrets import (
    PROXY_MASTER_KEY,
    engine_api_key,
    engine_auth,
    engine_env_path,
    engine_env_text,
    load_or_create,
    master_key_here,
    proxy_master_key,
    read_secret,
    secrets_dir,
    write_secret_file,
)

from .render_cases import LOCAL_TINY


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def key_file(tmp_path: Path, file_mode: int = 0o600) -> Path:
    folder = tmp_path / "keys"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / "key"
    path.write_text("sk-planted\n")
    path.chmod(file_mode)
    return path


def nobody() -> int:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    return pwd.getpwnam("nobody").pw_uid


@pytest.mark.parametrize(
    ("file_mode", "what"),
    [(0o644, "readable"), (0o640, "readable"), (0o604, "readable"), (0o620, "writable")],
)
def test_a_key_others_can_read_or_change_is_refused(
    tmp_path: Path, file_mode: int, what: str
) -> None:
    path = key_file(tmp_path, file_mode)
    with pytest.raises(UsageError) as exc:
        read_secret(path)
    err = exc.value
    assert err.exit_code == 2
    assert f"{what} by others (mode {file_mode:04o})" in err.message and str(path) in err.message
    assert err.hint == f"chmod 600 {path}"
    assert "sk-planted" not in err.message + (err.hint or "")


def test_a_key_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    uid = nobody()
    path = key_file(tmp_path)
    os.chown(path, uid, -1)
    with pytest.raises(UsageError, match=f"belongs to uid {uid}, not to you") as exc:
        proxy_master_key("demo", path)
    assert exc.value.exit_code == 2
    assert f"chown {os.geteuid()} {path}" in (exc.value.hint or "")
    assert "chmod 600" in (exc.value.hint or "")


def test_a_key_in_a_folder_someone_else_owns_is_refused(tmp_path: Path) -> None:
    uid = nobody()
    path = key_file(tmp_path)
    os.chown(path.parent, uid, -1)
    with pytest.raises(UsageError, match=f"belongs to uid {uid}"):
        read_secret(path)


def test_a_planted_key_in_deskside_home_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user made deskside's secrets folder and left a key there: refused."""
    uid = nobody()
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path / "home"))
    folder = secrets_dir("demo")
    folder.mkdir(parents=True)
    (tmp_path / "home").chmod(0o700)
    (folder / PROXY_MASTER_KEY).write_text("sk-planted\n")
    (folder / PROXY_MASTER_KEY).chmod(0o600)
    os.chown(folder / PROXY_MASTER_KEY, uid, -1)
    with pytest.raises(UsageError, match="not to you"):
        proxy_master_key("demo")
    os.chown(folder / PROXY_MASTER_KEY, os.geteuid(), -1)
    os.chown(folder, uid, -1)
    (folder / PROXY_MASTER_KEY).unlink()
    with pytest.raises(UsageError, match="not to you"):
        proxy_master_key("demo")  # a new key is not written into their folder either
    assert not (folder / PROXY_MASTER_KEY).exists()


def test_a_key_that_is_a_link_is_refused(tmp_path: Path) -> None:
    target = key_file(tmp_path)
    link = tmp_path / "link-key"
    link.symlink_to(target)
    with pytest.raises(UsageError, match="must not be a link") as exc:
        load_or_create(link)
    assert str(target) in (exc.value.hint or "")
    assert target.read_text() == "sk-planted\n"


def test_a_key_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "key", 0o600)
    with pytest.raises(UsageError, match="must be a regular file"):
        read_secret(tmp_path / "key")


def test_the_users_own_private_key_is_read(tmp_path: Path) -> None:
    assert read_secret(key_file(tmp_path)).reveal() == "sk-planted"


def test_write_secret_replaces_a_planted_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    victim.chmod(0o644)
    path = tmp_path / "keys" / "key"
    path.parent.mkdir(mode=0o700)
    path.symlink_to(victim)
    write_secret_file(path, b"sk-new\n")
    assert victim.read_text() == "keep\n" and mode(victim) == 0o644
    assert not path.is_symlink() and mode(path) == 0o600
    assert read_secret(path).reveal() == "sk-new"


def test_generated_key_folders_are_0700_under_a_0_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path / "home"))
    old = os.umask(0)
    try:
        proxy_master_key("demo")
    finally:
        os.umask(old)
    path = secrets_dir("demo") / PROXY_MASTER_KEY
    assert mode(path) == 0o600
    for folder in (tmp_path / "home", tmp_path / "home" / "secrets", path.parent):
        assert mode(folder) == 0o700, folder


def test_generated_key_is_private_stable_and_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    old = os.umask(0)  # even a permissive umask gives 0600
    try:
        key = proxy_master_key("demo")
    finally:
        os.umask(old)
    path = secrets_dir("demo") / PROXY_MASTER_KEY
    assert path.is_file() and mode(path) == 0o600
    assert mode(path.parent) & 0o077 == 0
    value = key.reveal()
    assert value.startswith("sk-") and len(value) > 30
    assert value not in repr(key) and value not in str(key) and value not in f"{key}"
    assert proxy_master_key("demo").reveal() == value  # generated once


def test_the_generated_key_is_where_a_run_here_looks_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One location: the key `proxy_master_key` makes is the file a run on this machine
    hands its proxy; the recipe's own `proxy.master_key_file` wins over it."""
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    recipe = load_recipe(LOCAL_TINY)
    value = proxy_master_key(recipe.name).reveal()
    assert read_secret(master_key_here(recipe)).reveal() == value
    own = recipe.model_copy(
        update={"proxy": recipe.proxy.model_copy(update={"master_key_file": "/etc/key"})}
    )
    assert master_key_here(own) == Path("/etc/key")


def test_read_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "key"
    write_secret_file(path, b"sk-mine\n")
    assert mode(path) == 0o600
    assert proxy_master_key("x", path).reveal() == "sk-mine"
    assert load_or_create(path).reveal() == "sk-mine"


def test_refuses_a_file_others_can_read(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text("sk-open\n")
    path.chmod(0o644)
    with pytest.raises(UsageError, match="readable by others") as exc:
        read_secret(path)
    assert "sk-open" not in str(exc.value) and "chmod 600" in (exc.value.hint or "")


def test_refuses_empty_or_multiline(tmp_path: Path) -> None:
    path = tmp_path / "key"
    write_secret_file(path, b"sk-a\n")
    path.write_text("\n")
    with pytest.raises(UsageError, match="one non-empty line"):
        read_secret(path)
    with pytest.raises(UsageError, match="no such secret"):
        read_secret(tmp_path / "missing")


def test_engine_key_is_one_private_env_line_made_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    key = engine_api_key("demo")
    path = engine_env_path("demo")
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    assert path.read_text() == f"VLLM_API_KEY={key.reveal()}\n"
    assert engine_env_text(key) == path.read_bytes()  # what goes to the head
    assert engine_api_key("demo").reveal() == key.reveal()  # made once
    assert key.reveal() != proxy_master_key("demo").reveal()  # not the proxy's key
    assert engine_auth("demo", True) == {"Authorization": f"Bearer {key.reveal()}"}
    assert engine_auth("demo", False) is None  # no proxy in front: no key asked
    path.write_text("SOMETHING_ELSE=x\n")
    with pytest.raises(UsageError, match="no VLLM_API_KEY"):
        engine_api_key("demo")
