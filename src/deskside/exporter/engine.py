"""Engine progress from the engine's own `/metrics` (the head's API server): is it up,
how many tokens it has generated, how many requests run, and how long since the token
counter last moved while requests run (a wedged engine: requests in flight, no tokens).

`fetch` is injectable: tests serve a recorded exposition without a network."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Fetch = Callable[[str], "str | None"]
# why an engine scrape failed (a label value: a closed set)
ERRORS = ("refused", "deadline", "too_large", "http_status", "transport", "no_answer")
"""URL -> the exposition text, or None when the engine does not answer."""

TOKENS = "vllm:generation_tokens_total"
RUNNING = "vllm:num_requests_running"
FOLLOWED = ("vllm:generation_tokens", "vllm:num_requests_running")
TIMEOUT_SECONDS = 2.0
MAX_BYTES = 16 << 20  # vLLM's /metrics is ~100 KiB with every histogram


@dataclass(frozen=True)
class EngineReading:
    up: bool
    tokens: float | None = None  # sum over engines and models
    running: float | None = None
    vllm_version: str | None = None  # a `version` label of a vllm:*_info series
    error: str | None = None  # why it is down: one of ERRORS


class HttpFetch:
    """GET a URL (no proxy from the environment; the whole exchange within
    TIMEOUT_SECONDS and MAX_BYTES): the text of a 200 answer, else None (refused, timed
    out, dripping, an error status, too large).

    One client is kept for the exporter's life: connections are reused between scrapes,
    and the TLS context, which costs ~0.4 s to build with the CA bundle, is built only
    for an https URL (a plain-http client never uses one)."""

    def __init__(self) -> None:
        self._clients: dict[bool, Any] = {}
        self.last_error: str | None = None  # why the last fetch got nothing (ERRORS)

    def _client(self, https: bool) -> Any:
        from deskside.httpclient import Limits, client

        if https not in self._clients:
            limits = Limits(total=TIMEOUT_SECONDS, max_bytes=MAX_BYTES)
            self._clients[https] = client(limits, trust_env=False, verify=https)
        return self._clients[https]

    def __call__(self, url: str) -> str | None:
        import httpx

        from deskside.httpclient import BodyTooLarge, DeadlinePassed

        client = self._client(url.startswith("https:"))
        self.last_error = None
        try:
            response: httpx.Response = client.get(url)
        except (DeadlinePassed, httpx.TimeoutException):
            self.last_error = "deadline"
            return None
        except BodyTooLarge:
            self.last_error = "too_large"
            return None
        except httpx.ConnectError:
            self.last_error = "refused"
            return None
        except httpx.HTTPError:
            self.last_error = "transport"
            return None
        if response.status_code != 200:
            self.last_error = "http_status"
            return None
        return response.content.decode(errors="replace")

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()


def relevant_lines(text: str) -> str:
    """The lines of the families deskside reads: the followed families' samples and
    # HELP/# TYPE lines, and vllm:*_info samples stating a version. vLLM's full
    exposition is ~100 KiB of histograms; parsing all of it on every scrape would cost
    more than everything else the exporter does."""
    keep: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) > 2 and parts[1] in ("HELP", "TYPE") and parts[2].startswith(FOLLOWED):
                keep.append(line)
            continue
        metric = line.split("{", 1)[0].strip().split(None, 1)[0] if line.strip() else ""
        if metric.startswith(FOLLOWED) or (
            metric.startswith("vllm:") and metric.endswith("_info") and "version" in line
        ):
            keep.append(line)
    return "\n".join(keep) + "\n"


def parse_engine(text: str) -> EngineReading:
    """Sum the samples deskside follows; an exposition that does not parse counts as an
    engine that answered with nothing deskside knows (up, no figures)."""
    tokens: float | None = None
    running: float | None = None
    version: str | None = None
    try:
        for family in text_string_to_metric_families(relevant_lines(text)):
            for s in family.samples:
                if s.name == TOKENS:
                    tokens = (tokens or 0.0) + float(s.value)
                elif s.name == RUNNING:
                    running = (running or 0.0) + float(s.value)
                elif s.name.startswith("vllm:") and s.name.endswith("_info") and version is None:
                    version = s.labels.get("version") or s.labels.get("vllm_version")
    except (ValueError, TypeError, IndexError, KeyError, AttributeError):
        # prometheus_client's parser raises more than ValueError on some garbage
        return EngineReading(up=True)
    return EngineReading(up=True, tokens=tokens, running=running, vllm_version=version)


def read_engine(url: str, fetch: Fetch) -> EngineReading:
    text = fetch(url)
    if text is None:
        why = getattr(fetch, "last_error", None)
        return EngineReading(up=False, error=why if why in ERRORS else "no_answer")
    return parse_engine(text)


class Progress:
    """Seconds since the token counter last increased, while requests run.

    The exporter remembers the counter and when it last changed (a counter that goes
    down, an engine restart, counts as a change). With 0 requests running the answer is 0:
    an idle engine is not stuck. The first sample starts the clock, so a counter already
    still when the exporter starts is counted from then. `once` (a single sample, no
    memory): 0 when nothing runs, None (no series) when requests run."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, once: bool = False) -> None:
        self._clock = clock
        self._once = once
        self._tokens: float | None = None
        self._changed_at: float | None = None

    def observe(self, reading: EngineReading) -> float | None:
        if not reading.up or reading.running is None:
            return None
        now = self._clock()
        if reading.tokens is not None and (
            self._tokens is None or reading.tokens != self._tokens or self._changed_at is None
        ):
            self._tokens = reading.tokens
            self._changed_at = now
        if reading.running <= 0:
            return 0.0
        if self._once or self._changed_at is None:
            return None
        return max(now - self._changed_at, 0.0)
