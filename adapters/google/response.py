"""What streamed and non-streamed responses share: ids, finish reasons, usage, errors.

A `generateContent` body and each `streamGenerateContent` chunk have the same shape
(`GenerateContentResponse`): `candidates`, `usageMetadata`, `modelVersion`, `responseId`,
`promptFeedback`. The decoder reads candidate 0; these helpers hold the response-level
state across chunks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import Any, Final

import msgspec

from convstore.adapters.google.context import PROVIDER, RequestContext
from convstore.adapters.wire.counts import (
    MAX_COUNT,
    Counters,
    count_of,
    encoded_unread,
    fields_of,
    read_counters,
)
from convstore.domain.events import Event, ResponseEnded, ResponseStarted
from convstore.domain.vocabulary import (
    EndState,
    ErrorInfo,
    FinishReason,
    ResponseId,
    Usage,
)

__all__ = [
    "FINISH_REASONS",
    "RESPONSE_FIELDS",
    "USAGE_TOKENS",
    "decode_field",
    "derived_id",
    "error_info",
    "failed_response",
    "finish_reason_of",
    "usage_of",
]

FINISH_REASONS: Final[Mapping[str, FinishReason]] = {
    "FINISH_REASON_UNSPECIFIED": "other",
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "CONTINUATION": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "LANGUAGE": "other",
    "OTHER": "other",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "MODEL_ARMOR": "content_filter",
    "ESCALATION": "content_filter",
    "PUP_LIMITED_DISABLED": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "IMAGE_PROHIBITED_CONTENT": "content_filter",
    "IMAGE_RECITATION": "content_filter",
    "IMAGE_OTHER": "other",
    "NO_IMAGE": "other",
    "MALFORMED_FUNCTION_CALL": "error",
    "UNEXPECTED_TOOL_CALL": "error",
    "MALFORMED_RESPONSE": "error",
    "MISSING_THOUGHT_SIGNATURE": "error",
    "TOO_MANY_TOOL_CALLS": "other",
}
"""Every documented Gemini `finishReason` (google-genai's `FinishReason`) → the normalized
finish reason; an undocumented one is `other`. `CONTINUATION` (the per-request token
limit, to be continued) is `length`; a filter's or a screening's block (`MODEL_ARMOR`,
`ESCALATION`, an account limited for policy violations) `content_filter`; a call the model
got wrong (`MALFORMED_FUNCTION_CALL`, `UNEXPECTED_TOOL_CALL`: not declared or not
enabled) or a malformed request or response `error`; the server-side tool loop stopped
(`TOO_MANY_TOOL_CALLS`) `other`, as Gemini has no continuation for it. A response that
emitted function calls and stopped normally finishes `tool_use`."""

USAGE_TOKENS: Final[Mapping[str, str]] = {
    "promptTokenCount": "input_tokens",
    "candidatesTokenCount": "output_tokens",
    "cachedContentTokenCount": "cache_read_tokens",
    "thoughtsTokenCount": "reasoning_tokens",
}
"""`usageMetadata` counter → `Usage` field. `toolUsePromptTokenCount` (the prompt tokens of
hosted tool work: search results, fetched pages, code output) goes to `hosted`; every other
counter, `totalTokenCount` included, to `other` under its own name (per-modality details
as `promptTokensDetails.TEXT` and so on)."""

HOSTED_USAGE: Final = frozenset({"toolUsePromptTokenCount"})

RESPONSE_FIELDS: Final = frozenset({"candidates", "usageMetadata", "modelVersion", "responseId"})
"""Response fields the events model; any other non-null one (`promptFeedback`,
`modelStatus`, `createTime`, …) is kept in an UnknownArtifact of format `response_fields`."""

RESPONSE_KEYS: Final = RESPONSE_FIELDS | {"promptFeedback"}
"""A JSON object with one of these is a `GenerateContentResponse`."""

_ANY: Final = msgspec.json.Decoder()


def decode_field(raw: msgspec.Raw | bytes | None) -> Any:
    """A field kept raw, decoded; None when absent or undecodable (bad UTF-8, a number
    out of range)."""
    if raw is None:
        return None
    try:
        return _ANY.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None


def derived_id(body: bytes, prefix: str = "gemini") -> ResponseId:
    """A deterministic response id for a body that names none: re-ingesting matches."""
    return ResponseId(f"{prefix}_{hashlib.sha256(body).hexdigest()[:24]}")


def error_info(error: Any, status: int | None = None) -> ErrorInfo:
    """The ErrorInfo of a Google API `error` object (`{code, message, status}`)."""
    if not isinstance(error, dict):
        return ErrorInfo(type=f"http_{status}" if status else "error", status=status)
    kind, message, code = error.get("status"), error.get("message"), error.get("code")
    if not isinstance(kind, str) or not kind:
        kind = f"http_{code}" if type(code) is int else "error"
    return ErrorInfo(
        type=kind,
        message=message if isinstance(message, str) else "",
        status=status if status is not None else code if type(code) is int else None,
    )


def failed_response(
    response_id: ResponseId, context: RequestContext, info: ErrorInfo
) -> list[Event]:
    """A response that failed before any content: an HTTP error body or an early error."""
    return [
        ResponseStarted(
            response_id=response_id,
            provider=PROVIDER,
            model=context.model,
            settings=context.settings,
        ),
        ResponseEnded(response_id=response_id, state="failed", finish_reason="error", error=info),
    ]


def _usage(tokens: dict[str, int], hosted: dict[str, int], other: dict[str, int]) -> Usage:
    """`Usage` of these counters (keywords spelled out: much faster than `**tokens`)."""
    get = tokens.get
    return Usage(
        input_tokens=get("input_tokens"),
        output_tokens=get("output_tokens"),
        cache_read_tokens=get("cache_read_tokens"),
        cache_write_tokens=get("cache_write_tokens"),
        reasoning_tokens=get("reasoning_tokens"),
        hosted=hosted,
        other=other,
    )


_DETAILS: Final = msgspec.json.Decoder(list[msgspec.Raw])


def usage_of(raw: msgspec.Raw | None) -> tuple[Usage, bytes | None]:
    """`usageMetadata` (raw) as `Usage`, and the value of an `UNREAD_USAGE` artifact for
    what in it is not a count (None when everything is)."""
    plain = _plain_usage(raw)
    if plain is not None:
        return plain, None
    fields = fields_of(raw)
    if fields is None:
        whole = raw if raw and bytes(raw) != b"null" else None
        return _usage({}, {}, {}), encoded_unread({"usageMetadata": Counters(whole=whole)})
    named = USAGE_TOKENS.keys() | HOSTED_USAGE
    read = Counters()
    other: dict[str, int] = {}
    for name, value in fields.items():  # one at a time: `other` keeps the wire's order
        if bytes(value)[:1] == b"[" and name not in named:  # [{"modality": "TEXT", …}, …]
            unread = list(_details(value, name, other))
            if unread:
                read.unread[name] = unread
            continue
        one = read_counters({name: value}, named)
        read.unread.update(one.unread)
        for key, found in one.counts.items():
            if key not in USAGE_TOKENS and key not in HOSTED_USAGE:
                other[key] = found
            read.counts[key] = found
    counts = read.counts
    tokens = {USAGE_TOKENS[k]: v for k, v in counts.items() if k in USAGE_TOKENS}
    hosted = {k: v for k, v in counts.items() if k in HOSTED_USAGE}
    return _usage(tokens, hosted, other), encoded_unread({"usageMetadata": read})


def _plain_usage(raw: msgspec.Raw | None) -> Usage | None:
    """`usage_of(raw)`'s `Usage` in one decode, when everything in `raw` is read (counts,
    per-modality lists of counts, strings beside them); None otherwise, for `usage_of`
    to read field by field."""
    if not raw:
        return None
    try:
        fields = _ANY.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    if type(fields) is not dict:
        return None
    tokens: dict[str, int] = {}
    hosted: dict[str, int] = {}
    other: dict[str, int] = {}
    for name, value in fields.items():
        kind = type(value)
        if kind is int:
            if not 0 <= value <= MAX_COUNT:
                return None
            if name in USAGE_TOKENS:
                tokens[USAGE_TOKENS[name]] = value
            elif name in HOSTED_USAGE:
                hosted[name] = value
            else:
                other[name] = value
        elif kind is list and name not in USAGE_TOKENS and name not in HOSTED_USAGE:
            for detail in value:
                if type(detail) is not dict or "tokenCount" not in detail:
                    continue
                modality, found = detail.get("modality"), detail["tokenCount"]
                if type(modality) is not str or found is None:
                    continue
                if type(found) is not int or not 0 <= found <= MAX_COUNT:
                    return None  # kept unread, as it came
                other[f"{name}.{modality}"] = found
        elif kind in (dict, float) or (
            value is not None and (name in USAGE_TOKENS or name in HOSTED_USAGE)
        ):
            return None  # an object (read field by field), or a value kept unread
    return _usage(tokens, hosted, other)


def _details(raw: msgspec.Raw, name: str, other: dict[str, int]) -> Iterator[msgspec.Raw]:
    """Put a per-modality list's counts in `other`; yields each detail whose `tokenCount`
    is there but not a count (raw). A detail without a modality is not a counter."""
    try:
        details = _DETAILS.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return
    for detail in details:
        fields = fields_of(detail)
        modality = decode_field(fields.get("modality")) if fields is not None else None
        if fields is None or not isinstance(modality, str) or "tokenCount" not in fields:
            continue
        count = fields["tokenCount"]
        found = count_of(count)
        if found is not None:
            other[f"{name}.{modality}"] = found
        elif bytes(count) != b"null":
            yield detail


def finish_reason_of(
    state: EndState, stop_reason: str | None, *, called: bool, blocked: bool
) -> FinishReason:
    """The normalized finish reason of a response that ended in `state`."""
    if state == "failed":
        return "error"
    if blocked:
        return "content_filter"
    if stop_reason is None:
        return "tool_use" if called and state == "completed" else "other"
    finish = FINISH_REASONS.get(stop_reason, "other")
    return "tool_use" if called and finish == "stop" else finish
