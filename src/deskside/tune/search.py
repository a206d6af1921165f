"""The SLA search: frontier points benchmarked one engine start at a time, through the
normal runtime (`up`: workers first, then the head; `down` after), each start recorded.

Which points: the frontier's points that start and hold the workload's longest request
(prompt + output tokens); of those that differ only in context, the shortest context that
holds it (the most KV capacity for the workload). The recipe's own settings go first when
they are among them, then the most KV capacity first. Per point the workload runs from the
lowest concurrency up and stops at the first level that misses the SLA (a closed loop only
gets slower with more concurrency). Budgets: --max-starts and --max-minutes, counted over
a resumed search too; the state is written after every point, so an interrupted search
resumes where it stopped."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from deskside.errors import DesksideError, UsageError
from deskside.tune.frontier import Frontier
from deskside.tune.points import Point, Target
from deskside.tune.sla import CellVerdict, Level, goodput, judge_cell

STATE = "state.json"
Say = Callable[[str], None]


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_lens: list[int]
    concurrency: list[int]
    max_tokens: int = 128
    requests: int | None = None

    @property
    def longest(self) -> int:
        return max(self.prompt_lens) + self.max_tokens


def load_workload(path: Path) -> Workload:
    """A YAML or JSON file with prompt_lens, concurrency, max_tokens, requests."""
    from pydantic import ValidationError
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    from deskside.recipe.source import read_recipe_bytes

    try:
        data = YAML(typ="safe").load(read_recipe_bytes(path).decode("utf-8", errors="replace"))
        return Workload.model_validate(data)
    except YAMLError as exc:
        raise UsageError(f"{path}: not YAML or JSON ({type(exc).__name__})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(
            f"{path}: {where}: {first['msg']}",
            hint="a workload has prompt_lens: [..], concurrency: [..], max_tokens: N",
        ) from None


def candidates(front: Frontier, workload: Workload) -> list[Point]:
    need = workload.longest
    keep: dict[tuple[Any, ...], Point] = {}
    for p in front.on_frontier:
        if p.max_model_len < need:
            continue
        rest = tuple(v for k, v in sorted(p.settings.items()) if k != "max_model_len")
        if rest not in keep or p.max_model_len < keep[rest].max_model_len:
            keep[rest] = p
    own = front.recipe_settings

    def order(p: Point) -> tuple[int, float]:
        mine = all(p.settings.get(k) == v for k, v in own.items() if k != "max_model_len")
        return (0 if mine else 1, -p.kv_cache_tokens)

    return sorted(keep.values(), key=order)


class PointRun(BaseModel):
    """One benchmarked (or refused) point of the search."""

    model_config = ConfigDict(extra="forbid")

    key: str
    settings: dict[str, Any]
    started: bool
    start_seconds: float
    error: str | None = None
    cells: list[dict[str, Any]] = []
    met: bool = False
    goodput_tok_s: float = 0.0
    goodput_concurrency: int | None = None
    stopped_early: str | None = None
    lock: dict[str, Any] = {}
    bench_file: str | None = None


class State(BaseModel):
    model_config = ConfigDict(extra="forbid")

    recipe: str
    recipe_sha256: str
    sla: list[str]
    workload: Workload
    minutes_used: float = 0.0
    starts: int = 0
    order: list[str] = []
    runs: dict[str, PointRun] = {}
    winner: str | None = None


def settings_key(settings: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(settings.items()) if v is not None)


def recipe_digest(target: Target) -> str:
    text = json.dumps(target.recipe.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def open_state(out: Path, target: Target, levels: tuple[Level, ...], workload: Workload) -> State:
    fresh = State(
        recipe=target.recipe.name,
        recipe_sha256=recipe_digest(target),
        sla=[lv.text for lv in levels],
        workload=workload,
    )
    path = out / STATE
    if not path.is_file():
        return fresh
    try:
        old = State.model_validate_json(path.read_text())
    except ValueError:
        raise UsageError(
            f"{path}: not a tune state", hint="give another --out, or remove that folder"
        ) from None
    same = (old.recipe, old.recipe_sha256, old.sla, old.workload) == (
        fresh.recipe,
        fresh.recipe_sha256,
        fresh.sla,
        fresh.workload,
    )
    if not same:
        raise UsageError(
            f"{out} holds a search of another recipe, SLA or workload",
            hint="give another --out to start a new search there",
        )
    return old


def save_state(out: Path, state: State) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (STATE + ".tmp")
    tmp.write_text(state.model_dump_json(indent=2) + "\n")
    tmp.replace(out / STATE)


@dataclass
class Engine:
    """Starts and stops the recipe's run through the normal runtime (injectable for tests
    of the search's bookkeeping)."""

    target: Target
    timeout: float
    embedded: bool
    say: Say = field(default=lambda _: None)

    def start(self, settings: dict[str, Any]) -> tuple[bool, str | None, dict[str, Any]]:
        from deskside.operate.select import runtime_for
        from deskside.records.names import run_lock
        from deskside.runtime.pipeline import UpOptions

        recipe = self.recipe_at(settings)
        options = UpOptions(
            timeout=self.timeout,
            skip_missing_services=self.embedded,
            engine_overlay=engine_values(settings),
        )
        with run_lock(recipe.name):
            report = runtime_for(recipe).up(recipe, self.target.recipe_path, options, self.say)
        if not report.ok:
            return False, _failure(report.to_dict()), {}
        return True, None, lock_binding(recipe, self.target)

    def recipe_at(self, settings: dict[str, Any]) -> Any:
        from deskside.recipe.overlay import apply_settings

        return apply_settings(self.target.recipe, engine_values(settings), "tune point")

    def server(self) -> tuple[str, str, str | None]:
        from deskside.records.names import find_run

        running = find_run(self.target.recipe.name)
        key = None
        if running.proxy_url is not None:
            from deskside.secrets import engine_api_key

            key = engine_api_key(running.recipe_name).reveal()
        return running.api_url, running.served_names[0], key

    def refuse_if_running(self) -> None:
        from deskside.records.names import running_names

        name = self.target.recipe.name
        if name in running_names():
            raise UsageError(
                f"{name} is running: a tune restarts its engine for every point",
                hint=f"stop it first (deskside down {name}), then tune",
            )

    def stop(self) -> None:
        from deskside.operate.select import runtime_of
        from deskside.records.names import resolve, run_lock, running_names

        name = self.target.recipe.name
        if name not in running_names():
            return
        with run_lock(name):
            found = resolve(name)
            stopped = runtime_of(found).down(found)
        if not stopped.ok:
            raise DesksideError(
                f"could not stop {name} after a tune point: " + "; ".join(stopped.leftovers),
                hint=f"deskside down {name}, then rerun the same tune command to resume",
            )


def engine_values(settings: dict[str, Any]) -> dict[str, Any]:
    values = {
        k: v for k, v in settings.items() if k not in ("num_speculative_tokens",) and v is not None
    }
    if settings.get("num_speculative_tokens") is not None:
        values["speculative"] = {"num_speculative_tokens": settings["num_speculative_tokens"]}
    return values


def _failure(report: dict[str, Any]) -> str:
    stages = report.get("stages") or []
    for st in stages if isinstance(stages, list) else []:
        if isinstance(st, dict) and st.get("status") == "failed":
            why = st.get("detail") or report.get("error") or "failed"
            return f"{st.get('name')}: {why}"
    return str(report.get("error") or report.get("detail") or "the start failed")


def lock_binding(recipe: Any, target: Target) -> dict[str, Any]:
    """What the bench result is bound to: the rendered deployment's lock (versions, the
    model's revision, the image digest, the recipe's digest, the engine's argv per node)
    and the sha256 of the lock itself."""
    from deskside.planner.inputs import plan_recipe_arch
    from deskside.render.assemble import render
    from deskside.render.lock import bundle_lock

    plan = plan_recipe_arch(recipe, target.arch, target.source)
    lock = bundle_lock(render(recipe, target.recipe_path, plan))
    text = lock.text()
    return {
        "lock_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "recipe_sha256": lock.recipe_sha256,
        "deskside_version": lock.deskside_version,
        "vllm_version": lock.vllm_version,
        "image": lock.image,
        "image_digest": lock.image_digest,
        "model_revision": lock.model.revision,
        "model": lock.model.node_reference,
        "argv": {name: node.argv for name, node in lock.nodes.items()},
    }


@dataclass
class Budget:
    max_starts: int
    max_minutes: float

    def left(self, state: State, t0: float) -> str | None:
        """Why the search must stop now (None: it may start another point)."""
        if state.starts >= self.max_starts:
            return f"--max-starts {self.max_starts} reached"
        if state.minutes_used + (time.monotonic() - t0) / 60 >= self.max_minutes:
            return f"--max-minutes {self.max_minutes:g} reached"
        return None


def bench_point(
    url: str,
    model: str,
    api_key: str | None,
    workload: Workload,
    levels: tuple[Level, ...],
    out: Path,
    say: Say,
) -> tuple[list[CellVerdict], str | None, str]:
    """The workload level by level (lowest concurrency first); stops at the first level
    that misses the SLA. Returns the verdicts, why it stopped early, the result file."""
    from deskside.bench.models import BenchResult
    from deskside.bench.runner import config_from, run_bench

    verdicts: list[CellVerdict] = []
    results: list[dict[str, Any]] = []
    stopped: str | None = None
    for i, conc in enumerate(sorted(workload.concurrency)):
        config = config_from(
            url=url,
            model=model,
            api_key=api_key,
            prompt_lens=workload.prompt_lens,
            concurrency=[conc],
            max_tokens=workload.max_tokens,
            requests=workload.requests,
        )
        say(f"  benchmarking concurrency {conc}")
        result: BenchResult = run_bench(config)
        results.append(result.model_dump(mode="json"))
        level = [judge_cell(cell, levels) for cell in result.cells]
        verdicts += level
        missed = [v for v in level if not v.met]
        if missed and i + 1 < len(workload.concurrency):
            stopped = (
                f"concurrency {conc} missed the SLA at prompt {missed[0].prompt_len}: higher "
                "concurrency was not run"
            )
            break
    path = out / "bench.json"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n")
    return verdicts, stopped, str(path)


def run_search(
    target: Target,
    front: Frontier,
    levels: tuple[Level, ...],
    workload: Workload,
    out: Path,
    budget: Budget,
    engine: Engine,
    say: Say,
) -> State:
    state = open_state(out, target, levels, workload)
    todo = candidates(front, workload)
    if not todo:
        raise UsageError(
            f"no frontier point holds the workload's longest request ({workload.longest:,} "
            "tokens: prompt + max_tokens)",
            hint="widen --max-model-len, or shorten the workload",
        )
    state.order = [settings_key(p.settings) for p in todo]
    save_state(out, state)
    t0 = time.monotonic()
    engine.refuse_if_running()
    try:
        for n, p in enumerate(todo, 1):
            key = settings_key(p.settings)
            if key in state.runs:
                continue
            why = budget.left(state, t0)
            if why is not None:
                say(f"budget: {why}; {len(todo) - n + 1} point(s) not benchmarked")
                break
            say(f"point {n}/{len(todo)}: {key}: starting the engine")
            started = time.monotonic()
            state.starts += 1
            try:
                ok, error, lock = engine.start(p.settings)
            except DesksideError as exc:
                ok, error, lock = False, exc.message, {}
            run = PointRun(
                key=key,
                settings=p.settings,
                started=ok,
                start_seconds=round(time.monotonic() - started, 1),
                error=error,
                lock=lock,
            )
            try:
                if ok:
                    url, model, api_key = engine.server()
                    verdicts, stopped, bench_file = bench_point(
                        url, model, api_key, workload, levels, out / "points" / str(n), say
                    )
                    tok_s, conc = goodput(verdicts)
                    run.cells = [v.__dict__ for v in verdicts]
                    run.met = conc is not None
                    run.goodput_tok_s = round(tok_s, 3)
                    run.goodput_concurrency = conc
                    run.stopped_early = stopped
                    run.bench_file = bench_file
                    say(
                        f"point {n}/{len(todo)}: goodput {tok_s:.1f} tok/s"
                        + (f" at concurrency {conc}" if conc else " (the SLA is never met)")
                    )
                else:
                    say(f"point {n}/{len(todo)}: did not start: {error}")
            finally:
                engine.stop()
                state.runs[key] = run
                state.minutes_used += (time.monotonic() - t0) / 60
                t0 = time.monotonic()
                state.winner = pick_winner(state)
                save_state(out, state)
    finally:
        state.minutes_used += (time.monotonic() - t0) / 60
        save_state(out, state)
    return state


def pick_winner(state: State) -> str | None:
    met = [r for r in state.runs.values() if r.met]
    if not met:
        return None
    return max(met, key=lambda r: (r.goodput_tok_s, -state.order.index(r.key))).key
