"""The proxy as an ASGI application: each request forwarded to its provider's upstream by
httpx's async client, with the client's own headers (credentials included, never read),
and the answer sent back as it arrives, byte for byte (compressed bodies untouched).

A model path's exchange is copied to the recording core beside the stream
(`exchange.Exchange`: a feed that never blocks), every other path passes through
unrecorded. The pin header (`X-Convstore-Conversation`) is stripped before forwarding. A
client that goes away mid-answer cancels the upstream request and ends the recording
`abandoned` (`disconnected`); an upstream that breaks mid-answer ends it there too, and
the client's connection is closed unfinished, as the upstream's was. A model request's
body is read whole (capped: 413 past it) to be recorded; any other path's streams through.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, MutableMapping
from contextlib import suppress
from typing import Any, Final

import httpx

from convstore.adapters.openai_chat.context import server_host
from convstore.adapters.proxy.exchange import (
    DISCONNECTED,
    INTERRUPTED,
    UPSTREAM_LOST,
    Exchange,
    Recorder,
)
from convstore.adapters.proxy.routes import Route, route
from convstore.adapters.proxy.threads import PIN_HEADER

__all__ = ["HOP_BY_HOP", "ProxyApp", "forwarded_headers"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

log = logging.getLogger("convstore.proxy")

HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)
"""Headers of one hop, never forwarded (`host` is the upstream's)."""


def forwarded_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """`headers` (lower-cased names) as they are forwarded: without the hop-by-hop ones
    and the pin header."""
    return [(n, v) for n, v in headers if n not in HOP_BY_HOP and n != PIN_HEADER]


class ProxyApp:
    """Forwards each request to `upstreams[provider]`, recording model exchanges through
    `recorder` (None: forward only). `client` is the upstream client (closed with the
    app's lifespan); `max_request_bytes` caps a request body (413 past it)."""

    def __init__(
        self,
        recorder: Recorder | None,
        upstreams: Mapping[str, str],
        client: httpx.AsyncClient,
        *,
        max_request_bytes: int,
    ) -> None:
        self.recorder = recorder
        self.upstreams = dict(upstreams)
        self.client = client
        self.max_request_bytes = max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(n.decode("latin-1").lower(), v.decode("latin-1")) for n, v in scope["headers"]]
        named = dict(headers)
        path: str = scope["path"]
        found = route(path, named)
        if found is None:
            await _plain(send, 404, b'{"error":"convstore proxy: no provider serves this path"}')
            return
        body: bytes | None = b""
        content: bytes | AsyncIterator[bytes] = _streamed(receive)  # an upload, say: as it comes
        if self.recorder is not None and found.recorded:  # a model request is read whole
            body = await _body(receive, self.max_request_bytes)
            if body is None:
                await _plain(send, 413, b'{"error":"convstore proxy: the request is too large"}')
                return
            content = body
        raw_path: bytes = scope.get("raw_path") or path.encode()
        query: bytes = scope.get("query_string", b"")
        url = self.upstreams[found.provider] + raw_path.decode("latin-1")
        if query:
            url += "?" + query.decode("latin-1")
        request = httpx.Request(
            scope["method"], url, headers=forwarded_headers(headers), content=content
        )
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as error:
            status, what = _failed(found.provider, self.upstreams[found.provider], error)
            log.warning("proxy: %s", what)
            await _plain(send, status, json.dumps({"error": f"convstore proxy: {what}"}).encode())
            return
        exchange = self._exchange(found, body or b"", named)
        try:
            await self._relay(response, exchange, receive, send)
        finally:
            await response.aclose()

    def _exchange(self, found: Route, body: bytes, headers: Mapping[str, str]) -> Exchange | None:
        if self.recorder is None or not found.recorded:
            return None
        return self.recorder.open(
            found.provider,
            body,
            headers,
            model=found.model,
            pinned=headers.get(PIN_HEADER),
            server=server_host(self.upstreams[found.provider]),
        )

    async def _relay(
        self, response: httpx.Response, exchange: Exchange | None, receive: Receive, send: Send
    ) -> None:
        """Send the answer on as it arrives, copying it to `exchange`; a client that goes
        away cancels it (and so the upstream request)."""
        relay = asyncio.current_task()
        assert relay is not None
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            relay.cancel()

        watcher = asyncio.create_task(watch())
        cut = ""
        begun = False
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [
                        (n, v)
                        for n, v in response.headers.raw
                        if n.lower().decode("latin-1") not in HOP_BY_HOP
                    ],
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if exchange is not None:
                    if not begun:  # after the first byte went on: the recording's work waits
                        begun = _begin(exchange, response)
                    exchange.feed(chunk)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            cut = DISCONNECTED if gone.is_set() else INTERRUPTED
            if not gone.is_set():
                raise
            relay.uncancel()  # ours: the client went away
        except httpx.HTTPError as error:  # the upstream broke off: so does the answer
            cut = UPSTREAM_LOST
            log.warning("proxy: the upstream broke off an answer: %s", type(error).__name__)
        finally:
            if exchange is not None:  # before any await: the client may ask again at once
                if not begun:
                    _begin(exchange, response)
                exchange.end(cut)
            watcher.cancel()
            with suppress(asyncio.CancelledError):
                await watcher


def _begin(exchange: Exchange, response: httpx.Response) -> bool:
    exchange.begin(response.status_code, response.headers)
    return True


async def _body(receive: Receive, cap: int) -> bytes | None:
    """The request's whole body; None past `cap` bytes."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(parts)
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


async def _streamed(receive: Receive) -> AsyncIterator[bytes]:
    """The request's body as it arrives (an unrecorded path's: not held, not capped)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


async def _plain(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _failed(provider: str, upstream: str, error: httpx.HTTPError) -> tuple[int, str]:
    """The status and the words for an upstream that gave no answer: 504 when it did not
    answer in time, else 502. They name the upstream's base URL as configured (never the
    request's URL: its query may hold a key) and the error's kind."""
    kind = type(error).__name__
    if isinstance(error, httpx.TimeoutException):
        limit = "--connect-timeout" if isinstance(error, httpx.ConnectTimeout) else "--read-timeout"
        return 504, (
            f"the {provider} upstream {upstream} did not answer in time ({kind}; see {limit})"
        )
    return 502, f"the {provider} upstream {upstream} is unreachable ({kind})"
