"""The other probes, pure: names and keys at both doors, forced tool calls, stop strings
inside the reasoning, long context, and what the recipe configures — judged on recorded
answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from deskside.probe import context, doors, reasoning, tools
from deskside.probe.doors import Knock, Reply
from deskside.probe.target import EngineTraits, engine_traits, flag_value, probe_target
from deskside.recipe.load import load_recipe

from ..monitor_stub import run_record
from .probe_recorded import (
    CHAT_ENGINE,
    CHAT_PROXY,
    ENGINE_NO_KEY,
    PROXY_NO_KEY,
    PROXY_WRONG_KEY,
    REASONING_FIRST,
    REASONING_STOPPED,
    TOKENIZE,
    TOO_LONG,
    TOOL_CALLED,
    TOOL_CUT,
    TOOL_NO_PARSER,
)

ROOT = Path(__file__).parents[2]

# ------------------------------------------------------------------ what the recipe says


def test_flag_values_in_both_spellings() -> None:
    args = [
        "--tool-call-parser",
        "pythonic",
        "--reasoning_parser=deepseek_r1",
        "--enable-auto-tool-choice",
        "--x",
    ]
    assert flag_value(args, "--tool-call-parser") == "pythonic"
    assert flag_value(args, "--reasoning-parser") == "deepseek_r1"
    assert flag_value(args, "--enable-auto-tool-choice") == ""
    assert flag_value(args, "--x") == ""
    assert flag_value(args, "--missing") is None
    assert flag_value(["--a", "1", "--a", "2"], "--a") == "2"


def test_the_flagship_configures_tools_reasoning_and_late_stops() -> None:
    recipe = load_recipe(ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml")
    t = probe_target(recipe, run_record(recipe.name, "http://ai1:8888"), None, None)
    assert t.traits == EngineTraits(
        max_num_seqs=6,
        max_model_len=204800,
        tool_call_parser="deepseek_v4",
        auto_tool_choice=True,
        reasoning_parser="deepseek_v4",
        stops_after_reasoning=True,
    )
    assert t.model == "tiny"  # the run's served names come first


def test_the_embedded_recipe_configures_neither() -> None:
    recipe = load_recipe(ROOT / "src" / "deskside" / "recipes_data" / "local-tiny.yaml")
    traits = engine_traits(recipe.engine.extra_args, recipe.engine.env, recipe.engine.max_num_seqs)
    assert traits.tool_call_parser is None and traits.reasoning_parser is None
    assert not traits.stops_after_reasoning and traits.max_num_seqs == 6


@pytest.mark.parametrize(("value", "on"), [("1", True), ("true", True), ("0", False), ("", False)])
def test_the_late_stops_switch(value: str, on: bool) -> None:
    env = {"DSPARK_SUPPRESS_STOPS_IN_REASONING": value}
    assert engine_traits([], env).stops_after_reasoning is on


# ------------------------------------------------------------------------ names and keys


def test_knocks_behind_a_proxy_and_without_one() -> None:
    behind = doors.knocks(["a", "b"], True)
    assert len(behind) == 10
    assert [(k.door, k.key, k.should_answer) for k in behind[:5]] == [
        ("proxy", "master", True),
        ("proxy", "none", False),
        ("proxy", "wrong", False),
        ("engine", "engine", True),
        ("engine", "none", False),
    ]
    assert doors.knocks(["a"], False) == [Knock("engine", "a", "none", True)]


def recorded(names: list[str]) -> list[tuple[Knock, Reply]]:
    reply = {
        ("proxy", "master"): Reply(200, doors.has_completion(CHAT_PROXY)),
        ("proxy", "none"): Reply(PROXY_NO_KEY[0], doors.has_completion(PROXY_NO_KEY[1])),
        ("proxy", "wrong"): Reply(PROXY_WRONG_KEY[0], doors.has_completion(PROXY_WRONG_KEY[1])),
        ("engine", "engine"): Reply(200, doors.has_completion(CHAT_ENGINE)),
        ("engine", "none"): Reply(ENGINE_NO_KEY[0], doors.has_completion(ENGINE_NO_KEY[1])),
    }
    return [(k, reply[(k.door, k.key)]) for k in doors.knocks(names, True)]


def test_recorded_doors_pass() -> None:
    r = doors.judge(recorded(["x", "y"]), ["x", "y"], True)
    assert r.result == "PASS"
    assert "2 names answered" in r.detail and "(engine 401, proxy 400, proxy 500)" in r.detail


def test_a_door_that_answers_without_its_key_fails() -> None:
    seen = recorded(["x"])
    seen[1] = (seen[1][0], Reply(200, True))
    r = doors.judge(seen, ["x"], True)
    assert r.result == "FAIL"
    assert r.detail == "x at the proxy with no key: answered (HTTP 200) instead of refusing"


def test_a_name_that_does_not_answer_fails() -> None:
    seen = recorded(["x"])
    seen[3] = (seen[3][0], Reply(404, False, "The model `x` does not exist."))
    seen[0] = (seen[0][0], Reply(None, False, "ConnectError: refused"))
    r = doors.judge(seen, ["x"], True)
    assert r.result == "FAIL"
    assert "x at the proxy with master key: no answer (ConnectError: refused)" in r.detail
    assert "x at the engine with engine key: HTTP 404, no completion" in r.detail


# ---------------------------------------------------------------------------- tool calls


def test_no_parser_skips() -> None:
    r = tools.unconfigured(EngineTraits())
    assert r is not None and r.result == "SKIPPED" and "--tool-call-parser" in r.detail
    assert tools.unconfigured(EngineTraits(tool_call_parser="hermes")) is None


def test_the_forced_request() -> None:
    body = tools.tool_body("tiny", "required")
    assert body["tool_choice"] == "required" and body["tools"] == [tools.TOOL]
    assert "chat_template_kwargs" not in body
    thinking = tools.tool_body("tiny", "required", reasoning=True)["chat_template_kwargs"]
    assert thinking == {"thinking": False, "enable_thinking": False}


def test_the_engines_refusal_of_a_tool_choice() -> None:
    assert tools.refused_choice(*TOOL_NO_PARSER)
    assert not tools.refused_choice(*TOO_LONG)
    r = tools.cannot_force(TOOL_NO_PARSER[1])
    assert r.result == "SKIPPED" and "requires --tool-call-parser" in r.detail


def test_a_call_with_json_object_arguments_passes() -> None:
    r = tools.judge("required", 200, TOOL_CALLED)
    assert r.result == "PASS"
    assert r.detail.startswith("tool_choice 'required': 1 tool call(s), arguments JSON objects")


def test_recorded_random_weights_never_close_the_call() -> None:
    r = tools.judge("required", 200, TOOL_CUT)
    assert r.result == "FAIL"
    assert (
        "no tool call came back (the answer ran to max_tokens 64 before the call closed)"
        in r.detail
    )


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ('{"city": "Par', "not JSON (Unterminated string"),
        ('["Paris"]', "a JSON list, not an object"),
        ("", "not JSON (Expecting value at 0)"),
    ],
)
def test_arguments_that_are_not_a_json_object_fail(arguments: str, why: str) -> None:
    body = {
        "choices": [
            {
                "message": {
                    "tool_calls": [{"function": {"name": "get_weather", "arguments": arguments}}]
                },
                "finish_reason": "tool_calls",
            }
        ]
    }
    r = tools.judge({"type": "function", "function": {"name": "get_weather"}}, 200, body)
    assert r.result == "FAIL" and why in r.detail
    assert r.detail.startswith("tool_choice get_weather (named): get_weather: arguments are")


# ------------------------------------------------------------------ stops in reasoning


def test_skips_without_parser_or_without_the_recipe_asking() -> None:
    none = reasoning.unconfigured(EngineTraits())
    assert none is not None and none.result == "SKIPPED" and "no reasoning parser" in none.detail
    unasked = reasoning.unconfigured(EngineTraits(reasoning_parser="deepseek_r1"))
    assert unasked is not None and "DSPARK_SUPPRESS_STOPS_IN_REASONING" in unasked.detail
    asked = EngineTraits(reasoning_parser="deepseek_r1", stops_after_reasoning=True)
    assert reasoning.unconfigured(asked) is None


def test_the_stop_string_is_a_word_first_seen_inside_the_reasoning() -> None:
    assert reasoning.pick_stop(" oad oad oad") == ("oad", 1)
    text = "First, a day has 24 hours. Each hour has 60 minutes. So 24 times 60."
    stop, at = reasoning.pick_stop(text) or ("", -1)
    assert text.find(stop) == at > 0 and stop.isalnum()
    assert reasoning.pick_stop("") is None and reasoning.pick_stop("ok !!") is None


def test_recorded_upstream_vllm_ends_the_answer_at_the_stop_string() -> None:
    first = reasoning.read_chat(REASONING_FIRST)
    assert first.reasoning == " oad oad oad oad" and first.content == ""
    r = reasoning.judge("oad", 1, first, 200, REASONING_STOPPED)
    assert r.result == "FAIL"
    assert r.detail.startswith("stop string 'oad' (character 1 of the reasoning) ended the answer")


def test_an_engine_that_waits_for_the_end_of_reasoning_passes() -> None:
    first = reasoning.read_chat(REASONING_FIRST)
    r = reasoning.judge("oad", 1, first, 200, REASONING_FIRST)
    assert r.result == "PASS" and "did not end the answer" in r.detail


def test_an_answer_that_left_the_first_ones_path_fails() -> None:
    first = reasoning.read_chat(REASONING_FIRST)
    other = {"choices": [{"message": {"reasoning": " xyz"}, "finish_reason": "length"}]}
    r = reasoning.judge("oad", 1, first, 200, other)
    assert r.result == "FAIL" and "not reproducible" in r.detail


def test_older_vllm_calls_it_reasoning_content() -> None:
    body = {"choices": [{"message": {"reasoning_content": "abc", "content": "d"}}]}
    said = reasoning.read_chat(body)
    assert (said.reasoning, said.content) == ("abc", "d")
    with pytest.raises(ValueError):
        reasoning.read_chat({"error": "x"})


# -------------------------------------------------------------------------- long context


def test_recorded_tokenize_answer() -> None:
    ids, limit = context.read_tokenize(TOKENIZE)
    assert len(ids) == 12 and limit == 4096
    with pytest.raises(ValueError):
        context.read_tokenize({"tokens": []})


def test_the_long_prompt_is_exactly_as_long_as_asked() -> None:
    prompt = context.long_prompt([1, 2], [7, 8, 9], 10)
    assert prompt == [1, 2, 7, 8, 9, 7, 8, 9, 7, 8]
    with pytest.raises(ValueError):
        context.long_prompt([1, 2, 3], [7], 2)


def test_long_context_verdicts() -> None:
    ok = {"choices": [{"text": "x"}], "usage": {"prompt_tokens": 4088, "completion_tokens": 8}}
    r = context.judge(4088, 4096, 200, ok, 2.4)
    assert r.result == "PASS"
    assert (
        r.detail
        == "4,088 prompt + 8 answer tokens = max_model_len 4,096: served, 8 tokens back in 2.4 s"
    )
    assert context.judge(4088, 4096, *TOO_LONG, 0.1).result == "FAIL"
    cut = {"usage": {"prompt_tokens": 2048, "completion_tokens": 8}}
    assert "counted 2048 prompt tokens" in context.judge(4088, 4096, 200, cut, 1).detail
    none = {"usage": {"prompt_tokens": 4088, "completion_tokens": 0}}
    assert context.judge(4088, 4096, 200, none, 1).result == "FAIL"
