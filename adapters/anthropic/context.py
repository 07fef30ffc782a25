"""What a response decoder needs to know of the Messages API request it answers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from convstore.adapters.wire.captured import decoded_settings, native_request, request_fields
from convstore.domain.vocabulary import RequestSettings, ToolDeclaration

__all__ = ["PROVIDER", "RequestContext", "is_hosted_tool_type"]

PROVIDER: Final = "anthropic"

HOSTED_TOOL_PREFIXES: Final = (
    "web_search_",
    "web_fetch_",
    "code_execution_",
    "tool_search_tool_",
)
"""Native tool types the API runs itself (server tools); other typed tools run client-side
(bash, text_editor, computer, memory)."""

TOOL_ALIASES: Final[Mapping[str, str]] = {
    "bash_code_execution": "code_execution",
    "text_editor_code_execution": "code_execution",
}
"""Server tool names that come from another declared tool."""


def is_hosted_tool_type(native_type: str) -> bool:
    """True for a native tool type the provider runs itself."""
    return native_type.startswith(HOSTED_TOOL_PREFIXES)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """The request's settings, as ResponseStarted records them, and its tool versions."""

    settings: RequestSettings = field(default_factory=RequestSettings)
    model: str = ""
    """The model the request named (the response names the one that answered)."""
    tool_versions: Mapping[str, str] = field(default_factory=dict)
    """Declared hosted tool name → its native type, e.g. `web_search` → `web_search_20250305`."""

    def version_of(self, tool_name: str) -> str:
        """The native version of the declared hosted tool behind a server tool name."""
        versions = self.tool_versions
        return versions.get(tool_name) or versions.get(TOOL_ALIASES.get(tool_name, ""), "")

    @classmethod
    def from_body(cls, body: bytes | str) -> RequestContext:
        """Read a Messages API request body; raises DecodeError if it is not a JSON object."""
        fields = request_fields(body, "Anthropic")
        settings = decoded_settings(fields, _SETTINGS, "Anthropic")
        tools = tuple(
            _declaration(tool) for tool in _list(settings.get("tools")) if isinstance(tool, dict)
        )
        model = settings.get("model")
        max_tokens = settings.get("max_tokens")
        return cls(
            settings=RequestSettings(
                system=_system(settings.get("system")),
                tools=tools,
                tool_choice=_tool_choice(settings.get("tool_choice")),
                max_tokens=max_tokens if type(max_tokens) is int else None,
                native=native_request(PROVIDER, fields, "messages"),
            ),
            model=model if isinstance(model, str) else "",
            tool_versions={t.name: t.native_type for t in tools if t.hosted},
        )


_SETTINGS: Final = ("model", "system", "tools", "tool_choice", "max_tokens")


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _system(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    texts = [
        b["text"] for b in _list(value) if isinstance(b, dict) and isinstance(b.get("text"), str)
    ]
    return "\n".join(texts) if texts else None


def _tool_choice(value: Any) -> str | None:
    if not isinstance(value, dict):
        return None
    kind, name = value.get("type"), value.get("name")
    if kind == "tool" and isinstance(name, str):
        return name
    return kind if isinstance(kind, str) else None


def _declaration(tool: dict[str, Any]) -> ToolDeclaration:
    name, kind = tool.get("name"), tool.get("type")
    native_type = kind if isinstance(kind, str) and kind != "custom" else ""
    description, schema = tool.get("description"), tool.get("input_schema")
    return ToolDeclaration(
        name=name if isinstance(name, str) else native_type,
        hosted=is_hosted_tool_type(native_type),
        native_type=native_type,
        description=description if isinstance(description, str) else "",
        input_schema=schema if isinstance(schema, dict) else None,
    )
