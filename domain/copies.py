"""A response arriving again, judged against the copy stored (scenarios 26 and 29).

A capture ingested again, or a stream sent again after a kill, brings a response whose id
the conversation holds. Each copy is *whole* (it ended `completed` or `failed`) or *cut
short* (it ended `abandoned`: a stream cut off, a writer gone, a `repair`). Both must open
the same way (`digests.same_start`: model, origin, the request where both have one), or
the copy is another response under the same id. Then:

| stored \\ arriving | cut short                                  | whole                   |
|-------------------|--------------------------------------------|-------------------------|
| whole             | already stored                             | already stored if the   |
|                   |                                            | digests are equal       |
| cut short         | the next attempt if it holds more blocks   | the next attempt        |
|                   | (or as many, larger); else already stored  |                         |

A whole copy with another digest is `ResponseConflict`, nothing written. Blocks are not
compared one by one where a copy is cut short: a stream cut inside a block records that
block as far as it arrived, and what a decoder flushes at a cut (the response's own
fields as the stream had them, say) differs from what the whole response ends with. The
attempt cut short stays in the log, and the audit lists it. Only while the stored copy is
cut short is the arriving copy held in memory, and only until it holds more blocks than
that copy; the recorder then records it from the start as the next attempt.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NoReturn

from convstore.domain.digests import Keyed, digest_for, same_response, same_start
from convstore.domain.errors import ResponseConflict
from convstore.domain.events import Event, ResponseEnded, ResponseStarted
from convstore.domain.settled import StoredResponse

__all__ = ["judge_copy"]


def judge_copy(
    started: ResponseStarted,
    rest: Iterator[Event],
    stored: StoredResponse,
    stored_events: Iterable[Event],
    keyed: Keyed | None = None,
) -> list[Event] | None:
    """Judge an arriving copy (`started`, then `rest`) against the stored attempt.

    `stored_events` are the stored attempt's events from its ResponseStarted on. Returns
    None when the copy is already stored (`rest` consumed to its end), or the drafts taken
    from `rest` so far when it is to be recorded as the next attempt (`rest` then holds
    the remainder). Raises ResponseConflict (nothing written) for another response.
    """
    stored_iter = iter(stored_events)
    first = next(stored_iter, None)  # None: stored where a fork came from, not read here
    if first is not None and (
        not isinstance(first, ResponseStarted) or not same_start(first, started)
    ):
        _conflict(started, "its start (model, origin or request) differs")
    if not stored.cut:
        return _against_whole(started, rest, stored, keyed)
    blocks = list(_blocks(stored_iter, started.response_id))
    held: list[Event] = []
    for draft in rest:
        held.append(draft)
        if isinstance(draft, ResponseEnded):
            if draft.state != "abandoned":
                return held  # whole: it completes the copy cut short
            break
        if len(held) > len(blocks):
            return held  # more blocks than the copy stored: recorded, however it ends
    arrived = [d for d in held if not isinstance(d, ResponseEnded)]
    if len(arrived) == len(blocks) and sum(map(_size, arrived)) > sum(map(_size, blocks)):
        return held  # as many blocks, and its last ones arrived further
    return None


def _against_whole(
    started: ResponseStarted,
    rest: Iterator[Event],
    stored: StoredResponse,
    keyed: Keyed | None,
) -> list[Event] | None:
    """A copy of a whole response: already stored when cut short, or when whole with the
    stored digest (under its version); else a conflict."""
    digest = digest_for(stored.digest, keyed)
    digest.add(started)
    for draft in rest:
        if isinstance(draft, ResponseEnded):
            if draft.state == "abandoned":
                return None  # a part of the whole copy stored
            digest.add(draft)
            if same_response(stored.digest, digest.value()):
                return None
            _conflict(started, "its content differs")
        digest.add(draft)
    return None  # the stream ended before the response did: cut short


def _blocks(events: Iterator[Event], response_id: str) -> Iterator[Event]:
    """The stored attempt's blocks, up to (not including) its ResponseEnded."""
    for event in events:
        if isinstance(event, ResponseEnded) and event.response_id == response_id:
            return
        if getattr(event, "response_id", None) == response_id:
            yield event


def _size(event: Event) -> int:
    """How much of a block arrived: its text and payload."""
    text = getattr(event, "text", "")
    payload = getattr(event, "payload", None)
    return (len(text) if isinstance(text, str) else 0) + (
        len(payload.raw) if payload is not None else 0
    )


def _conflict(started: ResponseStarted, why: str) -> NoReturn:
    raise ResponseConflict(
        f"response {started.response_id!r} is already stored with different content ({why}); "
        "nothing was written"
    )
