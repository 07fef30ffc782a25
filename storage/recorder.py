"""The recorder interface every backend implements: eventsourcing's, plus the fast paths.

eventsourcing's `ApplicationRecorder` and `TrackingRecorder` (notifications, tracking) are
kept so its contract tests and projection runners work unchanged; the extra methods let
the repository append with a snapshot in one transaction and replay without building a
`StoredEvent` per row, and let a projection write its view rows and its tracking record in
one transaction of the events' own database (`view_transaction`).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.persistence import ApplicationRecorder, StoredEvent, TrackingRecorder

from convstore.domain.service import ConversationFilter
from convstore.storage.catalogue import CatalogueEntry, CatalogueRow
from convstore.storage.groups import GROUP_EVERY, GROUP_WITHIN, CommitGroup


class SnapshotRecord(msgspec.Struct, frozen=True):
    """A conversation's state as of one version."""

    originator_id: UUID
    version: int
    state: bytes
    settled: Sequence[tuple[str, bytes]] = ()
    """(key, value) of each item the state let go (`domain.settled`), written to the
    `settled` table at `version`, in the snapshot's transaction."""


class FirstEvent(msgspec.Struct, frozen=True):
    """A conversation's first event, for listings."""

    originator_id: UUID
    state: bytes
    events: int
    """How many events the conversation holds."""


class ResponseRow(msgspec.Struct, frozen=True):
    """One provider response's place in the store: the `responses` table's row. The key
    (provider, server, response id, attempt) is unique store-wide."""

    provider: str
    server: str
    response_id: str
    attempt: int
    originator_id: UUID
    """The conversation holding it."""
    originator_version: int
    """Its ResponseStarted's version there."""


class PrefixRow(msgspec.Struct, frozen=True):
    """A conversation indexed by a prefix digest (`0005_prefixes`)."""

    digest: bytes
    opaque: bytes
    """The digest with the opaque values (signatures, ids) too: a tie's first test."""
    originator_id: UUID
    version: int
    """The version of the conversation's reading the digests were taken at."""
    position: int
    """Its place in the index: higher is more recent."""


class AppliedMigration(msgspec.Struct, frozen=True):
    """One migration a store records (`storage.migrations`)."""

    position: int
    name: str
    applied_at: str
    """When it was applied, in the database's clock (ISO 8601)."""


class ConversationRecorder(ApplicationRecorder, TrackingRecorder, ABC):
    """Stores conversation events, snapshots and tracking records in one database."""

    migrated: tuple[str, ...] = ()
    """The migrations this recorder applied when it opened the store (a writer's)."""
    read_only: bool = False
    """True for a reader: it writes nothing, migrates nothing, creates nothing."""
    unseal: Callable[[bytes], bytes] | None = None
    """On an encrypted store, stored bytes → the same with their content decrypted
    (`storage.ciphers.StoreCiphers.unseal`), for readers of raw states (projections)."""

    def secure(self) -> None:
        """Have every connection overwrite what it deletes (an encrypted store's)."""

    @abstractmethod
    def scrub(self, tables: Sequence[str]) -> None:
        """After a forget's deletes: leave no old copy of deleted rows of `tables` in the
        database's files (SQLite: checkpoint the WAL with TRUNCATE; PostgreSQL: VACUUM
        them)."""

    @abstractmethod
    def applied_migrations(self) -> list[AppliedMigration]:
        """The migrations the store records, in order."""

    @abstractmethod
    def has_table(self, table: str) -> bool:
        """Whether the store has `table` (a view's tables exist once a writer made them)."""

    @abstractmethod
    def append(
        self,
        stored_events: Sequence[StoredEvent],
        snapshot: SnapshotRecord | None = None,
        responses: Sequence[ResponseRow] = (),
        catalogue: CatalogueRow | None = None,
    ) -> None:
        """Insert events (and replace a snapshot, index `responses`, and write `catalogue`
        over its conversation's catalogue row) in one transaction. Each conversation the
        events start gets a catalogue row, given or not. (eventsourcing's `insert_events`
        returns the notification ids; an append, on the hot path, does not ask for them.)

        Raises IntegrityError when a (conversation, version) is already taken, and its
        subclass ResponseTaken when a response's key is (nothing written either way).
        """

    _local: threading.local
    """Per thread: its connections, and its open commit group (`group`)."""
    _topic_ids: dict[str, int]
    _topics: dict[int, str]

    @contextmanager
    def grouped(
        self,
        *,
        every: int = GROUP_EVERY,
        within: float = GROUP_WITHIN,
        lost: Callable[[], None] = lambda: None,
    ) -> Iterator[CommitGroup]:
        """This thread's appends committed together, each in a savepoint of its own, until
        the block ends (`storage.groups`): what is open then is committed, unless the block
        raised out of an append that lost the transaction. While its transaction is open,
        the thread reads what the group wrote. `lost` runs when a failed commit lost
        appends (the topic caches are dropped then too)."""
        if getattr(self._local, "group", None) is not None:
            raise RuntimeError("a group is already open on this thread")

        def forget() -> None:
            self._topic_ids.clear()  # a topic row inserted in the lost transaction is gone
            self._topics.clear()
            lost()

        with self._group(every=every, within=within, lost=forget) as group:
            self._local.group = group
            try:
                try:
                    yield group
                finally:
                    group.commit()
            finally:
                self._local.group = None

    @abstractmethod
    def _group(
        self, *, every: int, within: float, lost: Callable[[], None]
    ) -> AbstractContextManager[CommitGroup]:
        """A new group on this thread's writing connection, its driver errors translated."""

    @abstractmethod
    def select_responses(self, provider: str, server: str, response_id: str) -> list[ResponseRow]:
        """Where the store holds a provider response, each attempt once, in attempt order
        (none in a store not migrated to `0002_responses` yet)."""

    @abstractmethod
    def select_states(self, originator_id: UUID, *, gt: int = 0) -> list[tuple[int, bytes]]:
        """(version, stored bytes) of one conversation's events after version `gt`, in order."""

    @abstractmethod
    def prefix_key(self) -> bytes:
        """The store's key for prefix digests (`0005_prefixes`), made on first use."""

    @abstractmethod
    def select_prefixes(self, digests: Sequence[bytes]) -> list[PrefixRow]:
        """The indexed conversations whose digest is one of `digests`, newest first."""

    @abstractmethod
    def select_settled(
        self, originator_id: UUID, keys: Sequence[str], upto: int
    ) -> dict[str, bytes]:
        """The values of settled items as of version `upto`: for each key settled at or
        before it, its newest value (keys not settled by then are left out)."""

    @abstractmethod
    def select_snapshot(self, originator_id: UUID) -> SnapshotRecord | None:
        """The newest snapshot of a conversation, if any."""

    @abstractmethod
    def select_first_events(
        self, *, offset: int = 0, limit: int = 50, newest_first: bool = False
    ) -> list[FirstEvent]:
        """First events of conversations in the order they were started (or the reverse)."""

    @abstractmethod
    def catalogued(self) -> bool:
        """Whether the store has the catalogue (`0003_catalogue`; a reader's may lack it)."""

    @abstractmethod
    def select_catalogue(
        self, where: ConversationFilter, *, offset: int, limit: int, newest_first: bool
    ) -> list[CatalogueEntry]:
        """A page of the catalogue's rows `where` lets through, in start order or reverse."""

    @abstractmethod
    def count_catalogue(self, where: ConversationFilter) -> int:
        """How many catalogue rows `where` lets through."""

    @abstractmethod
    def select_catalogue_entry(self, originator_id: UUID) -> CatalogueEntry | None:
        """One conversation's catalogue row (None without one, or without a catalogue)."""

    @abstractmethod
    def select_ids(self, low: UUID, high: UUID, limit: int) -> list[UUID]:
        """At most `limit` conversation ids from `low` to `high`, in order: a prefix's
        range, read from the catalogue's index (the events' where there is no catalogue)."""

    @abstractmethod
    def select_log(
        self, gt: int | None, limit: int, stop: int | None = None
    ) -> list[tuple[int, bytes]]:
        """(notification id, stored bytes) after id `gt`, up to `stop`, in id order.

        The notification log without a `Notification` per row (no topic lookup, no UUID):
        a follower decodes the events, which carry their own conversation and version.
        """

    @abstractmethod
    def view_transaction(
        self, name: str, *, track: int | None = None, after: int | None = None, reset: bool = False
    ) -> AbstractContextManager[Any]:
        """One transaction for projection `name`'s view rows, yielding the backend's cursor.

        The cursor is the driver's own (`sqlite3.Cursor`, `?` parameters; `psycopg.Cursor`,
        `%s` parameters, with `search_path` set to the store's schema), so view tables live
        beside the events. Concurrent transactions of one projection are serialized.
        `reset` first deletes the projection's tracking records (a rebuild). With `track`,
        the projection's position must be `after` (None: nothing processed) when the
        transaction begins, else `TrackingConflict` and nothing is written; when the block
        ends without error, tracking record `track` is inserted (a position at or below
        the projection's is refused with IntegrityError) and everything commits at once.
        Any error rolls everything back.
        """

    @abstractmethod
    def view_reader(self) -> AbstractContextManager[Any]:
        """A cursor for reading view tables (the same driver cursor as `view_transaction`)."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""
