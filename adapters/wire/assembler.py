"""The shared stream assembler: native content blocks from start / delta / stop events.

Provider-neutral. A provider's decoder starts a block with its native start JSON, feeds
deltas through its own table (delta type → a function that applies the delta to the
block under assembly), and stops it; the assembled native block then goes to the
provider's block mapper, which turns it into drafts. Only open blocks are held, and text
arrives as a list of pieces joined once at close, so memory stays flat in the length of
the stream (never quadratic string building).

At the end of a stream, `finish(cut=True)` hands every block still open to the mapper
marked incomplete, so the provider can apply the partial-commit rules (DESIGN.md,
"Streaming"); `finish(cut=False)` closes them as complete, for wire formats whose blocks
end implicitly with the stream.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import msgspec

__all__ = ["AssembledBlock", "BlockMapper", "DeltaApplier", "OpenBlock", "StreamAssembler"]

T = TypeVar("T")


class AssembledBlock(msgspec.Struct, frozen=True):
    """A closed block, handed to the provider's block mapper."""

    index: int
    """The block's position in its response."""
    block: dict[str, Any]
    """The native block: start JSON with the deltas applied and JSON buffers parsed."""
    raw: bytes | msgspec.Raw | None
    """The block's JSON as received when no delta changed it, else None."""
    complete: bool = True
    """False when the stream ended before the block's stop."""
    unparsed: dict[str, str] = {}
    """JSON buffers that did not parse (e.g. cut mid-input), by field; not in `block`."""


class OpenBlock:
    """A block under assembly: its start JSON and the pieces its deltas brought so far."""

    __slots__ = ("_items", "_json", "_set", "_text", "index", "raw", "start")

    def __init__(
        self, index: int, start: dict[str, Any], raw: bytes | msgspec.Raw | None = None
    ) -> None:
        self.index = index
        """The block's position in its response."""
        self.start = start
        """The native start JSON, as the provider sent it."""
        self.raw = raw
        """The start JSON as received, if the provider kept it."""
        self._text: dict[str, list[str]] = {}
        # Rarer changes: created on first use.
        self._json: dict[str, list[str]] | None = None
        self._items: dict[str, list[Any]] | None = None
        self._set: dict[str, Any] | None = None

    def append_text(self, name: str, piece: str) -> None:
        """Append a piece of text to the string field `name` (joined once, at close)."""
        if piece:
            pieces = self._text.get(name)
            if pieces is None:
                self._text[name] = [piece]
            else:
                pieces.append(piece)

    def text_pieces(self, name: str) -> list[str]:
        """The list the pieces of string field `name` go to, for a decoder's hot path to
        append to directly (joined at close, like `append_text`'s).

        Created on first use: ask for it only with a non-empty piece to append, since a
        block with any piece list counts as `changed`.
        """
        pieces = self._text.get(name)
        if pieces is None:
            pieces = self._text[name] = []
        return pieces

    def json_pieces(self, name: str) -> list[str]:
        """The list of field `name`'s JSON fragments (as `text_pieces`, for `append_json`)."""
        if self._json is None:
            self._json = {}
        pieces = self._json.get(name)
        if pieces is None:
            pieces = self._json[name] = []
        return pieces

    def append_json(self, name: str, piece: str) -> None:
        """Append a fragment of JSON text to field `name`'s buffer (parsed at close)."""
        if piece:
            if self._json is None:
                self._json = {}
            self._json.setdefault(name, []).append(piece)

    def append_item(self, name: str, item: Any) -> None:
        """Append an item to the list field `name`."""
        if self._items is None:
            self._items = {}
        self._items.setdefault(name, []).append(item)

    def set(self, name: str, value: Any) -> None:
        """Set field `name` to `value`, replacing what the start JSON held."""
        if self._set is None:
            self._set = {}
        self._set[name] = value

    def only_text(self, name: str) -> list[str] | None:
        """The pieces of string field `name` when no delta brought anything else (an
        empty list when none came), else None: a decoder's shortcut for plain text."""
        if self._json or self._items or self._set:
            return None
        text = self._text
        if not text:
            return []
        return text.get(name) if len(text) == 1 else None

    def forget(self, name: str) -> None:
        """Forget what the deltas brought for field `name` (pieces, fragments, value): a
        later whole value made it redundant, and a long text should not be held twice."""
        self._text.pop(name, None)
        if self._json is not None:
            self._json.pop(name, None)
        if self._set is not None:
            self._set.pop(name, None)

    @property
    def changed(self) -> bool:
        """True once a delta brought anything."""
        return bool(self._text or self._json or self._items or self._set)

    def assemble(self, *, complete: bool) -> AssembledBlock:
        """The native block: the start JSON with every delta applied.

        The block is spent: its piece lists are emptied as they are joined, so a long
        text is held twice at most (its pieces, then the joined copy) and only briefly.
        """
        text_fields = self._text
        if not (text_fields or self._json or self._items or self._set):
            return AssembledBlock(self.index, self.start, self.raw, complete)
        block = dict(self.start)
        for name, pieces in text_fields.items():
            text = "".join(pieces)
            pieces.clear()
            prefix = block.get(name)
            block[name] = prefix + text if isinstance(prefix, str) else text
        if self._items:
            for name, items in self._items.items():
                before = block.get(name)
                block[name] = [*before, *items] if isinstance(before, list) else items
        if self._set:
            block.update(self._set)
        if not self._json:
            return AssembledBlock(self.index, block, None, complete)
        unparsed: dict[str, str] = {}
        for name, fragments in self._json.items():
            text = "".join(fragments)
            fragments.clear()
            try:
                block[name] = msgspec.json.decode(text)
            except (msgspec.DecodeError, RecursionError):
                unparsed[name] = text
        return AssembledBlock(self.index, block, None, complete, unparsed)


DeltaApplier = Callable[[OpenBlock, Any], bool]
"""Applies one delta to a block; returns False when the delta is malformed (not applied)."""

BlockMapper = Callable[[AssembledBlock], list[T]]
"""Turns an assembled block into drafts."""


class StreamAssembler(Generic[T]):
    """Holds the open blocks of one stream and hands each closed one to the mapper."""

    __slots__ = ("_appliers", "_mapper", "_open")

    def __init__(self, appliers: Mapping[str, DeltaApplier], mapper: BlockMapper[T]) -> None:
        self._appliers = appliers
        self._mapper = mapper
        self._open: dict[int, OpenBlock] = {}

    @property
    def open_blocks(self) -> int:
        """How many blocks are open."""
        return len(self._open)

    def start(
        self, index: int, block: dict[str, Any], raw: bytes | msgspec.Raw | None = None
    ) -> list[T]:
        """Open a block; a block still open at the same index is closed incomplete first."""
        out = self._close(index, complete=False) if index in self._open else []
        self._open[index] = OpenBlock(index, block, raw)
        return out

    def block(self, index: int) -> OpenBlock | None:
        """The block open at `index`, if any (for a decoder's hot path)."""
        return self._open.get(index)

    def delta(self, index: int, kind: str, delta: Any) -> bool:
        """Apply a delta; False when no block is open at `index`, or `kind` is unknown or
        malformed (the caller keeps such a delta some other way)."""
        block = self._open.get(index)
        applier = self._appliers.get(kind)
        if block is None or applier is None:
            return False
        return applier(block, delta)

    def stop(self, index: int) -> list[T]:
        """Close the block at `index` and map it; nothing if no block is open there."""
        block = self._open.pop(index, None)
        if block is None:
            return []
        return self._mapper(block.assemble(complete=True))

    def drop(self, index: int) -> bool:
        """Forget the block open at `index` unmapped (the decoder has it whole another
        way); False if no block is open there."""
        return self._open.pop(index, None) is not None

    def finish(self, *, cut: bool) -> list[T]:
        """Close every open block, in index order: incomplete when `cut`, else complete."""
        out: list[T] = []
        for index in sorted(self._open):
            out.extend(self._close(index, complete=not cut))
        return out

    def _close(self, index: int, *, complete: bool) -> list[T]:
        return self._mapper(self._open.pop(index).assemble(complete=complete))
