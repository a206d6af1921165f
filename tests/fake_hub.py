"""A local stand-in for the Hugging Face Hub's HTTP API, enough for huggingface_hub's
`list_repo_tree` and `hf_hub_download` over plain HTTP (HF_ENDPOINT=http://127.0.0.1:PORT).

It serves one repo at one commit: regular git files (ETag = git blob sha1) and LFS files
(X-Linked-Etag = sha256, X-Linked-Size; ETag = the blob sha1 of the LFS pointer), with
Range requests (206) for resumed downloads, and no Xet headers (X-Xet-Hash), so clients
stay on plain HTTP. Faults per file: `corrupt` (the right length, wrong bytes) and
`drop_once` (the first GET of the file sends the first N bytes and closes the connection),
`pause_once` (the first GET from byte 0 sends N bytes, then waits for `release`) and
`ignore_range` (answers 200 with the whole file to a Range request).
Every request is recorded (method, path, Range, Authorization).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {size}\n"


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass
class HubFile:
    path: str
    data: bytes
    lfs: bool = False

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def pointer(self) -> bytes:
        return LFS_POINTER.format(sha=self.sha256, size=len(self.data)).encode()

    @property
    def blob_id(self) -> str:
        return git_blob_sha1(self.pointer if self.lfs else self.data)

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.blob_id

    def tree_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "type": "file",
            "oid": self.blob_id,
            "size": len(self.data),
            "path": self.path,
        }
        if self.lfs:
            entry["lfs"] = {
                "oid": self.sha256,
                "size": len(self.data),
                "pointerSize": len(self.pointer),
            }
        return entry


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    authorization: str | None


@dataclass
class FakeHub:
    repo: str
    commit: str
    files: dict[str, HubFile]
    corrupt: set[str] = field(default_factory=set)
    drop_once: dict[str, int] = field(default_factory=dict)  # path -> bytes sent first
    pause_once: dict[str, int] = field(default_factory=dict)  # path -> bytes sent first
    ignore_range: set[str] = field(default_factory=set)
    release: threading.Event = field(default_factory=threading.Event)
    requests: list[Request] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def gets(self, path: str) -> list[Request]:
        """The GETs of a file's resolve URL."""
        suffix = f"/resolve/{self.commit}/{path}"
        return [r for r in self.requests if r.method == "GET" and r.path.endswith(suffix)]

    def gets_of_files(self) -> list[Request]:
        """The GETs of any file's resolve URL."""
        return [r for r in self.requests if r.method == "GET" and "/resolve/" in r.path]

    def model_requests(self) -> list[Request]:
        """Requests about the repo (not huggingface_hub's own look-ups such as
        /api/agent-harnesses)."""
        return [r for r in self.requests if self.repo in r.path]

    def start(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        hub = self.hub
        path = unquote(urlsplit(self.path).path)
        hub.requests.append(
            Request(
                self.command,
                path,
                self.headers.get("Range"),
                self.headers.get("Authorization"),
            )
        )
        tree = f"/api/models/{hub.repo}/tree/"
        resolve = f"/{hub.repo}/resolve/"
        if path.startswith(tree):
            revision = path[len(tree) :].split("/")[0]
            if revision != hub.commit:
                return self._error(404, "RevisionNotFound", "Invalid rev id")
            entries = [f.tree_entry() for f in hub.files.values()]
            return self._send(200, json.dumps(entries).encode(), "application/json", body)
        if path.startswith(resolve):
            revision, _, name = path[len(resolve) :].partition("/")
            if revision != hub.commit:
                return self._error(404, "RevisionNotFound", "Invalid rev id")
            if name not in hub.files:
                return self._error(404, "EntryNotFound", "Entry not found")
            return self._file(hub.files[name], body)
        if path.startswith("/api/models/"):
            return self._error(404, "RepoNotFound", "Repository not found")
        return self._error(404, None, "Not found")

    def _file(self, f: HubFile, body: bool) -> None:
        hub = self.hub
        data = f.data
        if f.path in hub.corrupt:
            data = bytes(b ^ 0xFF for b in data[:64]) + data[64:]
        start = 0
        rng = self.headers.get("Range")
        if (
            rng
            and rng.startswith("bytes=")
            and rng.endswith("-")
            and f.path not in hub.ignore_range
        ):
            start = int(rng[len("bytes=") : -1])
        status = 206 if start else 200
        self.send_response(status)
        self.send_header("X-Repo-Commit", hub.commit)
        self.send_header("ETag", f'"{f.blob_id}"')
        self.send_header("Accept-Ranges", "bytes")
        if f.lfs:
            self.send_header("X-Linked-Etag", f'"{f.sha256}"')
            self.send_header("X-Linked-Size", str(len(f.data)))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(data) - start))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        if not body:
            return
        if f.path in hub.drop_once and start == 0:
            self.wfile.write(data[: hub.drop_once.pop(f.path)])
            self.wfile.flush()
            self.close_connection = True
            return
        if f.path in hub.pause_once and start == 0:
            cut = hub.pause_once.pop(f.path)
            self.wfile.write(data[:cut])
            self.wfile.flush()
            hub.release.wait(30)
            data, start = data[cut:], 0
        try:
            self.wfile.write(data[start:])
        except (BrokenPipeError, ConnectionResetError):  # the client was killed
            self.close_connection = True

    def _error(self, status: int, code: str | None, message: str) -> None:
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        payload = json.dumps({"error": message}).encode()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _send(self, status: int, payload: bytes, ctype: str, body: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if body:
            self.wfile.write(payload)


def small_model(repo: str = "acme/tiny-chat", commit: str = "c0ffee" + "1" * 34) -> FakeHub:
    """A small model: config and tokenizer as git files, three LFS weight shards (2 MiB,
    12 MiB, 2 MiB: huggingface_hub writes 10 MiB chunks, and a dropped transfer resumes
    from the last whole chunk, so only a shard past 10 MiB shows a Range request)."""
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "vocab_size": 256}
    files = [
        HubFile(".gitattributes", b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"),
        HubFile("config.json", json.dumps(config, indent=2).encode()),
        HubFile("tokenizer.json", json.dumps({"version": "1.0", "model": {"vocab": {}}}).encode()),
        HubFile("tokenizer_config.json", b'{"model_max_length": 4096}\n'),
    ]
    for i in range(1, 4):
        mib = 12 if i == 2 else 2
        shard = hashlib.sha256(f"shard {i}".encode()).digest() * (mib * 1024 * 1024 // 32)
        files.append(HubFile(f"model-{i:05d}-of-00003.safetensors", shard, lfs=True))
    return FakeHub(repo, commit, {f.path: f for f in files})


def with_big_shard(hub: FakeHub, mib: int = 66) -> str:
    """Adds an LFS file big enough for deskside's own resumable download; its path."""
    data = hashlib.sha256(b"big shard").digest() * (mib * 1024 * 1024 // 32)
    f = HubFile("model-big.safetensors", data, lfs=True)
    hub.files[f.path] = f
    return f.path
