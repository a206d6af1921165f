"""What the exporter tests share: the fixture trees, the flagship recipe, a fake GB10 NVML,
and readers that take expected values from the fixture files themselves."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
SYSFS = FIXTURES / "sysfs"
PROC = FIXTURES / "proc"
ENGINE_METRICS = FIXTURES / "engine" / "vllm-metrics.txt"
FLAGSHIP = ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml"
ENGINE_PID = 2817  # the engine process of the proc fixtures (make_fixtures.py)
GIB = 1024**3


def meminfo_kb(case: str, key: str) -> int:
    """A meminfo line's number, as the fixture file writes it (kB)."""
    text = (PROC / case / "meminfo").read_text()
    match = re.search(rf"^{key}:\s+(\d+) kB$", text, re.MULTILINE)
    assert match is not None, key
    return int(match.group(1))


def environ_value(case: str, pid: int, key: str) -> str:
    raw = (PROC / case / str(pid) / "environ").read_bytes()
    items = dict(item.split(b"=", 1) for item in raw.split(b"\0") if item)
    return items[key.encode()].decode()


def fixture_gid_index(case: str, device: str, address: str) -> int:
    """The RoCE v2 GID slot of `device` port 1 holding ::ffff:address, read from the tree."""
    packed = ipaddress.IPv6Address(f"::ffff:{address}").packed.hex()
    want = ":".join(packed[i : i + 4] for i in range(0, 32, 4))
    port = SYSFS / case / "sys" / "class" / "infiniband" / device / "ports" / "1"
    found = [
        int(g.name)
        for g in (port / "gids").iterdir()
        if g.read_text().strip() == want
        and (port / "gid_attrs" / "types" / g.name).read_text().strip() == "RoCE v2"
    ]
    assert len(found) == 1, found
    return found[0]


def exposition_sample_sum(text: str, name: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    )


def parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)] of an exposition."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


@dataclass
class FakeGb10:
    """NVML of a DGX Spark: one integrated GPU whose framebuffer query is unsupported."""

    count: int = 1
    util: float = 0.87
    watts: float = 61.25
    celsius: float = 58.0
    calls: list[str] = field(default_factory=list)

    def device_count(self) -> int:
        return self.count

    def unified(self, index: int) -> bool:
        return True

    def memory(self, index: int) -> tuple[int, int] | None:
        self.calls.append("memory")
        return None  # NVML_ERROR_NOT_SUPPORTED on GB10

    def utilization(self, index: int) -> float | None:
        return self.util

    def power_watts(self, index: int) -> float | None:
        return self.watts

    def temperature_celsius(self, index: int) -> float | None:
        return self.celsius


@dataclass
class FakeDiscrete(FakeGb10):
    """A discrete GPU: framebuffer figures of its own."""

    used: int = 70 * GIB
    total: int = 80 * GIB

    def unified(self, index: int) -> bool:
        return False

    def memory(self, index: int) -> tuple[int, int] | None:
        return (self.used, self.total)
