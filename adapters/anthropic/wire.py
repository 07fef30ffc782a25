"""The Messages API stream vocabulary: tagged structs, decoded in one pass per event.

The union has no catch-all (msgspec's rule), so an event of an unknown type, or of a
known type with an unexpected shape, fails validation and the decoder keeps its data as
an UnknownArtifact. Block bodies stay raw until the block mapper reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypeAlias

import msgspec

from convstore.adapters.wire.assembler import DeltaApplier, OpenBlock

__all__ = [
    "DELTAS",
    "EVENT",
    "HOT_EVENT",
    "PIECE_FIELDS",
    "CitationsDelta",
    "Delta",
    "HotEvent",
    "PieceDelta",
    "PlainMessageDelta",
    "StreamEvent",
    "TypedBlockDelta",
]

_ABSENT: Final = msgspec.Raw()
"""An absent raw field (msgspec has no optional Raw): empty, so false."""


class _Event(msgspec.Struct, tag_field="type", gc=False):
    """Base of the stream events, tagged by their `type`."""


class MessageStart(_Event, tag="message_start"):
    message: dict[str, msgspec.Raw]


class BlockStart(_Event, tag="content_block_start"):
    index: int
    content_block: msgspec.Raw


class Delta(msgspec.Struct, gc=False):
    """A content block delta: every known delta type's field, None when absent."""

    type: str
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    partial_json: str | None = None
    citation: msgspec.Raw = _ABSENT


class BlockDelta(_Event, tag="content_block_delta"):
    index: int
    delta: Delta


class BlockStop(_Event, tag="content_block_stop"):
    index: int


class MessageDelta(_Event, tag="message_delta"):
    delta: msgspec.Raw = _ABSENT
    """The delta object raw (one that is not an object is kept whole, as a message field)."""
    usage: msgspec.Raw = _ABSENT


class MessageStop(_Event, tag="message_stop"):
    pass


class Ping(_Event, tag="ping"):
    pass


class Error(_Event, tag="error"):
    error: Any = None


StreamEvent: TypeAlias = (
    MessageStart | BlockStart | BlockDelta | BlockStop | MessageDelta | MessageStop | Ping | Error
)

EVENT: Final = msgspec.json.Decoder(StreamEvent)
"""Decodes one event's `data`; ValidationError for an unknown type or shape."""


# --- the hot path: the same events, each known delta type its own struct ---------------


class _Delta(msgspec.Struct, tag_field="type", gc=False):
    """Base of the typed deltas, tagged by their `type`."""


class TextDelta(_Delta, tag="text_delta"):
    piece: str = msgspec.field(name="text")


class ThinkingDelta(_Delta, tag="thinking_delta"):
    piece: str = msgspec.field(name="thinking")


class SignatureDelta(_Delta, tag="signature_delta"):
    piece: str = msgspec.field(name="signature")


class InputJsonDelta(_Delta, tag="input_json_delta"):
    piece: str = msgspec.field(name="partial_json")


class CitationsDelta(_Delta, tag="citations_delta"):
    citation: msgspec.Raw


PieceDelta: TypeAlias = TextDelta | ThinkingDelta | SignatureDelta | InputJsonDelta


class TypedBlockDelta(_Event, tag="content_block_delta"):
    """A `content_block_delta` whose delta is of a known type and shape."""

    index: int
    delta: PieceDelta | CitationsDelta


class StopDelta(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A `message_delta`'s delta of the common shape: a stop reason, no stop sequence or
    details (null or absent: a null field is not kept)."""

    stop_reason: str | None = None
    stop_sequence: None = None
    stop_details: None = None


class PlainMessageDelta(_Event, tag="message_delta", forbid_unknown_fields=True):
    """A `message_delta` with nothing beside its stop reason and usage: no field the
    decoder would keep as the message's own (any other shape fails, and `EVENT` reads it
    as a `MessageDelta`)."""

    delta: StopDelta
    usage: msgspec.Raw = _ABSENT


HotEvent: TypeAlias = (
    MessageStart
    | BlockStart
    | TypedBlockDelta
    | BlockStop
    | PlainMessageDelta
    | MessageStop
    | Ping
    | Error
)

HOT_EVENT: Final = msgspec.json.Decoder(HotEvent)
"""Decodes one event's `data` as `EVENT` does, but a known delta as its own struct, so
the decoder's hot path needs no field checks. It accepts a subset of what `EVENT`
accepts (a delta of an unknown type or shape fails here, and so does a `message_delta`
with more than `PlainMessageDelta` reads), and gives the same fields."""

PIECE_FIELDS: Final[Mapping[type[PieceDelta], tuple[str, bool]]] = {
    TextDelta: ("text", False),
    ThinkingDelta: ("thinking", False),
    SignatureDelta: ("signature", False),
    InputJsonDelta: ("input", True),
}
"""Typed delta → (the block field its pieces build, whether they are JSON fragments):
the hot path's version of `DELTAS`."""


def _text(block: OpenBlock, delta: Delta) -> bool:
    if delta.text is None:
        return False
    block.append_text("text", delta.text)
    return True


def _thinking(block: OpenBlock, delta: Delta) -> bool:
    if delta.thinking is None:
        return False
    block.append_text("thinking", delta.thinking)
    return True


def _signature(block: OpenBlock, delta: Delta) -> bool:
    if delta.signature is None:
        return False
    block.append_text("signature", delta.signature)
    return True


def _input_json(block: OpenBlock, delta: Delta) -> bool:
    if delta.partial_json is None:
        return False
    block.append_json("input", delta.partial_json)
    return True


def _citation(block: OpenBlock, delta: Delta) -> bool:
    citation = delta.citation
    if not citation or bytes(citation)[:1] != b"{":
        return False
    block.append_item("citations", citation)
    return True


DELTAS: Final[Mapping[str, DeltaApplier]] = {
    "text_delta": _text,
    "thinking_delta": _thinking,
    "signature_delta": _signature,
    "input_json_delta": _input_json,
    "citations_delta": _citation,
}
"""Delta type → how it changes the block under assembly (others are kept as unknown)."""
