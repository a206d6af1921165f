"""Whether a CPU has AMX tiles, which decides vLLM's CPU attention path for MLA models:
with them (x86 only) vLLM 0.32 runs its AMX_MLA kernels at the default block size, chunked
prefill and prefix caching on; without them the reference CPU MLA kernel forces block size
16 and turns both off (`CpuPlatform.check_and_update_config`, which asks
`torch.cpu._is_amx_tile_supported()`)."""

from __future__ import annotations

import platform

from deskside.transport.base import Transport
from deskside.transport.local import LocalTransport

X86 = ("x86_64", "amd64", "i386", "i686")
CPUINFO_LIMIT = 1 << 20  # bytes of /proc/cpuinfo read at most: 256 cores take about 400 KiB


def amx_tiles(cpuinfo: str, machine: str) -> bool:
    """From /proc/cpuinfo text and the machine name: an x86 CPU whose flags (as the kernel
    enabled them) include `amx_tile`."""
    if machine.lower() not in X86:
        return False
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return "amx_tile" in value.split()
    return False


def this_machine_amx(t: Transport | None = None) -> bool:
    """`amx_tiles` of the machine running deskside, read through its Transport (False when
    /proc/cpuinfo is unreadable, not a regular file, or longer than CPUINFO_LIMIT)."""
    t = t or LocalTransport()
    try:
        if isinstance(t, LocalTransport):  # bounded and non-blocking (deskside.smallfile)
            data = t.get("/proc/cpuinfo", limit=CPUINFO_LIMIT)
        else:
            data = t.get("/proc/cpuinfo")[:CPUINFO_LIMIT]
    except OSError:
        return False
    text = data.decode(errors="replace")
    return amx_tiles(text, platform.machine())
