"""`convstore serve`'s server: the viewer on uvicorn until SIGINT or SIGTERM.

Which Host headers it answers: the address it is bound to, `localhost` and the loopback
addresses when that address is a loopback one, and the names given (`allowed`). uvicorn's
access log is off: the viewer logs no URL (a search's words are in its query).
"""

from __future__ import annotations

import gc
import ipaddress
from collections.abc import Callable, Iterable
from typing import Final

from convstore.adapters.http import serving
from convstore.adapters.web.app import viewer_app
from convstore.storage import Store

__all__ = ["DEFAULT_LISTEN", "allowed_hosts", "serve"]

DEFAULT_LISTEN: Final = "127.0.0.1:8787"
LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "[::1]"})


def allowed_hosts(host: str, allowed: Iterable[str]) -> frozenset[str]:
    """The Host names the viewer bound to `host` answers (see the module)."""
    names = {name.strip().lower() for name in allowed if name.strip()}
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        names.add(host.lower())  # a name: the one it was asked to serve
    else:
        if not address.is_unspecified:  # 0.0.0.0 serves no one name: --allowed-host does
            names.add(f"[{address}]" if address.version == 6 else str(address))
    if serving.is_loopback(host):
        names |= LOOPBACK_NAMES
    return frozenset(names)


def serve(
    store: Store,
    *,
    host: str,
    port: int,
    allowed: Iterable[str] = (),
    token: str | None = None,
    secure_cookie: bool = False,
    ready: Callable[[str], None],
) -> None:
    """Listen on `host:port` (0: any free port), tell `ready` the address, and serve
    `store` (open read-only) until a signal. ConfigurationError when the address cannot
    be bound."""
    listener = serving.bind(host, port)
    app = viewer_app(
        store, hosts=allowed_hosts(host, allowed), token=token, secure_cookie=secure_cookie
    )
    config = serving.config(app, host, port, lifespan="off", timeout_graceful_shutdown=5)
    address = serving.address_of(listener)
    gc.collect()
    gc.freeze()  # what startup loaded stays out of the collections each page's garbage causes
    serving.run(config, listener, lambda: ready(address))
