"""Secrets: generated or read from files, 0600, never printed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from deskside.errors import UsageError
from deskside.secrets import (
    PROXY_MASTER_KEY,
    load_or_create,
    proxy_master_key,
    read_secret,
    secrets_dir,
    write_secret,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


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


def test_read_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "key"
    write_secret(path, "sk-mine")
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
    write_secret(path, "sk-a")
    path.write_text("\n")
    with pytest.raises(UsageError, match="one non-empty line"):
        read_secret(path)
    with pytest.raises(UsageError):
        write_secret(path, "a\nb")
    with pytest.raises(UsageError, match="no such secret"):
        read_secret(tmp_path / "missing")
