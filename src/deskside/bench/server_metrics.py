"""The server's own counters around a measured window - pure parsing and arithmetic.

``/metrics`` is parsed with prometheus-client's text parser. Samples of one name are summed
over engines (and API servers); when a model name is given, only samples whose
``model_name`` label matches (or that carry no such label) count. Formulas follow vLLM's
own dashboards (``vllm/v1/spec_decode/metrics.py``):

- acceptance rate = accepted tokens / draft tokens;
- mean acceptance length = 1 + accepted tokens / drafts;
- per-position acceptance rate = accepted_per_pos[i] / drafts;
- prefix-cache hit rate = hits / queries (tokens);
- mean queue time = delta(queue_time_seconds_sum) / delta(_count) (likewise TTFT, prefill
  and decode time).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from deskside.bench.models import PositionAcceptance, ServerWindow, SpecDecode

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Snapshot:
    """Sample name -> list of (labels, value); names as exposed (``..._total``)."""

    samples: dict[str, list[tuple[Labels, float]]] = field(default_factory=dict)

    def total(self, name: str, model: str | None = None, **match: str) -> float | None:
        """Sum of the samples called ``name`` whose labels include ``match``; None when the
        server exports no such sample."""
        rows = self.samples.get(name)
        if rows is None:
            return None
        found = False
        value = 0.0
        for labels, v in rows:
            d = dict(labels)
            if model is not None and d.get("model_name", model) != model:
                continue
            if any(d.get(k) != want for k, want in match.items()):
                continue
            found = True
            value += v
        return value if found else None

    def label_values(self, name: str, label: str) -> set[str]:
        return {dict(lb)[label] for lb, _ in self.samples.get(name, []) if label in dict(lb)}


def parse_metrics(text: str) -> Snapshot:
    samples: dict[str, list[tuple[Labels, float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[s.name].append((tuple(sorted(s.labels.items())), float(s.value)))
    return Snapshot(dict(samples))


def _delta(
    before: Snapshot, after: Snapshot, name: str, model: str | None, **match: str
) -> float | None:
    b = before.total(name, model, **match)
    a = after.total(name, model, **match)
    if a is None:
        return None
    return a - (b or 0.0)


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den:
        return None
    return num / den


def _mean(before: Snapshot, after: Snapshot, base: str, model: str | None) -> float | None:
    return _ratio(
        _delta(before, after, base + "_sum", model), _delta(before, after, base + "_count", model)
    )


def window(
    before: Snapshot,
    after: Snapshot,
    model: str | None = None,
    client_output_tokens: int | None = None,
    client_prompt_tokens: int | None = None,
) -> ServerWindow:
    """Counter differences ``after - before`` and what they mean."""
    notes: list[str] = []
    labelled = before.label_values(
        "vllm:generation_tokens_total", "model_name"
    ) | after.label_values("vllm:generation_tokens_total", "model_name")
    # vLLM labels its metrics with the first served name only; an alias (another
    # --served-model-name) is the same engine.
    if model is not None and len(labelled) == 1 and model not in labelled:
        (served,) = labelled
        notes.append(f"{model!r} is an alias: metrics are labelled {served!r}")
        model = served

    def d(name: str, **match: str) -> float | None:
        return _delta(before, after, name, model, **match)

    w = ServerWindow(scraped=True)
    w.notes.extend(notes)
    w.prompt_tokens = d("vllm:prompt_tokens_total")
    w.generation_tokens = d("vllm:generation_tokens_total")
    w.prompt_tokens_cached = d("vllm:prompt_tokens_cached_total")
    w.prefix_cache_queries = d("vllm:prefix_cache_queries_total")
    w.prefix_cache_hits = d("vllm:prefix_cache_hits_total")
    w.prefix_cache_hit_rate = _ratio(w.prefix_cache_hits, w.prefix_cache_queries)
    w.preemptions = d("vllm:num_preemptions_total")
    w.requests_finished = d("vllm:request_success_total")
    w.queue_time_mean_s = _mean(before, after, "vllm:request_queue_time_seconds", model)
    w.server_ttft_mean_s = _mean(before, after, "vllm:time_to_first_token_seconds", model)
    w.prefill_time_mean_s = _mean(before, after, "vllm:request_prefill_time_seconds", model)
    w.decode_time_mean_s = _mean(before, after, "vllm:request_decode_time_seconds", model)

    drafts = d("vllm:spec_decode_num_drafts_total")
    if drafts is not None:
        draft_tokens = d("vllm:spec_decode_num_draft_tokens_total") or 0.0
        accepted = d("vllm:spec_decode_num_accepted_tokens_total") or 0.0
        name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
        positions = sorted(int(p) for p in after.label_values(name, "position"))
        per_pos = []
        for pos in positions:
            acc = d(name, position=str(pos)) or 0.0
            per_pos.append(PositionAcceptance(position=pos, accepted=acc, rate=_ratio(acc, drafts)))
        w.spec_decode = SpecDecode(
            drafts=drafts,
            draft_tokens=draft_tokens,
            accepted_tokens=accepted,
            acceptance_rate=_ratio(accepted, draft_tokens),
            mean_acceptance_length=1.0 + accepted / drafts if drafts else None,
            per_position=per_pos,
        )

    if client_output_tokens is not None and w.generation_tokens is not None:
        w.output_tokens_match = round(w.generation_tokens) == client_output_tokens
        if not w.output_tokens_match:
            w.notes.append(
                f"server generated {w.generation_tokens:.0f} tokens in the window, the client "
                f"counted {client_output_tokens}: other traffic, warm-up overlap or failed "
                "requests - server-side figures of this cell are not the bench's alone"
            )
    if client_prompt_tokens is not None and w.prompt_tokens is not None:
        w.prompt_tokens_match = round(w.prompt_tokens) == client_prompt_tokens
    return w


def failed_window(error: str) -> ServerWindow:
    return ServerWindow(scraped=False, error=error)
