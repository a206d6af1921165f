"""The NVML adapter over a stand-in for the `pynvml` module: a GB10 whose framebuffer query
is unsupported reads as unified, failing readings are None, versions are as CUDA writes
them; no bindings or no driver is "no GPU"."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from deskside.exporter.gpu import PyNvml, open_nvml


class NVMLError(Exception):
    pass


def fake_pynvml(name: bytes, memory_supported: bool, init_fails: bool = False) -> Any:
    nv: Any = ModuleType("pynvml")
    nv.NVMLError = NVMLError
    nv.NVML_TEMPERATURE_GPU = 0
    nv.NVML_DEVICE_ADDRESSING_MODE_ATS = 2

    def unsupported(*args: object) -> None:
        raise NVMLError("Not Supported")

    def init() -> None:
        if init_fails:
            raise NVMLError("Driver Not Loaded")

    def memory(handle: object) -> object:
        if not memory_supported:
            unsupported()
        return SimpleNamespace(used=70 << 30, total=80 << 30, free=10 << 30)

    nv.nvmlInit = init
    nv.nvmlDeviceGetCount = lambda: 1
    nv.nvmlDeviceGetHandleByIndex = lambda i: f"handle{i}"
    nv.nvmlDeviceGetAddressingMode = unsupported
    nv.nvmlDeviceGetName = lambda h: name
    nv.nvmlDeviceGetMemoryInfo = memory
    nv.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=96, memory=0)
    nv.nvmlDeviceGetPowerUsage = lambda h: 41_250  # milliwatts
    nv.nvmlDeviceGetTemperature = lambda h, sensor: 57
    nv.nvmlSystemGetDriverVersion = lambda: "580.95.05"
    nv.nvmlSystemGetCudaDriverVersion_v2 = lambda: 13000
    return nv


def test_gb10_reads_as_unified() -> None:
    nvml = PyNvml(fake_pynvml(b"NVIDIA GB10", memory_supported=False))
    assert nvml.device_count() == 1
    assert nvml.unified(0) is True
    assert nvml.memory(0) is None
    assert nvml.utilization(0) == 0.96
    assert nvml.power_watts(0) == 41.25
    assert nvml.temperature_celsius(0) == 57.0


def test_discrete_gpu_has_a_framebuffer() -> None:
    nvml = PyNvml(fake_pynvml(b"NVIDIA H100 80GB HBM3", memory_supported=True))
    assert nvml.unified(0) is False
    assert nvml.memory(0) == (70 << 30, 80 << 30)


def test_unsupported_framebuffer_query_means_unified_whatever_the_name() -> None:
    assert PyNvml(fake_pynvml(b"NVIDIA Thor", memory_supported=False)).unified(0) is True


def test_open_nvml_without_driver_or_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(b"x", True, init_fails=True))
    assert open_nvml() is None
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert open_nvml() is None
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(b"NVIDIA GB10", False))
    nvml = open_nvml()
    assert nvml is not None and nvml.device_count() == 1
