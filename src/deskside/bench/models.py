"""The bench's data: its configuration, per-request records and results (pydantic, strict).

Times are seconds from the client's monotonic clock. A request's absolute times
(``sent_s``) count from the run's epoch (the clock reading when the run started); its
other times count from its own ``sent_s``. Token counts come from the server's ``usage``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from deskside.bench.arrivals import Arrivals

SCHEMA_VERSION = "deskside.bench/1"

DEFAULT_PROMPT_LENS: tuple[int, ...] = (256, 2048, 8192, 32768)
DEFAULT_CONCURRENCY: tuple[int, ...] = (1, 2, 4, 6)

Endpoint = Literal["chat", "completions"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BenchConfig(Strict):
    """What to measure and how. Defaults cover the flagship's reference matrix (prompt
    lengths 256 to 32,768 tokens, concurrency 1 to 6)."""

    url: str = Field(description="Server base URL, e.g. http://127.0.0.1:8000")
    model: str | None = Field(None, description="Served model name; default: the server's first")
    endpoint: Endpoint = "chat"
    prompt_lens: list[int] = Field(default_factory=lambda: list(DEFAULT_PROMPT_LENS))
    concurrency: list[int] = Field(default_factory=lambda: list(DEFAULT_CONCURRENCY))
    requests: int | None = Field(
        None, description="Measured requests per cell; default 2 per concurrency slot, >= 4"
    )
    duration_s: float | None = Field(
        None, description="Per-cell time budget: stop issuing new requests after it"
    )
    warmup: int | None = Field(None, description="Warm-up requests per cell; default = concurrency")
    warmup_max_tokens: int = 8
    max_tokens: int = 256
    ignore_eos: bool = True
    shared_prefix: bool = False
    seed: int | None = Field(
        None,
        description="Prompt generator seed; default: a fresh one per run (recorded), so a "
        "repeated run is not served from the prefix cache the previous one filled",
    )
    timeout_s: float = 900.0
    api_key: str | None = Field(None, exclude=True, repr=False)
    tokenizer: str | None = Field(None, description="Local tokenizer (fallback to /tokenize)")
    probe_context: int | None = None
    max_model_len: int | None = None
    probe_max_tokens: int = 16
    extra_body: dict[str, Any] = Field(default_factory=dict)
    scrape_metrics: bool = True
    metrics_url: str | None = None
    max_loop_lag_ms: float = 10.0
    max_client_cpu: float = 0.8
    skip_matrix: bool = False
    request_rates: list[float] | None = Field(
        None,
        description="Open loop: requests per second, one cell per rate (instead of the "
        "concurrency levels); requests leave at their scheduled times whatever the server does",
    )
    arrivals: Arrivals = Field("poisson", description="Open-loop gaps: poisson or constant")
    max_in_flight: int | None = Field(
        None, description="Open loop: a request due while this many are in flight is dropped"
    )
    turns: int = Field(1, description="Turns per conversation (history resent every turn)")
    conversations: int | None = Field(
        None, description="Conversations per cell (default: the cell's concurrency)"
    )
    slo_ttft_s: float | None = Field(None, description="Goodput: a request's TTFT at most this")
    slo_tpot_s: float | None = Field(None, description="Goodput: a request's TPOT at most this")
    slo_e2e_s: float | None = Field(None, description="Goodput: a request's E2E at most this")

    @field_validator("prompt_lens", "concurrency")
    @classmethod
    def _positive(cls, values: list[int]) -> list[int]:
        if not values or any(v < 1 for v in values):
            raise ValueError("needs one or more positive integers")
        return values

    @field_validator("request_rates")
    @classmethod
    def _positive_rates(cls, values: list[float] | None) -> list[float] | None:
        if values is not None and (not values or any(not v > 0 for v in values)):
            raise ValueError("needs one or more positive request rates")
        return values

    @model_validator(mode="after")
    def _modes(self) -> BenchConfig:
        if self.turns < 1 or (self.conversations is not None and self.conversations < 1):
            raise ValueError("turns and conversations must be positive")
        if self.max_in_flight is not None and self.max_in_flight < 1:
            raise ValueError("max_in_flight must be positive")
        if self.turns > 1 and self.request_rates is not None:
            raise ValueError("multi-turn conversations run closed-loop: drop the request rate")
        if self.turns > 1 and self.duration_s is not None:
            raise ValueError("multi-turn cells run every turn: drop the duration")
        return self

    @property
    def open_loop(self) -> bool:
        return self.request_rates is not None

    @property
    def slo(self) -> dict[str, float]:
        """The goodput objectives that are set, by metric name."""
        pairs = (("ttft_s", self.slo_ttft_s), ("tpot_s", self.slo_tpot_s))
        return {k: v for k, v in (*pairs, ("e2e_s", self.slo_e2e_s)) if v is not None}

    def requests_for(self, concurrency: int) -> int:
        return self.requests if self.requests is not None else max(4, 2 * concurrency)

    def warmup_for(self, concurrency: int) -> int:
        return self.warmup if self.warmup is not None else concurrency


class RequestRecord(Strict):
    """One streamed request as the client saw it."""

    index: int
    warmup: bool = False
    prompt_len: int = Field(description="Target prompt tokens")
    max_tokens: int
    ok: bool = False
    error: str | None = None
    error_kind: str | None = Field(None, description="http, timeout, connection, stream")
    http_status: int | None = None
    response_id: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = Field(None, description="usage.prompt_tokens")
    cached_tokens: int | None = Field(None, description="usage.prompt_tokens_details")
    output_tokens: int | None = Field(None, description="usage.completion_tokens")
    new_connection: bool = False
    connect_s: float | None = Field(None, description="TCP set-up, outside TTFT")
    queued_s: float = Field(0.0, description="Ready to send -> sent (client queue)")
    sent_s: float = Field(0.0, description="Request written, from the run epoch")
    ttft_s: float | None = Field(None, description="Sent -> first chunk with a token")
    e2e_s: float | None = Field(None, description="Sent -> last chunk with a token")
    end_s: float | None = Field(None, description="Sent -> stream complete")
    chunk_offsets_s: list[float] = Field(
        default_factory=list, description="Arrival of every token-carrying chunk, from sent"
    )
    scheduled_s: float | None = Field(
        None, description="Open loop: the scheduled send time, from the run epoch"
    )
    conversation: int | None = Field(None, description="Multi-turn: conversation number")
    turn: int | None = Field(None, description="Multi-turn: turn number, from 1")
    backend: str | None = Field(
        None, description="The replica behind a proxy, from its response headers"
    )
    reply: str | None = Field(None, exclude=True, repr=False, description="Captured text")


class Stats(Strict):
    """Distribution of one quantity; ``over`` says what the samples are."""

    over: str
    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    min: float
    max: float


class CellMetrics(Strict):
    """Client-side metrics of one cell, as defined in docs/bench.md."""

    requests: int
    succeeded: int
    failed: int
    errors: dict[str, int] = Field(default_factory=dict)
    window_s: float | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    ttft_s: Stats | None = None
    tpot_s: Stats | None = None
    e2e_s: Stats | None = None
    decode_tok_s_per_stream: Stats | None = None
    decode_tok_s: float | None = Field(None, description="sum(N_out-1) / sum(decode time)")
    prefill_tok_s: float | None = Field(None, description="sum(prompt-cached) / sum(TTFT)")
    prefill_meaningful: bool = Field(False, description="True at concurrency 1 only")
    aggregate_tok_s: float | None = Field(None, description="sum(N_out) / window")
    requests_per_s: float | None = None
    chunk_gap_s: Stats | None = Field(None, description="Inter-chunk gaps (not ITL)")
    tokens_per_chunk: float | None = None
    prompt_tokens_exact: bool | None = Field(
        None, description="Every usage.prompt_tokens equals the target"
    )
    client_queue_s: Stats | None = None
    new_connections: int = 0


class ClientHealth(Strict):
    """Did the client keep up? Measured over the cell's window."""

    wall_s: float
    cpu_s: float
    cpu_fraction: float = Field(description="Client process CPU / wall (1.0 = one core)")
    loop_lag_samples: int
    loop_lag_p50_ms: float
    loop_lag_p99_ms: float
    loop_lag_max_ms: float
    reliable: bool
    reasons: list[str] = Field(default_factory=list)


class PositionAcceptance(Strict):
    position: int
    accepted: float
    rate: float | None


class SpecDecode(Strict):
    drafts: float
    draft_tokens: float
    accepted_tokens: float
    acceptance_rate: float | None = Field(None, description="accepted / draft tokens")
    mean_acceptance_length: float | None = Field(None, description="1 + accepted / drafts")
    per_position: list[PositionAcceptance] = Field(default_factory=list)


class ServerWindow(Strict):
    """Differences of the server's /metrics counters taken around a cell's window."""

    scraped: bool
    error: str | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    prompt_tokens_cached: float | None = None
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    prefix_cache_hit_rate: float | None = None
    preemptions: float | None = None
    requests_finished: float | None = None
    queue_time_mean_s: float | None = None
    server_ttft_mean_s: float | None = None
    prefill_time_mean_s: float | None = None
    decode_time_mean_s: float | None = None
    spec_decode: SpecDecode | None = None
    output_tokens_match: bool | None = Field(
        None, description="Client sum(usage.completion_tokens) == generation_tokens delta"
    )
    prompt_tokens_match: bool | None = None
    notes: list[str] = Field(default_factory=list)


class OpenLoopStats(Strict):
    """How an open-loop cell's schedule was kept. Rates over send times are (n - 1) / (last
    - first); the completed rate is succeeded requests / (last end - first sent)."""

    target_rate: float
    arrivals: Arrivals
    scheduled: int
    scheduled_rate: float | None = Field(None, description="The schedule's own rate")
    sent: int
    sent_rate: float | None = None
    dropped: int = Field(0, description="Due while max_in_flight were in flight: not sent")
    failed: int = 0
    completed: int = 0
    completed_rate: float | None = None
    send_lag_s: Stats | None = Field(None, description="Actual - scheduled send time")
    max_in_flight: int | None = None
    peak_in_flight: int = 0


class Goodput(Strict):
    """Requests that met every objective set (none set: every successful request)."""

    slo: dict[str, float] = Field(default_factory=dict)
    met: int
    requests: int
    requests_per_s: float | None = None
    output_tok_s: float | None = None


class TurnStats(Strict):
    """One turn index across a cell's conversations; server figures are /metrics
    differences around that turn (the conversations move from turn to turn together)."""

    turn: int
    requests: int
    succeeded: int
    prompt_tokens: int = 0
    cached_tokens: int | None = Field(None, description="sum(usage cached_tokens), if given")
    ttft_s: Stats | None = None
    server_prefix_queries: float | None = None
    server_prefix_hits: float | None = None
    server_hit_rate: float | None = None


class BackendStats(Strict):
    backend: str = Field(description="A proxy's replica (api base or model id), or unknown")
    requests: int
    succeeded: int
    failed: int
    output_tokens: int = 0
    ttft_s: Stats | None = None
    e2e_s: Stats | None = None


class CellResult(Strict):
    prompt_len: int
    concurrency: int = Field(description="Closed loop: workers; open loop: max_in_flight or 0")
    metrics: CellMetrics
    client: ClientHealth
    server: ServerWindow | None = None
    warmup_requests: int = 0
    requests: list[RequestRecord] = Field(default_factory=list)
    request_rate: float | None = Field(None, description="Open loop: the target rate")
    open_loop: OpenLoopStats | None = None
    goodput: Goodput | None = None
    turns: list[TurnStats] = Field(default_factory=list)
    backends: list[BackendStats] = Field(default_factory=list)

    @property
    def label(self) -> str:
        """How the table names the cell's load: concurrency or request rate."""
        if self.request_rate is None:
            return str(self.concurrency)
        cap = f" (<= {self.concurrency})" if self.concurrency else ""
        return f"{self.request_rate:g}/s{cap}"


class ProbeResult(Strict):
    """The long-context probe: one prompt of ``target_tokens``."""

    target_tokens: int
    max_model_len: int | None = None
    accepted: bool
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    output_tokens: int | None = None
    ttft_s: float | None = None
    prefill_tok_s: float | None = None
    error: str | None = None
    record: RequestRecord | None = None


class Tokenization(Strict):
    method: str = Field(description="'server /tokenize' or 'local tokenizer <path>'")
    exact: bool = Field(description="Prompts were checked to the exact token count")
    notes: list[str] = Field(default_factory=list)


class Startup(Strict):
    """The benched cluster's last start-up, phase by phase (seconds from the start command;
    see `deskside status`)."""

    kind: str = Field(description="up, restart or upgrade")
    started_at: str
    seconds: dict[str, float]
    regressions: list[str] = Field(default_factory=list)


class BenchResult(Strict):
    schema_version: str = SCHEMA_VERSION
    deskside_version: str
    started_at: str
    url: str
    model: str
    endpoint: Endpoint
    server_version: str | None = None
    config: BenchConfig
    clock_epoch_s: float | None = Field(
        None,
        description="The client's time.monotonic() at the run's epoch: add it to sent_s to "
        "compare with other processes' monotonic timestamps on the same host",
    )
    tokenization: Tokenization | None = None
    cells: list[CellResult] = Field(default_factory=list)
    probe: ProbeResult | None = None
    startup: Startup | None = None
    notes: list[str] = Field(default_factory=list)

    def cell(
        self, prompt_len: int, concurrency: int, request_rate: float | None = None
    ) -> CellResult | None:
        key = (prompt_len, concurrency, request_rate)
        return next(
            (c for c in self.cells if (c.prompt_len, c.concurrency, c.request_rate) == key),
            None,
        )
