"""What a response decoder needs to know of the Messages API request it answers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from convstore.adapters.wire.captured import decoded_settings, native_request, request_fields
from convstore.domain.vocabulary import RequestSettings, ToolDeclaration

__all__ = ["PROVIDER", "RequestContext", "activity_name", "declared_name", "is_hosted_tool_type"]

PROVIDER: Final = "anthropic"

HOSTED_TOOL_PREFIXES: Final = (
    "web_search_",
    "web_fetch_",
    "code_execution_",
    "tool_search_tool_",
    "mcp_toolset",
)
"""Native tool types the API runs itself (server tools, and the MCP connector's toolsets);
other typed tools run client-side (bash, text_editor, computer, memory)."""

MCP_SERVER: Final = "mcp_server"
"""The native type recorded for an `mcp_servers` entry no `mcp_toolset` configures (the
connector's first beta, where the server definition alone enables its tools)."""

CODE_EXECUTION_NAMES: Final = frozenset(
    {"code_execution", "bash_code_execution", "text_editor_code_execution"}
)
"""Server tool names of code execution work."""

_EMBEDDED_CODE_EXECUTION: Final = re.compile(r"^web_(?:search|fetch)_(\d{8})$")
_FIRST_EMBEDDING: Final = "20260209"
"""Web tool versions from this date on filter their results with code execution of their
own (dynamic filtering): its `code_execution` calls need no code execution tool declared."""

TOOL_ALIASES: Final[Mapping[str, str]] = {
    "bash_code_execution": "code_execution",
    "text_editor_code_execution": "code_execution",
}
"""Server tool names that come from another declared tool."""


def is_hosted_tool_type(native_type: str) -> bool:
    """True for a native tool type the provider runs itself."""
    return native_type.startswith(HOSTED_TOOL_PREFIXES)


def declared_name(tool: Mapping[str, Any], native_type: str) -> str:
    """The name a tool declaration gives its tool: `name`, `mcp:<server>` for an MCP
    toolset, else its native type."""
    name = tool.get("name")
    if isinstance(name, str):
        return name
    server = tool.get("mcp_server_name")
    if native_type == "mcp_toolset" and isinstance(server, str):
        return f"mcp:{server}"
    return native_type


def activity_name(block: Mapping[str, Any]) -> str | None:
    """The hosted activity name of a call block: a server tool's name, `mcp:<server>/<tool>`
    for an MCP tool use; None for any other block or shape."""
    name, kind = block.get("name"), block.get("type")
    if not isinstance(name, str) or not name:
        return None
    if kind == "server_tool_use":
        return name
    if kind == "mcp_tool_use":
        server = block.get("server_name")
        return f"mcp:{server if isinstance(server, str) else ''}/{name}"
    return None


@dataclass(frozen=True, slots=True)
class RequestContext:
    """The request's settings, as ResponseStarted records them, and its tool versions."""

    settings: RequestSettings = field(default_factory=RequestSettings)
    model: str = ""
    """The model the request named (the response names the one that answered)."""
    tool_versions: Mapping[str, str] = field(default_factory=dict)
    """Declared hosted tool name → its native type, e.g. `web_search` → `web_search_20250305`,
    `mcp:docs` → `mcp_toolset`."""
    replayed_calls: Mapping[str, str] = field(default_factory=dict)
    """Hosted call id → activity name, for the calls the request's last assistant message
    replays (a `pause_turn` continuation, a deferred search): the response may open with
    their results."""

    def version_of(self, tool_name: str) -> str:
        """The native version of the declared hosted tool behind a server tool name (an MCP
        activity `mcp:<server>/<tool>`: its server's declaration)."""
        versions = self.tool_versions
        found = versions.get(tool_name) or versions.get(TOOL_ALIASES.get(tool_name, ""), "")
        if found:
            return found
        if tool_name.startswith("mcp:"):
            return versions.get(tool_name.split("/", 1)[0], "")
        if tool_name in CODE_EXECUTION_NAMES:
            return self._embedding_web_tool()
        return ""

    def _embedding_web_tool(self) -> str:
        """The declared web tool whose own code execution runs undeclared code execution
        work (dynamic filtering), or ``."""
        for native_type in self.tool_versions.values():
            dated = _EMBEDDED_CODE_EXECUTION.match(native_type)
            if dated is not None and dated.group(1) >= _FIRST_EMBEDDING:
                return native_type
        return ""

    @classmethod
    def from_body(cls, body: bytes | str) -> RequestContext:
        """Read a Messages API request body; raises DecodeError if it is not a JSON object."""
        fields = request_fields(body, "Anthropic")
        settings = decoded_settings(fields, _SETTINGS, "Anthropic")
        tools = _declarations(_list(settings.get("tools")), _list(settings.get("mcp_servers")))
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
            replayed_calls=_replayed_calls(fields.get("messages")),
        )


_SETTINGS: Final = ("model", "system", "tools", "tool_choice", "max_tokens", "mcp_servers")


class _Message(msgspec.Struct):
    role: Any = None
    content: Any = None


_MESSAGES: Final = msgspec.json.Decoder(list[msgspec.Raw])
_MESSAGE: Final = msgspec.json.Decoder(_Message)


def _replayed_calls(messages: msgspec.Raw | None) -> dict[str, str]:
    """Hosted call id → activity name, for the call blocks of the last assistant message."""
    if messages is None:
        return {}
    try:
        for raw in reversed(_MESSAGES.decode(messages)):
            message = _MESSAGE.decode(raw)
            if message.role == "assistant":
                return _calls_of(_list(message.content))
    except (msgspec.DecodeError, RecursionError):
        pass  # an unreadable history replays no call the decoder could need
    return {}


def _calls_of(blocks: list[Any]) -> dict[str, str]:
    calls: dict[str, str] = {}
    for block in blocks:
        if not isinstance(block, dict):
            continue
        name, call_id = activity_name(block), block.get("id")
        if name is not None and isinstance(call_id, str):
            calls[call_id] = name
    return calls


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


def _declarations(tools: list[Any], servers: list[Any]) -> tuple[ToolDeclaration, ...]:
    """The request's tools, then each MCP server no toolset configures: every MCP server is
    a hosted tool `mcp:<server>` (the provider calls it), never a client function."""
    declared = [_declaration(tool) for tool in tools if isinstance(tool, dict)]
    names = {d.name for d in declared}
    for server in servers:
        name = server.get("name") if isinstance(server, dict) else None
        if isinstance(name, str) and f"mcp:{name}" not in names:
            names.add(f"mcp:{name}")
            declared.append(
                ToolDeclaration(name=f"mcp:{name}", hosted=True, native_type=MCP_SERVER)
            )
    return tuple(declared)


def _declaration(tool: dict[str, Any]) -> ToolDeclaration:
    kind = tool.get("type")
    native_type = kind if isinstance(kind, str) and kind != "custom" else ""
    description, schema = tool.get("description"), tool.get("input_schema")
    return ToolDeclaration(
        name=declared_name(tool, native_type),
        hosted=is_hosted_tool_type(native_type),
        native_type=native_type,
        description=description if isinstance(description, str) else "",
        input_schema=schema if isinstance(schema, dict) else None,
    )
