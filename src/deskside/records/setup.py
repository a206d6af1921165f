"""What `deskside setup` wrote on a node: `setup.json` in the node's state folder
(runtime.root/<recipe name>), read and written through the node's Transport.

Each entry is one thing deskside made, with what proves it is still deskside's own: a file
with the sha256 of the bytes written (`setup --undo` removes it only while it still has
them), a line added to a file it does not own (removed only while the line is there, byte
for byte), a unit it enabled (disabled by undo only if it was not enabled before). Pure: the
models; the node side is `deskside.setup.apply`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_SETUP_BYTES = 64 * 1024
SETUP_FILE = "setup.json"


class Written(BaseModel):
    """One file deskside wrote (`kind` file), or one line it added to a file (`line`)."""

    model_config = ConfigDict(extra="forbid")

    path: str
    kind: Literal["file", "line"] = "file"
    sha256: str = ""  # of the whole file as written (kind file)
    line: str = ""  # the line added, without its newline (kind line)
    what: str = ""  # why, as users read it


class SetupRecord(BaseModel):
    """Everything `setup` made on one node, for its recipe."""

    model_config = ConfigDict(extra="forbid")

    recipe: str
    node: str
    at: str  # the last run that changed something (UTC, ISO 8601)
    written: list[Written] = Field(default_factory=list, max_length=64)
    enabled: list[str] = Field(default_factory=list, max_length=16)  # units it enabled

    def file(self, path: str) -> Written | None:
        return next((w for w in self.written if w.path == path and w.kind == "file"), None)

    def line(self, path: str, line: str) -> Written | None:
        return next(
            (w for w in self.written if w.path == path and w.kind == "line" and w.line == line),
            None,
        )


__all__ = ["MAX_SETUP_BYTES", "SETUP_FILE", "SetupRecord", "Written"]
