"""A single-file HTML report: tables, notes and the plots embedded as data URIs."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from jinja2 import Environment, select_autoescape

from deskside.bench.models import BenchResult
from deskside.bench.outputs.csv import cell_rows
from deskside.bench.report import notes

TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>deskside bench - {{ r.model }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1100px; }
table { border-collapse: collapse; margin: 1em 0; font-size: 14px; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th { background: #f3f3f3; }
td.l, th.l { text-align: left; }
.dim { color: #999; }
.note { color: #8a5a00; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
code { background: #f6f6f6; padding: 1px 4px; }
</style></head><body>
<h1>deskside bench</h1>
<p><b>{{ r.model }}</b> at <code>{{ r.url }}</code> ({{ r.endpoint }} endpoint),
server {{ r.server_version or "version unknown" }}, started {{ r.started_at }},
deskside {{ r.deskside_version }}, schema {{ r.schema_version }}.
Prompt lengths checked with {{ r.tokenization.method if r.tokenization else "-" }}.</p>
{% if r.probe %}
<h2>Context probe</h2>
<p>{{ "{:,}".format(r.probe.target_tokens) }} tokens targeted:
<b>{{ "accepted" if r.probe.accepted else "not accepted" }}</b>;
prompt tokens {{ r.probe.prompt_tokens if r.probe.prompt_tokens is not none else "-" }},
TTFT {{ fmt(r.probe.ttft_s, 2) }} s, prefill {{ fmt(r.probe.prefill_tok_s, 1) }} tok/s.
{% if r.probe.error %}<span class="note">{{ r.probe.error }}</span>{% endif %}</p>
{% endif %}
{% if rows %}
<h2>Results</h2>
<table><tr><th>Prompt</th><th>Concurrency</th><th>TTFT (s)</th><th>Prefill tok/s</th>
<th>Decode tok/s</th><th>Aggregate tok/s</th><th>OK</th><th>Client reliable</th></tr>
{% for c in rows %}<tr><td>{{ "{:,}".format(c.prompt_len) }}</td><td>{{ c.load }}</td>
<td>{{ fmt(c.ttft_s_p50, 2) }}</td>
<td class="{{ '' if c.prefill_meaningful else 'dim' }}">{{ fmt(c.prefill_tok_s, 0) }}</td>
<td>{{ fmt(c.decode_tok_s, 1) }}</td><td>{{ fmt(c.aggregate_tok_s, 1) }}</td>
<td>{{ c.succeeded }}/{{ c.requests }}</td><td>{{ "yes" if c.client_reliable else "NO" }}</td></tr>
{% endfor %}</table>
<p>TTFT: median over the cell's successful requests (request sent to first chunk carrying a
generated token). Prefill: apparent, (prompt - cached) / TTFT, meaningful at concurrency 1
(greyed above it). Decode: per stream, sum(N_out - 1) / sum(E2E - TTFT), N_out from the
server's usage. Aggregate: sum(N_out) / (last end - first sent).</p>
<h2>Server counters over each window</h2>
<table><tr><th>Prompt</th><th>Concurrency</th><th>Generation tokens</th>
<th>Prefix-cache hit rate</th><th>Preemptions</th><th>Mean queue (s)</th>
<th>Acceptance rate</th><th>Mean acceptance length</th></tr>
{% for c in rows %}<tr><td>{{ "{:,}".format(c.prompt_len) }}</td><td>{{ c.load }}</td>
<td>{{ fmt(c.server_generation_tokens, 0) }}</td><td>{{ pct(c.server_prefix_cache_hit_rate) }}</td>
<td>{{ fmt(c.server_preemptions, 0) }}</td><td>{{ fmt(c.server_queue_time_mean_s, 4) }}</td>
<td>{{ pct(c.spec_acceptance_rate) }}</td><td>{{ fmt(c.spec_mean_acceptance_length, 2) }}</td></tr>
{% endfor %}</table>
{% endif %}
{% for title, uri in images %}<h2>{{ title }}</h2><img alt="{{ title }}" src="{{ uri }}">
{% endfor %}
{% if notes %}<h2>Notes</h2><ul>{% for n in notes %}<li class="note">{{ n }}</li>{% endfor %}</ul>
{% endif %}
</body></html>
"""


def _fmt(value: Any, digits: int) -> str:
    if value is None or value == "":
        return "-"
    return f"{float(value):,.{digits}f}"


def _pct(value: Any) -> str:
    return "-" if value is None else f"{float(value):.0%}"


def render_html(result: BenchResult, pngs: dict[str, Path]) -> str:
    env = Environment(autoescape=select_autoescape(default=True))
    template = env.from_string(TEMPLATE)
    titles = {
        "throughput_png": "Throughput vs concurrency",
        "ttft_png": "TTFT vs prompt length",
        "acceptance_png": "Speculative acceptance by position",
    }
    images = [
        (titles.get(key, key), "data:image/png;base64," + base64.b64encode(p.read_bytes()).decode())
        for key, p in pngs.items()
    ]
    return template.render(
        r=result,
        rows=cell_rows(result),
        images=images,
        notes=notes(result),
        fmt=_fmt,
        pct=_pct,
    )


def write_html(result: BenchResult, path: Path, pngs: dict[str, Path]) -> Path:
    path.write_text(render_html(result, pngs))
    return path
