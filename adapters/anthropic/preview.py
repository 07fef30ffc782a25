"""The live preview of a Messages API stream: text and thinking deltas (`wire.preview`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from convstore.adapters.wire.preview import Piece

__all__ = ["preview"]


class _Delta(msgspec.Struct):
    type: str = ""
    text: str = ""
    thinking: str = ""


class _Event(msgspec.Struct):
    type: str = ""
    delta: _Delta | None = None


_EVENT: Final = msgspec.json.Decoder(_Event)
_NONE: Final[Sequence[Piece]] = ()


def preview(data: bytes) -> Sequence[Piece]:
    """The piece a `content_block_delta` of text or thinking brings."""
    if b"content_block_delta" not in data:
        return _NONE
    try:
        event = _EVENT.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return _NONE
    delta = event.delta
    if event.type != "content_block_delta" or delta is None:
        return _NONE
    if delta.type == "text_delta" and delta.text:
        return (Piece("text", delta.text),)
    if delta.type == "thinking_delta" and delta.thinking:
        return (Piece("reasoning", delta.thinking),)
    return _NONE
