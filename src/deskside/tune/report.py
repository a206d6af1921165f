"""The search's report: a table (Markdown), a plot of goodput under the SLA per point (the
chosen one marked), the winner as a recipe overlay, and report.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deskside.recipe.overlay import overlay_text
from deskside.tune.search import State

SHORT = {
    "max_model_len": "ctx",
    "max_num_seqs": "seqs",
    "max_num_batched_tokens": "batch",
    "kv_cache_dtype": "kv",
    "num_speculative_tokens": "draft",
    "gpu_memory_utilization": "mem",
}


def label(settings: dict[str, Any]) -> str:
    return " ".join(f"{SHORT[k]}={v}" for k, v in settings.items() if v is not None)


def table(state: State) -> str:
    rows = [
        "| # | Settings | Started | Start (s) | Goodput tok/s | At concurrency | SLA | Note |",
        "|---:|---|---|---:|---:|---:|---|---|",
    ]
    for i, key in enumerate(state.order, 1):
        run = state.runs.get(key)
        if run is None:
            rows.append(f"| {i} | {key} | not run (budget) | | | | | |")
            continue
        mark = " **chosen**" if key == state.winner else ""
        note = run.error or run.stopped_early or ""
        rows.append(
            f"| {i} | {label(run.settings)}{mark} | {'yes' if run.started else 'no'} | "
            f"{run.start_seconds:.0f} | {run.goodput_tok_s:.1f} | "
            f"{run.goodput_concurrency or '-'} | {'met' if run.met else 'missed'} | "
            f"{note.replace('|', '/')} |"
        )
    return "\n".join(rows) + "\n"


def plot(state: State, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [state.runs[k] for k in state.order if k in state.runs]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(runs)), 4))
    names = [f"#{state.order.index(r.key) + 1}" for r in runs]
    values = [r.goodput_tok_s for r in runs]
    colours = ["tab:green" if r.key == state.winner else "tab:grey" for r in runs]
    bars = ax.bar(names, values, color=colours)
    for bar, r in zip(bars, runs, strict=True):
        text = "chosen" if r.key == state.winner else ("missed" if not r.met else "")
        if not r.started:
            text = "no start"
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center")
    ax.set_ylabel("goodput under the SLA (output tok/s)")
    ax.set_title(f"{state.recipe}: {', '.join(state.sla)}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(state: State, out: Path) -> dict[str, str]:
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    if state.winner is not None:
        run = state.runs[state.winner]
        comment = (
            f"deskside tune: the best point of {state.recipe} under {', '.join(state.sla)}\n"
            f"goodput {run.goodput_tok_s:.1f} output tok/s at concurrency "
            f"{run.goodput_concurrency}\n"
            f"bound to lock sha256 {run.lock.get('lock_sha256')} (vLLM "
            f"{run.lock.get('vllm_version')}, deskside {run.lock.get('deskside_version')})\n"
            f"apply it: deskside up RECIPE --overlay {out / 'overlay.yaml'}"
        )
        (out / "overlay.yaml").write_text(overlay_text(state.recipe, run.settings, comment))
        written["overlay"] = str(out / "overlay.yaml")
    md = [f"# Tune of {state.recipe}", "", f"SLA: {', '.join(state.sla)}", ""]
    md += [f"Workload: {state.workload.model_dump()}", "", table(state)]
    (out / "report.md").write_text("\n".join(md))
    written["report"] = str(out / "report.md")
    if state.runs:
        plot(state, out / "goodput.png")
        written["plot"] = str(out / "goodput.png")
    (out / "report.json").write_text(
        json.dumps({**state.model_dump(mode="json"), "files": written}, indent=2) + "\n"
    )
    written["json"] = str(out / "report.json")
    return written
