"""Starting a replica set: every group brought up as a run of its own, by the runtime of its
nodes (this machine's namespaces, or its `ssh:` hosts: a deploy), then one LiteLLM proxy
with the rendered set configuration (`deskside.replicas.render`) where
`deskside.replicas.place` puts it, started from `run-proxy.sh` and recorded by pid, start
time and run tag. The groups start at once; when one fails, the others are stopped again
(`deskside.replicas.stop`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from deskside import secrets
from deskside.deploy.releases import private_dir
from deskside.errors import DesksideError
from deskside.facts.procs import RUN_TAG
from deskside.httpclient import METRICS, Limits
from deskside.httpclient import client as bounded_client
from deskside.planner.plan import Plan
from deskside.recipe.groups import group_recipes
from deskside.recipe.types import Recipe
from deskside.records.replica_set import ProxyProcess, SetRecord, load_set, save_set
from deskside.replicas.gate import gate_argv, gate_files, gate_state, set_drained
from deskside.replicas.place import proxy_place, proxy_transport
from deskside.replicas.proxy import engines_env_text, set_proxy
from deskside.replicas.render import proxy_files, proxy_url
from deskside.replicas.stop import down_set, proxy_alive, set_running
from deskside.replicas.upgrade import keep_running_recipe
from deskside.runtime import node_sh
from deskside.runtime.contract import require_contract, wait_proxy
from deskside.runtime.ops import stamp
from deskside.runtime.pipeline import Progress, UpOptions, UpReport, describe
from deskside.runtime.select import run_runtime_for
from deskside.runtime.services import litellm_program


@dataclass
class SetReport:
    recipe: str
    runtime: str
    dry_run: bool
    proxy_url: str | None
    served_names: list[str]
    groups: dict[str, UpReport] = field(default_factory=dict)
    ok: bool = False
    failed_stage: str | None = None  # "group <g>: <stage>", "proxy" or "contract"
    error: str | None = None
    hint: str | None = None
    exit_code: int = 0
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    stopped_groups: list[str] = field(default_factory=list)  # rolled back after a failure

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["groups"] = {g: r.to_dict() for g, r in self.groups.items()}
        return data


def _iso(when: datetime) -> str:
    return when.isoformat(timespec="seconds")


class SetStart:
    def __init__(
        self,
        recipe: Recipe,
        recipe_path: Path,
        plans: Mapping[str, Plan],
        options: UpOptions,
        say: Progress,
        now: Callable[[], datetime],
    ) -> None:
        self.recipe, self.recipe_path, self.plans = recipe, recipe_path, plans
        self.options, self.say, self.now = options, say, now
        self.groups = group_recipes(recipe)
        self.place = proxy_place(recipe)
        self.t = proxy_transport(recipe, options.known_hosts)
        url = proxy_url(recipe)
        self.began = False
        runtime: Literal["local", "ssh"] = (
            "ssh" if any(n.ssh is not None for n in recipe.cluster.nodes) else "local"
        )
        self.report = SetReport(
            recipe=recipe.name,
            runtime=runtime,
            dry_run=options.dry_run,
            proxy_url=url,
            served_names=list(recipe.model.all_names),
        )
        self.record = SetRecord(
            recipe=str(recipe_path),
            recipe_name=recipe.name,
            runtime=runtime,
            groups=list(self.groups),
            proxy_url=url,
            proxy_node=self.place.node,
            known_hosts=options.known_hosts,
            started_at=_iso(now()),
        )

    def run(self) -> SetReport:
        t0 = time.monotonic()
        try:
            self._preflight()
            if not self.options.dry_run:
                save_set(self.record)  # down finds every group, started or not
                self.began = True  # from here on a failure stops what this start began
            # the groups start at once: each has its own nodes (and, here, namespaces)
            with ThreadPoolExecutor(len(self.groups)) as pool:
                reports = list(pool.map(self._group, self.groups.items()))
            self.report.groups = dict(zip(self.groups, reports, strict=True))
            failed = next((g for g, r in self.report.groups.items() if not r.ok), None)
            if failed is not None:
                report = self.report.groups[failed]
                self.report.failed_stage = f"group {failed}: {report.failed_stage}"
                self.report.error, self.report.hint = report.error, report.hint
                self.report.exit_code = report.exit_code
                if self.began:
                    self._rollback()
                return self._fail(t0)
            if self.options.dry_run:
                self.report.notes.append(
                    f"then: LiteLLM on {self.report.proxy_url} over groups "
                    f"{', '.join(self.groups)}, and a completion per name through it"
                )
            else:
                self.report.failed_stage = "proxy"
                self._proxy()
                self.report.failed_stage = "contract"
                self._contract()
                self.report.failed_stage = None
                keep_running_recipe(self.recipe)  # what an upgrade rolls back to
            self.report.ok = True
        except DesksideError as exc:
            self.report.error, self.report.hint = describe(exc, hint=False), exc.hint
            self.report.exit_code = exc.exit_code
            if self.began:  # never for a refusal before the start (e.g. already up)
                self._rollback()
            return self._fail(t0)
        self.report.seconds = time.monotonic() - t0
        return self.report

    def _fail(self, t0: float) -> SetReport:
        self.report.ok = False
        self.report.exit_code = self.report.exit_code or 1
        self.report.seconds = time.monotonic() - t0
        return self.report

    def _preflight(self) -> None:
        current = load_set(self.recipe.name)
        if (
            current is not None
            and not self.options.dry_run
            and set_running(current, self.options.known_hosts)
        ):
            raise DesksideError(
                f"{self.recipe.name} is already up",
                hint=f"deskside status {self.recipe.name}, or deskside down first",
            )
        here = self.place.node is None
        if here and not self.options.dry_run and litellm_program(self.recipe) is None:
            raise DesksideError(
                "the replica set's proxy (LiteLLM) is not installed here",
                hint="install the pinned LiteLLM proxy: deskside proxy install",
            )

    def _group(self, item: tuple[str, Recipe]) -> UpReport:
        group, one = item
        self.say(f"group {group}: starting {one.name}")
        return run_runtime_for(one, self.options.known_hosts).up(
            one,
            self.recipe_path,
            replace(self.options, plan=self.plans[group]),
            progress=lambda msg: self.say(f"group {group}: {msg}"),
        )

    def _proxy(self) -> None:
        recipe, place, t = self.recipe, self.place, self.t
        for name, (text, mode) in proxy_files(recipe, self.plans, self.recipe_path.name).items():
            t.put(text.encode(), f"{place.folder}/{name}", mode)
        keys = {g: secrets.engine_api_key(one.name).reveal() for g, one in self.groups.items()}
        if place.node is None:  # this machine: deskside's own 0700 secrets folder
            if not recipe.proxy.master_key_file:
                secrets.proxy_master_key(recipe.name)  # made once, 0600
            secrets.write_secret_file(Path(place.engines_env), engines_env_text(keys))
        else:
            done = t.run(private_dir(place.secrets))
            if not done.ok:
                raise DesksideError(
                    f"{place.node}: cannot make the secrets folder {place.secrets}: "
                    f"{done.stderr.strip()}"
                )
            if not recipe.proxy.master_key_file:
                key = secrets.proxy_master_key(recipe.name).reveal()
                t.put((key + "\n").encode(), place.master_key, 0o600)
            t.put(engines_env_text(keys), place.engines_env, 0o600)
        started = self.now()
        program = (litellm_program(recipe) if place.node is None else None) or recipe.proxy.litellm
        self._gate(program)
        tag = f"{recipe.name}/proxy/{started:%Y%m%d%H%M%S}/proxy"
        log = f"{place.logs}/proxy-{stamp(started)}.log"
        proxy = set_proxy(
            recipe,
            self.groups,
            node=place.node or recipe.head.name,
            folder=place.folder,
            master_key=place.master_key,
            keys_file=place.engines_env,
            litellm=program,
        )
        where = place.node or "this machine"
        self.say(f"starting the LiteLLM proxy on {where}: {self.report.proxy_url}")
        pid = t.spawn(list(proxy.argv), env={RUN_TAG: tag}, log_path=log, cwd=proxy.workdir)
        start = node_sh.parse_proc_start(t.run(node_sh.proc_start(pid)).stdout)
        self.record.proxy = ProxyProcess(pid=pid, pid_start=start, run_tag=tag, log=log)
        save_set(self.record)
        assert self.report.proxy_url is not None
        wait_proxy(
            bounded_client(
                Limits(total=5, max_bytes=METRICS.max_bytes), self.options.http_transport
            ),
            self.report.proxy_url,
            self.options.timeout,
            self.options.poll_interval,
            log,
        )
        if not proxy_alive(self.record.proxy, t):
            tail = t.run(node_sh.tail_file(log, 12)).stdout.strip()
            raise DesksideError(f"the proxy exited while starting; last lines of {log}:\n{tail}")

    def _gate(self, litellm: str) -> None:
        """The drain gate between the proxy and the groups (`deskside.replicas.gate`)."""
        recipe, place, t = self.recipe, self.place, self.t
        for name, (text, mode) in gate_files(recipe, self.groups, place).items():
            t.put(text.encode(), f"{place.folder}/{name}", mode)
        set_drained(t, place, [])
        started = self.now()
        tag = f"{recipe.name}/proxy/{started:%Y%m%d%H%M%S}/gate"
        log = f"{place.logs}/gate-{stamp(started)}.log"
        self.say(f"starting the drain gate on {place.node or 'this machine'}")
        pid = t.spawn(gate_argv(place, litellm), env={RUN_TAG: tag}, log_path=log, cwd=place.folder)
        start = node_sh.parse_proc_start(t.run(node_sh.proc_start(pid)).stdout)
        self.record.gate = ProxyProcess(pid=pid, pid_start=start, run_tag=tag, log=log)
        save_set(self.record)
        deadline = time.monotonic() + 30
        while True:
            try:
                gate_state(recipe, self.options.http_transport)
                return
            except DesksideError:
                if time.monotonic() > deadline or not proxy_alive(self.record.gate, t):
                    tail = t.run(node_sh.tail_file(log, 12)).stdout.strip()
                    raise DesksideError(
                        f"the drain gate does not answer; last lines of {log}:\n{tail}"
                    ) from None
                time.sleep(0.2)

    def _contract(self) -> None:
        if self.place.node is None:
            key = secrets.read_secret(Path(self.place.master_key), secrets.PROXY_MASTER_KEY)
        elif self.recipe.proxy.master_key_file:
            raw = self.t.get(self.recipe.proxy.master_key_file).decode().strip()
            key = secrets.Secret(secrets.PROXY_MASTER_KEY, raw)
        else:
            key = secrets.proxy_master_key(self.recipe.name)
        client = bounded_client(
            Limits(total=self.options.contract_timeout, max_bytes=METRICS.max_bytes),
            self.options.http_transport,
            headers={"Authorization": f"Bearer {key.reveal()}"},
        )
        assert self.report.proxy_url is not None
        self.report.notes.append(
            require_contract(client, self.report.proxy_url, self.report.served_names)
        )

    def _rollback(self) -> None:
        self.say("stopping what this start began")
        record = load_set(self.recipe.name) or self.record
        leftovers = down_set(record, grace=self.options.grace)
        self.report.stopped_groups = [g for g, r in self.report.groups.items() if r.ok]
        if leftovers:
            self.report.notes.append("could not stop: " + "; ".join(leftovers))


def up_set(
    recipe: Recipe,
    recipe_path: Path,
    plans: Mapping[str, Plan],
    options: UpOptions,
    progress: Progress | None = None,
    now: Callable[[], datetime] | None = None,
) -> SetReport:
    """Start the set (see the module docstring). Never raises for a failed step: the report
    says what failed."""
    start = SetStart(
        recipe,
        recipe_path,
        plans,
        options,
        progress or (lambda _msg: None),
        now or (lambda: datetime.now(UTC)),
    )
    return start.run()


__all__ = ["SetReport", "SetStart", "up_set"]
