"""What `deskside doctor` reports: one Finding per thing it found on a node, and the
report of a whole recipe.

A finding says what it is (`kind`), where (`node`), in one line (`what`), how many bytes
stopping or removing it would return (`reclaimable_bytes`), whether doctor may act on it
by itself (`fixable`: only what it can prove stale) and whether it did (`fixed`). `fix` is
the exact command a user can run (for what doctor never touches by itself, such as a
process it did not start); `action` is the argv doctor runs on the node with `--fix`.
`severity` orders the output: a `problem` stops `deskside up` (nodes that must match but
differ), a `warning` costs memory, disk or a port, `info` is context.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

Severity = Literal["problem", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    kind: str
    node: str
    what: str
    reclaimable_bytes: int = 0
    fixable: bool = False
    fixed: bool = False
    severity: Severity = "warning"
    fix: str | None = None  # the command or step for the user
    action: tuple[str, ...] = ()  # what `--fix` runs on the node (fixable findings only)
    detail: dict[str, Any] = field(default_factory=dict)

    def done(self) -> Finding:
        return replace(self, fixed=True)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["action"] = list(self.action)
        return d


@dataclass
class DoctorReport:
    recipe: str
    findings: list[Finding] = field(default_factory=list)
    # per node: the memory the plan needs there and what is available now (bytes)
    memory: dict[str, dict[str, int]] = field(default_factory=dict)
    unreachable: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "problem" and not f.fixed]

    @property
    def reclaimable_bytes(self) -> int:
        return sum(f.reclaimable_bytes for f in self.findings if not f.fixed)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.unreachable

    def to_dict(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "ok": self.ok,
            "findings": [f.to_dict() for f in self.findings],
            "reclaimable_bytes": self.reclaimable_bytes,
            "memory": self.memory,
            "unreachable": self.unreachable,
        }
