"""`deskside model sync`: the pinned revision's snapshot from the head's Hugging Face cache
to every worker's, over the fabric.

Per worker, in parallel: what it holds (`node_copy.state`: hashes from its record, or
hashed where a file changed since), free disk; which blobs differ from the head's manifest
(`plan_copy`, pure); then a receiver on the worker and a sender on the head, joined by
`streams` TCP connections to the worker's fabric address (`deskside.engine.launch.node_ip`,
the address vLLM's ranks use) and a one-shot random token handed to both over SSH. Why TCP
and not SSH channels or rsync: on a private 100-200 Gb/s link the cipher is the bottleneck
of every SSH stream, and each file is checked by sha256 against the manifest anyway.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from deskside.engine.launch import engine_python, node_ip
from deskside.errors import DesksideError, UsageError
from deskside.facts.model_folder import hf_cache_entry
from deskside.recipe.types import Node, Recipe
from deskside.transport.base import Transport
from deskside.units import MIB

STREAMS = 4
MARGIN_BYTES = 256 * MIB
COPY_TIMEOUT = 24 * 3600.0

Progress = Callable[[str, int, int], None]  # node, bytes received, bytes to receive


NODE_MODULES = ("node_files", "node_disk", "node_copy")


def node_program() -> str:
    """`node_files`, `node_disk` and `node_copy` as one `python -c` program (standard
    library only; their imports of each other go, as they share one namespace)."""
    pkg = resources.files("deskside.models")
    texts = []
    for i, name in enumerate(NODE_MODULES):
        text = pkg.joinpath(f"{name}.py").read_text()
        if i:
            text = text.replace("from __future__ import annotations\n", "")
        text = re.sub(r"from deskside\.models\.node_\w+ import \([^)]*\)\n", "", text)
        text = re.sub(r"from deskside\.models\.node_\w+ import [^\n(]*\n", "", text)
        texts.append(text)
    return "\n".join(texts)


def pinned(recipe: Recipe) -> tuple[str, str]:
    m = recipe.model
    if m.repo is None or m.revision is None:
        raise UsageError(
            "the recipe serves a model folder (model.path), not a Hugging Face revision",
            hint="`deskside up` pushes a model folder to every node itself; sync is for "
            "model.repo with model.revision",
        )
    return m.repo, m.revision


def node_run(
    t: Transport, python: str, command: str, cfg: dict[str, Any], timeout: float
) -> dict[str, Any]:
    """Run the node program's `command` with `cfg` on stdin; its JSON answer."""
    # -I -S: the standard library only, no site-packages to scan (a quicker start)
    argv = [python, "-I", "-S", "-c", node_program(), command]
    r = t.run(argv, input=json.dumps(cfg), timeout=timeout)
    last = r.stdout.strip().splitlines()[-1:] if r.stdout.strip() else []
    if not r.ok or not last:
        raise DesksideError(
            f"{t.name}: model {command} failed (exit {r.rc}): {r.stderr.strip()[-400:]}",
            hint=f"check that {python} runs on the node (runtime.python)",
        )
    try:
        out: dict[str, Any] = json.loads(last[0])
    except ValueError:
        raise DesksideError(f"{t.name}: model {command} answered {last[0][:200]!r}") from None
    return out


@dataclass(frozen=True)
class CopyPlan:
    need: list[dict[str, Any]]  # head manifest entries whose blob the worker must receive
    skipped: int  # files already the same
    to_receive: int  # bytes, partial files of an earlier sync counted as received
    extra: list[str]  # files of the worker's snapshot the head does not have
    foreign: list[tuple[str, str]]


def plan_copy(head: dict[str, Any], worker: dict[str, Any]) -> CopyPlan:
    """What the worker lacks: a file missing, of another size or sha256; a blob shared by
    several paths travels once."""
    have = {}
    if worker.get("present"):
        have = {f["path"]: f for f in worker["manifest"]["files"]}
    need: dict[str, dict[str, Any]] = {}
    skipped = 0
    for f in head["files"]:
        w = have.get(f["path"])
        same = w is not None and w["size"] == f["size"] and w["sha256"] == f["sha256"]
        if same and w is not None and w.get("blob") == f["blob"]:
            skipped += 1
        elif same:
            skipped += 1  # right content, another blob name: the link is remade
        else:
            need.setdefault(f["blob"], f)
    partials = worker.get("partials", {})
    to_receive = sum(f["size"] - min(partials.get(b, 0), f["size"]) for b, f in need.items())
    heads = {f["path"] for f in head["files"]}
    return CopyPlan(
        need=list(need.values()),
        skipped=skipped,
        to_receive=to_receive,
        extra=sorted(set(have) - heads),
        foreign=[(x[0], x[1]) for x in worker.get("foreign", [])],
    )


@dataclass
class NodeSync:
    node: str
    address: str
    files: int = 0  # copied
    bytes: int = 0
    skipped: int = 0
    hashed: int = 0  # files the worker hashed (changed since its record)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "ok": self.ok}


def _names(items: list[str], limit: int = 5) -> str:
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


@dataclass
class Sync:
    recipe: Recipe
    transports: Mapping[str, Transport]
    progress: Progress | None = None
    streams: int = STREAMS
    full: bool = False  # hash every file on the workers, whatever their records say
    head_refs: list[str] = field(default_factory=list, init=False)  # branches at the revision

    @property
    def python(self) -> str:
        return engine_python(self.recipe)

    def head_manifest(self) -> dict[str, Any]:
        repo, revision = pinned(self.recipe)
        head = self.recipe.head
        entry = hf_cache_entry(self.recipe.runtime.hf_cache, repo)
        got = node_run(
            self.transports[head.name],
            self.python,
            "state",
            {"entry": entry, "revision": revision},
            COPY_TIMEOUT,
        )
        if not got.get("present"):
            raise DesksideError(
                f"{head.name} (head) has no snapshot {revision} of {repo} in "
                f"{self.recipe.runtime.hf_cache}",
                hint="download it on the head first: deskside model pull RECIPE",
            )
        bad = [f"{p} -> {t}" for p, t in got["foreign"]] + [
            f"{p} -> {t} (missing)" for p, t in got["dangling"]
        ]
        if bad:
            raise DesksideError(
                f"{head.name} (head): links in the snapshot that do not lead to a file in "
                f"the entry's blobs/: {_names(bad)}",
                hint="download the revision again on the head (deskside model pull RECIPE)",
            )
        manifest: dict[str, Any] = got["manifest"]
        self.head_refs = got.get("refs", [])
        return manifest

    def worker_state(self, node: Node) -> dict[str, Any]:
        repo, revision = pinned(self.recipe)
        entry = hf_cache_entry(self.recipe.runtime.hf_cache, repo)
        cfg = {"entry": entry, "revision": revision, "full": self.full}
        return node_run(self.transports[node.name], self.python, "state", cfg, COPY_TIMEOUT)

    def worker(self, node: Node, head: Future[dict[str, Any]], t0: float) -> NodeSync:
        repo, revision = pinned(self.recipe)
        entry = hf_cache_entry(self.recipe.runtime.hf_cache, repo)
        out = NodeSync(node.name, node_ip(node))
        t = self.transports[node.name]
        st = self.worker_state(node)
        try:
            manifest = head.result()
        except DesksideError:
            return out  # the head's failure is the one to report
        return self._worker(node, t, entry, revision, manifest, st, out, t0)

    def _worker(
        self,
        node: Node,
        t: Transport,
        entry: str,
        revision: str,
        head: dict[str, Any],
        st: dict[str, Any],
        out: NodeSync,
        t0: float,
    ) -> NodeSync:
        out.hashed = st.get("hashed", 0)
        plan = plan_copy(head, st)
        out.skipped = plan.skipped
        if plan.foreign:
            out.problems.append(
                "links in its snapshot lead out of the cache entry's blobs/: "
                + _names([f"{p} -> {x}" for p, x in plan.foreign])
            )
            out.hints.append(f"look at them and remove them on {node.name}: rm -- PATH")
            return out
        if st["free_bytes"] < plan.to_receive + MARGIN_BYTES:
            out.problems.append(
                f"{st['free_bytes'] / MIB:,.0f} MiB free for {entry}, "
                f"{(plan.to_receive + MARGIN_BYTES) / MIB:,.0f} MiB needed"
            )
            out.hints.append("free disk space there, or point runtime.hf_cache at a larger disk")
            return out
        self._copy(node, t, entry, revision, head, plan, out)
        if plan.extra:
            snap = f"{entry}/snapshots/{revision}"
            out.problems.append(f"files the head does not have: {_names(plan.extra)}")
            out.hints.append(
                f"remove them on {node.name}: cd {snap} && rm -- " + " ".join(plan.extra)
            )
        out.seconds = round(time.monotonic() - t0, 3)
        return out

    def _copy(
        self,
        node: Node,
        t: Transport,
        entry: str,
        revision: str,
        head: dict[str, Any],
        plan: CopyPlan,
        out: NodeSync,
    ) -> None:
        token = secrets.token_hex(32)
        progress_file = f"{entry}/.deskside/sync-{secrets.token_hex(6)}.progress"
        recv_cfg = {
            "entry": entry,
            "revision": revision,
            "token": token,
            "listen": out.address,
            "need": [
                {"blob": f["blob"], "size": f["size"], "sha256": f["sha256"]} for f in plan.need
            ],
            "files": head["files"],
            "refs": self.head_refs,
            "progress": progress_file,
        }
        answer: dict[str, Any] = {}
        failure: list[DesksideError] = []

        def receive() -> None:
            try:
                answer.update(node_run(t, self.python, "receive", recv_cfg, COPY_TIMEOUT))
            except DesksideError as exc:
                failure.append(exc)

        receiver = threading.Thread(target=receive, daemon=True)
        receiver.start()
        sent: dict[str, Any] = {}
        if plan.need:
            port = self._wait_port(t, progress_file, receiver)
            if port is not None:
                send_cfg = {
                    "entry": hf_cache_entry(self.recipe.runtime.hf_cache, pinned(self.recipe)[0]),
                    "revision": revision,
                    "token": token,
                    "address": out.address,
                    "port": port,
                    "streams": self.streams,
                    "items": plan.need,
                }
                sender = threading.Thread(
                    target=lambda: sent.update(self._send(send_cfg, failure)), daemon=True
                )
                sender.start()
                while sender.is_alive():
                    sender.join(1.0)
                    self._report(node.name, t, progress_file, plan.to_receive)
        receiver.join()
        out.problems += [e.message for e in failure]
        out.problems += sent.get("failed", [])
        if answer:
            out.problems += [f"on arrival: {e}" for e in answer.get("errors", [])]
            out.files = answer["files"]
            out.bytes = answer["received_bytes"]
            if answer["missing"]:
                out.problems.append(f"{len(answer['missing'])} file(s) did not arrive")
                out.hints.append("run deskside model sync again: it goes on where it stopped")
        if self.progress is not None:
            self.progress(node.name, out.bytes, plan.to_receive)

    def _send(self, cfg: dict[str, Any], failure: list[DesksideError]) -> dict[str, Any]:
        try:
            return node_run(
                self.transports[self.recipe.head.name], self.python, "send", cfg, COPY_TIMEOUT
            )
        except DesksideError as exc:
            failure.append(exc)
            return {}

    def _read_progress(self, t: Transport, path: str, wait: float = 0.0) -> dict[str, int]:
        """The receiver's progress file; with `wait`, one command on the node that returns
        as soon as the file is there (or after `wait` seconds): a round trip, not a poll."""
        if wait:
            script = (
                'i=0; while [ ! -s "$1" ] && [ "$i" -lt "$2" ]; do sleep 0.02; i=$((i+1)); '
                'done; cat -- "$1" 2>/dev/null; true'
            )
            argv = ["sh", "-c", script, "sh", path, str(int(wait / 0.02))]
        else:
            argv = ["cat", "--", path]
        r = t.run(argv, timeout=30 + wait)
        values = {}
        for line in r.stdout.splitlines():
            k, _, v = line.partition("=")
            if v.isdigit():
                values[k] = int(v)
        return values

    def _wait_port(self, t: Transport, path: str, receiver: threading.Thread) -> int | None:
        deadline = time.monotonic() + 60
        while receiver.is_alive() and time.monotonic() < deadline:
            port = self._read_progress(t, path, wait=5.0).get("port")
            if port:
                return port
        return None

    def _report(self, node: str, t: Transport, path: str, total: int) -> None:
        if self.progress is not None:
            self.progress(node, self._read_progress(t, path).get("received", 0), total)

    def run(self) -> tuple[dict[str, Any], list[NodeSync]]:
        """The head's manifest and each worker's state are read at once; then the copies."""
        pinned(self.recipe)
        t0 = time.monotonic()
        workers = self.recipe.workers
        results: dict[str, NodeSync] = {}
        pool = ThreadPoolExecutor(max_workers=1)
        head = pool.submit(self.head_manifest)
        pool.shutdown(wait=False)

        def one(node: Node) -> None:
            try:
                results[node.name] = self.worker(node, head, t0)
            except DesksideError as exc:
                results[node.name] = NodeSync(
                    node.name,
                    node_ip(node),
                    problems=[exc.message],
                    hints=[exc.hint] if exc.hint else [],
                )

        threads = [threading.Thread(target=one, args=(n,)) for n in workers]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return head.result(), [results[n.name] for n in workers]
