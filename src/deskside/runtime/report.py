"""What a command on a cluster answers, whatever the cluster is (a run, a replica set): every
report of `up` and `down` and every status shares one small shape — whether it went well,
the exit code the command ends with, and its one JSON object (each kind keeps its own keys).
`Stopped` is what a run's `down` did."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class Report(Protocol):
    @property
    def ok(self) -> bool: ...

    @property
    def exit_code(self) -> int: ...

    def to_dict(self) -> dict[str, object]: ...


@dataclass(frozen=True)
class Stopped:
    """What `down` did: each thing it could not stop, as `what: why`."""

    recipe: str
    leftovers: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.leftovers

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def what(self) -> str:
        """What was stopped, in words."""
        return self.recipe

    def to_dict(self) -> dict[str, object]:
        return {"recipe": self.recipe, "stopped": self.ok, "leftovers": list(self.leftovers)}


__all__ = ["Report", "Stopped"]
