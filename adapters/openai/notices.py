"""OpenAI payloads → what the portable reading shows of them (`interpret`).

- `response_fields` (the response object's fields the events do not model, kept once per
  response): `incomplete_details.reason` → an `incomplete` notice; the `error` of a failed
  response → an `error` notice (its `code`, `message`, and `type` / `param` / the
  misalignment classification as details); `moderation` → one `screening` notice per side
  (`input`, `output`) saying whether it was flagged and under which categories, or the
  moderation error. Fields kept by earlier versions are read the same way (a store is
  never rewritten); a copy without these fields is read as having no notices.
- a `web_search_call` item → its `action.sources` (URLs the search consulted, cited or
  not) as web sources.
- a `code_interpreter_call` item → its `logs` outputs, as what the run wrote (images are
  files, not text: left out).
- a `compaction` item (the `/v1/responses/compact` endpoint's, or one sent back as input)
  → a `context_management` notice; the item itself stays an opaque replayed value.
- a `stream_event` of a type the stream decoder now applies to its item (`STREAM_TYPED`),
  which earlier versions kept as unknown → an empty reading: it carries nothing beyond
  the item it built.

Anything else is None: it stays an unknown artifact. Provider values are read, never
rendered or logged here; nothing raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from convstore.adapters.openai.context import PROVIDER
from convstore.adapters.openai.item_fields import as_list, str_field
from convstore.domain.vocabulary import (
    CodeOutput,
    Notice,
    PayloadReading,
    ProviderPayload,
    Source,
)

__all__ = ["STREAM_TYPED", "interpret"]

_ANY: Final = msgspec.json.Decoder()
_NOTHING: Final = PayloadReading()

STREAM_TYPED: Final = frozenset(
    {
        "response.shell_call_command.added",
        "response.shell_call_command.delta",
        "response.shell_call_command.done",
        "response.shell_call_output_content.delta",
        "response.shell_call_output_content.done",
        "response.apply_patch_call_operation_diff.delta",
        "response.apply_patch_call_operation_diff.done",
        "response.compaction.compacting",
    }
)
"""Stream event types earlier versions kept as unknown and the decoder now applies."""


def interpret(payload: ProviderPayload) -> PayloadReading | None:
    """The notices, sources or code outputs of one OpenAI payload; None for a kind not
    typed here."""
    if payload.provider != PROVIDER:
        return None
    try:
        value = _ANY.decode(payload.raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    if payload.format == "response_fields":
        return PayloadReading(notices=response_notices(value))
    if payload.format == "stream_event":
        return _NOTHING if value.get("type") in STREAM_TYPED else None
    kind = value.get("type")
    if kind == "web_search_call":
        return PayloadReading(sources=search_sources(value))
    if kind == "code_interpreter_call":
        logs = code_logs(value)
        return PayloadReading(outputs=logs) if logs else None
    if kind == "compaction":
        return PayloadReading(notices=(Notice(kind="context_management", code="compaction"),))
    return None


def response_notices(fields: Mapping[str, Any]) -> tuple[Notice, ...]:
    """The notices of a response's fields: why it is incomplete, its error, moderation."""
    out: list[Notice] = []
    details = fields.get("incomplete_details")
    if isinstance(details, dict):
        out.append(Notice(kind="incomplete", code=str_field(details, "reason") or ""))
    error = fields.get("error")
    if isinstance(error, dict):
        out.append(_error_notice(error))
    moderation = fields.get("moderation")
    if isinstance(moderation, dict):
        for side in ("input", "output"):
            result = moderation.get(side)
            if isinstance(result, dict):
                out.append(_screening(side, result))
    return tuple(out)


def _error_notice(error: Mapping[str, Any]) -> Notice:
    details = {
        name: value for name in ("type", "param") if (value := str_field(error, name)) is not None
    }
    misalignment = error.get("misalignment")
    if isinstance(misalignment, dict):
        for name in ("error_type", "detailed_explanation"):
            value = str_field(misalignment, name)
            if value is not None:
                details[f"misalignment.{name}"] = value
        steer = misalignment.get("steer")
        if isinstance(steer, dict) and (message := str_field(steer, "message")) is not None:
            details["misalignment.steer"] = message
    return Notice(
        kind="error",
        code=str_field(error, "code") or str_field(error, "type") or "",
        message=str_field(error, "message") or "",
        details=details,
    )


def _screening(side: str, result: Mapping[str, Any]) -> Notice:
    code = f"moderation.{side}"
    if result.get("type") == "error":
        details = {"error": str_field(result, "code") or ""}
        return Notice(
            kind="screening", code=code, message=str_field(result, "message") or "", details=details
        )
    categories = result.get("categories")
    flagged = sorted(
        name
        for name, on in (categories.items() if isinstance(categories, dict) else ())
        if on is True
    )
    details = {"flagged": "true" if result.get("flagged") is True else "false"}
    if flagged:
        details["categories"] = ", ".join(flagged)
    model = str_field(result, "model")
    if model is not None:
        details["model"] = model
    return Notice(kind="screening", code=code, details=details)


def search_sources(item: Mapping[str, Any]) -> tuple[Source, ...]:
    """A web search call's `action.sources`, each URL once, in order."""
    action = item.get("action")
    if not isinstance(action, dict):
        return ()
    seen: set[str] = set()
    out: list[Source] = []
    for source in as_list(action.get("sources")):
        url = str_field(source, "url") if isinstance(source, dict) else None
        if url and url not in seen:
            seen.add(url)
            out.append(Source(kind="web", url=url, title=str_field(source, "title")))
    return tuple(out)


def code_logs(item: Mapping[str, Any]) -> tuple[CodeOutput, ...]:
    """A code interpreter call's `logs` outputs, in order."""
    return tuple(
        CodeOutput(channel="logs", text=logs)
        for output in as_list(item.get("outputs"))
        if isinstance(output, dict)
        and output.get("type") == "logs"
        and isinstance(logs := output.get("logs"), str)
        and logs
    )
