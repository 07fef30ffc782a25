"""Single parts of a Gemini request: reading a stored part's fields, and building
`functionResponse` parts from tool results.

Part of the Gemini encoder (see `encode` for the rules).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from convstore.adapters.google.context import camel
from convstore.adapters.wire.encoding import (
    ANY_JSON,
    RAW_FIELDS,
)
from convstore.domain.vocabulary import ProviderPayload


def fields_of(payload: ProviderPayload) -> dict[str, Any]:
    return fields_of_raw(payload.raw)


def fields_of_raw(raw: bytes | msgspec.Raw) -> dict[str, Any]:
    """A stored part's fields (empty when it is not a JSON object)."""
    try:
        value = ANY_JSON.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


_RAW_LIST: Final = msgspec.json.Decoder(list[msgspec.Raw])


def stored_parts(payload: ProviderPayload) -> list[msgspec.Raw]:
    """The parts a payload holds, each byte for byte: the part itself (format `part`), or
    each element of its JSON array (format `parts`)."""
    if payload.format != "parts":
        return [payload.value]
    try:
        return _RAW_LIST.decode(payload.raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return []


def part_kind(fields: Mapping[str, Any]) -> str:
    for key in fields:
        name = camel(key)
        if name not in ("thought", "thoughtSignature", "partMetadata", "videoMetadata"):
            return "thought" if name == "text" and fields.get("thought") is True else name
    return "text"


def call_of(fields: Mapping[str, Any]) -> dict[str, Any]:
    call = fields.get("functionCall", fields.get("function_call"))
    return call if isinstance(call, dict) else {}


def response_of(fields: Mapping[str, Any]) -> dict[str, Any]:
    response = fields.get("functionResponse", fields.get("function_response"))
    return response if isinstance(response, dict) else {}


def given_id(value: Mapping[str, Any]) -> str | None:
    given = value.get("id")
    return given if isinstance(given, str) and given else None


def response_part(name: str, response: Any, call_id: str | None) -> dict[str, Any]:
    inner: dict[str, Any] = {"name": name, "response": response}
    if call_id is not None:
        inner["id"] = call_id
    return {"functionResponse": inner}


def stored_response(payload: ProviderPayload) -> msgspec.Raw | None:
    """The `response` object of a stored `functionResponse` part, byte for byte."""
    try:
        fields = RAW_FIELDS.decode(payload.raw)
        inner = fields.get("functionResponse", fields.get("function_response"))
        return RAW_FIELDS.decode(inner).get("response") if inner is not None else None
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def result_object(content: str, *, is_error: bool) -> Any:
    """The `response` object of a function result: a JSON object as it is, plain text
    wrapped as `{"result": text}` (`{"error": text}` for an error)."""
    decoded: Any = None
    if content[:1] == "{":
        try:
            decoded = ANY_JSON.decode(content)
        except (msgspec.DecodeError, RecursionError):
            decoded = None
    if is_error:
        return {"error": decoded if isinstance(decoded, dict) else content}
    return decoded if isinstance(decoded, dict) else {"result": content}
