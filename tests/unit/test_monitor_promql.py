"""The PromQL reader of `deskside monitor check`: tokens, vector selectors (names with
colons, matchers, ranges), what is not a selector, durations and Grafana's variables."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deskside.monitor.promql import (
    Matcher,
    PromQLSyntaxError,
    parse_duration,
    rate_interval,
    selectors,
    substitute,
    tokens,
    unquote,
)


def names(expr: str) -> list[str | None]:
    return [s.metric for s in selectors(expr)]


def test_tokens_kinds() -> None:
    toks = tokens('sum by (le) (rate(vllm:x_bucket{a="b\\"c"}[5m])) > 0.5e1 # note')
    kinds = [(t.kind, t.text) for t in toks]
    assert ("ident", "vllm:x_bucket") in kinds
    assert ("string", '"b\\"c"') in kinds
    assert ("range", "[5m]") in kinds
    assert ("number", "0.5e1") in kinds
    assert not any(t.text.startswith("#") for t in toks)


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ("vllm:kv_cache_usage_perc", ["vllm:kv_cache_usage_perc"]),
        ("max(vllm:kv_cache_usage_perc)", ["vllm:kv_cache_usage_perc"]),
        (
            "histogram_quantile(0.95, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket"
            "[1m])))",
            ["vllm:e2e_request_latency_seconds_bucket"],
        ),
        ("sum(rate(a_total[1m])) by (le, node) / on (node) group_left (x) b", ["a_total", "b"]),
        ("sum without (instance) (a) unless ignoring (job) b and c or d", ["a", "b", "c", "d"]),
        ("a > bool 1 and b == bool 0", ["a", "b"]),
        ("atan2(a, b)", ["a", "b"]),
        ("a atan2 b", ["a", "b"]),
        ("rate(a[5m] offset 1h) + b offset 30s", ["a", "b"]),
        ("max_over_time(rate(a[1m])[30m:1m])", ["a"]),
        ("max_over_time(rate(a[1m])[30m:])", ["a"]),
        ("a @ start() + b @ 1609746000", ["a", "b"]),
        ('label_replace(up{job="x"}, "dst", "$1", "src", "(.*)")', ["up"]),
        ('count_values("version", build_info)', ["build_info"]),
        ("topk(5, a) + quantile(0.9, b) + Inf + NaN + 0x1F + -1.5", ["a", "b"]),
        ('{__name__="vllm:x", job="vllm"}', ["vllm:x"]),
        ('{__name__=~"node_.*"}', [None]),
        ("scalar(sum(rate(d[1m])))", ["d"]),
        ("vector(1)", []),
        ("time() - process_start_time_seconds", ["process_start_time_seconds"]),
        (":colon:start", [":colon:start"]),
        ("1 + 2 * 3", []),
        ("sum(x) by (le) > 0", ["x"]),
    ],
)
def test_selector_names(expr: str, want: list[str | None]) -> None:
    assert names(expr) == want


def test_selector_text_matchers_and_range() -> None:
    expr = 'rate(node_infiniband_port_data_received_bytes_total{job="node", device!~"mlx5_.*"}[2m])'
    [s] = selectors(expr)
    assert s.name == "node_infiniband_port_data_received_bytes_total"
    assert s.text == (
        'node_infiniband_port_data_received_bytes_total{job="node", device!~"mlx5_.*"}'
    )
    assert s.matchers == (Matcher("job", "=", "node"), Matcher("device", "!~", "mlx5_.*"))
    assert s.range == "2m" and s.label("job") == "node" and s.label("device") is None


def test_braces_and_commas_inside_strings_do_not_end_matchers() -> None:
    [s] = selectors('m{a="}", b=\'x,y\', c=`{raw}`, d="q\\"uote"}')
    assert [m.value for m in s.matchers] == ["}", "x,y", "{raw}", 'q"uote']


def test_subquery_range_is_not_a_selector_range() -> None:
    [s] = selectors("max_over_time(a[5m:30s])")
    assert s.range is None


@pytest.mark.parametrize("bad", ['a{b="c"', "sum(a", "a{b=c}", 'a{b="c}', "a ! b", "a{=}"])
def test_malformed(bad: str) -> None:
    with pytest.raises(PromQLSyntaxError):
        selectors(bad)


def test_unquote() -> None:
    assert unquote('"a\\nb\\\\"') == "a\nb\\"
    assert unquote("`a\\nb`") == "a\\nb"


def test_durations() -> None:
    assert parse_duration("15s") == 15
    assert parse_duration("1m30s") == 90
    assert parse_duration("500ms") == 0.5
    with pytest.raises(ValueError):
        parse_duration("15")
    assert rate_interval("15s") == "1m"
    assert rate_interval("30s") == "2m"
    assert rate_interval("1s") == "1m"
    assert rate_interval("25s") == "100s"


def test_substitute_grafana_variables() -> None:
    expr = "rate(a[$__rate_interval]) + rate(b[${__interval}]) + c[[[__range]]] * $__range_s"
    assert substitute(expr, "15s") == "rate(a[1m]) + rate(b[15s]) + c[1h] * 3600"
    assert substitute('x{ds="$datasource"}', "15s") == 'x{ds="$datasource"}'
    assert substitute("$__interval_ms", "1m") == "60000"


# ---------------------------------------------------------------------- property-based

NAME = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True).filter(
    lambda n: (
        n.lower() not in {"inf", "nan", "by", "without", "on", "ignoring", "bool"}
        and n not in {"and", "or", "unless", "atan2", "offset", "group_left", "group_right"}
    )
)
LABEL = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,10}", fullmatch=True)
VALUE = st.text(alphabet=st.characters(codec="ascii", exclude_categories=("Cc",)), max_size=12)


def _quote(v: str) -> str:
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


Case = tuple[str, str, str | None, list[tuple[str, str, str]]]  # name, text, range, matchers


@st.composite
def selector_text(draw: st.DrawFn) -> Case:
    name = draw(NAME)
    matchers = draw(
        st.lists(st.tuples(LABEL, st.sampled_from(["=", "!=", "=~", "!~"]), VALUE), max_size=3)
    )
    text = name
    if matchers or draw(st.booleans()):
        text += "{" + ", ".join(f"{lbl}{op}{_quote(v)}" for lbl, op, v in matchers) + "}"
    rng = draw(st.sampled_from([None, "1m", "5m", "30s", "1h30m"]))
    return name, text, rng, matchers


@st.composite
def expression(draw: st.DrawFn, depth: int = 0) -> tuple[str, list[str]]:
    if depth > 2 or draw(st.booleans()):
        name, text, rng, _ = draw(selector_text())
        return text + (f"[{rng}]" if rng else ""), [name]
    kind = draw(st.sampled_from(["func", "agg", "binop", "num"]))
    inner, found = draw(expression(depth + 1))
    if kind == "func":
        fn = draw(st.sampled_from(["rate", "abs", "scalar", "histogram_quantile(0.9,"]))
        return (f"{fn}({inner})" if not fn.endswith(",") else f"{fn} {inner})"), found
    if kind == "agg":
        labels = ", ".join(draw(st.lists(LABEL, min_size=1, max_size=3)))
        agg = draw(st.sampled_from(["sum", "max", "avg", "count"]))
        if draw(st.booleans()):
            return f"{agg} by ({labels}) ({inner})", found
        return f"{agg}({inner}) without ({labels})", found
    if kind == "num":
        return f"({inner}) * 8", found
    other, more = draw(expression(depth + 1))
    op = draw(st.sampled_from(["+", "/", "and", "or", "unless", "> bool", "== on (node)"]))
    return f"({inner}) {op} ({other})", found + more


@settings(max_examples=150, deadline=None)
@given(expression())
def test_selectors_found_in_any_composition(case: tuple[str, list[str]]) -> None:
    expr, want = case
    assert names(expr) == want


@settings(max_examples=150, deadline=None)
@given(selector_text())
def test_selector_round_trip(case: Case) -> None:
    name, text, rng, matchers = case
    [s] = selectors(f"sum(rate({text}[{rng}]))" if rng else f"max({text})")
    assert s.name == name
    assert [(m.label, m.op, m.value) for m in s.matchers] == matchers
    assert (s.text, s.range) == (text, rng)
