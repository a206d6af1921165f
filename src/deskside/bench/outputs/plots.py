"""PNG plots (matplotlib, Agg): throughput vs concurrency, TTFT vs prompt length, and
speculative acceptance by draft position."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from deskside.bench.models import BenchResult


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def throughput_vs_concurrency(result: BenchResult, path: Path) -> Path:
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    by_prompt: dict[int, list[tuple[float, float | None, float | None]]] = defaultdict(list)
    open_loop = any(cell.request_rate is not None for cell in result.cells)
    for cell in result.cells:
        m = cell.metrics
        x = cell.request_rate if cell.request_rate is not None else cell.concurrency
        by_prompt[cell.prompt_len].append((x, m.aggregate_tok_s, m.decode_tok_s))
    for prompt_len, points in sorted(by_prompt.items()):
        points.sort()
        agg = [(c, a) for c, a, _ in points if a is not None]
        dec = [(c, d) for c, _, d in points if d is not None]
        if agg:
            ax1.plot(*zip(*agg, strict=True), marker="o", label=f"{prompt_len:,} tok")
        if dec:
            ax2.plot(*zip(*dec, strict=True), marker="o", label=f"{prompt_len:,} tok")
    ax1.set_title("Aggregate output tok/s")
    ax2.set_title("Decode tok/s per stream")
    levels = sorted({x for points in by_prompt.values() for x, _, _ in points})
    for ax in (ax1, ax2):
        ax.set_xlabel("requests/s (open loop)" if open_loop else "concurrency")
        ax.set_xticks(levels)
        ax.grid(alpha=0.3)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.15)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(title="prompt")
    load = "request rate" if open_loop else "concurrency"
    fig.suptitle(f"{result.model}: throughput vs {load}")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def ttft_vs_prompt(result: BenchResult, path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
    by_conc: dict[tuple[float, str], list[tuple[int, float, float, float]]] = defaultdict(list)
    for cell in result.cells:
        t = cell.metrics.ttft_s
        x = cell.request_rate if cell.request_rate is not None else cell.concurrency
        if t is not None:
            by_conc[(x, cell.label)].append((cell.prompt_len, t.p50, t.p50 - t.min, t.max - t.p50))
    for (_, conc), points in sorted(by_conc.items()):
        points.sort()
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        err = [[p[2] for p in points], [p[3] for p in points]]
        label = conc if conc.endswith("/s") else f"c={conc}"
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=label)
    ax.set_xscale("log", base=2)
    lens = sorted({cell.prompt_len for cell in result.cells})
    ax.set_xticks(lens, [f"{n:,}" for n in lens])
    ax.minorticks_off()
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("TTFT (s): median, bars min-max over requests")
    ax.grid(alpha=0.3)
    if by_conc:
        ax.legend(
            title="concurrency" if all(c.request_rate is None for c in result.cells) else "load"
        )
    ax.set_title(f"{result.model}: TTFT vs prompt length")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def acceptance_by_position(result: BenchResult, path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
    cells = [c for c in result.cells if c.server is not None and c.server.spec_decode is not None]
    if not cells:
        ax.text(
            0.5,
            0.5,
            "no speculative-decoding counters in /metrics",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_axis_off()
    else:
        width = 0.8 / len(cells)
        for i, cell in enumerate(cells):
            spec = cell.server.spec_decode if cell.server else None
            assert spec is not None
            xs = [p.position + i * width for p in spec.per_position]
            ys = [p.rate or 0.0 for p in spec.per_position]
            mal = spec.mean_acceptance_length
            label = f"{cell.prompt_len:,} x {cell.label}" + (
                f" (mean len {mal:.2f})" if mal else ""
            )
            ax.bar(xs, ys, width=width, label=label)
        positions = sorted(
            {
                p.position
                for c in cells
                if c.server and c.server.spec_decode
                for p in c.server.spec_decode.per_position
            }
        )
        ax.set_xticks([p + 0.4 - width / 2 for p in positions], [str(p) for p in positions])
        ax.set_xlabel("draft position")
        ax.set_ylabel("acceptance rate (accepted at position / drafts)")
        ax.set_ylim(0, 1)
        ax.legend(fontsize="small", title="prompt x concurrency")
        ax.grid(alpha=0.3, axis="y")
    ax.set_title(f"{result.model}: speculative acceptance by position")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(result: BenchResult, out_dir: Path) -> dict[str, Path]:
    if not result.cells:
        return {}
    return {
        "throughput_png": throughput_vs_concurrency(result, out_dir / "throughput.png"),
        "ttft_png": ttft_vs_prompt(result, out_dir / "ttft.png"),
        "acceptance_png": acceptance_by_position(result, out_dir / "acceptance.png"),
    }
