"""The request's settings and tools, from the newest recorded request and the configuration.

Part of the Gemini encoder (see `encode` for the rules): the recorded settings and
`generationConfig`, the hosted tools the configuration enables (`wire.consent`; Gemini's
hosted work never stays pending across responses), and a `toolConfig` never broadened to
hosted tools.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from convstore.adapters.google.binding import function_name
from convstore.adapters.google.config import (
    NATIVE_TOOLS,
    GoogleConfig,
    config_name,
    model_resource,
    tool_name_of,
    validate_hosted_tools,
    validate_thinking,
)
from convstore.adapters.google.contents import ContentScan
from convstore.adapters.google.context import HOSTED_TOOLS, PROVIDER, camel
from convstore.adapters.wire.encoding import (
    ANY_JSON,
    NO_SETTINGS,
    RAW_FIELDS,
    RecordedSettings,
    client_tools,
    kept_choice,
    recorded_list,
    recorded_native,
    set_field,
    settings_loss,
    target_model,
)
from convstore.adapters.wire.providers import Loss
from convstore.domain.errors import ConfigurationError


@dataclass(slots=True)
class _Tool:
    """One `tools[]` entry: its fields (camelCase) as raw JSON or builtins."""

    fields: dict[str, Any]

    def wire(self) -> dict[str, Any]:
        return self.fields


@dataclass(slots=True)
class ResolvedSettings(RecordedSettings):
    """The recorded settings, and the Gemini body the configuration makes of them."""

    @classmethod
    def resolve(
        cls, scan: ContentScan, config: GoogleConfig, model: str | None, losses: list[Loss]
    ) -> ResolvedSettings:
        source = scan.newest_with_settings or scan.newest
        portable = source.settings if source is not None else NO_SETTINGS
        native: dict[str, msgspec.Raw] | None = None
        recorded_fields = recorded_native(source, PROVIDER, losses)
        if recorded_fields is not None:
            native = {}
            for key, value in recorded_fields.items():
                native.setdefault(camel(key), value)
        recorded = scan.newest_google.model if scan.newest_google is not None else ""
        named = (model or config.model or recorded or "").strip()
        chosen = target_model("google", "gemini-2.5-flash", named)
        chosen = model_resource(chosen).removeprefix("models/")
        return cls(chosen, native, portable, source)

    # --- the body ---

    def body(self, config: GoogleConfig, losses: list[Loss]) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.native is not None:
            body.update((k, v) for k, v in self.native.items() if k not in ("contents", "model"))
        elif self.portable.system:
            body["systemInstruction"] = {"parts": [{"text": self.portable.system}]}
        tools = self.tools(config, losses)
        functions = _function_names(tools)
        hosted = [key for tool in tools for key in tool.fields if key in HOSTED_TOOLS]
        validate_hosted_tools(config, self.model, hosted)
        set_field(body, "tools", [t.wire() for t in tools] if tools else None)
        set_field(body, "toolConfig", self.tool_config(functions, hosted, losses))
        set_field(body, "generationConfig", self.generation_config(config, losses))
        return body

    def recorded_tools(self, losses: list[Loss]) -> list[_Tool]:
        if self.native is not None:
            tools = []
            for entry in recorded_list(self.native, "tools"):
                try:
                    fields = RAW_FIELDS.decode(entry)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
                tools.append(_Tool({camel(k): v for k, v in fields.items()}))
            return tools
        declarations = []
        for declaration in client_tools(self.source, "Gemini", losses):
            function: dict[str, Any] = {"name": function_name(declaration.name)}
            if declaration.description:
                function["description"] = declaration.description
            if declaration.input_schema is not None:
                function["parametersJsonSchema"] = declaration.input_schema
            declarations.append(function)
        return [_Tool({"functionDeclarations": declarations})] if declarations else []

    def tools(self, config: GoogleConfig, losses: list[Loss]) -> list[_Tool]:
        """The recorded entries without the hosted tools `config` does not enable (each a
        `tool_declaration` loss: a recorded request is no consent), then an entry for
        each tool it enables that none declares."""
        tools = []
        for tool in self.recorded_tools(losses):
            for key in [k for k in tool.fields if k in HOSTED_TOOLS]:
                name = config_name(key)
                if not config.hosted_tools.enables(name):
                    del tool.fields[key]
                    reason = (
                        f"hosted tool {name} is not declared: the configuration does not "
                        "enable it (a recorded request is no consent; set "
                        f"providers.google.hosted_tools.{name}.enable = true)"
                    )
                    losses.append(settings_loss(self.source, reason, kind="tool_declaration"))
            if tool.fields:
                tools.append(tool)
        for name, key in NATIVE_TOOLS.items():
            if config.hosted_tools.enables(name) and not any(key in t.fields for t in tools):
                tools.append(_Tool({key: {}}))
        return tools

    def tool_config(self, functions: list[str], hosted: list[str], losses: list[Loss]) -> Any:
        raw: msgspec.Raw | None = None
        choice: Any
        if self.native is not None:
            raw = self.native.get("toolConfig")
            if raw is None:
                return None
            choice = ANY_JSON.decode(raw)
        else:
            choice = self._portable_tool_config(functions, losses)
            if choice is None:
                return None
        scoped = scope_tool_config(choice, functions, hosted)
        return kept_choice(choice, raw, scoped, self.source, losses)

    def _portable_tool_config(self, functions: list[str], losses: list[Loss]) -> Any:
        name = self.portable.tool_choice
        if name is None:
            return None
        modes = {"auto": "AUTO", "any": "ANY", "none": "NONE"}
        if name in modes:
            if not functions and name != "any":
                return None
            return {"functionCallingConfig": {"mode": modes[name]}}
        mapped = function_name(name)
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [mapped]}}

    def generation_config(self, config: GoogleConfig, losses: list[Loss]) -> Any:
        recorded: dict[str, Any] | None = None
        raw: msgspec.Raw | None = None
        if self.native is not None:
            raw = self.native.get("generationConfig")
            if raw is not None:
                decoded = ANY_JSON.decode(raw)
                recorded = (
                    {camel(k): v for k, v in decoded.items()} if isinstance(decoded, dict) else {}
                )
        elif self.portable.max_tokens:
            recorded = {"maxOutputTokens": self.portable.max_tokens}
        generation = dict(recorded or {})
        changed = raw is None
        if config.max_output_tokens is not None:
            generation["maxOutputTokens"] = config.max_output_tokens
            changed = True
        thinking = config.thinking.wire() if config.thinking is not None else {}
        if thinking:
            validate_thinking(thinking, self.model)
            generation["thinkingConfig"] = thinking
            changed = True
        elif "thinkingConfig" in generation:
            try:
                validate_thinking(generation["thinkingConfig"], self.model)
            except ConfigurationError:
                del generation["thinkingConfig"]
                changed = True
                reason = f"recorded thinkingConfig left out: model {self.model!r} cannot take it"
                losses.append(settings_loss(self.source, reason))
        if not generation:
            return None
        if not changed:
            return raw
        return generation


def _function_names(tools: Sequence[_Tool]) -> list[str]:
    names: list[str] = []
    for tool in tools:
        raw = tool.fields.get("functionDeclarations")
        if raw is None:
            continue
        declarations = ANY_JSON.decode(raw) if isinstance(raw, msgspec.Raw) else raw
        for declaration in declarations if isinstance(declarations, list) else ():
            if isinstance(declaration, dict) and isinstance(declaration.get("name"), str):
                names.append(declaration["name"])
    return names


_HOSTED_NAMES: Final = (
    frozenset(HOSTED_TOOLS)
    | frozenset(HOSTED_TOOLS.values())
    | frozenset(tool_name_of(k) for k in HOSTED_TOOLS)
)


def scope_tool_config(
    choice: Any, functions: Sequence[str], hosted: Sequence[str]
) -> tuple[Any, str | None]:
    """`toolConfig` kept to declared functions: (the config to send or None, why it
    changed)."""
    if not isinstance(choice, dict):
        return None, f"toolConfig {choice!r} is not an object; left out"
    key = next(
        (k for k in ("functionCallingConfig", "function_calling_config") if k in choice), None
    )
    calling = choice.get(key) if key is not None else None
    if not isinstance(calling, dict):
        return choice, None
    mode = calling.get("mode")
    names_key = next(
        (k for k in ("allowedFunctionNames", "allowed_function_names") if k in calling), None
    )
    allowed = calling.get(names_key) if names_key is not None else None
    rest = {k: v for k, v in choice.items() if k != key}
    why: str | None = None
    scoped = dict(calling)
    if isinstance(allowed, list):
        kept = [n for n in allowed if n in functions]
        dropped = [str(n) for n in allowed if n not in functions]
        if dropped:
            hosted_named = [n for n in dropped if n in _HOSTED_NAMES or n in hosted]
            what = (
                f"hosted tool(s) {', '.join(hosted_named)}, which cannot be forced"
                if hosted_named
                else f"{', '.join(dropped)}, not declared"
            )
            if kept:
                assert names_key is not None
                scoped[names_key] = kept
                why = f"toolConfig allowedFunctionNames: {what}; removed"
            else:
                return (rest or None), f"toolConfig forces only {what}; left out"
    forcing = mode in ("ANY", "VALIDATED") or isinstance(scoped.get(names_key or ""), list)
    if forcing and not functions:
        extra = f" ({', '.join(hosted)} cannot satisfy it)" if hosted else ""
        return (rest or None), f"toolConfig mode {mode} with no function declared{extra}; left out"
    if not functions and not hosted:
        return (rest or None), why
    if scoped == calling:
        return choice, why
    return {**rest, key: scoped}, why
