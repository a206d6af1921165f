"""`deskside monitor check`: does every dashboard query and alert rule of a recipe find data
in the live Prometheus, and when one does not, why.

A dashboard query has data when its instant result holds a number (NaN is no data). An
alert rule's expression is empty while the alert does not fire, which is healthy: a rule
has data when every series it reads has data, and `firing` says whether its condition
holds now.

Without data, the reason is diagnosed from the series the expression reads (its vector
selectors, see `deskside.monitor.promql`), in this order:

- `target_down`: the scrape target that would serve a missing series is down
  (`up{job=...} == 0`): "target <job> on <instance> is down";
- `no_gpu`: a GPU series nobody exports while `deskside_gpu_present` is 0 on every node;
- `no_rdma`: an RDMA series (node_exporter's `node_infiniband_*`, the exporter's RoCE GID
  series) nobody exports on a cluster without RDMA devices (fabric transport not roce, or
  node_exporter serves no infiniband series);
- `no_target`: Prometheus has no target of the scrape job that would serve the series;
- `not_exported`: nobody exports the series (its name is unknown to Prometheus);
- `no_data`: the name is known but no series matches now (stale, or labels that match
  nothing);
- `too_few_samples`: a rate needs two samples in its window and Prometheus has fewer;
- `no_traffic`: every series exists but the counters a rate or histogram reads did not
  increase in the window (no requests yet: 0/0 is NaN);
- `query_error`: Prometheus refused the query.

`no_gpu` and `no_rdma` are declared: the hardware has no such thing, nothing is broken.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from deskside.exporter import series
from deskside.monitor.prom_api import Prometheus, QueryError, Result
from deskside.monitor.promql import PromQLSyntaxError, Selector, selectors, substitute
from deskside.monitor.sources import Expression

DECLARED = ("no_gpu", "no_rdma")
# which reason names an expression when several of its series miss data: worst first
PRIORITY = (
    "query_error",
    "target_down",
    "no_target",
    "not_exported",
    "no_data",
    "too_few_samples",
    "no_traffic",
    "no_rdma",
    "no_gpu",
)
JOB_LOOKBACK_S = 3600.0
GPU_PREFIX = "deskside_gpu_"
RDMA_PREFIX = "node_infiniband_"
RDMA_SERIES = (RDMA_PREFIX, series.GID_INDEX, series.GID_DRIFT, series.GID_LAUNCHED)


@dataclass
class Finding:
    expr: str  # as rendered
    source: str
    has_data: bool
    reason: str | None  # None when has_data
    reason_code: str | None
    query: str  # what was sent: `expr` with Grafana's variables replaced
    firing: bool | None = None  # rules: whether the condition holds now
    empty_selectors: list[str] = field(default_factory=list)

    @property
    def declared(self) -> bool:
        return self.reason_code in DECLARED

    @property
    def ok(self) -> bool:
        return self.has_data or self.declared


@dataclass
class CheckReport:
    prometheus: str
    findings: list[Finding]
    recipe: str | None = None

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    def summary(self) -> dict[str, int]:
        return {
            "expressions": len(self.findings),
            "with_data": sum(f.has_data for f in self.findings),
            "declared": sum(not f.has_data and f.declared for f in self.findings),
            "problems": sum(not f.ok for f in self.findings),
            "firing": sum(bool(f.firing) for f in self.findings),
        }

    def to_dict(self) -> dict[str, Any]:
        rows = []
        for f in self.findings:
            row = asdict(f)
            if f.firing is None:
                del row["firing"]
            rows.append(row)
        return {
            "recipe": self.recipe,
            "prometheus": self.prometheus,
            "ok": self.ok,
            "summary": self.summary(),
            "expressions": rows,
        }


@dataclass(frozen=True)
class Why:
    code: str
    text: str
    subject: str | None = None  # no_traffic: the selector whose counters did not move
    window: str | None = None


def _prefix(name: str) -> str:
    """`vllm:` of `vllm:kv_cache_usage_perc`, `deskside_` of `deskside_gpu_power_watts`."""
    for sep in (":", "_"):
        if sep in name:
            return name[: name.index(sep) + 1]
    return name


class Checker:
    """Evaluates expressions against one Prometheus; answers shared by several expressions
    (a selector, the metric names, a job's targets) are asked once."""

    def __init__(
        self,
        prom: Prometheus,
        *,
        scrape_interval: str = "15s",
        jobs: list[str] | None = None,
        rdma_expected: bool = False,
    ) -> None:
        self.prom = prom
        self.scrape_interval = scrape_interval
        self.jobs = jobs or []
        self.rdma_expected = rdma_expected
        self._queries: dict[str, Result] = {}
        self._names: set[str] | None = None
        self._job_of: dict[str, list[str]] = {}

    def query(self, expr: str) -> Result:
        if expr not in self._queries:
            self._queries[expr] = self.prom.query(expr)
        return self._queries[expr]

    def names(self) -> set[str]:
        if self._names is None:
            self._names = set(self.prom.label_values("__name__"))
        return self._names

    def check(self, e: Expression) -> Finding:
        query = substitute(e.expr, self.scrape_interval)
        finding = Finding(e.expr, e.source, False, None, None, query)
        try:
            result = self.query(query)
        except QueryError as exc:
            finding.reason, finding.reason_code = exc.message, "query_error"
            return finding
        try:
            sels = selectors(query)
        except PromQLSyntaxError:
            sels = []
        empty = [s for s in sels if not self.query(s.text).samples]
        finding.empty_selectors = list(dict.fromkeys(s.text for s in empty))
        if e.kind == "rule":
            finding.firing = result.has_data
            finding.has_data = not empty and (bool(sels) or result.has_data)
        else:
            finding.has_data = result.has_data
        if not finding.has_data:
            why = self.diagnose(sels, empty)
            finding.reason, finding.reason_code = why.text, why.code
        return finding

    def diagnose(self, sels: list[Selector], empty: list[Selector]) -> Why:
        if empty:
            whys = [self.missing(s) for s in dict.fromkeys(empty)]
        else:
            whys = [w for s in sels if s.range is not None and (w := self.idle(s)) is not None]
            if not whys:
                whys = [
                    Why(
                        "no_data",
                        "no data: every series it reads exists, but its result is empty or "
                        "NaN (a comparison or a label match drops them all)",
                    )
                ]
        code = min((w.code for w in whys), key=PRIORITY.index)
        idle = [w.subject for w in whys if w.code == "no_traffic" and w.subject]
        texts = [w.text for w in whys if w.code != "no_traffic" or not w.subject]
        if idle:
            window = next(w.window for w in whys if w.code == "no_traffic")
            texts.append(
                f"no traffic yet: {', '.join(dict.fromkeys(idle))} did not increase in the "
                f"last {window}"
            )
        return Why(code, "; ".join(dict.fromkeys(texts)))

    def missing(self, s: Selector) -> Why:
        """Why the selector `s` matches no series now."""
        name = s.metric
        jobs = self.jobs_for(s)
        down: list[str] = []
        unscraped: list[str] = []
        for job in jobs:
            up = self.query(f'up{{job="{job}"}}')
            if not up.samples:
                unscraped.append(job)
            down += [
                f"target {job} on {x.labels.get('instance', '?')} is down"
                for x in up.samples
                if x.value == 0
            ]
        if down:
            return Why("target_down", "; ".join(down))
        if name is not None and name not in self.names():
            if name.startswith(GPU_PREFIX) and name != series.GPU_PRESENT and self.no_gpu():
                return Why("no_gpu", "no GPU on this machine")
            if name.startswith(RDMA_SERIES) and self.no_rdma():
                return Why("no_rdma", "no RDMA device on this machine")
            if unscraped:
                return Why(
                    "no_target",
                    f"Prometheus has no target of job {', '.join(unscraped)}, which would "
                    f"export {name}",
                )
            return Why("not_exported", f"nobody exports {name}")
        return Why("no_data", f"no series matches {s.text} now")

    def idle(self, s: Selector) -> Why | None:
        """Why a range selector `s[range]` gives a rate nothing: too few samples, or
        counters that did not move. None when it has moved."""
        window = f"{s.text}[{s.range}]"
        counts = self.query(f"count_over_time({window})")
        if not any(x.value >= 2 for x in counts.samples):
            return Why(
                "too_few_samples",
                f"too few samples yet: Prometheus holds fewer than two of {s.text} in the last "
                f"{s.range}",
            )
        moved = self.query(f"increase({window}) > 0")
        if moved.has_data:
            return None
        return Why(
            "no_traffic",
            f"no traffic yet: {s.text} did not increase in the last {s.range}",
            s.text,
            s.range,
        )

    def jobs_for(self, s: Selector) -> list[str]:
        """The scrape jobs that serve (or would serve) the series of `s`: its `job` matcher;
        else the jobs that served this name, or names of its prefix, in the last hour; else
        the rendered scrape job named like the prefix (`vllm:` -> vllm)."""
        job = s.label("job")
        if job is not None:
            return [job]
        name = s.metric
        if name is None:
            return []
        key = _prefix(name)
        if key not in self._job_of:
            jobs = self.prom.label_values("job", s.text, JOB_LOOKBACK_S)
            if not jobs:
                jobs = self.prom.label_values("job", f'{{__name__=~"{key}.+"}}', JOB_LOOKBACK_S)
            if not jobs:
                jobs = [j for j in self.jobs if j == key.rstrip(":_")]
            self._job_of[key] = sorted(jobs)
        return self._job_of[key]

    def no_gpu(self) -> bool:
        present = self.query(series.GPU_PRESENT).samples
        return bool(present) and all(x.value == 0 for x in present)

    def no_rdma(self) -> bool:
        if not self.rdma_expected:
            return True
        return not any(n.startswith(RDMA_PREFIX) for n in self.names())


def check(
    prom: Prometheus,
    expressions: list[Expression],
    *,
    scrape_interval: str = "15s",
    jobs: list[str] | None = None,
    rdma_expected: bool = False,
    recipe: str | None = None,
) -> CheckReport:
    """Evaluate every expression (see the module docstring). PrometheusUnreachable when
    Prometheus does not answer."""
    checker = Checker(prom, scrape_interval=scrape_interval, jobs=jobs, rdma_expected=rdma_expected)
    findings = []
    for e in expressions:
        try:
            findings.append(checker.check(e))
        except QueryError as exc:  # a diagnostic query refused: say so, go on
            query = substitute(e.expr, scrape_interval)
            findings.append(Finding(e.expr, e.source, False, exc.message, "query_error", query))
    return CheckReport(prom.url, findings, recipe)
