"""Gemini grounding → attributions on the text, and the hosted activities it reports.

`groundingMetadata` arrives once per candidate, at its end (streamed: on the last chunk;
the chunks before carry `{}`). Its `groundingSupports[].segment` span counts UTF-8 bytes
over the concatenation of every visible (non-thought) text part of the candidate, across
streamed chunks; `startIndex` is omitted when 0. `text_attributions` maps each span to the
text events it falls in, as half-open code-point ranges of each event's own text. A span
that does not fit the text (past its end, a boundary inside a UTF-8 character, or bytes
that are not the segment's text) keeps its citations without a range, never a stale one:
each source is cited by the text event the span starts in (the last one when it starts
past the end), with `unplaced` saying why. The segment's `text` is answer text, what the
range points at, so it is never an attribution's `excerpt` (source-side text only).

Grounding reports finished work with no call/result pair, so each block becomes one hosted
activity that begins `completed` (DESIGN.md, Lifecycle): `web_search` for a block with
`webSearchQueries`, `url_context` for `urlContextMetadata`.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

from convstore.domain.vocabulary import Attribution, Display, Source, TextRange

__all__ = [
    "UNPLACED_MISMATCH",
    "UNPLACED_OUTSIDE",
    "UNPLACED_SPLIT",
    "TextSlot",
    "byte_offsets_to_code_points",
    "search_summary",
    "source_of",
    "text_attributions",
    "url_context_outcome",
]

URL_RETRIEVED: Final = "URL_RETRIEVAL_STATUS_SUCCESS"

UNPLACED_OUTSIDE: Final = "the segment's byte offsets lie outside the text"
UNPLACED_MISMATCH: Final = "the text at the segment's byte offsets is not the segment's text"
UNPLACED_SPLIT: Final = "a segment boundary falls inside a UTF-8 character"
"""Why a grounding support's citations have no range (`Attribution.unplaced`)."""


@dataclass(slots=True)
class TextSlot:
    """One text event's place in the candidate's visible text."""

    text: str
    start: int
    """Its first byte's offset in the concatenated visible text."""
    encoded: bytes = field(default=b"", repr=False)

    def __post_init__(self) -> None:
        if not self.encoded:
            self.encoded = self.text.encode()

    @property
    def end(self) -> int:
        return self.start + len(self.encoded)


def byte_offsets_to_code_points(encoded: bytes, offsets: Sequence[int]) -> dict[int, int | None]:
    """Each byte offset of UTF-8 `encoded` → its code-point offset, or None when it falls
    inside a character or outside the text. One pass over the text whatever the count."""
    out: dict[int, int | None] = {}
    if encoded.isascii():
        size = len(encoded)
        return {o: o if 0 <= o <= size else None for o in offsets}
    at_byte = at_point = 0
    for offset in sorted(set(offsets)):
        if not 0 <= offset <= len(encoded):
            out[offset] = None
            continue
        try:
            points = len(encoded[at_byte:offset].decode("utf-8"))
        except UnicodeDecodeError:
            out[offset] = None
            continue
        at_byte, at_point = offset, at_point + points
        out[offset] = at_point
    return out


def _str(d: Mapping[str, Any], key: str) -> str | None:
    value = d.get(key)
    return value if isinstance(value, str) and value else None


def source_of(chunk: Any) -> Source | None:
    """The Source of one `groundingChunks[]` entry: a web page, a retrieved document, a
    place; None for a shape this adapter does not know."""
    if not isinstance(chunk, dict):
        return None
    web = chunk.get("web")
    if isinstance(web, dict):
        return Source(kind="web", url=_str(web, "uri"), title=_str(web, "title"))
    document = chunk.get("retrievedContext")
    if isinstance(document, dict):
        return Source(
            kind="document",
            url=_str(document, "uri"),
            title=_str(document, "title"),
            id=_str(document, "documentName") or _str(document, "fileSearchStore"),
        )
    place = chunk.get("maps")
    if isinstance(place, dict):
        return Source(
            kind="web",
            url=_str(place, "uri"),
            title=_str(place, "title"),
            id=_str(place, "placeId"),
        )
    return None


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def text_attributions(
    slots: Sequence[TextSlot], blocks: Sequence[Mapping[str, Any]]
) -> list[list[Attribution]]:
    """The attributions each slot's text event carries, from the grounding blocks."""
    out: list[list[Attribution]] = [[] for _ in slots]
    if not slots:
        return out
    spans = _spans(blocks)
    if not spans:
        return out
    # One pass over the concatenated text: its byte offsets, not each slot's, are looked
    # up (a span's bytes are one slice of it, every code point offset one sweep).
    whole = b"".join(slot.encoded for slot in slots)
    at: list[int] = []  # each slot's offset in `whole`
    size = 0
    for slot in slots:
        at.append(size)
        size += len(slot.encoded)
    ends = [slot.end for slot in slots]
    total = ends[-1]
    wanted: list[int] = []
    placed: list[tuple[int, list[Source], list[tuple[int, int, int]] | str]] = []
    for start, end, text, sources in spans:
        if not 0 <= start < end <= total:
            placed.append((start, sources, UNPLACED_OUTSIDE))
            continue
        # The slots the span overlaps: from the first ending after its start on.
        first = bisect_right(ends, start)
        pieces: list[tuple[int, int, int]] = []
        for n in range(first, len(slots)):
            slot = slots[n]
            if slot.start >= end:
                break
            low, high = max(start, slot.start), min(end, ends[n])
            if low < high:
                pieces.append((n, at[n] + low - slot.start, at[n] + high - slot.start))
        if (
            text is not None
            and (whole[pieces[0][1] : pieces[-1][2]] if pieces else b"") != text.encode()
        ):
            placed.append((start, sources, UNPLACED_MISMATCH))
            continue
        for n, low, high in pieces:
            wanted.extend((at[n], low, high))
        placed.append((start, sources, pieces))
    points = byte_offsets_to_code_points(whole, wanted)
    seen: set[tuple[int, Attribution]] = set()
    for start, sources, found in placed:
        why, pieces = (found, []) if isinstance(found, str) else ("", found)
        # Each piece's code-point range in its slot's own text (the slot's first byte is
        # always a character boundary); a boundary inside a character places nothing.
        ranges: list[tuple[int, int, int]] = []
        for n, low, high in pieces:
            a, b = points[low], points[high]
            if a is None or b is None:
                why = UNPLACED_SPLIT
                break
            base = cast(int, points[at[n]])
            ranges.append((n, a - base, b - base))
        cited: list[tuple[int, Attribution]]
        if why:  # cited, without a range, by the text event the span starts in
            n = min(bisect_right(ends, start), len(slots) - 1)
            cited = [(n, Attribution(source=source, unplaced=why)) for source in sources]
        else:
            cited = [
                (n, Attribution(source=source, range=TextRange(a, b)))
                for n, a, b in ranges
                for source in sources
            ]
        for key in cited:
            if key not in seen:
                seen.add(key)
                out[key[0]].append(key[1])
    return out


def _spans(blocks: Sequence[Mapping[str, Any]]) -> list[tuple[int, int, str | None, list[Source]]]:
    """Every grounding support's (start, end, segment text, sources), in order."""
    spans: list[tuple[int, int, str | None, list[Source]]] = []
    for block in blocks:
        chunks = block.get("groundingChunks")
        known = [source_of(c) for c in chunks] if isinstance(chunks, list) else []
        supports = block.get("groundingSupports")
        for support in supports if isinstance(supports, list) else ():
            span = _span(support, known)
            if span is not None:
                spans.append(span)
    return spans


def _span(
    support: Any, sources: list[Source | None]
) -> tuple[int, int, str | None, list[Source]] | None:
    if not isinstance(support, dict):
        return None
    segment = support.get("segment")
    if not isinstance(segment, dict):
        return None
    start = _int(segment.get("startIndex", 0))
    end = _int(segment.get("endIndex"))
    text = segment.get("text")
    indices = support.get("groundingChunkIndices")
    if start is None or end is None or not isinstance(indices, list):
        return None
    cited = [
        source
        for i in indices
        if type(i) is int and 0 <= i < len(sources) and (source := sources[i]) is not None
    ]
    if not cited:
        return None
    return start, end, text if isinstance(text, str) else None, cited


# --- the activities ---------------------------------------------------------------------------


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def search_summary(block: Mapping[str, Any]) -> str:
    """`N sources` of a grounding block."""
    chunks = block.get("groundingChunks")
    return _count(len(chunks) if isinstance(chunks, list) else 0, "source")


def search_queries(block: Mapping[str, Any]) -> list[str] | None:
    """The block's `webSearchQueries` (None when it has none: not a web search)."""
    queries = block.get("webSearchQueries")
    if not isinstance(queries, list) or not queries:
        return None
    return [q for q in queries if isinstance(q, str)]


def search_display(block: Mapping[str, Any]) -> Display | None:
    """Google's Search Suggestion, which it requires be shown: kept as a display
    obligation for renderers, never printed raw."""
    entry = block.get("searchEntryPoint")
    content = entry.get("renderedContent") if isinstance(entry, dict) else None
    if not isinstance(content, str) or not content:
        return None
    return Display(kind="search_suggestion", content=content, content_type="text/html")


def url_context_outcome(metadata: Mapping[str, Any]) -> tuple[str, list[str], str]:
    """(`completed` | `failed`, urls, summary) of a `urlContextMetadata` block: failed when
    every URL's retrieval failed."""
    entries = metadata.get("urlMetadata")
    entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    urls = [u for e in entries if isinstance(u := e.get("retrievedUrl"), str)]
    ok = sum(e.get("urlRetrievalStatus") == URL_RETRIEVED for e in entries)
    state = "failed" if entries and not ok else "completed"
    noun = "url" if len(entries) == 1 else "urls"
    return state, urls, f"{ok}/{len(entries)} {noun} retrieved"
