"""What a person watching a live stream sees before a block closes: its text and its
reasoning, piece by piece, as they arrive.

Each provider reads one server-sent event's `data` into `Piece`s (its `preview`); the
drafts, which the decoder makes only when a block closes, stay the source of truth. A
preview never decides what is recorded, and a piece it cannot read is simply not shown
early: the block's draft shows it when the block closes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Literal, NamedTuple

from convstore.adapters.wire.sse import SSEDecodeError, SSEFramer

__all__ = ["Piece", "Preview", "previewed"]


class Piece(NamedTuple):
    """A piece of a block still streaming."""

    kind: Literal["text", "reasoning"]
    text: str


Preview = Callable[[bytes], Sequence[Piece]]
"""One event's data → the pieces it brings (none for anything else, or anything unreadable)."""


def previewed(
    chunks: Iterable[bytes], preview: Preview, show: Callable[[Piece], None]
) -> Iterator[bytes]:
    """`chunks` unchanged, each handed on after `show` got the pieces its events brought:
    what the decoder completes from a chunk is shown after that chunk's pieces. Framing
    errors stop the preview only; the decoder reports them."""
    framer: SSEFramer | None = SSEFramer()
    for chunk in chunks:
        if framer is not None:
            try:
                datas = framer.feed_data(chunk)
            except SSEDecodeError:
                framer, datas = None, []
            for data in datas:
                for piece in preview(data):
                    show(piece)
        yield chunk
