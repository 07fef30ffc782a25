"""What streamed and non-streamed responses share: the message-level state and tables."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import Any, Final

import msgspec

from convstore.adapters.anthropic.blocks import BlockMapper
from convstore.adapters.anthropic.context import PROVIDER, RequestContext
from convstore.adapters.anthropic.notices import MESSAGE_FIELDS_FORMAT
from convstore.adapters.wire.assembler import AssembledBlock
from convstore.adapters.wire.counts import (
    UNREAD_USAGE,
    Counters,
    encoded_unread,
    plain_counts_of,
    read_counters,
    usage_fields,
)
from convstore.domain.events import Event, ResponseEnded, ResponseStarted
from convstore.domain.vocabulary import EndState, ErrorInfo, FinishReason, ResponseId, Usage

__all__ = ["FINISH_REASONS", "MESSAGE_FIELDS", "USAGE_TOKENS", "ResponseHead"]

FINISH_REASONS: Final[Mapping[str, FinishReason]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_use",
    "pause_turn": "pause",
    "refusal": "refusal",
}
"""Anthropic `stop_reason` → the normalized finish reason (anything else: `other`)."""

USAGE_TOKENS: Final[Mapping[str, str]] = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_input_tokens": "cache_read_tokens",
    "cache_creation_input_tokens": "cache_write_tokens",
    "output_tokens_details.thinking_tokens": "reasoning_tokens",
}
"""Anthropic usage counter → `Usage` field; `server_tool_use.*` go to `hosted`, the rest
of the numeric counters to `other` (nested names joined with dots)."""

MESSAGE_FIELDS: Final = frozenset(
    {"id", "type", "role", "model", "content", "stop_reason", "usage"}
)
"""Message fields the events model; any other non-null one (`container`, `stop_sequence`,
`stop_details`, `context_management`, …) is kept in an UnknownArtifact of format
`message_fields`, so nothing is lost (`notices.interpret` reads the ones it types)."""

_OBJECT: Final = msgspec.json.Decoder(dict[str, Any])
_RAW_LIST: Final = msgspec.json.Decoder(list[msgspec.Raw])
_ANY: Final = msgspec.json.Decoder()
_NULL: Final = msgspec.Raw(b"null")


def decode_field(raw: msgspec.Raw | None) -> Any:
    """A field kept raw, decoded; None when absent or undecodable (a number out of range)."""
    if raw is None:
        return None
    try:
        return _ANY.decode(raw)
    except msgspec.DecodeError:
        return None


def derived_id(body: bytes) -> ResponseId:
    """A deterministic response id for an error that names none: re-ingesting matches."""
    return ResponseId("error_" + hashlib.sha256(body).hexdigest()[:24])


def error_info(error: Any, status: int | None = None) -> ErrorInfo:
    """The ErrorInfo of an Anthropic `error` object, whatever its shape."""
    if not isinstance(error, dict):
        return ErrorInfo(type="error", status=status)
    kind, message = error.get("type"), error.get("message")
    return ErrorInfo(
        type=kind if isinstance(kind, str) and kind else "error",
        message=message if isinstance(message, str) else "",
        status=status,
    )


def failed_response(
    response_id: ResponseId, context: RequestContext, info: ErrorInfo
) -> list[Event]:
    """A response that failed before any message: an HTTP error body or an early error."""
    return [
        ResponseStarted(
            response_id=response_id,
            provider=PROVIDER,
            model=context.model,
            settings=context.settings,
        ),
        ResponseEnded(response_id=response_id, state="failed", finish_reason="error", error=info),
    ]


def whole_blocks(mapper: BlockMapper, content: msgspec.Raw | None) -> Iterator[Event]:
    """Map blocks that came whole, each with its bytes exactly as received.

    Raises msgspec.ValidationError if `content` is not a list.
    """
    for index, raw in enumerate(_RAW_LIST.decode(content) if content is not None else ()):
        value = bytes(raw)
        try:
            block = _OBJECT.decode(value)
        except msgspec.ValidationError:
            yield mapper.unknown_value(value, "content_block")
            continue
        yield from mapper(AssembledBlock(index, block, value))


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


_HOSTED_PREFIX: Final = "server_tool_use."


def usage_of(counters: Counters) -> Usage:
    """Anthropic usage counters (read by `read_counters`) as `Usage`."""
    tokens: dict[str, int] = {}
    hosted: dict[str, int] = {}
    other: dict[str, int] = {}
    tokens_of = USAGE_TOKENS.get
    for key, value in counters.counts.items():
        field = tokens_of(key)
        if field is not None:
            tokens[field] = value
        elif key.startswith(_HOSTED_PREFIX) and key.count(".") == 1:
            hosted[key[len(_HOSTED_PREFIX) :]] = value
        else:
            other[key] = value
    return _usage(tokens, hosted, other)


class ResponseHead:
    """The message-level state of one response: ids, usage, fields kept as they came."""

    __slots__ = ("context", "extras", "mapper", "model", "response_id", "usages")

    def __init__(
        self, message_id: str, fields: Mapping[str, msgspec.Raw], context: RequestContext
    ) -> None:
        model = decode_field(fields.get("model"))
        self.response_id = ResponseId(message_id)
        self.model = model if isinstance(model, str) and model else context.model
        self.context = context
        self.usages: list[msgspec.Raw] = []
        """The usage values, raw, in order: a later one's fields (`message_delta`'s)
        replace an earlier one's."""
        self.take_usage(fields.get("usage"))
        self.extras: dict[str, msgspec.Raw] = {}
        self.keep(fields, MESSAGE_FIELDS)
        self.mapper = BlockMapper(self.response_id, self.model, context)

    def take_usage(self, raw: msgspec.Raw | None) -> None:
        """Take in a usage value, raw (its counters are read at the end); null or absent
        says nothing."""
        if raw and not (len(raw) == 4 and raw == _NULL):
            self.usages.append(raw)

    def counters(self) -> Counters:
        """The counters of the usage values taken in: in one decode when they are plain
        objects, else read field by field (a value that is not an object kept whole)."""
        counts = plain_counts_of(self.usages, USAGE_TOKENS)
        if counts is not None:
            return Counters(counts)
        fields: dict[str, msgspec.Raw] = {}
        whole: msgspec.Raw | None = None
        for raw in self.usages:
            kept = usage_fields(raw, fields)
            if kept is not None:
                whole = kept
        return read_counters(fields, USAGE_TOKENS, whole)

    def keep(self, fields: Mapping[str, msgspec.Raw], modelled: frozenset[str]) -> None:
        """Remember the non-null fields the events do not model."""
        for name in [name for name in fields if name not in modelled]:
            raw = fields[name]
            if len(raw) != 4 or raw != _NULL:  # the length first: half the cost
                self.extras[name] = raw

    def started(self) -> ResponseStarted:
        """The response's ResponseStarted draft."""
        return ResponseStarted(
            response_id=self.response_id,
            provider=PROVIDER,
            model=self.model,
            settings=self.context.settings,
        )

    def ended(
        self, state: EndState, stop_reason: str | None, error: ErrorInfo | None = None
    ) -> list[Event]:
        """The message fields kept (if any), the usage values that are not counts (if any),
        then the response's ResponseEnded draft."""
        out: list[Event] = []
        counters = self.counters()
        if self.extras:
            extras = msgspec.json.encode(self.extras)
            out.append(self.mapper.unknown_value(extras, MESSAGE_FIELDS_FORMAT))
        unread = encoded_unread({"usage": counters})
        if unread is not None:
            out.append(self.mapper.unknown_value(unread, UNREAD_USAGE))
        finish: FinishReason = "other"
        if state == "failed":
            finish = "error"
        elif stop_reason is not None:
            finish = FINISH_REASONS.get(stop_reason, "other")
        out.append(
            ResponseEnded(
                response_id=self.response_id,
                state=state,
                finish_reason=finish,
                stop_reason=stop_reason,
                usage=usage_of(counters),
                error=error,
            )
        )
        return out
