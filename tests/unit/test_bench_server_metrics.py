"""/metrics windows: prometheus-client parsing, sums over engines, model filtering and the
spec-decode arithmetic of REFERENCE §4, exactly."""

from __future__ import annotations

import pytest

from deskside.bench.server_metrics import parse_metrics, window


def exposition(
    gen: dict[str, float],
    prompt: float,
    drafts: float,
    draft_tokens: float,
    accepted: float,
    per_pos: list[float],
    queue_sum: float,
    queue_count: float,
    hits: float = 0,
    queries: float = 0,
    preempt: float = 0,
) -> str:
    lines = [
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
    ]
    for engine, value in gen.items():
        lines.append(f'vllm:generation_tokens_total{{engine="{engine}",model_name="m"}} {value}')
    lines += [
        'vllm:generation_tokens_total{engine="0",model_name="other"} 99999.0',
        "# TYPE vllm:prompt_tokens_total counter",
        f'vllm:prompt_tokens_total{{engine="0",model_name="m"}} {prompt}',
        "# TYPE vllm:prefix_cache_queries_total counter",
        f'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}',
        "# TYPE vllm:prefix_cache_hits_total counter",
        f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}',
        "# TYPE vllm:num_preemptions_total counter",
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {preempt}',
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}',
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
    ]
    for pos, value in enumerate(per_pos):
        lines.append(
            "vllm:spec_decode_num_accepted_tokens_per_pos_total"
            f'{{engine="0",model_name="m",position="{pos}"}} {value}'
        )
    lines += [
        "# TYPE vllm:request_queue_time_seconds histogram",
        f'vllm:request_queue_time_seconds_bucket{{engine="0",le="+Inf",model_name="m"}} '
        f"{queue_count}",
        f'vllm:request_queue_time_seconds_count{{engine="0",model_name="m"}} {queue_count}',
        f'vllm:request_queue_time_seconds_sum{{engine="0",model_name="m"}} {queue_sum}',
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="m"} 0.0',
    ]
    return "\n".join(lines) + "\n"


BEFORE = exposition(
    {"0": 1000.0, "1": 10.0}, 5000, 100, 500, 200, [80, 60, 40, 15, 5], 2.0, 10, 64, 512
)
# The window: 400 drafts of 5 tokens; 600 accepted = 300 / 180 / 90 / 24 / 6 per position.
AFTER = exposition(
    {"0": 2000.0, "1": 20.0}, 9096, 500, 2500, 800, [380, 240, 130, 39, 11], 2.5, 14, 576, 4608
)


def test_window_differences_and_spec_arithmetic() -> None:
    w = window(parse_metrics(BEFORE), parse_metrics(AFTER), model="m", client_output_tokens=1010)
    assert w.generation_tokens == 1010.0  # summed over engines 0 and 1, model "other" ignored
    assert w.prompt_tokens == 4096.0
    assert w.output_tokens_match is True
    assert w.notes == []
    assert w.prefix_cache_queries == 4096.0 and w.prefix_cache_hits == 512.0
    assert w.prefix_cache_hit_rate == 0.125
    assert w.preemptions == 0.0
    assert w.queue_time_mean_s == 0.125  # 0.5 s over 4 requests
    spec = w.spec_decode
    assert spec is not None
    assert (spec.drafts, spec.draft_tokens, spec.accepted_tokens) == (400.0, 2000.0, 600.0)
    assert spec.acceptance_rate == 0.3
    assert spec.mean_acceptance_length == 2.5
    assert [p.position for p in spec.per_position] == [0, 1, 2, 3, 4]
    assert [p.rate for p in spec.per_position] == [0.75, 0.45, 0.225, 0.06, 0.015]
    assert sum(p.accepted for p in spec.per_position) == spec.accepted_tokens


def test_other_traffic_is_called_out() -> None:
    w = window(parse_metrics(BEFORE), parse_metrics(AFTER), model="m", client_output_tokens=1000)
    assert w.output_tokens_match is False
    assert "other traffic" in w.notes[0]


def test_without_model_filter_every_model_counts() -> None:
    w = window(parse_metrics(BEFORE), parse_metrics(AFTER))
    assert w.generation_tokens == 1010.0  # "other" is constant across the window


def test_missing_counters_are_none_not_zero() -> None:
    text = "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total 5.0\n"
    after = "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total 9.0\n"
    w = window(parse_metrics(text), parse_metrics(after), client_output_tokens=4)
    assert w.generation_tokens == 4.0 and w.output_tokens_match is True
    assert w.spec_decode is None
    assert w.prefix_cache_hit_rate is None
    assert w.queue_time_mean_s is None


def test_parse_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        parse_metrics("this is { not prometheus")


def test_alias_reads_the_metrics_of_the_first_served_name() -> None:
    from deskside.bench.server_metrics import parse_metrics, window

    def text(n: float) -> str:
        return (
            "# TYPE vllm:generation_tokens counter\n"
            f'vllm:generation_tokens_total{{engine="0",model_name="served"}} {n}\n'
        )

    w = window(parse_metrics(text(10)), parse_metrics(text(34)), model="alias")
    assert w.generation_tokens == 24
    assert any("alias" in note for note in w.notes)
