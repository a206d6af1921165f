"""What `deskside setup` reads on a node before it plans: two round trips through the
node's Transport (`deskside.facts.base.gather`): who logs in and how the node keeps its
network (`about`), then, once the paths are known, each wanted file's sha256, whether each
wanted line is there, whether each unit is enabled and the head's public key (`held`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from deskside.facts.base import Fact, FactError

ABOUT_SH = r"""
echo "uid=$(id -u)"
echo "home=$HOME"
if [ -d /run/systemd/system ]; then echo systemd=1; fi
if command -v netplan >/dev/null 2>&1 && ls /etc/netplan/*.yaml >/dev/null 2>&1; then
  echo netplan=1
fi
ip -o link show 2>/dev/null | awk -F': ' '{sub(/@.*/, "", $2); print "interface=" $2}'
ip -o -4 addr show 2>/dev/null | awk '{print "address=" $2 " " $4}'
if [ -r /etc/ssh/ssh_host_ed25519_key.pub ]; then
  echo "host_key=$(head -c 400 /etc/ssh/ssh_host_ed25519_key.pub | head -n 1)"
fi
"""

# args: F path ... L path line ... U unit ... K key
HELD_SH = r"""
while [ $# -gt 0 ]; do
  case "$1" in
  F) if [ -L "$2" ]; then echo "file link $2"
     elif [ -f "$2" ]; then echo "file $(sha256sum < "$2" | cut -c1-64) $2"
     elif [ -e "$2" ]; then echo "file other $2"
     else echo "file absent $2"; fi; shift 2 ;;
  L) if [ -f "$2" ] && grep -Fxq -e "$3" -- "$2"; then echo "line yes $2"
     else echo "line no $2"; fi; shift 3 ;;
  U) s=$(systemctl is-enabled "$2" 2>/dev/null); echo "unit ${s:-absent} $2"; shift 2 ;;
  K) if [ -f "$2" ] && [ -f "$2.pub" ]; then echo "key $(head -n 1 "$2.pub")"
     else echo "key absent"; fi; shift 2 ;;
  *) exit 2 ;;
  esac
done
"""

HOST_KEY = re.compile(r"ssh-ed25519 [A-Za-z0-9+/=]{60,80}( \S+)?")


@dataclass(frozen=True)
class About:
    uid: int
    home: str
    systemd: bool
    netplan: bool
    host_key: str | None
    interfaces: tuple[str, ...] = ()
    addresses: tuple[tuple[str, str], ...] = ()  # (interface, IPv4 address without prefix)


def parse_about(text: str) -> About:
    values: dict[str, str] = {}
    interfaces: list[str] = []
    addresses: list[tuple[str, str]] = []
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if k == "interface" and sep:
            interfaces.append(v.strip())
        elif k == "address" and sep and len(v.split()) == 2:
            name, cidr = v.split()
            addresses.append((name, cidr.partition("/")[0]))
        elif sep and k not in values:
            values[k] = v.strip()
    uid, home = values.get("uid", ""), values.get("home", "")
    if not uid.isdigit() or not home.startswith("/"):
        raise FactError("no uid or home")
    key = values.get("host_key")
    return About(
        int(uid),
        home,
        values.get("systemd") == "1",
        values.get("netplan") == "1",
        key if key and HOST_KEY.fullmatch(key) else None,
        tuple(interfaces),
        tuple(addresses),
    )


def about() -> Fact[About]:
    return Fact("setup_about", ABOUT_SH, parse_about, cap=4096)


@dataclass(frozen=True)
class Held:
    files: dict[str, str] = field(default_factory=dict)  # path -> sha256|absent|link|other
    lines: dict[str, bool] = field(default_factory=dict)  # path -> the wanted line is there
    units: dict[str, str] = field(default_factory=dict)  # unit -> systemctl is-enabled
    public_key: str | None = None  # the head's deskside key, when made


def parse_held(text: str) -> Held:
    out = Held()
    public: str | None = None
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "key":
            public = None if rest == "absent" else rest.strip()
            continue
        state, _, name = rest.partition(" ")
        if kind == "file":
            out.files[name] = state
        elif kind == "line":
            out.lines[name] = state == "yes"
        elif kind == "unit":
            out.units[name] = state
        else:
            raise FactError(f"unexpected line {line[:80]!r}")
    return Held(out.files, out.lines, out.units, public)


def held(
    files: Sequence[str], lines: Sequence[tuple[str, str]], units: Sequence[str], key: str | None
) -> Fact[Held]:
    args: list[str] = []
    for path in files:
        args += ["F", path]
    for path, text in lines:
        args += ["L", path, text]
    for unit in units:
        args += ["U", unit]
    if key:
        args += ["K", key]
    return Fact("setup_held", HELD_SH, parse_held, args=tuple(args), cap=64 * 1024)
