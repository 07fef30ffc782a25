"""A response arriving again, judged against the copy stored (scenarios 26 and 29).

A capture ingested again, or a stream sent again after a kill, brings a response whose id
the conversation holds. Each copy is *whole* (it ended `completed` or `failed`) or *cut
short* (it ended `abandoned`: a stream cut off, a writer gone, a `repair`). The judgement:

| stored \\ arriving | cut short                            | whole                        |
|-------------------|--------------------------------------|------------------------------|
| whole             | already stored if a prefix of it     | already stored if the digest |
|                   |                                      | is equal                     |
| cut short         | already stored if a prefix of it;    | the next attempt, if it      |
|                   | the next attempt if it holds more    | extends the stored copy      |

Anything else is another response under the same id: `ResponseConflict`, nothing written.
Blocks are compared one by one as version 2 digests them (`digests.block_key`); a stream
cut inside a block records that block as far as it arrived, so the last block of the
shorter copy may differ from its counterpart. Only while the stored copy is cut short is
the arriving copy held in memory, and only until it is known to hold more (at most the
stored copy's length); the recorder then records it from the start as the next attempt.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NoReturn

from convstore.domain.conversation import StoredResponse
from convstore.domain.digests import block_key, digest_for, same_response, same_start
from convstore.domain.errors import ResponseConflict
from convstore.domain.events import Event, ResponseEnded, ResponseStarted

__all__ = ["judge_copy"]


def judge_copy(
    started: ResponseStarted,
    rest: Iterator[Event],
    stored: StoredResponse,
    stored_events: Iterable[Event],
) -> list[Event] | None:
    """Judge an arriving copy (`started`, then `rest`) against the stored attempt.

    `stored_events` are the stored attempt's events from its ResponseStarted on. Returns
    None when the copy is already stored (`rest` consumed to its end), or the drafts taken
    from `rest` so far when it is to be recorded as the next attempt (`rest` then holds
    the remainder). Raises ResponseConflict (nothing written) for another response.
    """
    response_id = started.response_id
    stored_iter = iter(stored_events)
    first = next(stored_iter, None)
    if not isinstance(first, ResponseStarted) or not same_start(first, started):
        _conflict(started, "its start (model, origin or request) differs")
    blocks = _blocks(stored_iter, response_id)
    digest = None if stored.cut else digest_for(stored.digest)
    if digest is not None:
        digest.add(started)
    held: list[Event] = []
    count = 0
    differs_at: int | None = None
    end: ResponseEnded | None = None
    last_sizes = (0, 0)
    for draft in rest:
        if isinstance(draft, ResponseEnded):
            end = draft
            break
        if digest is not None:
            digest.add(draft)
        else:
            held.append(draft)
        counterpart = next(blocks, None)
        if counterpart is None:  # the copy holds more blocks than the stored attempt
            if stored.cut and differs_at in (None, count - 1):
                return held
            _conflict(started, f"it has more blocks than the whole copy stored ({count})")
        if differs_at is not None:  # a difference before the last block of either copy
            _conflict(started, f"block {differs_at + 1} differs")
        mine, theirs = block_key(draft), block_key(counterpart)
        if mine != theirs:
            differs_at = count
            last_sizes = (_size(draft), _size(counterpart))
        count += 1
    cut = end is None or end.state == "abandoned"
    stored_has_more = next(blocks, None) is not None
    if not stored.cut:
        if end is not None and not cut:
            assert digest is not None
            digest.add(end)
            if same_response(stored.digest, digest.value()):
                return None
            _conflict(started, "its content differs")
        if differs_at is None or differs_at == count - 1:
            return None  # a part of the whole copy stored
        _conflict(started, f"block {differs_at + 1} differs")
    if cut:
        if differs_at is None:
            return None  # the same blocks, or fewer of them
        if stored_has_more or last_sizes[0] <= last_sizes[1]:
            return None  # its last block is the stored one cut shorter (or no longer)
        return [*held, *([end] if end is not None else [])]
    if stored_has_more or end is None:
        _conflict(started, "the copy stored, though cut short, has more blocks")
    return [*held, end]


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
