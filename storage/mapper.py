"""Events ⇄ stored records, with msgspec: typed encoding eventsourcing's Transcoder can't do.

eventsourcing's `Transcoder` is never told an event's type, so typed decoding happens here,
in a `Mapper` of our own: one module-level decoder over the tagged union of every event
type is the validation boundary. Provider payload bytes are embedded in the record as-is.
"""

from __future__ import annotations

from functools import cache
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.persistence import Mapper, StoredEvent, Transcoder
from eventsourcing.utils import get_topic

from convstore.domain.errors import EventTooLarge, IntegrityError
from convstore.domain.events import ConversationEvent, Event

DEFAULT_MAX_EVENT_BYTES = 64 * 1024 * 1024

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ConversationEvent)


class MsgspecTranscoder(Transcoder):
    """eventsourcing's Transcoder interface over msgspec JSON (untyped values)."""

    def encode(self, obj: Any) -> bytes:
        """Encode any msgspec-encodable value."""
        return _encoder.encode(obj)

    def decode(self, data: bytes) -> Any:
        """Decode to plain Python values."""
        return msgspec.json.decode(data)


@cache
def topic_of(cls: type[Event]) -> str:
    """eventsourcing's topic for an event class."""
    return get_topic(cls)


class EventMapper(Mapper[UUID]):
    """Maps conversation events to stored records and back, refusing oversized events."""

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        super().__init__(transcoder=MsgspecTranscoder())
        self.max_event_bytes = max_event_bytes

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        """Encode one event; raises EventTooLarge over `max_event_bytes`."""
        event: Event = domain_event
        state = _encoder.encode(event)
        if len(state) > self.max_event_bytes:
            raise EventTooLarge(
                f"{type(event).__name__} at version {event.originator_version} encodes to "
                f"{len(state)} bytes, over limits.max_event_bytes = {self.max_event_bytes}"
            )
        return StoredEvent(
            originator_id=event.originator_id,
            originator_version=event.originator_version,
            topic=topic_of(type(event)),
            state=state,
        )

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        """Decode one stored record into its typed event."""
        return self.decode(stored_event.state)

    @staticmethod
    def decode(state: bytes) -> ConversationEvent:
        """Decode stored bytes; raises IntegrityError for bytes that are not an event."""
        try:
            return _decoder.decode(state)
        except (msgspec.DecodeError, RecursionError) as error:
            raise IntegrityError(f"stored event cannot be decoded: {error}") from None
