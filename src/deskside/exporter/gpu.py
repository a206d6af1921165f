"""GPU readings through NVML, behind a small Protocol so tests feed a fake device.

On GB10 (DGX Spark) the GPU has no framebuffer of its own: it shares the node's LPDDR5X
with the CPU, and NVML's framebuffer memory query is unsupported there. For such an
integrated (unified-memory) GPU the memory series are the node's: total = MemTotal,
used = MemTotal - MemAvailable. A discrete GPU reports nvmlDeviceGetMemoryInfo.

`open_nvml()` is None when there is no NVML (the `nvidia-ml-py` module or the driver's
library is missing, or nvmlInit fails): the node then reports `gpu_present 0`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from deskside.facts.memory import MemInfo


class Nvml(Protocol):
    """What the exporter asks NVML. A reading that fails returns None (series omitted)."""

    def device_count(self) -> int: ...

    def unified(self, index: int) -> bool:
        """Integrated GPU sharing the host's memory (GB10)."""
        ...

    def memory(self, index: int) -> tuple[int, int] | None:
        """(used, total) framebuffer bytes; None when unsupported."""
        ...

    def utilization(self, index: int) -> float | None:
        """GPU busy fraction over the driver's last sample period, 0-1."""
        ...

    def power_watts(self, index: int) -> float | None: ...

    def temperature_celsius(self, index: int) -> float | None: ...


@dataclass(frozen=True)
class GpuReading:
    index: int
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    utilization: float | None
    power_watts: float | None
    temperature_celsius: float | None


def read_gpus(nvml: Nvml | None, meminfo: MemInfo | None) -> list[GpuReading]:
    """One reading per GPU; [] without NVML."""
    if nvml is None:
        return []
    readings = []
    for i in range(nvml.device_count()):
        used: int | None
        total: int | None
        if nvml.unified(i):
            used = meminfo.used_bytes if meminfo else None
            total = meminfo.total_bytes if meminfo else None
        else:
            fb = nvml.memory(i)
            used, total = fb if fb is not None else (None, None)
        readings.append(
            GpuReading(
                index=i,
                memory_used_bytes=used,
                memory_total_bytes=total,
                utilization=nvml.utilization(i),
                power_watts=nvml.power_watts(i),
                temperature_celsius=nvml.temperature_celsius(i),
            )
        )
    return readings


class PyNvml:
    """`Nvml` over the nvidia-ml-py bindings (`import pynvml`)."""

    def __init__(self, module: Any) -> None:
        self._nv = module
        self._handles = [
            module.nvmlDeviceGetHandleByIndex(i) for i in range(module.nvmlDeviceGetCount())
        ]

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._nv, name)(*args)
        except (self._nv.NVMLError, AttributeError):
            return None

    def device_count(self) -> int:
        return len(self._handles)

    def unified(self, index: int) -> bool:
        handle = self._handles[index]
        mode = self._call("nvmlDeviceGetAddressingMode", handle)
        if mode is not None and mode == getattr(self._nv, "NVML_DEVICE_ADDRESSING_MODE_ATS", -1):
            return True
        name = self._call("nvmlDeviceGetName", handle)
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        if isinstance(name, str) and "GB10" in name.upper():
            return True
        return self._call("nvmlDeviceGetMemoryInfo", handle) is None  # no framebuffer query

    def memory(self, index: int) -> tuple[int, int] | None:
        info = self._call("nvmlDeviceGetMemoryInfo", self._handles[index])
        return None if info is None else (int(info.used), int(info.total))

    def utilization(self, index: int) -> float | None:
        rates = self._call("nvmlDeviceGetUtilizationRates", self._handles[index])
        return None if rates is None else int(rates.gpu) / 100.0

    def power_watts(self, index: int) -> float | None:
        milliwatts = self._call("nvmlDeviceGetPowerUsage", self._handles[index])
        return None if milliwatts is None else int(milliwatts) / 1000.0

    def temperature_celsius(self, index: int) -> float | None:
        sensor = getattr(self._nv, "NVML_TEMPERATURE_GPU", 0)
        value = self._call("nvmlDeviceGetTemperature", self._handles[index], sensor)
        return None if value is None else float(value)


def open_nvml() -> Nvml | None:
    """NVML of this machine, or None: no bindings, no driver library, or init failing."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        return PyNvml(pynvml)
    except pynvml.NVMLError:
        return None
