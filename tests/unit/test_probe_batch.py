"""Batch invariance, pure: the requests it builds, reading recorded answers, and the
verdicts (a difference names the token; the others must have run the whole time)."""

from __future__ import annotations

import copy

import pytest

from deskside.probe import batch
from deskside.probe.batch import Answer, Overlap

from .probe_recorded import COMPLETION, LOGPROB, STREAM_DONE, STREAM_FIRST, STREAM_LAST

ALL_RAN = Overlap(others=5, running=5, identical=2)


def answer(ids: list[int], logprobs: list[float] | None = None) -> Answer:
    return Answer("", ids, [str(i) for i in ids], logprobs or [LOGPROB] * len(ids))


def test_the_probe_request_is_greedy_with_a_fixed_length_and_its_tokens() -> None:
    body = batch.completion_body("tiny", batch.PROMPT, 32)
    assert body["temperature"] == 0 and body["ignore_eos"] is True
    assert body["max_tokens"] == 32 and body["return_token_ids"] is True
    assert body["logprobs"] == 1 and "stream" not in body
    assert batch.completion_body("tiny", "x", 4, stream=True)["stream"] is True


@pytest.mark.parametrize(("seqs", "n"), [(None, 5), (6, 5), (3, 2), (1, 0), (256, 5)])
def test_the_others_fit_in_one_batch_with_the_probe(seqs: int | None, n: int) -> None:
    assert batch.other_count(seqs) == n


def test_the_others_include_the_same_prompt_twice_and_a_longer_one() -> None:
    prompts = batch.other_prompts(5)
    assert prompts.count(batch.PROMPT) == 2
    assert max(len(p) for p in prompts) > 4 * len(batch.PROMPT)
    assert batch.other_prompts(1) == [batch.PROMPT]


def test_reading_a_recorded_completion() -> None:
    a = batch.read_completion(COMPLETION)
    assert a.token_ids == [53, 551, 53, 551]
    assert a.tokens == ["Q", " target", "Q", " target"]
    assert a.logprobs == [LOGPROB] * 4
    assert a.sequence == [53, 551, 53, 551]
    with pytest.raises(ValueError):
        batch.read_completion({"error": {"message": "x"}})


def test_without_token_ids_the_token_texts_are_compared() -> None:
    body = copy.deepcopy(COMPLETION)
    del body["choices"][0]["token_ids"]
    assert batch.read_completion(body).sequence == ["Q", " target", "Q", " target"]
    del body["choices"][0]["logprobs"]
    assert batch.read_completion(body).sequence == ["Q targetQ target"]


def test_identical_tokens_and_logprobs_pass() -> None:
    r = batch.judge(answer([1, 2, 3]), answer([1, 2, 3]), ALL_RAN)
    assert r.result == "PASS"
    assert r.detail == (
        "3 greedy token ids identical alone and beside 5 running requests (2 with the same "
        "prompt); logprobs identical"
    )


def test_identical_tokens_with_drifting_logprobs_pass_and_say_so() -> None:
    r = batch.judge(answer([1, 2], [-1.0, -2.0]), answer([1, 2], [-1.0, -2.000003]), ALL_RAN)
    assert r.result == "PASS" and "logprobs differ by up to 3e-06" in r.detail


def test_a_different_token_fails_and_names_it() -> None:
    r = batch.judge(answer([1, 2, 3]), answer([1, 9, 3]), ALL_RAN)
    assert r.result == "FAIL"
    assert "differs at token 1 of 3" in r.detail
    assert "alone 2 '2' logprob -7.04924" in r.detail and "batched 9 '9'" in r.detail


def test_alone_twice_tells_nondeterminism_from_batch_variance() -> None:
    same = batch.judge(answer([1, 2]), answer([1, 9]), ALL_RAN, again=answer([1, 2]))
    assert "alone twice gives the same tokens (batch variance)" in same.detail
    other = batch.judge(answer([1, 2]), answer([1, 9]), ALL_RAN, again=answer([1, 7]))
    assert "not deterministic even without a batch" in other.detail


def test_a_shorter_answer_differs_where_it_ends() -> None:
    assert batch.first_difference([1, 2, 3], [1, 2]) == 2
    assert batch.first_difference([1, 2], [1, 2]) is None


def test_others_that_were_not_running_fail_without_comparing() -> None:
    r = batch.judge(answer([1]), answer([1]), Overlap(others=5, running=3, identical=2))
    assert r.result == "FAIL" and "only 3 of the 5 other requests" in r.detail
    errors = Overlap(others=5, running=5, identical=2, errors=["HTTP 400: too long"])
    r = batch.judge(answer([1]), answer([1]), errors)
    assert r.result == "FAIL" and "HTTP 400: too long" in r.detail


def test_recorded_stream_lines() -> None:
    assert batch.stream_chunk(STREAM_FIRST) == (True, False)
    assert batch.stream_chunk(STREAM_LAST) == (True, True)
    assert batch.stream_chunk(STREAM_DONE) == (False, True)
    assert batch.stream_chunk("") == (False, False)
    assert batch.stream_chunk("data: {not json") == (False, False)
