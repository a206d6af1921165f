"""User-facing errors: what is wrong, where, and how to fix it. Never a traceback."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Location:
    """A place in a user's file: path, 1-based line and column, and the field path."""

    path: str
    line: int | None = None
    column: int | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = self.path
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        if self.field:
            where += f" ({self.field})"
        return where


class DesksideError(Exception):
    """An error the user can act on. The CLI prints it and exits with `exit_code`."""

    exit_code = 1

    def __init__(
        self, message: str, hint: str | None = None, location: Location | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.location = location

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"error": type(self).__name__, "message": self.message}
        if self.hint:
            data["hint"] = self.hint
        if self.location:
            data["location"] = {
                "path": self.location.path,
                "line": self.location.line,
                "column": self.location.column,
                "field": self.location.field,
            }
        return data


class UsageError(DesksideError):
    """The user asked for something malformed (bad flag, bad recipe)."""

    exit_code = 2


class RecipeError(UsageError):
    """A recipe that does not load or does not make sense. May carry several problems."""

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        location: Location | None = None,
        problems: list[RecipeError] | None = None,
    ) -> None:
        super().__init__(message, hint, location)
        self.problems = problems or []


class ModelConfigError(UsageError):
    """A model config.json deskside cannot read or does not know."""


class PlanRefused(DesksideError):
    """The plan does not fit: vLLM would refuse to start, or the host could freeze."""

    exit_code = 3
