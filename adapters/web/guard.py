"""The viewer's outer rules, an ASGI middleware in front of every route.

- **Host:** a request whose Host header names neither the address served nor a name
  allowed (`--allowed-host`) is refused (403), so a page on another site that rebinds its
  name to this machine cannot read the viewer.
- **Token:** when the viewer has an access token (required off loopback), every page but
  the login form and the stylesheet needs it, in `Authorization: Bearer TOKEN` or in the
  cookie the login form sets (HttpOnly, SameSite=Strict); never in the URL.
- **Headers:** every answer says `no-store`, `nosniff`, `no-referrer`, and carries a strict
  Content-Security-Policy: `PAGE_POLICY` (our own origin only, no script at all, never
  framed), or `DISPLAY_POLICY` for a Search Suggestion (inline styles only, framed only by
  our pages, sandboxed even when opened directly).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import CookieError, SimpleCookie
from typing import Any, Final

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

COOKIE: Final = "convstore_viewer"
"""The cookie the login form sets, holding the access token."""
DISPLAY_PREFIX: Final = "/display/"
"""Where Search Suggestions are served (`/display/{conversation}/{activity}`)."""
OPEN_PATHS: Final = frozenset({"/login", "/static/viewer.css"})
"""What a request without the token may reach."""

PAGE_POLICY: Final = (
    "default-src 'self'; script-src 'none'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-src 'self'; frame-ancestors 'none'"
)
DISPLAY_POLICY: Final = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'none'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'self'; sandbox allow-popups"
)
_COMMON: Final = (
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


def host_name(header: str) -> str:
    """The name in a Host header, lowercased, without its port (`[::1]` keeps brackets)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[: header.find("]") + 1] if "]" in header else header
    return header.rpartition(":")[0] if ":" in header else header


class Guard:
    """The middleware: refuses foreign Host headers and missing tokens, adds the headers."""

    def __init__(self, app: App, *, hosts: frozenset[str], token: str | None) -> None:
        self.app = app
        self.hosts = frozenset(name.lower() for name in hosts)
        self.token = token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {name: value for name, value in scope["headers"]}
        display = scope["path"].startswith(DISPLAY_PREFIX)

        async def send_guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                policy = DISPLAY_POLICY if display else PAGE_POLICY
                message["headers"] = [
                    *(h for h in message.get("headers", []) if h[0].lower() != b"cache-control"),
                    *_COMMON,
                    (b"content-security-policy", policy.encode()),
                    (b"x-frame-options", b"SAMEORIGIN" if display else b"DENY"),
                ]
            await send(message)

        host = host_name(headers.get(b"host", b"").decode("latin-1"))
        if host not in self.hosts:
            await _refuse(send_guarded, 403, "this viewer does not answer for that host name")
            return
        needs_token = self.token is not None and scope["path"] not in OPEN_PATHS
        if needs_token and not self._has_token(headers):
            await _refuse(send_guarded, 401, "sign in at /login with the viewer's token")
            return
        await self.app(scope, receive, send_guarded)

    def _has_token(self, headers: dict[bytes, bytes]) -> bool:
        assert self.token is not None
        given = headers.get(b"authorization", b"")
        if given[:7].lower() == b"bearer " and hmac.compare_digest(given[7:].strip(), self.token):
            return True
        cookie = cookie_token(headers.get(b"cookie", b"").decode("latin-1"))
        return cookie is not None and hmac.compare_digest(cookie.encode(), self.token)


def cookie_token(header: str) -> str | None:
    """The token in a Cookie header (None when there is none or the header is malformed)."""
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None else None


async def _refuse(send: Send, status: int, text: str) -> None:
    body = f"{status}: {text}\n".encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
