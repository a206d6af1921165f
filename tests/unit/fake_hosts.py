"""Fake nodes for deploy unit tests: a FakeTransport that answers the deploy's commands as
a node would (files, the `current` link, releases, engines that start or die), and an
httpx mock of the head's API. Every call of every host goes to one shared journal, so
tests can check the order of operations across nodes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import httpx

from deskside.deploy import releases as rel
from deskside.facts import access, clock, disk, network, programs, versions
from deskside.facts.procs import PROCESS_IDS, RUN_TAG
from deskside.layout import STATE_FILE
from deskside.records.node import REMOVE_STATE_SH
from deskside.records.read import NODE_READ_SH
from deskside.runtime import node_sh
from deskside.transport.base import Result
from deskside.transport.fake import FakeTransport

from .fact_answers import answer_round_trip
from .proc_tables import P, table_text, tagged

BAD_FLAG = "--no-such-flag"
# a node's facts as `key=value` lines (`fact_answer` answers each fact from them)
GOOD_FACTS = (
    "uid=0\nexisting=/\nwritable=1\ndisk_free_kib=100000000\n"
    "kernel=6.8.0-49-generic\npython=3.11.7\nvllm=0.32.0\ndeskside=1\nprogram=g++\n"
)
VERSION_KEYS = {
    "kernel",
    "python",
    "python_missing",
    "python_broken",
    "vllm",
    "deskside",
    "deskside_version",
    "nccl_version",
    "nccl_wheel",
    "cuda",
    "driver_proc",
    "smi_driver",
    "smi_cuda",
}
NCCL_KEYS = {"nccl", "nccl_file", "nccl_sha256", "nccl_unreadable"}


def fact_answer(facts: str, fact_argv: list[str]) -> Result | None:
    """A fact's answer on a node whose facts are the `key=value` lines `facts`."""
    lines = [line.partition("=") for line in facts.splitlines()]
    values = {k: v for k, _, v in lines}
    script, args = fact_argv[2], fact_argv[4:]

    def keep(keys: set[str]) -> str:
        return "".join(f"{k}={v}\n" for k, _, v in lines if k in keys)

    if script == access.LOGIN_SH:
        return Result(0, keep({"uid", "sudo", "systemd"}), "")
    if script == disk.SPACE_SH:
        row = (
            f"writable={values.get('writable', '0')} free_kib={values.get('disk_free_kib', '')} "
            f"existing={values.get('existing', '/')}"
        )
        return Result(0, "".join(f"{i} {row}\n" for i in range(len(args))), "")
    if script == network.LISTENING_SH:
        return Result(0, "".join(f"{v}\n" for k, _, v in lines if k == "listen"), "")
    if script == programs.PROGRAMS_SH:
        return Result(0, "".join(f"{v}\n" for k, _, v in lines if k == "program"), "")
    if script == programs.DOCKER_SH:
        return Result(0, keep({"docker", "compose"}), "")
    if script == access.FILE_SH:
        if values.get("key_mode", "missing") == "missing":
            return Result(0, "missing\n", "")
        owner = values.get("key_owner", values.get("uid", "0"))
        return Result(0, f"mode={values['key_mode']} owner={owner}\n", "")
    if script == versions.VERSIONS_SH:
        nccl = keep(NCCL_KEYS) if args[2] != "-" else ""
        return Result(0, keep(VERSION_KEYS) + nccl, "")
    if script == clock.CLOCK_SH:
        return Result(0, f"time={values['clock']}\n", "") if "clock" in values else None
    if script.endswith("exec ip -j addr show"):
        return Result(0, values.get("ip", "[]"), "")
    return None


@dataclass
class Journal:
    entries: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)

    def index(self, host: str, kind: str, predicate: object = None) -> list[int]:
        return [
            i
            for i, (h, k, argv) in enumerate(self.entries)
            if h == host and k == kind and (predicate is None or predicate(argv))  # type: ignore[operator]
        ]


class FakeHost(FakeTransport):
    """One node. `facts`: the preflight probe's answer. Container runtimes: `compose`
    engines are alive once started (`docker compose up`/`systemctl restart`)."""

    def __init__(self, label: str, journal: Journal, kv_line: str, facts: str = GOOD_FACTS):
        super().__init__(label=label)
        self.journal = journal
        self.kv_line = kv_line
        self.facts = facts
        self.links: dict[str, str] = {}
        self.alive: set[int] = set()
        self.modes: dict[str, int] = {}
        self.container_up = False
        self.container_broken = False
        self.proxies: set[int] = set()
        self.tags: dict[int, str] = {}  # pid -> the run tag it was started with
        self.default = self._answer

    # -- helpers

    def resolve(self, path: str) -> str:
        for link, target in self.links.items():
            if path == link or path.startswith(link + "/"):
                base = str(PurePosixPath(link).parent / target)
                return base + path[len(link) :]
        return path

    def tree(self, prefix: str) -> list[str]:
        return [p for p in self.files if p.startswith(prefix.rstrip("/") + "/")]

    def _rename(self, src: str, dst: str) -> None:
        for path in self.tree(src):
            self.files[dst + path[len(src) :]] = self.files.pop(path)
            if path in self.modes:
                self.modes[dst + path[len(src) :]] = self.modes.pop(path)

    def engine_serving(self) -> bool:
        return bool(self.alive - self.proxies) or self.container_up

    @property
    def state(self) -> dict[str, object] | None:
        for path, data in self.files.items():
            if path.endswith("/" + STATE_FILE):
                return json.loads(data)  # type: ignore[no-any-return]
        return None

    # -- Transport

    def run(
        self,
        argv: Sequence[str],
        *,
        env: object = None,
        timeout: float | None = None,
        input: str | None = None,
    ) -> Result:
        self.journal.entries.append((self.label, "run", tuple(argv)))
        return super().run(argv, timeout=timeout, input=input)

    def spawn(
        self, argv: Sequence[str], *, env: object = None, log_path: str, cwd: str | None = None
    ) -> int:
        self.journal.entries.append((self.label, "spawn", tuple(argv)))
        pid = super().spawn(argv, log_path=log_path, cwd=cwd)
        tag = dict(env or {}).get(RUN_TAG)  # type: ignore[call-overload]
        if tag:
            self.tags[pid] = tag
        script = argv[-1]
        if any(word.endswith("/run-proxy.sh") for word in argv):  # /bin/sh run-proxy.sh ...
            self.proxies.add(pid)
            self.alive.add(pid)
            self.files[log_path] = b"LiteLLM: Proxy running\n"
            return pid
        launch = self.files.get(self.resolve(script), b"").decode()
        if BAD_FLAG in launch:
            self.files[log_path] = f"vllm: error: unrecognized arguments: {BAD_FLAG}\n".encode()
        else:
            line = f"(EngineCore pid=1) INFO 01-01 00:00:00 [kv_cache_utils.py:1] {self.kv_line}"
            head = "--headless" not in launch
            self.files[log_path] = (line + "\n").encode() if head else b"worker up\n"
            self.alive.add(pid)
        return pid

    def put(self, data: bytes, path: str, mode: int = 0o644) -> None:
        self.journal.entries.append((self.label, "put", (path,)))
        super().put(data, path, mode)
        self.modes[path] = mode

    def get(self, path: str) -> bytes:
        return super().get(self.resolve(path))

    def table(self) -> str:
        """The node's process table: each live process a session leader started at
        1000 + pid with the run tag it was spawned with; an engine with two ranks in its
        session (one tagged, one whose title hid its environment)."""
        procs: list[P] = []
        for pid in sorted(self.alive):
            tag = self.tags.get(pid)
            procs.append(tagged(pid, tag, start=1000 + pid) if tag else P(pid, start=1000 + pid))
            if tag and pid not in self.proxies:
                rank = 100_000 + 2 * pid
                procs.append(tagged(rank, tag, ppid=pid, session=pid, start=1001 + pid))
                procs.append(P(rank + 1, ppid=rank, session=pid, start=1002 + pid, environ=b"\0\0"))
        return table_text(procs)

    # -- the node's shell

    def _answer(self, argv: Sequence[str]) -> Result:
        a = list(argv)
        facts = answer_round_trip(a, lambda fact: fact_answer(self.facts, fact))
        if facts is not None:
            return facts
        if a[:2] == ["sh", "-c"]:
            script, args = a[2], a[4:]
            if script == REMOVE_STATE_SH:  # the state file of a folder (no links here)
                path = f"{args[0].rstrip('/')}/{args[1]}"
                self.links.pop(path, None)
                self.files.pop(path, None)
                return Result(0, "", "")
            if script == rel.SWITCH_SH:
                self.links[args[2]] = args[0]
                return Result(0, "", "")
            if script == node_sh.POLL_SH:
                log, off = args[0], int(args[1])
                data = self.files.get(log, b"")
                text = f"{self.table()}size={len(data)}\n" + data[off:].decode()
                return Result(0, text, "")
            if script == node_sh.TAIL_SH:  # path, lines, bytes, root
                lines = self.files.get(args[0], b"").decode().splitlines()[-int(args[1]) :]
                return Result(0, "".join(line + "\n" for line in lines), "")
            if script == PROCESS_IDS.script:
                return Result(0, self.table(), "")
            if script == node_sh.STOP_SESSION_SH:
                if args[2] and args[3]:  # the node's shell refuses a stop without them
                    self.alive.discard(int(args[0]))
                return Result(0, "", "")
            if script == rel.MODEL_SWAP_SH:
                new, target, _old = args
                for path in self.tree(target):
                    self.files.pop(path)
                self._rename(new, target)
                return Result(0, "", "")
            if script == NODE_READ_SH:
                data = self.files.get(self.resolve(args[0]))
                return Result(0, data.decode(), "") if data is not None else Result(4, "", "")
            if script == node_sh.PROC_START_SH:
                return Result(0, P(int(args[0]), start=1000 + int(args[0])).stat(), "")
            return Result(0, "", "")
        if a[:2] == ["readlink", "--"]:
            target = self.links.get(a[2])
            return Result(0, target + "\n", "") if target else Result(1, "", "")
        if a[:2] == ["test", "-e"]:
            return Result(0 if self.tree(a[2]) or a[2] in self.files else 1, "", "")
        if a[:2] == ["test", "-f"]:
            return Result(0 if self.resolve(a[2]) in self.files else 1, "", "")
        if a[:3] == ["mv", "-T", "--"]:
            src, dst = a[3], a[4]
            if self.tree(dst):
                return Result(1, "", f"mv: cannot overwrite '{dst}'")
            self._rename(src, dst)
            return Result(0, "", "")
        if a[:3] == ["rm", "-rf", "--"]:
            for prefix in a[3:]:
                for path in self.tree(prefix):
                    self.files.pop(path)
            return Result(0, "", "")
        if a[:3] == ["rm", "-f", "--"]:
            self.links.pop(a[3], None)
            self.files.pop(a[3], None)
            return Result(0, "", "")

        if a[:3] == ["ls", "-1", "--"]:
            names = {p[len(a[3]) + 1 :].split("/", 1)[0] for p in self.tree(a[3])}
            return Result(0, "\n".join(sorted(names)) + "\n", "")
        if a == ["id", "-u"]:
            return Result(0, "0\n", "")
        if a == ["date", "+%s"]:
            return Result(0, "1700000000\n", "")
        if a[:2] == ["docker", "ps"]:  # the running containers of a Compose project
            return Result(0, "c0ffee\n" if self.container_up else "", "")
        if "docker" in a and "compose" in a:
            if "up" in a:
                self._container_start()
            elif "down" in a:
                self.container_up = False
            elif "ps" in a:
                return Result(0, "c0ffee\n" if self.container_up else "", "")
            elif "logs" in a:
                line = f"INFO [kv_cache_utils.py:1] {self.kv_line}\n"
                return Result(0, line if self.container_up else "", "")
            return Result(0, "", "")
        if a[:2] == ["systemctl", "restart"]:
            self._container_start()
        if a[:2] == ["systemctl", "stop"] or a[:3] == ["systemctl", "disable", "--now"]:
            self.container_up = False
        return Result(0, "", "")

    def _container_start(self) -> None:
        current = next(link for link in self.links if link.endswith("/current"))
        compose = self.files.get(self.resolve(current + "/compose.yaml"), b"").decode()
        self.container_broken = BAD_FLAG in compose
        self.container_up = not self.container_broken


@dataclass
class FakeApi:
    """The head's HTTP API (and the proxy's), answering while the head engine runs."""

    head: FakeHost
    names: list[str]
    seen: list[httpx.Request] = field(default_factory=list)
    fail_chats: int = 0  # answer this many chat completions with HTTP 500

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        path = request.url.path
        if path == "/health/liveliness":
            return httpx.Response(200, json="I'm alive!")
        if not self.head.engine_serving():
            raise httpx.ConnectError("connection refused", request=request)
        if path == "/health":
            return httpx.Response(200)
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": n} for n in self.names]})
        if path == "/v1/chat/completions":
            if self.fail_chats > 0:
                self.fail_chats -= 1
                return httpx.Response(500, json={"error": "boom"})
            return httpx.Response(200, json={"choices": [{"message": {"content": "OK"}}]})
        if path == "/metrics":
            return httpx.Response(200, text="vllm:kv_cache_usage_perc 0.0\n")
        return httpx.Response(404)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handler)
