"""What a response decoder needs to know of the Gemini request it answers.

A `generateContent` body names no model (the URL path does: `…/models/<model>:generate
Content`), so `from_body` takes it as an argument; `model_from_path` reads it from a path.
The JSON API accepts both camelCase and snake_case field names; both are read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from convstore.adapters.wire.captured import native_request, request_fields
from convstore.domain.errors import DecodeError
from convstore.domain.vocabulary import RequestSettings, ToolDeclaration

__all__ = [
    "GROUNDING_TOOLS",
    "HOSTED_TOOLS",
    "PROVIDER",
    "RequestContext",
    "model_from_path",
]

PROVIDER: Final = "google"

HOSTED_TOOLS: Final[Mapping[str, str]] = {
    "googleSearch": "web_search",
    "googleSearchRetrieval": "web_search",
    "enterpriseWebSearch": "web_search",
    "codeExecution": "code_execution",
    "urlContext": "url_context",
    "googleMaps": "google_maps",
    "fileSearch": "file_search",
    "retrieval": "retrieval",
}
"""Tool key of a `tools[]` entry that the API runs itself → the hosted activity name."""

GROUNDING_TOOLS: Final = frozenset(HOSTED_TOOLS) - {"codeExecution"}
"""Hosted tools that answer with `groundingMetadata` / `urlContextMetadata` at the end of
the candidate: while one may be active, text is held until the stream ends."""

CLIENT_TOOLS: Final[Mapping[str, str]] = {"computerUse": "computer_use"}
"""Typed tools whose calls the client runs (they come back as `functionCall` parts)."""

_TOOL_CHOICES: Final[Mapping[str, str]] = {
    "AUTO": "auto",
    "VALIDATED": "auto",
    "ANY": "any",
    "NONE": "none",
}

_MODEL_PATH: Final = re.compile(r"models/([^/:]+)")


def model_from_path(path: str) -> str:
    """The model a request path names (`/v1beta/models/gemini-2.5-pro:generateContent`)."""
    found = _MODEL_PATH.search(path)
    return found.group(1) if found else ""


def camel(name: str) -> str:
    """`function_declarations` → `functionDeclarations` (camelCase is the wire's spelling)."""
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """The request's settings, as ResponseStarted records them, and its hosted tools."""

    settings: RequestSettings = field(default_factory=RequestSettings)
    model: str = ""
    """The model the request named (the response's `modelVersion` names the one that
    answered)."""
    tool_versions: Mapping[str, str] = field(default_factory=dict)
    """Hosted activity name → the declared tool key, e.g. `web_search` → `googleSearch`;
    recorded as the version of the activity's payloads."""
    grounding: bool | None = None
    """Whether a grounding tool was declared; None when the request is unknown. Text is
    held until the end of the stream unless this is False (grounding arrives last)."""

    def version_of(self, activity_name: str) -> str:
        """The declared tool key behind a hosted activity name ('' when not declared)."""
        return self.tool_versions.get(activity_name, "")

    @classmethod
    def from_body(cls, body: bytes | str, *, model: str = "") -> RequestContext:
        """Read a `generateContent` request body; raises DecodeError if it is not a JSON
        object. `model` is the one the URL named (see `model_from_path`)."""
        fields = request_fields(body, "Gemini")
        settings: dict[str, Any] = {}
        try:
            for name, raw in fields.items():
                key = camel(name)
                if key in _SETTINGS:
                    settings[key] = _ANY.decode(raw)
        except (msgspec.DecodeError, RecursionError) as error:
            raise DecodeError(f"the Gemini request body is malformed: {error}") from None
        declarations: list[ToolDeclaration] = []
        grounding = False
        for tool in _list(settings.get("tools")):
            if isinstance(tool, dict):
                for name, value in tool.items():
                    key = camel(name)
                    grounding = grounding or key in GROUNDING_TOOLS
                    declarations.extend(_declarations(key, value))
        named = settings.get("model")
        if not model and isinstance(named, str):
            model = named.removeprefix("models/")
        generation = _dict(settings.get("generationConfig"))
        max_tokens = _get(generation, "maxOutputTokens")
        tools = tuple(declarations)
        return cls(
            settings=RequestSettings(
                system=_system(settings.get("systemInstruction")),
                tools=tools,
                tool_choice=_tool_choice(settings.get("toolConfig")),
                max_tokens=max_tokens if type(max_tokens) is int else None,
                native=native_request(PROVIDER, _naming(fields, model), "contents"),
            ),
            model=model,
            tool_versions={t.name: t.native_type for t in tools if t.hosted},
            grounding=grounding,
        )


def _naming(fields: Mapping[str, msgspec.Raw], model: str) -> Mapping[str, msgspec.Raw]:
    """The request's fields with the model its URL named, which the body does not hold:
    recorded with the response's `modelVersion`, it shows what an alias resolved to."""
    if not model or "model" in fields:
        return fields
    return {**fields, "model": msgspec.Raw(msgspec.json.encode(model))}


_ANY: Final = msgspec.json.Decoder()
_SETTINGS: Final = frozenset(
    {"model", "systemInstruction", "tools", "toolConfig", "generationConfig"}
)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _get(d: Mapping[str, Any], key: str) -> Any:
    """A field under its camelCase or snake_case name."""
    value = d.get(key)
    if value is None:
        snake = re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()
        value = d.get(snake)
    return value


def _system(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    texts = [
        p["text"]
        for p in _list(_dict(value).get("parts"))
        if isinstance(p, dict) and isinstance(p.get("text"), str)
    ]
    return "\n".join(texts) if texts else None


def _tool_choice(value: Any) -> str | None:
    """`functionCallingConfig.mode`: AUTO/VALIDATED → auto, ANY → any (or the one allowed
    function's name), NONE → none."""
    config = _dict(_get(_dict(value), "functionCallingConfig"))
    mode = config.get("mode")
    if not isinstance(mode, str):
        return None
    allowed = _list(_get(config, "allowedFunctionNames"))
    if mode == "ANY" and len(allowed) == 1 and isinstance(allowed[0], str):
        return allowed[0]
    return _TOOL_CHOICES.get(mode, mode.lower())


def _declarations(key: str, value: Any) -> list[ToolDeclaration]:
    if key == "functionDeclarations":
        out = []
        for function in _list(value):
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                continue
            description = function.get("description")
            schema = _get(function, "parameters") or _get(function, "parametersJsonSchema")
            out.append(
                ToolDeclaration(
                    name=function["name"],
                    description=description if isinstance(description, str) else "",
                    input_schema=schema if isinstance(schema, dict) else None,
                )
            )
        return out
    hosted = HOSTED_TOOLS.get(key)
    if hosted is not None:
        return [ToolDeclaration(name=hosted, hosted=True, native_type=key)]
    return [ToolDeclaration(name=CLIENT_TOOLS.get(key, key), native_type=key)]
