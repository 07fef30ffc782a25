"""The request's settings and tools, from the newest recorded request and the configuration.

Part of the Anthropic encoder (see `encode` for the rules): the recorded settings the
request starts from, the hosted tools the configuration enables or a pending activity
keeps declared (`wire.consent`), MCP servers alike, and a `tool_choice` never broadened
to hosted tools.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from convstore.adapters.anthropic.config import (
    NATIVE_TOOL_VERSIONS,
    AnthropicConfig,
    config_name,
    hosted_tool_declarations,
    tool_name_of,
)
from convstore.adapters.anthropic.context import (
    PROVIDER,
    TOOL_ALIASES,
    declared_name,
    is_hosted_tool_type,
)
from convstore.adapters.anthropic.messages import MessageScan
from convstore.adapters.wire.consent import ConsentedTools, PendingTool, consented_tools, kept_loss
from convstore.adapters.wire.encoding import (
    ANY_JSON,
    NO_SETTINGS,
    RecordedSettings,
    client_tools,
    kept_choice,
    recorded_list,
    recorded_native,
    set_field,
    settings_loss,
    target_model,
)
from convstore.adapters.wire.providers import DeclaredTool, Loss
from convstore.domain.events import HostedActivity

DEFAULT_MAX_TOKENS: Final = 4096
"""`max_tokens` when neither the configuration nor the recorded request gives one."""


SAMPLING: Final = frozenset({"temperature", "top_p", "top_k"})
"""Sampling parameters, which the Messages API no longer takes."""
SAMPLING_GONE: Final = (
    "the Messages API no longer takes sampling parameters (API version 2026-10-21 "
    "refuses them on every model; the official SDK has none)"
)


@dataclass(slots=True)
class ResolvedSettings(RecordedSettings):
    """The recorded settings, and the Anthropic body the configuration makes of them."""

    max_tokens: int
    servers: list[msgspec.Raw] | None = None
    """The recorded `mcp_servers` entries the request declares (set by `tools`)."""

    @classmethod
    def resolve(
        cls,
        scan: MessageScan,
        config: AnthropicConfig,
        model: str | None,
        losses: list[Loss],
    ) -> ResolvedSettings:
        source = scan.newest_with_settings or scan.newest
        portable = source.settings if source is not None else NO_SETTINGS
        native = recorded_native(source, PROVIDER, losses)
        recorded_model = ""
        if native is not None and "model" in native:
            value = ANY_JSON.decode(native["model"])
            recorded_model = value if isinstance(value, str) else ""
        if not recorded_model and source is not None and source.provider == PROVIDER:
            recorded_model = source.model
        chosen = target_model("anthropic", "claude-sonnet-4-5", model, config.model, recorded_model)
        max_tokens = config.max_tokens
        if max_tokens is None and native is not None and "max_tokens" in native:
            value = ANY_JSON.decode(native["max_tokens"])
            max_tokens = value if type(value) is int else None
        if max_tokens is None:
            max_tokens = portable.max_tokens or DEFAULT_MAX_TOKENS
        return cls(chosen, native, portable, source, max_tokens)

    def recorded_tools(self, losses: list[Loss]) -> list[DeclaredTool]:
        if self.native is not None:
            tools = []
            for item in recorded_list(self.native, "tools"):
                decoded = ANY_JSON.decode(item)
                if not isinstance(decoded, dict):
                    continue
                kind = decoded.get("type")
                kind = kind if isinstance(kind, str) else ""
                name = declared_name(decoded, kind)
                name = tool_name_of(kind) if name == kind else name
                tools.append(DeclaredTool(name, kind, item, is_hosted_tool_type(kind)))
            return tools
        tools = []
        for declaration in client_tools(self.source, "Anthropic", losses):
            value: dict[str, Any] = {"name": declaration.name}
            if declaration.description:
                value["description"] = declaration.description
            value["input_schema"] = declaration.input_schema or {"type": "object"}
            tools.append(DeclaredTool(declaration.name, "", value, False))
        return tools

    def tools(
        self, config: AnthropicConfig, pending: list[HostedActivity], losses: list[Loss]
    ) -> ConsentedTools:
        """The tools to declare: the recorded client tools, the hosted tools `config`
        enables, and those pending activities need (`wire.consent`); the recorded MCP
        servers consented to go to `servers`."""
        recorded = self.recorded_tools(losses)
        needed = _pending_tools(pending)
        consented = consented_tools(
            recorded,
            configured={
                name: DeclaredTool(name, declaration["type"], declaration, True)
                for name, declaration in hosted_tool_declarations(config).items()
            },
            enables=lambda name: config.hosted_tools.enables(config_name(name)),
            pending=needed,
            key=_config_key,
            source=self.source,
            losses=losses,
        )
        toolsets = {t.name for t in recorded if t.type == "mcp_toolset"}
        self.servers = self._mcp_servers(config, consented, needed, toolsets, losses)
        return consented

    def _mcp_servers(
        self,
        config: AnthropicConfig,
        consented: ConsentedTools,
        needed: Mapping[str, PendingTool],
        toolsets: set[str],
        losses: list[Loss],
    ) -> list[msgspec.Raw] | None:
        """The recorded `mcp_servers` entries `hosted_tools.mcp` consents to, or a pending
        activity or a toolset declared needs."""
        if self.native is None or "mcp_servers" not in self.native:
            return None
        declared = {t.name for t in consented.tools}
        kept = []
        for raw in recorded_list(self.native, "mcp_servers"):
            decoded = ANY_JSON.decode(raw)
            server = decoded.get("name") if isinstance(decoded, dict) else None
            tool = f"mcp:{server}"
            if config.hosted_tools.mcp.enable or tool in declared:
                kept.append(raw)
            elif tool in needed:
                kept.append(raw)
                consented.kept_declared.append(tool)
                losses.append(kept_loss(tool, needed[tool].activity, _config_key(tool)))
            elif tool not in toolsets:  # a toolset left out has its loss already
                reason = (
                    f"hosted tool {tool} (MCP server) is not declared: the configuration "
                    f"does not enable it (a recorded request is no consent; set "
                    f"{_config_key(tool)}.enable = true)"
                )
                losses.append(settings_loss(self.source, reason, kind="tool_declaration"))
        return kept or None

    def body(self, tools: list[DeclaredTool], losses: list[Loss]) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.native is not None:
            body.update((k, v) for k, v in self.native.items() if k not in ("messages", "stream"))
            for name in SAMPLING & body.keys():
                del body[name]
                losses.append(settings_loss(self.source, f"{name}: {SAMPLING_GONE}"))
        body["model"] = self.model
        body["max_tokens"] = self.max_tokens
        if self.native is None and self.portable.system:
            body["system"] = self.portable.system
        set_field(body, "mcp_servers", self.servers)
        set_field(body, "tools", [t.value for t in tools] if tools else None)
        set_field(body, "tool_choice", self.tool_choice(tools, losses))
        return body

    def tool_choice(self, tools: list[DeclaredTool], losses: list[Loss]) -> Any:
        raw: msgspec.Raw | None = None
        choice: Any
        if self.native is not None:
            raw = self.native.get("tool_choice")
            if raw is None:
                return None
            choice = ANY_JSON.decode(raw)
        else:
            name = self.portable.tool_choice
            if name is None:
                return None
            choice = (
                {"type": name}
                if name in ("auto", "any", "none")
                else {
                    "type": "tool",
                    "name": name,
                }
            )
        return kept_choice(choice, raw, scope_tool_choice(choice, tools), self.source, losses)


def scope_tool_choice(choice: Any, tools: Sequence[DeclaredTool]) -> tuple[Any, str | None]:
    """`choice` kept to client tools: (the choice to send or None, why it changed)."""
    if not isinstance(choice, dict):
        return None, f"tool_choice {choice!r} is not an object; left out"
    if not tools:
        kind = choice.get("type")
        if kind in ("auto", None):
            return None, None
        return None, f"tool_choice {kind!r} without any tool declared; left out"
    kind = choice.get("type")
    hosted = [t.name for t in tools if t.hosted]
    clients = [t.name for t in tools if not t.hosted]
    if kind == "tool":
        name = choice.get("name")
        if name in hosted:
            return None, f"tool_choice forces hosted tool {name!r}, which is unsupported; left out"
        if name not in clients:
            return None, f"tool_choice names {name!r}, which is not declared; left out"
        return choice, None
    if kind == "any" and hosted:
        rest = {k: v for k, v in choice.items() if k not in ("type", "name")}
        if len(clients) == 1:
            return (
                {"type": "tool", "name": clients[0], **rest},
                f"tool_choice any narrowed to the only client tool {clients[0]!r} so that "
                f"hosted tools ({', '.join(hosted)}) cannot satisfy it",
            )
        if not clients:
            return None, "tool_choice any with only hosted tools declared; left out"
        return (
            {"type": "auto", **rest},
            "tool_choice any sent as auto: Anthropic cannot limit it to the client tools "
            f"while hosted tools ({', '.join(hosted)}) are declared",
        )
    return choice, None


def _config_key(tool_name: str) -> str:
    return f"providers.anthropic.hosted_tools.{config_name(tool_name)}"


def _pending_tools(pending: list[HostedActivity]) -> dict[str, PendingTool]:
    """Tool name → what pending activities need declared: the tool their native version
    names (else their own, aliases read), `mcp:<server>` for an MCP activity (its server
    and toolset as recorded: nothing to declare of its own)."""
    out: dict[str, PendingTool] = {}
    for activity in pending:
        if activity.name.startswith("mcp:"):
            out.setdefault(activity.name.split("/", 1)[0], PendingTool(activity))
            continue
        payload = activity.payload
        version = payload.version if payload is not None else ""
        if not version:
            name = TOOL_ALIASES.get(activity.name, activity.name)
            version = NATIVE_TOOL_VERSIONS.get(name, "")
        if version:
            name = tool_name_of(version)
            value = {"type": version, "name": name}
            out.setdefault(name, PendingTool(activity, DeclaredTool(name, version, value, True)))
    return out
