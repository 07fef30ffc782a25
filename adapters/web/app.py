"""The viewer as an ASGI application (Starlette), behind `guard.Guard`.

Routes: `/` the list, `/c/{id}` a transcript, `/c/{id}/audit`, `/c/{id}/replay` (the
replay preview), `/search?q=`, `/display/{id}/{activity}` (a Search Suggestion, for its
iframe), `/login` (only when a token is set), `/static/viewer.css` (the one stylesheet).
Every route but the login form's POST is GET (or HEAD); the store is opened read-only, so
nothing can write.
Pages need no JavaScript and load none. A forgotten conversation's pages say only when it
was forgotten (200, as `show` exits 0).
"""

from __future__ import annotations

import hmac
import logging
from typing import Final
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from convstore.adapters.web import html, views
from convstore.adapters.web.guard import COOKIE, Guard
from convstore.domain.errors import ConversationForgotten
from convstore.projections.wording import forgotten_line
from convstore.storage import Store

__all__ = ["viewer_app"]

log = logging.getLogger(__name__)
STYLE: Final = html.TEMPLATES.with_name("static").joinpath("viewer.css").read_bytes()
MAX_FORM_BYTES: Final = 4096


class _Pages:
    """The routes' endpoints, over one read-only store."""

    def __init__(self, store: Store, token: str | None, secure_cookie: bool) -> None:
        self.store = store
        self.token = token
        self.secure_cookie = secure_cookie

    def page(self, template: str, code: int = 200, **context: object) -> HTMLResponse:
        return HTMLResponse(
            html.render(template, token=self.token is not None, **context), status_code=code
        )

    def style(self, request: Request) -> Response:
        return Response(STYLE, media_type="text/css")

    def icon(self, request: Request) -> Response:
        return Response(status_code=204)  # no icon: the browser asks, and need not log a 404

    def listing(self, request: Request) -> Response:
        found = views.listing(
            self.store, request.query_params, request.query_params.getlist("label")
        )
        return self.page("list.html", listing=found)

    def transcript(self, request: Request) -> Response:
        conversation = views.conversation_id(self.store, request.path_params["id"])
        return self.page("transcript.html", page=views.transcript(self.store, conversation))

    def audit(self, request: Request) -> Response:
        conversation = views.conversation_id(self.store, request.path_params["id"])
        return self.page("audit.html", report=views.audited(self.store, conversation))

    def replay(self, request: Request) -> Response:
        conversation = views.conversation_id(self.store, request.path_params["id"])
        query = request.query_params
        preview = views.preview(
            self.store, conversation, query.get("to") or None, query.get("model") or None
        )
        return self.page("replay.html", conversation=conversation, preview=preview)

    def search(self, request: Request) -> Response:
        return self.page(
            "search.html", found=views.found(self.store, request.query_params.get("q", ""))
        )

    def display(self, request: Request) -> Response:
        conversation = views.conversation_id(self.store, request.path_params["id"])
        content = views.display_content(self.store, conversation, request.path_params["activity"])
        return HTMLResponse(content)

    async def login(self, request: Request) -> Response:
        if self.token is None:
            return RedirectResponse("/", status_code=303)
        if request.method != "POST":
            return self.page("login.html")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                return self.page("login.html", 413, problem="that form is too large")
        given = parse_qs(body.decode("utf-8", "replace")).get("token", [""])[0].strip()
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return self.page("login.html", 401, problem="that is not the viewer's token")
        answer = RedirectResponse("/", status_code=303)
        answer.set_cookie(
            COOKIE,
            self.token,
            httponly=True,
            samesite="strict",
            secure=self.secure_cookie,
            path="/",
        )
        return answer


def viewer_app(
    store: Store,
    *,
    hosts: frozenset[str],
    token: str | None = None,
    secure_cookie: bool = False,
) -> Guard:
    """The viewer over `store` (open it read-only), answering requests whose Host is in
    `hosts`; with `token`, only to requests that carry it (`secure_cookie`: the login
    cookie is sent over HTTPS only, for a viewer behind a TLS proxy)."""
    pages = _Pages(store, token, secure_cookie)

    async def page_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, views.PageError)
        return pages.page("error.html", error.status, status=error.status, message=error.message)

    async def forgotten(request: Request, error: Exception) -> Response:
        assert isinstance(error, ConversationForgotten)
        said = forgotten_line(error.conversation_id, error.on)
        return pages.page("forgotten.html", conversation=error.conversation_id, said=said)

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        return pages.page(
            "error.html", error.status_code, status=error.status_code, message=str(error.detail)
        )

    routes = [
        Route("/", pages.listing),
        Route("/search", pages.search),
        Route("/c/{id}", pages.transcript),
        Route("/c/{id}/audit", pages.audit),
        Route("/c/{id}/replay", pages.replay),
        Route("/display/{id}/{activity}", pages.display),
        Route("/login", pages.login, methods=["GET", "POST"]),
        Route("/static/viewer.css", pages.style),
        Route("/favicon.ico", pages.icon),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            views.PageError: page_error,
            ConversationForgotten: forgotten,
            HTTPException: http_error,
        },
    )
    return Guard(app, hosts=hosts, token=token)
