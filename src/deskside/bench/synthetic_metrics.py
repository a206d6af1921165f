"""The synthetic server's /metrics: the vLLM series deskside's bench and monitoring read,
in vLLM's names and labels (prometheus-client)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class SyntheticMetrics:
    """vLLM's series for one served model."""

    def __init__(self, model: str) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        values = (model, "0")
        r = self.registry

        def counter(name: str, doc: str) -> Any:
            return Counter(name, doc, labels, registry=r).labels(*values)

        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens, cached included.")
        self.prompt_cached = counter("vllm:prompt_tokens_cached", "Cached prompt tokens.")
        self.generation_tokens = counter("vllm:generation_tokens", "Generation tokens.")
        self.prefix_queries = counter("vllm:prefix_cache_queries", "Prefix cache queries.")
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits.")
        self.preemptions = counter("vllm:num_preemptions", "Preemptions.")
        self.drafts = counter("vllm:spec_decode_num_drafts", "Drafts.")
        self.draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Draft tokens.")
        self.accepted = counter("vllm:spec_decode_num_accepted_tokens", "Accepted tokens.")
        self._per_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per position.",
            [*labels, "position"],
            registry=r,
        )
        self.per_pos_values = values
        self.running = Gauge("vllm:num_requests_running", "Running.", labels, registry=r).labels(
            *values
        )
        self.waiting = Gauge("vllm:num_requests_waiting", "Waiting.", labels, registry=r).labels(
            *values
        )
        self.queue_time = Histogram(
            "vllm:request_queue_time_seconds", "Queue time.", labels, registry=r
        ).labels(*values)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "TTFT.", labels, registry=r
        ).labels(*values)

    def accepted_at(self, position: int) -> Any:
        return self._per_pos.labels(*self.per_pos_values, str(position))
