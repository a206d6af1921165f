"""The engine's unit and container on a real host: its memory limit (runtime.memory_max, or
the hardware's memory less the plan's safety floor), memlock only where RDMA needs it, the
restart policy, extra bind mounts, and the Compose program (v2 plugin or v1.29) in every
command deskside writes or runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from ruamel.yaml import YAML

from deskside.compose_cli import compose_argv, logs_argv, running_argv
from deskside.layout import NodeLayout
from deskside.recipe.serving import Runtime
from deskside.recipe.types import Recipe
from deskside.records.node import NodeState
from deskside.render.assemble import render
from deskside.render.bundle import Bundle
from deskside.runtime.control import Control
from deskside.units import GIB

from .render_cases import FLAGSHIP, LOCAL_TINY, load_and_plan


def _render(path: Path, **runtime: object) -> tuple[Recipe, Bundle]:
    recipe, plan = load_and_plan(path)
    recipe = recipe.model_copy(
        update={"runtime": recipe.runtime.model_copy(update={"systemd": True, **runtime})}
    )
    return recipe, render(recipe, path, plan)


def _compose(bundle: Bundle, node: str) -> Any:
    return YAML(typ="safe", pure=True).load(bundle[f"{node}/compose.yaml"])["services"]["engine"]


def _unit(bundle: Bundle, node: str, recipe: Recipe) -> str:
    return bundle[f"{node}/deskside-{recipe.name}.service"].decode()


def test_flagship_container_limit_is_gb10_memory_less_the_floor() -> None:
    _, bundle = _render(FLAGSHIP)
    _, plan = load_and_plan(FLAGSHIP)
    assert plan.memory is not None
    # GB10: 121.6 GiB reported, 21 GiB safety floor
    assert plan.memory.total_bytes == int(121.6 * GIB)
    assert plan.memory.safety_floor_bytes == 21 * GIB
    for node in ("ai1", "ai2"):
        engine = _compose(bundle, node)
        assert engine["mem_limit"] == int(121.6 * GIB) - 21 * GIB
        # RoCE: unlimited memlock and the RDMA devices
        assert engine["ulimits"]["memlock"] == -1
        assert engine["devices"] == ["/dev/infiniband:/dev/infiniband"]


def test_flagship_native_unit_carries_memory_max_and_memlock() -> None:
    recipe, bundle = _render(FLAGSHIP, kind="native", python="/opt/vllm/bin/python")
    unit = _unit(bundle, "ai1", recipe)
    assert f"MemoryMax={int(121.6 * GIB) - 21 * GIB}\n" in unit
    assert "LimitMEMLOCK=infinity\n" in unit
    assert "Restart=always\n" in unit


def test_native_unit_throttles_between_the_budget_and_the_limit() -> None:
    recipe, bundle = _render(FLAGSHIP, kind="native", python="/opt/vllm/bin/python")
    _, plan = load_and_plan(FLAGSHIP)
    assert plan.memory is not None
    limit = plan.memory.total_bytes - plan.memory.safety_floor_bytes
    budget = plan.memory.vllm_budget_bytes
    high = limit - (limit - budget) // 2
    unit = _unit(bundle, "ai1", recipe)
    assert f"MemoryHigh={high}\n" in unit and budget < high < limit
    assert unit.index("MemoryHigh=") < unit.index("MemoryMax=")
    assert "MemoryLimit=" not in unit  # deprecated; MemoryMax= covers cgroup v1 too
    # a limit at or under the budget: the engine would always be throttled, so no line
    recipe, bundle = _render(
        FLAGSHIP, kind="native", python="/opt/vllm/bin/python", memory_max=budget
    )
    assert "MemoryHigh=" not in _unit(bundle, "ai1", recipe)


def test_cpu_profile_has_no_limit_unless_the_recipe_sets_one() -> None:
    recipe, bundle = _render(LOCAL_TINY)
    unit = _unit(bundle, "node0", recipe)
    assert "MemoryMax=" not in unit
    # a TCP fabric: no memlock (raising it needs privilege RDMA alone needs)
    assert "LimitMEMLOCK" not in unit
    recipe, bundle = _render(LOCAL_TINY, memory_max=8 * GIB)
    assert f"MemoryMax={8 * GIB}\n" in _unit(bundle, "node0", recipe)
    assert "MemoryHigh=" not in _unit(bundle, "node0", recipe)  # no planned budget on CPU


def test_explicit_limit_overrides_the_hardware_one() -> None:
    _, bundle = _render(FLAGSHIP, memory_max=64 * GIB)
    assert _compose(bundle, "ai2")["mem_limit"] == 64 * GIB


def test_extra_volumes_are_read_only_when_asked() -> None:
    _, bundle = _render(FLAGSHIP, volumes=["/opt/venv:/opt/venv:ro", "/data:/mnt/data"])
    volumes = {v["target"]: v for v in _compose(bundle, "ai1")["volumes"]}
    assert volumes["/opt/venv"]["source"] == "/opt/venv" and volumes["/opt/venv"]["read_only"]
    assert volumes["/mnt/data"]["source"] == "/data" and "read_only" not in volumes["/mnt/data"]
    # no volume asks Docker to create its source (Compose v1.29 refuses the key)
    assert not any("bind" in v for v in volumes.values())


@pytest.mark.parametrize(
    "bad", ["relative:/x", "/a:relative", "/a:/b:rx", "/a", "/a:/b:ro:extra", "/a b:/c"]
)
def test_bad_volumes_are_refused(bad: str) -> None:
    with pytest.raises(ValidationError):
        Runtime(volumes=[bad])


def test_compose_program_in_units() -> None:
    recipe, bundle = _render(FLAGSHIP, compose="docker-compose")
    unit = _unit(bundle, "ai1", recipe)
    assert "ExecStart=docker-compose --project-name deskside-dual-spark-deepseek-v4-flash " in unit
    _, bundle = _render(FLAGSHIP)
    assert "ExecStart=docker compose --project-name " in _unit(bundle, "ai1", recipe)


def test_compose_commands_for_both_programs() -> None:
    assert compose_argv("docker-compose", "p", "/f.yaml", "up")[:2] == [
        "docker-compose",
        "--project-name",
    ]
    assert compose_argv("docker compose", "p", "/f.yaml", "down")[:3] == [
        "docker",
        "compose",
        "--project-name",
    ]
    # v1.29's logs cannot limit by time
    assert "--since" not in logs_argv("docker-compose", "p", "/f", since="100", lines=None)
    assert logs_argv("docker compose", "p", "/f", since="100", lines=None)[-2:] == [
        "--since",
        "100",
    ]
    assert logs_argv("docker-compose", "p", "/f", since="100", lines=5)[-2:] == ["--tail", "5"]
    # whether it runs is Docker's answer, the same for both
    assert running_argv("p") == [
        "docker",
        "ps",
        "--quiet",
        "--filter",
        "label=com.docker.compose.project=p",
        "--filter",
        "status=running",
    ]


def test_down_disables_the_units() -> None:
    layout = NodeLayout.at("/opt/deskside/r", "r")
    control = Control("systemd", "native", layout)
    state = NodeState.model_validate(
        {
            "recipe": "r",
            "node": "n",
            "role": "head",
            "node_rank": 0,
            "release": None,
            "control": "systemd",
            "started_at": "2026-01-01T00:00:00Z",
            "units": ["deskside-r-exporter.service"],
        }
    )
    argv = control.stop_commands(state, 10)
    assert ["systemctl", "disable", "--now", "--quiet", "deskside-r-exporter.service"] in argv
    assert ["systemctl", "disable", "--now", "--quiet", layout.unit_name] in argv
