"""What the guard renders, checked by the real tools: with guard.enforce the MemoryBelowFloor
rule fires (promtool) by the last evaluation before the guard stops the engine, and a rule
that waits the guard's whole window fails its rendered tests; the native engine unit with
MemoryHigh= under MemoryMax= passes `systemd-analyze verify`."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from deskside.recipe.types import Guard
from deskside.render.assemble import render
from deskside.render.prometheus import RULES_FILE, RULES_TEST_FILE

from ..unit.render_cases import RECIPES, load_and_plan
from .test_render_validators import run, systemd_verify, tool

pytestmark = pytest.mark.integration
FLAGSHIP = next(p for p in RECIPES if p.stem == "dual-spark-deepseek-v4-flash")


def _rules(tmp_path: Path, window: float, scrape: str) -> Path:
    recipe, plan = load_and_plan(FLAGSHIP)
    variant = recipe.model_copy(
        update={
            "guard": Guard(enforce=True, window=window),
            "monitoring": recipe.monitoring.model_copy(update={"scrape_interval": scrape}),
        }
    )
    render(variant, FLAGSHIP, plan).write(tmp_path / "out")
    return tmp_path / "out" / "cluster" / "prometheus" / "rules"


@pytest.mark.parametrize(("window", "scrape"), [(30, "15s"), (120, "15s"), (60, "5s")])
def test_the_alert_fires_before_the_guard_acts(window: float, scrape: str, tmp_path: Path) -> None:
    rules = _rules(tmp_path, window, scrape)
    test_file = rules / RULES_TEST_FILE.rpartition("/")[2]
    names = [t["name"] for t in YAML(typ="safe").load(test_file.read_text())["tests"]]
    assert f"MemoryBelowFloor: fires before the guard stops the engine ({window:g} s) (fires)" in (
        names
    )
    done = run([tool("promtool"), "test", "rules", test_file.name], cwd=rules)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_rule_that_waits_the_whole_window_fails_its_tests(tmp_path: Path) -> None:
    rules = _rules(tmp_path, 120, "15s")
    path = rules / RULES_FILE.rpartition("/")[2]
    text = path.read_text()
    floor_rule = text.index("alert: MemoryBelowFloor")
    # MemoryBelowFloor waits min(60, 120 - 2 x 15) s; make it wait the whole window
    assert text[floor_rule:].split("\n")[2].strip() == "for: 1m"
    path.write_text(text[:floor_rule] + text[floor_rule:].replace("for: 1m", "for: 2m", 1))
    done = run([tool("promtool"), "test", "rules", "deskside.rules.test.yml"], cwd=rules)
    assert done.returncode != 0
    assert "fires before the guard stops the engine" in done.stdout + done.stderr


def test_the_native_unit_with_memory_high_verifies(tmp_path: Path) -> None:
    recipe, plan = load_and_plan(FLAGSHIP)
    runtime = recipe.runtime.model_copy(
        update={"kind": "native", "systemd": True, "python": "/opt/vllm/bin/python"}
    )
    variant = recipe.model_copy(update={"runtime": runtime})
    render(variant, FLAGSHIP, plan).write(tmp_path / "out")
    unit = tmp_path / "out" / "ai1" / f"deskside-{recipe.name}.service"
    text = unit.read_text()
    assert "MemoryHigh=" in text and "MemoryMax=" in text
    done = systemd_verify(unit, tmp_path / "stubs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Unknown key" not in done.stderr and "MemoryHigh" not in done.stderr
