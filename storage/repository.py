"""The conversation repository: snapshots plus a typed read path over any recorder.

`load` folds the newest snapshot and the events after it; `save` writes the collected
events, and a new snapshot every `snapshot_every` versions, in one transaction.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import msgspec

from convstore.domain.conversation import Conversation, ConversationState
from convstore.domain.errors import ConcurrencyConflict, ConversationNotFound
from convstore.domain.events import Event, Started
from convstore.domain.service import ConversationSummary
from convstore.domain.vocabulary import ConversationId
from convstore.storage.errors import IntegrityError
from convstore.storage.mapper import EventMapper
from convstore.storage.recorder import ConversationRecorder, SnapshotRecord

DEFAULT_SNAPSHOT_EVERY = 500

_encode_state = msgspec.msgpack.Encoder().encode
_decode_state = msgspec.msgpack.Decoder(ConversationState).decode


class EventRepository:
    """Loads and saves Conversation aggregates through a recorder."""

    def __init__(
        self,
        recorder: ConversationRecorder,
        mapper: EventMapper | None = None,
        *,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
    ) -> None:
        self.recorder = recorder
        self.mapper = mapper or EventMapper()
        self.snapshot_every = snapshot_every

    def load(self, conversation_id: ConversationId) -> Conversation:
        """The conversation as of its newest event; raises ConversationNotFound."""
        snapshot = self.recorder.select_snapshot(conversation_id)
        state, version = None, 0
        if snapshot is not None:
            state, version = _decode_state(snapshot.state), snapshot.version
        rows = self.recorder.select_states(conversation_id, gt=version)
        if snapshot is None and not rows:
            raise ConversationNotFound(f"no conversation {conversation_id} in this store")
        decode = self.mapper.decode
        # A generator, not a list: each event is dropped once applied, so replay's peak
        # memory is the rows plus one event, not the rows plus every decoded event.
        return Conversation.replay(
            conversation_id, (decode(state) for _, state in rows), state=state, version=version
        )

    def save(self, conversation: Conversation) -> Sequence[int]:
        """Write the collected events atomically; raises ConcurrencyConflict, EventTooLarge."""
        events = conversation.pending
        if not events:
            return []
        stored = [self.mapper.to_stored_event(event) for event in events]
        snapshot = None
        every = self.snapshot_every
        if every and conversation.version // every > (conversation.version - len(events)) // every:
            snapshot = SnapshotRecord(
                conversation.id, conversation.version, _encode_state(conversation.state)
            )
        try:
            ids = self.recorder.append(stored, snapshot)
        except IntegrityError:
            raise ConcurrencyConflict(
                f"conversation {conversation.id} changed while this write was prepared "
                f"(version {events[0].originator_version} is taken); reload and retry"
            ) from None
        conversation.collect_events()
        return ids

    def events(self, conversation_id: ConversationId, *, after: int = 0) -> Iterator[Event]:
        """Stored events in version order after `after`; raises ConversationNotFound."""
        rows = self.recorder.select_states(conversation_id, gt=after)
        if not rows and after == 0:
            raise ConversationNotFound(f"no conversation {conversation_id} in this store")
        decode = self.mapper.decode
        return (decode(state) for _, state in rows)

    def summaries(self, *, offset: int = 0, limit: int = 50) -> list[ConversationSummary]:
        """Conversations in the order they started."""
        summaries = []
        for first in self.recorder.select_first_events(offset=offset, limit=limit):
            started = self.mapper.decode(first.state)
            title, labels = (
                (started.title, started.labels) if isinstance(started, Started) else ("", ())
            )
            summaries.append(
                ConversationSummary(
                    id=ConversationId(first.originator_id),
                    title=title,
                    labels=labels,
                    created_on=started.timestamp,
                    events=first.events,
                )
            )
        return summaries
