"""Rendered bundles pass the real validators: `systemd-analyze verify` on the units,
`shellcheck` on the scripts, `promtool check config` / `check rules`, the Compose files
against the Compose specification's JSON Schema (vendored: tests/data/compose-spec.json,
see its README), and the dashboards through the Grafana Foundation SDK's models.

Cases: every shipped recipe, the hostile recipe of the unit tests, and local-tiny with its
systemd units, proxy and monitoring switched on (native units, a second topology).

A missing validator fails these tests (it does not skip them): `scripts/system-deps`
installs them (Debian packages systemd, shellcheck, prometheus).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from ruamel.yaml import YAML

from deskside.recipe.types import Recipe
from deskside.render.assemble import render
from deskside.render.bundle import Bundle

from ..unit.render_cases import LOCAL_TINY, RECIPES, ROOT, hostile_bundle, load_and_plan

pytestmark = pytest.mark.integration

COMPOSE_SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"
# systemd looks up a bare `docker` in its fixed search path (see deskside.render.systemd)
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run scripts/system-deps (as root)")
    return path


def _local_tiny_everything() -> tuple[Recipe, Bundle]:
    recipe, plan = load_and_plan(LOCAL_TINY)
    variant = recipe.model_copy(
        update={
            "runtime": recipe.runtime.model_copy(update={"systemd": True}),
            "proxy": recipe.proxy.model_copy(update={"enabled": True}),
            "monitoring": recipe.monitoring.model_copy(update={"enabled": True}),
        }
    )
    return variant, render(variant, LOCAL_TINY, plan)


CASES = [*(p.stem for p in RECIPES), "hostile", "local-tiny-everything"]


@dataclass(frozen=True)
class Rendered:
    case: str
    recipe: Recipe
    out: Path


@pytest.fixture(scope="module", params=CASES)
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    case: str = request.param
    base = tmp_path_factory.mktemp(case)
    if case == "hostile":
        recipe, _, bundle = hostile_bundle(base / "recipe dir")
    elif case == "local-tiny-everything":
        recipe, bundle = _local_tiny_everything()
    else:
        path = next(p for p in RECIPES if p.stem == case)
        recipe, plan = load_and_plan(path)
        bundle = render(recipe, path, plan)
    out = base / "bundle out"  # a space in the folder, as an operator's might have
    bundle.write(out)
    return Rendered(case, recipe, out)


def files(root: Path, pattern: str) -> Iterator[Path]:
    return iter(sorted(root.rglob(pattern)))


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kwargs)  # type: ignore[call-overload,no-any-return]


# --------------------------------------------------------------------------- systemd


def systemd_verify(unit: Path, stub_dir: Path) -> subprocess.CompletedProcess[str]:
    # The container unit requires docker.service, which a GPU node has and this machine
    # does not: a stub unit stands in for it.
    stub_dir.mkdir(exist_ok=True)
    (stub_dir / "docker.service").write_text(
        "[Unit]\nDescription=stand-in for Docker\n[Service]\nExecStart=/bin/true\n"
    )
    env = {"SYSTEMD_UNIT_PATH": f"{stub_dir}:", "PATH": SYSTEMD_PATH}
    return run([tool("systemd-analyze"), "verify", str(unit)], env=env)


def test_systemd_units_verify(rendered: Rendered, tmp_path: Path) -> None:
    units = list(files(rendered.out, "*.service"))
    assert len(units) == (
        len(rendered.recipe.cluster.nodes) if rendered.recipe.runtime.systemd else 0
    )
    if rendered.recipe.runtime.kind == "container" and units:
        assert shutil.which("docker", path=SYSTEMD_PATH), (
            "the container units run `docker compose`; systemd-analyze verify needs a docker "
            "CLI on systemd's search path"
        )
    for unit in units:
        done = systemd_verify(unit, tmp_path / "stubs")
        assert done.returncode == 0, f"{unit}:\n{done.stdout}{done.stderr}"
        # warnings (unknown keys, bad values that are ignored) name the unit: none allowed
        assert unit.name not in done.stdout + done.stderr, done.stdout + done.stderr


def test_systemd_verify_catches_broken_units(tmp_path: Path) -> None:
    """The validator is live: bad quoting fails, an unknown key is named."""
    bad = tmp_path / "deskside-bad.service"
    bad.write_text('[Service]\nType=oneshot\nExecStart=/bin/sh "unterminated\n')
    assert systemd_verify(bad, tmp_path / "stubs").returncode != 0
    odd = tmp_path / "deskside-odd.service"
    odd.write_text("[Service]\nType=oneshot\nExecStart=/bin/true\nExecStrat=/bin/true\n")
    done = systemd_verify(odd, tmp_path / "stubs")
    assert odd.name in done.stdout + done.stderr


# --------------------------------------------------------------------------- shellcheck


def test_scripts_pass_shellcheck(rendered: Rendered) -> None:
    scripts = list(files(rendered.out, "*.sh"))
    assert scripts
    done = run([tool("shellcheck"), "--shell=sh", "--severity=style", *map(str, scripts)])
    assert done.returncode == 0, done.stdout + done.stderr


def test_shellcheck_catches_a_broken_script(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/sh\nexport X==a\nexec vllm $ARGS\n")
    assert run([tool("shellcheck"), "--shell=sh", str(bad)]).returncode != 0


# --------------------------------------------------------------------------- promtool


def test_prometheus_config_and_rules_pass_promtool(rendered: Rendered) -> None:
    configs = list(files(rendered.out, "prometheus.yml"))
    rules = list(files(rendered.out, "*.rules.yml"))
    if not rendered.recipe.monitoring.enabled:
        assert not configs and not rules
        return
    assert configs and rules
    promtool = tool("promtool")
    for config in configs:
        done = run([promtool, "check", "config", str(config)])
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 rule files found" in done.stdout + done.stderr
    for rule in rules:
        done = run([promtool, "check", "rules", str(rule)])
        assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_catches_a_broken_rule(tmp_path: Path) -> None:
    bad = tmp_path / "bad.rules.yml"
    bad.write_text("groups:\n  - name: x\n    rules:\n      - alert: A\n        expr: rate(x[5m]\n")
    assert run([tool("promtool"), "check", "rules", str(bad)]).returncode != 0


# --------------------------------------------------------------------------- Compose


def compose_validator() -> Draft202012Validator:
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def test_compose_files_match_the_compose_spec(rendered: Rendered) -> None:
    validator = compose_validator()
    composes = list(files(rendered.out, "compose.yaml"))
    if rendered.recipe.runtime.kind != "container":
        assert not composes
        return
    assert len(composes) == len(rendered.recipe.cluster.nodes)
    yaml = YAML(typ="safe", pure=True)
    for path in composes:
        data = yaml.load(path.read_text())
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(data)]
        assert not errors, f"{path}: {errors}"
        service = data["services"]["engine"]
        assert "@sha256:" in service["image"]
        assert service["network_mode"] == "host" and service["ipc"] == "host"
        assert service["restart"] == "unless-stopped"
        assert service["ulimits"]["memlock"] == -1
        assert (path.parent / service["env_file"][0]).is_file()


def test_compose_schema_catches_a_broken_file() -> None:
    validator = compose_validator()
    bad = {"services": {"engine": {"image": "x", "restart": "sometimes", "ulimits": "no"}}}
    assert list(validator.iter_errors(bad))


# --------------------------------------------------------------------------- Grafana


def test_dashboards_load_through_the_sdk_models(rendered: Rendered) -> None:
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models import dashboard as model
    from grafana_foundation_sdk.models import prometheus as prom

    register_default_plugins()
    boards = list(files(rendered.out, "*.json"))
    if not rendered.recipe.monitoring.enabled:
        assert not boards
        return
    assert boards
    for path in boards:
        data = json.loads(path.read_text())
        board = model.Dashboard.from_json(data)
        # the file is exactly what the SDK's models write back
        assert json.loads(json.dumps(board, cls=JSONEncoder)) == data, path
        panels = [p for p in board.panels or [] if isinstance(p, model.Panel)]
        rows = [p for p in board.panels or [] if isinstance(p, model.RowPanel)]
        assert len(rows) == 3 and len(panels) >= 12
        ids = [p.id_val for p in [*panels, *rows]]
        assert len(set(ids)) == len(ids), "panel ids must be unique"
        for panel in panels:
            assert panel.type_val == "timeseries"
            assert panel.targets, panel.title
            for target in panel.targets:
                assert isinstance(target, prom.Dataquery) and target.expr, panel.title
