"""Write one diagnosis bundle of a run: `DIR/deskside-diagnose-<recipe>-<UTC stamp>.tar.gz`.

Usage (the CLI's `deskside diagnose`, and recovery code that finds a wedged cluster)::

    report = write_bundle(run, Path("diag"), reason="wedged: no token for 120 s")
    report.path      # the .tar.gz (mode 0600, in a folder made 0700 when new)
    report.members   # what it holds, paths below its top folder
    report.errors    # `member: why` for every piece that could not be collected

The archive has one top folder named like the file, holding:

    MANIFEST.json                 every member, its source, bytes, redactions, errors, reason
    cluster/run.json              deskside's record of the run
    cluster/recipe.yaml           the recipe the run started from
    cluster/status.json           `deskside status --json`
    cluster/engine-metrics.txt    the head engine's /metrics
    cluster/plan.json             `deskside plan --json`
    cluster/deskside.lock         the deployed release's lock (deployed runs)
    cluster/fabric-show.json      `deskside fabric show --json`
    cluster/doctor.json           `deskside doctor --json`
    nodes/<node>/state.json       what deskside started there
    nodes/<node>/engine.log       the last 5000 lines (4 MiB at most) of the engine's log
    nodes/<node>/<service>.log    the end of the proxy's, exporter's, ... logs
    nodes/<node>/processes.txt    the engine's process tree, every thread's state and wchan
    nodes/<node>/processes.json   the same, as data
    nodes/<node>/stacks.txt       py-spy dumps and kernel stacks of every engine process
    nodes/<node>/exporter-metrics.txt  deskside's exporter's /metrics (monitoring on)

Nodes are read first, all at once (one thread each), so the process states and stacks of
all nodes are taken close together and undisturbed; the cluster-wide pieces follow, a few
at a time. Every text member, the
manifest included, is scrubbed of the run's secrets (`deskside.diagnose.scrub`), and files
that are secrets by nature never enter.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import httpx

import deskside
from deskside.diagnose.cluster import ClusterCollector
from deskside.diagnose.known import local_secrets
from deskside.diagnose.manifest import (
    MANIFEST,
    Member,
    errors,
    manifest,
    manifest_text,
    safe_name,
)
from deskside.diagnose.node import MAX_LOG_BYTES, NodeCollector, cap
from deskside.diagnose.scrub import Scrubber, dropped
from deskside.errors import DesksideError, UsageError
from deskside.recipe.types import Recipe
from deskside.records.recipes import run_recipe
from deskside.records.run import RunRecord
from deskside.runtime.transports import transport_for
from deskside.safefs import PRIVATE_DIR, create_file
from deskside.transport.base import Transport

BUNDLE_MODE = 0o600

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BundleReport:
    path: Path
    members: list[str]  # paths in the archive, below its top folder
    errors: list[str]  # `member: why`, for every piece that could not be collected

    def to_dict(self) -> dict[str, object]:
        return {"bundle": str(self.path), "members": self.members, "errors": self.errors}


def bundle_name(recipe_name: str, when: datetime) -> str:
    """`deskside-diagnose-<recipe>-<UTC stamp>` (the file adds .tar.gz)."""
    stamp = when.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"deskside-diagnose-{safe_name(recipe_name)}-{stamp}"


def bundle_recipe(
    run: RunRecord, recipe_path: Path | None = None
) -> tuple[Recipe | None, Path, str | None]:
    """The recipe the run started from (or `recipe_path`): (recipe, its path, why not)."""
    try:
        recipe, path = run_recipe(run, recipe_path)
    except DesksideError as exc:
        return None, Path(recipe_path or run.recipe), exc.message
    return recipe, path, None


def scrubbed(members: list[Member], scrubber: Scrubber) -> list[Member]:
    """Every member scrubbed of secrets; members that are secrets by name dropped whole."""
    out = []
    for m in members:
        why = dropped(m.name)
        if why is not None:
            out.append(replace(m, text=None, dropped=why))
            continue
        error = scrubber.scrub(m.error)[0] if m.error else None
        source = scrubber.scrub(m.source)[0]
        if m.text is None:
            out.append(replace(m, error=error, source=source))
            continue
        name = "/".join(safe_name(scrubber.scrub(part)[0]) for part in m.name.split("/"))
        as_json = scrubber.scrub_json(m.text) if m.name.endswith((".json", ".lock")) else None
        text, count = as_json or scrubber.scrub(m.text)
        if as_json is None:
            text = cap(text, MAX_LOG_BYTES)  # cut after scrubbing: see `node.cap`
        out.append(replace(m, name=name, text=text, redactions=count, error=error, source=source))
    return out


def archive(folder: str, members: list[Member], manifest_json: str, mtime: float) -> bytes:
    """The tar.gz of `members` (present ones) and MANIFEST.json under `folder/`."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        os_dir = tarfile.TarInfo(folder)
        os_dir.type, os_dir.mode, os_dir.mtime = tarfile.DIRTYPE, 0o700, int(mtime)
        tar.addfile(os_dir)
        for name, text in [(MANIFEST, manifest_json)] + [
            (m.name, m.text) for m in members if m.present and m.text is not None
        ]:
            data = text.encode()
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o600, int(mtime)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _save(out_dir: Path, folder: str, data: bytes) -> Path:
    """Write the bundle exclusively (never over a file, never through a link)."""
    for n in range(1, 100):
        name = f"{folder}.tar.gz" if n == 1 else f"{folder}-{n}.tar.gz"
        path = out_dir / name
        if create_file(path, data, BUNDLE_MODE, dir_mode=PRIVATE_DIR):
            return path
    raise UsageError(f"{out_dir}: too many bundles named {folder}*", hint="choose another --out")


def write_bundle(
    run: RunRecord,
    out_dir: Path,
    *,
    transports: Mapping[str, Transport] | None = None,
    reason: str | None = None,
    progress: Progress | None = None,
    recipe_path: Path | None = None,
    http_transport: httpx.BaseTransport | None = None,
) -> BundleReport:
    """Collect everything about `run` (see the module docstring) and write the bundle into
    `out_dir`. `transports`: per node name, how to reach it (default: as `deskside status`
    does); `reason` goes into MANIFEST.json. Pieces that cannot be collected are recorded
    in the manifest and `errors`; only a bundle that cannot be written raises."""
    started = datetime.now(UTC)
    folder = bundle_name(run.recipe_name, started)
    given = transports or {}
    ts: dict[str, Transport] = {
        n.name: given[n.name] if n.name in given else transport_for(n, run.known_hosts)
        for n in run.nodes
    }
    recipe, path, recipe_error = bundle_recipe(run, recipe_path)
    scrubber = Scrubber()
    with contextlib.suppress(OSError, DesksideError):  # the patterns still apply
        scrubber.add(local_secrets(run.recipe_name, recipe))
    nodes = [NodeCollector(run, n, ts[n.name], recipe, progress, http_transport) for n in run.nodes]
    cluster = ClusterCollector(
        run, ts, recipe, path, recipe_error, progress=progress, http_transport=http_transport
    )
    collected: list[Member] = []
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        done: list[tuple[str, Future[object]]] = [
            (f"nodes/{safe_name(c.node.name)}", pool.submit(c.collect)) for c in nodes
        ]
        for name, future in done:
            try:
                future.result()
            except Exception as exc:  # a bug in one collector spares the rest
                collected.append(Member(name, name, error=f"{type(exc).__name__}: {exc}"))
    try:
        cluster.collect()
    except Exception as exc:  # a bug in one collector spares the rest
        collected.append(Member("cluster", "cluster", error=f"{type(exc).__name__}: {exc}"))
    for c in nodes:
        scrubber.add(c.secrets)
    collected[:0] = [m for c in nodes for m in c.members] + cluster.members
    members = scrubbed(collected, scrubber)
    folder = safe_name(scrubber.scrub(folder)[0])
    data = manifest(
        members,
        recipe=run.recipe_name,
        created_at=started.isoformat(timespec="seconds"),
        reason=reason,
        deskside_version=deskside.__version__,
        folder=folder,
    )
    text = manifest_text(data)
    manifest_json = (scrubber.scrub_json(text) or scrubber.scrub(text))[0]
    bundle = archive(folder, members, manifest_json, time.time())
    saved = _save(out_dir, folder, bundle)
    if progress is not None:
        progress(f"wrote {saved}")
    return BundleReport(
        path=saved,
        members=[MANIFEST, *(m.name for m in members if m.present)],
        errors=errors(members),
    )
