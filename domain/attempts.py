"""Which copy of a response is read, and where: the reading order of a conversation's log.

A response is identified by (response id, attempt). When a copy cut short is completed by
a later copy (`domain.copies`), the log keeps both where they were recorded: the cut copy
in its place, the later one at the end. Every reading (the portable reading, `show`,
search, the audit's spend, replay) reads the newest attempt *at the position of the
first*, and no other attempt; the audit lists the ones passed over (`superseded`).

The later copy usually comes in a turn of its own, started only to hold it (the first
copy's turn ended when it was cut short). The reading then closes the first copy's turn
as that turn closed, and leaves the empty turn out, so a conversation completed by
re-sending reads as if it had been recorded whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import msgspec

from convstore.domain.events import Event, ResponseEnded, ResponseStarted, TurnEnded, TurnStarted

__all__ = ["Superseded", "reading", "superseded"]


class Superseded(msgspec.Struct, frozen=True, kw_only=True):
    """An attempt the reading passes over: one cut short, that a later attempt of its
    response completed."""

    response_id: str
    attempt: int
    first_version: int
    last_version: int
    """Its ResponseStarted's version and its last event's."""
    state: str
    """How it ended (`abandoned`), or `open`."""
    read_attempt: int
    """The attempt every reading uses instead."""


@dataclass(slots=True)
class _Span:
    attempt: int
    start: int
    stop: int
    """Index after its last event."""


def _spans(events: Sequence[Event]) -> dict[str, list[_Span]]:
    """Each response's attempts (index ranges in `events`), for responses with several."""
    spans: dict[str, list[_Span]] = {}
    open_span: tuple[str, _Span] | None = None
    resent = False
    for index, event in enumerate(events):
        if isinstance(event, ResponseStarted):
            span = _Span(event.attempt, index, len(events))
            spans.setdefault(event.response_id, []).append(span)
            open_span = (event.response_id, span)
            resent = resent or event.attempt > 1
        elif (
            isinstance(event, ResponseEnded)
            and open_span is not None
            and event.response_id == open_span[0]
        ):
            open_span[1].stop = index + 1
            open_span = None
    if not resent:
        return {}
    return {rid: s for rid, s in spans.items() if len(s) > 1}


def reading(events: Iterable[Event]) -> list[Event]:
    """The events as read: each response's newest attempt at the position of its first."""
    log = events if isinstance(events, list) else list(events)
    spans = _spans(log)
    if not spans:
        return log
    put: dict[int, tuple[_Span, _Span]] = {}
    """A first attempt's start index → (that attempt, the attempt read in its place)."""
    skipped: set[int] = set()
    turn_end: dict[int, Event] = {}
    for attempts in spans.values():
        first, read = attempts[0], attempts[-1]
        put[first.start] = (first, read)
        for later in attempts[1:]:
            skipped.update(range(later.start, later.stop))
            closed = _own_turn(log, later, skipped)
            if later is read and closed is not None and _ends_turn(log, first):
                turn_end[first.stop] = msgspec.structs.replace(
                    log[first.stop], state=closed.state, reason=closed.reason
                )
    out: list[Event] = []
    index = 0
    while index < len(log):
        placed = put.get(index)
        if placed is not None:
            first, read = placed
            out.extend(log[read.start : read.stop])
            index = first.stop
            continue
        if index not in skipped:
            out.append(turn_end.get(index, log[index]))
        index += 1
    return out


def _own_turn(log: Sequence[Event], span: _Span, skipped: set[int]) -> TurnEnded | None:
    """When `span` fills a turn of its own (started only to hold it), skip that turn's
    start and end, and return the end."""
    before, after = span.start - 1, span.stop
    if before < 0 or after >= len(log):
        return None
    opened, closed = log[before], log[after]
    if (
        isinstance(opened, TurnStarted)
        and opened.trigger == "continuation"
        and isinstance(closed, TurnEnded)
        and closed.turn_id == opened.turn_id
    ):
        skipped.update((before, after))
        return closed
    return None


def _ends_turn(log: Sequence[Event], span: _Span) -> bool:
    """Whether the event after `span` ends the turn it is in."""
    return span.stop < len(log) and isinstance(log[span.stop], TurnEnded)


def superseded(events: Iterable[Event]) -> list[Superseded]:
    """The attempts a reading passes over, in log order."""
    log = events if isinstance(events, list) else list(events)
    passed: list[Superseded] = []
    for response_id, attempts in _spans(log).items():
        read = attempts[-1].attempt
        for span in attempts[:-1]:
            last = log[span.stop - 1]
            passed.append(
                Superseded(
                    response_id=response_id,
                    attempt=span.attempt,
                    first_version=log[span.start].originator_version,
                    last_version=last.originator_version,
                    state=last.state if isinstance(last, ResponseEnded) else "open",
                    read_attempt=read,
                )
            )
    return sorted(passed, key=lambda s: s.first_version)
