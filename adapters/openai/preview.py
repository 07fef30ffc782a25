"""The live preview of a Responses API stream: output text and reasoning deltas
(`wire.preview`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from convstore.adapters.wire.preview import Piece

__all__ = ["preview"]

_KINDS: Final = {
    "response.output_text.delta": "text",
    "response.reasoning_summary_text.delta": "reasoning",
    "response.reasoning_text.delta": "reasoning",
}


class _Event(msgspec.Struct):
    type: str = ""
    delta: str = ""


_EVENT: Final = msgspec.json.Decoder(_Event)
_NONE: Final[Sequence[Piece]] = ()


def preview(data: bytes) -> Sequence[Piece]:
    """The piece a text or reasoning `…delta` event brings."""
    if b".delta" not in data:
        return _NONE
    try:
        event = _EVENT.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return _NONE
    kind = _KINDS.get(event.type)
    if kind == "text" and event.delta:
        return (Piece("text", event.delta),)
    if kind == "reasoning" and event.delta:
        return (Piece("reasoning", event.delta),)
    return _NONE
