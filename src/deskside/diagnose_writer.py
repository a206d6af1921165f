"""The diagnostic bundle as the recovery policy writes it (before a restart)."""

from __future__ import annotations

from pathlib import Path

from deskside.runtime.records import RunRecord
from deskside.runtime.watch import BundleWriter


def bundle_writer(known_hosts: str | None = None) -> BundleWriter | None:
    """None until the diagnose package is there."""
    return None


__all__ = ["bundle_writer"]
_ = (Path, RunRecord)
