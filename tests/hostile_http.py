"""A hostile HTTP server on loopback for tests: it answers every connection the way its
`mode` says — dripping the headers or the body a byte at a time, sending a huge or endless
body, a gzip bomb, an endless SSE stream, garbage — so that clients can be shown to end
within their deadline and byte cap."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

OK_BODY = b'{"ok": true}'


def _answer(conn: socket.socket, mode: str, stop: threading.Event) -> None:
    conn.settimeout(5)
    try:
        conn.recv(65536)  # the request (small; its end is not awaited)
        if mode == "ok":
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(OK_BODY)).encode()
                + b"\r\n\r\n"
                + OK_BODY
            )
        elif mode == "drip-headers":
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000:
                if stop.is_set():
                    return
                conn.sendall(bytes([byte]))
                time.sleep(0.1)
        elif mode in ("drip-body", "drip-sse"):
            kind = b"text/event-stream" if mode == "drip-sse" else b"application/json"
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\n\r\n")
            while not stop.is_set():
                conn.sendall(b"d" if mode == "drip-body" else b":\n")
                time.sleep(0.1)
        elif mode in ("huge", "endless", "endless-sse", "no-separator-sse"):
            head = b"HTTP/1.1 200 OK\r\n"
            if mode == "huge":
                head += b"Content-Length: 2000000000\r\n"
            else:
                kind = b"text/event-stream" if "sse" in mode else b"application/json"
                head += b"Content-Type: " + kind + b"\r\n"
            conn.sendall(head + b"\r\n")
            chunk = {
                "huge": b"0" * 65536,
                "endless": b"[" * 65536,
                "endless-sse": b'data: {"choices": []}\n\n' * 2048,
                "no-separator-sse": b"data: " + b"x" * 65530,
            }[mode]
            while not stop.is_set():
                conn.sendall(chunk)
        elif mode == "gzip-bomb":
            body = gzip.compress(b"0" * (32 << 20), compresslevel=9)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )
        elif mode == "garbage":
            conn.sendall(b"\x00\xff garbage, not HTTP at all\r\n\r\n")
        elif mode == "silent":
            stop.wait(60)
    except OSError:
        pass
    finally:
        conn.close()


@contextmanager
def hostile_server(mode: str) -> Iterator[str]:
    """`http://127.0.0.1:PORT` of a server answering every connection in `mode`."""
    stop = threading.Event()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.settimeout(0.2)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            threading.Thread(target=_answer, args=(conn, mode, stop), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        sock.close()


def serve_on(mode: str, port: int, host: str = "127.0.0.1") -> None:
    """Listen on `host:port` (at once) and answer every connection in `mode` until the
    process ends: the hostile tier's sandboxes, each with its own network (fixed ports)."""
    stop = threading.Event()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(256)

    def serve() -> None:
        while True:
            conn, _ = sock.accept()
            threading.Thread(target=_answer, args=(conn, mode, stop), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
