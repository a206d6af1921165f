"""Every output format at once."""

from __future__ import annotations

from pathlib import Path

from deskside.bench.models import BenchResult
from deskside.bench.outputs import csv, html, json, plots


def write_all(result: BenchResult, out_dir: Path) -> dict[str, Path]:
    """result.json, cells.csv, requests.csv, the PNG plots and report.html in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {"json": json.write_json(result, out_dir / "result.json")}
    written.update(csv.write_csv(result, out_dir))
    pngs = plots.write_plots(result, out_dir)
    written.update(pngs)
    written["html"] = html.write_html(result, out_dir / "report.html", pngs)
    return written
