"""The bench's data: its configuration, per-request records and results (pydantic, strict).

Times are seconds from the client's monotonic clock. A request's absolute times
(``sent_s``) count from the run's epoch (the clock reading when the run started); its
other times count from its own ``sent_s``. Token counts come from the server's ``usage``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

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

    @field_validator("prompt_lens", "concurrency")
    @classmethod
    def _positive(cls, values: list[int]) -> list[int]:
        if not values or any(v < 1 for v in values):
            raise ValueError("needs one or more positive integers")
        return values

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


class CellResult(Strict):
    prompt_len: int
    concurrency: int
    metrics: CellMetrics
    client: ClientHealth
    server: ServerWindow | None = None
    warmup_requests: int = 0
    requests: list[RequestRecord] = Field(default_factory=list)


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
    notes: list[str] = Field(default_factory=list)

    def cell(self, prompt_len: int, concurrency: int) -> CellResult | None:
        return next(
            (c for c in self.cells if (c.prompt_len, c.concurrency) == (prompt_len, concurrency)),
            None,
        )
