"""The recording proxy served in-process for tests: the real ASGI app on uvicorn on
127.0.0.1 (a free port), in a background thread, with every upstream pointed at one
local replay server; and the example captures the SDK tests replay.

    with running_proxy(store, upstream.url) as proxy:
        client = anthropic.Anthropic(base_url=proxy.url, api_key="...")
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import uvicorn

from convstore.adapters.proxy.app import ProxyApp
from convstore.adapters.proxy.exchange import Recorder
from convstore.adapters.proxy.server import Limits
from convstore.adapters.wire.names import PROVIDERS
from convstore.storage import Store
from tests.replay_server import EXAMPLES, Capture, captures

__all__ = ["RunningProxy", "capture", "running_proxy"]


@dataclass
class RunningProxy:
    """A proxy serving in this process."""

    url: str
    recorder: Recorder | None
    """None: it forwards only."""
    server: uvicorn.Server


@contextmanager
def running_proxy(
    store: Store | None,
    upstream: str,
    *,
    max_body_bytes: int | None = None,
    limits: Limits | None = None,
) -> Iterator[RunningProxy]:
    """The proxy in front of `upstream` (every provider's), recording into `store`
    (None: forwarding only), with `limits` (default the command's); on exit it stops and
    waits for the recordings."""
    limits = limits or Limits()
    if max_body_bytes is not None:
        limits = replace(limits, max_body_bytes=max_body_bytes)
    recorder = Recorder(store, max_body_bytes=limits.max_body_bytes) if store else None
    app = ProxyApp(
        recorder,
        dict.fromkeys(PROVIDERS, upstream),
        limits.client(),
        max_request_bytes=limits.max_body_bytes,
    )
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(
        app,
        lifespan="on",
        log_config=None,
        log_level="warning",
        access_log=False,
        server_header=False,
        date_header=False,
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=lambda: asyncio.run(server.serve(sockets=[listener])), daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the proxy did not start")
        time.sleep(0.01)
    try:
        yield RunningProxy(f"http://127.0.0.1:{port}", recorder, server)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        listener.close()
        if recorder is not None:
            recorder.close()


def capture(name: str) -> Capture:
    """The example capture `provider/sequence/N`, e.g. `anthropic/errors/2`."""
    provider = name.split("/", 1)[0]
    for found in captures(EXAMPLES / provider, "examples"):
        if found.name == f"examples/{name.split('/', 1)[1]}":
            return found
    raise LookupError(name)
