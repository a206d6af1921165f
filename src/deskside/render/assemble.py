"""render(recipe, recipe_path, plan) -> Bundle: every file a deployment needs, pure and
byte-reproducible (no clock, no environment, no paths of the machine rendering it).

Bundle layout:

    <node>/compose.yaml               container runtime: the engine under Docker Compose
    <node>/node.env                   the engine environment (Compose env_file)
    <node>/launch.sh                  env, RoCE GID resolution, `exec vllm ...` (0755)
    <node>/deskside-<recipe>.service  systemd unit (runtime.systemd)
    <node>/monitoring.compose.yaml    monitoring.enabled: node_exporter under Docker Compose
    <node>/recipe.yaml                monitoring.enabled: the recipe deskside's exporter reads
    <node>/deskside-<recipe>-<service>.service
                                      runtime.systemd: the node's other services: proxy,
                                      prometheus, grafana (head), node-exporter, exporter
    cluster/compose.yaml              proxy or monitoring: LiteLLM, Prometheus, Grafana
    cluster/litellm/config.yaml       proxy.enabled: served name + aliases -> head
    cluster/litellm/run-proxy.sh      proxy.enabled: starts LiteLLM with the key file
    cluster/prometheus/prometheus.yml monitoring.enabled
    cluster/prometheus/engine-targets.json   the engine's /metrics (file discovery)
    cluster/prometheus/rules/deskside.rules.yml
    cluster/prometheus/rules/deskside.rules.test.yml   promtool tests of every alert
    cluster/grafana/dashboards/deskside-<recipe>.json
    cluster/grafana/provisioning/datasources/deskside.yaml   the head's Prometheus
    cluster/grafana/provisioning/dashboards/deskside.yaml    loads grafana/dashboards
    cluster/deskside.lock             pins and the sha256 of every other file

Where each service runs and why is in `deskside.render.services` (Compose) and
`deskside.render.units` (systemd); Prometheus and Grafana keep their data in R/N/data/.

The node folder lands on the node as R/N/current/ (see `deskside.render.context`); the
cluster folder on the head.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deskside.engine.services import MASTER_KEY_ENV, PROXY_CONFIG, PROXY_SCRIPT
from deskside.exporter import series
from deskside.fabric.nccl import fabric_envs
from deskside.planner.plan import Plan
from deskside.recipe.serving import PLACEHOLDER_DIGEST
from deskside.recipe.text import WILDCARD_HOSTS
from deskside.recipe.types import Recipe
from deskside.render import (
    compose,
    grafana,
    prometheus,
    proxy,
    rule_tests,
    scripts,
    services,
    systemd,
    units,
)
from deskside.render import lock as lockfile
from deskside.render.bundle import CLUSTER_DIR, MODE_SCRIPT, Bundle, sha256_hex
from deskside.render.context import RenderContext, build_context
from deskside.render.serialize import json_text


def render(recipe: Recipe, recipe_path: Path, plan: Plan) -> Bundle:
    """Every file of the deployment, in a fixed order. Same inputs, same bytes."""
    ctx = build_context(recipe, recipe_path, plan)
    bundle = Bundle()
    for n in ctx.nodes:
        folder = n.name
        launch = scripts.render_launch(ctx, n).encode()
        if recipe.runtime.kind == "container":
            bundle.add(f"{folder}/compose.yaml", compose.render_compose(ctx, n, launch))
        bundle.add(f"{folder}/node.env", scripts.render_node_env(ctx, n))
        bundle.add(f"{folder}/launch.sh", launch, MODE_SCRIPT)
        if recipe.runtime.systemd:
            bundle.add(f"{folder}/{ctx.layout.unit_name}", systemd.render_unit(ctx, n))
        if recipe.monitoring.enabled:
            bundle.add(
                f"{folder}/{services.NODE_COMPOSE}", services.render_node_compose(ctx, n.name)
            )
            # what deskside's exporter reads on the node (model paths relative to the recipe)
            bundle.add(f"{folder}/{units.EXPORTER_RECIPE}", exporter_recipe(recipe, ctx.recipe_dir))
        for unit in units.service_units(ctx, n):
            bundle.add(f"{folder}/{unit.name}", unit.text)
    if services.cluster_services(ctx):
        bundle.add(
            f"{CLUSTER_DIR}/{services.CLUSTER_COMPOSE}", services.render_cluster_compose(ctx)
        )
    if recipe.runs_proxy:
        bundle.add(f"{CLUSTER_DIR}/litellm/{PROXY_CONFIG}", proxy.render_litellm_config(ctx))
        bundle.add(
            f"{CLUSTER_DIR}/litellm/{PROXY_SCRIPT}", proxy.render_head_run_proxy(ctx), MODE_SCRIPT
        )
    if recipe.monitoring.enabled:
        bundle.add(
            f"{CLUSTER_DIR}/prometheus/prometheus.yml", prometheus.render_prometheus_config(ctx)
        )
        bundle.add(
            f"{CLUSTER_DIR}/prometheus/{prometheus.ENGINE_TARGETS_FILE}",
            prometheus.render_engine_targets(recipe),
        )
        bundle.add(
            f"{CLUSTER_DIR}/prometheus/{prometheus.RULES_FILE}", prometheus.render_alert_rules(ctx)
        )
        bundle.add(
            f"{CLUSTER_DIR}/prometheus/{prometheus.RULES_TEST_FILE}",
            rule_tests.render_rule_tests(ctx),
        )
        bundle.add(
            f"{CLUSTER_DIR}/grafana/dashboards/{grafana.dashboard_file(ctx)}",
            json_text(grafana.dashboard_json(ctx)),
        )
        provisioning = f"{CLUSTER_DIR}/grafana/provisioning"
        bundle.add(
            f"{provisioning}/datasources/deskside.yaml", services.render_grafana_datasource(ctx)
        )
        bundle.add(
            f"{provisioning}/dashboards/deskside.yaml",
            services.render_grafana_dashboard_provider(ctx),
        )
    bundle.notes.extend(_notes(ctx))
    bundle.add(lockfile.LOCK_PATH, build_lock(ctx, bundle).text())
    return bundle


def _notes(ctx: RenderContext) -> list[str]:
    notes: list[str] = []
    recipe = ctx.recipe
    for fabric in fabric_envs(recipe).values():
        notes.extend(f"{fabric.node}: {w}" for w in fabric.warnings)
    if recipe.engine_keyed and recipe.engine.host in WILDCARD_HOSTS:
        notes.append(
            f"engine.host is {recipe.engine.host}: the engine's API answers on every address "
            "of the head; it takes /v1 requests only with its own key, but vLLM leaves "
            "/health, /metrics, /tokenize and /invocations open; leave engine.host unset so "
            f"it binds {recipe.head.address} only"
        )
    for field, image in _service_images(recipe):
        if image.endswith(PLACEHOLDER_DIGEST):
            notes.append(
                f"{field} ({image.partition('@')[0]}) has a placeholder digest: Docker cannot "
                "pull it; set it to the tag pinned by its real digest"
            )
    if not ctx.plan.fits:
        notes.append("the plan does not fit: vLLM would refuse to start (see `deskside plan`)")
    return notes


def _service_images(recipe: Recipe) -> list[tuple[str, str]]:
    """The Compose images of the services the recipe turns on, with their recipe fields."""
    out = [("proxy.image", recipe.proxy.image)] if recipe.runs_proxy and recipe.proxy.image else []
    if recipe.monitoring.enabled:
        images = recipe.monitoring.images
        out += [
            ("monitoring.images.prometheus", images.prometheus),
            ("monitoring.images.grafana", images.grafana),
            ("monitoring.images.node_exporter", images.node_exporter),
        ]
    return out


def build_lock(ctx: RenderContext, bundle: Bundle) -> lockfile.Lock:
    recipe = ctx.recipe
    layout = ctx.layout
    m = recipe.model
    nodes: dict[str, lockfile.NodeLock] = {}
    for n in ctx.nodes:
        env = dict(n.env)
        if n.gid_at_launch:
            gid: str | None = lockfile.GID_AT_LAUNCH
        else:
            gid = env.get("NCCL_IB_GID_INDEX")
        nodes[n.name] = lockfile.NodeLock(
            role=n.launch.role,
            node_rank=n.launch.node_rank,
            address=n.node.address,
            engine_ip=ctx.node_ip(n.node),
            netns=n.node.netns,
            gid_index=gid,
            argv=list(n.launch.argv),
            env=env,
            files={p: sha256_hex(b) for p, b in bundle.items() if p.startswith(n.name + "/")},
        )
    cluster_files = {
        p: sha256_hex(b)
        for p, b in bundle.items()
        if p.startswith(CLUSTER_DIR + "/") and p != lockfile.LOCK_PATH
    }
    svc: dict[str, Any] = {"engine_api": ctx.api_base}
    for s in ctx.services:
        if s.name == "proxy":
            svc["proxy"] = {
                "port": recipe.proxy.port,
                "master_key_file": next(x.file for x in s.secrets if x.name == MASTER_KEY_ENV),
                "image": recipe.proxy.image,
            }
    if recipe.monitoring.enabled:
        mon = recipe.monitoring
        svc["monitoring"] = {
            "prometheus_port": mon.prometheus_port,
            "grafana_port": mon.grafana_port,
            "node_exporter_port": mon.node_exporter_port,
            "deskside_exporter_port": series.EXPORTER_PORT,
            "images": mon.images.model_dump(mode="json"),
            "data_dir": f"{layout.recipe_dir}/data",
        }
    if services_on := services.cluster_services(ctx):
        svc["compose"] = {
            "cluster": {
                "project": services.cluster_project(ctx),
                "file": f"{CLUSTER_DIR}/{services.CLUSTER_COMPOSE}",
                "services": services_on,
            },
        }
        if recipe.monitoring.enabled:
            svc["compose"]["nodes"] = {
                "project": services.node_project(ctx),
                "file": services.NODE_COMPOSE,
                "services": [s.slug for s in services.compose_services(ctx, recipe.head.name)],
            }
    service_units = {n.name: [u.name for u in units.service_units(ctx, n)] for n in ctx.nodes}
    if any(service_units.values()):
        svc["units"] = service_units
    plan = ctx.plan
    return lockfile.Lock(
        lock_version=lockfile.LOCK_VERSION,
        recipe=recipe.name,
        recipe_file=ctx.recipe_file,
        recipe_sha256=lockfile.recipe_sha256(portable_recipe_json(recipe, ctx.recipe_dir)),
        deskside_version=lockfile.deskside_version(),
        vllm_version=recipe.engine.vllm_version,
        runtime=recipe.runtime.kind,
        image=recipe.engine.image,
        image_digest=lockfile.image_digest(recipe.engine.image),
        model=lockfile.ModelLock(
            repo=m.repo,
            revision=m.revision,
            path=_portable_path(m.path, ctx.recipe_dir),
            node_reference=ctx.model,
            served_name=m.served_name,
            aliases=list(m.aliases),
        ),
        layout={
            "release_dir": layout.current,
            "releases_dir": layout.releases,
            "models_dir": layout.models,
            "cache_dir": layout.cache,
            "hf_cache": recipe.runtime.hf_cache,
            "systemd_unit": layout.unit_name if recipe.runtime.systemd else "",
            "compose_project": layout.compose_project if recipe.runtime.kind == "container" else "",
        },
        plan={
            "fits": plan.fits,
            "max_model_len": plan.max_model_len,
            "kv_cache_tokens": plan.kv_cache_tokens,
            "kv_bytes_per_token": plan.kv_bytes_per_token,
            "num_blocks": plan.num_blocks,
            "block_size": plan.block_size,
            "max_concurrency": plan.max_concurrency,
        },
        services=svc,
        nodes=nodes,
        cluster_files=cluster_files,
    )


def _portable_path(path: str | None, recipe_dir: Path) -> str | None:
    """A path the loader made absolute against the recipe's folder, relative again (so the
    lock does not depend on where the recipe sits on this machine)."""
    if path is None:
        return None
    try:
        return Path(path).relative_to(recipe_dir.absolute()).as_posix()
    except ValueError:
        return path


def exporter_recipe(recipe: Recipe, recipe_dir: Path) -> str:
    """The recipe as deskside's exporter reads it on a node: canonical JSON (JSON is YAML),
    one key per line."""
    return json.dumps(json.loads(portable_recipe_json(recipe, recipe_dir)), indent=1) + "\n"


def portable_recipe_json(recipe: Recipe, recipe_dir: Path) -> str:
    """The recipe as canonical JSON, model paths relative to the recipe's folder."""
    data = recipe.model_dump(mode="json")
    for key in ("path", "config"):
        data["model"][key] = _portable_path(data["model"][key], recipe_dir)
    return json.dumps(data, sort_keys=True, separators=(",", ":"))
