"""deskside.tune's SLA (parsing, a cell's verdict, goodput), the overlay and the choice of
points to benchmark."""

from __future__ import annotations

from pathlib import Path

import pytest

from deskside.bench.metrics import cell_metrics
from deskside.bench.models import CellResult, ClientHealth, RequestRecord
from deskside.errors import RecipeError, UsageError
from deskside.home import resolve_recipe
from deskside.recipe.load import load_recipe
from deskside.recipe.overlay import apply_overlay, overlay_text
from deskside.tune.frontier import frontier
from deskside.tune.search import Workload, candidates
from deskside.tune.sla import Level, goodput, judge_cell, parse_sla

ROOT = Path(__file__).parents[2]
FLAGSHIP = ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml"


def test_parse_sla() -> None:
    assert parse_sla("ttft_p95<=2s, tpot_p50<=60ms,e2e_p99<10s") == (
        Level("ttft", 95.0, 2.0),
        Level("tpot", 50.0, 0.06),
        Level("e2e", 99.0, 10.0),
    )
    for bad in ("", "ttft<=2s", "ttft_p95>=2s", "itl_p50<=1s", "ttft_p100<=1s", "ttft_p95<=0s"):
        with pytest.raises(UsageError):
            parse_sla(bad)


def record(i: int, ttft: float, e2e: float, out: int = 11, ok: bool = True) -> RequestRecord:
    return RequestRecord(
        index=i,
        prompt_len=64,
        max_tokens=out,
        ok=ok,
        sent_s=float(i),
        ttft_s=ttft if ok else None,
        e2e_s=e2e if ok else None,
        end_s=e2e if ok else None,
        output_tokens=out if ok else None,
        prompt_tokens=64,
    )


def cell(conc: int, records: list[RequestRecord]) -> CellResult:
    health = ClientHealth(
        wall_s=1,
        cpu_s=0,
        cpu_fraction=0,
        loop_lag_samples=0,
        loop_lag_p50_ms=0,
        loop_lag_p99_ms=0,
        loop_lag_max_ms=0,
        reliable=True,
    )
    return CellResult(
        prompt_len=64,
        concurrency=conc,
        metrics=cell_metrics(records, conc),
        client=health,
        requests=records,
    )


def test_cell_verdict_and_goodput() -> None:
    levels = parse_sla("ttft_p50<=1s,tpot_p50<=100ms")
    # TTFTs 0.5,0.6,0.7,0.8 -> p50 0.65 s; TPOT (e2e - ttft) / 10 = 0.05 s
    fast = cell(1, [record(i, 0.5 + 0.1 * i, 1.0 + 0.1 * i) for i in range(4)])
    v = judge_cell(fast, levels)
    assert v.met and v.observed["ttft_p50<=1s"] == pytest.approx(0.65)
    assert v.observed["tpot_p50<=0.1s"] == pytest.approx(0.05)
    slow = cell(2, [record(i, 2.0, 3.0) for i in range(4)])
    assert not judge_cell(slow, levels).met
    failed = cell(2, [record(0, 0.1, 0.2), record(1, 0, 0, ok=False)])
    assert not judge_cell(failed, levels).met
    # goodput: tokens / window at the highest concurrency that met
    tok_s, conc = goodput([v, judge_cell(slow, levels)])
    assert conc == 1 and tok_s == pytest.approx(44 / fast.metrics.window_s)  # type: ignore[operator]
    assert goodput([judge_cell(slow, levels)]) == (0.0, None)


def test_overlay_round_trip(tmp_path: Path) -> None:
    recipe, _ = resolve_recipe("local-tiny")
    settings = {
        "max_model_len": 2048,
        "max_num_seqs": 3,
        "max_num_batched_tokens": 1024,
        "kv_cache_dtype": "auto",
        "num_speculative_tokens": 2,
        "gpu_memory_utilization": None,
    }
    path = tmp_path / "overlay.yaml"
    path.write_text(overlay_text("local-tiny", settings, "tuned\nfor a test"))
    tuned = apply_overlay(recipe, path)
    e = tuned.engine
    assert (e.max_model_len, e.max_num_seqs, e.max_num_batched_tokens) == (2048, 3, 1024)
    assert e.speculative is not None and e.speculative.num_speculative_tokens == 2
    assert e.speculative.method == "mtp" and e.kv_cache_memory == recipe.engine.kv_cache_memory
    assert tuned.cluster == recipe.cluster


def test_overlay_refusals_are_located(tmp_path: Path) -> None:
    recipe, _ = resolve_recipe("local-tiny")
    path = tmp_path / "o.yaml"
    path.write_text("recipe: local-tiny\nengine:\n  max_num_seqs: 2\n  port: 9\n")
    with pytest.raises(RecipeError) as err:
        apply_overlay(recipe, path)
    assert err.value.location is not None and err.value.location.line == 4
    path.write_text("recipe: other\nengine:\n  max_num_seqs: 2\n")
    with pytest.raises(RecipeError, match="for recipe 'other'"):
        apply_overlay(recipe, path)


def test_candidates_hold_the_workload_shortest_context_first() -> None:
    recipe = load_recipe(FLAGSHIP)
    front = frontier(
        recipe,
        FLAGSHIP,
        {
            "max_model_len": (51_200, 204_800, 409_600),
            "max_num_seqs": (6,),
            "max_num_batched_tokens": (16_384,),
            "kv_cache_dtype": ("nvfp4_ds_mla",),
            "num_speculative_tokens": (4, 5),
            "gpu_memory_utilization": (0.82,),
        },
    )
    picked = candidates(front, Workload(prompt_lens=[60_000], concurrency=[1], max_tokens=512))
    # per draft setting, the shortest context that holds 60,512 tokens; the recipe's first
    assert [
        (p.settings["max_model_len"], p.settings["num_speculative_tokens"]) for p in picked
    ] == [
        (204_800, 5),
        (204_800, 4),
    ]
    assert candidates(front, Workload(prompt_lens=[500_000], concurrency=[1])) == []
