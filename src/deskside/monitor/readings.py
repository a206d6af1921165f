"""Where `deskside top` reads its numbers: Prometheus (instant queries, rates over 1m) or,
when it does not answer, the /metrics endpoints themselves (the engine's, and on every
node deskside's exporter and node_exporter), with rates from two scrapes some seconds
apart. Both answer the same two questions: the current samples of a series name, and
their per-second rates. Every sample carries the label `node`."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import httpx
from prometheus_client.parser import text_string_to_metric_families

from deskside.httpclient import within
from deskside.monitor.prom_api import Prometheus, Sample

RATE_WINDOW = "1m"
SCRAPE_TIMEOUT = 3.0


class Readings(Protocol):
    source: str

    def values(self, name: str) -> list[Sample]:
        """The samples of `name` now (gauges, and counters' totals)."""
        ...

    def rates(self, name: str) -> list[Sample]:
        """Per-second rates of the counter `name` (none while unknown)."""
        ...

    def names(self) -> set[str]:
        """Every series name there is."""
        ...


class PromReadings:
    source = "prometheus"

    def __init__(self, prom: Prometheus) -> None:
        self.prom = prom
        self._names: set[str] | None = None

    def values(self, name: str) -> list[Sample]:
        return self.prom.query(name).samples

    def rates(self, name: str) -> list[Sample]:
        return self.prom.query(f"rate({name}[{RATE_WINDOW}])").samples

    def names(self) -> set[str]:
        if self._names is None:
            self._names = set(self.prom.label_values("__name__"))
        return self._names


def parse_exposition(text: str, node: str | None = None) -> list[tuple[str, Sample]]:
    """(sample name, sample) of a /metrics text; `node` is added as the label `node` where
    the sample has none. ValueError for text that is not an exposition."""
    found = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = {str(k): str(v) for k, v in s.labels.items()}
            if node is not None:
                labels.setdefault("node", node)
            found.append((s.name, Sample(labels, float(s.value))))
    return found


@dataclass
class Scrape:
    """Samples of several endpoints read at about the same time."""

    at: float  # time.monotonic() seconds
    samples: dict[str, list[Sample]] = field(default_factory=dict)

    def add(self, pairs: Iterable[tuple[str, Sample]]) -> None:
        for name, sample in pairs:
            self.samples.setdefault(name, []).append(sample)


def _key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


class EndpointReadings:
    """Readings from the latest scrape, rates against the one before (if any)."""

    source = "endpoints"

    def __init__(self, latest: Scrape, previous: Scrape | None = None) -> None:
        self.latest = latest
        self.previous = previous

    def values(self, name: str) -> list[Sample]:
        return list(self.latest.samples.get(name, []))

    def rates(self, name: str) -> list[Sample]:
        if self.previous is None or self.latest.at <= self.previous.at:
            return []
        dt = self.latest.at - self.previous.at
        before = {_key(s.labels): s.value for s in self.previous.samples.get(name, [])}
        found = []
        for s in self.latest.samples.get(name, []):
            old = before.get(_key(s.labels))
            if old is None:
                continue
            delta = s.value - old if s.value >= old else s.value  # a counter reset
            found.append(Sample(s.labels, delta / dt))
        return found

    def names(self) -> set[str]:
        return set(self.latest.samples)


@dataclass(frozen=True)
class Endpoint:
    what: str  # engine, exporter, node_exporter
    node: str
    url: str  # the /metrics URL


def scrape(client: httpx.Client, endpoints: list[Endpoint]) -> tuple[Scrape, list[str]]:
    """Every endpoint's /metrics now; the notes say which did not answer."""
    result = Scrape(time.monotonic())
    notes = []
    for ep in endpoints:
        try:
            r = client.get(ep.url, timeout=SCRAPE_TIMEOUT, extensions=within(SCRAPE_TIMEOUT))
            r.raise_for_status()
            result.add(parse_exposition(r.text, ep.node))
        except httpx.HTTPError as exc:
            notes.append(f"{ep.node}: {ep.what} at {ep.url} does not answer ({type(exc).__name__})")
        except (ValueError, TypeError, IndexError, KeyError, AttributeError):
            # prometheus_client's parser raises more than ValueError on some garbage
            notes.append(f"{ep.node}: {ep.what} at {ep.url} does not serve Prometheus metrics")
    return result, notes
