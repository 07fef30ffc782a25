"""Which requests the proxy records, and where each provider's requests go.

A model path is recorded: Anthropic `/v1/messages`; OpenAI `/v1/responses` (and
`/v1/responses/compact`); Chat Completions (`openai-chat`: OpenAI, or a compatible server
as its upstream) `/v1/chat/completions`, or any path ending `/chat/completions`; Gemini
`/v1beta/models/*:generateContent` and `:streamGenerateContent`, and Gemini on Vertex
(`/v1/projects/*/locations/*/publishers/google/models/*:…`). Every other path (files,
models, counting tokens) passes through unrecorded, to the upstream of the provider its
prefix names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from convstore.adapters.wire.names import PROVIDERS
from convstore.domain.errors import ConfigurationError

__all__ = ["DEFAULT_UPSTREAMS", "Route", "route", "upstreams"]

DEFAULT_UPSTREAMS: Final[Mapping[str, str]] = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com",
    "openai-chat": "https://api.openai.com",
    "google": "https://generativelanguage.googleapis.com",
}
"""Each provider's public endpoint (Vertex needs its regional host: `--upstream`)."""

_ANTHROPIC: Final = re.compile(r"/v1/messages/?")
_OPENAI: Final = re.compile(r"/v1/responses(?:/compact)?/?")
_CHAT: Final = re.compile(r"(?:/[^?#]*)?/chat/completions/?")
"""Also under a compatible server's base path (`/api/v1/…`, Azure's deployments, none)."""
_GEMINI: Final = re.compile(
    r"/v1(?:beta|alpha)?/(?:projects/[^/]+/locations/[^/]+/publishers/google/)?"
    r"models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent)"
)
_PREFIXES: Final = (
    ("/v1/messages", "anthropic"),
    ("/v1/complete", "anthropic"),
    ("/v1/projects/", "google"),
    ("/v1beta/", "google"),
    ("/v1alpha/", "google"),
    ("/upload/", "google"),
    ("/v1/", "openai"),
)
"""Where an unrecorded path goes, by its prefix (Anthropic's and OpenAI's share `/v1/`:
the headers decide, see `route`)."""


@dataclass(frozen=True, slots=True)
class Route:
    """Where one request goes, and whether its exchange is recorded."""

    provider: str
    recorded: bool
    model: str = ""
    """The model a Gemini path names (its body does not)."""


def route(path: str, headers: Mapping[str, str]) -> Route | None:
    """The route of a request for `path` (no query) with lower-cased `headers`; None for a
    path no provider serves."""
    if _ANTHROPIC.fullmatch(path):
        return Route("anthropic", recorded=True)
    if _OPENAI.fullmatch(path):
        return Route("openai", recorded=True)
    if _CHAT.fullmatch(path):
        return Route("openai-chat", recorded=True)
    gemini = _GEMINI.fullmatch(path)
    if gemini is not None:
        return Route("google", recorded=True, model=gemini["model"])
    if path.startswith("/v1/") and ("x-api-key" in headers or "anthropic-version" in headers):
        return Route("anthropic", recorded=False)
    for prefix, provider in _PREFIXES:
        if path.startswith(prefix):
            return Route(provider, recorded=False)
    return None


def upstreams(given: Iterable[str]) -> dict[str, str]:
    """The upstream of every provider: `PROVIDER=URL` entries over the defaults (Chat
    Completions follow an `openai` one unless `openai-chat` has its own, as they did
    before they were recorded); a ConfigurationError for an unknown provider or a URL
    that is not http(s)."""
    found = dict(DEFAULT_UPSTREAMS)
    named: set[str] = set()
    for entry in given:
        name, sep, url = entry.partition("=")
        name = "google" if name.strip() == "gemini" else name.strip()
        if not sep or name not in PROVIDERS:
            raise ConfigurationError(
                f"--upstream {entry!r}: expected PROVIDER=URL, PROVIDER one of "
                f"{', '.join(PROVIDERS)}"
            )
        url = url.strip().rstrip("/")
        if not re.fullmatch(r"https?://[^/\s?#]+(/[^\s?#]*)?", url):
            raise ConfigurationError(
                f"--upstream {entry!r}: the URL must be http(s)://HOST[:PORT][/PATH], with no"
                " query (the request's own path is appended to it)"
            )
        if re.search(r"/v1(beta)?$", url) and name != "openai-chat":
            raise ConfigurationError(
                f"--upstream {entry!r}: the request's path (/v1/…) is appended to the URL, so"
                f" it would be sent to {url}/v1/…; give the URL without its /v1 part"
            )
        found[name] = url
        named.add(name)
    if "openai" in named and "openai-chat" not in named:
        found["openai-chat"] = found["openai"]
    return found
