"""The probes' HTTP layer against a fake cluster that answers with recorded bodies: every
probe's request reaches the right door with the right key, the answers reach the judges,
and the CLI prints PASS / FAIL / SKIPPED (or a user error, never a traceback)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from deskside.cli.app import app
from deskside.errors import DesksideError
from deskside.probe import client
from deskside.probe.result import ProbeResult
from deskside.probe.target import EngineTraits, ProbeTarget

from ..monitor_stub import run_record, saved_run
from .probe_recorded import (
    ENGINE,
    ENGINE_KEY,
    MASTER_KEY,
    PROXY,
    TOO_LONG,
    TOOL_CALLED,
    FakeCluster,
)


def target(**traits: object) -> ProbeTarget:
    return ProbeTarget(
        recipe_name="local-tiny",
        api_url=ENGINE,
        proxy_url=PROXY,
        served_names=["deepseek-v4-flash-tiny", "tiny"],
        traits=replace(EngineTraits(max_num_seqs=6), **traits),
        engine_headers=ENGINE_KEY,
        proxy_headers=MASTER_KEY,
    )


def probe_all(cluster: FakeCluster, t: ProbeTarget) -> dict[str, ProbeResult]:
    results = client.run_probes(
        t, transport=cluster.sync(), async_transport=cluster.async_(), nonce=7
    )
    return {r.name: r for r in results}


def test_the_embedded_recipes_cluster_passes_and_skips() -> None:
    cluster = FakeCluster()
    found = probe_all(cluster, target())
    assert [r.result for r in found.values()] == ["PASS", "PASS", "SKIPPED", "SKIPPED", "PASS"]
    assert list(found) == [
        "batch-invariance",
        "names-and-keys",
        "tool-calls",
        "stop-in-reasoning",
        "long-context",
    ]
    assert "5 running requests (2 with the same prompt)" in found["batch-invariance"].detail
    assert "(engine 401, proxy 400, proxy 500)" in found["names-and-keys"].detail
    assert "4,088 prompt + 8 answer tokens = max_model_len 4,096" in found["long-context"].detail
    # the long prompt: /tokenize's ids, then the filler's, exactly max_model_len - 8 ids
    long = [b for u, b in cluster.requests if isinstance(b.get("prompt"), list)]
    assert len(long) == 1 and len(long[0]["prompt"]) == 4088
    assert long[0]["prompt"][:12] == [1, 72, 268, 79, 87, 77, 287, 369, 70, 73, 284, 30]
    # no request went anywhere without being one of the doors' knocks or the engine's
    assert all(u.startswith((ENGINE, PROXY)) for u, _ in cluster.requests)


def test_batch_variance_fails_and_says_alone_twice_agrees() -> None:
    cluster = FakeCluster()
    cluster.batched_ids = [53, 551, 54, 551]
    found = probe_all(cluster, target())
    r = found["batch-invariance"]
    assert r.result == "FAIL"
    assert "differs at token 2 of 4" in r.detail and "batched 54" in r.detail
    assert "alone twice gives the same tokens (batch variance)" in r.detail


def test_requests_that_end_before_the_probe_leave_nothing_to_compare() -> None:
    cluster = FakeCluster()
    cluster.beside_tokens = 2  # each other request ends right after its first token
    r = probe_all(cluster, target())["batch-invariance"]
    assert r.result == "FAIL" and "were running for the whole batched probe" in r.detail


def test_max_num_seqs_one_skips_batch_invariance() -> None:
    r = probe_all(FakeCluster(), target(max_num_seqs=1))["batch-invariance"]
    assert r.result == "SKIPPED" and "max_num_seqs 1" in r.detail


def test_tool_and_reasoning_probes_with_parsers() -> None:
    cluster = FakeCluster()
    cluster.tool = (200, TOOL_CALLED)
    t = target(
        tool_call_parser="pythonic", reasoning_parser="deepseek_r1", stops_after_reasoning=True
    )
    found = probe_all(cluster, t)
    assert found["tool-calls"].result == "PASS"
    tool_request = next(b for _, b in cluster.requests if "tools" in b)
    assert tool_request["tool_choice"] == "required"
    assert tool_request["chat_template_kwargs"] == {"thinking": False, "enable_thinking": False}
    r = found["stop-in-reasoning"]
    assert r.result == "FAIL" and "'oad'" in r.detail and "ended the answer" in r.detail
    stops = [b["stop"] for _, b in cluster.requests if "stop" in b]
    assert stops == [["oad"]]


def test_a_refused_tool_choice_tries_the_named_function_then_skips() -> None:
    cluster = FakeCluster()  # answers 400 "requires --tool-call-parser" to every choice
    r = probe_all(cluster, target(tool_call_parser="hermes"))["tool-calls"]
    assert r.result == "SKIPPED" and "cannot force a tool call" in r.detail
    choices = [b["tool_choice"] for _, b in cluster.requests if "tools" in b]
    assert choices == ["required", {"type": "function", "function": {"name": "get_weather"}}]


def test_a_refused_long_prompt_fails() -> None:
    cluster = FakeCluster()
    cluster.long = TOO_LONG
    r = probe_all(cluster, target())["long-context"]
    assert r.result == "FAIL" and "maximum context length is 4096" in r.detail


def test_an_engine_that_does_not_answer_is_a_user_error() -> None:
    cluster = FakeCluster()
    cluster.healthy = False
    with pytest.raises(DesksideError) as caught:
        probe_all(cluster, target())
    assert "does not answer" in caught.value.message
    assert "deskside status" in (caught.value.hint or "")


def test_without_a_proxy_the_engine_answers_anyone() -> None:
    cluster = FakeCluster()
    t = target()
    t = ProbeTarget(t.recipe_name, t.api_url, None, t.served_names, t.traits)
    found = probe_all(cluster, t)
    # the fake engine still wants its key: the probe sends none without a proxy
    assert found["names-and-keys"].result == "FAIL"
    assert "at the engine with no key: HTTP 401" in found["names-and-keys"].detail


# ----------------------------------------------------------------------------- the CLI


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["probe", *args])
    return result.exit_code, result.stdout, result.stderr


def test_cli_json_lists_every_probe_and_exits_1_on_a_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    found = [
        ProbeResult("batch-invariance", "PASS", "same"),
        ProbeResult("tool-calls", "FAIL", "no call"),
    ]
    monkeypatch.setattr("deskside.probe.find.find_target", lambda arg, known_hosts=None: target())
    monkeypatch.setattr("deskside.probe.client.run_probes", lambda t, say: found)
    code, stdout, _ = invoke("local-tiny", "--json")
    assert code == 1
    assert json.loads(stdout) == {
        "ok": False,
        "results": [
            {"name": "batch-invariance", "result": "PASS", "detail": "same"},
            {"name": "tool-calls", "result": "FAIL", "detail": "no call"},
        ],
    }
    code, stdout, _ = invoke("local-tiny")
    assert code == 1 and "FAIL" in stdout and "no call" in stdout


def test_cli_no_run_is_a_user_error_with_a_hint() -> None:
    code, _, stderr = invoke("local-tiny")
    assert code == 1
    assert "local-tiny is not running here" in stderr and "deskside up local-tiny" in stderr
    assert "Traceback" not in stderr


def test_cli_a_run_whose_engine_is_gone() -> None:
    """A run record of the embedded recipe (without a proxy) at an address nothing
    answers."""
    with saved_run(run_record("local-tiny", "http://127.0.0.1:9")):
        code, _, stderr = invoke("local-tiny")
    assert code == 1
    assert "does not answer at http://127.0.0.1:9/health" in stderr
    assert "Traceback" not in stderr


def test_cli_a_run_whose_recipe_file_is_gone() -> None:
    with saved_run(run_record("gone-run", "http://127.0.0.1:9")):
        code, _, stderr = invoke("gone-run")
    assert code == 2
    assert "/nonexistent/gone-run.yaml" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("mode", ["drip-body", "drip-headers", "silent", "huge", "garbage"])
def test_an_engine_that_drips_hangs_or_floods_is_down_within_seconds(mode: str) -> None:
    """The first knock (/health) has a 5 s deadline for the whole exchange and a byte cap:
    a hostile server cannot keep `deskside probe` waiting."""
    import time

    from tests.hostile_http import hostile_server

    with hostile_server(mode) as url:
        t0 = time.monotonic()
        with pytest.raises(DesksideError, match="does not answer"):
            client.run_probes(replace(target(), api_url=url, proxy_url=url))
        assert time.monotonic() - t0 < 7
