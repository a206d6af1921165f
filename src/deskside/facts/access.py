"""Who deskside is on a node and what it may do there: the login's uid, whether it has
passwordless sudo (asked only when it is not root), whether systemd runs the node, and the
mode and owner of a file (a secret must be the login's own, unreadable by others)."""

from __future__ import annotations

from dataclasses import dataclass

from deskside.facts.base import Fact, FactError

LOGIN_SH = r"""
uid=$(id -u); echo "uid=$uid"
if [ "$uid" != 0 ]; then
  if sudo -n true 2>/dev/null; then echo sudo=1; else echo sudo=0; fi
fi
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  echo systemd=1
fi
"""

FILE_SH = r"""
if [ -r "$1" ]; then stat -c 'mode=%a owner=%u' -- "$1"; else echo missing; fi
"""


@dataclass(frozen=True)
class Login:
    uid: int
    sudo: bool = False  # passwordless sudo (root needs none)
    systemd: bool = False  # systemd is the node's init

    @property
    def root(self) -> bool:
        return self.uid == 0


def _pairs(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key not in out:
            out[key] = value
    return out


def parse_login(text: str) -> Login:
    values = _pairs(text)
    uid = values.get("uid", "")
    if not uid.isdigit() or len(uid) > 10:
        raise FactError("no uid")
    return Login(int(uid), values.get("sudo") == "1", values.get("systemd") == "1")


def login() -> Fact[Login]:
    return Fact("login", LOGIN_SH, parse_login, cap=4096)


@dataclass(frozen=True)
class FileAccess:
    """A file as the login sees it. `mode` None: missing or unreadable."""

    path: str
    mode: int | None = None
    owner: int | None = None  # its owner's uid

    @property
    def others_may_read(self) -> bool:
        return self.mode is not None and bool(self.mode & 0o077)


def file_access(path: str) -> Fact[FileAccess]:
    def parse(text: str) -> FileAccess:
        if text.strip() == "missing":
            return FileAccess(path)
        values = _pairs(text)
        mode, owner = values.get("mode", ""), values.get("owner", "")
        if not (mode.isdigit() and set(mode) <= set("01234567") and len(mode) <= 4):
            raise FactError("no mode")
        if not owner.isdigit() or len(owner) > 10:
            raise FactError("no owner")
        return FileAccess(path, int(mode, 8), int(owner))

    return Fact(f"file_access {path}", FILE_SH, parse, args=(path,), cap=4096)
