"""down removes the namespaces a run created and says which one it could not."""

from __future__ import annotations

from deskside.runtime.nodes import remove_namespaces
from deskside.transport.base import Result
from deskside.transport.fake import FakeTransport

BUSY = Result(1, "", 'Cannot remove namespace file "/run/netns/ds-a": Device or resource busy\n')


def test_gone_namespaces_are_no_leftover() -> None:
    t = FakeTransport(answers={("ip", "netns", "list"): Result(0, "", "")})
    assert remove_namespaces(t, ["ds-a", "ds-b"], tries=2) == []
    assert [c[1] for c in t.calls if c[1][:3] == ("ip", "netns", "del")] == [
        ("ip", "netns", "del", "ds-a"),
        ("ip", "netns", "del", "ds-b"),
    ]


def test_an_already_missing_namespace_is_not_a_failure() -> None:
    t = FakeTransport(
        answers={
            ("ip", "netns", "del", "ds-a"): Result(1, "", "No such file or directory\n"),
            ("ip", "netns", "list"): Result(0, "ds-b (id: 1)\n", ""),
        }
    )
    assert remove_namespaces(t, ["ds-a"], tries=2) == []


def test_a_busy_namespace_is_retried_then_named() -> None:
    t = FakeTransport(
        answers={
            ("ip", "netns", "del", "ds-a"): BUSY,
            ("ip", "netns", "list"): Result(0, "ds-a (id: 0)\n", ""),
        }
    )
    left = remove_namespaces(t, ["ds-a", "ds-b"], tries=2)
    assert left == [
        'namespace ds-a: Cannot remove namespace file "/run/netns/ds-a": Device or resource busy'
    ]
    tried = [c[1][3] for c in t.calls if c[1][:3] == ("ip", "netns", "del")]
    assert tried == ["ds-a", "ds-b", "ds-a"]  # only the busy one is tried again
