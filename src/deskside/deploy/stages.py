"""The deploy's first stages: facts and files.

    preflight  every node: reachable, root/sudo where needed, ports free on the head,
               Python with vLLM (native) or Docker (container), free disk; and across the
               nodes, what must match (`deskside.deploy.drift`: NCCL build, driver, ...)
               and, for a pinned revision, the workers' model snapshot against the head's
               (`deskside.models.check`); for a container runtime, the workers' engine
               image against the head's, by digest (`deskside.images.check`)
    render     `deskside.render.assemble.render`: the bundle and its lock
    diff       the new lock against the head's `current/cluster/deskside.lock`
    push       every node's bundle folder (the head's with `cluster/`) into a staging
               folder, renamed into a release folder when complete; the local model folder
               where `deskside.layout.model_upload` says; the proxy key (0600) on the head;
               then, once every node has all of it, every node's `current` link switched
               to the new release

Preflight and diff only read (they run in a dry run too), every node at once
(`deskside.runtime.ops.at_once`); push returns operations in two waves (the files, then
the switch), each carried out on every node at once.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from deskside import secrets
from deskside.deploy import preflight as pf
from deskside.deploy import releases as rel
from deskside.deploy.deployment import Deployment, StageFailed
from deskside.deploy.drift import up_refusal
from deskside.deploy.survey import look
from deskside.errors import PlanRefused, UsageError
from deskside.facts.drift import NodeShared, compare
from deskside.images.check import image_findings
from deskside.layout import MANIFEST_FILE, model_upload
from deskside.models.check import model_findings
from deskside.render import lock as lockfile
from deskside.render.bundle import CLUSTER_DIR
from deskside.runtime.control import Control, control_kind
from deskside.runtime.ops import Executed, Op, Put, Run, Upload, at_once, execute
from deskside.runtime.pipeline import Outcome
from deskside.safefs import folder_files
from deskside.units import MIB


def _fail_findings(findings: list[pf.Finding]) -> StageFailed:
    lines = [f"{f.node}: {f.message}" for f in findings]
    hints = [f"{f.node}: {f.hint}" for f in findings if f.hint]
    return StageFailed(
        f"preflight found {len(findings)} problem{'s' if len(findings) != 1 else ''}:\n  "
        + "\n  ".join(lines),
        hint="\n  ".join(hints) or None,
    )


def _upload_bytes(d: Deployment) -> int:
    upload = model_upload(d.recipe, d.recipe_path)
    if upload is None or not upload[0].is_dir():
        return 0
    # what the push copies (a link out of the folder is refused here, before any upload)
    return sum(source.stat().st_size for _, source in folder_files(upload[0]))


def preflight(d: Deployment) -> Outcome:
    recipe = d.recipe
    base = Control(
        control_kind(recipe.runtime.systemd, recipe.runtime.kind),
        recipe.runtime.kind,
        d.layout,
        compose_program=recipe.runtime.compose,
    )
    need = _upload_bytes(d) + MIB
    # every node at once; what compares them runs on the answers, in the recipe's order
    looks = at_once(d.nodes, lambda n: look(d, d.nodes[n], base, need))
    findings: list[pf.Finding] = []
    matched: list[NodeShared] = []
    for name, seen in looks.items():
        findings += seen.findings
        d.report.notes.extend(seen.notes)
        if seen.matched is not None:
            matched.append(seen.matched)
        if seen.control is not None:
            d.controls[name] = seen.control
        if seen.state_read:
            d.old_states[name] = seen.state
            d.old_alive[name] = seen.alive
    drift, notes = up_refusal(compare(matched), d.recipe_path)
    findings += [pf.Finding(f.node, f.what, f.fix) for f in drift]
    d.report.notes += notes
    # a pinned revision: every worker holds the head's snapshot (quick, from the records)
    answers = {n: seen.model for n, seen in looks.items() if seen.model is not None}
    model, notes = model_findings(recipe, answers, str(d.recipe_path))
    findings += [pf.Finding(n, what, fix) for n, what, fix in model]
    d.report.notes += notes
    # a container runtime: every worker holds the head's engine image, by digest
    images = {n: seen.image for n, seen in looks.items() if seen.image is not None}
    image, notes = image_findings(recipe, images, str(d.recipe_path))
    findings += [pf.Finding(n, what, fix) for n, what, fix in image]
    d.report.notes += notes
    if findings:
        raise _fail_findings(findings)
    running = [n for n, alive in d.old_alive.items() if alive]
    return Outcome(
        f"{len(recipe.cluster.nodes)} nodes ok"
        + (f"; running now: {', '.join(running)}" if running else "")
    )


def render_stage(d: Deployment) -> Outcome:
    if not d.plan.fits:
        raise PlanRefused(
            f"deskside refuses to deploy: {d.plan.refusal}",
            hint="lower max_model_len (see `deskside plan`) or give the KV cache more memory",
        )
    upload = model_upload(d.recipe, d.recipe_path)
    if upload is not None and not (upload[0] / "config.json").is_file():
        raise StageFailed(
            f"model folder {upload[0]} has no config.json",
            hint=f"create it: deskside model tiny --arch deepseek-v3 --out {upload[0]}",
        )
    from deskside.render.assemble import render  # only `up` renders: status stays light

    d.bundle = render(d.recipe, d.recipe_path, d.plan)
    d.report.notes.extend(d.bundle.notes)
    return Outcome(f"{len(d.bundle)} files")


def model_manifest(folder: Path) -> bytes:
    """Which files the local model folder holds (size and modification time): a re-push
    is needed when it changes. A link leading out of the folder is refused here, before
    anything is pushed (`deskside.safefs.folder_files`)."""
    entries = {}
    for rel_path, source in folder_files(folder):
        st = source.stat()
        entries[rel_path] = [st.st_size, st.st_mtime_ns]
    return json.dumps(entries, sort_keys=True).encode()


def _node_release(d: Deployment, node: str, manifest: str | None) -> tuple[str | None, bool]:
    """(the node's current release, whether it holds the model folder's manifest)."""
    t = d.t(node)
    r = t.run(rel.read_current(d.layout))
    held = False
    if manifest is not None:
        try:
            held = t.get(manifest) == d.model_manifest
        except FileNotFoundError:
            held = False
    return (rel.parse_current(r.stdout) if r.ok else None), held


def diff(d: Deployment) -> Outcome:
    assert d.bundle is not None
    head = d.t(d.head)
    upload = model_upload(d.recipe, d.recipe_path)
    remote = None
    if upload is not None:
        d.model_manifest = model_manifest(upload[0])
        remote = f"{upload[1]}/{MANIFEST_FILE}"
    seen = at_once(d.nodes, lambda n: _node_release(d, n, remote))
    d.previous.update({n: current for n, (current, _) in seen.items()})
    d.model_changed = upload is not None and not all(held for _, held in seen.values())
    lock_path = f"{d.layout.current}/{lockfile.LOCK_PATH}"
    try:
        d.old_lock = lockfile.parse_lock(head.get(lock_path).decode(), f"{d.head}:{lock_path}")
    except FileNotFoundError:
        d.old_lock = None
    except UsageError as exc:
        d.report.notes.append(f"{exc.message}; comparing against an empty deployment")
        d.old_lock = None
    d.report.diffs = lockfile.diff(d.old_lock, d.bundle)
    files_same = not any(h.changes_anything for h in d.report.diffs)
    d.unchanged = (
        files_same
        and not d.model_changed
        and all(d.old_alive.get(n) for n in d.nodes)
        and all(
            (s := d.old_states.get(n)) is not None and s.release == d.previous.get(n)
            for n in d.nodes
        )
    )
    parts = []
    for h in d.report.diffs:
        if not h.changes_anything:
            parts.append(f"{h.host}: unchanged")
            continue
        what = f"{len(h.added)} added, {len(h.changed)} changed, {len(h.removed)} removed"
        parts.append(f"{h.host}: {what}" + ("; engine restarts" if h.restart_engine else ""))
    if upload is not None and d.model_changed:
        parts.append(f"model folder {upload[0].name} to push")
    return Outcome("; ".join(parts))


def _new_release_id(d: Deployment, lock_text: bytes) -> str:
    """A release id no node has yet (a fact per node)."""
    base = rel.release_id(d.now(), hashlib.sha256(lock_text).hexdigest())
    rid, suffix = base, 2
    while any(_taken(d, rid).values()):
        rid, suffix = f"{base}-{suffix}", suffix + 1
    return rid


def _taken(d: Deployment, rid: str) -> dict[str, bool]:
    """Which nodes have a release `rid` already (every node at once)."""
    argv = ["test", "-e", d.layout.release(rid)]
    return at_once(d.nodes, lambda n: d.t(n).run(argv).ok)


def _tree_ops(d: Deployment, node: str, folder: str, base: str) -> list[Op]:
    assert d.bundle is not None
    bundle = d.bundle
    return [
        Put(
            node,
            f"{base}/{rel_path}",
            data,
            bundle.mode(f"{folder}/{rel_path}"),
            "pushing the release",
        )
        for rel_path, data in bundle.folder(folder).items()
    ]


def _model_ops(d: Deployment, node: str, folder: Path, target: str, rid: str) -> list[Op]:
    staging = f"{Path(target).parent!s}/.partial-{Path(target).name}-{rid}"
    assert d.model_manifest is not None
    ops: list[Op] = [Run(node, ("rm", "-rf", "--", staging), "clearing the model staging folder")]
    # file contents only: a link inside the folder arrives as a file, none leads out of it
    for rel_path, source in folder_files(folder):
        remote = f"{staging}/{rel_path}"
        ops.append(Upload(node, source, remote, 0o644, f"pushing model folder {folder.name}"))
    ops.append(Put(node, f"{staging}/{MANIFEST_FILE}", d.model_manifest, 0o644, "model manifest"))
    ops.append(
        Run(
            node, tuple(rel.swap_model_folder(staging, target)), "putting the model folder in place"
        )
    )
    return ops


def _secret_ops(d: Deployment) -> list[Op]:
    """Behind a proxy: the engine's key file (engine.env) and, unless the recipe names its
    own, the proxy's master key, into the head's 0700 secrets folder; each value goes over
    SFTP into a file created 0600, on no command line."""
    recipe = d.recipe
    if not recipe.engine_keyed:
        return []
    ops: list[Op] = [
        Run(d.head, tuple(rel.private_dir(d.layout.secrets)), "creating the secrets folder"),
        Put(
            d.head,
            d.layout.engine_env,
            secrets.engine_env_text(secrets.engine_api_key(recipe.name)),
            0o600,
            "the engine's API key",
            secret=True,
        ),
    ]
    if recipe.runs_proxy and recipe.proxy.master_key_file is None:
        key = secrets.proxy_master_key(recipe.name)
        ops.append(
            Put(
                d.head,
                secrets.master_key_file(recipe, d.layout.secrets),
                (key.reveal() + "\n").encode(),
                0o600,
                "the proxy master key",
                secret=True,
            )
        )
    return ops


def _switched(d: Deployment, done: Executed) -> list[str]:
    return [
        op.node
        for op in done.done
        if isinstance(op, Run) and op.argv[:3] == ("sh", "-c", rel.SWITCH_SH)
    ]


def switch_back(d: Deployment, nodes: list[str]) -> list[str]:
    """Point each node's `current` at its previous release again (or remove it where there
    was none), now; returns what could not be done."""

    def back(node: str) -> str | None:
        prev = d.previous.get(node)
        argv = rel.switch_current(d.layout, prev) if prev else rel.remove_current(d.layout)
        r = d.t(node).run(argv)
        return None if r.ok else f"{node}: {(r.stderr or r.stdout).strip()[-200:]}"

    done = at_once(nodes, back)
    return [problem for problem in done.values() if problem]


def push(d: Deployment) -> Outcome:
    assert d.bundle is not None
    if d.unchanged:
        d.rid = next(iter(d.previous.values()))
        return Outcome("nothing changed and every engine runs", skipped=True)
    rid = _new_release_id(d, d.bundle[lockfile.LOCK_PATH])
    d.rid = rid
    # every node at once: its release folder, the model folder, the secrets (head); then,
    # once every node has all of it, every node's `current` switched
    files: list[Op] = []
    for node in d.recipe.cluster.nodes:
        name = node.name
        mounts = rel.container_mounts(d.recipe, d.layout, name)
        staging = d.layout.staging(rid)
        files.append(Run(name, tuple(rel.prepare_dirs(d.layout, mounts)), "creating folders"))
        files.append(
            Run(name, tuple(rel.clear_staging(d.layout, rid)), "clearing the staging folder")
        )
        files += _tree_ops(d, name, name, staging)
        if node.role == "head":
            files += _tree_ops(d, name, CLUSTER_DIR, f"{staging}/cluster")
        files.append(
            Run(name, tuple(rel.commit_release(d.layout, rid)), "committing the release folder")
        )
    upload = model_upload(d.recipe, d.recipe_path)
    if upload is not None and d.model_changed:
        for node in d.recipe.cluster.nodes:
            files += _model_ops(d, node.name, upload[0], upload[1], rid)
    files += _secret_ops(d)
    switch: list[Op] = [
        Run(node.name, tuple(rel.switch_current(d.layout, rid)), "switching current")
        for node in d.recipe.cluster.nodes
    ]

    def done(executed: Executed) -> None:
        d.switched = _switched(d, executed)

    def undo(executed: Executed) -> None:
        d.switched = []
        switch_back(d, _switched(d, executed))

    return Outcome(f"release {rid}", waves=[files, switch], after=done, undo=undo)


def prune_old_releases(d: Deployment) -> None:
    """After a good deploy: keep the newest releases (and the previous one) on each node."""
    protect = {r for r in (d.rid, *d.previous.values()) if r}

    def prune(node: str) -> None:
        r = d.t(node).run(rel.list_releases(d.layout))
        old = rel.releases_to_prune(r.stdout, d.options.keep_releases, protect) if r.ok else []
        if old:
            execute(
                [Run(node, tuple(rel.prune(d.layout, old)), "pruning old releases")],
                d.transports,
                Executed(),
            )

    at_once(d.nodes, prune)
