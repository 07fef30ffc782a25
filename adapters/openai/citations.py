"""Output text annotations → the attributions' sources and ranges.

`url_citation` → a web source whose `start_index` / `end_index` become the range (OpenAI
counts code points, as TextRange does: no conversion; `end_index` is exclusive, whatever
the reference says); `file_citation` and `file_path` → a file source with a zero-length
range at their `index`: a point, where the citation marker stood (recorded traffic has it
just before the closing period of the sentence it supports; the API reference calls it
"the index of the file in the list of files", which that traffic contradicts), since
OpenAI names no span; `container_file_citation` → a file source (id = `file_id`) with its
span.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from convstore.adapters.openai.item_fields import int_field, str_field
from convstore.domain.vocabulary import Source

__all__ = ["ANNOTATION_SOURCES", "span_of", "unknown_source"]


def span_of(a: Mapping[str, Any]) -> tuple[int, int] | None:
    start, end = int_field(a, "start_index"), int_field(a, "end_index")
    return None if start is None or end is None else (start, end)


def _point(a: Mapping[str, Any]) -> tuple[int, int] | None:
    index = int_field(a, "index")
    return None if index is None else (index, index)


def _web_source(a: Mapping[str, Any]) -> Source:
    return Source(kind="web", url=str_field(a, "url"), title=str_field(a, "title"))


def _file_source(a: Mapping[str, Any]) -> Source:
    return Source(kind="file", id=str_field(a, "file_id"), title=str_field(a, "filename"))


ANNOTATION_SOURCES: Final[
    Mapping[
        str,
        tuple[
            Callable[[Mapping[str, Any]], Source],
            Callable[[Mapping[str, Any]], tuple[int, int] | None],
        ],
    ]
] = {
    "url_citation": (_web_source, span_of),
    "file_citation": (_file_source, _point),
    "container_file_citation": (_file_source, span_of),
    "file_path": (_file_source, _point),
}
"""Annotation type → (the Source it points at, its span in the text). An unknown type
becomes a `document` source with any url, title and span it has."""


def unknown_source(a: Mapping[str, Any]) -> Source:
    return Source(
        kind="document",
        url=str_field(a, "url"),
        title=str_field(a, "title"),
        id=str_field(a, "file_id"),
    )
