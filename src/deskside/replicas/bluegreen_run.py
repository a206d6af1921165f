"""The blue/green restart of a one-group recipe run on this machine behind its proxy (the
memory decision and the refusals: `deskside.replicas.bluegreen`; the gate and the slots:
`deskside.runtime.engine_gate`):

    bench      the running copy ("blue") under the live load, straight at its engine (the
               set's short bench)
    green      the new recipe started on the slot blue does not use (its engine and
               rendezvous ports), workers first, by the runtime's own launches; its state
               kept apart (`logs/green` of each node) while blue runs
    switched   ready (/health, every name in /v1/models, the KV line) and a completion
               per served name: then blue's slot is drained at the gate, new requests go
               to green and blue's running ones finish (waited for); blue keeps running
    proven     the short bench on green, now under the live load with blue idle, no
               slower than blue's (`bench_verdict`): both copies share the host, so green
               is benched where blue was, not beside a busy blue
    recorded   blue's engines stopped; each node's state is green's engine with the
               services blue's recorded (the proxy, the gate, ...), the run record's API
               URL green's, and green's port as the run's engine overlay (a restart in
               place starts the engines again there): status, logs, down and restart act
               on green; Prometheus's engine target file names green's port (it scrapes
               green from its next refresh)

A failed start stops green and leaves blue serving (nothing was switched); a failed proof
switches back first (green's slot drained: new requests go to blue again, green's running
ones finish), then stops green.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

from deskside import secrets
from deskside.engine.launch import Site, launches
from deskside.errors import DesksideError
from deskside.httpclient import METRICS, PROBE, Limits
from deskside.httpclient import client as bounded_client
from deskside.layout import NodeLayout
from deskside.planner.plan import Plan
from deskside.recipe.types import Recipe
from deskside.records.node import NodeState, read_state, remove_state, write_state
from deskside.records.run import RunRecord, save_run
from deskside.records.where import run_dir
from deskside.render import prometheus
from deskside.replicas.upgrade import BenchResult, bench_verdict, run_reported, short_bench
from deskside.runtime import engine_gate as single_gate
from deskside.runtime.contract import require_contract
from deskside.runtime.control import Control, watched
from deskside.runtime.ops import Executed, Op, execute, stamp
from deskside.runtime.pipeline import UpOptions
from deskside.runtime.ready import wait_ready
from deskside.runtime.services import local_site, with_env_file
from deskside.safefs import write_file
from deskside.transport.base import Transport
from deskside.transport.local import LocalTransport

Say = Callable[[str], None]
GREEN = "green"


@dataclass
class BlueGreenReport:
    recipe: str
    ok: bool = False
    blue: str = ""  # the API URL that served before
    green: str = ""  # the API URL that serves after (when ok)
    before: BenchResult | None = None  # blue, under the live load, before green started
    after: BenchResult | None = None
    start_seconds: float = 0.0  # green started and ready
    drain_seconds: float = 0.0  # until blue ran no request
    switched_back: bool = False  # green failed its proof after the switch
    seconds: float = 0.0
    error: str | None = None
    hint: str | None = None
    exit_code: int = 0

    def to_dict(self) -> dict[str, object]:
        return {"kind": "blue/green"} | asdict(self)


def green_recipe(recipe: Recipe, slot: str, port: int) -> Recipe:
    """The recipe on `slot`'s engine `port` and a rendezvous port of its own."""
    fabric = recipe.cluster.fabric.model_copy(
        update={"master_port": single_gate.green_master_port(recipe, slot)}
    )
    return recipe.model_copy(
        update={
            "engine": recipe.engine.model_copy(update={"port": port}),
            "cluster": recipe.cluster.model_copy(update={"fabric": fabric}),
        }
    )


def green_layout(layout: NodeLayout, recipe_name: str) -> NodeLayout:
    """Where green's state waits while blue runs: under the node's own logs folder."""
    return NodeLayout.at(f"{layout.logs}/{GREEN}", recipe_name)


def _gate_in_flight(recipe: Recipe, slot: str) -> int:
    url = f"{single_gate.gate_base(recipe)}/deskside/gate"
    try:
        with bounded_client(PROBE) as client:
            data = client.get(url).json()
    except (httpx.HTTPError, ValueError) as exc:
        raise DesksideError(f"the proxy's drain gate does not answer at {url}: {exc}") from None
    value = data.get("in_flight", {}).get(slot) if isinstance(data, dict) else None
    return int(value) if isinstance(value, int) else 0


class BlueGreen:
    def __init__(
        self,
        recipe: Recipe,
        path: Path,
        run: RunRecord,
        plan: Plan,
        options: UpOptions,
        say: Say,
    ) -> None:
        self.recipe, self.path, self.run, self.plan = recipe, path, run, plan
        self.options, self.say = options, say
        self.report = BlueGreenReport(recipe.name, blue=run.api_url)
        self.transports: dict[str, Transport] = {
            n.name: LocalTransport(netns=n.netns) for n in run.nodes
        }
        self.folder = run_dir(recipe.name)
        self.site = local_site(recipe, self.folder, sys.executable)
        # the slots as the running gate knows them (a restart may have moved `up`'s ports)
        try:
            slots = single_gate.running_slots(single_gate.gate_folder(self.site.cluster))
        except (OSError, ValueError, KeyError, TypeError):
            slots = {s: single_gate.slot_url(recipe, s) for s in single_gate.SLOTS}
        self.blue_slot = next((s for s, u in slots.items() if u == run.api_url), "a")
        self.green_slot = "b" if self.blue_slot == "a" else "a"
        self.green_port = int(slots[self.green_slot].rsplit(":", 1)[1])
        self.green = green_recipe(recipe, self.green_slot, self.green_port)
        self.key = secrets.engine_api_key(recipe.name).reveal()
        self.started: Executed = Executed()
        self.layouts = {n.name: green_layout(run.layout(n), recipe.name) for n in run.nodes}

    def blue_states(self) -> dict[str, NodeState]:
        states = {}
        for node in self.run.nodes:
            state = read_state(self.transports[node.name], self.run.layout(node), self.recipe.name)
            if state is None:
                raise DesksideError(f"{self.recipe.name}: node {node.name} runs no engine")
            states[node.name] = state
        head = next(n for n in self.run.nodes if n.role == "head")
        if states[head.name].service("gate") is None:
            raise DesksideError(
                f"{self.recipe.name} was started without the proxy's drain gate (by an older "
                "deskside): its proxy cannot be switched to a new copy with no request failing",
                hint=f"restart it once (deskside down, then deskside up {self.path}); later "
                "upgrades are blue/green",
            )
        return states

    def run_it(self) -> BlueGreenReport:
        return run_reported(self.report, self._run)

    def _run(self) -> None:
        blue = self.blue_states()
        name = self.recipe.model.served_name
        self.report.before = short_bench(self.run.api_url, self.key, name)
        self.say(f"blue {self.run.api_url}: bench median {_ms(self.report.before.median_s)}")
        t1 = time.monotonic()
        switched = False
        try:
            url = self._start_green()
            self.report.start_seconds = round(time.monotonic() - t1, 2)
            self._ready(url)
            self.report.drain_seconds = self._drain(self.blue_slot, "blue")
            switched = True
            self.say(f"switched: new requests go to green ({url}); blue is idle, kept running")
            self._prove(url)
        except BaseException:  # a failed start or proof, or Ctrl-C: green goes, blue serves
            if switched:
                try:
                    self._drain(self.green_slot, "green")
                except DesksideError as exc:  # green keeps serving: stopping it would fail
                    raise DesksideError(  # the requests it runs
                        f"the new copy failed, and switching back to blue failed: "
                        f"{exc.message}; both copies run, green serves",
                        hint="deskside status; deskside down, then deskside up",
                    ) from None
                self.report.switched_back = True
                self.say("green failed: switched back, blue serves; stopping green")
            else:
                self.say("green failed: stopping it, blue serves on")
            self._stop_green()
            raise
        self._retire_blue(blue, url)

    def _start_green(self) -> str:
        recipe = self.green
        site = Site.this_machine(recipe, self.path, sys.executable, str(self.folder))
        planned = launches(recipe, self.plan, site)
        head = next(la for la in planned if la.role == "head")
        assert head.probe_url is not None
        self.report.green = head.probe_url
        when = datetime.now(UTC)
        ops: list[Op] = []
        layouts = self.layouts
        for la in planned:  # workers first, as `launches` orders them
            layout = layouts[la.node]
            state = NodeState(
                recipe=recipe.name,
                node=la.node,
                role=la.role,
                node_rank=la.node_rank,
                release=None,
                control="process",
                started_at=when.isoformat(timespec="seconds"),
            )
            argv = la.argv
            if la.role == "head":
                argv = with_env_file(argv, self.site.engine_env)
            control = Control(kind="process", runtime="native", layout=layout)
            ops += control.start_ops(
                la.node,
                state,
                argv=argv,
                env=la.env,
                cwd=la.workdir,
                log=layout.engine_log("engine", stamp(when)),
                what=f"starting green {la.role} {la.node} on port {self.green_port}",
            )
        execute(ops, self.transports, self.started, self.say)
        nodes = [
            watched(
                la.node,
                self.started.states[la.node],
                Control(kind="process", runtime="native", layout=layouts[la.node]),
                self.transports[la.node],
                self.started.states[la.node].log or la.node,
            )
            for la in planned
        ]
        wait_ready(
            api_url=head.probe_url,
            served_names=list(recipe.model.all_names),
            planned_kv_cache_tokens=self.plan.kv_cache_tokens,
            nodes=nodes,
            timeout=self.options.timeout,
            say=self.say,
            interval=self.options.poll_interval,
            client=bounded_client(
                Limits(total=10, max_bytes=METRICS.max_bytes),
                headers={"Authorization": f"Bearer {self.key}"},
            ),
        )
        return head.probe_url

    def _ready(self, url: str) -> None:
        client = bounded_client(
            Limits(total=self.options.contract_timeout, max_bytes=METRICS.max_bytes),
            headers={"Authorization": f"Bearer {self.key}"},
        )
        self.say(require_contract(client, url, list(self.recipe.model.all_names)))

    def _prove(self, url: str) -> None:
        self.report.after = short_bench(url, self.key, self.recipe.model.served_name)
        self.say(f"green {url}: bench median {_ms(self.report.after.median_s)}")
        assert self.report.before is not None
        why = bench_verdict(self.report.before, self.report.after, "blue's {ms} before it")
        if why is not None:
            raise DesksideError(f"the new copy failed its proof: {why}")

    def _stop_green(self) -> None:
        for node, state in self.started.states.items():
            layout = self.layouts[node]
            control = Control(kind="process", runtime="native", layout=layout)
            with contextlib.suppress(Exception):
                control.stop_report(self.transports[node], state, self.options.grace)
                remove_state(self.transports[node], layout)

    def _drain(self, slot: str, which: str) -> float:
        """Drain `slot` at the gate (new requests go to the other) and wait until it runs
        no request; the seconds that took."""
        drain = Path(single_gate.gate_folder(self.site.cluster)) / single_gate.DRAIN_FILE
        write_file(drain, f"{slot}\n".encode(), 0o600)
        t0 = time.monotonic()
        deadline = t0 + self.options.timeout
        while (n := _gate_in_flight(self.recipe, slot)) > 0:
            if time.monotonic() > deadline:
                raise DesksideError(f"{which} still runs {n} request(s) after the switch")
            time.sleep(0.2)
        return round(time.monotonic() - t0, 2)

    def _retire_blue(self, blue: dict[str, NodeState], url: str) -> None:
        problems = []
        for node in sorted(self.run.nodes, key=lambda n: n.role != "head"):
            t, layout = self.transports[node.name], self.run.layout(node)
            engine_only = blue[node.name].model_copy(update={"services": []})
            control = Control(kind="process", runtime="native", layout=layout)
            problems += control.stop_report(t, engine_only, self.options.grace)
            green = self.started.states[node.name]
            write_state(t, layout, green.model_copy(update={"services": blue[node.name].services}))
            remove_state(t, self.layouts[node.name])
        self.say(f"blue stopped (it drained in {self.report.drain_seconds:.1f} s)")
        self.run.api_url = url
        self.run.recipe = str(self.path)
        # a restart in place starts the engines again on green's port (the gate sends there)
        port = self.green_port
        self.run.engine_overlay = {"port": port} if port != self.recipe.engine.port else None
        self.run.ready_at = datetime.now(UTC).isoformat(timespec="seconds")
        save_run(self.run)
        if self.recipe.monitoring.enabled:  # Prometheus follows its target file to green
            folder = Path(self.site.cluster) / "prometheus"
            targets = prometheus.render_engine_targets(self.green).encode()
            write_file(folder / prometheus.ENGINE_TARGETS_FILE, targets, 0o644)
        if problems:
            raise DesksideError(
                "green serves, but blue did not stop cleanly: " + "; ".join(problems),
                hint="deskside doctor lists what is left",
            )


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def blue_green(
    recipe: Recipe,
    path: Path,
    run: RunRecord,
    plan: Plan,
    options: UpOptions,
    progress: Say | None = None,
) -> BlueGreenReport:
    """The blue/green restart (see the module docstring). Never raises for a failed step:
    the report says what failed."""
    return BlueGreen(recipe, path, run, plan, options, progress or (lambda _m: None)).run_it()


__all__ = ["BlueGreenReport", "blue_green", "green_layout", "green_recipe"]
