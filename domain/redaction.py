"""Redaction overlays: a `Redacted` event hides a span of an earlier event's text, or all of
it, from every portable reading, without touching the stored bytes (`convstore redact`).

`draft` checks a redaction against the event it names (it must hold text, the span must
lie inside it) and makes the `Redacted` draft; `overlay` is what every portable reading
folds instead of the raw log: each redacted event with its hidden spans replaced by
`MARK`, its citations' ranges moved to match, its payload left out (a payload holds the
text it came with), and the `Redacted` events themselves left out. Spans are counted in
Unicode code points of the event's *stored* text (a `UserMessage`'s blocks joined with
nothing between them); several redactions of one event hide the union of their spans.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from convstore.domain import errors
from convstore.domain.events import (
    AssistantText,
    ContextInjected,
    Event,
    Reasoning,
    Redacted,
    ToolCallResponded,
    UserMessage,
)
from convstore.domain.vocabulary import Attribution, TextRange

__all__ = ["MARK", "draft", "hidden", "marked", "marked_blocks", "merged", "overlay", "text_of"]

MARK: Final = "[redacted]"
"""What a reading shows in place of each hidden span."""

Spans = list[tuple[int, int]] | None
"""The hidden spans of one event, merged and sorted; None: the whole text."""


def text_of(event: Event) -> str | None:
    """The text a redaction of `event` counts in; None when `event` holds no text."""
    if isinstance(event, UserMessage):
        return "".join(event.blocks)
    if isinstance(event, AssistantText | ContextInjected | Reasoning):
        return event.text
    if isinstance(event, ToolCallResponded):
        return event.content
    return None


def draft(
    target: Event | None, version: int, span: tuple[int, int] | None, reason: str
) -> Redacted:
    """The `Redacted` draft hiding `span` (None: all) of `target`'s text, the event at
    `version` (None: the conversation has none). Raises InvalidRedaction."""
    if target is None:
        raise errors.InvalidRedaction(
            f"the conversation has no event {version} (`convstore show --json` lists versions)"
        )
    if isinstance(target, Redacted):
        raise errors.InvalidRedaction(f"event {version} is a redaction itself: it holds no text")
    text = text_of(target)
    if not text:
        raise errors.InvalidRedaction(
            f"event {version} is a {type(target).__name__}, which holds no text to redact "
            "(user messages, context, assistant text, reasoning and tool results do)"
        )
    if span is not None and not 0 <= span[0] < span[1] <= len(text):
        raise errors.InvalidRedaction(
            f"span {span[0]}:{span[1]} is not inside event {version}'s text of {len(text)} "
            "code points (START:END, 0 <= START < END <= its length)"
        )
    return Redacted(event_version=version, span=span, reason=reason)


def hidden(events: Sequence[Event]) -> dict[int, Spans]:
    """Each redacted event's version → its hidden spans (merged; None: the whole text)."""
    found: dict[int, list[tuple[int, int]] | None] = {}
    for event in events:
        if isinstance(event, Redacted):
            version = event.event_version
            if event.span is None:
                found[version] = None
            elif version not in found or found[version] is not None:
                found.setdefault(version, [])
                spans = found[version]
                assert spans is not None
                spans.append(event.span)
    return {v: None if s is None else merged(s) for v, s in found.items()}


def overlay(events: Sequence[Event], *, keep: bool = False) -> list[Event]:
    """The events as every portable reading sees them: each redacted one with its hidden
    text marked (`redacted`), the `Redacted` events left out (`keep`: left in, for a
    listing of the log, which folds them no further)."""
    marks = hidden(events)
    if not marks:
        return list(events)
    return [
        redacted(event, marks[event.originator_version])
        if event.originator_version in marks and not isinstance(event, Redacted)
        else event
        for event in events
        if keep or not isinstance(event, Redacted)
    ]


def marked(text: str, spans: Spans) -> str:
    """`text` with each span (merged, sorted; None: all of it) replaced by MARK."""
    if spans is None:
        return MARK
    out: list[str] = []
    at = 0
    for start, end in spans:
        out.append(text[at:start])
        out.append(MARK)
        at = end
    out.append(text[at:])
    return "".join(out)


def redacted(event: Event, spans: Spans) -> Event:
    """`event` with its hidden text marked and its payload left out."""
    if isinstance(event, UserMessage):
        return msgspec.structs.replace(event, blocks=marked_blocks(event.blocks, spans))
    if isinstance(event, AssistantText):
        return msgspec.structs.replace(
            event,
            text=marked(event.text, spans),
            attributions=_attributions(event.text, event.attributions, spans),
            payload=None,
        )
    if isinstance(event, ContextInjected):
        return msgspec.structs.replace(event, text=marked(event.text, spans))
    if isinstance(event, Reasoning):
        return msgspec.structs.replace(event, text=marked(event.text, spans), payload=None)
    if isinstance(event, ToolCallResponded):
        return msgspec.structs.replace(event, content=marked(event.content, spans), payload=None)
    return event


def merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spans sorted, overlapping or touching ones joined."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def marked_blocks(blocks: tuple[str, ...], spans: Spans) -> tuple[str, ...]:
    """A user message's blocks with the spans (over their concatenation) marked."""
    if spans is None:
        return (MARK,)
    out: list[str] = []
    offset = 0
    for block in blocks:
        end = offset + len(block)
        inside = [
            (max(s, offset) - offset, min(e, end) - offset)
            for s, e in spans
            if s < end and e > offset
        ]
        out.append(marked(block, inside) if inside else block)
        offset = end
    return tuple(out)


def _moved(position: int, spans: list[tuple[int, int]], *, end: bool) -> int:
    """Where offset `position` of the original text lies in the marked one; inside a hidden
    span, a start moves to its mark's start and an end to its mark's end."""
    shift = 0
    for start, stop in spans:
        if position < start or (end and position == start):
            break
        if position < stop or (end and position == stop):
            return start + shift + (len(MARK) if end else 0)
        shift += len(MARK) - (stop - start)
    return position + shift


def _attributions(
    text: str, attributions: tuple[Attribution, ...], spans: Spans
) -> tuple[Attribution, ...]:
    """Citations kept consistent with the marked text: a range moved, one wholly hidden
    left out with its citation, hidden text taken out of excerpts; none when all is."""
    if spans is None:
        return ()
    secrets = [text[start:end] for start, end in spans]
    out: list[Attribution] = []
    for attribution in attributions:
        span = attribution.range
        if span is not None:
            if any(start <= span.start and span.end <= stop for start, stop in spans):
                continue
            span = TextRange(
                start=_moved(span.start, spans, end=False), end=_moved(span.end, spans, end=True)
            )
        excerpt = attribution.excerpt
        if excerpt is not None:
            for secret in secrets:
                excerpt = excerpt.replace(secret, MARK)
        out.append(msgspec.structs.replace(attribution, range=span, excerpt=excerpt))
    return tuple(out)
