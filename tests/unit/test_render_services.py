"""The services beside the engine: the promtool tests of the alert rules (every alert fires
in one case and stays quiet in another), the Compose files of the head and the nodes,
Grafana's provisioning, the systemd units and the lock's services section."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from ruamel.yaml import YAML

from deskside.exporter import series
from deskside.recipe.types import Recipe
from deskside.render import rule_tests
from deskside.render.assemble import render
from deskside.render.bundle import Bundle
from deskside.render.context import build_context
from deskside.render.lock import LOCK_PATH
from deskside.render.rule_tests import expand, humanize1024

from .render_cases import FLAGSHIP, LOCAL_TINY, hostile_bundle, load_and_plan
from .unit_words import exec_start

RULES = "cluster/prometheus/rules/deskside.rules.yml"
RULE_TESTS = "cluster/prometheus/rules/deskside.rules.test.yml"


def _yaml(data: bytes) -> Any:
    return YAML(typ="safe", pure=True).load(data)


def _everything(path: Path, **runtime: object) -> tuple[Recipe, Bundle]:
    recipe, plan = load_and_plan(path)
    variant = recipe.model_copy(
        update={
            "runtime": recipe.runtime.model_copy(update={"systemd": True, **runtime}),
            "proxy": recipe.proxy.model_copy(update={"enabled": True}),
            "monitoring": recipe.monitoring.model_copy(update={"enabled": True}),
        }
    )
    return variant, render(variant, path, plan)


@pytest.fixture(scope="module")
def flagship() -> tuple[Recipe, Bundle]:
    recipe, plan = load_and_plan(FLAGSHIP)
    return recipe, render(recipe, FLAGSHIP, plan)


PROXY_IMAGE = "ghcr.io/berriai/litellm:v1.108.5@sha256:" + "0" * 64  # a placeholder digest


@pytest.fixture(scope="module")
def flagship_proxy_image() -> tuple[Recipe, Bundle]:
    """The flagship with proxy.image set: the proxy then runs under Compose too."""
    recipe, plan = load_and_plan(FLAGSHIP)
    recipe = recipe.model_copy(
        update={"proxy": recipe.proxy.model_copy(update={"image": PROXY_IMAGE})}
    )
    return recipe, render(recipe, FLAGSHIP, plan)


def test_without_an_image_the_proxy_runs_natively(flagship: tuple[Recipe, Bundle]) -> None:
    recipe, bundle = flagship
    assert recipe.proxy.image is None
    assert "proxy" not in _yaml(bundle["cluster/compose.yaml"])["services"]
    proxy = _unit(bundle, "ai1", "proxy", recipe.name)
    assert "Type=simple" in proxy and "Restart=on-failure" in proxy
    current = f"/opt/deskside/{recipe.name}/current"
    secrets = f"/opt/deskside/{recipe.name}/secrets"
    # run-proxy.sh reads the keys from the files it is given, then execs the recipe's LiteLLM
    assert exec_start(proxy) == [
        "/bin/sh",
        f"{current}/cluster/litellm/run-proxy.sh",
        f"{secrets}/proxy-master-key",
        f"{secrets}/engine.env",
        "/opt/litellm/bin/litellm",
        "--config",
        f"{current}/cluster/litellm/config.yaml",
        "--host",
        "192.168.0.27",
        "--port",
        "4000",
    ]


@pytest.fixture(scope="module")
def tiny() -> tuple[Recipe, Bundle]:
    return _everything(LOCAL_TINY)


# --------------------------------------------------------------------------- rule tests


def _cases(bundle: Bundle) -> dict[str, set[bool]]:
    """alert name -> {fires?} over the rendered test file's cases."""
    out: dict[str, set[bool]] = {}
    for test in _yaml(bundle[RULE_TESTS])["tests"]:
        for check in test["alert_rule_test"]:
            out.setdefault(check["alertname"], set()).add(bool(check["exp_alerts"]))
    return out


@pytest.mark.parametrize("which", ["flagship", "tiny", "hostile"])
def test_every_alert_fires_in_one_case_and_not_in_another(
    which: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if which == "hostile":
        _, _, bundle = hostile_bundle(tmp_path / "recipe dir")
    else:
        _, bundle = request.getfixturevalue(which)
    alerts = [r["alert"] for g in _yaml(bundle[RULES])["groups"] for r in g["rules"]]
    assert len(alerts) >= 8
    cases = _cases(bundle)
    assert set(cases) == set(alerts)
    for alert in alerts:
        assert cases[alert] == {True, False}, alert
    data = _yaml(bundle[RULE_TESTS])
    assert data["rule_files"] == ["deskside.rules.yml"]
    for test in data["tests"]:
        for check in test["alert_rule_test"]:
            rule = next(
                r
                for g in _yaml(bundle[RULES])["groups"]
                for r in g["rules"]
                if r["alert"] == check["alertname"]
            )
            # evaluated after the rule's `for:`
            assert rule_tests.seconds(check["eval_time"]) > rule_tests.seconds(rule["for"])


def test_exporter_alerts_read_the_exporter_series(flagship: tuple[Recipe, Bundle]) -> None:
    _, bundle = flagship
    rules = {r["alert"]: r for g in _yaml(bundle[RULES])["groups"] for r in g["rules"]}
    assert rules["MemoryBelowFloor"]["expr"] == (
        f"{series.GUARD_AVAILABLE} < {series.MEMORY_FLOOR}"
    )
    assert rules["MemoryBelowFloor"]["for"] == "1m"  # guard.enforce off: it only warns
    assert rules["MemoryBelowFloor"]["labels"]["severity"] == "critical"
    assert rules["RoceGidDrift"]["expr"] == f"{series.GID_DRIFT} == 1"
    assert series.ENGINE_SINCE_TOKEN in rules["EngineWedged"]["expr"]
    assert f"{series.ENGINE_RUNNING} > 0" in rules["EngineWedged"]["expr"]
    assert rules["DesksideExporterDown"]["expr"] == 'up{job="deskside"} == 0'
    config = _yaml(bundle["cluster/prometheus/prometheus.yml"])
    deskside = next(j for j in config["scrape_configs"] if j["job_name"] == "deskside")
    assert deskside["static_configs"][0]["targets"] == [f"192.168.0.27:{series.EXPORTER_PORT}"]


def test_no_spec_rule_when_acceptance_floor_is_zero() -> None:
    recipe, plan = load_and_plan(FLAGSHIP)
    recipe = recipe.model_copy(
        update={"guard": recipe.guard.model_copy(update={"min_spec_acceptance": 0.0})}
    )
    bundle = render(recipe, FLAGSHIP, plan)
    assert b"SpecAcceptanceCollapse" not in bundle[RULES]
    assert "SpecAcceptanceCollapse" not in _cases(bundle)


def test_an_alert_without_cases_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    recipe, plan = load_and_plan(FLAGSHIP)
    monkeypatch.delitem(rule_tests.CASES, "RoceGidDrift")
    with pytest.raises(ValueError, match="RoceGidDrift has no promtool test cases"):
        render(recipe, FLAGSHIP, plan)


def test_annotation_templates_expand_as_prometheus_does() -> None:
    labels = {"node": "ai1", "instance": "h:1"}
    assert expand("{{ $labels.node }} at {{$labels.instance}}", labels, 0) == "ai1 at h:1"
    assert expand("{{ $value | humanizePercentage }}", {}, 0.91) == "91%"
    assert expand("{{ $value }} s", {}, 330.0) == "330 s"
    assert expand("{{ $value | humanize1024 }}B", {}, 20 * 2**30) == "20GiB"
    assert humanize1024(512) == "512" and humanize1024(1536) == "1.5ki"
    with pytest.raises(ValueError, match="not known"):
        expand("{{ $value | humanizeDuration }}", {}, 1)


# --------------------------------------------------------------------------- Compose


def test_head_compose_runs_proxy_prometheus_grafana(
    flagship_proxy_image: tuple[Recipe, Bundle],
) -> None:
    recipe, bundle = flagship_proxy_image
    data = _yaml(bundle["cluster/compose.yaml"])
    # no top-level name (Compose v1.29 refuses it): the units pass the project name
    assert "name" not in data
    unit = bundle["ai1/deskside-dual-spark-deepseek-v4-flash-prometheus.service"].decode()
    assert "--project-name deskside-dual-spark-deepseek-v4-flash-cluster" in unit
    assert list(data["services"]) == ["proxy", "prometheus", "grafana"]
    proxy = data["services"]["proxy"]
    assert proxy["image"] == recipe.proxy.image
    key = "/opt/deskside/dual-spark-deepseek-v4-flash/secrets/proxy-master-key"
    engine_env = "/opt/deskside/dual-spark-deepseek-v4-flash/secrets/engine.env"
    # the image's own litellm, the files as the container sees them
    assert proxy["entrypoint"] == [
        "/bin/sh",
        "/deskside/litellm/run-proxy.sh",
        key,
        engine_env,
        "litellm",
        "--config",
        "/deskside/litellm/config.yaml",
        "--host",
        "192.168.0.27",
        "--port",
        "4000",
    ]
    mounts = {v["source"]: v for v in proxy["volumes"]}
    assert mounts["./litellm"]["target"] == "/deskside/litellm" and mounts["./litellm"]["read_only"]
    assert mounts[key]["target"] == key and mounts[key]["read_only"]
    assert mounts[engine_env]["target"] == engine_env and mounts[engine_env]["read_only"]
    assert "/health/liveliness" in proxy["healthcheck"]["test"][-1]
    prom = data["services"]["prometheus"]
    assert prom["image"] == recipe.monitoring.images.prometheus
    assert "--web.listen-address=192.168.0.27:9090" in prom["command"]
    data_mounts = {v["target"]: v["source"] for v in prom["volumes"]}
    assert (
        data_mounts["/prometheus"] == "/opt/deskside/dual-spark-deepseek-v4-flash/data/prometheus"
    )
    grafana = data["services"]["grafana"]
    assert grafana["environment"]["GF_SERVER_HTTP_PORT"] == "3000"
    # the engine's healthcheck: head only, after the model has had time to load
    head = _yaml(bundle["ai1/compose.yaml"])["services"]["engine"]
    assert "http://192.168.0.27:8888/health" in head["healthcheck"]["test"][-1]
    assert head["healthcheck"]["start_period"] == "30m"
    assert "healthcheck" not in _yaml(bundle["ai2/compose.yaml"])["services"]["engine"]


def test_node_exporter_on_every_node(flagship: tuple[Recipe, Bundle]) -> None:
    recipe, bundle = flagship
    for node in recipe.cluster.nodes:
        data = _yaml(bundle[f"{node.name}/monitoring.compose.yaml"])
        assert "name" not in data
        service = data["services"]["node-exporter"]
        assert f"--web.listen-address={node.address}:9100" in service["command"]
        assert service["pid"] == "host"


def test_grafana_provisioning_points_at_the_head(flagship: tuple[Recipe, Bundle]) -> None:
    _, bundle = flagship
    source = _yaml(bundle["cluster/grafana/provisioning/datasources/deskside.yaml"])
    (ds,) = source["datasources"]
    assert ds["type"] == "prometheus" and ds["url"] == "http://192.168.0.27:9090"
    assert ds["isDefault"]
    provider = _yaml(bundle["cluster/grafana/provisioning/dashboards/deskside.yaml"])
    (files,) = provider["providers"]
    grafana = _yaml(bundle["cluster/compose.yaml"])["services"]["grafana"]
    mounts = {v["source"]: v["target"] for v in grafana["volumes"]}
    # the provider's folder is the bundle's grafana/dashboards inside the container
    assert files["options"]["path"] == mounts["./grafana"] + "/dashboards"
    assert grafana["environment"]["GF_PATHS_PROVISIONING"] == mounts["./grafana"] + "/provisioning"


def test_compose_strings_are_not_interpolated(tmp_path: Path) -> None:
    recipe, _, bundle = hostile_bundle(tmp_path / "recipe dir")
    images = {
        "proxy": recipe.proxy.image,
        "prometheus": recipe.monitoring.images.prometheus,
        "grafana": recipe.monitoring.images.grafana,
    }
    for path in ("cluster/compose.yaml", "worker_1/monitoring.compose.yaml"):
        data = _yaml(bundle[path])
        raw = json.dumps(data)
        assert "$" not in raw.replace("$$", "")  # every '$' doubled: nothing interpolated
        for name, service in data["services"].items():
            image = images.get(name, recipe.monitoring.images.node_exporter)
            assert service["image"].replace("$$", "$") == image
    # the hostile runtime.root reaches the data and key mounts, escaped
    assert "$$" in json.dumps(_yaml(bundle["cluster/compose.yaml"])["services"]["grafana"])


# --------------------------------------------------------------------------- systemd


def _unit(bundle: Bundle, node: str, service: str, recipe: str) -> str:
    return bundle[f"{node}/deskside-{recipe}-{service}.service"].decode()


def test_container_units_wrap_one_compose_service(
    flagship_proxy_image: tuple[Recipe, Bundle],
) -> None:
    _, bundle = flagship_proxy_image
    name = "dual-spark-deepseek-v4-flash"
    proxy = _unit(bundle, "ai1", "proxy", name)
    assert "Type=oneshot" in proxy and "Requires=docker.service" in proxy
    assert f"--project-name deskside-{name}-cluster" in proxy
    assert "up --detach --no-deps proxy" in proxy
    assert "rm --stop --force proxy" in proxy
    node_exporter = _unit(bundle, "ai2", "node-exporter", name)
    assert f"/opt/deskside/{name}/current/monitoring.compose.yaml" in node_exporter
    exporter = _unit(bundle, "ai2", "exporter", name)
    assert "Type=simple" in exporter and "Restart=on-failure" in exporter
    assert (
        f"ExecStart=deskside node exporter /opt/deskside/{name}/current/recipe.yaml "
        f"--node ai2 --host 192.168.0.176 --port {series.EXPORTER_PORT} "
        f"--state-dir /opt/deskside/{name}\n"
    ) in exporter
    assert "NoNewPrivileges=yes" in exporter
    assert not any(p.startswith("ai2/") and "prometheus" in p for p in bundle)


def test_native_units_run_the_programs(tiny: tuple[Recipe, Bundle]) -> None:
    recipe, bundle = tiny
    prom = _unit(bundle, "node0", "prometheus", recipe.name)
    assert "ExecStart=prometheus --config.file=/opt/deskside/local-tiny/current/cluster/" in prom
    assert "--web.listen-address=10.77.0.1:9090" in prom
    assert "NetworkNamespacePath=/run/netns/ds-node0" in prom
    assert "After=network-online.target" in prom and "Restart=on-failure" in prom
    node_exporter = _unit(bundle, "node1", "node-exporter", recipe.name)
    assert exec_start(node_exporter) == [
        "prometheus-node-exporter",
        "--path.rootfs=/",
        "--web.listen-address=10.77.0.2:9100",
    ]
    assert "NetworkNamespacePath=/run/netns/ds-node1" in node_exporter
    proxy = _unit(bundle, "node0", "proxy", recipe.name)
    assert "ExecStart=/bin/sh /opt/deskside/local-tiny/current/cluster/litellm/run-proxy.sh" in (
        proxy
    )
    # Grafana is a Compose service under either runtime
    assert "docker compose" in _unit(bundle, "node0", "grafana", recipe.name)


def test_program_names_come_from_the_recipe() -> None:
    recipe, plan = load_and_plan(LOCAL_TINY)
    mon = recipe.monitoring.model_copy(
        update={
            "enabled": True,
            "prometheus": "/opt/prom/bin/prometheus",
            "node_exporter": "node_exporter",
            "deskside": "/opt/deskside/venv/bin/deskside",
        }
    )
    recipe = recipe.model_copy(
        update={"monitoring": mon, "runtime": recipe.runtime.model_copy(update={"systemd": True})}
    )
    bundle = render(recipe, LOCAL_TINY, plan)
    assert "ExecStart=/opt/prom/bin/prometheus " in _unit(
        bundle, "node0", "prometheus", "local-tiny"
    )
    assert "ExecStart=node_exporter " in _unit(bundle, "node1", "node-exporter", "local-tiny")
    exporter = _unit(bundle, "node1", "exporter", "local-tiny")
    assert "ExecStart=/opt/deskside/venv/bin/deskside node exporter " in exporter


def test_no_service_units_without_systemd() -> None:
    recipe, plan = load_and_plan(FLAGSHIP)
    recipe = recipe.model_copy(
        update={"runtime": recipe.runtime.model_copy(update={"systemd": False})}
    )
    bundle = render(recipe, FLAGSHIP, plan)
    assert not [p for p in bundle if p.endswith(".service")]
    assert "ai1/monitoring.compose.yaml" in bundle and "cluster/compose.yaml" in bundle


# --------------------------------------------------------------------------- lock, recipe


def test_lock_lists_the_services(flagship_proxy_image: tuple[Recipe, Bundle]) -> None:
    recipe, bundle = flagship_proxy_image
    services = json.loads(bundle[LOCK_PATH])["services"]
    name = recipe.name
    assert services["units"]["ai2"] == [
        f"deskside-{name}-node-exporter.service",
        f"deskside-{name}-exporter.service",
    ]
    assert services["units"]["ai1"][:3] == [
        f"deskside-{name}-proxy.service",
        f"deskside-{name}-prometheus.service",
        f"deskside-{name}-grafana.service",
    ]
    assert services["compose"]["cluster"]["services"] == ["proxy", "prometheus", "grafana"]
    assert services["compose"]["nodes"]["file"] == "monitoring.compose.yaml"
    assert services["monitoring"]["deskside_exporter_port"] == series.EXPORTER_PORT
    assert services["monitoring"]["images"]["grafana"] == recipe.monitoring.images.grafana
    assert services["proxy"]["image"] == recipe.proxy.image


def test_placeholder_digests_are_noted(flagship_proxy_image: tuple[Recipe, Bundle]) -> None:
    _, bundle = flagship_proxy_image
    assert any(n.startswith("proxy.image (ghcr.io/berriai/litellm:") for n in bundle.notes)
    assert not any("monitoring.images" in n for n in bundle.notes)


def test_service_images_must_be_pinned() -> None:
    recipe, _ = load_and_plan(FLAGSHIP)
    with pytest.raises(ValidationError, match="pinned by digest"):
        recipe.monitoring.images.model_validate({"grafana": "grafana/grafana:11.6.0"})
    with pytest.raises(ValidationError, match="pinned by digest"):
        recipe.proxy.model_validate({"image": "-x@sha256:" + "0" * 64})


def test_context_builds_for_services() -> None:
    recipe, plan = load_and_plan(FLAGSHIP)
    ctx = build_context(recipe, FLAGSHIP, plan)
    tests = rule_tests.rule_tests(ctx)
    assert tests["evaluation_interval"] == recipe.monitoring.scrape_interval  # as Prometheus
    assert len(tests["tests"]) >= 2 * 9
