"""Anthropic citations → Attributions: the source each citation type points at.

Each attribution keeps the citation itself as its replay value (format `citation`), so
opaque fields such as `encrypted_index` go back to Anthropic unchanged. Anthropic cites
per text block, which is the anchor: no attribution carries a `range`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from convstore.adapters.anthropic.context import PROVIDER
from convstore.adapters.wire.counts import count_field
from convstore.domain.vocabulary import Attribution, Location, ProviderPayload, Source

__all__ = ["CITATION_SOURCES", "attribution"]


def _str(d: Mapping[str, Any], key: str) -> str | None:
    value = d.get(key)
    return value if isinstance(value, str) else None


def _location(c: Mapping[str, Any], unit: Any, start: str, end: str, doc: str) -> Location | None:
    """The cited span: positions are counts (a negative, fractional or boolean one, or an
    end before the start, locates nothing)."""
    first, last = count_field(c, start), count_field(c, end)
    if first is None or last is None or last < first:
        return None
    return Location(unit=unit, start=first, end=last, document_index=count_field(c, doc))


def _document(unit: str, start: str, end: str) -> Callable[[Mapping[str, Any]], Source]:
    def source(c: Mapping[str, Any]) -> Source:
        return Source(
            kind="document",
            title=_str(c, "document_title"),
            id=_str(c, "file_id"),
            location=_location(c, unit, start, end, "document_index"),
        )

    return source


CITATION_SOURCES: Final[Mapping[str, Callable[[Mapping[str, Any]], Source]]] = {
    "web_search_result_location": lambda c: Source(
        kind="web", url=_str(c, "url"), title=_str(c, "title")
    ),
    "char_location": _document("char", "start_char_index", "end_char_index"),
    "page_location": _document("page", "start_page_number", "end_page_number"),
    "content_block_location": _document("block", "start_block_index", "end_block_index"),
    "search_result_location": lambda c: Source(
        kind="search_result",
        url=_str(c, "source"),
        title=_str(c, "title"),
        location=_location(
            c, "block", "start_block_index", "end_block_index", "search_result_index"
        ),
    ),
}
"""Citation type → the Source it points at. An unknown type keeps its replay value."""


def attribution(citation: Any) -> Attribution:
    """The Attribution of one citation (decoded, or raw as a citations delta brought it)."""
    if isinstance(citation, msgspec.Raw):
        raw = bytes(citation)
        try:
            citation = msgspec.json.decode(raw)
        except msgspec.DecodeError:  # well-formed, but a number out of range
            citation = None
    else:
        raw = msgspec.json.encode(citation)
    # One JSON value as msgspec parsed or encoded it: marked checked, not read again.
    replay = ProviderPayload.parsed(PROVIDER, "citation", raw)
    if not isinstance(citation, dict):
        return Attribution(source=Source(kind="document"), replay=replay)
    kind = citation.get("type")
    to_source = CITATION_SOURCES.get(kind) if isinstance(kind, str) else None
    source = (
        to_source(citation)
        if to_source is not None
        else Source(kind="document", url=_str(citation, "url"), title=_str(citation, "title"))
    )
    return Attribution(source=source, excerpt=_str(citation, "cited_text"), replay=replay)
