"""The recorder interface every backend implements: eventsourcing's, plus the fast paths.

eventsourcing's `ApplicationRecorder` and `TrackingRecorder` (notifications, tracking) are
kept so its contract tests and projection runners work unchanged; the extra methods let
the repository append with a snapshot in one transaction and replay without building a
`StoredEvent` per row.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from uuid import UUID

import msgspec
from eventsourcing.persistence import ApplicationRecorder, StoredEvent, TrackingRecorder


class SnapshotRecord(msgspec.Struct, frozen=True):
    """A conversation's state as of one version."""

    originator_id: UUID
    version: int
    state: bytes


class FirstEvent(msgspec.Struct, frozen=True):
    """A conversation's first event, for listings."""

    originator_id: UUID
    state: bytes
    events: int
    """How many events the conversation holds."""


class ConversationRecorder(ApplicationRecorder, TrackingRecorder, ABC):
    """Stores conversation events, snapshots and tracking records in one database."""

    @abstractmethod
    def append(
        self, stored_events: Sequence[StoredEvent], snapshot: SnapshotRecord | None = None
    ) -> list[int]:
        """Insert events (and replace a snapshot) in one transaction; return notification ids.

        Raises IntegrityError when a (conversation, version) is already taken.
        """

    @abstractmethod
    def select_states(self, originator_id: UUID, *, gt: int = 0) -> list[tuple[int, bytes]]:
        """(version, stored bytes) of one conversation's events after version `gt`, in order."""

    @abstractmethod
    def select_snapshot(self, originator_id: UUID) -> SnapshotRecord | None:
        """The newest snapshot of a conversation, if any."""

    @abstractmethod
    def select_first_events(self, *, offset: int = 0, limit: int = 50) -> list[FirstEvent]:
        """First events of conversations in the order they were started."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""
