"""Deploy a recipe to its nodes over their transports (SSH for `ssh:` nodes): one pipeline
of named stages, SkyPilot-style; a dry run stops after `diff`.

    preflight  every node: reachable, root/sudo where needed, ports free on the head,
               Python with vLLM (native) or Docker (container), free disk
    render     `deskside.render.render()`: the bundle and its lock
    diff       the new lock against the head's `current/cluster/deskside.lock`
    push       every node's bundle folder (the head's with `cluster/`) to a new release
               folder, renamed into place when complete; the local model folder where
               `render.model_upload` says; the proxy key (0600) on the head; then every
               node's `current` link switched to the new release
    start      the running engines stopped (head first), then workers started, then the
               head (and the proxy); each node's pid/log in its state file
    ready      `deskside.runtime.ready.wait_ready` over the nodes' logs and liveness,
               read over SSH; the proxy answering when there is one
    contract   one completion for every served name, through the proxy when configured,
               else through the head

A failure in start, ready or contract rolls back: the new engines are stopped, `current`
is switched back to each node's previous release, which is started and waited for again.
The report says which stage failed and why, and whether the rollback came back ready.

A deploy that changes nothing (same files, same model folder, engines running) leaves
the engines alone and only checks readiness and the contract.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict

from deskside import lock as lockfile
from deskside import secrets
from deskside.deploy_stages import commands as cmd
from deskside.deploy_stages import preflight as pf
from deskside.deploy_stages.commands import NodePaths
from deskside.deploy_stages.control import (
    Control,
    RemoteNodeState,
    read_state,
    remove_state,
    write_state,
)
from deskside.engine.vllm import launch_plan
from deskside.errors import DesksideError, PlanRefused, UsageError
from deskside.home import runs_dir
from deskside.lock import HostDiff
from deskside.planner.plan import Plan
from deskside.recipe.types import Node, Recipe, Ssh
from deskside.render.assemble import model_upload, render
from deskside.render.bundle import CLUSTER_DIR, Bundle
from deskside.render.context import Layout
from deskside.render.proxy import HEAD_KEY_FILE
from deskside.runtime.native import ClusterStatus, NodeStatus, api_url, cluster_status
from deskside.runtime.ready import FAILURE_EVENTS, LogFollower, Watched, wait_ready
from deskside.transport.base import Transport
from deskside.transport.local import LocalTransport
from deskside.transport.ssh import SshTarget, SshTransport

STAGES = ("preflight", "render", "diff", "push", "start", "ready", "contract")
ROLLBACK_AFTER = ("start", "ready", "contract")
RUN_FILE = "deploy.json"
SKIPPED = "skipped: "  # a stage returning a detail with this prefix did nothing

Progress = Callable[[str], None]
Clock = Callable[[], datetime]


class StageFailed(DesksideError):
    """A stage of the deploy pipeline could not complete."""


@dataclass(frozen=True)
class DeployOptions:
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts
    dry_run: bool = False
    timeout: float = 900.0  # readiness, per start (the deploy, and the rollback)
    grace: float = 20.0  # seconds between SIGTERM and SIGKILL when stopping engines
    keep_releases: int = 5
    poll_interval: float = 0.5
    contract_timeout: float = 120.0
    http_transport: httpx.BaseTransport | None = None  # tests: an httpx.MockTransport


@dataclass
class StageRecord:
    name: str
    status: str  # ok | failed | skipped
    seconds: float
    detail: str = ""


@dataclass
class RollbackRecord:
    to_release: dict[str, str | None]
    ok: bool
    seconds: float  # in all: stopping the new release, switching back, the restart
    detail: str
    error: str | None = None
    stop_seconds: float = 0.0  # stopping the new release and switching `current` back


@dataclass
class DeployReport:
    recipe: str
    dry_run: bool
    api_url: str
    proxy_url: str | None
    served_names: list[str]
    release: str | None = None
    previous: dict[str, str | None] = field(default_factory=dict)
    stages: list[StageRecord] = field(default_factory=list)
    diffs: list[HostDiff] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ok: bool = False
    failed_stage: str | None = None
    error: str | None = None
    hint: str | None = None
    exit_code: int = 0
    rollback: RollbackRecord | None = None
    logged_kv_cache_line: str | None = None
    planned_kv_cache_line: str | None = None
    seconds: float = 0.0

    def stage(self, name: str) -> StageRecord | None:
        return next((s for s in self.stages if s.name == name), None)

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["diffs"] = [d.model_dump(mode="json") for d in self.diffs]
        return data


# --------------------------------------------------------------------------- run records


class RunNode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    role: str
    node_rank: int
    address: str
    ssh: Ssh | None
    netns: str | None = None


class RemoteRun(BaseModel):
    """What this machine remembers of a deploy ($DESKSIDE_HOME/runs/<recipe>/deploy.json),
    so `status`, `logs` and `down` find the nodes; the nodes' state files say the rest."""

    model_config = ConfigDict(extra="forbid")

    recipe: str
    recipe_name: str
    recipe_dir: str  # R/N on the nodes
    runtime: str
    systemd: bool
    unit: str
    compose_project: str
    api_url: str
    proxy_url: str | None
    served_names: list[str]
    known_hosts: str | None
    release: str | None
    deployed_at: str
    ready_at: str | None = None
    nodes: list[RunNode]


def run_file(recipe_name: str) -> Path:
    return runs_dir() / recipe_name / RUN_FILE


def save_run(run: RemoteRun) -> None:
    LocalTransport().put(run.model_dump_json(indent=2).encode(), str(run_file(run.recipe_name)))


def remote_runs() -> list[str]:
    if not runs_dir().exists():
        return []
    return sorted(p.parent.name for p in runs_dir().glob(f"*/{RUN_FILE}"))


def find_remote_run(name: str | None) -> RemoteRun | None:
    """The deployed (SSH) run `name`, or the only run there is when it is a deployed one;
    None when the run is a local one (the native runtime's)."""
    if name is not None:
        path = run_file(name)
        return RemoteRun.model_validate_json(path.read_text()) if path.exists() else None
    remote = remote_runs()
    native = sorted(p.parent.name for p in runs_dir().glob("*/state.json")) if remote else []
    if len(remote) == 1 and not native:
        return find_remote_run(remote[0])
    if remote:
        raise DesksideError(
            "several runs: " + ", ".join(sorted({*remote, *native})),
            hint="name one: --recipe NAME",
        )
    return None


def is_remote(recipe: Recipe) -> bool:
    """Recipes with `ssh:` nodes go through the deploy pipeline; others run natively."""
    return any(n.ssh is not None for n in recipe.cluster.nodes)


def transport_for(node: RunNode | Node, known_hosts: str | None) -> Transport:
    """SSH for `ssh:` nodes; a node without it is this machine (in its namespace, if any)."""
    if node.ssh is None:
        return LocalTransport(netns=node.netns)
    return SshTransport(
        SshTarget(
            host=node.address,
            port=node.ssh.port,
            user=node.ssh.user,
            identity_file=node.ssh.identity_file,
            known_hosts=known_hosts,
        )
    )


# --------------------------------------------------------------------------- the pipeline


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(when: datetime) -> str:
    return when.isoformat(timespec="seconds")


@dataclass
class Deployment:
    """Everything the stages share: inputs, transports, and what earlier stages found."""

    recipe: Recipe
    recipe_path: Path
    plan: Plan
    options: DeployOptions
    transports: dict[str, Transport]
    say: Progress
    now: Clock
    report: DeployReport
    layout: Layout
    paths: NodePaths
    start_order: list[str]  # workers first, head last
    controls: dict[str, Control] = field(default_factory=dict)
    old_states: dict[str, RemoteNodeState | None] = field(default_factory=dict)
    old_alive: dict[str, bool] = field(default_factory=dict)
    previous: dict[str, str | None] = field(default_factory=dict)
    bundle: Bundle | None = None
    old_lock: lockfile.Lock | None = None
    model_manifest: bytes | None = None
    model_changed: bool = True
    unchanged: bool = False
    rid: str | None = None
    switched: list[str] = field(default_factory=list)
    new_states: dict[str, RemoteNodeState] = field(default_factory=dict)

    @property
    def nodes(self) -> dict[str, Node]:
        return {n.name: n for n in self.recipe.cluster.nodes}

    @property
    def head(self) -> str:
        return self.recipe.head.name

    @property
    def stop_order(self) -> list[str]:
        """Head first (no new requests), then the workers."""
        return [self.head, *[n for n in self.start_order if n != self.head]]

    def t(self, node: str) -> Transport:
        return self.transports[node]

    def http(self, timeout: float, headers: Mapping[str, str] | None = None) -> httpx.Client:
        return httpx.Client(transport=self.options.http_transport, timeout=timeout, headers=headers)

    def run(self, node: str, argv: Sequence[str], what: str, timeout: float = 120) -> str:
        r = self.t(node).run(argv, timeout=timeout)
        if not r.ok:
            detail = (r.stderr or r.stdout).strip()[-400:]
            raise StageFailed(f"{node}: {what} failed (exit {r.rc}): {detail}")
        return r.stdout


def _proxy_url(recipe: Recipe) -> str | None:
    if not recipe.proxy.enabled:
        return None
    return f"http://{recipe.head.address}:{recipe.proxy.port}"


def deploy(
    recipe: Recipe,
    recipe_path: Path,
    plan: Plan,
    options: DeployOptions | None = None,
    *,
    transports: Mapping[str, Transport] | None = None,
    progress: Progress | None = None,
    now: Clock = _now,
) -> DeployReport:
    """Run the pipeline (see the module docstring). Never raises for a failed stage: the
    report says what failed (`ok`, `failed_stage`, `error`, `rollback`)."""
    options = options or DeployOptions()
    say = progress or (lambda _msg: None)
    layout = Layout.of(recipe)
    report = DeployReport(
        recipe=recipe.name,
        dry_run=options.dry_run,
        api_url=api_url(recipe),
        proxy_url=_proxy_url(recipe),
        served_names=list(recipe.model.all_names),
        planned_kv_cache_line=plan.kv_cache_line,
    )
    chosen = dict(transports) if transports is not None else {}
    for node in recipe.cluster.nodes:
        chosen.setdefault(node.name, transport_for(node, options.known_hosts))
    d = Deployment(
        recipe=recipe,
        recipe_path=recipe_path,
        plan=plan,
        options=options,
        transports=chosen,
        say=say,
        now=now,
        report=report,
        layout=layout,
        paths=NodePaths.of(layout),
        start_order=[la.node for la in launch_plan(recipe, "model")],
    )
    t0 = time.monotonic()
    stages = STAGES[: STAGES.index("diff") + 1] if options.dry_run else STAGES
    for name in stages:
        fn = _STAGE_FUNCS[name]
        started = time.monotonic()
        say(name)
        try:
            detail = fn(d)
        except Exception as exc:
            report.stages.append(StageRecord(name, "failed", time.monotonic() - started))
            report.failed_stage = name
            report.error = _describe(exc, hint=False)
            if isinstance(exc, DesksideError):
                report.hint, report.exit_code = exc.hint, exc.exit_code
            else:
                report.exit_code = 1
            if name in ROLLBACK_AFTER:
                rollback_started = time.monotonic()
                try:
                    report.rollback = _rollback(d)
                except Exception as rb_exc:  # e.g. a node became unreachable
                    report.rollback = RollbackRecord(
                        dict(d.previous),
                        False,
                        time.monotonic() - rollback_started,
                        "the rollback itself failed",
                        _describe(rb_exc),
                    )
            break
        status = "ok"
        if detail.startswith(SKIPPED):
            status, detail = "skipped", detail.removeprefix(SKIPPED)
        report.stages.append(StageRecord(name, status, time.monotonic() - started, detail))
    else:
        report.ok = True
        if not options.dry_run:
            _finish(d)
    report.release = d.rid
    report.previous = dict(d.previous)
    report.seconds = time.monotonic() - t0
    return report


def _describe(exc: BaseException, hint: bool = True) -> str:
    if isinstance(exc, DesksideError):
        return exc.message + (f"\n  {exc.hint}" if hint and exc.hint else "")
    return f"{type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------- stages


def _fail_findings(findings: list[pf.Finding]) -> StageFailed:
    lines = [f"{f.node}: {f.message}" for f in findings]
    hints = [f"{f.node}: {f.hint}" for f in findings if f.hint]
    return StageFailed(
        f"preflight found {len(findings)} problem{'s' if len(findings) != 1 else ''}:\n  "
        + "\n  ".join(lines),
        hint="\n  ".join(hints) or None,
    )


def _upload_bytes(recipe: Recipe, recipe_path: Path) -> int:
    upload = model_upload(recipe, recipe_path)
    if upload is None or not upload[0].is_dir():
        return 0
    return sum(p.stat().st_size for p in upload[0].rglob("*") if p.is_file())


def stage_preflight(d: Deployment) -> str:
    recipe = d.recipe
    findings: list[pf.Finding] = []
    need = _upload_bytes(recipe, d.recipe_path) + 1024**2
    base = Control.of(recipe)
    for node in recipe.cluster.nodes:
        t = d.t(node.name)
        key_file = recipe.proxy.master_key_file if node.role == "head" else None
        argv = pf.facts_command(
            d.layout.recipe_dir,
            python=pf.node_python(recipe) if recipe.runtime.kind == "native" else None,
            docker=recipe.runtime.kind == "container",
            litellm=recipe.proxy.enabled and node.role == "head",
            key_file=key_file,
        )
        try:
            r = t.run(argv, timeout=60)
        except DesksideError as exc:
            findings.append(pf.Finding(node.name, exc.message, exc.hint))
            continue
        if not r.ok:
            findings.append(
                pf.Finding(node.name, f"preflight probe failed (exit {r.rc}): {r.stderr[-300:]}")
            )
            continue
        facts = pf.parse_facts(r.stdout)
        sudo: tuple[str, ...] = () if facts.root else ("sudo", "-n")
        control = base.with_sudo(sudo)
        d.controls[node.name] = control
        state = read_state(t, d.paths)
        d.old_states[node.name] = state
        d.old_alive[node.name] = state is not None and control.alive(t, state)
        check = pf.check_node(
            facts,
            recipe=recipe,
            node=node,
            recipe_dir=d.layout.recipe_dir,
            own_engine_running=d.old_alive[node.name],
            need_bytes=need,
        )
        findings.extend(check.problems)
        d.report.notes.extend(check.notes)
    if findings:
        raise _fail_findings(findings)
    running = [n for n, alive in d.old_alive.items() if alive]
    return f"{len(recipe.cluster.nodes)} nodes ok" + (
        f"; running now: {', '.join(running)}" if running else ""
    )


def stage_render(d: Deployment) -> str:
    if not d.plan.fits:
        raise PlanRefused(
            f"deskside refuses to deploy: {d.plan.refusal}",
            hint="lower max_model_len (see `deskside plan`) or give the KV cache more memory",
        )
    upload = model_upload(d.recipe, d.recipe_path)
    if upload is not None and not (upload[0] / "config.json").is_file():
        raise StageFailed(
            f"model folder {upload[0]} has no config.json",
            hint=f"create it: deskside model tiny --arch deepseek-v3 --out {upload[0]}",
        )
    d.bundle = render(d.recipe, d.recipe_path, d.plan)
    d.report.notes.extend(d.bundle.notes)
    return f"{len(d.bundle)} files"


def _model_manifest(folder: Path) -> bytes:
    """Which files the local model folder holds (size and modification time): a re-push
    is needed when it changes."""
    entries = {
        p.relative_to(folder).as_posix(): [p.stat().st_size, p.stat().st_mtime_ns]
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
    return json.dumps(entries, sort_keys=True).encode()


def stage_diff(d: Deployment) -> str:
    assert d.bundle is not None
    head = d.t(d.head)
    for node in d.recipe.cluster.nodes:
        r = d.t(node.name).run(cmd.read_current(d.paths))
        d.previous[node.name] = cmd.parse_current(r.stdout) if r.ok else None
    try:
        text = head.get(f"{d.paths.current}/{lockfile.LOCK_PATH}").decode()
        d.old_lock = lockfile.parse_lock(text, f"{d.head}:{d.paths.current}/{lockfile.LOCK_PATH}")
    except FileNotFoundError:
        d.old_lock = None
    except UsageError as exc:
        d.report.notes.append(f"{exc.message}; comparing against an empty deployment")
        d.old_lock = None
    d.report.diffs = lockfile.diff(d.old_lock, d.bundle)
    upload = model_upload(d.recipe, d.recipe_path)
    if upload is not None:
        d.model_manifest = _model_manifest(upload[0])
        remote = f"{upload[1]}/{cmd.MANIFEST_FILE}"
        seen = []
        for node in d.recipe.cluster.nodes:
            try:
                seen.append(d.t(node.name).get(remote) == d.model_manifest)
            except FileNotFoundError:
                seen.append(False)
        d.model_changed = not all(seen)
    else:
        d.model_changed = False
    files_same = not any(h.changes_anything for h in d.report.diffs)
    d.unchanged = (
        files_same
        and not d.model_changed
        and all(d.old_alive.get(n) for n in d.nodes)
        and all(
            (s := d.old_states.get(n)) is not None and s.release == d.previous.get(n)
            for n in d.nodes
        )
    )
    parts = []
    for h in d.report.diffs:
        if not h.changes_anything:
            parts.append(f"{h.host}: unchanged")
            continue
        what = f"{len(h.added)} added, {len(h.changed)} changed, {len(h.removed)} removed"
        parts.append(f"{h.host}: {what}" + ("; engine restarts" if h.restart_engine else ""))
    if upload is not None and d.model_changed:
        parts.append(f"model folder {upload[0].name} to push")
    return "; ".join(parts)


def _put_tree(
    d: Deployment, node: str, files: Mapping[str, bytes], modes: Mapping[str, int], base: str
) -> None:
    t = d.t(node)
    for rel, data in files.items():
        t.put(data, f"{base}/{rel}", modes[rel])


def _upload_model(d: Deployment, node: str, folder: Path, target: str, rid: str) -> None:
    t = d.t(node)
    staging = f"{Path(target).parent!s}/.partial-{Path(target).name}-{rid}"
    d.run(node, ["rm", "-rf", "--", staging], "clearing the model staging folder")
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        remote = f"{staging}/{path.relative_to(folder).as_posix()}"
        if isinstance(t, SshTransport):
            t.put_file(path, remote, 0o644)
        else:
            t.put(path.read_bytes(), remote, 0o644)
    assert d.model_manifest is not None
    t.put(d.model_manifest, f"{staging}/{cmd.MANIFEST_FILE}", 0o644)
    d.run(node, cmd.swap_model_folder(staging, target), "putting the model folder in place")


def _push_secret(d: Deployment) -> None:
    recipe = d.recipe
    if not recipe.proxy.enabled or recipe.proxy.master_key_file is not None:
        return
    key = secrets.proxy_master_key(recipe.name)
    d.run(d.head, cmd.private_dir(d.paths.secrets), "creating the secrets folder")
    # the value goes over SFTP into a file created 0600; it is on no command line
    d.t(d.head).put((key.reveal() + "\n").encode(), f"{d.layout.recipe_dir}/{HEAD_KEY_FILE}", 0o600)


def stage_push(d: Deployment) -> str:
    assert d.bundle is not None
    if d.unchanged:
        d.rid = next(iter(d.previous.values()))
        return SKIPPED + "nothing changed and every engine runs"
    lock_text = d.bundle[lockfile.LOCK_PATH]
    rid = cmd.release_id(d.now(), hashlib.sha256(lock_text).hexdigest())
    taken = {n: d.t(n).run(["test", "-e", d.paths.release(rid)]).ok for n in d.nodes}
    suffix = 2
    base_rid = rid
    while any(taken.values()):
        rid = f"{base_rid}-{suffix}"
        taken = {n: d.t(n).run(["test", "-e", d.paths.release(rid)]).ok for n in d.nodes}
        suffix += 1
    d.rid = rid
    container = d.recipe.runtime.kind == "container"
    bundle = d.bundle
    modes = {p: bundle.mode(p) for p in bundle}
    for node in d.recipe.cluster.nodes:
        d.say(f"pushing release {rid} to {node.name}")
        d.run(node.name, cmd.prepare_dirs(d.paths, container), "creating folders")
        d.run(node.name, cmd.clear_staging(d.paths, rid), "clearing the staging folder")
        staging = d.paths.staging(rid)
        node_files = bundle.folder(node.name)
        _put_tree(
            d, node.name, node_files, {k: modes[f"{node.name}/{k}"] for k in node_files}, staging
        )
        if node.role == "head":
            cluster = bundle.folder(CLUSTER_DIR)
            _put_tree(
                d,
                node.name,
                cluster,
                {k: modes[f"{CLUSTER_DIR}/{k}"] for k in cluster},
                f"{staging}/cluster",
            )
        d.run(node.name, cmd.commit_release(d.paths, rid), "committing the release folder")
    upload = model_upload(d.recipe, d.recipe_path)
    if upload is not None and d.model_changed:
        for node in d.recipe.cluster.nodes:
            d.say(f"pushing model folder {upload[0].name} to {node.name}")
            _upload_model(d, node.name, upload[0], upload[1], rid)
    _push_secret(d)
    try:
        for node in d.recipe.cluster.nodes:
            d.run(node.name, cmd.switch_current(d.paths, rid), "switching current")
            d.switched.append(node.name)
    except StageFailed:
        _switch_back(d)
        raise
    return f"release {rid}"


def _switch_back(d: Deployment) -> list[str]:
    """Point every switched node's `current` at its previous release again (or remove it
    where there was none); returns what could not be done."""
    problems = []
    for node in d.switched:
        prev = d.previous.get(node)
        argv = cmd.switch_current(d.paths, prev) if prev else cmd.remove_current(d.paths)
        r = d.t(node).run(argv)
        if not r.ok:
            problems.append(f"{node}: {(r.stderr or r.stdout).strip()[-200:]}")
    d.switched = []
    return problems


def _stop_engines(d: Deployment, states: Mapping[str, RemoteNodeState | None]) -> list[str]:
    """Stop the engines `states` describe, head first; returns the nodes that did not stop."""
    left = []
    for node in d.stop_order:
        state = states.get(node)
        if state is None:
            continue
        d.say(f"stopping {state.role} {node} (release {state.release})")
        if not d.controls[node].stop(d.t(node), state, d.options.grace):
            left.append(node)
    return left


def _start_release(d: Deployment, releases: Mapping[str, str]) -> dict[str, RemoteNodeState]:
    """Start each node's release (workers first, then the head, then the proxy)."""
    started: dict[str, RemoteNodeState] = {}
    ranks = {la.node: la for la in launch_plan(d.recipe, "model")}
    for node in d.start_order:
        rid = releases[node]
        la = ranks[node]
        d.say(f"starting {la.role} {node} (node rank {la.node_rank}, release {rid})")
        state = d.controls[node].start(
            d.t(node),
            recipe=d.recipe.name,
            node=node,
            role=la.role,
            node_rank=la.node_rank,
            rid=rid,
            started=d.now(),
        )
        write_state(d.t(node), d.paths, state)
        started[node] = state
    head_rid = releases[d.head]
    script = f"{d.paths.release(head_rid)}/{CLUSTER_DIR}/litellm/run-proxy.sh"
    if d.recipe.proxy.enabled and d.t(d.head).run(cmd.file_exists(script)).ok:
        d.say("starting the LiteLLM proxy on the head")
        log = d.paths.proxy_log(head_rid, cmd.stamp(d.now()))
        pid = d.t(d.head).spawn(["sh", script], log_path=log, cwd=d.paths.release(head_rid))
        state = started[d.head].model_copy(update={"proxy_pid": pid, "proxy_log": log})
        write_state(d.t(d.head), d.paths, state)
        started[d.head] = state
    return started


def _record(d: Deployment, release: str | None, ready: bool) -> None:
    recipe = d.recipe
    order = {la.node: la for la in launch_plan(recipe, "model")}
    save_run(
        RemoteRun(
            recipe=str(d.recipe_path),
            recipe_name=recipe.name,
            recipe_dir=d.layout.recipe_dir,
            runtime=recipe.runtime.kind,
            systemd=recipe.runtime.systemd,
            unit=d.layout.unit_name,
            compose_project=d.layout.compose_project,
            api_url=d.report.api_url,
            proxy_url=d.report.proxy_url,
            served_names=d.report.served_names,
            known_hosts=d.options.known_hosts,
            release=release,
            deployed_at=_iso(d.now()),
            ready_at=_iso(d.now()) if ready else None,
            nodes=[
                RunNode(
                    name=n.name,
                    role=order[n.name].role,
                    node_rank=order[n.name].node_rank,
                    address=n.address,
                    ssh=n.ssh,
                    netns=n.netns,
                )
                for n in recipe.cluster.nodes
            ],
        )
    )


def stage_start(d: Deployment) -> str:
    if d.unchanged:
        d.new_states = {n: s for n, s in d.old_states.items() if s is not None}
        return SKIPPED + "engines left running"
    assert d.rid is not None
    left = _stop_engines(d, d.old_states)
    if left:
        raise StageFailed(
            f"the running engine did not stop on {', '.join(left)}",
            hint="see `deskside status`; stop it by hand, then deploy again",
        )
    d.old_alive = dict.fromkeys(d.old_alive, False)
    _record(d, d.rid, ready=False)  # `down` finds the nodes even if this process dies
    d.new_states = {}
    d.new_states = _start_release_tracked(d, dict.fromkeys(d.nodes, d.rid))
    return f"{len(d.new_states)} nodes started"


def _start_release_tracked(
    d: Deployment, releases: Mapping[str, str]
) -> dict[str, RemoteNodeState]:
    """`_start_release`, keeping what was started in `d.new_states` even when a later node
    fails (so a rollback stops it)."""
    try:
        started = _start_release(d, releases)
    except DesksideError:
        for node in d.nodes:
            state = read_state(d.t(node), d.paths)
            if state is not None and state.release == releases.get(node):
                d.new_states[node] = state
        raise
    return started


def _remote_poll(
    d: Deployment, node: str, state: RemoteNodeState
) -> Callable[[], tuple[bool, bytes]]:
    control, t = d.controls[node], d.t(node)
    offset = 0

    def poll() -> tuple[bool, bytes]:
        nonlocal offset
        alive, offset, chunk = control.poll(t, state, offset)
        return alive, chunk

    return poll


def _wait_ready(d: Deployment, states: Mapping[str, RemoteNodeState]) -> str | None:
    watched = [
        Watched(
            node,
            states[node].role,
            f"{d.t(node).name}:{states[node].log or d.layout.unit_name}",
            _remote_poll(d, node, states[node]),
        )
        for node in d.start_order
        if node in states
    ]
    found = wait_ready(
        api_url=d.report.api_url,
        served_names=d.report.served_names,
        planned_kv_cache_tokens=d.plan.kv_cache_tokens,
        nodes=watched,
        timeout=d.options.timeout,
        say=d.say,
        interval=d.options.poll_interval,
        client=d.http(10),
    )
    if d.report.proxy_url is not None:
        _wait_proxy(d, d.report.proxy_url)
    return found.logged_kv_cache_line


def _wait_proxy(d: Deployment, url: str) -> None:
    deadline = time.monotonic() + min(d.options.timeout, 300)
    with d.http(5) as client:
        while time.monotonic() < deadline:
            try:
                if client.get(f"{url}/health/liveliness").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(d.options.poll_interval)
    raise StageFailed(
        f"the LiteLLM proxy does not answer at {url}",
        hint=f"see its log on {d.head}: {d.paths.logs}/<release>.<start>.proxy.log",
    )


def stage_ready(d: Deployment) -> str:
    d.report.logged_kv_cache_line = _wait_ready(d, d.new_states)
    return f"API {d.report.api_url} serves {', '.join(d.report.served_names)}"


def _proxy_key(d: Deployment) -> str | None:
    recipe = d.recipe
    if not recipe.proxy.enabled:
        return None
    if recipe.proxy.master_key_file is None:
        return secrets.proxy_master_key(recipe.name).reveal()
    try:
        return d.t(d.head).get(recipe.proxy.master_key_file).decode().strip()
    except FileNotFoundError:
        return None


def contract_check(client: httpx.Client, base_url: str, names: Sequence[str]) -> list[str]:
    """One short chat completion per served name; returns the failures."""
    failures = []
    with client:
        for name in names:
            body = {
                "model": name,
                "messages": [{"role": "user", "content": "Reply with OK."}],
                "max_tokens": 4,
            }
            try:
                r = client.post(f"{base_url}/v1/chat/completions", json=body)
            except httpx.HTTPError as exc:
                failures.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            if r.status_code != 200:
                failures.append(f"{name}: HTTP {r.status_code}: {r.text[:200]}")
                continue
            try:
                choices = r.json().get("choices") or []
            except ValueError:
                choices = []
            if not choices:
                failures.append(f"{name}: no choices in the answer")
    return failures


def stage_contract(d: Deployment) -> str:
    via = d.report.proxy_url or d.report.api_url
    key = _proxy_key(d)
    headers = {"Authorization": f"Bearer {key}"} if key else None
    failures = contract_check(
        d.http(d.options.contract_timeout, headers), via, d.report.served_names
    )
    if failures:
        raise StageFailed(
            f"the alias contract failed through {via}:\n  " + "\n  ".join(failures),
            hint="every served name and alias must answer a chat completion",
        )
    return f"{len(d.report.served_names)} names answered through {via}"


_STAGE_FUNCS: dict[str, Callable[[Deployment], str]] = {
    "preflight": stage_preflight,
    "render": stage_render,
    "diff": stage_diff,
    "push": stage_push,
    "start": stage_start,
    "ready": stage_ready,
    "contract": stage_contract,
}


def _finish(d: Deployment) -> None:
    """After a good deploy: remember it here; prune old releases on the nodes."""
    _record(d, d.rid, ready=True)
    if d.unchanged:
        return
    protect = {r for r in (d.rid, *d.previous.values()) if r}
    for node in d.nodes:
        r = d.t(node).run(cmd.list_releases(d.paths))
        old = cmd.releases_to_prune(r.stdout, d.options.keep_releases, protect) if r.ok else []
        if old:
            d.t(node).run(cmd.prune(d.paths, old))


# --------------------------------------------------------------------------- rollback


def _rollback(d: Deployment) -> RollbackRecord:
    t0 = time.monotonic()
    d.say("rolling back")
    prev = dict(d.previous)
    left = _stop_engines(d, d.new_states)
    # an old engine the start stage did not get to stop is restarted below
    left += _stop_engines(d, {n: s for n, s in d.old_states.items() if d.old_alive.get(n)})
    switch_problems = _switch_back(d)
    stopped = time.monotonic() - t0
    if left or switch_problems:
        return RollbackRecord(
            prev,
            False,
            time.monotonic() - t0,
            "could not undo the deploy",
            "; ".join([*(f"{n}: engine did not stop" for n in left), *switch_problems]),
            stopped,
        )
    if not all(prev.get(n) for n in d.nodes):
        for node in d.nodes:
            remove_state(d.t(node), d.paths)
        _record(d, None, ready=False)
        return RollbackRecord(
            prev,
            True,
            time.monotonic() - t0,
            "no previous release on every node: the new one is stopped and nothing runs",
            stop_seconds=stopped,
        )
    releases = {n: r for n, r in prev.items() if r}
    try:
        d.new_states = {}
        d.new_states = _start_release_tracked(d, releases)
        d.report.logged_kv_cache_line = _wait_ready(d, d.new_states)
        stage_contract(d)
    except Exception as exc:  # reported, never raised past the deploy
        _record(d, next(iter(releases.values())), ready=False)
        error = _describe(exc)
        return RollbackRecord(
            prev,
            False,
            time.monotonic() - t0,
            "the previous release did not come back",
            error,
            stopped,
        )
    _record(d, releases[d.head], ready=True)
    return RollbackRecord(
        prev,
        True,
        time.monotonic() - t0,
        f"release {releases[d.head]} is READY again",
        stop_seconds=stopped,
    )


# --------------------------------------------------------------------------- down/status/logs


def _run_control(run: RemoteRun) -> tuple[NodePaths, Control]:
    paths = NodePaths(run.recipe_dir)
    kind = "systemd" if run.systemd else ("compose" if run.runtime == "container" else "process")
    control = Control(
        kind=kind,  # type: ignore[arg-type]
        runtime=run.runtime,
        paths=paths,
        unit=run.unit,
        compose_project=run.compose_project,
    )
    return paths, control


def _login_control(t: Transport, control: Control) -> Control:
    r = t.run(["id", "-u"])
    return control if r.ok and r.stdout.strip() == "0" else control.with_sudo(("sudo", "-n"))


def _run_transport(
    run: RemoteRun, node: RunNode, transports: Mapping[str, Transport] | None
) -> Transport:
    if transports is not None and node.name in transports:
        return transports[node.name]
    return transport_for(node, run.known_hosts)


def down(
    run: RemoteRun, grace: float = 20.0, transports: Mapping[str, Transport] | None = None
) -> list[str]:
    """Stop the deployed engines (head first, then workers) and the proxy; the releases
    stay on the nodes. Returns the nodes where something could not be stopped."""
    paths, base = _run_control(run)
    leftovers = []
    for node in sorted(run.nodes, key=lambda n: n.role != "head"):
        t = _run_transport(run, node, transports)
        state = read_state(t, paths)
        if state is None:
            continue
        control = _login_control(t, base)
        if control.stop(t, state, grace):
            remove_state(t, paths)
        else:
            leftovers.append(node.name)
    if not leftovers:
        run_file(run.recipe_name).unlink(missing_ok=True)
    return leftovers


def status(
    run: RemoteRun,
    transports: Mapping[str, Transport] | None = None,
    http_transport: httpx.BaseTransport | None = None,
) -> ClusterStatus:
    """Per node: the state file, liveness, processes and memory of the engine; the API's
    health and metrics from here."""
    paths, base = _run_control(run)
    nodes = []
    reasons = []
    for node in run.nodes:
        t = _run_transport(run, node, transports)
        try:
            state = read_state(t, paths)
        except DesksideError as exc:
            reason = f"{node.name} ({node.role}): {exc.message}"
            reasons.append(reason)
            nodes.append(NodeStatus(node.name, node.role, 0, "unreachable", 0, 0, reason))
            continue
        if state is None:
            reason = f"{node.name} ({node.role}): nothing started by deskside runs there"
            reasons.append(reason)
            nodes.append(NodeStatus(node.name, node.role, 0, "exited", 0, 0, reason))
            continue
        pid = state.pid or 0
        control = _login_control(t, base)
        if control.alive(t, state):
            processes, rss = control.stats(t, state)
            nodes.append(NodeStatus(node.name, node.role, pid, "running", rss, processes, None))
            continue
        follower = LogFollower(node.name, state.log or run.unit)
        events = follower.feed(control.tail(t, state, 200).encode())
        last = next((e for e in reversed(events) if e.kind in FAILURE_EVENTS), None)
        reason = f"{node.name} ({node.role}): engine of release {state.release} exited" + (
            f" - {last.explanation}" if last else f"; last log line: {follower.last_line[:160]}"
        )
        reasons.append(reason)
        nodes.append(NodeStatus(node.name, node.role, pid, "exited", 0, 0, reason))
    with httpx.Client(transport=http_transport) as client:
        return cluster_status(run.recipe_name, run.api_url, run.ready_at, nodes, reasons, client)


@dataclass
class NodeLog:
    node: str
    transport: Transport
    control: Control
    state: RemoteNodeState
    offset: int = 0


def open_logs(
    run: RemoteRun, node: str | None, transports: Mapping[str, Transport] | None = None
) -> list[NodeLog]:
    """The engine logs of the run's nodes (all, or `node`)."""
    paths, base = _run_control(run)
    chosen = [n for n in run.nodes if node in (None, n.name)]
    if not chosen:
        raise UsageError(f"no node {node!r}", hint="nodes: " + ", ".join(n.name for n in run.nodes))
    out = []
    for n in chosen:
        t = _run_transport(run, n, transports)
        state = read_state(t, paths)
        if state is not None:
            out.append(NodeLog(n.name, t, _login_control(t, base), state))
    return out


def log_tail(log: NodeLog, lines: int) -> str:
    """The last `lines` of the node's engine log; `log_follow` goes on from its end."""
    _, log.offset, _ = log.control.poll(log.transport, log.state, 1 << 62)
    return log.control.tail(log.transport, log.state, lines)


def log_follow(log: NodeLog) -> str:
    _, log.offset, chunk = log.control.poll(log.transport, log.state, log.offset)
    return chunk.decode(errors="replace")
