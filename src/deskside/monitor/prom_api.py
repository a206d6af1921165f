"""Prometheus's HTTP API, the few calls deskside makes: instant queries, label values and
the active alerts. Every failure to reach or understand Prometheus is a
`PrometheusUnreachable` that says where and how to fix it."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from deskside.errors import DesksideError
from deskside.httpclient import METRICS, Limits, client, within

TIMEOUT = 10.0
UNREACHABLE_HINT = (
    "start the cluster with monitoring enabled (monitoring.enabled: true in the recipe, then "
    "`deskside up RECIPE`), or point at a running Prometheus with --prometheus URL"
)

Labels = dict[str, str]


def make_client() -> httpx.Client:
    """The HTTP client deskside's monitoring commands use (tests replace it): every
    exchange within TIMEOUT seconds in all and 16 MiB."""
    return client(Limits(total=TIMEOUT, max_bytes=METRICS.max_bytes))


class PrometheusUnreachable(DesksideError):
    """Prometheus does not answer, or answers something that is not its API."""


class QueryError(DesksideError):
    """Prometheus refused a query (a syntax or evaluation error)."""


@dataclass(frozen=True)
class Sample:
    labels: Labels
    value: float

    @property
    def is_number(self) -> bool:
        return not math.isnan(self.value)


@dataclass(frozen=True)
class Result:
    """An instant query's answer: its samples (a scalar is one sample without labels)."""

    kind: str  # vector, scalar, matrix, string
    samples: list[Sample] = field(default_factory=list)

    @property
    def has_data(self) -> bool:
        """At least one sample that is a number (NaN is no data)."""
        return any(s.is_number for s in self.samples)


def _value(raw: Any) -> float:
    try:
        return float(raw)
    except (TypeError, ValueError):
        return math.nan


def parse_result(data: dict[str, Any]) -> Result:
    kind = str(data.get("resultType", ""))
    raw = data.get("result")
    if kind == "vector" and isinstance(raw, list):
        return Result(kind, [Sample(dict(r.get("metric", {})), _value(r["value"][1])) for r in raw])
    if kind == "matrix" and isinstance(raw, list):
        return Result(
            kind,
            [
                Sample(dict(r.get("metric", {})), _value(r["values"][-1][1]))
                for r in raw
                if r["values"]
            ],
        )
    if kind == "scalar" and isinstance(raw, list):
        return Result(kind, [Sample({}, _value(raw[1]))])
    return Result(kind or "string")


@dataclass(frozen=True)
class Alert:
    name: str
    state: str  # firing, pending
    labels: Labels
    summary: str | None


class Prometheus:
    """One Prometheus server, reached with `client` (tests pass an httpx.MockTransport)."""

    def __init__(self, url: str, client: httpx.Client | None = None) -> None:
        self.url = url.rstrip("/")
        self.client = client or make_client()

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Prometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, path: str, params: dict[str, str], timeout: float = TIMEOUT) -> Any:
        where = f"{self.url}{path}"
        try:
            r = self.client.get(where, params=params, timeout=timeout, extensions=within(timeout))
        except httpx.HTTPError as exc:
            raise PrometheusUnreachable(
                f"Prometheus at {self.url} does not answer ({type(exc).__name__}: {exc})",
                hint=UNREACHABLE_HINT,
            ) from None
        try:
            body = r.json()
        except (ValueError, RecursionError):
            body = None
        if not isinstance(body, dict) or "status" not in body:
            raise PrometheusUnreachable(
                f"{self.url} answered {path} with HTTP {r.status_code}, not Prometheus's API",
                hint=UNREACHABLE_HINT,
            )
        if body["status"] != "success":
            error = body.get("error") or f"HTTP {r.status_code}"
            raise QueryError(f"Prometheus refused {path}: {error}")
        return body.get("data")

    def _shape(self, path: str) -> PrometheusUnreachable:
        return PrometheusUnreachable(
            f"{self.url} answered {path} in a shape Prometheus's API never has",
            hint=UNREACHABLE_HINT,
        )

    def query(self, expr: str) -> Result:
        """An instant query, now."""
        data = self._get("/api/v1/query", {"query": expr})
        try:
            return parse_result(data if isinstance(data, dict) else {})
        except (AttributeError, KeyError, IndexError, TypeError, ValueError):
            raise self._shape("/api/v1/query") from None

    def label_values(
        self, label: str, match: str | None = None, lookback_s: float | None = None
    ) -> list[str]:
        """The values of `label` (`__name__`: every metric name Prometheus holds), of the
        series matching `match` if given, seen in the last `lookback_s` seconds if given."""
        params: dict[str, str] = {}
        if match is not None:
            params["match[]"] = match
        if lookback_s is not None:
            now = time.time()
            params.update(start=f"{now - lookback_s:.3f}", end=f"{now:.3f}")
        data = self._get(f"/api/v1/label/{label}/values", params)
        return [str(v) for v in data] if isinstance(data, list) else []

    def alerts(self) -> list[Alert]:
        """Active alerts (firing and pending)."""
        data = self._get("/api/v1/alerts", {})
        try:
            return _alerts(data)
        except (AttributeError, KeyError, IndexError, TypeError, ValueError):
            raise self._shape("/api/v1/alerts") from None

    def ready(self, timeout: float = 2.0) -> bool:
        """Whether the API answers at all, within `timeout` seconds."""
        try:
            self._get("/api/v1/query", {"query": "1"}, timeout)
        except DesksideError:
            return False
        return True


def _alerts(data: Any) -> list[Alert]:
    raw = data.get("alerts", []) if isinstance(data, dict) else []
    found = []
    for a in raw:
        labels = {str(k): str(v) for k, v in dict(a.get("labels", {})).items()}
        summary = dict(a.get("annotations", {})).get("summary")
        found.append(
            Alert(
                labels.get("alertname", "?"),
                str(a.get("state", "?")),
                labels,
                str(summary) if summary is not None else None,
            )
        )
    return found
