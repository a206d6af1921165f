"""`deskside upgrade RECIPE` for a replica set: one group at a time is

    drained    at the set's drain gate (`deskside.replicas.gate`): new requests go to the
               other groups, the ones it runs finish (waited for, up to replicas.timeout)
    upgraded   stopped, then started from the recipe as it is now (a new vLLM release,
               image, model revision or settings), by its own runtime: readiness, the
               served names, the start-up phases
    proven     the alias contract through its engine (a completion per name), and a short
               bench (BENCH_REQUESTS chat completions of BENCH_TOKENS tokens, one at a time)
               compared with the group's own result on the same workload measured just
               before its drain: it fails when a request fails or the median latency is
               over BENCH_TOLERANCE slower
    put back   open again at the gate

A group that fails its proof is stopped and started again from the recipe the set was
running (kept at its start: `runs/<set>/running-recipe.json`), put back, and the upgrade
stops there. What a set shares (its groups, nodes, served names, ports, proxy) must stay as
it is: an upgrade changes the engines, never the set's shape.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol, TypeVar

import httpx

from deskside import localnet, secrets
from deskside.errors import DesksideError, PlanRefused
from deskside.httpclient import PROBE, Limits
from deskside.httpclient import client as bounded_client
from deskside.planner.plan import Plan
from deskside.recipe.groups import group_recipes
from deskside.recipe.types import Recipe
from deskside.records.replica_set import SetRecord, load_set
from deskside.records.where import run_dir
from deskside.records.write import write_here
from deskside.replicas.gate import in_flight, set_drained
from deskside.replicas.place import ProxyPlace, proxy_place, recorded_transport
from deskside.replicas.plans import plan_set, set_refusal
from deskside.replicas.proxy import backend_url
from deskside.replicas.stop import down_set
from deskside.runtime.pipeline import UpOptions
from deskside.runtime.select import run_runtime_for
from deskside.smallfile import read_small_file
from deskside.transport.base import Transport
from deskside.transport.local import LocalTransport

RUNNING_RECIPE = "running-recipe.json"
BENCH_REQUESTS = 8
BENCH_TOKENS = 16
BENCH_TOLERANCE = 0.5  # the median latency may grow by this share at most

Say = Callable[[str], None]


def running_recipe_file(name: str) -> Path:
    return run_dir(name) / RUNNING_RECIPE


def keep_running_recipe(recipe: Recipe) -> None:
    """Remember the recipe the set now runs (the one an upgrade rolls back to)."""
    write_here(running_recipe_file(recipe.name), recipe)


def running_recipe(name: str) -> Recipe | None:
    try:
        data = read_small_file(running_recipe_file(name), 1 << 20, follow=False)
    except (OSError, DesksideError):
        return None
    try:
        return Recipe.model_validate_json(data)
    except ValueError:
        return None


@dataclass
class BenchResult:
    workload: str
    requests: int
    failed: int
    median_s: float | None


@dataclass
class GroupStep:
    group: str
    ok: bool = False
    drain_seconds: float = 0.0  # until the group ran no request
    upgrade_seconds: float = 0.0  # stop and start, ready
    before: BenchResult | None = None
    after: BenchResult | None = None
    startup: dict[str, object] | None = None
    error: str | None = None
    rolled_back: bool = False


@dataclass
class UpgradeReport:
    recipe: str
    groups: list[GroupStep] = field(default_factory=list)
    ok: bool = False
    seconds: float = 0.0
    error: str | None = None
    hint: str | None = None
    exit_code: int = 0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class Outcome(Protocol):
    """What an upgrade's report says of how it ended."""

    ok: bool
    seconds: float
    error: str | None
    hint: str | None
    exit_code: int


R = TypeVar("R", bound=Outcome)


def run_reported(report: R, steps: Callable[[], None]) -> R:
    """Run `steps` and write how they ended into `report`: ok, or the DesksideError's
    message, hint and exit code (1 when it names none); and the seconds they took."""
    t0 = time.monotonic()
    try:
        steps()
        report.ok = True
    except DesksideError as exc:
        report.error, report.hint = exc.message, exc.hint
        report.exit_code = exc.exit_code or 1
    report.seconds = round(time.monotonic() - t0, 2)
    return report


def _bench_body(model: str) -> dict[str, object]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Count from one to twenty."}],
        "max_tokens": BENCH_TOKENS,
        "ignore_eos": True,
    }


def _timed(client: httpx.Client, url: str, body: dict[str, object]) -> float | None:
    """One bench request's seconds (None: it failed)."""
    t0 = time.monotonic()
    try:
        ok = client.post(f"{url}/v1/chat/completions", json=body).status_code == 200
    except httpx.HTTPError:
        ok = False
    return time.monotonic() - t0 if ok else None


def _result(workload: str, times: list[float | None]) -> BenchResult:
    done = [t for t in times if t is not None]
    median = statistics.median(done) if done else None
    return BenchResult(workload, len(times), len(times) - len(done), median)


def short_bench(
    url: str, key: str | None, model: str, transport: httpx.BaseTransport | None = None
) -> BenchResult:
    """BENCH_REQUESTS chat completions of BENCH_TOKENS tokens, one at a time, straight to a
    group's engine."""
    headers = {"Authorization": f"Bearer {key}"} if key else None
    body = _bench_body(model)
    with bounded_client(Limits(120, PROBE.max_bytes), transport, headers=headers) as client:
        times = [_timed(client, url, body) for _ in range(BENCH_REQUESTS)]
    return _result(f"{BENCH_REQUESTS} x chat, {BENCH_TOKENS} tokens, one at a time", times)


def bench_verdict(
    before: BenchResult, after: BenchResult, baseline: str = "the group's {ms} before the upgrade"
) -> str | None:
    """Why `after` fails against `before` (None: it passes); `baseline` says what `before`
    is ({ms}: its median)."""
    if after.failed:
        return f"{after.failed} of {after.requests} bench requests failed"
    if before.median_s is None or after.median_s is None:
        return None
    if (
        after.median_s > before.median_s * (1 + BENCH_TOLERANCE)
        and after.median_s - before.median_s > 0.05
    ):
        return (
            f"median latency {after.median_s * 1000:.0f} ms, "
            f"{after.median_s / before.median_s - 1:.0%} over "
            + baseline.format(ms=f"{before.median_s * 1000:.0f} ms")
            + f" ({before.workload})"
        )
    return None


def same_shape(old: Recipe, new: Recipe) -> str | None:
    """What of the set's shape the new recipe changes (None: nothing)."""
    checks = [
        (
            "the groups",
            [g.model_dump() for g in old.replicas.groups] if old.replicas else None,
            [g.model_dump() for g in new.replicas.groups] if new.replicas else None,
        ),
        ("the nodes", old.cluster.nodes, new.cluster.nodes),
        ("the served names", old.model.all_names, new.model.all_names),
        ("engine.port", old.engine.port, new.engine.port),
        ("the proxy", old.proxy, new.proxy),
    ]
    for what, a, b in checks:
        if a != b:
            return what
    return None


class SetUpgrade:
    def __init__(self, recipe: Recipe, recipe_path: Path, options: UpOptions, say: Say) -> None:
        self.recipe, self.recipe_path, self.options, self.say = recipe, recipe_path, options, say
        self.report = UpgradeReport(recipe=recipe.name)

    def run(self) -> UpgradeReport:
        return run_reported(self.report, self._run)

    def _run(self) -> None:
        recipe = self.recipe
        record = load_set(recipe.name)
        if record is None:
            raise DesksideError(
                f"{recipe.name} is not up", hint=f"start it first: deskside up {self.recipe_path}"
            )
        old = running_recipe(recipe.name)
        if old is None:
            raise DesksideError(
                f"{recipe.name} has no record of the recipe it runs (it was started by an older "
                "deskside)",
                hint="restart it once with deskside down and deskside up",
            )
        if (what := same_shape(old, recipe)) is not None:
            raise DesksideError(
                f"the recipe changes {what} of {recipe.name}: an upgrade changes the engines, "
                "never the set's shape",
                hint="deskside down, then deskside up with the new recipe",
            )
        plans = plan_set(recipe, self.recipe_path)
        if (refusal := set_refusal(plans)) is not None:
            raise PlanRefused(f"deskside refuses the upgrade: {refusal}")
        old_plans = plan_set(old, self.recipe_path)
        t = recorded_transport(record)
        if t is None:
            raise DesksideError(f"{recipe.name}: the drain gate's host is not reachable")
        place = proxy_place(recipe)
        new_groups, old_groups = group_recipes(recipe), group_recipes(old)
        for group in record.groups:
            step = GroupStep(group)
            self.report.groups.append(step)
            self._group(record, group, step, t, place, new_groups[group], plans[group])
            if not step.ok:
                self._roll_back(record, group, step, t, place, old_groups[group], old_plans[group])
                raise DesksideError(
                    f"group {group} failed its proof: {step.error}; it runs the previous "
                    "recipe again and the upgrade stopped there",
                    hint="the groups before it run the new recipe: fix the recipe and run "
                    "deskside upgrade again",
                )
        keep_running_recipe(recipe)

    def _group(
        self,
        record: SetRecord,
        group: str,
        step: GroupStep,
        t: Transport,
        place: ProxyPlace,
        one: Recipe,
        plan: Plan,
    ) -> None:
        def say(message: str) -> None:
            self.say(f"group {group}: {message}")

        url = backend_url(one)
        key = secrets.engine_api_key(one.name).reveal()
        name = one.model.served_name
        step.before = short_bench(url, key, name, self.options.http_transport)
        say(f"bench before: median {_ms(step.before.median_s)} ({step.before.workload})")
        t0 = time.monotonic()
        set_drained(t, place, [group])
        say("drained at the gate: new requests go to the other groups")
        deadline = t0 + (self.recipe.replicas.timeout if self.recipe.replicas else 60) + 30
        while (n := in_flight(self.recipe, group, self.options.http_transport)) > 0:
            if time.monotonic() > deadline:
                set_drained(t, place, [])
                raise DesksideError(f"group {group} still runs {n} request(s) after its drain")
            time.sleep(0.2)
        step.drain_seconds = round(time.monotonic() - t0, 2)
        say(f"no request runs on it after {step.drain_seconds:.1f} s")
        t1 = time.monotonic()
        leftovers = down_set(record, self.options.grace, group)
        if leftovers:
            step.error = "could not stop: " + "; ".join(leftovers)
            return
        links_gone(one)
        options = replace(self.options, plan=plan, start_kind="upgrade")
        report = run_runtime_for(one, self.options.known_hosts).up(
            one, self.recipe_path, options, progress=say
        )
        step.upgrade_seconds = round(time.monotonic() - t1, 2)
        step.startup = report.startup
        if not report.ok:
            step.error = f"{report.failed_stage}: {report.error}"
            return
        step.after = short_bench(url, key, name, self.options.http_transport)
        say(f"bench after: median {_ms(step.after.median_s)}")
        why = bench_verdict(step.before, step.after)
        if why is not None:
            step.error = why
            return
        set_drained(t, place, [])
        say("proven (ready, every name answers, the bench holds): back in the rotation")
        step.ok = True

    def _roll_back(
        self,
        record: SetRecord,
        group: str,
        step: GroupStep,
        t: Transport,
        place: ProxyPlace,
        old: Recipe,
        plan: Plan,
    ) -> None:
        def say(message: str) -> None:
            self.say(f"group {group}: {message}")

        say(f"failed: {step.error}; rolling back to the previous recipe")
        down_set(record, self.options.grace, group)
        links_gone(old)
        report = run_runtime_for(old, self.options.known_hosts).up(
            old, self.recipe_path, replace(self.options, plan=plan), progress=say
        )
        step.rolled_back = report.ok
        if report.ok:
            set_drained(t, place, [])
            say("rolled back and back in the rotation")
        else:
            say(
                f"the rollback failed too ({report.failed_stage}: {report.error}); it stays drained"
            )


def links_gone(one: Recipe, seconds: float = 30.0) -> None:
    """Until the host sides of a stopped group's namespaces are gone: the kernel removes a
    deleted namespace's veth pair once the namespace is released, a moment after `down`
    (the start that follows refuses a link left without its namespace)."""
    net = localnet.local_net(one)
    if net is None or not localnet.can_create()[0]:
        return
    here = LocalTransport()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        listed = here.run(["ip", "-o", "link", "show"])
        existing = localnet.existing_namespaces(here)
        if not localnet.stale_links(net, existing, localnet.link_names(listed.stdout)):
            return
        time.sleep(0.2)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def upgrade_set(
    recipe: Recipe, recipe_path: Path, options: UpOptions, progress: Say | None = None
) -> UpgradeReport:
    """Upgrade the running set group by group (see the module docstring). Never raises for
    a failed step: the report says what failed."""
    return SetUpgrade(recipe, recipe_path, options, progress or (lambda _m: None)).run()


__all__ = [
    "BENCH_REQUESTS",
    "BENCH_TOLERANCE",
    "UpgradeReport",
    "bench_verdict",
    "keep_running_recipe",
    "running_recipe",
    "same_shape",
    "short_bench",
    "upgrade_set",
]
