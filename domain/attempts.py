"""Which copy of a response is read, and where: the reading order of a conversation's log.

A response is identified by (response id, attempt). When a copy cut short is completed by
a later copy (`domain.copies`), the log keeps both where they were recorded: the cut copy
in its place, the later one at the end. Every reading (the portable reading, `show`,
search, the audit's spend, replay) reads the newest attempt *at the position of the
first*, and no other attempt; the audit lists the ones passed over (`superseded`).

The later copy usually comes in a turn of its own, started only to hold it (the first
copy's turn ended when it was cut short). The reading then goes on in the first copy's
turn: it leaves out the end the cut gave that turn and the start of the later one, whose
end (if it has one yet) ends the first's; a turn a passed-over attempt filled alone is
left out. So a conversation completed by re-sending reads as if it had been recorded
whole, and so does what was recorded after it.
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
    renamed: dict[str, str] = {}
    """Turns merged into the first attempt's turn: their id → that turn's."""
    for attempts in spans.values():
        first, read = attempts[0], attempts[-1]
        put[first.start] = (first, read)
        for later in attempts[1:]:
            skipped.update(range(later.start, later.stop))
            if later is not read:
                _skip_own_turn(log, later, skipped)
        _merge_turn(log, first, read, skipped, renamed)
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
            event = log[index]
            if isinstance(event, TurnEnded) and event.turn_id in renamed:
                event = msgspec.structs.replace(event, turn_id=renamed[event.turn_id])
            out.append(event)
        index += 1
    return out


def _opened_for(log: Sequence[Event], span: _Span) -> TurnStarted | None:
    """The turn started only to hold `span` (a continuation just before it), if any."""
    before = span.start - 1
    opened = log[before] if before >= 0 else None
    if isinstance(opened, TurnStarted) and opened.trigger == "continuation":
        return opened
    return None


def _skip_own_turn(log: Sequence[Event], span: _Span, skipped: set[int]) -> None:
    """Leave out the turn a passed-over attempt filled alone (its start and its end)."""
    opened = _opened_for(log, span)
    closed = log[span.stop] if span.stop < len(log) else None
    if opened is not None and isinstance(closed, TurnEnded) and closed.turn_id == opened.turn_id:
        skipped.update((span.start - 1, span.stop))


def _merge_turn(
    log: Sequence[Event], first: _Span, read: _Span, skipped: set[int], renamed: dict[str, str]
) -> None:
    """When the first attempt's turn ended with it and the attempt read opened a turn of
    its own, the reading goes on in the first attempt's turn: that end and that start are
    left out, and the later turn's end (if any) ends the first's."""
    opened = _opened_for(log, read)
    ended = log[first.stop] if first.stop < len(log) else None
    if opened is None or not isinstance(ended, TurnEnded):
        return
    skipped.update((read.start - 1, first.stop))
    renamed[opened.turn_id] = ended.turn_id


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
