"""What a response decoder needs to know of the Chat Completions request it answers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

from convstore.adapters.wire.captured import decoded_settings, native_request, request_fields
from convstore.domain.errors import ConfigurationError
from convstore.domain.vocabulary import RequestSettings, ToolDeclaration

__all__ = ["PROVIDER", "SERVER_FIELD", "RequestContext", "server_host", "text_of"]

PROVIDER: Final = "openai-chat"
SERVER_FIELD: Final = "convstore_server"
"""Where a request recording (`EncodedRequest.recorded_json`) names the server the body
went to, which the URL carries and the body does not: read by `from_body`, never stored
in the settings nor sent."""

_HOST: Final = re.compile(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")


def server_host(text: str) -> str:
    """The server a binding names: the host (and port) of a `base_url` or of a bare
    `host[:port]`, lowercased; ConfigurationError for anything else."""
    given = text.strip()
    host = urlsplit(given).netloc if "://" in given else given.split("/", 1)[0]
    host = host.rpartition("@")[2].lower()  # never a credential from a URL
    if not host or _HOST.fullmatch(host) is None:
        shown = given if len(given) <= 60 else given[:59] + "…"
        raise ConfigurationError(
            f"{shown!r} names no server: give its host (api.openai.com, localhost:11434)"
            " or its base_url (http://localhost:11434/v1)"
        )
    return host


_SETTINGS: Final = (
    "model",
    "messages",
    "tools",
    "tool_choice",
    "max_tokens",
    "max_completion_tokens",
)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """The request's settings, as ResponseStarted records them, and the server it went to."""

    settings: RequestSettings = field(default_factory=RequestSettings)
    model: str = ""
    """The model the request named (the response names the one that answered)."""
    server: str = ""
    """The server's host (`api.openai.com`, `localhost:11434`, …); empty when unknown.
    Every payload is bound to it beside the model."""

    @property
    def binding_base(self) -> dict[str, str]:
        """The binding every payload of this request's response carries beyond the model."""
        return {"server": self.server} if self.server else {}

    @classmethod
    def from_body(cls, body: bytes | str, *, server: str = "") -> RequestContext:
        """Read a Chat Completions request body; raises DecodeError if it is not a JSON
        object. `server`, when given, is the server; else the one the body's recording
        names (`SERVER_FIELD`), if any."""
        fields = request_fields(body, "Chat Completions")
        named = decoded_settings(fields, (SERVER_FIELD,), "Chat Completions").get(SERVER_FIELD)
        fields.pop(SERVER_FIELD, None)
        if not server and isinstance(named, str) and named:
            server = named  # the server a recording names, unless the caller named one
        settings = decoded_settings(fields, _SETTINGS, "Chat Completions")
        model = settings.get("model")
        limit = settings.get("max_completion_tokens", settings.get("max_tokens"))
        return cls(
            settings=RequestSettings(
                system=_system(settings.get("messages")),
                tools=tuple(
                    _declaration(tool)
                    for tool in _list(settings.get("tools"))
                    if isinstance(tool, dict)
                ),
                tool_choice=_tool_choice(settings.get("tool_choice")),
                max_tokens=limit if type(limit) is int else None,
                native=native_request(PROVIDER, fields, "messages"),
            ),
            model=model if isinstance(model, str) else "",
            server=server,
        )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def text_of(content: Any) -> str:
    """A message's `content` as text: a string, or its `text` parts joined."""
    if isinstance(content, str):
        return content
    return "".join(
        part["text"]
        for part in _list(content)
        if isinstance(part, dict)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    )


def _system(messages: Any) -> str | None:
    """The `system` (or `developer`) messages' text, joined by blank lines; None if none."""
    texts = [
        text_of(m.get("content"))
        for m in _list(messages)
        if isinstance(m, dict) and m.get("role") in ("system", "developer")
    ]
    return "\n\n".join(texts) if texts else None


def _str(d: Mapping[str, Any], key: str) -> str:
    value = d.get(key)
    return value if isinstance(value, str) else ""


def _tool_choice(value: Any) -> str | None:
    """`auto` / `none` as they are, `required` as `any`, a named function by its name."""
    if isinstance(value, str):
        return "any" if value == "required" else value
    if isinstance(value, dict):
        function = value.get("function")
        if isinstance(function, dict) and _str(function, "name"):
            return _str(function, "name")
        return _str(value, "type") or None
    return None


def _declaration(tool: Mapping[str, Any]) -> ToolDeclaration:
    kind = _str(tool, "type")
    function = tool.get("function")
    if kind == "function" and isinstance(function, dict):
        schema = function.get("parameters")
        return ToolDeclaration(
            name=_str(function, "name"),
            description=_str(function, "description"),
            input_schema=schema if isinstance(schema, dict) else None,
        )
    return ToolDeclaration(name=_str(tool, "name") or kind, native_type=kind)
