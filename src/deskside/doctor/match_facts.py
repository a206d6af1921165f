"""What must be the same on every node of a recipe, read from each node in one round trip:
the kernel, the NVIDIA driver and CUDA version, the NCCL library the engine will load (its
path and the sha256 of the file), the vLLM and deskside of the engine's Python, the node's
clock, and the MTU and carrier of the fabric interface.

`match_command` is a POSIX sh script printing `match.KEY=VALUE` lines (the prefix lets the
deploy's preflight run it in its own facts round trip, `deskside.deploy.preflight`);
`parse_match` reads them without I/O. A value the node does not have is "none"; a fact the
script did not print at all (it did not run) is None, unknown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from deskside.deploy.preflight import PYTHON_PROBE
from deskside.engine.launch import node_ip
from deskside.fabric.probe import interface_for_address
from deskside.fabric.sysfs import parse_ip_addr_json
from deskside.recipe.types import Node

NONE = "none"
PREFIX = "match."

# After PYTHON_PROBE (python, vllm, deskside installed): deskside's version, the NCCL
# library of the nvidia-nccl wheel found the way vLLM looks for it without importing torch
# (vllm/utils/nccl.py find_nccl_library_paths: find_spec("nvidia.nccl") + "lib"), and the
# CUDA version the driver supports (cuDriverGetVersion, what nvidia-smi shows).
MATCH_PY = """
import ctypes, os
try:
    print("deskside_version=" + m.version("deskside"))
except m.PackageNotFoundError:
    pass
try:
    s = u.find_spec("nvidia.nccl")
    for loc in (s.submodule_search_locations or []) if s else []:
        f = os.path.join(loc, "lib", "libnccl.so.2")
        if os.path.isfile(f):
            print("nccl_wheel=" + f)
            break
except Exception:
    pass
try:
    n = ctypes.c_int()
    if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(n)) == 0:
        print("cuda=%d.%d" % (n.value // 1000, n.value % 1000 // 10))
except (OSError, AttributeError):
    pass
"""

MATCH_SH = r"""
py=$1; code=$2; nccl=$3; ldpath=${4:-$LD_LIBRARY_PATH}; iface=$5
echo "match.clock=$(date +%s.%N)"
echo "match.kernel=$(uname -r)"
pyout=
if [ -n "$py" ] && command -v "$py" >/dev/null 2>&1; then
  pyout=$("$py" -c "$code" 2>/dev/null | sed 's/^/match./')
  printf '%s\n' "$pyout"
fi
smi=0
if [ -r /proc/driver/nvidia/version ]; then
  echo "match.driver_proc=$(head -n 1 /proc/driver/nvidia/version)"
else
  smi=1
fi
case $pyout in *"match.cuda="[0-9]*) ;; *) smi=1 ;; esac
if [ "$smi" = 1 ] && command -v nvidia-smi >/dev/null 2>&1; then
  echo "match.smi_driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader \
    2>/dev/null | head -n 1)"
  echo "match.smi_cuda=$(nvidia-smi 2>/dev/null \
    | sed -n 's/.*CUDA Version: *\([0-9][0-9.]*\).*/\1/p' | head -n 1)"
fi
if [ "$nccl" != - ]; then
  lib=
  case $nccl in
    */*) lib=$nccl ;;
    *)
      name=${nccl:-libnccl.so.2}
      # dlopen's order for a library torch links (ld.so(8); torch's RUNPATH leads into the
      # nvidia wheels): LD_LIBRARY_PATH, the wheel, then the loader cache
      old_ifs=$IFS; IFS=:
      for d in $ldpath; do
        if [ -n "$d" ] && [ -e "$d/$name" ]; then lib=$d/$name; break; fi
      done
      IFS=$old_ifs
      if [ -z "$lib" ] && [ "$name" = libnccl.so.2 ]; then
        lib=$(printf '%s\n' "$pyout" | sed -n 's/^match\.nccl_wheel=//p')
      fi
      if [ -z "$lib" ]; then
        ldc=$(command -v ldconfig || echo /sbin/ldconfig)
        lib=$("$ldc" -p 2>/dev/null | awk -v n="$name" '$1 == n { print $NF; exit }')
      fi
      ;;
  esac
  echo "match.nccl=${lib:-none}"
  if [ -n "$lib" ]; then
    if [ -r "$lib" ]; then
      echo "match.nccl_file=$(readlink -f -- "$lib")"
      echo "match.nccl_sha256=$(sha256sum -- "$lib" | cut -d ' ' -f 1)"
    else
      echo "match.nccl_sha256=missing"
    fi
  fi
fi
if [ -n "$iface" ]; then j=$(ip -j addr show dev "$iface" 2>/dev/null)
else j=$(ip -j addr show 2>/dev/null); fi
printf 'match.ip=%s\n' "$(printf '%s' "$j" | tr -d '\n')"
exit 0
"""


def match_args(
    *, python: str | None, engine_env: Mapping[str, str], nccl: bool, interface: str | None
) -> list[str]:
    """The script and its arguments (without `sh -c`), for `match_command` or the deploy's
    facts round trip. `python`: the engine's Python (None: the engine runs in an image);
    `nccl`: look for the NCCL library on the node (not when it comes with the image)."""
    so_path = engine_env.get("VLLM_NCCL_SO_PATH", "") if nccl else "-"
    return [
        MATCH_SH,
        "sh",
        python or "",
        PYTHON_PROBE + MATCH_PY,
        so_path,
        engine_env.get("LD_LIBRARY_PATH", ""),
        interface or "",
    ]


def match_command(
    *, python: str | None, engine_env: Mapping[str, str], nccl: bool, interface: str | None
) -> list[str]:
    return [
        "sh",
        "-c",
        *match_args(python=python, engine_env=engine_env, nccl=nccl, interface=interface),
    ]


@dataclass(frozen=True)
class MatchFacts:
    """One node's facts; None: unknown (not read)."""

    kernel: str | None = None
    driver: str | None = None
    cuda: str | None = None
    nccl: str | None = None  # the path the engine loads, or "none"
    nccl_sha256: str | None = None  # or "none" (no library), "missing" (path unreadable)
    nccl_file: str | None = None  # the file behind the path (links resolved)
    vllm: str | None = None
    deskside: str | None = None
    clock: float | None = None  # the node's clock (Unix seconds)
    interface: str | None = None  # the fabric interface
    mtu: int | None = None
    link_up: bool | None = None


_VERSION = re.compile(r"\b\d+\.\d+(?:\.\d+)*\b")


def driver_version(proc_line: str) -> str | None:
    """The version in /proc/driver/nvidia/version's first line ("NVRM version: NVIDIA UNIX
    Open Kernel Module for aarch64  580.95.05  Release Build ...")."""
    m = _VERSION.search(proc_line.partition(":")[2])
    return m.group(0) if m else None


def _clock(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # a date(1) without %N prints it as is
        head = text.split(".", 1)[0]
        return float(head) if head.isdigit() else None


def parse_match(stdout: str, node: Node) -> MatchFacts:
    """The `match.` lines of `stdout` (other lines are ignored). The fabric interface is the
    recipe's, else the one carrying the node's address, as `deskside fabric check` picks it."""
    values: dict[str, str] = {}
    for line in stdout.splitlines():
        if line.startswith(PREFIX):
            key, _, value = line[len(PREFIX) :].partition("=")
            values[key] = value.strip()
    if "kernel" not in values:
        return MatchFacts()

    def known(key: str) -> str | None:
        return values.get(key) or None

    driver = driver_version(values.get("driver_proc", "")) or known("smi_driver")
    links = parse_ip_addr_json(values.get("ip", ""))
    interface = node.fabric.interface if node.fabric else None
    interface = interface or interface_for_address(links, node_ip(node))
    link = links.get(interface) if interface else None
    nccl = known("nccl")
    return MatchFacts(
        kernel=values["kernel"] or NONE,
        driver=driver or NONE,
        cuda=known("cuda") or known("smi_cuda") or NONE,
        nccl=nccl,
        nccl_sha256=known("nccl_sha256") or (NONE if nccl == NONE else None),
        nccl_file=known("nccl_file"),
        vllm=known("vllm") or (NONE if "python" in values else None),
        deskside=known("deskside_version") or (NONE if "python" in values else None),
        clock=_clock(values.get("clock", "")),
        interface=interface,
        mtu=link.mtu if link else None,
        link_up=link.up if link else None,
    )
