"""Rendered bundles pass the real validators: `systemd-analyze verify` on every unit (the
engine's and the services'), `shellcheck` on the scripts, `promtool check config` / `check
rules` / `test rules` (the rendered tests of every alert), every Compose file (the engine's,
node_exporter's, the head's services) against the Compose specification's JSON Schema
(vendored: tests/data/compose-spec.json, see its README), and the dashboards through the
Grafana Foundation SDK's models.

Cases: every shipped recipe, the hostile recipe of the unit tests, and local-tiny with its
systemd units, proxy and monitoring switched on (native units, a second topology). deskside
is not installed on systemd's search path here, so every case names the exporter's program
by the absolute path of this environment's `deskside` (systemd-analyze checks it exists).

A missing validator fails these tests (it does not skip them): `scripts/system-deps`
installs them (Debian packages systemd, shellcheck, prometheus, prometheus-node-exporter).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from ruamel.yaml import YAML

from deskside.recipe.types import Recipe
from deskside.render.assemble import render
from deskside.render.bundle import Bundle
from deskside.render.lock import LOCK_PATH

from ..unit.render_cases import (
    LOCAL_TINY,
    RECIPES,
    ROOT,
    SET_RECIPES,
    load_and_plan,
    load_recipe_with_model,
    write_hostile_recipe,
)

pytestmark = pytest.mark.integration

COMPOSE_SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"
# systemd looks up a bare `docker` in its fixed search path (see deskside.render.systemd)
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run scripts/system-deps (as root)")
    return path


DESKSIDE = str(Path(sys.executable).with_name("deskside"))


def _render(path: Path, **monitoring: object) -> tuple[Recipe, Bundle]:
    """`path` rendered with the exporter's program at this environment's deskside."""
    recipe, plan = load_and_plan(path)
    mon = recipe.monitoring.model_copy(update={"deskside": DESKSIDE, **monitoring})
    update: dict[str, object] = {"monitoring": mon}
    if path == LOCAL_TINY:  # local-tiny-everything
        update["runtime"] = recipe.runtime.model_copy(update={"systemd": True})
        update["proxy"] = recipe.proxy.model_copy(update={"enabled": True})
    variant = recipe.model_copy(update=update)
    return variant, render(variant, path, plan)


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
        recipe, bundle = _render(write_hostile_recipe(base / "recipe dir"))
    elif case == "local-tiny-everything":
        recipe, bundle = _render(LOCAL_TINY, enabled=True)
    else:
        recipe, bundle = _render(next(p for p in RECIPES if p.stem == case))
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


def lock_of(rendered: Rendered) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((rendered.out / LOCK_PATH).read_text())
    return data


def test_systemd_units_verify(rendered: Rendered, tmp_path: Path) -> None:
    units = list(files(rendered.out, "*.service"))
    recipe = rendered.recipe
    service_units = lock_of(rendered)["services"].get("units", {})
    expected = sorted(
        [f"{n.name}/deskside-{recipe.name}.service" for n in recipe.cluster.nodes]
        + [f"{node}/{unit}" for node, names in service_units.items() for unit in names]
        if recipe.runtime.systemd
        else []
    )
    assert sorted(u.relative_to(rendered.out).as_posix() for u in units) == expected
    if recipe.monitoring.enabled and recipe.runtime.systemd:
        for n in recipe.cluster.nodes:
            for service in ("node-exporter", "exporter"):
                assert f"deskside-{recipe.name}-{service}.service" in service_units[n.name]
    if units and (recipe.runtime.kind == "container" or recipe.monitoring.enabled):
        assert shutil.which("docker", path=SYSTEMD_PATH), (
            "the Compose units run `docker compose`; systemd-analyze verify needs a docker "
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


@pytest.mark.parametrize("path", SET_RECIPES, ids=[p.stem for p in SET_RECIPES])
def test_replica_set_scripts_pass_shellcheck(path: Path, tmp_path: Path) -> None:
    """A replica set's bundle: every group's scripts and the set proxy's run-proxy.sh."""
    from deskside.replicas.plans import plan_set
    from deskside.replicas.render import render_set

    recipe = load_recipe_with_model(path)
    render_set(recipe, path, plan_set(recipe, path)).write(tmp_path / "set out")
    scripts = list(files(tmp_path / "set out", "*.sh"))
    assert any(p.name == "run-proxy.sh" for p in scripts)
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


def test_rendered_rule_tests_pass_promtool(rendered: Rendered) -> None:
    """Every alert fires in its test and stays quiet in another (`promtool test rules`)."""
    tests = list(files(rendered.out, "*.rules.test.yml"))
    if not rendered.recipe.monitoring.enabled:
        assert not tests
        return
    assert tests
    for test in tests:
        done = run([tool("promtool"), "test", "rules", test.name], cwd=test.parent)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "SUCCESS" in done.stdout + done.stderr


def _flagship_rules(tmp_path: Path) -> Path:
    _, bundle = _render(next(p for p in RECIPES if p.stem == "dual-spark-deepseek-v4-flash"))
    bundle.write(tmp_path / "out")
    return tmp_path / "out" / "cluster" / "prometheus" / "rules"


@pytest.mark.parametrize(
    ("alert", "old", "new"),
    [
        (
            "KVCacheUsageHigh",
            "(vllm:kv_cache_usage_perc) > 0.9",
            "(vllm:kv_cache_usage_perc) > 0.95",
        ),
        ("EngineWedged", "_last_token > 300 and", "_last_token > 400 and"),
        ("MemoryBelowFloor", "available_bytes < deskside_memory_floor", "available_bytes < 0 *"),
        ("RoceGidDrift", "gid_drift == 1", "gid_drift == 2"),
    ],
)
def test_rule_tests_fail_when_a_rule_moves(alert: str, old: str, new: str, tmp_path: Path) -> None:
    """The rendered tests can fail: a rule changed without its tests does."""
    rules = _flagship_rules(tmp_path)
    path = rules / "deskside.rules.yml"
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))
    promtool = tool("promtool")
    assert run([promtool, "check", "rules", path.name], cwd=rules).returncode == 0
    done = run([promtool, "test", "rules", "deskside.rules.test.yml"], cwd=rules)
    assert done.returncode != 0, done.stdout + done.stderr
    assert f"alertname: {alert}" in done.stdout + done.stderr


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
    recipe = rendered.recipe
    nodes = [n.name for n in recipe.cluster.nodes]
    composes = [
        p.relative_to(rendered.out).as_posix() for p in files(rendered.out, "*compose.yaml")
    ]
    expected = [f"{n}/compose.yaml" for n in nodes] * (recipe.runtime.kind == "container")
    expected += [f"{n}/monitoring.compose.yaml" for n in nodes] * recipe.monitoring.enabled
    expected += ["cluster/compose.yaml"] * (recipe.monitoring.enabled or recipe.proxy.enabled)
    assert sorted(composes) == sorted(expected)
    yaml = YAML(typ="safe", pure=True)
    projects: set[tuple[str, str]] = set()
    for rel in composes:
        path = rendered.out / rel
        data = yaml.load(path.read_text())
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(data)]
        assert not errors, f"{path}: {errors}"
        assert "name" not in data  # Compose v1.29 refuses it; commands pass --project-name
        for name, service in data["services"].items():
            assert "@sha256:" in service["image"], (rel, name)
            assert service["network_mode"] == "host", (rel, name)
            assert service["restart"] == "unless-stopped", (rel, name)
            assert service.get("healthcheck") or (
                name == "engine" and not rel.startswith(recipe.head.name + "/")
            ), (rel, name)
            for volume in service.get("volumes", []):
                if volume["source"].startswith("./"):  # relative to the file's folder
                    assert (path.parent / volume["source"]).exists(), (rel, volume)
        if rel.endswith("/compose.yaml") and not rel.startswith("cluster/"):
            service = data["services"]["engine"]
            assert service["ipc"] == "host"
            roce = recipe.cluster.fabric.transport == "roce"
            assert ("memlock" in service["ulimits"]) == roce  # RDMA pins memory
            assert (path.parent / service["env_file"][0]).is_file()
    # one project per kind of file: `up --remove-orphans` in one never removes another's
    # (the files name no project: the units' commands do, `--project-name P --file F`)
    for unit in files(rendered.out, "*.service"):
        words = unit.read_text().split()
        for i, word in enumerate(words[:-3]):
            if word == "--project-name" and words[i + 2] == "--file":
                projects.add((words[i + 1], words[i + 3].rsplit("/", 2)[-2:][-1]))
    kinds_of = {p: {f for q, f in projects if q == p} for p, _ in projects}
    assert all(len(k) == 1 for k in kinds_of.values()), kinds_of


def test_compose_files_load_in_compose_v1(rendered: Rendered) -> None:
    """Debian's docker-compose 1.29 reads every rendered file (`config --quiet` parses,
    validates and interpolates it, as `up` would)."""
    compose = tool("docker-compose")
    yaml = YAML(typ="safe", pure=True)
    for path in files(rendered.out, "*compose.yaml"):
        data = yaml.load(path.read_text())
        # env files on the node (the engine key) must exist for Compose to read the file:
        # made empty in a private mount namespace (a tmpfs over their top folder)
        node_files = sorted(
            {f for svc in data["services"].values() for f in svc.get("env_file", [])}
        )
        # (as Compose reads them: `$$` in a value is one `$`)
        node_files = [f.replace("$$", "$") for f in node_files if f.startswith("/")]
        tops = sorted({"/" + f.split("/")[1] for f in node_files})
        script = "".join(f"mount -t tmpfs deskside-check {shlex.quote(t)} && " for t in tops)
        for f in map(shlex.quote, node_files):
            script += f'mkdir -p "$(dirname -- {f})" && touch -- {f} && '
        script += 'exec "$@"'
        done = subprocess.run(
            [
                "unshare",
                "--mount",
                "sh",
                "-c",
                script,
                "sh",
                compose,
                "--project-name",
                "check",
                "--file",
                str(path),
                "config",
                "--quiet",
            ],
            capture_output=True,
            text=True,
            cwd=path.parent,
        )
        assert done.returncode == 0, f"{path}:\n{done.stderr}"


def test_compose_v1_catches_what_it_refuses(tmp_path: Path) -> None:
    """The two keys the bundle no longer uses: v1.29 refuses them (so the check above
    would see them come back)."""
    compose = tool("docker-compose")
    for extra, service_extra in (
        ("name: p\n", ""),
        (
            "",
            "    volumes:\n"
            "      - {type: bind, source: /t, target: /x, bind: {create_host_path: true}}\n",
        ),
    ):
        path = tmp_path / "compose.yaml"
        path.write_text(f"{extra}services:\n  s:\n    image: x\n{service_extra}")
        done = subprocess.run(
            [compose, "--file", str(path), "config", "--quiet"], capture_output=True, text=True
        )
        assert done.returncode != 0, path.read_text()


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
    boards = [p for p in files(rendered.out, "*.json") if "/grafana/" in str(p)]
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
