"""`deskside monitor check`: each reason diagnosed from recorded Prometheus answers, rules
healthy while not firing, the expressions collected from the rendered dashboards and rules,
and Prometheus that does not answer."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from deskside.exporter import series
from deskside.monitor.check import CheckReport, check
from deskside.monitor.prom_api import Prometheus, PrometheusUnreachable
from deskside.monitor.sources import Expression, dashboard_expressions, rendered

from .prom_fake import FakeProm
from .render_cases import LOCAL_TINY, load_and_plan

URL = "http://prom.test:9090"
UP = {"job": "x", "instance": "10.77.0.1:9478"}


def run(fake: FakeProm, *exprs: Expression, **kw: Any) -> CheckReport:
    kw.setdefault("jobs", ["vllm", "node", "deskside", "prometheus"])
    with Prometheus(URL, fake.client()) as prom:
        return check(prom, list(exprs), scrape_interval="15s", **kw)


def dash(expr: str) -> Expression:
    return Expression(expr, "dashboard:panel/A", "dashboard")


def rule(expr: str, name: str = "R") -> Expression:
    return Expression(expr, f"rule:{name}", "rule")


def one(fake: FakeProm, e: Expression, **kw: Any) -> tuple[bool, str | None, str | None]:
    [f] = run(fake, e, **kw).findings
    return f.has_data, f.reason_code, f.reason


def test_data_present() -> None:
    fake = FakeProm(
        vectors={
            "max(vllm:kv_cache_usage_perc)": [({}, 0.25)],
            "vllm:kv_cache_usage_perc": [({"node": "node0"}, 0.25)],
        }
    )
    report = run(fake, dash("max(vllm:kv_cache_usage_perc)"))
    assert one(fake, dash("max(vllm:kv_cache_usage_perc)")) == (True, None, None)
    assert report.ok and report.summary()["with_data"] == 1


def test_grafana_variables_are_replaced_before_asking() -> None:
    fake = FakeProm(vectors={"sum(rate(a_total[1m]))": [({}, 1.0)], "a_total": [({}, 5.0)]})
    assert one(fake, dash("sum(rate(a_total[$__rate_interval]))"))[0] is True
    assert fake.asked[0] == "sum(rate(a_total[1m]))"


def gpu_fake(present: list[float]) -> FakeProm:
    return FakeProm(
        names=[series.GPU_PRESENT, series.MEMORY_AVAILABLE, "up"],
        vectors={
            series.GPU_PRESENT: [({"node": f"node{i}"}, v) for i, v in enumerate(present)],
            'up{job="deskside"}': [({**UP, "job": "deskside"}, 1)],
        },
        jobs={'{__name__=~"deskside_.+"}': ["deskside"]},
    )


def test_gpu_series_without_a_gpu_is_declared() -> None:
    report = run(gpu_fake([0, 0]), dash(series.GPU_POWER))
    [f] = report.findings
    assert (f.has_data, f.reason_code, f.reason) == (False, "no_gpu", "no GPU on this machine")
    assert f.empty_selectors == [series.GPU_POWER]
    assert report.ok  # a declared reason
    assert report.summary() == {
        "expressions": 1,
        "with_data": 0,
        "declared": 1,
        "problems": 0,
        "firing": 0,
    }


def test_gpu_series_missing_while_a_gpu_is_present_is_a_problem() -> None:
    report = run(gpu_fake([0, 1]), dash(series.GPU_POWER))
    [f] = report.findings
    assert (f.reason_code, f.reason) == ("not_exported", f"nobody exports {series.GPU_POWER}")
    assert not report.ok


def test_gpu_present_itself_is_never_excused() -> None:
    fake = gpu_fake([0])
    fake.names.remove(series.GPU_PRESENT)
    del fake.vectors[series.GPU_PRESENT]
    assert one(fake, dash(series.GPU_PRESENT))[1] == "not_exported"


RDMA = "rate(node_infiniband_port_errors_received_total[$__rate_interval])"


@pytest.mark.parametrize(
    ("rdma_expected", "names", "code"),
    [
        (False, ["node_infiniband_port_data_received_bytes_total"], "no_rdma"),  # socket fabric
        (True, ["node_memory_MemTotal_bytes"], "no_rdma"),  # roce, but no infiniband series
        (True, ["node_infiniband_port_data_received_bytes_total"], "not_exported"),
    ],
)
@pytest.mark.parametrize("expr", [RDMA, series.GID_INDEX, f"max({series.GID_DRIFT}) > 0"])
def test_rdma_series(rdma_expected: bool, names: list[str], code: str, expr: str) -> None:
    fake = FakeProm(
        names=names,
        vectors={
            'up{job="node"}': [({**UP, "job": "node"}, 1)],
            'up{job="deskside"}': [({**UP, "job": "deskside"}, 1)],
        },
    )
    has, got, reason = one(fake, dash(expr), rdma_expected=rdma_expected)
    assert (has, got) == (False, code)
    if code == "no_rdma":
        assert reason == "no RDMA device on this machine"


def test_target_down_comes_first() -> None:
    """The job of a `vllm:` series is found by its prefix in the rendered configuration when
    Prometheus has never seen it; the down target is named."""
    fake = FakeProm(
        names=["up"],
        vectors={
            'up{job="vllm"}': [({"job": "vllm", "instance": "10.77.0.1:8888"}, 0)],
        },
    )
    assert one(fake, dash("sum(vllm:num_requests_running)")) == (
        False,
        "target_down",
        "target vllm on 10.77.0.1:8888 is down",
    )


def test_job_matcher_names_the_job() -> None:
    fake = FakeProm(
        vectors={'up{job="node"}': [({"job": "node", "instance": "10.77.0.2:9100"}, 0)]}
    )
    _, code, reason = one(fake, dash('node_memory_MemAvailable_bytes{job="node"}'))
    assert (code, reason) == ("target_down", "target node on 10.77.0.2:9100 is down")


def test_no_target_of_the_job() -> None:
    fake = FakeProm(names=["up"])
    _, code, reason = one(fake, dash("sum(vllm:num_requests_running)"))
    assert code == "no_target"
    assert reason == (
        "Prometheus has no target of job vllm, which would export vllm:num_requests_running"
    )


def test_unknown_job_and_unknown_name() -> None:
    assert one(FakeProm(names=["up"]), dash("sum(mystery_total)")) == (
        False,
        "not_exported",
        "nobody exports mystery_total",
    )


def test_known_name_without_series_now() -> None:
    fake = FakeProm(
        names=["vllm:num_requests_running"],
        vectors={'up{job="vllm"}': [({"job": "vllm", "instance": "h:8888"}, 1)]},
        jobs={"vllm:num_requests_running": ["vllm"]},
    )
    assert one(fake, dash('sum(vllm:num_requests_running{model_name="other"})')) == (
        False,
        "no_data",
        'no series matches vllm:num_requests_running{model_name="other"} now',
    )


HIT_RATE = "sum(rate(hits_total[1m])) / sum(rate(queries_total[1m]))"


def idle_fake(samples: float, moved: bool) -> FakeProm:
    vectors: dict[str, Any] = {
        HIT_RATE: [({}, "NaN")],  # 0/0: counters that did not move
        "hits_total": [({"node": "n"}, 0)],
        "queries_total": [({"node": "n"}, 0)],
        "count_over_time(hits_total[1m])": [({"node": "n"}, samples)],
        "count_over_time(queries_total[1m])": [({"node": "n"}, samples)],
    }
    if moved:
        vectors["increase(hits_total[1m]) > 0"] = [({"node": "n"}, 3)]
        vectors["increase(queries_total[1m]) > 0"] = [({"node": "n"}, 3)]
    return FakeProm(names=["hits_total", "queries_total"], vectors=vectors)


def test_nan_is_no_data_and_unmoved_counters_are_no_traffic() -> None:
    has, code, reason = one(idle_fake(4, moved=False), dash(HIT_RATE))
    assert (has, code) == (False, "no_traffic")
    assert reason == "no traffic yet: hits_total, queries_total did not increase in the last 1m"


def test_too_few_samples_for_a_rate() -> None:
    _, code, reason = one(idle_fake(1, moved=False), dash(HIT_RATE))
    assert code == "too_few_samples"
    assert reason is not None and "fewer than two" in reason


def test_series_that_moved_but_still_no_result_is_no_data() -> None:
    _, code, reason = one(idle_fake(4, moved=True), dash(HIT_RATE))
    assert code == "no_data" and reason is not None and "every series it reads exists" in reason


def test_rule_not_firing_is_healthy() -> None:
    fake = FakeProm(vectors={'up{job="vllm"}': [({"job": "vllm", "instance": "h:8888"}, 1)]})
    [f] = run(fake, rule('up{job="vllm"} == 0', "EngineDown")).findings
    assert (f.has_data, f.firing, f.reason) == (True, False, None)


def test_rule_firing() -> None:
    down = [({"job": "vllm", "instance": "h:8888"}, 0)]
    fake = FakeProm(vectors={'up{job="vllm"}': down, 'up{job="vllm"} == 0': down})
    [f] = run(fake, rule('up{job="vllm"} == 0', "EngineDown")).findings
    assert (f.has_data, f.firing) == (True, True)
    assert run(fake, rule('up{job="vllm"} == 0')).summary()["firing"] == 1


def test_rule_reading_a_missing_series_has_no_data() -> None:
    fake = FakeProm(vectors={'up{job="node"}': [({"job": "node", "instance": "n1:9100"}, 0)]})
    expr = 'node_memory_MemAvailable_bytes{job="node"} / node_memory_MemTotal_bytes{job="node"}'
    [f] = run(fake, rule(f"{expr} < 0.05", "MemoryHeadroomLow")).findings
    assert (f.has_data, f.firing, f.reason_code) == (False, False, "target_down")
    assert f.reason == "target node on n1:9100 is down"  # said once for both selectors
    assert len(f.empty_selectors) == 2


def test_the_worst_reason_names_the_expression() -> None:
    fake = gpu_fake([0])
    _, code, reason = one(fake, dash(f"{series.GPU_POWER} + on(node) other_thing_total"))
    assert code == "not_exported"
    assert reason == "no GPU on this machine; nobody exports other_thing_total"


def test_refused_query() -> None:
    fake = FakeProm(refused={"sum(": "parse error: unexpected end of input"})
    has, code, reason = one(fake, dash("sum("))
    assert (has, code) == (False, "query_error")
    assert reason is not None and "parse error" in reason


def test_json_shape() -> None:
    fake = gpu_fake([0])
    fake.vectors['up{job="vllm"}'] = [({"job": "vllm", "instance": "h:8888"}, 1)]
    data = run(
        fake, dash(series.GPU_POWER), rule('up{job="vllm"} == 0', "EngineDown"), recipe="r"
    ).to_dict()
    assert set(data) == {"recipe", "prometheus", "ok", "summary", "expressions"}
    gpu, engine = data["expressions"]
    assert {"expr", "source", "has_data", "reason"} <= set(gpu) and "firing" not in gpu
    assert gpu["reason"] == "no GPU on this machine" and gpu["has_data"] is False
    assert engine["reason"] is None and engine["firing"] is False
    assert data["ok"] is True and data["prometheus"] == URL


def test_prometheus_not_answering() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client = httpx.Client(transport=httpx.MockTransport(refuse))
    with pytest.raises(PrometheusUnreachable) as info:
        check(Prometheus(URL, client), [dash("up")])
    assert URL in info.value.message and "does not answer" in info.value.message
    assert info.value.hint is not None and "deskside up" in info.value.hint


def test_something_else_answering() -> None:
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(404, text="no")))
    with pytest.raises(PrometheusUnreachable, match="not Prometheus's API"):
        check(Prometheus(URL, client), [dash("up")])


# ------------------------------------------------------------------------ the sources


def test_dashboard_expressions_walk_collapsed_rows() -> None:
    board = {
        "panels": [
            {
                "type": "row",
                "title": "r",
                "panels": [{"title": "In row", "targets": [{"expr": "a"}]}],
            },
            {"title": "Top", "targets": [{"expr": "b", "refId": "Z"}, {"expr": ""}, {}]},
        ]
    }
    assert [(e.expr, e.source) for e in dashboard_expressions(board)] == [
        ("a", "dashboard:In row/A"),
        ("b", "dashboard:Top/Z"),
    ]


def test_rendered_recipe_gives_every_panel_target_and_rule() -> None:
    from deskside.render.context import build_context
    from deskside.render.grafana import dashboard_json
    from deskside.render.prometheus import alert_rules

    recipe, plan = load_and_plan(LOCAL_TINY)
    mon = rendered(recipe, LOCAL_TINY, plan)
    ctx = build_context(recipe, LOCAL_TINY, plan)
    targets = [t["expr"] for p in dashboard_json(ctx)["panels"] for t in p.get("targets", [])]
    rules = [r for g in alert_rules(ctx)["groups"] for r in g["rules"]]
    assert [e.expr for e in mon.expressions if e.kind == "dashboard"] == targets
    assert [e.source for e in mon.expressions if e.kind == "rule"] == [
        f"rule:{r['alert']}" for r in rules
    ]
    assert "dashboard:KV cache usage/A" in {e.source for e in mon.expressions}
    assert mon.scrape_interval == recipe.monitoring.scrape_interval
    assert {"vllm", "node", "deskside"} <= set(mon.jobs)
