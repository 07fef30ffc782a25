"""The recording transport: an httpx transport, sync and async, wrapping the default one,
that records each model exchange it carries, as the proxy does, with no proxy.

    store = open_store("sqlite:///app.db")
    http = httpx2.Client(transport=recording_transport(store, httpx_module=httpx2))
    client = anthropic.Anthropic(http_client=http)

The current SDKs ship with `httpx2`, a drop-in fork of httpx under its own name, whose
clients take only its own objects: `httpx_module` names the package the client is from
(default: `wrapped`'s, else `httpx`), and the transport is built from its classes.

The same recording core and threading rules as the proxy (`exchange`, `threads`): the
answer's raw bytes are copied to a feed that never blocks as the SDK reads them, and
decoded and recorded on a thread of their own. An answer the SDK stops reading before its
end (a closed stream) is recorded `abandoned` (`disconnected`). Closing a sync client
waits for the recordings to commit; for an async one, `transport.recorder.close()` does.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Iterator
from functools import cache
from types import ModuleType
from typing import Any

from convstore.adapters.http.transport import DEFAULT_MAX_BODY_BYTES
from convstore.adapters.openai_chat.context import server_host
from convstore.adapters.proxy.exchange import DISCONNECTED, UPSTREAM_LOST, Exchange, Recorder
from convstore.adapters.proxy.routes import route
from convstore.adapters.proxy.threads import PIN_HEADER
from convstore.domain.errors import ConfigurationError
from convstore.storage import Store

__all__ = ["recording_transport"]


def _opened(recorder: Recorder, request: Any) -> Exchange | None:
    """The request's exchange when its path is a model path (the pin header removed)."""
    pinned = request.headers.get(PIN_HEADER)
    if pinned is not None:
        del request.headers[PIN_HEADER]
    found = route(request.url.path, request.headers)
    if found is None or not found.recorded:
        return None
    return recorder.open(
        found.provider,
        request.content,
        request.headers,
        model=found.model,
        pinned=pinned,
        server=server_host(str(request.url)),
    )


class _Body:
    """An answer's body as the client reads it, each raw chunk copied to the exchange."""

    def __init__(self, stream: Any, exchange: Exchange, broken: type[Exception]) -> None:
        self._stream = stream
        self._exchange = exchange
        self._broken = broken
        self._cut = DISCONNECTED

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._stream:
                self._exchange.feed(chunk)
                yield chunk
        except self._broken:
            self._cut = UPSTREAM_LOST
            raise
        self._cut = ""

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._exchange.end(self._cut)


class _AsyncBody(_Body):
    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                self._exchange.feed(chunk)
                yield chunk
        except self._broken:
            self._cut = UPSTREAM_LOST
            raise
        self._cut = ""

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            self._exchange.end(self._cut)


class _Recording:
    """What both transports share: the recorder, the wrapped transport, the package."""

    def __init__(self, recorder: Recorder, wrapped: Any, module: ModuleType) -> None:
        self.recorder = recorder
        self.wrapped = wrapped
        self._module = module

    def _check(self, request: Any) -> None:
        """Refuse a request of another httpx package than the transport's (its wrapped
        transport would fail on it with a bare AssertionError)."""
        if not isinstance(request, self._module.Request):
            raise ConfigurationError(_mismatch(self._module, type(request), "client's request"))

    def _answer(self, response: Any, exchange: Exchange | None, body: type[_Body]) -> Any:
        if exchange is None:
            return response
        exchange.begin(response.status_code, response.headers)
        return self._module.Response(
            response.status_code,
            headers=response.headers,
            stream=body(response.stream, exchange, self._module.TransportError),
            extensions=response.extensions,
        )


class _SyncTransport(_Recording):
    def handle_request(self, request: Any) -> Any:
        self._check(request)
        request.read()
        exchange = _opened(self.recorder, request)
        return self._answer(self.wrapped.handle_request(request), exchange, _BODIES[self._module])

    def close(self) -> None:
        """Close the wrapped transport, then wait for the recordings to commit."""
        try:
            self.wrapped.close()
        finally:
            self.recorder.close()


class _AsyncTransport(_Recording):
    async def handle_async_request(self, request: Any) -> Any:
        self._check(request)
        await request.aread()
        exchange = _opened(self.recorder, request)
        response = await self.wrapped.handle_async_request(request)
        return self._answer(response, exchange, _ASYNC_BODIES[self._module])

    async def aclose(self) -> None:
        """Close the wrapped transport (the recordings commit on their own threads)."""
        await self.wrapped.aclose()


class _Classes(dict[ModuleType, type]):
    """A class per httpx package, made on first use from a mixin and the package's base."""

    def __init__(self, mixin: type, base: str) -> None:
        super().__init__()
        self._mixin, self._base = mixin, base

    def __missing__(self, module: ModuleType) -> type:
        made = type(self._mixin.__name__, (self._mixin, getattr(module, self._base)), {})
        self[module] = made
        return made


_BODIES = _Classes(_Body, "SyncByteStream")
_ASYNC_BODIES = _Classes(_AsyncBody, "AsyncByteStream")
_TRANSPORTS = _Classes(_SyncTransport, "BaseTransport")
_ASYNC_TRANSPORTS = _Classes(_AsyncTransport, "AsyncBaseTransport")


def _mismatch(module: ModuleType, other: type, what: str) -> str:
    """Why a transport made for `module` cannot take a `what` of class `other`."""
    theirs = other.__module__.partition(".")[0]
    return (
        f"the recording transport is made for the {module.__name__} package, but the {what} "
        f"is {theirs}'s ({theirs}.{other.__name__}): make the transport, its wrapped "
        "transport and the client from one package (recording_transport's httpx_module)"
    )


@cache
def _package(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise ConfigurationError(f"the {name} package is not installed") from None


def recording_transport(
    store: Store,
    *,
    wrapped: Any = None,
    asynchronous: bool = False,
    httpx_module: ModuleType | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> Any:
    """A transport recording into `store` (an open `Store`), for a sync
    client (`asynchronous=True`: an async one) of `httpx_module` (`httpx` or `httpx2`;
    default `wrapped`'s package, else `httpx`), wrapping `wrapped` (default: the
    package's own `HTTPTransport`); its `recorder` holds the recordings in flight.

    Raises ConfigurationError for a `wrapped` transport of another package or kind (sync,
    async) than the one asked for; the transport raises it, before sending anything, for
    a request of a client of another package."""
    if httpx_module is None:
        root = type(wrapped).__module__.partition(".")[0] if wrapped is not None else "httpx"
        httpx_module = _package(root)
    if wrapped is None:
        kind = "AsyncHTTPTransport" if asynchronous else "HTTPTransport"
        wrapped = getattr(httpx_module, kind)()
    elif not isinstance(
        wrapped, httpx_module.AsyncBaseTransport if asynchronous else httpx_module.BaseTransport
    ):
        raise ConfigurationError(_mismatch(httpx_module, type(wrapped), "wrapped transport"))
    recorder = Recorder(store, max_body_bytes=max_body_bytes)
    made = (_ASYNC_TRANSPORTS if asynchronous else _TRANSPORTS)[httpx_module]
    return made(recorder, wrapped, httpx_module)
