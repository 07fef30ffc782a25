"""The wording the exports, the terminal transcript and the audit share: timestamps,
activity labels, usage counters, source lines and citation markers, so one conversation
reads alike wherever it is shown.

The helpers take structural types (`SourceLike`, `CitationLike`, `UsageLike`, …): the
domain's events and the portable reading both fit, and each caller passes how its
stored strings are rendered (sanitized on a terminal, escaped in Markdown).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from convstore.adapters.terminal.render import one_line, shorten, to_json


def when(moment: datetime) -> str:
    """A timestamp as people read it, in UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def activity_label(name: str, input: Mapping[str, Any]) -> str:
    """`web search: "query"`: a hosted activity's name and what it was asked, one line."""
    label = f"{one_line(name).replace('_', ' ')}:"
    query, queries = input.get("query"), input.get("queries")
    if isinstance(query, str):
        label += f' "{shorten(query, 200)}"'
    elif isinstance(queries, list) and queries and all(isinstance(q, str) for q in queries):
        label += " " + shorten(", ".join(f'"{q}"' for q in queries), 200)
    elif input:
        label += f" {shorten(to_json(input), 200)}"
    return label


_SPEND_WORDS: Final = {
    "web_search": ("search", "searches"),
    "web_fetch": ("fetch", "fetches"),
    "code_execution": ("code run", "code runs"),
    "file_search": ("file search", "file searches"),
    "url_context": ("page read", "pages read"),
}


def hosted_spend(names: Iterable[str]) -> str:
    """`2 searches, 1 code run`: hosted activities counted by capability name, one count
    per activity, in the order first seen (empty for none)."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    parts = []
    for name, count in counts.items():
        one, many = _SPEND_WORDS.get(name, (one_line(name).replace("_", " "), ""))
        parts.append(f"{count} {one if count == 1 else many or one}")
    return ", ".join(parts)


class LocationLike(Protocol):
    """A cited location (domain `Location`, portable `CitedLocation`)."""

    @property
    def unit(self) -> str: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def document_index(self) -> int | None: ...


class SourceLike(Protocol):
    """A cited source (domain `Source`, portable `CitedSource`)."""

    @property
    def kind(self) -> str: ...
    @property
    def url(self) -> str | None: ...
    @property
    def title(self) -> str | None: ...
    @property
    def id(self) -> str | None: ...
    @property
    def location(self) -> LocationLike | None: ...


class SpanLike(Protocol):
    """A cited span (domain `TextRange`, portable `Span`)."""

    @property
    def end(self) -> int: ...


class CitationLike(Protocol):
    """A citation (domain `Attribution`, portable `Citation`)."""

    @property
    def source(self) -> SourceLike: ...
    @property
    def range(self) -> SpanLike | None: ...


class UsageLike(Protocol):
    """A response's usage counters (domain `Usage`, portable `UsageInfo`)."""

    @property
    def input_tokens(self) -> int | None: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def cache_read_tokens(self) -> int | None: ...
    @property
    def cache_write_tokens(self) -> int | None: ...
    @property
    def reasoning_tokens(self) -> int | None: ...
    @property
    def hosted(self) -> Mapping[str, int]: ...


def usage_counters(
    usage: UsageLike, name: Callable[[str], str], *, hosted: bool = True
) -> list[str]:
    """`in 12`, `out 40`, `cache read 3`, …: each counter `usage` has, the token counters
    first, then (unless not `hosted`) the hosted ones with their names rendered by `name`."""
    counters = [
        f"{label} {count}"
        for label, count in (
            ("in", usage.input_tokens),
            ("out", usage.output_tokens),
            ("cache read", usage.cache_read_tokens),
            ("cache write", usage.cache_write_tokens),
            ("reasoning", usage.reasoning_tokens),
        )
        if count is not None
    ]
    if hosted:
        counters += [f"{name(counter)} {count}" for counter, count in usage.hosted.items()]
    return counters


def _same(text: str) -> str:
    return text


def source_line(
    n: int,
    source: SourceLike,
    *,
    text: Callable[[str], str] = one_line,
    url: Callable[[str], str] | None = None,
) -> str:
    """`[n] kind: title — url (location)`; `text` renders stored strings, `url` the URL."""
    kind = "" if source.kind == "web" else f"{source.kind.replace('_', ' ')}: "
    line = f"[{n}] {kind}{text(source.title or '') or '(untitled)'}"
    if source.url:
        line += f" — {(url or text)(source.url)}"
    elif source.id:
        line += f" — {text(source.id)}"
    location = source.location
    if location is not None:
        line += f" ({location.unit}s {location.start}-{location.end}"
        if location.document_index is not None:
            line += f" of document {location.document_index}"
        line += ")"
    return line


def cite(
    texts: Iterable[tuple[str, Iterable[CitationLike]]],
    number: Callable[[Any], int],
    escape: Callable[[str], str] = _same,
) -> str:
    """The texts joined, with `[n]` after each cited span (its range's end, else the text's
    end); `number` numbers a source, `escape` renders the text between markers."""
    parts: list[str] = []
    marks: set[tuple[int, int]] = set()
    offset = 0
    for text, citations in texts:
        for citation in citations:
            span = citation.range
            end = span.end if span is not None else len(text.rstrip())
            marks.add((offset + min(max(end, 0), len(text)), number(citation.source)))
        parts.append(text)
        offset += len(text)
    whole = "".join(parts)
    out: list[str] = []
    at = 0
    for end, n in sorted(marks):
        out.append(escape(whole[at:end]))
        out.append(f"[{n}]")
        at = end
    out.append(escape(whole[at:]))
    return "".join(out)
