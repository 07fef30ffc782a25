"""Serving an ASGI application on uvicorn, as `convstore proxy` and `convstore serve` do:
the `--listen` address, the loopback test, the bound socket, and a uvicorn server that says
when it listens and stops on SIGINT/SIGTERM without raising the signal again (the command
then exits 0). The `proxy` and `web` extras install uvicorn: importing this module without
it is the ModuleNotFoundError the commands turn into "needs the extra".
"""

from __future__ import annotations

import ipaddress
import signal
import socket
import threading
from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import Any

import uvicorn

from convstore.domain.errors import ConfigurationError

__all__ = ["address_of", "bind", "config", "is_loopback", "listen_address", "run"]


def listen_address(text: str, *, example: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:PORT` for IPv6) as (host, port); ConfigurationError, naming
    `example`, otherwise."""
    host, sep, port = text.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigurationError(f"--listen {text!r}: expected HOST:PORT, e.g. {example}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether `host` names only this machine (`localhost`, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on `host:port` (0: any free port); ConfigurationError when the
    address cannot be bound (in use, not this machine's)."""
    try:
        return socket.create_server(
            (host, port),
            family=socket.AF_INET6 if ":" in host else socket.AF_INET,
            backlog=2048,
        )
    except OSError as error:
        raise ConfigurationError(
            f"cannot listen on {host}:{port}: {error.strerror or error}"
        ) from None


def address_of(listener: socket.socket) -> str:
    """The address `listener` is bound to, as `HOST:PORT` (`[::1]:PORT` for IPv6)."""
    host, port = listener.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def config(app: Any, host: str, port: int, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration for `app`, quiet: no access log (a URL's query may hold a
    key, or a search's words), no logging setup of its own, no `server` header; `options`
    add to it (lifespan, graceful shutdown, keep-alive)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        log_level="warning",
        access_log=False,
        server_header=False,
        **options,
    )


def run(config: uvicorn.Config, listener: socket.socket, ready: Callable[[], None]) -> None:
    """Serve `config`'s app on `listener` until SIGINT or SIGTERM; `ready` is called once
    it listens, its signal handlers in place."""
    with listener:
        _server(config, ready).run(sockets=[listener])


def _server(config: uvicorn.Config, ready: Callable[[], None]) -> Any:
    class Server(uvicorn.Server):
        """uvicorn's server, telling `ready` once it listens, and stopping on a signal
        without raising it again afterwards."""

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:
                ready()

        @contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            handled = (signal.SIGINT, signal.SIGTERM)
            previous = {signum: signal.signal(signum, self.handle_exit) for signum in handled}
            try:
                yield
            finally:
                for signum, handler in previous.items():
                    signal.signal(signum, handler)

    return Server(config)
