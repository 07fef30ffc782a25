"""Every error convstore raises on purpose, in one tree.

    ConvstoreError
    ├── InvariantViolation            a command the aggregate refuses; nothing is written
    │   ├── InvalidTransition         a lifecycle step not allowed (incl. after a terminal state)
    │   ├── UnknownToolCall           a tool response naming no request
    │   ├── ToolCallAlreadyAnswered   a second response to one request
    │   ├── DuplicateId               an id (call, activity, response) used twice
    │   ├── RangeOutOfBounds          an attribution range outside its text
    │   ├── ResponseNotOpen           a response's event outside its ResponseStarted/ResponseEnded
    │   ├── ResponseStillOpen         a user-side event, or a new response, while one is open
    │   │   └── ResponseBeingWritten  a write beside a response a live writer holds open
    │   ├── TurnStateError            turns that do not nest: end without start, start inside one
    │   ├── InvalidPayload            payload bytes that are not one JSON document
    │   ├── InvalidMetadata           a title or label that cannot be recorded
    │   └── InvalidRedaction          a redaction naming no text of the conversation
    ├── ConversationNotFound          no conversation with that id
    ├── ConversationForgotten         a conversation `forget` made unreadable (said, not failed)
    ├── ConcurrencyConflict           another writer appended first (optimistic concurrency)
    │   └── ResponseStoredElsewhere   a provider response another conversation holds
    ├── ResponseConflict              a stored response id arriving with different content
    ├── WriterAlive                   `repair` of a response whose writer still holds its lock
    ├── EventTooLarge                 an event over `limits.max_event_bytes`
    ├── IntegrityError                stored bytes that fail the hash chain
    ├── DecodeError                   provider input that cannot be read (truncated, malformed)
    ├── ConfigurationError            a setting that cannot be served
    ├── RedactedReplay                same-provider replay needing a redacted text's signature
    └── StorageError                  the database failed (PEP 249 names live in storage)

Every class carries a message a person can act on; only `ConvstoreError` subclasses are
shown to users without a traceback.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID


class ConvstoreError(Exception):
    """Base of every error convstore raises on purpose."""


class InvariantViolation(ConvstoreError):
    """A command the Conversation aggregate refuses; nothing was written."""


class InvalidTransition(InvariantViolation):
    """A lifecycle transition that the lifecycle does not allow."""


class UnknownToolCall(InvariantViolation):
    """A tool response that names no requested tool call."""


class ToolCallAlreadyAnswered(InvariantViolation):
    """A second response to a tool call that already has one."""


class DuplicateId(InvariantViolation):
    """An id that must be unique in its conversation was used twice."""


class RangeOutOfBounds(InvariantViolation):
    """An attribution range that does not lie inside its text."""


class ResponseNotOpen(InvariantViolation):
    """A response's event outside its ResponseStarted and ResponseEnded."""


class ResponseStillOpen(InvariantViolation):
    """An event that needs no open response arrived while one is open."""


class ResponseBeingWritten(ResponseStillOpen):
    """A write to a conversation refused (nothing written) because a live writer holds a
    response open in it: the write would sit inside that response, and turn the writer's
    next commit into a conflict."""


class TurnStateError(InvariantViolation):
    """Turn boundaries that do not nest."""


class InvalidPayload(InvariantViolation):
    """Provider payload bytes that are not exactly one JSON document."""


class InvalidMetadata(InvariantViolation):
    """A title or label that cannot be recorded (control characters, a label with
    whitespace, too long, one label both added and removed); nothing was written."""


class InvalidRedaction(InvariantViolation):
    """A redaction naming no event of the conversation, an event without text, or a span
    outside its text; nothing was written."""


class ConversationNotFound(ConvstoreError, KeyError):
    """No conversation has the given id."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "conversation not found"


class AmbiguousId(ConversationNotFound):
    """A short id more than one conversation's id starts with; nothing was done."""


class ConversationForgotten(ConvstoreError):
    """The conversation was forgotten (`convstore forget`): nothing of its content can be
    read or written any more."""

    def __init__(self, message: str, *, conversation_id: UUID, on: datetime) -> None:
        super().__init__(message)
        self.conversation_id = conversation_id
        self.on = on
        """When it was forgotten (the Forgotten event's timestamp)."""


class ConcurrencyConflict(ConvstoreError):
    """Another writer appended to the conversation first; reload and retry."""


class ResponseConflict(ConvstoreError):
    """A provider response id already stored arrived with different content."""


class ResponseStoredElsewhere(ConcurrencyConflict):
    """A provider response is already stored in another conversation: a response is stored
    once in the whole store. A concurrency conflict, because the usual cause is another
    ingest of the same capture that committed first: read again, and find it there."""

    def __init__(self, message: str, *, conversation_id: UUID | None = None) -> None:
        super().__init__(message)
        self.conversation_id = conversation_id
        """The conversation that holds it, where the store says so."""


class WriterAlive(ConvstoreError):
    """A repair refused: the open response's writer is alive (it still holds its lock)."""


class EventTooLarge(ConvstoreError):
    """An event whose encoding exceeds the configured `limits.max_event_bytes`."""


class IntegrityError(ConvstoreError):
    """Stored bytes that do not match the conversation's hash chain."""


class DecodeError(ConvstoreError, ValueError):
    """Provider input that cannot be read: truncated, malformed or not a response."""


class ConfigurationError(ConvstoreError):
    """A setting or option that cannot be served as given."""


class RedactedReplay(ConvstoreError):
    """Same-provider replay refused: a payload bound to a redacted text (a signature over
    it) would have to round-trip; nothing was sent or written."""

    def __init__(self, message: str, *, version: int) -> None:
        super().__init__(message)
        self.version = version
        """The redacted event's version."""


class StorageError(ConvstoreError):
    """The database failed; storage raises the PEP 249 named subclasses."""
