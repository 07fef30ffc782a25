"""What a response decoder needs to know of the Responses API request it answers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from convstore.adapters.wire.captured import decoded_settings, native_request, request_fields
from convstore.domain.vocabulary import RequestSettings, ToolDeclaration

__all__ = [
    "CLIENT_TOOL_NAMES",
    "HOSTED_TOOL_NAMES",
    "PROVIDER",
    "RequestContext",
    "hosted_name_of",
]

PROVIDER: Final = "openai"

HOSTED_TOOL_NAMES: Final[Mapping[str, str]] = {
    "web_search": "web_search",
    "web_search_preview": "web_search",
    "file_search": "file_search",
    "code_interpreter": "code_interpreter",
    "image_generation": "image_generation",
    "mcp": "mcp",
}
"""Declared tool type (or, for dated types such as `web_search_preview_2025_03_11`, its
undated stem) → the capability name of the hosted activity it runs."""

CLIENT_TOOL_NAMES: Final[Mapping[str, str]] = {
    "computer_use_preview": "computer",
    "computer": "computer",
    "local_shell": "local_shell",
    "shell": "shell",
    "apply_patch": "apply_patch",
}
"""Typed tools that run on the client (their calls are ToolCallRequested) → tool name."""


def hosted_name_of(tool_type: str) -> str | None:
    """The activity name of a declared hosted tool type, None for a client-side one."""
    name = HOSTED_TOOL_NAMES.get(tool_type)
    if name is None:
        stem = tool_type.rstrip("0123456789_")  # web_search_preview_2025_03_11 → …_preview
        name = HOSTED_TOOL_NAMES.get(stem)
    return name


@dataclass(frozen=True, slots=True)
class RequestContext:
    """The request's settings, as ResponseStarted records them, and its tool versions."""

    settings: RequestSettings = field(default_factory=RequestSettings)
    model: str = ""
    """The model the request named (the response names the one that answered)."""
    tool_versions: Mapping[str, str] = field(default_factory=dict)
    """Hosted activity name → the declared tool type, e.g. `web_search` →
    `web_search_preview`; recorded as the version of the activity's payloads."""

    def version_of(self, activity_name: str) -> str:
        """The declared native type behind a hosted activity name (`mcp:…` → `mcp`)."""
        versions = self.tool_versions
        return versions.get(activity_name) or versions.get(activity_name.partition(":")[0], "")

    @classmethod
    def from_body(cls, body: bytes | str) -> RequestContext:
        """Read a Responses API request body; raises DecodeError if it is not a JSON object."""
        fields = request_fields(body, "OpenAI")
        settings = decoded_settings(fields, _SETTINGS, "OpenAI")
        tools = tuple(
            _declaration(tool) for tool in _list(settings.get("tools")) if isinstance(tool, dict)
        )
        model = settings.get("model")
        max_tokens = settings.get("max_output_tokens")
        instructions = settings.get("instructions")
        return cls(
            settings=RequestSettings(
                system=instructions if isinstance(instructions, str) else None,
                tools=tools,
                tool_choice=_tool_choice(settings.get("tool_choice")),
                max_tokens=max_tokens if type(max_tokens) is int else None,
                native=native_request(PROVIDER, fields, "input"),
            ),
            model=model if isinstance(model, str) else "",
            tool_versions={
                name: t.native_type
                for t in tools
                if t.hosted and (name := hosted_name_of(t.native_type)) is not None
            },
        )


_SETTINGS: Final = ("model", "instructions", "tools", "tool_choice", "max_output_tokens")


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(d: Mapping[str, Any], key: str) -> str:
    value = d.get(key)
    return value if isinstance(value, str) else ""


def _tool_choice(value: Any) -> str | None:
    """`auto` / `none` as they are, `required` as `any`, a named tool by its name."""
    if isinstance(value, str):
        return "any" if value == "required" else value
    if not isinstance(value, dict):
        return None
    kind = _str(value, "type")
    if kind in ("function", "custom") and _str(value, "name"):
        return _str(value, "name")
    if kind == "allowed_tools":
        mode = _str(value, "mode")
        return "any" if mode == "required" else mode or None
    if kind == "mcp":
        return f"mcp:{_str(value, 'server_label')}"
    return hosted_name_of(kind) or CLIENT_TOOL_NAMES.get(kind) or kind or None


def _declaration(tool: dict[str, Any]) -> ToolDeclaration:
    kind = _str(tool, "type")
    description = _str(tool, "description")
    if kind == "function":
        schema = tool.get("parameters")
        return ToolDeclaration(
            name=_str(tool, "name"),
            description=description,
            input_schema=schema if isinstance(schema, dict) else None,
        )
    hosted = hosted_name_of(kind)
    if hosted == "mcp":
        return ToolDeclaration(
            name=f"mcp:{_str(tool, 'server_label')}",
            hosted=True,
            native_type=kind,
            description=_str(tool, "server_description"),
        )
    if hosted is not None:
        return ToolDeclaration(name=hosted, hosted=True, native_type=kind)
    name = CLIENT_TOOL_NAMES.get(kind) or _str(tool, "name") or kind
    return ToolDeclaration(name=name, native_type=kind, description=description)
