"""Every service beside the engines is the same process wherever it runs: what a run on
this machine spawns, what its systemd unit starts, and what its Compose service runs in
its image read the same files, with the same arguments, and are waited for at the same
URL; the deploy creates every bind-mount source the Compose files need.

The expectations are read from the outputs themselves — the Spawn operations of a run on
this machine, the ExecStart= words of the rendered units, the command, entrypoint, volumes
and healthcheck of the rendered Compose files, the deploy's dry-run transcript — and
compared after naming each site's folders by hand (below), never by asking the service
table what it meant."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, get_args

import pytest
from ruamel.yaml import YAML

from deskside.deploy import releases as rel
from deskside.layout import NodeLayout
from deskside.planner.plan import Plan
from deskside.recipe.types import Recipe
from deskside.records.node import ServiceName
from deskside.render.assemble import render
from deskside.render.bundle import Bundle
from deskside.runtime.local import LocalStart
from deskside.runtime.ops import Spawn
from deskside.runtime.pipeline import UpOptions
from deskside.runtime.transports import HERE
from deskside.transport.base import Result
from deskside.transport.fake import FakeTransport

from .render_cases import FLAGSHIP, LOCAL_TINY, load_and_plan
from .test_transcript_golden import dry_run_recipe
from .unit_words import exec_start

PROXY_IMAGE = "ghcr.io/berriai/litellm:v1.108.5@sha256:" + "0" * 64  # a placeholder digest
WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
# the recorded name of each service, and its name in unit files and Compose files
NATIVE = {"proxy": "proxy", "prometheus": "prometheus", "node_exporter": "node-exporter"}
NATIVE_ONLY = {"exporter": "exporter"}
IMAGE_PATHS = {"/bin/sh"}  # in every image


def _yaml(data: bytes) -> Any:
    return YAML(typ="safe", pure=True).load(data)


def _variant(recipe: Recipe, **runtime: object) -> Recipe:
    """`recipe` with systemd units, the proxy in an image, and `runtime` changes."""
    return recipe.model_copy(
        update={
            "runtime": recipe.runtime.model_copy(update={"systemd": True, **runtime}),
            "proxy": recipe.proxy.model_copy(update={"enabled": True, "image": PROXY_IMAGE}),
        }
    )


@pytest.fixture(scope="module")
def tiny() -> tuple[Recipe, Plan, Bundle]:
    """local-tiny (native runtime, proxy and monitoring on) with units, and a proxy image
    so the head's Compose file has the proxy too."""
    recipe, plan = load_and_plan(LOCAL_TINY)
    assert recipe.runs_proxy and recipe.monitoring.enabled and recipe.survive.watch
    recipe = _variant(recipe)
    return recipe, plan, render(recipe, LOCAL_TINY, plan)


@pytest.fixture
def here(
    tiny: tuple[Recipe, Plan, Bundle], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[tuple[str, str], Spawn], dict[tuple[str, str], str], Path]:
    """What a run of local-tiny on this machine spawns and waits for, by (node, service),
    and its $DESKSIDE_HOME."""
    recipe, plan, _ = tiny
    home = tmp_path / "home"
    monkeypatch.setenv("DESKSIDE_HOME", str(home))
    litellm = tmp_path / "bin" / "litellm"
    litellm.parent.mkdir()
    litellm.write_text("#!/bin/sh\n")
    litellm.chmod(0o755)
    monkeypatch.setenv("DESKSIDE_LITELLM", str(litellm))
    fake = FakeTransport(label=HERE)
    fake.default = lambda argv: Result(0, "", "")
    start = LocalStart(
        recipe,
        LOCAL_TINY,
        plan,
        UpOptions(dry_run=True),
        lambda _msg: None,
        "/usr/bin/python3",
        lambda: WHEN,
        {HERE: fake},
    )
    outcome = start.services()
    spawned = [op for op in outcome.ops if isinstance(op, Spawn)]
    # a dry run plans one check per spawn, in the same order
    assert [node for node, _ in outcome.planned] == [op.node for op in spawned]
    spawns = {(op.node, str(op.record)): op for op in spawned}
    checks = {
        (op.node, str(op.record)): url
        for op, (_, url) in zip(spawned, outcome.planned, strict=True)
    }
    assert "grafana" not in {name for _, name in spawns}  # only in its image
    return spawns, checks, home


# --------------------------------------------------------------------------- the sites


def _local_names(home: Path, recipe: Recipe, litellm: str) -> list[tuple[str, str]]:
    """(path or program on this machine, its role), as a run on this machine lays out."""
    run = f"{home}/runs/{recipe.name}"
    return [
        (f"{run}/cluster/recipe.yaml", "<exporter-recipe>"),
        (f"{run}/cluster", "<cluster>"),
        (f"{run}/prometheus-data", "<prometheus-data>"),
        *((f"{run}/nodes/{n.name}", "<state>") for n in recipe.cluster.nodes),
        (f"{home}/secrets/{recipe.name}", "<secrets>"),
        ("/usr/bin/python3 -m deskside.cli", "<deskside>"),
        (litellm, "<litellm>"),
    ]


def _deployed_names(recipe: Recipe) -> list[tuple[str, str]]:
    """(path or program on a deployed node, its role), as `runtime.root` is laid out."""
    rn = f"{recipe.runtime.root.rstrip('/')}/{recipe.name}"
    return [
        (f"{rn}/current/recipe.yaml", "<exporter-recipe>"),
        (f"{rn}/current/cluster", "<cluster>"),
        (f"{rn}/data/prometheus", "<prometheus-data>"),
        (f"{rn}/secrets", "<secrets>"),
        (rn, "<state>"),
        (recipe.monitoring.deskside, "<deskside>"),
        (recipe.proxy.litellm, "<litellm>"),
    ]


def _named(words: list[str], names: list[tuple[str, str]]) -> list[str]:
    """`words` with each site path (and the programs) replaced by its role; a path of no
    known folder stays as it is."""
    line = "\x00".join(words)
    for value, role in sorted(names, key=lambda vr: -len(vr[0])):
        value = value.replace(" ", "\x00")  # a program of several words
        line = re.sub(rf"(?<![^\x00=]){re.escape(value)}(?=$|[\x00/])", role, line)
    return line.split("\x00")


def _seen_from_host(words: list[str], volumes: list[dict[str, Any]], base: str) -> list[str]:
    """The container's `words` with every mounted path replaced by its host path (a
    relative source is the Compose file's folder `base`)."""
    pairs = []
    for v in volumes:
        source = v["source"].replace("$$", "$")
        if source.startswith("./"):
            source = str(PurePosixPath(base, source[2:]))
        pairs.append((v["target"].replace("$$", "$"), source))
    out = []
    for word in words:
        word = word.replace("$$", "$")
        flag, eq, value = word.partition("=") if word.startswith("--") else ("", "", word)
        for target, source in sorted(pairs, key=lambda p: -len(p[0])):
            if value == target or value.startswith(target.rstrip("/") + "/"):
                value = source.rstrip("/") + value[len(target.rstrip("/")) :] or "/"
                break
        else:  # a path the container does not have from the host: its image's own
            assert not value.startswith("/") or value in IMAGE_PATHS, f"{word} is not mounted"
        out.append(flag + eq + value)
    return out


def _unit(bundle: Bundle, recipe: Recipe, node: str, slug: str) -> str:
    return bundle[f"{node}/deskside-{recipe.name}-{slug}.service"].decode()


def _compose(bundle: Bundle, recipe: Recipe, node: str, slug: str) -> tuple[dict[str, Any], str]:
    """(the Compose service, the folder its file lands in on the node)."""
    rn = f"{recipe.runtime.root.rstrip('/')}/{recipe.name}"
    if slug == "node-exporter":
        data = _yaml(bundle[f"{node}/monitoring.compose.yaml"])
        return data["services"][slug], f"{rn}/current"
    return _yaml(bundle["cluster/compose.yaml"])["services"][slug], f"{rn}/current/cluster"


# --------------------------------------------------------------------------- argv


@pytest.mark.parametrize("name", [*NATIVE, *NATIVE_ONLY])
def test_a_run_here_spawns_what_the_unit_starts(
    name: str, tiny: tuple[Recipe, Plan, Bundle], here: Any
) -> None:
    recipe, _, bundle = tiny
    spawns, _, home = here
    slug = {**NATIVE, **NATIVE_ONLY}[name]
    litellm = str(Path(home).parent / "bin" / "litellm")
    nodes = [n.name for n in recipe.cluster.nodes if (n.name, name) in spawns]
    assert nodes == ([recipe.head.name] if name in ("proxy", "prometheus") else ["node0", "node1"])
    for node in nodes:
        spawned = _named(list(spawns[node, name].argv), _local_names(home, recipe, litellm))
        started = _named(exec_start(_unit(bundle, recipe, node, slug)), _deployed_names(recipe))
        assert spawned == started
        # nothing of either site is left unnamed: the comparison is of roles, not paths
        for word in spawned:
            assert not re.search(rf"{home}|{recipe.runtime.root}", word), word


@pytest.mark.parametrize("name", list(NATIVE))
def test_the_image_runs_the_units_command_on_the_same_files(
    name: str, tiny: tuple[Recipe, Plan, Bundle]
) -> None:
    recipe, _, bundle = tiny
    slug = NATIVE[name]
    for node in [recipe.head.name] if name != "node_exporter" else ["node0", "node1"]:
        service, base = _compose(bundle, recipe, node, slug)
        native = exec_start(_unit(bundle, recipe, node, slug))
        if "entrypoint" in service:  # the proxy: run-proxy.sh with the image's litellm
            inside = _seen_from_host(service["entrypoint"], service["volumes"], base)
            assert inside[4] == "litellm"
            inside[4] = native[4]  # the image's program in place of the node's
            assert inside == native
        else:  # the image's entrypoint is the program; its command, the arguments
            assert _seen_from_host(service["command"], service["volumes"], base) == native[1:]


def test_the_unit_and_the_image_run_the_recipes_node_exporter(
    tiny: tuple[Recipe, Plan, Bundle], here: Any
) -> None:
    """One program name everywhere: the recipe's (no second name tried here only)."""
    recipe, _, bundle = tiny
    spawns, _, _ = here
    program = recipe.monitoring.node_exporter
    assert program == "prometheus-node-exporter"  # Debian's and Ubuntu's name, the default
    assert spawns["node1", "node_exporter"].argv[0] == program
    assert exec_start(_unit(bundle, recipe, "node1", "node-exporter"))[0] == program


def test_the_exporter_reads_the_nodes_state_everywhere(
    tiny: tuple[Recipe, Plan, Bundle], here: Any
) -> None:
    recipe, _, bundle = tiny
    spawns, _, home = here
    rn = f"{recipe.runtime.root.rstrip('/')}/{recipe.name}"
    for node in ("node0", "node1"):
        local = list(spawns[node, "exporter"].argv)
        unit = exec_start(_unit(bundle, recipe, node, "exporter"))
        assert local[local.index("--state-dir") + 1] == f"{home}/runs/{recipe.name}/nodes/{node}"
        assert unit[unit.index("--state-dir") + 1] == rn


def test_every_process_a_run_records_is_one_it_spawns(here: Any) -> None:
    """local-tiny turns everything on: its run spawns each recorded service name (and
    nothing the records could not name, which `down` would then never stop)."""
    spawns, _, _ = here
    assert {name for _, name in spawns} == set(get_args(ServiceName))


# --------------------------------------------------------------------------- readiness


def _listen(words: list[str]) -> str:
    """host:port a command line listens on."""
    for word in words:
        if word.startswith("--web.listen-address="):
            return word.split("=", 1)[1]
    return f"{words[words.index('--host') + 1]}:{words[words.index('--port') + 1]}"


def _health_url(service: dict[str, Any]) -> str:
    """The URL a Compose healthcheck fetches (wget's last word, or python3's urlopen)."""
    found = re.search(r"http://[^'\" ]+", service["healthcheck"]["test"][-1])
    assert found is not None, service["healthcheck"]
    return found.group(0).replace("$$", "$")


@pytest.mark.parametrize("name", [*NATIVE, *NATIVE_ONLY])
def test_a_run_here_waits_where_the_compose_healthcheck_looks(
    name: str, tiny: tuple[Recipe, Plan, Bundle], here: Any
) -> None:
    recipe, _, bundle = tiny
    spawns, checks, _ = here
    for (node, spawned), url in checks.items():
        if spawned != name:
            continue
        # the URL is on the address and port the service listens on
        assert url.startswith(f"http://{_listen(list(spawns[node, name].argv))}/")
        if name in NATIVE:
            service, _ = _compose(bundle, recipe, node, NATIVE[name])
            assert _health_url(service) == url


def test_prometheus_is_ready_when_it_serves_queries(
    tiny: tuple[Recipe, Plan, Bundle], here: Any
) -> None:
    """/-/ready answers once Prometheus serves queries (/-/healthy already before)."""
    recipe, _, bundle = tiny
    _, checks, _ = here
    address = f"{recipe.head.address}:{recipe.monitoring.prometheus_port}"
    assert checks["node0", "prometheus"] == f"http://{address}/-/ready"
    service, _ = _compose(bundle, recipe, "node0", "prometheus")
    assert _health_url(service) == f"http://{address}/-/ready"


def test_the_deploy_waits_where_the_compose_healthchecks_look(tmp_path: Path) -> None:
    """The flagship (container runtime, units): its deploy checks each service at the URL
    its Compose service's healthcheck uses (the exporter, natively: at its listen
    address)."""
    recipe, plan = load_and_plan(FLAGSHIP)
    recipe = _variant(recipe)
    report = dry_run_recipe(recipe, FLAGSHIP, plan)
    assert report.ok, (report.failed_stage, report.error)
    checked = {(t["node"], t["op"].removeprefix("check ")) for t in report.transcript}
    bundle = render(recipe, FLAGSHIP, plan)
    expected = set()
    for slug in ("proxy", "prometheus", "grafana"):
        service, _ = _compose(bundle, recipe, recipe.head.name, slug)
        expected.add((recipe.head.name, _health_url(service)))
    for node in recipe.cluster.nodes:
        service, _ = _compose(bundle, recipe, node.name, "node-exporter")
        expected.add((node.name, _health_url(service)))
        unit = exec_start(_unit(bundle, recipe, node.name, "exporter"))
        expected.add((node.name, f"http://{_listen(unit)}/metrics"))
    assert len(expected) == 2 * 2 + 3 and expected <= checked


# --------------------------------------------------------------------------- mounts


def _mkdirs(report: Any, node: str) -> set[str]:
    """What the deploy creates on `node` before anything starts (`mkdir -p -- ...`)."""
    out: set[str] = set()
    for t in report.transcript:
        if t["node"] == node and t["op"].startswith("run mkdir -p -- "):
            out |= set(t["op"].removeprefix("run mkdir -p -- ").split())
    return out


def _writable_sources(bundle: Bundle, node: str, head: bool) -> set[str]:
    """The writable absolute bind sources of `node`'s Compose files."""
    files = [f"{node}/monitoring.compose.yaml", f"{node}/compose.yaml"]
    files += ["cluster/compose.yaml"] if head else []
    return {
        v["source"].replace("$$", "$")
        for f in files
        if f in bundle
        for s in _yaml(bundle[f])["services"].values()
        for v in s.get("volumes", [])
        if not v.get("read_only") and v["source"].startswith("/")
    }


def test_the_deploy_creates_every_writable_bind_mount() -> None:
    """Compose v1.29 cannot create a bind source: every writable one outside the release
    (data, caches) is made by the deploy, on the node whose containers mount it."""
    recipe, plan = load_and_plan(FLAGSHIP)
    recipe = _variant(recipe)
    bundle = render(recipe, FLAGSHIP, plan)
    report = dry_run_recipe(recipe, FLAGSHIP, plan)
    assert report.ok, (report.failed_stage, report.error)
    for node in recipe.cluster.nodes:
        writable = _writable_sources(bundle, node.name, node.role == "head")
        assert len(writable) == (4 if node.role == "head" else 2), writable
        assert writable <= _mkdirs(report, node.name), node.name


def test_native_units_get_the_folders_of_grafanas_image() -> None:
    """Native runtime with units: Grafana still runs in its image, so its data folder is
    made; the natively run services' folders are their own business."""
    recipe, plan = load_and_plan(LOCAL_TINY)
    recipe = _variant(recipe)
    bundle = render(recipe, LOCAL_TINY, plan)
    layout = NodeLayout.of(recipe)
    for node in recipe.cluster.nodes:
        made = set(rel.container_mounts(recipe, layout, node.name))
        writable = _writable_sources(bundle, node.name, node.role == "head")
        in_images = {  # what the units run under Compose: Grafana only
            v["source"].replace("$$", "$")
            for v in _yaml(bundle["cluster/compose.yaml"])["services"]["grafana"]["volumes"]
            if not v.get("read_only")
        }
        expected = in_images if node.role == "head" else set()
        assert made == expected and expected <= writable
