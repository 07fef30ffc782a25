"""The live preview of a Gemini stream: the text and thought parts of candidate 0
(`wire.preview`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from convstore.adapters.wire.preview import Piece

__all__ = ["preview"]


class _Part(msgspec.Struct):
    text: str = ""
    thought: bool = False


class _Content(msgspec.Struct):
    parts: list[_Part] = []


class _Candidate(msgspec.Struct):
    index: int = 0
    content: _Content | None = None


class _Chunk(msgspec.Struct):
    candidates: list[_Candidate] = []


_CHUNK: Final = msgspec.json.Decoder(_Chunk)
_NONE: Final[Sequence[Piece]] = ()


def preview(data: bytes) -> Sequence[Piece]:
    """The text and thought pieces one chunk brings (candidate 0's; the decoder records
    only that one)."""
    try:
        chunk = _CHUNK.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return _NONE
    for candidate in chunk.candidates:
        if candidate.index == 0 and candidate.content is not None:
            return tuple(
                Piece("reasoning" if part.thought else "text", part.text)
                for part in candidate.content.parts
                if part.text
            )
    return _NONE
