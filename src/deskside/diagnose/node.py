"""One node's part of a diagnosis, through the node's Transport: the state deskside recorded
there, the tail of the engine's log (and of its services' logs), the engine's process tree
with every thread's state, the stacks of every engine process, and deskside's exporter's
/metrics. Every command has a timeout; a piece that fails is recorded and the others are
still collected. Once the node cannot be reached over SSH, the remaining pieces are recorded
as not collected at once (no second wait for the same dead host)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

import httpx

from deskside.diagnose.known import node_secret_files, node_secrets_command
from deskside.diagnose.manifest import Member, safe_name
from deskside.diagnose.procs import (
    ProcTree,
    container_pids_command,
    parse_pids,
    parse_session_pids,
    parse_tree,
    render_tree,
    session_pids_command,
    tree_command,
    unit_pids_command,
)
from deskside.diagnose.scrub import secret_values
from deskside.diagnose.stacks import python_dirs, stacks_command, stacks_timeout
from deskside.errors import DesksideError
from deskside.exporter.series import EXPORTER_PORT
from deskside.httpclient import METRICS, Limits, client
from deskside.recipe.types import Recipe
from deskside.records.node import NodeState, read_state
from deskside.records.run import RunNode, RunRecord
from deskside.runtime import node_sh
from deskside.runtime.control import Control
from deskside.runtime.nodes import control_of, login_control
from deskside.transport.base import Result, SshError, Transport

LOG_LINES = 5000  # of the engine's log
SERVICE_LOG_LINES = 2000  # of each service's log
MAX_LOG_BYTES = 4 << 20  # of any one log tail
SCRUB_MARGIN = 64 << 10  # collected beyond MAX_LOG_BYTES, longer than any secret
COMMAND_TIMEOUT = 60.0
HTTP_TIMEOUT = 5.0


Progress = Callable[[str], None]


class NotCollected(Exception):
    """A piece that cannot be collected; its message goes into the manifest."""


def _out(t: Transport, r: Result, what: str) -> str:
    if not r.ok:
        detail = (r.stderr or r.stdout).strip()[-300:] or "no output"
        raise NotCollected(f"{t.name}: {what} failed (exit {r.rc}): {detail}")
    return r.stdout


def cap(text: str, limit: int = MAX_LOG_BYTES + SCRUB_MARGIN) -> str:
    """The last `limit` bytes of `text` (a log's end is what tells). What is collected
    keeps SCRUB_MARGIN more than the bundle holds: the bundle is scrubbed first and cut to
    MAX_LOG_BYTES after, so a secret straddling the cut is seen whole."""
    data = text.encode()
    return text if len(data) <= limit else data[-limit:].decode(errors="replace")


@dataclass
class NodeCollector:
    run: RunRecord
    node: RunNode
    t: Transport
    recipe: Recipe | None = None
    progress: Progress | None = None
    http_transport: httpx.BaseTransport | None = None
    members: list[Member] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)
    unreachable: str | None = None

    @property
    def base(self) -> str:
        return f"nodes/{safe_name(self.node.name)}"

    def _say(self, what: str) -> None:
        if self.progress is not None:
            self.progress(f"{self.node.name}: {what}")

    def _piece(self, name: str, source: str, get: Callable[[], str | None]) -> str | None:
        """Collect one member; its failure is recorded, never raised."""
        path = f"{self.base}/{name}"
        if self.unreachable is not None:
            self.members.append(Member(path, source, error=f"not collected: {self.unreachable}"))
            return None
        t0 = time.monotonic()
        text: str | None = None
        try:
            text = get()
            member = Member(path, source, text)
        except SshError as exc:
            self.unreachable = exc.message
            member = Member(path, source, error=exc.message)
        except (NotCollected, DesksideError, OSError, httpx.HTTPError) as exc:
            message = exc.message if isinstance(exc, DesksideError) else str(exc)
            member = Member(path, source, error=message or type(exc).__name__)
        except Exception as exc:  # recorded, never fatal
            member = Member(path, source, error=f"{type(exc).__name__}: {exc}")
        self.members.append(replace(member, seconds=time.monotonic() - t0))
        return text

    def _skip(self, name: str, source: str, why: str) -> None:
        path = f"{self.base}/{name}"
        if self.unreachable is not None:
            self.members.append(Member(path, source, error=f"not collected: {self.unreachable}"))
        else:
            self.members.append(Member(path, source, skipped=why))

    def collect(self) -> NodeCollector:
        run, node, t = self.run, self.node, self.t
        layout = run.layout(node)
        self._say("state")
        state: list[NodeState | None] = []

        def read() -> str | None:
            st = read_state(t, layout, run.recipe_name)
            state.append(st)
            if st is None:
                raise NotCollected(f"{t.name}: nothing started by deskside runs there")
            return st.model_dump_json(indent=2) + "\n"

        self._piece("state.json", f"{t.name}:{layout.state_file}", read)
        self._known_secrets()
        st = state[0] if state else None
        if st is None:
            why = "no state of a started engine on the node"
            for name in ("engine.log", "processes.txt", "stacks.txt"):
                self._skip(name, t.name, why)
        else:
            control = self._control()
            if control is not None:
                self._logs(st, control)
                tree = self._processes(st, control)
                self._stacks(tree)
            else:
                for name in ("engine.log", "processes.txt", "stacks.txt"):
                    self._skip(name, t.name, "the node's login could not be checked")
        self._exporter(st)
        return self

    def _control(self) -> Control | None:
        """How the engine is controlled, with `sudo -n` for a non-root login."""
        if self.unreachable is not None:
            return None
        try:
            return login_control(self.t, control_of(self.run, self.node))
        except SshError as exc:
            self.unreachable = exc.message
        except DesksideError:
            pass
        return None

    # -- pieces

    def _known_secrets(self) -> None:
        if self.unreachable is not None:
            return
        files = node_secret_files(self.run.layout(self.node), self.recipe, self.node.role == "head")
        try:
            r = self.t.run(node_secrets_command(files), timeout=30)
        except DesksideError:
            return  # the patterns still apply
        self.secrets += secret_values(r.stdout)

    def _tail(self, path: str, lines: int) -> str:
        argv = node_sh.tail_file(
            path, lines, self.run.layout(self.node).recipe_dir, MAX_LOG_BYTES + SCRUB_MARGIN
        )
        r = self.t.run(argv, timeout=COMMAND_TIMEOUT)
        return _out(self.t, r, f"reading {path}")

    def _command(self, argv: list[str], what: str) -> str:
        return cap(_out(self.t, self.t.run(argv, timeout=COMMAND_TIMEOUT), what))

    def _logs(self, st: NodeState, control: Control) -> None:
        t = self.t
        self._say("engine log")
        if control.kind == "process" and st.log:
            log = st.log
            self._piece(
                "engine.log",
                f"{t.name}: last {LOG_LINES} lines of {log}",
                lambda: self._tail(log, LOG_LINES),
            )
        else:
            argv = control.log_command(st, LOG_LINES)
            self._piece(
                "engine.log",
                f"{t.name}: {' '.join(argv)}",
                partial(self._command, argv, "reading the log"),
            )
        for s in st.services:
            self._piece(
                f"{safe_name(s.name)}.log",
                f"{t.name}: last {SERVICE_LOG_LINES} lines of {s.log}",
                partial(self._tail, s.log, SERVICE_LOG_LINES),
            )
        for unit in st.units:
            argv = [
                *control.sudo,
                *("journalctl", "--unit", unit, "--output", "cat", "--no-pager"),
                *("--lines", str(SERVICE_LOG_LINES)),
            ]
            self._piece(
                f"{safe_name(unit.removesuffix('.service'))}.log",
                f"{t.name}: {' '.join(argv)}",
                partial(self._command, argv, "reading the journal"),
            )

    def _engine_pids(self, st: NodeState, control: Control) -> tuple[list[int], str]:
        """The engine's processes (see `deskside.diagnose.procs`) and how they were found."""
        t = self.t
        if control.runtime == "container" and control.kind != "process":
            ps = control.alive_command()  # the project's running containers
            ids = _out(t, t.run(ps, timeout=COMMAND_TIMEOUT), "listing the containers").split()
            if not ids:
                raise NotCollected(f"{t.name}: no running container of the engine's project")
            argv = container_pids_command(control.sudo, ids)
            pids = parse_pids(_out(t, t.run(argv, timeout=COMMAND_TIMEOUT), "docker inspect"))
            return pids, f"the main processes of containers {', '.join(i[:12] for i in ids)}"
        if control.kind == "systemd":
            unit = control.layout.unit_name
            r = t.run(unit_pids_command(unit), timeout=COMMAND_TIMEOUT)
            pids = parse_pids(_out(t, r, "reading the unit's control group"))
            if not pids:
                raise NotCollected(f"{t.name}: {r.stderr.strip() or f'{unit} has no process'}")
            return pids, f"the control group of {unit}"
        if st.pid is None:
            raise NotCollected(f"{t.name}: the state names no engine process")
        r = t.run(session_pids_command(st.pid, st.pid_start, st.run_tag), timeout=COMMAND_TIMEOUT)
        kind, pids = parse_session_pids(_out(t, r, "listing the engine's session"))
        if kind == "gone":
            raise NotCollected(f"{t.name}: the engine (pid {st.pid}) is gone")
        if kind == "replaced":
            raise NotCollected(
                f"{t.name}: pid {st.pid} is another process now (its start time or run tag "
                "differs from the engine's): not read"
            )
        return pids, f"session {st.pid} (start time {st.pid_start}, tag {st.run_tag})"

    def _processes(self, st: NodeState, control: Control) -> ProcTree | None:
        t = self.t
        self._say("processes")
        found: list[ProcTree] = []

        def tree() -> str:
            pids, how = self._engine_pids(st, control)
            r = t.run(tree_command(pids), timeout=COMMAND_TIMEOUT)
            parsed = parse_tree(_out(t, r, "reading /proc"))
            found.append(parsed)
            title = f"{self.node.name} ({self.node.role}): the engine's processes: {how}"
            return render_tree(parsed, title)

        self._piece("processes.txt", f"{t.name}: /proc of the engine's processes", tree)
        if not found:
            self._skip("processes.json", t.name, "no process listing")
            return None
        self._piece(
            "processes.json",
            f"{t.name}: /proc of the engine's processes",
            lambda: _json(found[0].to_dict()),
        )
        return found[0]

    def _stacks(self, tree: ProcTree | None) -> None:
        t = self.t
        if tree is None or not tree.procs:
            self._skip("stacks.txt", t.name, "no engine process to read")
            return
        self._say(f"stacks of {len(tree.procs)} process(es)")
        pids = tree.pids
        self._piece(
            "stacks.txt",
            f"{t.name}: py-spy dump and /proc/PID/task/TID/stack of pids "
            + " ".join(map(str, pids)),
            lambda: cap(
                _out(
                    t,
                    t.run(
                        stacks_command(pids, python_dirs(tree.procs)),
                        timeout=stacks_timeout(pids),
                    ),
                    "reading the stacks",
                )
            ),
        )

    def _exporter(self, st: NodeState | None) -> None:
        url = f"http://{self.node.address}:{EXPORTER_PORT}/metrics"
        exporter_unit = f"deskside-{self.run.recipe_name}-exporter.service"
        runs = st is not None and (st.service("exporter") is not None or exporter_unit in st.units)
        enabled = self.recipe is not None and self.recipe.monitoring.enabled
        if not (runs or enabled):
            self._skip(
                "exporter-metrics.txt",
                f"GET {url}",
                "deskside's exporter does not run on this node (monitoring.enabled is off)",
            )
            return
        self._say("exporter metrics")

        def get() -> str:
            try:
                limits = Limits(total=HTTP_TIMEOUT, max_bytes=METRICS.max_bytes)
                with client(limits, self.http_transport) as http:
                    r = http.get(url)
            except httpx.HTTPError as exc:
                raise NotCollected(f"GET {url}: {exc or type(exc).__name__}") from None
            if r.status_code != 200:
                raise NotCollected(f"GET {url}: HTTP {r.status_code}")
            return cap(r.text)

        unreachable, self.unreachable = self.unreachable, None  # HTTP, not SSH
        self._piece("exporter-metrics.txt", f"GET {url}", get)
        self.unreachable = unreachable


def _json(data: object) -> str:
    return json.dumps(data, indent=2) + "\n"
