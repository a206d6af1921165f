"""Node hardware profiles: how much memory an engine rank may plan with, and how safely.

`total_bytes` is what the device reports as its total memory (what vLLM multiplies by
`gpu_memory_utilization`). On unified-memory hosts (GB10) CPU and GPU share it, so the part
left outside vLLM's budget is all the operating system, the container runtime and every
other process have; `safety_floor_bytes` is the least of it a plan may leave.
"""

from __future__ import annotations

from dataclasses import dataclass

from deskside.units import GIB


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    description: str
    device: str  # "gpu" or "cpu": what vLLM runs on
    total_bytes: int  # memory one rank's device reports (torch's total memory)
    unified: bool  # CPU and GPU share one memory (host freezes instead of CUDA OOM)
    gpus_per_node: int
    safety_floor_bytes: int  # least memory left outside vLLM's budget on the node
    attention_backend: str  # the backend vLLM picks by default there (block-size rules)
    cpu_amx: bool | None = None  # device cpu: AMX tiles (None: this machine's CPU decides)


def _cpu(name: str, description: str, amx: bool | None) -> HardwareProfile:
    """vLLM on CPU: the KV cache is sized explicitly; the CPU's AMX tiles decide the MLA
    kernels (None: the CPU of the machine that plans, where CPU nodes run)."""
    return HardwareProfile(
        name=name,
        description=description,
        device="cpu",
        total_bytes=0,
        unified=True,
        gpus_per_node=1,
        safety_floor_bytes=2 * GIB,
        attention_backend="cpu_attn",
        cpu_amx=amx,
    )


# GB10: 128 GB LPDDR5X, of which the GPU reports about 121.6 GiB (published two-Spark
# setups say "121 GB usable"). The floor is calibrated on published runs: 0.82 (21.9 GiB
# left) served for months; 0.835 (20.1 GiB left) was killed during FlashInfer autotune
# (docs/flagship.md #10).
PROFILES: dict[str, HardwareProfile] = {
    p.name: p
    for p in (
        HardwareProfile(
            name="gb10",
            description="NVIDIA DGX Spark / GB10 Grace Blackwell, 128 GB unified memory",
            device="gpu",
            total_bytes=int(121.6 * GIB),
            unified=True,
            gpus_per_node=1,
            safety_floor_bytes=21 * GIB,
            attention_backend="flashmla",
        ),
        HardwareProfile(
            name="h100-80gb",
            description="NVIDIA H100 SXM/PCIe 80 GB HBM3",
            device="gpu",
            total_bytes=int(79.19 * GIB),
            unified=False,
            gpus_per_node=1,
            safety_floor_bytes=0,
            attention_backend="flash_attn",
        ),
        HardwareProfile(
            name="h200-141gb",
            description="NVIDIA H200 141 GB HBM3e",
            device="gpu",
            total_bytes=int(139.8 * GIB),
            unified=False,
            gpus_per_node=1,
            safety_floor_bytes=0,
            attention_backend="flash_attn",
        ),
        HardwareProfile(
            name="rtx-pro-6000-96gb",
            description="NVIDIA RTX PRO 6000 Blackwell 96 GB GDDR7",
            device="gpu",
            total_bytes=int(94.97 * GIB),
            unified=False,
            gpus_per_node=1,
            safety_floor_bytes=0,
            attention_backend="flash_attn",
        ),
        _cpu("cpu", "vLLM on this machine's CPU (KV cache sized explicitly, no GPU)", None),
        _cpu("cpu-amx", "vLLM on an x86 CPU with AMX tiles (its AMX kernels)", True),
        _cpu("cpu-no-amx", "vLLM on a CPU without AMX tiles (its reference kernels)", False),
    )
}


def get_profile(name: str) -> HardwareProfile:
    """The profile called `name`; KeyError lists the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown hardware profile {name!r}; known: {', '.join(PROFILES)}") from None
