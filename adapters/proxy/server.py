"""`convstore proxy`'s server: the ASGI app on uvicorn until SIGINT or SIGTERM.

On the first signal it stops accepting, lets the answers in flight finish for up to
`grace` seconds, then cancels those still open (recorded `abandoned`, `interrupted`) and
waits for every recording to commit; a second signal stops at once (what is not committed
then is closed by the store's next writer, or `repair`). uvicorn's access log is off: a
Gemini URL's query may hold a key.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import httpx

from convstore.adapters.http import serving
from convstore.adapters.http.serving import is_loopback
from convstore.adapters.http.transport import DEFAULT_MAX_BODY_BYTES
from convstore.adapters.proxy.app import ProxyApp
from convstore.adapters.proxy.exchange import Recorder
from convstore.storage import Store

__all__ = ["DEFAULT_LISTEN", "Limits", "is_loopback", "listen_address", "serve"]

DEFAULT_LISTEN: Final = "127.0.0.1:8788"
SWITCH_INTERVAL: Final = 0.001
"""Seconds a recording thread may hold the interpreter before the event loop gets it
back (Python's default, 5 ms, would show in the stream's latency)."""
COMMIT_WAIT: Final = 30.0
"""Seconds the server waits, once stopped, for the recordings still committing."""


@dataclass(frozen=True)
class Limits:
    """The upstream client's connection limits and timeouts, and the body caps."""

    max_connections: int = 200
    connect_timeout: float = 10.0
    read_timeout: float = 600.0
    """Seconds between two chunks of an answer (a long reasoning pause included)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    def client(self) -> httpx.AsyncClient:
        """The upstream client: no redirects followed, no body decoded, no env proxies."""
        return httpx.AsyncClient(
            timeout=httpx.Timeout(self.read_timeout, connect=self.connect_timeout),
            limits=httpx.Limits(
                max_connections=self.max_connections,
                max_keepalive_connections=self.max_connections,
            ),
            follow_redirects=False,
            trust_env=False,
        )


def listen_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:PORT` for IPv6) as (host, port); ConfigurationError otherwise."""
    return serving.listen_address(text, example=DEFAULT_LISTEN)


def serve(
    store: Store,
    *,
    host: str,
    port: int,
    upstreams: Mapping[str, str],
    grace: int,
    limits: Limits,
    ready: Callable[[str], None],
) -> int:
    """Listen on `host:port` (0: any free port), tell `ready` the address, and serve until
    a signal; then wait for the recordings. How many were not committed within
    `COMMIT_WAIT` seconds. ConfigurationError when the address cannot be bound."""
    listener = serving.bind(host, port)
    sys.setswitchinterval(SWITCH_INTERVAL)
    recorder = Recorder(store, max_body_bytes=limits.max_body_bytes)
    app = ProxyApp(recorder, upstreams, limits.client(), max_request_bytes=limits.max_body_bytes)
    config = serving.config(
        app,
        host,
        port,
        lifespan="on",
        date_header=False,
        timeout_graceful_shutdown=grace,
        timeout_keep_alive=5,
    )
    address = serving.address_of(listener)
    serving.run(config, listener, lambda: ready(address))
    return recorder.close(COMMIT_WAIT)
