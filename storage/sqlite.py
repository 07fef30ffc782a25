"""The embedded backend: one SQLite file in WAL mode, with a write and read path of our own.

Writes take the database lock up front (`BEGIN IMMEDIATE`), insert a batch with
`executemany` and commit once: with `synchronous=FULL` a committed append survives power
loss. Notification ids are the events' rowids, assigned in commit order because SQLite
has one writer at a time, so a follower never skips an event of a still-open transaction;
within a batch they are consecutive (each row gets the largest rowid plus one), so the
last one (`last_insert_rowid()`) names them all.
Each thread has its own connection; WAL lets readers run beside the writer.
"""

from __future__ import annotations

import os
import random
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.persistence import Notification, StoredEvent, Subscription, Tracking

from convstore.domain.service import ConversationFilter
from convstore.storage import catalogue, migrations
from convstore.storage.catalogue import CatalogueEntry, CatalogueRow, sqlite_stamp
from convstore.storage.errors import (
    IntegrityError,
    OperationalError,
    StoreNotFound,
    TrackingConflict,
    translate,
    translating,
)
from convstore.storage.groups import CommitGroup
from convstore.storage.migrations import MIGRATIONS, Migration
from convstore.storage.recorder import (
    AppliedMigration,
    ConversationRecorder,
    FirstEvent,
    PrefixRow,
    ResponseRow,
    SnapshotRecord,
)

BUSY_TIMEOUT_MS = 5000
"""How long a writer waits for another's lock before a typed OperationalError."""

_NO_BUSY_HANDLER = "PRAGMA busy_timeout=0"
_PARAMETERS = 500
"""Digests looked up per query (SQLite's parameter limit is far above)."""

PAGE_SIZE = 8192
"""Page size of a new database file. Events of about a KiB leave on average half an event
unused at the end of each page: 15 % of a 4 KiB page, 7 % of an 8 KiB one."""


def _has_table(connection: sqlite3.Connection | sqlite3.Cursor, table: str) -> bool:
    row = connection.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    return row is not None


def _recorded(connection: sqlite3.Connection | sqlite3.Cursor) -> list[str] | None:
    """The names the `migrations` table records in order; None when there is no table."""
    if not _has_table(connection, "migrations"):
        return None
    rows = connection.execute("SELECT name FROM migrations ORDER BY position")
    return [str(row[0]) for row in rows]


def _writable(folder: Path) -> bool:
    """Whether files can be made in `folder` (a WAL store needs its `-wal` and `-shm`)."""
    return os.access(folder, os.W_OK) and not os.statvfs(folder).f_flag & os.ST_RDONLY


def _create_private(path: Path) -> None:
    """Create a missing store file readable by its owner only (0600): SQLite gives its
    `-wal` and `-shm` the database file's permissions. An existing file keeps its own."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    with suppress(FileExistsError):
        os.close(os.open(path, flags, 0o600))


def _read_only_uri(path: str) -> str:
    """The URI a reader opens: read-only, and immutable where no writer can be at work.

    SQLite reads a WAL file read-only only when it can use (or create) its `-shm` index.
    On read-only media, or in a folder we cannot write that holds no `-wal` (so no writer
    has the file open in WAL mode), nothing can change the file: `immutable=1` reads it
    without the index or any lock."""
    file = Path(path).resolve()
    folder = file.parent
    fixed = bool(os.statvfs(folder).f_flag & os.ST_RDONLY) or (
        not _writable(folder)
        and not Path(f"{file}-wal").exists()
        and not Path(f"{file}-shm").exists()
    )
    return f"{file.as_uri()}?mode=ro{'&immutable=1' if fixed else ''}"


def _key(originator_id: UUID | str) -> bytes | str:
    return originator_id.bytes if isinstance(originator_id, UUID) else originator_id


def _originator(key: bytes | str) -> UUID | str:
    return UUID(bytes=key) if isinstance(key, bytes) else key


class SQLiteRecorder(ConversationRecorder):
    """Conversation events, snapshots and tracking records in one SQLite file.

    A writer (the default) creates the file if needed (its folder only with `make_folder`,
    for the default location) and applies the migrations it lacks
    (`storage.migrations`); `read_only=True` opens an existing file without writing to it,
    refusing one it cannot read unmigrated.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        synchronous: str = "FULL",
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
        read_only: bool = False,
        known: Sequence[Migration] = MIGRATIONS,
        make_folder: bool = False,
    ) -> None:
        self.path = str(path)
        self.synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self.read_only = read_only
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._guard = threading.Lock()
        self._topic_ids: dict[str, int] = {}
        self._topics: dict[int, str] = {}
        self._catalogued: bool | None = None
        self._secure = False
        if read_only:
            if self.path == ":memory:" or not Path(self.path).is_file():
                raise StoreNotFound(
                    f"there is no convstore store at {self.path} (a read command creates "
                    "none; check --db, or record into it first)"
                )
            try:
                with translating():
                    connection = self._connection()
                    holds = migrations.held(
                        _recorded(connection), has_events=_has_table(connection, "events")
                    )
                    migrations.check_readable(holds, known, where=self.path)
            except BaseException:
                self.close()  # a refused store keeps no file open
                raise
            return
        if self.path != ":memory:":
            folder = Path(self.path).parent
            if make_folder:
                folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            elif not folder.is_dir():
                raise StoreNotFound(
                    f"there is no folder {folder} for the store {self.path} (convstore "
                    "creates a store file, never the folder it goes in)"
                )
            if not _writable(folder):
                raise OperationalError(
                    f"cannot write the store at {self.path}: its folder is read-only (read "
                    "commands still work; `search --no-catch-up` searches the index as it "
                    "stands)"
                )
            _create_private(Path(self.path))
        with translating():
            connection = self._connection()
            connection.execute(f"PRAGMA page_size={PAGE_SIZE}")  # a no-op once the file exists
            connection.execute("PRAGMA journal_mode=WAL")
            self.migrated = self._migrate(known)

    def _migrate(self, known: Sequence[Migration]) -> tuple[str, ...]:
        """Apply the migrations the store lacks, one transaction each; their names."""
        if not migrations.missing(_recorded(self._connection()) or [], known, where=self.path):
            return ()  # up to date: no write transaction, no lock taken
        applied: list[str] = []
        while True:
            with self._transaction() as cursor:  # re-read under the lock: one writer applies
                cursor.execute(migrations.SQLITE_TABLE)
                done = _recorded(cursor) or []
                lacking = migrations.missing(done, known, where=self.path)
                if not lacking:
                    return tuple(applied)
                for statement in lacking[0].sqlite:
                    cursor.execute(statement)
                cursor.execute(
                    "INSERT INTO migrations (position, name) VALUES (?, ?)",
                    (len(done) + 1, lacking[0].name),
                )
            applied.append(lacking[0].name)

    def applied_migrations(self) -> list[AppliedMigration]:
        """The migrations the store records, in order (none for a store made before them)."""
        with translating():
            connection = self._connection()
            if not _has_table(connection, "migrations"):
                return []
            rows = connection.execute(
                "SELECT position, name, applied_at FROM migrations ORDER BY position"
            ).fetchall()
        return [AppliedMigration(int(row[0]), str(row[1]), str(row[2])) for row in rows]

    def has_table(self, table: str) -> bool:
        """Whether the store's file has `table`."""
        with translating():
            return _has_table(self._connection(), table)

    # --- connections ------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        """This thread's connection: reads, and the transactions other than appends (its
        writer connection while a group is open: see `grouped`)."""
        group: _Group | None = getattr(self._local, "group", None)
        if group is not None and group.open:
            return self._writer()
        return self._reader()

    def _reader(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._connect(self.busy_timeout_ms)
        return connection

    def _writer(self) -> sqlite3.Connection:
        """This thread's connection for appends: its busy handler is always off, so each
        `_begin` polls for the write lock itself without switching the handler off and on.
        (An in-memory database is its connection's own: there, the one connection.)"""
        if self.path == ":memory:":
            return self._reader()
        connection: sqlite3.Connection | None = getattr(self._local, "writer", None)
        if connection is None:
            connection = self._local.writer = self._connect(0)
        return connection

    def _connect(self, busy_timeout_ms: int) -> sqlite3.Connection:
        connection = sqlite3.connect(
            _read_only_uri(self.path) if self.read_only else self.path,
            uri=self.read_only,
            isolation_level=None,
            check_same_thread=False,
            timeout=busy_timeout_ms / 1000,
        )
        connection.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        connection.execute(f"PRAGMA synchronous={self.synchronous}")
        if self._secure:
            connection.execute("PRAGMA secure_delete=ON")
        with self._guard:
            self._connections.append(connection)
        return connection

    def _transaction(self) -> AbstractContextManager[sqlite3.Cursor]:
        group: _Group | None = getattr(self._local, "group", None)
        if group is not None:
            return group.transaction()
        return _Transaction(self._connection(), self.busy_timeout_ms)

    def secure(self) -> None:
        """`secure_delete` on every connection, now and later: deleted content is zeroed."""
        self._secure = True
        with self._guard:
            connections = list(self._connections)
        for connection in connections:
            connection.execute("PRAGMA secure_delete=ON")

    def scrub(self, tables: Sequence[str]) -> None:
        """Checkpoint the WAL with TRUNCATE, so no frame keeps a deleted row (with
        `secure_delete` on, the deleted rows' bytes in the file are zeroed already)."""
        with translating():
            self._connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        """Close every thread's connection."""
        with self._guard:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
        self._local = threading.local()

    # --- topics -----------------------------------------------------------------------------

    def _topic_ids_for(self, stored_events: Sequence[StoredEvent]) -> list[int]:
        ids = self._topic_ids
        try:
            return [ids[s.topic] for s in stored_events]
        except KeyError:
            pass
        # New topics are committed on their own, before the events' transaction, so a
        # rolled-back append never leaves the cache naming a topic row that does not exist.
        for topic in {s.topic for s in stored_events} - ids.keys():
            connection = self._connection()
            connection.execute("INSERT OR IGNORE INTO topics (topic) VALUES (?)", (topic,))
            row = connection.execute("SELECT id FROM topics WHERE topic = ?", (topic,)).fetchone()
            ids[topic] = int(row[0])
            self._topics[int(row[0])] = topic
        return [ids[s.topic] for s in stored_events]

    def _topic(self, topic_id: int) -> str:
        topic = self._topics.get(topic_id)
        if topic is None:
            row = (
                self._connection()
                .execute("SELECT topic FROM topics WHERE id = ?", (topic_id,))
                .fetchone()
            )
            topic = str(row[0])
            self._topics[topic_id] = topic
            self._topic_ids[topic] = topic_id
        return topic

    # --- writing ----------------------------------------------------------------------------

    def append(
        self,
        stored_events: Sequence[StoredEvent],
        snapshot: SnapshotRecord | None = None,
        responses: Sequence[ResponseRow] = (),
        catalogue: CatalogueRow | None = None,
    ) -> None:
        """Insert events (and replace a snapshot, index responses, write the catalogue's
        row) in one transaction."""
        self._write(stored_events, snapshot, None, responses, catalogue)

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> list[int]:
        """eventsourcing's insert: events, and a `tracking` record if given, atomically;
        their notification ids."""
        return self._write(stored_events, None, kwargs.get("tracking"), ids=True)

    def _write(
        self,
        stored_events: Sequence[StoredEvent],
        snapshot: SnapshotRecord | None,
        tracking: Tracking | None,
        responses: Sequence[ResponseRow] = (),
        catalogue: CatalogueRow | None = None,
        *,
        ids: bool = False,
    ) -> list[int]:
        # Every append's path: one try for the driver's errors and the transaction, with
        # no context managers (the work of `translating` and `_Transaction`, inline), on
        # the thread's writer connection (its busy handler always off: see `_begin`); in a
        # group (`grouped`), a savepoint of the group's transaction.
        try:
            topics = self._topic_ids_for(stored_events)
            connection = self._writer()
            group: _Group | None = getattr(self._local, "group", None)
            write = partial(
                self._statements,
                connection,
                stored_events,
                topics,
                snapshot=snapshot,
                tracking=tracking,
                responses=responses,
                catalogue=catalogue,
                ids=ids,
            )
            if group is not None:
                with group.append():
                    return write()
            _begin(connection, self.busy_timeout_ms)
            try:
                inserted = write()
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        except sqlite3.Error as error:
            raise translate(error) from error
        return inserted

    def _statements(
        self,
        connection: sqlite3.Connection,
        stored_events: Sequence[StoredEvent],
        topics: list[int],
        *,
        snapshot: SnapshotRecord | None,
        tracking: Tracking | None,
        responses: Sequence[ResponseRow],
        catalogue: CatalogueRow | None,
        ids: bool,
    ) -> list[int]:
        """What one append writes, inside the transaction or savepoint it runs in."""
        if responses:
            connection.executemany(
                "INSERT INTO responses VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (
                        r.provider,
                        r.server,
                        r.response_id,
                        r.attempt,
                        _key(r.originator_id),
                        r.originator_version,
                    )
                    for r in responses
                ],
            )
        inserted = self._insert(connection, stored_events, topics, ids=ids)
        _catalogue(connection, stored_events, catalogue)
        if snapshot is not None:
            key = snapshot.originator_id.bytes
            connection.execute(
                "INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?)",
                (key, snapshot.version, snapshot.state),
            )
            if snapshot.settled:
                version = snapshot.version
                connection.executemany(
                    "INSERT INTO settled VALUES (?, ?, ?, ?)",
                    [(key, item, version, value) for item, value in snapshot.settled],
                )
        if tracking is not None:
            self._insert_tracking(connection, tracking)
        return inserted

    @contextmanager
    def _group(
        self, *, every: int, within: float, lost: Callable[[], None]
    ) -> Iterator[CommitGroup]:
        with translating():
            yield _Group(self._writer(), self.busy_timeout_ms, every, within, lost)

    @staticmethod
    def _insert(
        connection: sqlite3.Connection,
        stored_events: Sequence[StoredEvent],
        topics: list[int],
        *,
        ids: bool,
    ) -> list[int]:
        if not stored_events:
            return []
        rows = []
        last_id: UUID | str | None = None
        key: bytes | str = b""
        for s, topic in zip(stored_events, topics, strict=True):
            if s.originator_id is not last_id:  # a batch is usually one conversation's
                last_id = s.originator_id
                key = _key(last_id)
            rows.append((key, s.originator_version, topic, s.state))
        connection.executemany(
            "INSERT INTO events (originator_id, originator_version, topic, state)"
            " VALUES (?, ?, ?, ?)",
            rows,
        )
        if not ids:
            return []
        # This connection holds the write lock: no other row came between ours.
        last: int = connection.execute("SELECT last_insert_rowid()").fetchone()[0]
        return list(range(last - len(rows) + 1, last + 1))

    # --- reading ----------------------------------------------------------------------------

    def select_states(self, originator_id: UUID, *, gt: int = 0) -> list[tuple[int, bytes]]:
        """(version, bytes) of one conversation's events after `gt`."""
        with translating():
            return (
                self._connection()
                .execute(
                    "SELECT originator_version, CAST(state AS BLOB) FROM events"
                    " WHERE originator_id = ?"
                    " AND originator_version > ? ORDER BY originator_version",
                    (originator_id.bytes, gt),
                )
                .fetchall()
            )

    def select_responses(self, provider: str, server: str, response_id: str) -> list[ResponseRow]:
        """Where the store holds a provider response, each attempt once."""
        if not self.has_table("responses"):
            return []
        with translating():
            rows = (
                self._connection()
                .execute(
                    "SELECT attempt, originator_id, originator_version FROM responses"
                    " WHERE provider = ? AND server = ? AND response_id = ? ORDER BY attempt",
                    (provider, server, response_id),
                )
                .fetchall()
            )
        return [
            ResponseRow(provider, server, response_id, attempt, UUID(bytes=key), version)
            for attempt, key, version in rows
        ]

    def prefix_key(self) -> bytes:
        """The store's key for prefix digests, made (at random) on first use."""
        with translating():
            row = self._connection().execute("SELECT key FROM prefix_key").fetchone()
            if row is None:
                with self._transaction() as cursor:
                    cursor.execute(
                        "INSERT OR IGNORE INTO prefix_key VALUES (1, ?)", (secrets.token_bytes(32),)
                    )
                row = self._connection().execute("SELECT key FROM prefix_key").fetchone()
        return bytes(row[0])

    def select_prefixes(self, digests: Sequence[bytes]) -> list[PrefixRow]:
        """The indexed conversations whose digest is one of `digests`, newest first."""
        rows: list[PrefixRow] = []
        with translating():
            connection = self._connection()
            for start in range(0, len(digests), _PARAMETERS):
                part = digests[start : start + _PARAMETERS]
                marks = ", ".join("?" * len(part))
                rows.extend(
                    PrefixRow(bytes(d), bytes(o), UUID(bytes=k), v, p)
                    for d, o, k, v, p in connection.execute(
                        "SELECT digest, opaque, originator_id, version, position FROM prefixes"
                        f" WHERE digest IN ({marks})",
                        part,
                    ).fetchall()
                )
        return sorted(rows, key=lambda row: row.position, reverse=True)

    def select_settled(
        self, originator_id: UUID, keys: Sequence[str], upto: int
    ) -> dict[str, bytes]:
        """The values of settled items as of version `upto` (see the recorder's)."""
        if not keys:
            return {}
        marks = ",".join("?" * len(keys))
        with translating():
            rows = (
                self._connection()
                .execute(
                    "SELECT key, CAST(value AS BLOB) FROM settled WHERE originator_id = ?"
                    f" AND key IN ({marks}) AND version <= ? ORDER BY key, version",
                    (originator_id.bytes, *keys, upto),
                )
                .fetchall()
            )
        return dict(rows)  # in version order: each key's newest value is the last

    def select_snapshot(self, originator_id: UUID) -> SnapshotRecord | None:
        """The conversation's snapshot, if one was taken."""
        with translating():
            row = (
                self._connection()
                .execute(
                    "SELECT version, CAST(state AS BLOB) FROM snapshots WHERE originator_id = ?",
                    (originator_id.bytes,),
                )
                .fetchone()
            )
        return None if row is None else SnapshotRecord(originator_id, row[0], row[1])

    def select_first_events(
        self, *, offset: int = 0, limit: int = 50, newest_first: bool = False
    ) -> list[FirstEvent]:
        """First events in start order (or the reverse), with each conversation's event count."""
        with translating():
            rows = (
                self._connection()
                .execute(
                    "SELECT f.originator_id, CAST(f.state AS BLOB),"
                    " (SELECT max(e.originator_version) FROM events e"
                    "  WHERE e.originator_id = f.originator_id)"
                    " FROM events f WHERE f.originator_version = 1"
                    f" ORDER BY f.id {'DESC' if newest_first else 'ASC'} LIMIT ? OFFSET ?",
                    (limit, offset),
                )
                .fetchall()
            )
        return [FirstEvent(UUID(bytes=key), state, count) for key, state, count in rows]

    def catalogued(self) -> bool:
        """Whether the file has the catalogue."""
        if self._catalogued is None:
            self._catalogued = self.has_table("catalogue")
        return self._catalogued

    def select_catalogue(
        self, where: ConversationFilter, *, offset: int, limit: int, newest_first: bool
    ) -> list[CatalogueEntry]:
        """A page of the catalogue's rows `where` lets through."""
        page, _ = catalogue.listing(where, postgres=False, newest_first=newest_first)
        _, params = catalogue.where(where, postgres=False)
        with translating():
            rows = (
                self._connection()
                .execute(page.format(catalogue="catalogue"), (*params, limit, offset))
                .fetchall()
            )
        return [catalogue.entry(row) for row in rows]

    def count_catalogue(self, where: ConversationFilter) -> int:
        """How many catalogue rows `where` lets through."""
        _, count = catalogue.listing(where, postgres=False, newest_first=False)
        _, params = catalogue.where(where, postgres=False)
        with translating():
            row = self._connection().execute(count.format(catalogue="catalogue"), params)
            return int(row.fetchone()[0])

    def select_catalogue_entry(self, originator_id: UUID) -> CatalogueEntry | None:
        """One conversation's catalogue row."""
        if not self.catalogued():
            return None
        with translating():
            row = (
                self._connection()
                .execute(
                    f"SELECT {catalogue.COLUMNS} FROM catalogue c WHERE c.id = ?",
                    (originator_id.bytes,),
                )
                .fetchone()
            )
        return None if row is None else catalogue.entry(row)

    def select_ids(self, low: UUID, high: UUID, limit: int) -> list[UUID]:
        """Conversation ids from `low` to `high`, from the catalogue (or the events)."""
        statement = (
            "SELECT id FROM catalogue WHERE id BETWEEN ? AND ? ORDER BY id LIMIT ?"
            if self.catalogued()
            else "SELECT originator_id FROM events WHERE originator_id BETWEEN ? AND ?"
            " AND originator_version = 1 ORDER BY originator_id LIMIT ?"
        )
        with translating():
            rows = self._connection().execute(statement, (low.bytes, high.bytes, limit))
            return [UUID(bytes=row[0]) for row in rows.fetchall()]

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> list[StoredEvent]:
        """eventsourcing's select."""
        statement = (
            "SELECT originator_version, topic, CAST(state AS BLOB) FROM events"
            " WHERE originator_id = ?"
        )
        params: list[Any] = [_key(originator_id)]
        if gt is not None:
            statement += " AND originator_version > ?"
            params.append(gt)
        if lte is not None:
            statement += " AND originator_version <= ?"
            params.append(lte)
        statement += " ORDER BY originator_version" + (" DESC" if desc else "")
        if limit is not None:
            statement += " LIMIT ?"
            params.append(limit)
        with translating():
            rows = self._connection().execute(statement, params).fetchall()
            return [
                StoredEvent(originator_id, version, self._topic(topic), state)
                for version, topic, state in rows
            ]

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> list[Notification]:
        """Events in notification order from `start`, at most `limit`."""
        statement = (
            "SELECT id, originator_id, originator_version, topic, CAST(state AS BLOB) FROM events"
        )
        clauses: list[str] = []
        params: list[Any] = []
        if start is not None:
            clauses.append("id >= ?" if inclusive_of_start else "id > ?")
            params.append(start)
        if stop is not None:
            clauses.append("id <= ?")
            params.append(stop)
        with translating():
            if topics:
                connection = self._connection()
                ids = [
                    row[0]
                    for t in topics
                    for row in connection.execute("SELECT id FROM topics WHERE topic = ?", (t,))
                ]
                if not ids:
                    return []
                clauses.append(f"topic IN ({','.join('?' * len(ids))})")
                params.extend(ids)
            if clauses:
                statement += " WHERE " + " AND ".join(clauses)
            statement += " ORDER BY id LIMIT ?"
            params.append(limit)
            rows = self._connection().execute(statement, params).fetchall()
            return [
                Notification(
                    id=nid,
                    originator_id=_originator(key),
                    originator_version=version,
                    topic=self._topic(topic),
                    state=state,
                )
                for nid, key, version, topic, state in rows
            ]

    def select_log(
        self, gt: int | None, limit: int, stop: int | None = None
    ) -> list[tuple[int, bytes]]:
        """(id, bytes) of events after `gt` (and up to `stop`) in notification order."""
        with translating():
            return (
                self._connection()
                .execute(
                    "SELECT id, CAST(state AS BLOB) FROM events"
                    " WHERE id > ? AND id <= ? ORDER BY id LIMIT ?",
                    (gt or 0, (1 << 63) - 1 if stop is None else stop, limit),
                )
                .fetchall()
            )

    def max_notification_id(self) -> int | None:
        """The newest notification id, or None for an empty store."""
        with translating():
            row = self._connection().execute("SELECT max(id) FROM events").fetchone()
        return None if row[0] is None else int(row[0])

    def subscribe(self, gt: int | None = None, topics: Sequence[str] = ()) -> Subscription[Any]:
        """Not available on SQLite: follow the log by polling `select_notifications`."""
        raise NotImplementedError(
            "SQLite cannot push notifications; projections poll select_notifications instead"
        )

    # --- tracking ---------------------------------------------------------------------------

    def insert_tracking(self, tracking: Tracking) -> None:
        """Record that `tracking.notification_id` was processed; a repeat is refused."""
        with translating(), self._transaction() as cursor:
            self._insert_tracking(cursor, tracking)

    @staticmethod
    def _insert_tracking(cursor: sqlite3.Cursor | sqlite3.Connection, tracking: Tracking) -> None:
        row = cursor.execute(
            "SELECT max(notification_id) FROM tracking WHERE application_name = ?",
            (tracking.application_name,),
        ).fetchone()
        if row[0] is not None and tracking.notification_id <= row[0]:
            raise IntegrityError(
                f"{tracking.application_name!r} already processed notification "
                f"{row[0]}; {tracking.notification_id} is not after it"
            )
        cursor.execute(
            "INSERT INTO tracking VALUES (?, ?)",
            (tracking.application_name, tracking.notification_id),
        )

    def max_tracking_id(self, application_name: str) -> int | None:
        """The newest processed notification id of a projection."""
        with translating():
            row = (
                self._connection()
                .execute(
                    "SELECT max(notification_id) FROM tracking WHERE application_name = ?",
                    (application_name,),
                )
                .fetchone()
            )
        return None if row[0] is None else int(row[0])

    # --- projection views ---------------------------------------------------------------------

    @contextmanager
    def view_transaction(
        self, name: str, *, track: int | None = None, after: int | None = None, reset: bool = False
    ) -> Iterator[sqlite3.Cursor]:
        """A view's rows and its tracking record in one `BEGIN IMMEDIATE` transaction.

        The database lock serializes it with appends and with other workers' batches, so
        the position read here cannot move before the commit.
        """
        with translating(), self._transaction() as cursor:
            if reset:
                cursor.execute("DELETE FROM tracking WHERE application_name = ?", (name,))
            if track is not None:
                row = cursor.execute(
                    "SELECT max(notification_id) FROM tracking WHERE application_name = ?",
                    (name,),
                ).fetchone()
                if row[0] != after:
                    raise TrackingConflict(
                        f"{name!r} is at notification {row[0]}, not {after}: another worker "
                        "processed these notifications"
                    )
            yield cursor
            if track is not None:
                self._insert_tracking(cursor, Tracking(name, track))

    @contextmanager
    def view_reader(self) -> Iterator[sqlite3.Cursor]:
        """A cursor on this thread's connection (WAL: reads never wait for the writer)."""
        with translating():
            cursor = self._connection().cursor()
            try:
                yield cursor
            finally:
                cursor.close()


_CATALOGUE_FIRST = (
    "INSERT OR IGNORE INTO catalogue (id, position, turns, events)"
    " SELECT originator_id, id, 0, 1 FROM events WHERE originator_id = ? AND originator_version = 1"
)
_CATALOGUE_ROW = (
    "UPDATE catalogue SET created_at = coalesce(created_at, :created), last_activity_at = :last,"
    " provider = CASE WHEN :provider IS NULL THEN provider ELSE :provider END,"
    " model = CASE WHEN :provider IS NULL THEN model ELSE :model END,"
    " turns = :turns, events = :events, title = coalesce(:title, title),"
    " labels = coalesce(:labels, labels), forked_from = coalesce(:forked_from, forked_from)"
    " WHERE id = :id"
)


def _catalogue(
    connection: sqlite3.Connection, stored_events: Sequence[StoredEvent], row: CatalogueRow | None
) -> None:
    """The catalogue's rows of an append: one for each conversation it starts, and `row`."""
    first = [(_key(s.originator_id),) for s in stored_events if s.originator_version == 1]
    if first:
        connection.executemany(_CATALOGUE_FIRST, first)
    if row is None:
        return
    connection.execute(
        _CATALOGUE_ROW,
        {
            "created": None if row.created_at is None else sqlite_stamp(row.created_at),
            "last": sqlite_stamp(row.last_activity_at),
            "provider": row.provider,
            "model": row.model,
            "turns": row.turns,
            "events": row.events,
            "title": row.title,
            "labels": None if row.labels is None else msgspec.json.encode(row.labels).decode(),
            "forked_from": None if row.forked_from is None else str(row.forked_from),
            "id": row.originator_id.bytes,
        },
    )


def _begin(connection: sqlite3.Connection, timeout_ms: int) -> None:
    """`BEGIN IMMEDIATE` on a connection whose busy handler is off: take the write lock,
    waiting for it at most `timeout_ms`.

    While another writer holds the lock, the attempt is repeated every 0.2-2 ms rather
    than left to SQLite's busy handler, whose sleeps grow to 100 ms: a writer that
    commits and begins again at once could keep the lock from one sleeping there for the
    whole timeout (eight writer processes on two cores: one append in 8,000 ran out of
    time). Appends run on a connection of their own whose handler is always off
    (`SQLiteRecorder._writer`); other transactions switch it off around this
    (`_Transaction`), and readers keep it for the rare busy moments of WAL mode
    (recovery, a closing connection's checkpoint). Past the timeout the busy error is
    raised: nothing was written.
    """
    deadline = 0.0
    while True:
        try:
            connection.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
                raise
            now = time.monotonic()
            if not deadline:
                deadline = now + timeout_ms / 1000
            elif now >= deadline:
                raise
        time.sleep(random.uniform(0.0002, 0.002))


class _Transaction:
    """`BEGIN IMMEDIATE` … `COMMIT`, rolled back on any error, a failed commit's included.

    SQLite may have rolled the transaction back itself (a full disk, an I/O error): then
    there is nothing left to roll back, and the error that did it is the one raised.
    """

    def __init__(self, connection: sqlite3.Connection, timeout_ms: int) -> None:
        self.connection = connection
        self.timeout_ms = timeout_ms

    def __enter__(self) -> sqlite3.Cursor:
        self.connection.execute(_NO_BUSY_HANDLER)
        try:
            _begin(self.connection, self.timeout_ms)
        finally:
            self.connection.execute(f"PRAGMA busy_timeout={int(self.timeout_ms)}")
        return self.connection.cursor()

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        connection = self.connection
        try:
            if kind is None:
                connection.execute("COMMIT")
        finally:
            if connection.in_transaction:  # an error, or a COMMIT that failed
                connection.execute("ROLLBACK")


class _Group(CommitGroup):
    """A group's shared transaction on a thread's writer connection."""

    def __init__(
        self,
        connection: sqlite3.Connection,
        timeout_ms: int,
        every: int,
        within: float,
        lost: Callable[[], None],
    ) -> None:
        super().__init__(every=every, within=within, lost=lost)
        self.connection = connection
        self.timeout_ms = timeout_ms

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """A transaction other than an append (tracking, a view), as one of the group's."""
        with self.append():
            yield self.connection.cursor()

    def _begin(self) -> None:
        _begin(self.connection, self.timeout_ms)

    def _in_transaction(self) -> bool:
        return self.connection.in_transaction

    def _execute(self, statement: str) -> None:
        self.connection.execute(statement)
