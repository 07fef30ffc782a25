"""The request's settings and tools, from the newest recorded request and the configuration.

Part of the OpenAI encoder (see `encode` for the rules): the recorded settings the
request starts from, the hosted tools the configuration enables or a pending activity
keeps declared (`wire.consent`), `include` for encrypted reasoning, and a `tool_choice`
never broadened to hosted tools.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from convstore.adapters.openai.binding import ResponseScan
from convstore.adapters.openai.config import (
    NATIVE_TOOL_TYPES,
    NON_REASONING_FAMILIES,
    OpenAIConfig,
    config_name,
    hosted_tool_declarations,
    model_family,
)
from convstore.adapters.openai.context import CLIENT_TOOL_NAMES, PROVIDER, hosted_name_of
from convstore.adapters.openai.inputs import function_name
from convstore.adapters.wire.consent import ConsentedTools, PendingTool, consented_tools
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

ENCRYPTED_REASONING: Final = "reasoning.encrypted_content"


_DROPPED_SETTINGS: Final = frozenset({"input", "stream", "previous_response_id", "conversation"})


def _declared_tool(raw: Any) -> DeclaredTool | None:
    """The DeclaredTool of a native declaration (`msgspec.Raw` or builtins)."""
    decoded = ANY_JSON.decode(raw) if isinstance(raw, msgspec.Raw) else raw
    if not isinstance(decoded, dict):
        return None
    kind = decoded.get("type")
    kind = kind if isinstance(kind, str) else ""
    name = decoded.get("name")
    name = name if isinstance(name, str) else ""
    if kind in ("function", "custom"):
        return DeclaredTool(name, kind, raw, False)
    hosted = hosted_name_of(kind)
    if hosted == "mcp":
        label = decoded.get("server_label")
        return DeclaredTool(f"mcp:{label if isinstance(label, str) else ''}", kind, raw, True)
    if hosted is not None:
        return DeclaredTool(hosted, kind, raw, True)
    return DeclaredTool(CLIENT_TOOL_NAMES.get(kind) or name or kind, kind, raw, False)


def _choice_entry(tool: DeclaredTool) -> dict[str, Any]:
    """How an `allowed_tools` choice names a declared client tool."""
    if tool.type in ("function", "custom"):
        return {"type": tool.type, "name": tool.name}
    return {"type": tool.type}


def _names_declared(entry: Any, tools: Sequence[DeclaredTool]) -> DeclaredTool | None:
    """The declared tool a tool_choice (or an `allowed_tools` entry) names, if any."""
    if not isinstance(entry, dict):
        return None
    kind = entry.get("type")
    if not isinstance(kind, str):
        return None
    if kind in ("function", "custom"):
        name = entry.get("name")
        return next((t for t in tools if t.type == kind and t.name == name), None)
    hosted = hosted_name_of(kind)
    if hosted == "mcp":
        label = entry.get("server_label")
        return next((t for t in tools if t.hosted and t.name == f"mcp:{label}"), None)
    if hosted is not None:
        return next((t for t in tools if t.hosted and t.name == hosted), None)
    return next((t for t in tools if t.type == kind), None)


def _describe(choice: Any) -> str:
    if isinstance(choice, dict):
        kind = choice.get("type")
        name = choice.get("name") or choice.get("server_label")
        return f"{kind} {name!r}" if name else repr(kind)
    return repr(choice)


def _narrowed(
    clients: Sequence[DeclaredTool], hosted: Sequence[DeclaredTool], what: str
) -> tuple[Any, str]:
    hosted_names = ", ".join(t.name for t in hosted)
    if not clients:
        return None, f"tool_choice {what} with only hosted tools ({hosted_names}); left out"
    return (
        {"type": "allowed_tools", "mode": "required", "tools": [_choice_entry(t) for t in clients]},
        f"tool_choice {what} narrowed to the client tools "
        f"({', '.join(t.name for t in clients)}) so that hosted tools ({hosted_names}) cannot "
        "satisfy it",
    )


def scope_tool_choice(choice: Any, tools: Sequence[DeclaredTool]) -> tuple[Any, str | None]:
    """`choice` never broadened to hosted tools: (the choice to send or None, why it changed)."""
    hosted = [t for t in tools if t.hosted]
    clients = [t for t in tools if not t.hosted]
    if not tools:
        if choice in ("auto", "none"):
            return None, None
        return None, f"tool_choice {_describe(choice)} without any tool declared; left out"
    if isinstance(choice, str):
        if choice == "required" and hosted:
            return _narrowed(clients, hosted, "required")
        if choice in ("auto", "none", "required"):
            return choice, None
        return None, f"tool_choice {choice!r} is not understood; left out"
    if not isinstance(choice, dict):
        return None, f"tool_choice {choice!r} is neither a string nor an object; left out"
    kind = choice.get("type")
    if kind == "allowed_tools":
        listed = choice.get("tools")
        listed = listed if isinstance(listed, list) else []
        found = [(entry, _names_declared(entry, tools)) for entry in listed]
        kept = [entry for entry, tool in found if tool is not None]
        why = []
        if len(kept) < len(listed):
            why.append(f"{len(listed) - len(kept)} tool(s) it allows are not declared")
        if choice.get("mode") == "required":
            hosted_kept = [e for e, t in found if t is not None and t.hosted]
            if hosted_kept:
                kept = [e for e, t in found if t is not None and not t.hosted]
                why.append("its hosted tools could satisfy mode required")
        if not kept:
            return None, f"tool_choice allowed_tools left out: {'; '.join(why) or 'no tools'}"
        if not why:
            return choice, None
        return {**choice, "tools": kept}, f"tool_choice allowed_tools narrowed: {'; '.join(why)}"
    if _names_declared(choice, tools) is not None:
        return choice, None
    return None, f"tool_choice names {_describe(choice)}, which is not declared; left out"


def _pending_tools(pending: list[HostedActivity]) -> dict[str, PendingTool]:
    """Tool name → what pending activities need declared: their tool (`mcp:<label>` for an
    MCP activity), declared as recorded, else by its native type when this adapter knows
    one."""
    out: dict[str, PendingTool] = {}
    for activity in pending:
        name = activity.name.split("/", 1)[0] if activity.name.startswith("mcp:") else activity.name
        payload = activity.payload
        native_type = (payload.version if payload is not None else "") or NATIVE_TOOL_TYPES.get(
            name, ""
        )
        declaration = None
        if native_type and not name.startswith("mcp:"):
            declaration = DeclaredTool(name, native_type, {"type": native_type}, True)
        out.setdefault(name, PendingTool(activity, declaration))
    return out


def _config_key(tool_name: str) -> str:
    return f"providers.openai.hosted_tools.{config_name(tool_name)}"


@dataclass(slots=True)
class ResolvedSettings(RecordedSettings):
    """The recorded settings, and the OpenAI body the configuration makes of them."""

    store: bool
    max_output_tokens: Any
    """An int, the recorded `msgspec.Raw`, or None (not sent)."""

    @classmethod
    def resolve(
        cls, scan: ResponseScan, config: OpenAIConfig, model: str | None, losses: list[Loss]
    ) -> ResolvedSettings:
        source = scan.newest_native or scan.newest_with_settings or scan.newest
        portable = source.settings if source is not None else NO_SETTINGS
        native = recorded_native(source, PROVIDER, losses)
        recorded = _decoded(native, "model")
        recorded_model = recorded if isinstance(recorded, str) else ""
        if not recorded_model and source is not None and source.provider == PROVIDER:
            recorded_model = source.model
        chosen = target_model("openai", "gpt-5.1", model, config.model, recorded_model)
        store = config.store if config.store is not None else _recorded_store(scan, native)
        limit: Any = config.max_output_tokens
        if limit is None and native is not None and "max_output_tokens" in native:
            limit = native["max_output_tokens"]
        if limit is None and native is None:
            limit = portable.max_tokens
        return cls(
            chosen,
            native=native,
            portable=portable,
            source=source,
            store=store,
            max_output_tokens=limit,
        )

    def reasoning_effort(self) -> str | None:
        reasoning = _decoded(self.native, "reasoning")
        effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
        return effort if isinstance(effort, str) else None

    def recorded_tools(self, losses: list[Loss]) -> list[DeclaredTool]:
        if self.native is not None:
            items = recorded_list(self.native, "tools")
            return [tool for item in items if (tool := _declared_tool(item)) is not None]
        tools = []
        for declaration in client_tools(self.source, "OpenAI", losses):
            name = function_name(declaration.name)
            value: dict[str, Any] = {"type": "function", "name": name}
            if declaration.description:
                value["description"] = declaration.description
            value["parameters"] = declaration.input_schema or {"type": "object", "properties": {}}
            value["strict"] = False
            tools.append(DeclaredTool(name, "function", value, False))
        return tools

    def tools(
        self, config: OpenAIConfig, pending: list[HostedActivity], losses: list[Loss]
    ) -> ConsentedTools:
        """The tools to declare: the recorded client tools, the hosted tools `config`
        enables, and those pending activities need (`wire.consent`)."""
        return consented_tools(
            self.recorded_tools(losses),
            configured={
                name: DeclaredTool(name, declaration["type"], declaration, True)
                for name, declaration in hosted_tool_declarations(config).items()
            },
            enables=lambda name: config.hosted_tools.enables(config_name(name)),
            pending=_pending_tools(pending),
            key=_config_key,
            source=self.source,
            losses=losses,
        )

    def body(
        self, tools: list[DeclaredTool], losses: list[Loss], *, reasoning_replayed: bool
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model}
        if self.native is not None:
            body.update((k, v) for k, v in self.native.items() if k not in _DROPPED_SETTINGS)
            body["model"] = self.model
        elif self.portable.system:
            body["instructions"] = self.portable.system
        set_field(body, "max_output_tokens", self.max_output_tokens)
        set_field(body, "tools", [t.value for t in tools] if tools else None)
        set_field(body, "tool_choice", self.tool_choice(tools, losses))
        body["store"] = self.store
        if model_family(self.model) in NON_REASONING_FAMILIES:
            self.drop_reasoning(body, losses)
        elif not self.store and reasoning_replayed:
            include = _decoded(self.native, "include")
            include = include if isinstance(include, list) else []
            if ENCRYPTED_REASONING not in include:
                body["include"] = [*include, ENCRYPTED_REASONING]
        return body

    def drop_reasoning(self, body: dict[str, Any], losses: list[Loss]) -> None:
        """Leave the reasoning settings out of a request to a model that does not reason."""
        dropped = []
        if body.pop("reasoning", None) is not None:
            dropped.append("reasoning")
        include = _decoded(self.native, "include")
        if isinstance(include, list) and ENCRYPTED_REASONING in include:
            rest = [name for name in include if name != ENCRYPTED_REASONING]
            if rest:
                body["include"] = rest
            else:
                body.pop("include", None)
            dropped.append(f"include {ENCRYPTED_REASONING}")
        if dropped and self.source is not None:
            reason = f"{' and '.join(dropped)} left out: model {self.model!r} does not reason"
            losses.append(settings_loss(self.source, reason))

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
            if name in ("auto", "none"):
                choice = name
            elif name == "any":
                choice = "required"
            else:
                choice = {"type": "function", "name": function_name(name)}
        return kept_choice(choice, raw, scope_tool_choice(choice, tools), self.source, losses)


class _Stored(msgspec.Struct):
    store: bool | None = None


_STORED: Final = msgspec.json.Decoder(_Stored)


def _recorded_store(scan: ResponseScan, native: Mapping[str, msgspec.Raw] | None) -> bool:
    """Whether the recorded conversation was stored on OpenAI's side: the recorded
    request's `store`; else what its response reported (its `response_fields`); else, for
    a recorded OpenAI request that left it out, the API's default (true); else false."""
    recorded = _decoded(native, "store")
    if isinstance(recorded, bool):
        return recorded
    if native is None:
        return False
    source = scan.newest_native
    response = scan.responses.get(source.response_id) if source is not None else None
    for _, payload in response.bound if response is not None else ():
        if payload.format == "response_fields":
            try:
                reported = _STORED.decode(payload.raw).store
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if reported is not None:
                return reported
    return True


def _decoded(native: Mapping[str, msgspec.Raw] | None, key: str) -> Any:
    if native is None or key not in native:
        return None
    try:
        return ANY_JSON.decode(native[key])
    except msgspec.DecodeError:
        return None
