"""A real HTTP server on 127.0.0.1 that replays scripted answers, for client tests.

Each request takes the next scripted `Reply` (a 500 saying so when none is left) and is
recorded (`RecordedRequest`: method, path, headers, body, arrival time). A reply is sent
in small chunks with short pauses, framed by chunked transfer coding (as the providers
stream), by `content-length`, or by closing the connection; it can be cut after some
bytes (the socket is shut down mid-body) or stall before its head or mid-body.

    with ReplayServer() as server:
        server.enqueue(Reply(status=429, headers={"retry-after": "0"}), Reply(body=b"..."))
        ... client(base_url=server.url) ...
        assert len(server.requests) == 2
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "WIRE",
    "Capture",
    "RecordedRequest",
    "ReplayServer",
    "Reply",
    "captures",
    "free_port",
    "gzip_bomb",
]

EXAMPLES = Path(__file__).parents[1] / "examples"
WIRE = Path(__file__).parents[2] / "shared" / "wire"

Framing = Literal["chunked", "length", "close"]


@dataclass(frozen=True)
class Reply:
    """One scripted answer."""

    status: int = 200
    body: bytes | Callable[[], Iterable[bytes]] = b""
    """The body, or a function returning its pieces (sent as they come, e.g. a bomb)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    framing: Framing = "chunked"
    chunk_size: int = 256
    pause: float = 0.0005
    """Seconds between two chunks."""
    cut_after: int | None = None
    """Shut the connection down after this many body bytes."""
    head_delay: float = 0.0
    """Seconds to wait before sending the status line."""
    stall_after: int | None = None
    """After this many body bytes, wait `stall_for` seconds before going on."""
    stall_for: float = 0.0

    def pieces(self) -> Iterator[bytes]:
        """The body in chunks of at most `chunk_size` bytes."""
        source = [self.body] if isinstance(self.body, bytes) else self.body()
        for part in source:
            for start in range(0, len(part), self.chunk_size):
                yield part[start : start + self.chunk_size]

    @classmethod
    def of(cls, capture: Capture, **changes: Any) -> Reply:
        """The recorded answer of a capture."""
        return cls(
            status=capture.status,
            body=capture.body,
            content_type=capture.content_type,
            **changes,
        )


@dataclass(frozen=True)
class RecordedRequest:
    """What the server received."""

    method: str
    path: str
    headers: dict[str, str]
    """Lower-cased names."""
    body: bytes
    at: float
    """time.monotonic() when the request's head arrived."""


@dataclass(frozen=True)
class Capture:
    """One recorded exchange: `N.request.json`, `N.response.sse|json`, `N.meta.json`."""

    name: str
    """`<corpus>/<sequence>/<N>`, e.g. `examples/errors/2`."""
    request: bytes | None
    body: bytes
    status: int
    content_type: str
    streamed: bool
    path: str = ""
    """The request's path from its meta (empty where not recorded), e.g. `/v1/messages`."""

    def __str__(self) -> str:
        return self.name


def captures(root: Path, corpus: str) -> list[Capture]:
    """Every exchange under `root` (one folder per sequence), in name and number order."""
    found: list[Capture] = []
    for response in sorted(root.glob("*/*.response.*")):
        number = response.name.split(".", 1)[0]
        folder = response.parent
        meta = json.loads((folder / f"{number}.meta.json").read_text())
        request = folder / f"{number}.request.json"
        streamed = response.suffix == ".sse"
        default_type = "text/event-stream" if streamed else "application/json"
        found.append(
            Capture(
                name=f"{corpus}/{folder.name}/{number}",
                request=request.read_bytes() if request.exists() else None,
                body=response.read_bytes(),
                status=int(meta.get("status", 200)),
                content_type=str(meta.get("content_type", default_type)),
                streamed=streamed,
                path=str(meta.get("path", "")),
            )
        )
    return found


def gzip_bomb(total: int, *, block: int = 1024 * 1024) -> Iterator[bytes]:
    """A valid gzip stream of `total` zero bytes (a multiple of `block`), made lazily.

    Full flushes make every block compress to the same bytes, so ~1 KB stands for each
    MiB and nothing large is ever held; the trailer's CRC is computed only if reached.
    """
    if total % block:
        raise ValueError("total must be a multiple of block")
    zeros = bytes(block)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    repeated = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    yield first
    for _ in range(total // block - 1):
        yield repeated
    crc = 0
    for _ in range(total // block):
        crc = zlib.crc32(zeros, crc)
    yield b"\x03\x00" + struct.pack("<II", crc, total & 0xFFFFFFFF)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read `ReplayServer.requests`."""

    def do_POST(self) -> None:
        self._answer()

    def do_GET(self) -> None:
        self._answer()

    def _answer(self) -> None:
        at = time.monotonic()
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        reply = self.server.replay.take(RecordedRequest(self.command, self.path, headers, body, at))
        try:
            self._send(reply)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True  # the client went away (e.g. it stopped at a cap)

    def _send(self, reply: Reply) -> None:
        if reply.head_delay:
            time.sleep(reply.head_delay)
        self.send_response(reply.status)
        self.send_header("content-type", reply.content_type)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        body = reply.body if isinstance(reply.body, bytes) else None
        if reply.framing == "chunked":
            self.send_header("transfer-encoding", "chunked")
        elif reply.framing == "length":
            if body is None:
                raise ValueError("content-length framing needs a bytes body")
            self.send_header("content-length", str(len(body)))
        else:
            self.send_header("connection", "close")
            self.close_connection = True
        self.end_headers()
        sent = 0
        for piece in reply.pieces():
            if reply.cut_after is not None and sent + len(piece) >= reply.cut_after:
                self._write(reply, piece[: reply.cut_after - sent])
                self._cut()
                return
            if reply.stall_after is not None and sent <= reply.stall_after < sent + len(piece):
                time.sleep(reply.stall_for)
            self._write(reply, piece)
            sent += len(piece)
            if reply.pause:
                time.sleep(reply.pause)
        if reply.framing == "chunked":
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _write(self, reply: Reply, piece: bytes) -> None:
        if not piece:
            return
        if reply.framing == "chunked":
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        else:
            self.wfile.write(piece)
        self.wfile.flush()

    def _cut(self) -> None:
        self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False
    request_queue_size = 256  # many clients at once (socketserver's default is 5)
    replay: ReplayServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (e.g. it stopped reading at a cap) is not an error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ReplayServer:
    """Serves scripted replies on 127.0.0.1 (a free port) from a background thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replies: deque[Reply] = deque()
        self.requests: list[RecordedRequest] = []
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.replay = self
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    def __enter__(self) -> ReplayServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving and free the port (handler threads are daemons)."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()

    def enqueue(self, *replies: Reply) -> None:
        """Script the next answers, in order."""
        with self._lock:
            self._replies.extend(replies)

    def take(self, request: RecordedRequest) -> Reply:
        """Record a request and pick its reply."""
        with self._lock:
            self.requests.append(request)
            if self._replies:
                return self._replies.popleft()
        return Reply(status=500, body=b'{"error":"no reply scripted for this request"}')

    @property
    def pending(self) -> int:
        """Scripted replies not used yet."""
        with self._lock:
            return len(self._replies)


def free_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port
