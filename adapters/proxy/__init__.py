"""The recording proxy: a reverse proxy in front of the providers' model endpoints that
records every exchange through the recording core, and the recording httpx transport
that does the same inside an application (`recording_transport`).

May import: `convstore.domain`, `convstore.storage`, and every adapters subpackage but
`cli`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from convstore.adapters.proxy.transport import recording_transport

__all__ = ["recording_transport"]


def __getattr__(name: str) -> Any:
    """The transport's names, loaded on first use (the command line loads the server)."""
    if name in __all__:
        from convstore.adapters.proxy import transport

        return getattr(transport, name)
    raise AttributeError(name)
