"""The runtime for nodes on this machine: processes, or processes in network namespaces
(`netns:`) joined by a bridge. Nothing is pushed: the engines run from the model folder in
place, each node's state and log under `$DESKSIDE_HOME/runs/<recipe>/nodes/<node>/`.

Stages: preflight (the plan fits, the model exists, the run is not up already, the enabled
services' programs exist, the nodes match: `deskside.deploy.drift`) -> network (namespaces,
bridge) -> start (workers first, then the head) -> ready (/health, every alias in /v1/models,
the KV line) -> services (the proxy, its drain gate (`deskside.runtime.engine_gate`) and the
monitoring enabled, each answering) -> contract (a completion per name, through the proxy
when there is one). A failure from `network` on stops everything this start began. With a
proxy the engine answers /v1 only with its own key (from <secrets>/<recipe>/engine.env)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from deskside import localnet, secrets
from deskside.deploy.drift import must_match, up_refusal
from deskside.engine.launch import NodeLaunch, Site, launches
from deskside.engine.services import Service, services
from deskside.errors import DesksideError, PlanRefused
from deskside.facts.base import gather
from deskside.facts.drift import refusal_text
from deskside.facts.shm import ShmScan
from deskside.facts.shm import shm as shm_fact
from deskside.httpclient import METRICS, Limits
from deskside.httpclient import client as bounded_client
from deskside.layout import NodeLayout
from deskside.planner.inputs import plan_recipe
from deskside.planner.plan import Plan
from deskside.recipe.types import Recipe
from deskside.records import where
from deskside.records.node import NodeState
from deskside.records.run import LocalNetwork, RunNode, RunRecord, load_run, save_run
from deskside.runtime import node_sh
from deskside.runtime.contract import require_contract
from deskside.runtime.control import Control, control_kind, watched
from deskside.runtime.engine_gate import with_gate, write_here
from deskside.runtime.nodes import RunCommands, any_running, down
from deskside.runtime.ops import Executed, Local, Op, Run, Spawn, stamp
from deskside.runtime.phases import cluster_phases, first_token_at, launch_lock, timed_start
from deskside.runtime.pipeline import (
    Outcome,
    Progress,
    RollbackRecord,
    Stage,
    UpOptions,
    UpReport,
    run_stages,
)
from deskside.runtime.ready import wait_ready
from deskside.runtime.service_start import wait_services, write_service_files
from deskside.runtime.services import local_site, missing, with_env_file
from deskside.runtime.transports import HERE
from deskside.transport.base import Transport
from deskside.transport.local import LocalTransport


def _iso(when: datetime) -> str:
    return when.isoformat(timespec="seconds")


class LocalStart:
    """One `up` of a recipe on this machine (see the module docstring)."""

    def __init__(
        self,
        recipe: Recipe,
        recipe_path: Path,
        plan: Plan,
        options: UpOptions,
        say: Progress,
        python: str,
        now: Callable[[], datetime],
        transports: Mapping[str, Transport] | None = None,
    ) -> None:
        self.recipe, self.recipe_path, self.plan = recipe, recipe_path, plan
        self.options, self.say, self.now = options, say, now
        run_dir = where.run_dir(recipe.name)
        self.run_dir = run_dir
        self.layouts = {
            n.name: NodeLayout.at(str(where.local_node_dir(recipe.name, n.name)), recipe.name)
            for n in recipe.cluster.nodes
        }
        self.site = Site.this_machine(recipe, recipe_path, python, str(run_dir))
        self.launches = launches(recipe, plan, self.site)
        head = next(la for la in self.launches if la.role == "head")
        assert head.probe_url is not None
        self.api_url = head.probe_url
        self.net = localnet.local_net(recipe)
        self.transports: dict[str, Transport] = dict(transports or {})
        self.transports.setdefault(HERE, LocalTransport())
        for n in recipe.cluster.nodes:
            self.transports.setdefault(n.name, LocalTransport(netns=n.netns))
        self.kind = control_kind(recipe.runtime.systemd, recipe.runtime.kind)
        self.executed = Executed()
        self.report = UpReport(
            recipe=recipe.name,
            runtime="local",
            dry_run=options.dry_run,
            api_url=self.api_url,
            proxy_url=None,
            served_names=list(recipe.model.all_names),
            planned_kv_cache_line=plan.kv_cache_line,
        )
        self.record = RunRecord(
            recipe=str(recipe_path),
            recipe_name=recipe.name,
            runtime="local",
            control="process",
            runtime_kind="native",
            unit=self.layouts[recipe.head.name].unit_name,
            compose_project=self.layouts[recipe.head.name].compose_project,
            api_url=self.api_url,
            proxy_url=None,
            served_names=list(recipe.model.all_names),
            planned_kv_cache_tokens=plan.kv_cache_tokens,
            planned_kv_cache_line=plan.kv_cache_line,
            started_at=_iso(now()),
            replica_set=recipe.replica_set,
            engine_keyed=recipe.engine_keyed,
            engine_overlay=options.engine_overlay,
            nodes=[
                RunNode(
                    name=la.node,
                    role=la.role,
                    node_rank=la.node_rank,
                    address=next(n.address for n in recipe.cluster.nodes if n.name == la.node),
                    ssh=None,
                    netns=next(n.netns for n in recipe.cluster.nodes if n.name == la.node),
                    recipe_dir=self.layouts[la.node].recipe_dir,
                )
                for la in sorted(self.launches, key=lambda la: la.node_rank)
            ],
        )
        self.existing: set[str] = set()
        self.t0 = self.spawned_at = time.time()  # set again by the start stage
        self.python = python
        self.skip: list[str] = []  # enabled services left out (options.skip_missing_services)
        self.service_site = local_site(recipe, run_dir, python)
        self.service_table = services(recipe, self.service_site)
        if recipe.runs_proxy:
            port = recipe.proxy.port
            self.report.proxy_url = self.record.proxy_url = f"http://{recipe.head.address}:{port}"

    # -- stages

    def preflight(self) -> Outcome:
        recipe = self.recipe
        if any(n.ssh is not None for n in recipe.cluster.nodes):
            raise DesksideError(
                "this recipe has ssh: nodes; the runtime on this machine runs local nodes only"
            )
        if self.kind != "process":
            self.report.notes.append(
                f"runtime.kind {recipe.runtime.kind} / runtime.systemd "
                f"{str(recipe.runtime.systemd).lower()} apply to deployed nodes; on this "
                "machine the engines run as processes started by deskside"
            )
        if not self.plan.fits:
            raise PlanRefused(
                f"deskside refuses to launch: {self.plan.refusal}",
                hint="lower max_model_len (see `deskside plan`) or give the KV cache more memory",
            )
        if recipe.model.path and not (Path(self.site.model) / "config.json").is_file():
            raise DesksideError(
                f"model folder {self.site.model} has no config.json",
                hint=f"create it: deskside model tiny --arch deepseek-v3 --out {self.site.model}",
            )
        for name, hint in missing(recipe, self.service_table):
            if not self.options.skip_missing_services:
                raise DesksideError(f"{name} is enabled but not installed here", hint=hint)
            self.skip.append(name)
            if name == "proxy":
                self.report.proxy_url = self.record.proxy_url = None
            self.report.notes.append(f"{name} not started: it is not installed ({hint})")
        current = load_run(recipe.name)
        if current is not None and any_running(current, self.transports):
            raise DesksideError(
                f"{recipe.name} is already up", hint="deskside status, or deskside down first"
            )
        if self.net is not None and not self.options.dry_run:
            ok, why = localnet.can_create()
            if not ok:
                raise DesksideError(
                    f"cannot create the recipe's network namespaces: {why}",
                    hint="run as root with iproute2 installed, or remove netns: from the nodes",
                )
        if self.net is not None and localnet.can_create()[0]:
            self.existing = localnet.namespaces_without_stale_links(self.transports[HERE], self.net)
        before = gather(self.transports[HERE], shm_fact()).result(shm_fact())
        if isinstance(before, ShmScan):
            self.record.shm_before = [e.name for e in before.entries]
            self.record.shm_inodes = [f"{e.dev}:{e.ino}" for e in before.entries]
        else:
            self.record.shm_before = self.record.shm_inodes = []
        # namespaces share this machine's files: read those nodes in the root namespace
        here = {n.name: self.transports[HERE if n.netns else n.name] for n in recipe.cluster.nodes}
        found = must_match(recipe, self.recipe_path, here, site=self.site)
        problems, notes = up_refusal(found, self.recipe_path)
        self.report.notes += notes
        if problems:
            raise DesksideError(*refusal_text(problems))
        if recipe.model.repo and len(recipe.cluster.nodes) > 1:
            self.report.notes.append(
                "every node here reads this machine's Hugging Face cache: one copy of the "
                "model serves them all (no model sync needed)"
            )
        where = "network namespaces" if self.net else "processes"
        return Outcome(f"{len(recipe.cluster.nodes)} nodes as {where} on this machine")

    def network(self) -> Outcome:
        net = self.net
        if net is None:
            return Outcome("no network namespaces", skipped=True)
        ours = {ns for ns, *_ in net.namespaces}
        cmds = localnet.setup_commands(net, self.existing & ours)
        self.record.network = LocalNetwork(bridge=net.bridge, namespaces=sorted(ours), created=[])

        def created(done: Executed) -> None:
            assert self.record.network is not None
            self.record.network.created = [
                op.argv[3]
                for op in done.done
                if isinstance(op, Run) and op.argv[:3] == ("ip", "netns", "add")
            ]

        ops: list[Op] = [Run(HERE, tuple(c), "creating network namespaces") for c in cmds]
        detail = f"bridge {net.bridge}, namespaces {', '.join(sorted(ours))}"
        return Outcome(detail, ops, after=created, undo=created)

    def _start_ops(self, la: NodeLaunch) -> list[Op]:
        layout = self.layouts[la.node]
        started = self.now()
        state = NodeState(
            recipe=self.recipe.name,
            node=la.node,
            role=la.role,
            node_rank=la.node_rank,
            release=None,
            control="process",
            started_at=_iso(started),
        )
        control = Control(kind="process", runtime="native", layout=layout)
        argv = la.argv
        if la.role == "head" and self._behind_proxy:
            argv = with_env_file(argv, self.service_site.engine_env)
        return control.start_ops(
            la.node,
            state,
            argv=argv,
            env=la.env,
            cwd=la.workdir,
            log=layout.engine_log("engine", stamp(started)),
            what=f"starting {la.role} {la.node} (node rank {la.node_rank})",
        )

    @property
    def _behind_proxy(self) -> bool:
        return self.recipe.engine_keyed and "proxy" not in self.skip

    def _engine_auth(self) -> dict[str, str] | None:
        return secrets.engine_auth(self.recipe.name, self._behind_proxy)

    def start(self) -> Outcome:
        self.t0 = time.time()  # the start-up phases count from here
        ops: list[Op] = [Local(f"record the run in {where.run_dir(self.recipe.name)}", self._save)]
        if self._behind_proxy:
            key = self.service_site.engine_env
            ops.insert(0, Local(f"the engine key in {key}", self._engine_key))
        for la in self.launches:
            ops += self._start_ops(la)

        def started(done: Executed) -> None:
            self.spawned_at = time.time()
            self.report.nodes = [s.model_dump(mode="json") for s in done.states.values()]

        return Outcome(f"{len(self.launches)} nodes started, workers first", ops, after=started)

    def ready(self) -> Outcome:
        if self.options.dry_run:
            head = self.recipe.head.name
            check = f"{self.api_url}: /health, /v1/models lists every name, the KV line logged"
            return Outcome("", planned=[(head, check)])
        nodes = []
        for la in self.launches:
            state = self.executed.states[la.node]
            control = Control(kind="process", runtime="native", layout=self.layouts[la.node])
            where = state.log or la.node
            nodes.append(watched(la.node, state, control, self.transports[la.node], where))
        found = wait_ready(
            api_url=self.api_url,
            served_names=self.report.served_names,
            planned_kv_cache_tokens=self.plan.kv_cache_tokens,
            nodes=nodes,
            timeout=self.options.timeout,
            say=self.say,
            interval=self.options.poll_interval,
            client=bounded_client(
                Limits(total=10, max_bytes=METRICS.max_bytes),
                self.options.http_transport,
                headers=self._engine_auth(),
            ),
        )
        self.report.logged_kv_cache_line = found.logged_kv_cache_line
        self.record.logged_kv_cache_line = found.logged_kv_cache_line
        self.record.ready_at = _iso(self.now())
        self.record.startup = timed_start(
            self.recipe.name,
            self.options.start_kind,
            launch_lock(self.launches),
            self.record.started_at,
            cluster_phases(
                t0=self.t0,
                process_started=self.spawned_at,
                seen=found.seen,
                head=self.recipe.head.name,
                health=found.health_at,
                first_token=first_token_at(
                    self.api_url,
                    self.report.served_names[0],
                    self._engine_auth(),
                    self.options.http_transport,
                ),
            ),
            self.say,
        )
        self.report.startup = self.record.startup.model_dump(mode="json")
        self._save()
        return Outcome(f"API {self.api_url} serves {', '.join(self.report.served_names)}")

    def services(self) -> Outcome:
        # natively, every service with a command line (Grafana runs only in its image)
        launches = [s for s in self.service_table if s.argv and s.name not in self.skip]
        launches = with_gate(self.recipe, launches, self.service_site, self._behind_proxy)
        if not launches:
            return Outcome("no proxy or monitoring enabled", skipped=True)
        started = self.now()
        where = self.service_site.cluster
        ops: list[Op] = [Local(f"write the services' files in {where}", self._files)]
        for sl in launches:
            layout = self.layouts[sl.node]
            tag = f"{self.recipe.name}/{sl.node}/{started:%Y%m%d%H%M%S}/{sl.name}"
            ops.append(
                Spawn(
                    sl.node,
                    sl.argv,
                    ((node_sh.RUN_TAG, tag),),
                    layout.service_log("local", stamp(started), sl.name),
                    sl.workdir,
                    f"{sl.what} on {sl.node}",
                    layout,
                    sl.name,  # type: ignore[arg-type]  # with a command line: a ServiceName
                    None,
                )
            )
        names = ", ".join(f"{sl.name}@{sl.node}" for sl in launches)
        if self.options.dry_run:
            return Outcome(names, ops, planned=[(sl.node, sl.ready_url) for sl in launches])
        return Outcome(names, ops, after=lambda done: self._services_ready(launches, done))

    def _services_ready(self, launches: list[Service], done: Executed) -> None:
        wait_services(
            launches,
            done,
            self.transports,
            self.layouts,
            timeout=self.options.timeout,
            interval=self.options.poll_interval,
            say=self.say,
            http_transport=self.options.http_transport,
        )

    def contract(self) -> Outcome:
        via = self.report.proxy_url if self._behind_proxy and self.report.proxy_url else None
        if self.options.dry_run:
            names = ", ".join(self.report.served_names)
            return Outcome(
                "",
                planned=[
                    (
                        self.recipe.head.name,
                        f"a completion through {names} via {via or self.api_url}",
                    )
                ],
            )
        headers = self._engine_auth()
        if via is not None:
            key = secrets.read_secret(
                secrets.master_key_here(self.recipe), secrets.PROXY_MASTER_KEY
            )
            headers = {"Authorization": f"Bearer {key.reveal()}"}
        client = bounded_client(
            Limits(total=self.options.contract_timeout, max_bytes=METRICS.max_bytes),
            self.options.http_transport,
            headers=headers,
        )
        return Outcome(require_contract(client, via or self.api_url, self.report.served_names))

    # -- bookkeeping

    def _save(self) -> None:
        save_run(self.record)

    def _engine_key(self) -> None:
        secrets.engine_api_key(self.recipe.name)  # made once, 0600

    def _files(self) -> None:
        write_service_files(self.recipe, self.recipe_path, self.plan, self.service_site)
        write_here(self.recipe, self.service_site, self.api_url, self._behind_proxy)
        if self._behind_proxy and not self.recipe.proxy.master_key_file:
            secrets.proxy_master_key(self.recipe.name)  # made once, 0600

    def rollback(self) -> RollbackRecord:
        t0 = time.monotonic()
        self.say("stopping what this start began")
        leftovers = down(self.record, self.options.grace, self.transports)
        seconds = time.monotonic() - t0
        if leftovers:
            return RollbackRecord(
                {}, False, seconds, "could not stop everything", ", ".join(leftovers), seconds
            )
        return RollbackRecord(
            {}, True, seconds, "everything this start began is stopped", None, seconds
        )

    def stages(self) -> list[Stage]:
        return [
            Stage("preflight", self.preflight),
            Stage("network", self.network, rolls_back=True),
            Stage("start", self.start, rolls_back=True),
            Stage("ready", self.ready, rolls_back=True),
            Stage("services", self.services, rolls_back=True),
            Stage("contract", self.contract, rolls_back=True),
        ]


def start_here(
    recipe: Recipe,
    recipe_path: Path,
    plan: Plan,
    options: UpOptions | None = None,
    *,
    transports: Mapping[str, Transport] | None = None,
    progress: Progress | None = None,
    python: str | None = None,
    now: Callable[[], datetime] | None = None,
) -> UpReport:
    """Run the stages (see the module docstring). Never raises for a failed stage: the
    report says what failed. `transports` (tests) replace this machine's, by node name and
    `local` for the root namespace."""
    options = options or UpOptions()
    say = progress or (lambda _msg: None)
    start = LocalStart(
        recipe,
        recipe_path,
        plan,
        options,
        say,
        python or sys.executable,
        now or (lambda: datetime.now(UTC)),
        transports,
    )
    run_stages(
        start.stages(),
        start.report,
        start.transports,
        start.executed,
        dry_run=options.dry_run,
        say=say,
        rollback=start.rollback,
    )
    return start.report


class LocalRuntime(RunCommands):
    """Nodes on this machine (processes or network namespaces)."""

    name = "local"

    def up(
        self,
        recipe: Recipe,
        recipe_path: Path,
        options: UpOptions,
        progress: Progress | None = None,
    ) -> UpReport:
        plan = options.plan or plan_recipe(recipe, recipe_path)
        return start_here(recipe, recipe_path, plan, options, progress=progress)
