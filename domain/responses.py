"""Recording one provider response from a stream of drafts, whatever its provider.

A provider decoder yields `ResponseStarted`, one draft per closed block, then
`ResponseEnded`. This module records them: in one transaction when they fit the buffer
bound, otherwise in consecutive transactions at block boundaries, so memory stays flat
and no reader sees half an event. A live stream (a person watching) passes `ready`: the
recorder then also commits at each block boundary where no further draft is ready yet,
so what arrived is stored while it streams, in as few commits as the writer can keep up
with. It also makes ingestion idempotent (a response id already stored is judged against
the copy stored by `domain.copies`: already stored, the next attempt of a copy cut
short, or a conflict; never overwritten) and refuses an event over `max_event_bytes` by
ending the response `failed` (`too_large`), keeping what came before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import Final

import msgspec

from convstore.domain.conversation import Conversation
from convstore.domain.copies import judge_copy
from convstore.domain.digests import ResponseDigest, new_digest
from convstore.domain.errors import ConvstoreError, DecodeError, EventTooLarge
from convstore.domain.events import (
    Event,
    ResponseEnded,
    ResponseStarted,
    TurnEnded,
    TurnStarted,
)
from convstore.domain.vocabulary import EndState, ErrorInfo, ResponseId, Writer

DEFAULT_FLUSH_BYTES: Final = 4 * 1024 * 1024
"""Buffer bound: a response's events are committed together while they fit in it."""

CONTINUES: Final = frozenset({"tool_use", "pause"})
"""Finish reasons after which the turn goes on (tool results, a paused-turn continuation)."""


class ResponseOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What became of one ingested response."""

    response_id: ResponseId
    ended: EndState
    events: int
    """Events recorded for it (0 when it was already stored)."""
    already_stored: bool = False
    attempt: int = 1
    """The attempt recorded (above 1: a copy completing one cut short), or found stored."""


class ResponseRecorder:
    """Records one response's drafts into a conversation held in memory while it streams."""

    def __init__(
        self,
        conversation: Conversation,
        save: Callable[[Conversation], object],
        *,
        flush_bytes: int = DEFAULT_FLUSH_BYTES,
        max_event_bytes: int | None = None,
        stored_events: Callable[[int], Iterable[Event]] | None = None,
        ready: Callable[[], bool] | None = None,
        continues: frozenset[str] = CONTINUES,
    ) -> None:
        self.conversation = conversation
        self.save = save
        self.flush_bytes = flush_bytes
        self.max_event_bytes = max_event_bytes
        self.stored_events = stored_events or self._pending_from
        """The conversation's events from a version on (a stored response's, to judge a
        copy of it); by default those still pending in memory."""
        self.ready = ready
        """Whether a further draft is ready now; when it says no at a block boundary, what
        is pending is committed (a live stream). None: commit only at the buffer bound."""
        self.continues = continues
        """Finish reasons after which the turn stays open for the next response."""
        cipher = conversation.cipher
        self._keyed = None if cipher is None else cipher.keyed
        """Response digests keyed on an encrypted store (`sealing.Cipher.keyed`)."""

    def _pending_from(self, version: int) -> Iterable[Event]:
        return [e for e in self.conversation.pending if e.originator_version >= version]

    def record(self, drafts: Iterable[Event], *, writer: Writer | None = None) -> ResponseOutcome:
        """Record a response's drafts (the first is its ResponseStarted) and commit them.

        Raises DecodeError when the drafts hold no response (nothing written) and
        ResponseConflict when its id is stored with other content (nothing written).
        """
        drafts = iter(drafts)
        started = next(drafts, None)
        if not isinstance(started, ResponseStarted):
            raise DecodeError("the input holds no response: it ends before the response starts")
        response_id = started.response_id
        attempt = 1
        stored = self.conversation.stored_response(response_id)
        if stored is not None:
            # Version 0: stored in the conversation a fork came from, not readable here.
            copy = self.stored_events(stored.version) if stored.version else ()
            taken = judge_copy(started, drafts, stored, copy, self._keyed)
            if taken is None:
                return ResponseOutcome(
                    response_id=response_id,
                    ended=stored.ended or "abandoned",
                    events=0,
                    already_stored=True,
                    attempt=stored.attempt,
                )
            attempt = stored.attempt + 1
            drafts = chain(taken, drafts)
        digest = new_digest(self._keyed)
        digest.add(started)
        count_before = self.conversation.version
        if self.conversation.state.open_turn is None:
            self.conversation.record(
                TurnStarted(turn_id=self.conversation.next_turn_id(), trigger="continuation")
            )
        self.conversation.record(msgspec.structs.replace(started, writer=writer, attempt=attempt))
        if self.ready is not None and not self.ready():
            self.save(self.conversation)  # live: the response is open in the store at once
        try:
            end = self._record_blocks(drafts, digest, response_id)
        except ConvstoreError as error:  # the decoder failed mid-stream: keep what arrived
            end = ResponseEnded(
                response_id=response_id,
                state="failed",
                finish_reason="error",
                error=ErrorInfo(type=type(error).__name__, message=str(error)),
            )
        digest.add(end)
        self.conversation.record(msgspec.structs.replace(end, digest=digest.value()))
        turn = self.conversation.state.open_turn
        if turn is not None and (
            end.state != "completed" or end.finish_reason not in self.continues
        ):
            # The assistant yielded (or the response broke off): the turn is over.
            self.conversation.record(TurnEnded(turn_id=turn, state=end.state))
        self.save(self.conversation)
        return ResponseOutcome(
            response_id=response_id,
            ended=end.state,
            events=self.conversation.version - count_before,
            attempt=attempt,
        )

    def _record_blocks(
        self, drafts: Iterator[Event], digest: ResponseDigest, response_id: ResponseId
    ) -> ResponseEnded:
        pending_bytes = 0
        for draft in drafts:
            if isinstance(draft, ResponseEnded):
                return draft
            try:  # stamped and sealed, its one encoding made: applied once it has room
                sealed = self.conversation.seal(draft, max_bytes=self.max_event_bytes)
            except EventTooLarge as error:
                return ResponseEnded(
                    response_id=response_id,
                    state="failed",
                    finish_reason="error",
                    stop_reason="too_large",
                    error=ErrorInfo(type="too_large", message=str(error)),
                )
            size = len(sealed.encoded)
            if pending_bytes and pending_bytes + size > self.flush_bytes:
                # The block does not fit beside what is pending: commit that first, so the
                # buffer never holds more than its bound besides one block.
                self.save(self.conversation)
                pending_bytes = 0
            digest.add(draft)
            self.conversation.record_sealed(sealed)
            # Released now, not when the next draft arrives: the decoder assembles the next
            # block meanwhile, and this one's text must not stay alive beside it.
            del draft, sealed
            pending_bytes += size
            if pending_bytes >= self.flush_bytes or (self.ready is not None and not self.ready()):
                self.save(self.conversation)
                pending_bytes = 0
        return ResponseEnded(response_id=response_id, state="abandoned", stop_reason="stream_ended")
