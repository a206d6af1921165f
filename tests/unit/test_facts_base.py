"""`deskside.facts.base`: every fact of a round trip gets exactly its own output, a failing,
oversized or misread fact is an Unread with its reason, and the others are still read."""

from __future__ import annotations

import pytest

from deskside.facts.base import Fact, FactError, Unread, gather, split_sections
from deskside.transport.local import LocalTransport


def strict(text: str) -> str:
    if "bad" in text:
        raise FactError("bad output")
    return text


def test_each_fact_gets_its_own_section_with_its_arguments() -> None:
    hello = Fact("hello", 'printf "%s|" "$@"', strict, args=("a b", "'c'", "$HOME"))
    lines = Fact("lines", "printf 'one\\ntwo\\n'", lambda s: s.splitlines())
    tail = Fact("tail", "printf 'no newline'", strict)
    got = gather(LocalTransport(), hello, lines, tail)
    assert got.get(hello) == "a b|'c'|$HOME|"
    assert got.get(lines) == ["one", "two"]
    assert got.get(tail) == "no newline"
    assert got.unread == []


def test_failures_are_unread_with_a_reason_and_do_not_hide_the_others() -> None:
    big = Fact("big", "yes | head -c 5000", len, cap=100)
    fails = Fact("fails", "echo partial; exit 3", strict)
    refused = Fact("refused", "echo bad", strict)
    crash = Fact("crash", "echo x", lambda s: int(s))
    fine = Fact("fine", "echo ok", str.strip)
    got = gather(LocalTransport(), big, fails, refused, crash, fine)
    assert got.result(big) == Unread("big", "printed more than its 100 bytes")
    assert got.result(fails) == Unread("fails", "exited with status 3")
    assert got.result(refused) == Unread("refused", "bad output")
    assert got.result(crash) == Unread("crash", "output not understood (ValueError)")
    assert got.get(fine) == "ok"
    with pytest.raises(FactError, match="fails on local: exited with status 3"):
        got.get(fails)


def test_a_fact_cannot_forge_another_facts_section() -> None:
    """A node's output that mimics a marker without knowing this round trip's is content."""
    forger = Fact(
        "forger", "printf '@@deskside-fact-00 END 0\\n@@deskside-fact-00 BEGIN 1\\nX'", strict
    )
    victim = Fact("victim", "echo real", str.strip)
    got = gather(LocalTransport(), forger, victim)
    assert got.get(victim) == "real"
    assert "END 0" in got.get(forger)


def test_a_round_trip_past_its_deadline_keeps_what_finished() -> None:
    quick = Fact("quick", "echo done", str.strip)
    slow = Fact("slow", "sleep 5", strict)
    got = gather(LocalTransport(), quick, slow, timeout=1.5)
    assert got.get(quick) == "done"
    assert got.result(slow) == Unread("slow", "timed out")


def test_split_sections_without_any_answer() -> None:
    fact = Fact("x", "true", strict)
    assert split_sections([fact], "", "M", 255) == {"x": Unread("x", "exited with status 255")}
    assert split_sections([fact], "", "M", 0) == {"x": Unread("x", "no answer")}


def test_facts_in_one_round_trip_need_distinct_names() -> None:
    with pytest.raises(ValueError, match="share a name"):
        gather(LocalTransport(), Fact("a", "true", strict), Fact("a", "true", strict))


def test_a_command_line_as_a_fact() -> None:
    from deskside.facts.base import command_fact

    fact = command_fact("argv", ["printf", "%s|", "a b", "$HOME", "'q'"], strict)
    assert gather(LocalTransport(), fact).get(fact) == "a b|$HOME|'q'|"


def test_the_fake_nodes_read_back_what_a_round_trip_sends() -> None:
    """The tests' fake nodes (`fact_answers`) answer each fact of a round trip by its own
    command line: reading the script back must give exactly each fact's argv."""
    from deskside.facts.base import gather_script
    from deskside.transport.base import Result

    from .fact_answers import answer_round_trip, fact_argvs

    facts = [
        Fact("a", "echo 'x y'\nprintf %s \"$1\"", strict, args=("it's", "")),
        Fact("b", "true", strict),
    ]
    marker = "@@deskside-fact-00"
    assert fact_argvs(["sh", "-c", gather_script(facts, marker)]) == (
        marker,
        [f.argv() for f in facts],
    )
    seen: list[list[str]] = []

    def answer(argv: list[str]) -> Result | None:
        seen.append(argv)
        return Result(0, "out of a", "") if argv[2].startswith("echo") else Result(3, "", "")

    reply = answer_round_trip(["sh", "-c", gather_script(facts, marker)], answer)
    assert reply is not None
    values = split_sections(facts, reply.stdout, marker, reply.rc)
    assert values == {"a": "out of a", "b": Unread("b", "exited with status 3")}
    assert answer_round_trip(["sh", "-c", "echo hi"], answer) is None
