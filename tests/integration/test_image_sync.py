"""`deskside image sync` and `up`'s refusal, on two hosts with a real init
(tests/nspawn_hosts.py), each with a Docker Engine of its own (tests/docker_engine.py:
Debian's dockerd 20.10 in the host's network namespace, its socket at the host's
/run/docker.sock) and a registry on its loopback; the registries share one storage, so
they serve the same images as one registry every node reaches.

The head holds the recipe's engine image (pushed, pinned by digest); the worker holds
another image under the same name and tag (a re-pushed `:tiny`, as a moved `:latest`):

- `up --dry-run` refuses: the worker's image differs from the head's, by digest;
- `image sync` from the head is refused up front on this Docker (the classic image store
  keeps no registry digest for a loaded image), and moves nothing;
- `image sync --from registry` pulls the pinned digest on the worker, checked afterwards
  (its Docker resolves the pinned reference to the head's image ID), and `up --dry-run`
  passes its preflight.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from .. import docker_engine as de
from .. import nspawn_hosts as nh
from ..cli_process import deskside as run_deskside
from ..deploy_cases import ensure_tiny_model, ssh_recipe_data, write_recipe

pytestmark = pytest.mark.integration

NAME = f"{de.REGISTRY_ADDRESS}/deskside/engine-test"
# each host's Docker socket: the engines' folder is bound in, one folder per host name
SOCKET = "L /run/docker.sock - - - - /run/docker-engines/%H/docker.sock\n"
FILES = {"/etc/tmpfiles.d/docker-engine.conf": SOCKET}


def tiny_image(text: str) -> bytes:
    """A one-file root filesystem as a tar (`docker import` makes it an image)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = text.encode()
        info = tarfile.TarInfo("engine.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@dataclass
class Cluster:
    hosts: nh.NspawnHosts
    head: de.DockerEngine
    worker: de.DockerEngine
    image: str  # the pinned reference
    image_id: str
    recipe: Path
    home: Path

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_deskside(
            *args,
            "--known-hosts",
            str(self.hosts.known_hosts),
            "--json",
            home=self.home,
            timeout=600,
        )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    for check in (nh.can_run, de.can_run):
        ok, why = check()
        if not ok:
            pytest.skip(why)
    base = tmp_path_factory.mktemp("image-sync")
    engines = Path(tempfile.mkdtemp(prefix="dsi", dir="/tmp"))  # short: socket paths
    binds = (f"--bind={engines}:/run/docker-engines", f"--bind-ro={de.DOCKER_CLI}")
    try:
        with ExitStack() as stack:
            hosts = stack.enter_context(
                nh.nspawn_hosts(base / "hosts", "i", 2, binds=binds, files=FILES)
            )
            h0, h1 = hosts.hosts
            registry = engines / "registry"
            head = stack.enter_context(de.docker_engine(engines / h0.name, h0.name, registry))
            worker = stack.enter_context(de.docker_engine(engines / h1.name, h1.name, registry))
            head.docker("import", "-", f"{NAME}:tiny", input=tiny_image("the recipe's engine\n"))
            pushed = head.docker("push", f"{NAME}:tiny")
            digest = next(
                w for ln in pushed.splitlines() for w in ln.split() if w.startswith("sha256:")
            )
            image = f"{NAME}:tiny@{digest}"
            image_id = head.docker("image", "inspect", "--format", "{{.Id}}", image).strip()
            # the worker's :tiny is another image (the tag was pushed again since)
            worker.docker("import", "-", f"{NAME}:tiny", input=tiny_image("a newer push\n"))
            data = ssh_recipe_data(
                addresses=(h0.address, h1.address),
                interfaces=(h0.interface, h1.interface),
                identity_file=str(hosts.identity_file),
                root="/var/lib/deskside",
                hf_cache="/var/lib/deskside/hf",
                name="img-tiny",
            )
            data["engine"]["image"] = image
            data["runtime"] |= {"kind": "container", "compose": "docker-compose"}
            data["runtime"].pop("python")
            recipes = base / "recipes"
            recipe = write_recipe(recipes, data)
            ensure_tiny_model(recipes)
            yield Cluster(hosts, head, worker, image, image_id, recipe, base / "home")
    finally:
        shutil.rmtree(engines, ignore_errors=True)


def test_mismatch_refused_then_synced_by_digest(cluster: Cluster) -> None:
    up = cluster.cli("up", str(cluster.recipe), "--dry-run")
    assert up.returncode != 0, up.stdout
    refused = json.loads(up.stdout)
    assert refused["failed_stage"] == "preflight", refused
    message = refused["error"]
    assert "node1: engine image differs" in message, message
    assert cluster.image_id.removeprefix("sha256:")[:12] in message

    from_head = cluster.cli("image", "sync", str(cluster.recipe))
    assert from_head.returncode == 1, from_head.stdout + from_head.stderr
    report = json.loads(from_head.stdout)
    nodes = {n["node"]: n for n in report["nodes"]}
    assert nodes["node0"]["ok"] and nodes["node0"]["image"] == cluster.image_id
    assert (
        nodes["node1"]["action"] == "refused" and "classic store" in nodes["node1"]["problems"][0]
    )
    # nothing moved: the worker's :tiny is still the other image
    tiny = cluster.worker.docker("image", "inspect", "--format", "{{.Id}}", f"{NAME}:tiny").strip()
    assert tiny != cluster.image_id

    pulled = cluster.cli("image", "sync", str(cluster.recipe), "--from", "registry")
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    report = json.loads(pulled.stdout)
    assert report["ok"] and report["image_id"] == cluster.image_id
    nodes = {n["node"]: n for n in report["nodes"]}
    assert nodes["node1"]["action"] == "pulled" and nodes["node1"]["image"] == cluster.image_id
    assert nodes["node0"]["action"] == "already"
    held = cluster.worker.docker("image", "inspect", "--format", "{{.Id}}", cluster.image).strip()
    assert held == cluster.image_id

    again = cluster.cli("image", "sync", str(cluster.recipe))
    assert again.returncode == 0, again.stdout
    assert [n["action"] for n in json.loads(again.stdout)["nodes"]] == ["already", "already"]
    up = cluster.cli("up", str(cluster.recipe), "--dry-run")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "preflight" in {s["name"] for s in json.loads(up.stdout)["stages"]}
