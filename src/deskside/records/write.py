"""The one writer of deskside's records: the record's JSON written to an exclusive
temporary file, given its mode and renamed over the record, never through a link.

On this machine that is `deskside.safefs.write_file` (folders made 0700 under
$DESKSIDE_HOME, none of them a link); on a node, the Transport's `put`, which writes the
same way over SFTP or here.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from deskside.safefs import write_file
from deskside.transport.base import Transport

RECORD_MODE = 0o600  # this machine: deskside's own records, for the user only
# A node's state folder: its guard and exporter (systemd services or containers, perhaps
# another user) read the records there; they hold pids and paths, never a secret.
NODE_RECORD_MODE = 0o644


def record_bytes(record: BaseModel) -> bytes:
    return record.model_dump_json(indent=2).encode() + b"\n"


def write_here(path: Path, record: BaseModel) -> None:
    """Write `record` to `path` on this machine (0600)."""
    write_file(path, record_bytes(record), RECORD_MODE)


def write_on_node(t: Transport, path: str, record: BaseModel) -> None:
    """Write `record` to `path` on the node `t` reaches."""
    t.put(record_bytes(record), path, NODE_RECORD_MODE)


__all__ = ["NODE_RECORD_MODE", "RECORD_MODE", "record_bytes", "write_here", "write_on_node"]
