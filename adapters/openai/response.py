"""What streamed and non-streamed responses share: the response-level state and tables."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import Any, Final

import msgspec

from convstore.adapters.openai.context import PROVIDER, RequestContext
from convstore.adapters.openai.items import ItemMapper
from convstore.adapters.wire.assembler import AssembledBlock
from convstore.adapters.wire.counts import (
    UNREAD_USAGE,
    Counters,
    encoded_unread,
    fields_of,
    plain_counts_of,
    read_counters,
)
from convstore.domain.events import Event, ResponseEnded, ResponseStarted
from convstore.domain.vocabulary import EndState, ErrorInfo, FinishReason, ResponseId, Usage

__all__ = [
    "HOSTED_COUNTERS",
    "INCOMPLETE_REASONS",
    "RESPONSE_FIELDS",
    "USAGE_TOKENS",
    "ResponseHead",
    "decode_field",
    "derived_id",
    "error_info",
    "failed_response",
    "usage_of",
    "whole_items",
]

INCOMPLETE_REASONS: Final[Mapping[str, FinishReason]] = {
    "max_output_tokens": "length",
    "content_filter": "content_filter",
}
"""`incomplete_details.reason` → the normalized finish reason (anything else: `other`).

A `completed` response ends `tool_use` when it requested client tool calls, `refusal`
when a message part was a refusal, else `stop`; a failed one ends `error`."""

USAGE_TOKENS: Final[Mapping[str, str]] = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "input_tokens_details.cached_tokens": "cache_read_tokens",
    "input_tokens_details.cache_write_tokens": "cache_write_tokens",
    "output_tokens_details.reasoning_tokens": "reasoning_tokens",
}
"""OpenAI `usage` counter → `Usage` field; every other numeric counter goes to `other`
(nested names joined with dots, e.g. `total_tokens`)."""

HOSTED_COUNTERS: Final[Mapping[str, str]] = {"web_search.num_requests": "web_search_requests"}
"""`tool_usage` counter → the `Usage.hosted` name shared with other providers; the rest of
`tool_usage` goes to `hosted` under its dotted name (e.g. `image_gen.output_tokens`)."""

RESPONSE_FIELDS: Final = frozenset(
    {
        "id",
        "object",
        "model",
        "output",
        "output_text",
        "status",
        "usage",
        "tool_usage",
    }
)
"""Response fields the events model; any other non-null one (`created_at`, `instructions`,
`tools`, `reasoning`, `store`, …) is kept in an UnknownArtifact of format
`response_fields`, from the newest copy of the response object, so nothing is lost. The
`error` and `incomplete_details` that decide how the response ended are kept there too:
`notices.interpret` reads them (and `moderation`) as the response's notices."""

_UNFINISHED: Final = frozenset({"queued", "in_progress"})
"""Statuses of a background response fetched before it finished."""
_OBJECT: Final = msgspec.json.Decoder(dict[str, Any])
_RAW_LIST: Final = msgspec.json.Decoder(list[msgspec.Raw])
_ANY: Final = msgspec.json.Decoder()
_NULL: Final = b"null"
_NULL_RAW: Final = msgspec.Raw(_NULL)


def decode_field(raw: msgspec.Raw | None) -> Any:
    """A field kept raw, decoded; None when absent or undecodable (a number out of range)."""
    if not raw:
        return None
    try:
        return _ANY.decode(raw)
    except msgspec.DecodeError:
        return None


def _unless_null(raw: msgspec.Raw | None) -> Any:
    """`decode_field(raw)`, without decoding a null."""
    if raw is None or (len(raw) == 4 and raw == _NULL_RAW):
        return None
    return decode_field(raw)


def derived_id(body: bytes) -> ResponseId:
    """A deterministic response id for an error that names none: re-ingesting matches."""
    return ResponseId("error_" + hashlib.sha256(body).hexdigest()[:24])


def error_info(error: Any, status: int | None = None) -> ErrorInfo:
    """The ErrorInfo of an OpenAI error object (`type`, else `code`), whatever its shape."""
    if not isinstance(error, dict):
        return ErrorInfo(
            type="error", message=error if isinstance(error, str) else "", status=status
        )
    kind, code, text = error.get("type"), error.get("code"), error.get("message")
    name = kind if isinstance(kind, str) and kind and kind != "error" else ""
    if not name:
        name = code if isinstance(code, str) and code else "error"
    return ErrorInfo(type=name, message=text if isinstance(text, str) else "", status=status)


def failed_response(
    response_id: ResponseId, context: RequestContext, info: ErrorInfo
) -> list[Event]:
    """A response that failed before any output: an HTTP error body or an early error."""
    return [
        ResponseStarted(
            response_id=response_id,
            provider=PROVIDER,
            model=context.model,
            settings=context.settings,
        ),
        ResponseEnded(response_id=response_id, state="failed", finish_reason="error", error=info),
    ]


def output_items(output: msgspec.Raw | None) -> list[msgspec.Raw]:
    """A response's `output`, each item raw; raises msgspec.ValidationError if not a list."""
    return _RAW_LIST.decode(output) if output and bytes(output) != _NULL else []


def whole_items(mapper: ItemMapper, output: msgspec.Raw | None) -> Iterator[Event]:
    """Map items that came whole, each with its bytes exactly as received.

    Raises msgspec.ValidationError if `output` is not a list.
    """
    for index, raw in enumerate(output_items(output)):
        yield from map_whole(mapper, index, raw)


def map_whole(mapper: ItemMapper, index: int, raw: msgspec.Raw | bytes) -> list[Event]:
    """The drafts of one whole item, given raw."""
    value = bytes(raw)
    try:
        item = _OBJECT.decode(value)
    except msgspec.DecodeError:
        return [mapper.unknown_value(value, "output_item")]
    return mapper(AssembledBlock(index, item, value))


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


def usage_of(usage: Counters, tool_usage: Counters) -> Usage:
    """OpenAI `usage` and `tool_usage` counters (read by `read_counters`) as `Usage`."""
    counts = usage.counts
    tokens = {USAGE_TOKENS[k]: v for k, v in counts.items() if k in USAGE_TOKENS}
    other = {k: v for k, v in counts.items() if k not in USAGE_TOKENS}
    hosted = {HOSTED_COUNTERS.get(k, k): v for k, v in tool_usage.counts.items()}
    return _usage(tokens, hosted, other)


def _counters(raw: msgspec.Raw) -> Counters:
    counts = plain_counts_of((raw,), USAGE_TOKENS)
    if counts is not None:
        return Counters(counts)
    fields = fields_of(raw)
    return read_counters(fields, USAGE_TOKENS) if fields is not None else Counters(whole=raw)


class ResponseHead:
    """The response-level state of one response: id, model, status, usage, other fields."""

    def __init__(
        self, response_id: str, fields: Mapping[str, msgspec.Raw], context: RequestContext
    ) -> None:
        self.response_id = ResponseId(response_id)
        self.context = context
        self.model = ""
        self.status: str | None = None
        self.incomplete_reason: str | None = None
        self.error: Any = None
        self.usage: msgspec.Raw | None = None
        """The newest copy's `usage`, raw (and `tool_usage`'s)."""
        self.tool_usage: msgspec.Raw | None = None
        self.extras: dict[str, msgspec.Raw] = {}
        self.update(fields)
        self.model = self.model or context.model
        self.mapper = ItemMapper(self.response_id, self.model, context)

    def update(self, fields: Mapping[str, msgspec.Raw]) -> None:
        """Take in a newer copy of the response object (a later stream event's)."""
        extras = self.extras
        for name, raw in fields.items():
            if name not in RESPONSE_FIELDS:
                # The length first: comparing every raw value costs twice as much.
                if len(raw) == 4 and raw == _NULL_RAW:
                    extras.pop(name, None)
                else:
                    extras[name] = raw
        if not self.model:
            model = decode_field(fields.get("model"))
            if isinstance(model, str) and model:
                self.model = model
        status = decode_field(fields.get("status"))
        if isinstance(status, str):
            self.status = status
        # Null in most copies: not decoded then (it would decode to None).
        details = _unless_null(fields.get("incomplete_details"))
        if isinstance(details, dict) and isinstance(details.get("reason"), str):
            self.incomplete_reason = details["reason"]
        error = _unless_null(fields.get("error"))
        if error is not None:
            self.error = error
        usage = fields.get("usage")
        if usage and usage != _NULL_RAW:  # counters are read one by one at the end
            self.usage = usage
        tool_usage = fields.get("tool_usage")
        if tool_usage and tool_usage != _NULL_RAW:
            self.tool_usage = tool_usage

    def _usages(self) -> Iterator[tuple[str, msgspec.Raw]]:
        if self.usage is not None:
            yield "usage", self.usage
        if self.tool_usage is not None:
            yield "tool_usage", self.tool_usage

    def started(self) -> ResponseStarted:
        """The response's ResponseStarted draft."""
        return ResponseStarted(
            response_id=self.response_id,
            provider=PROVIDER,
            model=self.model,
            settings=self.context.settings,
        )

    def outcome(self) -> tuple[EndState, str | None, ErrorInfo | None]:
        """(end state, the provider's stop reason, error) from the response's `status`.

        The stop reason is `incomplete_details.reason` for an incomplete response, else
        the status itself (OpenAI names no other).
        """
        status = self.status
        if status in (None, "completed"):
            return "completed", status, None
        if status == "incomplete":
            return "completed", self.incomplete_reason or status, None
        if status == "failed":
            info = error_info(self.error)
            return "failed", status, info
        if status in _UNFINISHED:
            message = f"the response was still {status} (background mode): its result comes later"
        else:
            message = f"the response ended with status {status!r}"
        return "abandoned", status, ErrorInfo(type=status, message=message)

    def ended(
        self, state: EndState, stop_reason: str | None, error: ErrorInfo | None = None
    ) -> list[Event]:
        """The response fields kept (if any), then the response's ResponseEnded draft."""
        out: list[Event] = []
        if self.extras:
            extras = msgspec.json.encode(self.extras)
            out.append(self.mapper.unknown_value(extras, "response_fields"))
        read = {name: _counters(raw) for name, raw in self._usages()}
        unread = encoded_unread(read)
        if unread is not None:
            out.append(self.mapper.unknown_value(unread, UNREAD_USAGE))
        finish: FinishReason = "other"
        if state == "failed":
            finish = "error"
        elif state == "completed":
            if self.status == "incomplete":
                finish = INCOMPLETE_REASONS.get(self.incomplete_reason or "", "other")
            elif self.mapper.client_calls:
                finish = "tool_use"
            elif self.mapper.refused:
                finish = "refusal"
            else:
                finish = "stop"
        usage = None
        if read:
            empty = Counters()
            usage = usage_of(read.get("usage", empty), read.get("tool_usage", empty))
        out.append(
            ResponseEnded(
                response_id=self.response_id,
                state=state,
                finish_reason=finish,
                stop_reason=stop_reason,
                usage=usage,
                error=error,
            )
        )
        return out
