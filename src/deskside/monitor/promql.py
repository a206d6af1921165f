"""A small PromQL reader: enough to find the vector selectors an expression reads.

`tokens(expr)` splits PromQL into tokens; `selectors(expr)` returns every vector selector
(a metric name such as `vllm:kv_cache_usage_perc`, its `{...}` matchers, and the `[range]`
that may follow) in order of appearance. Function and aggregation names, the keywords
(by, without, on, ignoring, group_left, group_right, bool, and, or, unless, offset, atan2),
the label names of by(...)/without(...)/on(...)/ignoring(...)/group_*(...), strings,
durations and numbers are not selectors.

`substitute(expr, ...)` replaces Grafana's interval variables so that a dashboard's query
can be sent to Prometheus as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool"}
    | {"and", "or", "unless", "atan2", "offset"}
)
LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
NUMBER_WORDS = frozenset({"inf", "nan"})

_SPAN = r"(?:[0-9]+(?:ms|s|m|h|d|w|y))+"
_DURATION = _SPAN + r"(?![A-Za-z0-9_:])"
_NUMBER = r"0[xX][0-9a-fA-F]+|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?(?![A-Za-z0-9_:])"
_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[\s*"""
    + _SPAN
    + r"""\s*(?::\s*(?:"""
    + _SPAN
    + r""")?\s*)?\])
  | (?P<duration>"""
    + _DURATION
    + r""")
  | (?P<number>"""
    + _NUMBER
    + r""")
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=@,(){}\[\]])
    """,
    re.VERBOSE | re.DOTALL,
)


class PromQLSyntaxError(ValueError):
    """Text that is not PromQL this reader understands."""


@dataclass(frozen=True)
class Token:
    kind: str  # string, range (`[5m]`, `[30m:1m]`), duration, number, ident, op
    text: str
    start: int
    end: int


def tokens(expr: str) -> list[Token]:
    """The tokens of `expr` (blanks and comments dropped). PromQLSyntaxError for a
    character that starts no token (an unterminated string, a stray `!`)."""
    out: list[Token] = []
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise PromQLSyntaxError(f"cannot read {expr[pos : pos + 20]!r} at offset {pos}")
        kind = m.lastgroup or "op"
        if kind not in ("space", "comment"):
            out.append(Token(kind, m.group(), m.start(), m.end()))
        pos = m.end()
    return out


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str  # =, !=, =~, !~
    value: str


@dataclass(frozen=True)
class Selector:
    """One vector selector: `name{matchers}[range]` as written in the expression."""

    name: str | None  # None: `{__name__=~"..."}` or another nameless selector
    matchers: tuple[Matcher, ...]
    text: str  # the instant selector as written: name and matchers, no range
    range: str | None = None  # the range of a range selector: "5m"

    def label(self, label: str) -> str | None:
        """The value an equality matcher gives `label`, else None."""
        for m in self.matchers:
            if m.label == label and m.op == "=":
                return m.value
        return None

    @property
    def metric(self) -> str | None:
        """The metric name, whether written before the braces or as `__name__="..."`."""
        return self.name or self.label("__name__")


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}


def unquote(text: str) -> str:
    """The value of a PromQL string literal."""
    body = text[1:-1]
    if text[0] == "`":
        return body
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), body)


def _matchers(toks: list[Token], i: int) -> tuple[tuple[Matcher, ...], int]:
    """Matchers from the `{` at `toks[i]`; returns them and the index after the `}`."""
    found: list[Matcher] = []
    i += 1
    while i < len(toks) and toks[i].text != "}":
        if toks[i].text == ",":
            i += 1
            continue
        if i + 2 >= len(toks):
            raise PromQLSyntaxError("unterminated label matchers")
        label, op, value = toks[i], toks[i + 1], toks[i + 2]
        if label.kind not in ("ident", "string") or op.text not in ("=", "!=", "=~", "!~"):
            raise PromQLSyntaxError(f"bad label matcher at offset {label.start}")
        if value.kind != "string":
            raise PromQLSyntaxError(f"a label matcher's value must be a string at {value.start}")
        name = unquote(label.text) if label.kind == "string" else label.text
        found.append(Matcher(name, op.text, unquote(value.text)))
        i += 3
    if i >= len(toks):
        raise PromQLSyntaxError("unterminated label matchers")
    return tuple(found), i + 1


def _skip_parens(toks: list[Token], i: int) -> int:
    """The index after the `)` that closes the `(` at `toks[i]`."""
    depth = 0
    while i < len(toks):
        if toks[i].text == "(":
            depth += 1
        elif toks[i].text == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise PromQLSyntaxError("unbalanced parentheses")


def _range(toks: list[Token], i: int) -> tuple[str | None, int]:
    """A `[5m]` range at `toks[i]` (not a `[5m:1m]` subquery): its duration and the index
    after it."""
    if i < len(toks) and toks[i].kind == "range" and ":" not in toks[i].text:
        return toks[i].text.strip("[] \t\n"), i + 1
    return None, i


def selectors(expr: str) -> list[Selector]:
    """Every vector selector of `expr`, in order (see the module docstring)."""
    toks = tokens(expr)
    depth = 0
    for tok in toks:
        depth += {"(": 1, ")": -1}.get(tok.text, 0)
        if depth < 0:
            raise PromQLSyntaxError(f"unbalanced ')' at offset {tok.start}")
    if depth:
        raise PromQLSyntaxError("unbalanced parentheses")
    found: list[Selector] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        nxt = toks[i + 1].text if i + 1 < len(toks) else None
        if tok.kind == "ident":
            word = tok.text
            if word in LABEL_LIST_KEYWORDS and nxt == "(":
                i = _skip_parens(toks, i + 1)
                continue
            if word in KEYWORDS or word.lower() in NUMBER_WORDS:
                i += 1
                continue
            if nxt == "(" or nxt in ("by", "without"):  # a function or an aggregation
                i += 1
                continue
            start, end = tok.start, tok.end
            matchers: tuple[Matcher, ...] = ()
            i += 1
            if nxt == "{":
                matchers, i = _matchers(toks, i)
                end = toks[i - 1].end
            rng, i = _range(toks, i)
            found.append(Selector(word, matchers, expr[start:end], rng))
            continue
        if tok.text == "{":  # a selector without a name before its braces
            matchers, after = _matchers(toks, i)
            rng, after2 = _range(toks, after)
            found.append(Selector(None, matchers, expr[tok.start : toks[after - 1].end], rng))
            i = after2
            continue
        i += 1
    return found


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration such as `15s`, `1m30s`, `500ms`."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"([0-9]+)(ms|s|m|h|d|w|y)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a Prometheus duration")
    return sum(int(n) * units[u] for n, u in parts)


def duration(seconds: float) -> str:
    """A Prometheus duration for a whole number of seconds (at least 1s)."""
    s = max(1, round(seconds))
    return f"{s // 60}m" if s % 60 == 0 else f"{s}s"


def rate_interval(scrape_interval: str) -> str:
    """What Grafana's `$__rate_interval` becomes here: four scrape intervals, at least 1m."""
    return duration(max(60.0, 4 * parse_duration(scrape_interval)))


_GRAFANA_VAR = re.compile(
    r"\$\{(__[A-Za-z_]+)(?::[^}]*)?\}|\[\[(__[A-Za-z_]+)\]\]|\$(__[A-Za-z_]+)"
)


def substitute(expr: str, scrape_interval: str, range_: str = "1h") -> str:
    """`expr` with Grafana's time variables replaced: `$__rate_interval` by
    `rate_interval(scrape_interval)`, `$__interval` by the scrape interval, `$__range` by
    `range_` (and their `_ms`/`_s` forms by numbers). Other variables stay as they are."""
    step = parse_duration(scrape_interval)
    span = parse_duration(range_)
    values = {
        "__rate_interval": rate_interval(scrape_interval),
        "__rate_interval_ms": str(round(parse_duration(rate_interval(scrape_interval)) * 1000)),
        "__interval": duration(step),
        "__interval_ms": str(round(step * 1000)),
        "__range": range_,
        "__range_s": str(round(span)),
        "__range_ms": str(round(span * 1000)),
    }

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        return values.get(name, m.group())

    return _GRAFANA_VAR.sub(value, expr)
