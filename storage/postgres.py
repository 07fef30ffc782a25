"""The server backend: PostgreSQL through psycopg 3, the same tables as SQLite in one schema.

Notification ids never interleave. Every append runs in one server-side function,
`append_events_v1`, whose first act is `LOCK TABLE events IN EXCLUSIVE MODE` — what
eventsourcing's own PostgreSQL recorder does. The lock serializes writers (readers are not
blocked: SELECT takes ACCESS SHARE), so a transaction draws all its ids from the identity
sequence and commits before the next writer draws any: ids are issued in commit order and
a follower reading `id > n` can never later find a committed event below an id it has
seen. A rolled-back append leaves a gap (sequences do not roll back); the follower skips
it, as nothing will ever fill it. The price is one writer at a time per schema, which a
conversation store's append rate allows; writes shard by conversation across schemas or
databases past that.

The write path is one round trip: the function takes the batch as arrays, inserts it with
`unnest` and returns the ids, also replacing a snapshot and advancing a tracking record in
the same implicit transaction, and notifies listeners (`subscribe`). Each thread has its
own autocommit connection. One the server ended while it sat idle is noticed and replaced
before the next call; one that breaks during a call raises `ConnectionLost` (its
transaction committed whole or not at all) and is replaced on the next. Waiting for
the lock is bounded by `lock_timeout`, after which a typed `OperationalError` is raised.

Tracking keeps one row per projection (its newest position), advanced by an upsert that
refuses a repeated or lower position atomically, as eventsourcing's recorder does.
"""

from __future__ import annotations

import secrets
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import (
    ListenNotifySubscription,
    Notification,
    StoredEvent,
    Subscription,
    Tracking,
)
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb

from convstore.domain.service import ConversationFilter
from convstore.storage import catalogue, migrations
from convstore.storage.catalogue import CatalogueEntry, CatalogueRow
from convstore.storage.errors import (
    DataError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
    TrackingConflict,
    connection_lost,
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

LOCK_TIMEOUT_MS = 5000
"""How long a writer waits for another's lock before a typed OperationalError."""

_APPEND = "append_events_v3"
"""The append function; a changed body gets a new name, so old and new never mix."""
_APPEND_V1 = "append_events_v1"
"""The one `0001_initial` made (`0002_responses` replaced it)."""
_APPEND_V2 = "append_events_v2"
"""The one `0002_responses` made (`0003_catalogue` replaced it)."""

_ROW = tuple[Any, ...]
Connection = psycopg.Connection[_ROW]
Query = sql.SQL | sql.Composed


def _uuid(originator_id: UUID | str) -> UUID:
    if isinstance(originator_id, UUID):
        return originator_id
    try:
        return UUID(originator_id)
    except ValueError:
        raise DataError(f"originator id {originator_id!r} is not a UUID") from None


class PostgresRecorder(ConversationRecorder):
    """Conversation events, snapshots and tracking records in one PostgreSQL schema.

    A writer (the default) creates the schema if needed and applies the migrations it
    lacks (`storage.migrations`); `read_only=True` runs every transaction read-only and
    refuses a store it cannot read unmigrated.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "public",
        lock_timeout_ms: int = LOCK_TIMEOUT_MS,
        read_only: bool = False,
        known: Sequence[Migration] = MIGRATIONS,
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        self.lock_timeout_ms = lock_timeout_ms
        self.read_only = read_only
        self.channel = f"{schema}_events"[:63]
        """The LISTEN/NOTIFY channel appends signal (channels are per database)."""
        self._local = threading.local()
        self._connections: list[Connection] = []
        self._guard = threading.Lock()
        self._subscriptions: weakref.WeakSet[PostgresSubscription] = weakref.WeakSet()
        self._topic_ids: dict[str, int] = {}
        self._topics: dict[int, str] = {}
        self._catalogued: bool | None = None
        self._responses_indexed: bool | None = None
        """Whether the store has the `responses` table (a reader's may lack it)."""
        s = sql.Identifier(schema)
        self._sql = {
            name: sql.SQL(text).format(s=s)
            for name, text in _STATEMENTS.items()  # schema-qualified, composed once
        }
        self._sql["append"] = sql.SQL(
            "SELECT * FROM {s}.{append}(%b::uuid[], %b::bigint[], %b::integer[], %b::bytea[],"
            " %b::uuid, %b::bigint, %b::bytea, %b::text, %b::bigint,"
            " %b::text[], %b::text[], %b::text[], %b::integer[], %b::uuid[], %b::bigint[],"
            " %b::uuid, %b::timestamptz, %b::timestamptz, %b::text, %b::text, %b::bigint,"
            " %b::bigint, %b::text, %b::jsonb, %b::uuid)"
        ).format(s=s, append=sql.Identifier(_APPEND))
        if read_only:
            with self._using() as connection:
                recorded = migrations.held(
                    self._recorded(connection), has_events=self._has_table(connection, "events")
                )
            migrations.check_readable(recorded, known, where=self._where())
        else:
            self.migrated = self._migrate(known)

    # --- connections ------------------------------------------------------------------------

    def _connect(self) -> Connection:
        connection = psycopg.connect(self.dsn, autocommit=True)
        connection.execute(
            sql.SQL("SET lock_timeout = {}").format(sql.Literal(f"{self.lock_timeout_ms}ms"))
        )
        if self.read_only:
            connection.execute("SET default_transaction_read_only = on")
        return connection

    def _connection(self) -> Connection:
        connection: Connection | None = getattr(self._local, "connection", None)
        if connection is not None and not _open(connection):
            self._discard(connection)
            connection = None
        if connection is None:
            connection = self._connect()
            self._local.connection = connection
            with self._guard:
                self._connections.append(connection)
        return connection

    def _discard(self, connection: Connection) -> None:
        """Forget a connection that broke (closing what is left of it)."""
        connection.close()
        self._local.connection = None
        with self._guard:
            if connection in self._connections:
                self._connections.remove(connection)

    @contextmanager
    def _using(self) -> Iterator[Connection]:
        """This thread's connection, with driver errors translated; a broken one is dropped.

        A connection that breaks under the call raises `ConnectionLost`: what the call was
        writing, one transaction, was committed whole or not at all.
        """
        with translating():
            connection = self._connection()
            try:
                yield connection
            except psycopg.Error as error:
                if connection.closed:
                    raise connection_lost(error) from error
                raise
            finally:
                if connection.closed:
                    self._discard(connection)

    def _where(self) -> str:
        info = psycopg.conninfo.conninfo_to_dict(self.dsn)
        return f"postgresql database {info.get('dbname', '')!s} (schema {self.schema})"

    def _has_table(self, connection: Connection, table: str) -> bool:
        name = f"{sql.Identifier(self.schema).as_string(connection)}.{table}"
        row = connection.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
        return bool(row and row[0])

    def _recorded(self, connection: Connection) -> list[str] | None:
        """The names the `migrations` table records in order; None when there is no table."""
        if not self._has_table(connection, "migrations"):
            return None
        query = sql.SQL("SELECT name FROM {}.migrations ORDER BY position")
        rows = connection.execute(query.format(sql.Identifier(self.schema))).fetchall()
        return [str(row[0]) for row in rows]

    def _migrate(self, known: Sequence[Migration]) -> tuple[str, ...]:
        """Apply the migrations the store lacks, one transaction each; their names."""
        where = self._where()
        with self._using() as connection:
            if not migrations.missing(self._recorded(connection) or [], known, where=where):
                return ()  # up to date: no DDL, so no locks taken
            s, channel = sql.Identifier(self.schema), sql.Literal(self.channel)
            applied: list[str] = []
            while True:
                with connection.transaction():
                    # One writer at a time migrates: concurrent DDL collides in the catalogs.
                    connection.execute(
                        "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"convstore {self.schema}",)
                    )
                    connection.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s))
                    connection.execute(sql.SQL(migrations.POSTGRES_TABLE).format(s=s))
                    done = self._recorded(connection) or []
                    lacking = migrations.missing(done, known, where=where)
                    if not lacking:
                        return tuple(applied)
                    for statement in lacking[0].postgres:
                        connection.execute(
                            sql.SQL(statement).format(
                                s=s,
                                channel=channel,
                                append=sql.Identifier(_APPEND_V1),
                                append_v2=sql.Identifier(_APPEND_V2),
                                append_v3=sql.Identifier(_APPEND),
                            )
                        )
                    connection.execute(
                        sql.SQL(
                            "INSERT INTO {}.migrations (position, name) VALUES (%s, %s)"
                        ).format(s),
                        (len(done) + 1, lacking[0].name),
                    )
                applied.append(lacking[0].name)

    def applied_migrations(self) -> list[AppliedMigration]:
        """The migrations the store records, in order (none for a store made before them)."""
        with self._using() as connection:
            if not self._has_table(connection, "migrations"):
                return []
            query = sql.SQL(
                "SELECT position, name, applied_at FROM {}.migrations ORDER BY position"
            ).format(sql.Identifier(self.schema))
            rows = connection.execute(query).fetchall()
        return [AppliedMigration(int(row[0]), str(row[1]), row[2].isoformat()) for row in rows]

    def has_table(self, table: str) -> bool:
        """Whether the store's schema has `table`."""
        with self._using() as connection:
            return self._has_table(connection, table)

    def release(self) -> None:
        """Close the calling thread's connection: for a thread that ends before the recorder."""
        connection: Connection | None = getattr(self._local, "connection", None)
        if connection is not None:
            self._discard(connection)

    def scrub(self, tables: Sequence[str]) -> None:
        """VACUUM the tables a forget deleted from, so no dead row version keeps the text
        (the server's WAL and backups are out of reach: see the README)."""
        with self._using() as connection:
            for table in tables:
                if self._has_table(connection, table):
                    connection.execute(
                        sql.SQL("VACUUM {}.{}").format(
                            sql.Identifier(self.schema), sql.Identifier(table)
                        )
                    )

    def close(self) -> None:
        """Stop every subscription still running, and close every thread's connection.

        A subscription left running would keep its (non-daemon) pull thread, and with it
        the process, alive after the store is closed.
        """
        for subscription in list(self._subscriptions):
            subscription.stop()
        with self._guard:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
        self._local = threading.local()

    def drop_schema(self) -> None:
        """Drop the schema with everything in it, then close (for tests; never `public`)."""
        if self.schema == "public":
            raise ProgrammingError("refusing to drop the public schema")
        with self._using() as connection:
            connection.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
            )
        self.close()

    # --- topics -----------------------------------------------------------------------------

    def _topic_ids_for(self, connection: Connection, topics: Sequence[str]) -> list[int]:
        # New topics are committed on their own, before the events' transaction, so a
        # rolled-back append never leaves the cache naming a topic row that does not exist;
        # inside a commit group, on a connection of their own, so the group's transaction
        # never holds a topic row's lock that another writer's could wait for (a deadlock).
        ids = self._topic_ids
        new = set(topics) - ids.keys()
        if new and getattr(self._local, "group", None) is not None:
            with self._connect() as apart:
                return self._insert_topics(apart, new, topics)
        return self._insert_topics(connection, new, topics) if new else [ids[t] for t in topics]

    def _insert_topics(
        self, connection: Connection, new: set[str], topics: Sequence[str]
    ) -> list[int]:
        ids = self._topic_ids
        for topic in new:
            connection.execute(self._sql["insert_topic"], (topic,))
            row = connection.execute(self._sql["topic_id"], (topic,)).fetchone()
            assert row is not None  # committed just above
            ids[topic] = int(row[0])
            self._topics[int(row[0])] = topic
        return [ids[t] for t in topics]

    def _topic(self, topic_id: int) -> str:
        topic = self._topics.get(topic_id)
        if topic is None:
            rows = self._fetch(self._sql["topic"], (topic_id,))
            if not rows:
                raise ProgrammingError(f"no topic with id {topic_id}")
            topic = str(rows[0][0])
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
        self._append(stored_events, snapshot, None, responses, catalogue)

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> list[int]:
        """eventsourcing's insert: events, and a `tracking` record if given, atomically."""
        return self._append(stored_events, None, kwargs.get("tracking"))

    def _append(
        self,
        stored_events: Sequence[StoredEvent],
        snapshot: SnapshotRecord | None,
        tracking: Tracking | None,
        responses: Sequence[ResponseRow] = (),
        catalogue: CatalogueRow | None = None,
    ) -> list[int]:
        if not stored_events:
            if tracking is not None:
                self.insert_tracking(tracking)
            return []
        group: _Group | None = getattr(self._local, "group", None)
        with self._using() as connection, group.append() if group else nullcontext():
            topics = self._topic_ids_for(connection, [s.topic for s in stored_events])
            params = (
                [_uuid(s.originator_id) for s in stored_events],
                [s.originator_version for s in stored_events],
                topics,
                [s.state for s in stored_events],
                None if snapshot is None else snapshot.originator_id,
                None if snapshot is None else snapshot.version,
                None if snapshot is None else snapshot.state,
                None if tracking is None else tracking.application_name,
                None if tracking is None else tracking.notification_id,
                [r.provider for r in responses],
                [r.server for r in responses],
                [r.response_id for r in responses],
                [r.attempt for r in responses],
                [r.originator_id for r in responses],
                [r.originator_version for r in responses],
                *_catalogue_params(catalogue),
            )
            if snapshot is None or not snapshot.settled:  # one implicit transaction
                rows = connection.execute(self._sql["append"], params).fetchall()
                return sorted(row[0] for row in rows)
            # The settled items join the append's transaction (the group's, in a group).
            with nullcontext() if group else connection.transaction():
                rows = connection.execute(self._sql["append"], params).fetchall()
                connection.execute(
                    self._sql["insert_settled"],
                    (
                        snapshot.originator_id,
                        snapshot.version,
                        [key for key, _ in snapshot.settled],
                        [value for _, value in snapshot.settled],
                    ),
                )
            return sorted(row[0] for row in rows)

    @contextmanager
    def _group(
        self, *, every: int, within: float, lost: Callable[[], None]
    ) -> Iterator[CommitGroup]:
        with self._using() as connection:
            yield _Group(connection, every=every, within=within, lost=lost)

    # --- reading ----------------------------------------------------------------------------

    def _fetch(self, query: Query, params: Sequence[Any] = ()) -> list[_ROW]:
        """The rows of one read (binary: bytea as bytes, no hex).

        A connection that broke under it (a server restart, a failover) is replaced and
        the read, being harmless to repeat, runs once more.
        """
        try:
            with self._using() as connection:
                return connection.cursor(binary=True).execute(query, params).fetchall()
        except (OperationalError, InterfaceError):
            if getattr(self._local, "connection", None) is not None:
                raise  # the connection is fine: the error is the read's own
        with self._using() as connection:
            return connection.cursor(binary=True).execute(query, params).fetchall()

    def select_states(self, originator_id: UUID, *, gt: int = 0) -> list[tuple[int, bytes]]:
        """(version, bytes) of one conversation's events after `gt`."""
        return self._fetch(self._sql["states"], (originator_id, gt))

    def select_responses(self, provider: str, server: str, response_id: str) -> list[ResponseRow]:
        """Where the store holds a provider response, each attempt once."""
        if self._responses_indexed is None:
            with self._using() as connection:
                self._responses_indexed = self._has_table(connection, "responses")
        if not self._responses_indexed:
            return []
        rows = self._fetch(self._sql["responses"], (provider, server, response_id))
        return [ResponseRow(provider, server, response_id, *row) for row in rows]

    def prefix_key(self) -> bytes:
        """The store's key for prefix digests, made (at random) on first use."""
        rows = self._fetch(self._sql["prefix_key"])
        if not rows:
            with self._using() as connection:
                connection.execute(self._sql["insert_prefix_key"], (secrets.token_bytes(32),))
            rows = self._fetch(self._sql["prefix_key"])
        return bytes(rows[0][0])

    def select_prefixes(self, digests: Sequence[bytes]) -> list[PrefixRow]:
        """The indexed conversations whose digest is one of `digests`, newest first."""
        rows = self._fetch(self._sql["prefixes"], (list(digests),))
        return [PrefixRow(bytes(d), bytes(o), _uuid(k), int(v), int(p)) for d, o, k, v, p in rows]

    def select_settled(
        self, originator_id: UUID, keys: Sequence[str], upto: int
    ) -> dict[str, bytes]:
        """The values of settled items as of version `upto` (see the recorder's)."""
        if not keys:
            return {}
        rows = self._fetch(self._sql["settled"], (originator_id, list(keys), upto))
        return {key: bytes(value) for key, value in rows}  # each key's newest is the last

    def select_snapshot(self, originator_id: UUID) -> SnapshotRecord | None:
        """The conversation's snapshot, if one was taken."""
        rows = self._fetch(self._sql["snapshot"], (originator_id,))
        return SnapshotRecord(originator_id, rows[0][0], rows[0][1]) if rows else None

    def select_first_events(
        self, *, offset: int = 0, limit: int = 50, newest_first: bool = False
    ) -> list[FirstEvent]:
        """First events in start order (or the reverse), with each conversation's event count."""
        rows = self._fetch(
            self._sql["first_events_newest" if newest_first else "first_events"], (limit, offset)
        )
        return [FirstEvent(key, state, count) for key, state, count in rows]

    def catalogued(self) -> bool:
        """Whether the schema has the catalogue."""
        if self._catalogued is None:
            self._catalogued = self.has_table("catalogue")
        return self._catalogued

    def _catalogue_sql(self, text: str) -> sql.Composed:
        return sql.SQL(text).format(
            catalogue=sql.SQL("{}.catalogue").format(sql.Identifier(self.schema))
        )

    def select_catalogue(
        self, where: ConversationFilter, *, offset: int, limit: int, newest_first: bool
    ) -> list[CatalogueEntry]:
        """A page of the catalogue's rows `where` lets through."""
        page, _ = catalogue.listing(where, postgres=True, newest_first=newest_first)
        _, params = catalogue.where(where, postgres=True)
        rows = self._fetch(self._catalogue_sql(page), (*params, limit, offset))
        return [catalogue.entry(row) for row in rows]

    def count_catalogue(self, where: ConversationFilter) -> int:
        """How many catalogue rows `where` lets through."""
        _, count = catalogue.listing(where, postgres=True, newest_first=False)
        _, params = catalogue.where(where, postgres=True)
        return int(self._fetch(self._catalogue_sql(count), params)[0][0])

    def select_catalogue_entry(self, originator_id: UUID) -> CatalogueEntry | None:
        """One conversation's catalogue row."""
        if not self.catalogued():
            return None
        rows = self._fetch(self._sql["catalogue_entry"], (originator_id,))
        return catalogue.entry(rows[0]) if rows else None

    def select_ids(self, low: UUID, high: UUID, limit: int) -> list[UUID]:
        """Conversation ids from `low` to `high`, from the catalogue (or the events)."""
        name = "catalogue_ids" if self.catalogued() else "first_ids"
        return [row[0] for row in self._fetch(self._sql[name], (low, high, limit))]

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
        query = sql.SQL(
            "SELECT originator_version, topic, state FROM {}.events WHERE originator_id = %s"
        ).format(sql.Identifier(self.schema))
        params: list[Any] = [_uuid(originator_id)]
        if gt is not None:
            query += sql.SQL(" AND originator_version > %s")
            params.append(gt)
        if lte is not None:
            query += sql.SQL(" AND originator_version <= %s")
            params.append(lte)
        query += sql.SQL(" ORDER BY originator_version" + (" DESC" if desc else ""))
        if limit is not None:
            query += sql.SQL(" LIMIT %s")
            params.append(limit)
        return [
            StoredEvent(originator_id, version, self._topic(topic), state)
            for version, topic, state in self._fetch(query, params)
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
        query = sql.SQL(
            "SELECT id, originator_id, originator_version, topic, state FROM {}.events"
        ).format(sql.Identifier(self.schema))
        clauses: list[sql.Composable] = []
        params: list[Any] = []
        if start is not None:
            clauses.append(sql.SQL("id >= %s" if inclusive_of_start else "id > %s"))
            params.append(start)
        if stop is not None:
            clauses.append(sql.SQL("id <= %s"))
            params.append(stop)
        if topics:
            ids = [row[0] for row in self._fetch(self._sql["topic_ids"], (list(topics),))]
            if not ids:
                return []
            clauses.append(sql.SQL("topic = ANY(%s)"))
            params.append(ids)
        if clauses:
            query += sql.SQL(" WHERE ") + sql.SQL(" AND ").join(clauses)
        query += sql.SQL(" ORDER BY id LIMIT %s")
        params.append(limit)
        return [
            Notification(
                id=nid,
                originator_id=key,
                originator_version=version,
                topic=self._topic(topic),
                state=state,
            )
            for nid, key, version, topic, state in self._fetch(query, params)
        ]

    def select_log(
        self, gt: int | None, limit: int, stop: int | None = None
    ) -> list[tuple[int, bytes]]:
        """(id, bytes) of events after `gt` (and up to `stop`) in notification order."""
        rows = self._fetch(
            self._sql["log"], (gt or 0, (1 << 63) - 1 if stop is None else stop, limit)
        )
        return [(int(nid), state) for nid, state in rows]

    def max_notification_id(self) -> int | None:
        """The newest notification id, or None for an empty store."""
        value = self._fetch(self._sql["max_id"])[0][0]
        return None if value is None else int(value)

    def subscribe(self, gt: int | None = None, topics: Sequence[str] = ()) -> Subscription[Any]:
        """Notifications after `gt` as they are committed (LISTEN/NOTIFY wakes the reader)."""
        subscription = PostgresSubscription(self, gt=gt, topics=topics)
        self._subscriptions.add(subscription)
        return subscription

    # --- tracking ---------------------------------------------------------------------------

    def insert_tracking(self, tracking: Tracking) -> None:
        """Record that `tracking.notification_id` was processed; a repeat or lower is refused."""
        with self._using() as connection:
            row = connection.execute(
                self._sql["track"], (tracking.application_name, tracking.notification_id)
            ).fetchone()
        if row is None:
            raise IntegrityError(
                f"{tracking.application_name!r} already processed a notification at or "
                f"after {tracking.notification_id}"
            )

    def max_tracking_id(self, application_name: str) -> int | None:
        """The newest processed notification id of a projection."""
        rows = self._fetch(self._sql["tracked"], (application_name,))
        return int(rows[0][0]) if rows else None

    # --- projection views ---------------------------------------------------------------------

    @contextmanager
    def view_transaction(
        self, name: str, *, track: int | None = None, after: int | None = None, reset: bool = False
    ) -> Iterator[psycopg.Cursor[_ROW]]:
        """A view's rows and its tracking record in one transaction, in this schema.

        A transaction-scoped advisory lock on the projection's name serializes workers of
        one projection (appends never wait for it); the position is checked under it.
        The commit does not wait for its WAL flush (`synchronous_commit off`): a server
        crash can lose the newest view transactions, but each with its own tracking
        record, so the follower simply processes those notifications again; appends
        keep their full durability and no longer share their fsyncs with the follower's.
        """
        with self._using() as connection, connection.transaction():
            cursor = connection.cursor()
            # The schema, no flush wait and the lock in one round trip; the position in a
            # statement of its own, whose snapshot is taken once the lock is held.
            cursor.execute(self._sql["view_begin"], (self.schema, f"{self.schema} {name}"))
            if reset:
                cursor.execute(self._sql["untrack"], (name,))
            if track is not None:
                row = cursor.execute(self._sql["tracked"], (name,)).fetchone()
                position = None if row is None else int(row[0])
                if position != after:
                    raise TrackingConflict(
                        f"{name!r} is at notification {position}, not {after}: another worker "
                        "processed these notifications"
                    )
            yield cursor
            if (
                track is not None
                and cursor.execute(self._sql["track"], (name, track)).fetchone() is None
            ):
                raise IntegrityError(f"{name!r} already processed notification {track}")

    @contextmanager
    def view_reader(self) -> Iterator[psycopg.Cursor[_ROW]]:
        """A cursor in a read-only transaction with `search_path` set to this schema."""
        with self._using() as connection, connection.transaction():
            cursor = connection.cursor()
            cursor.execute(self._sql["view_read"], (self.schema,))
            yield cursor


_STATEMENTS = {
    "insert_topic": "INSERT INTO {s}.topics (topic) VALUES (%s) ON CONFLICT (topic) DO NOTHING",
    "topic_id": "SELECT id FROM {s}.topics WHERE topic = %s",
    "topic": "SELECT topic FROM {s}.topics WHERE id = %s",
    "topic_ids": "SELECT id FROM {s}.topics WHERE topic = ANY(%s)",
    "states": "SELECT originator_version, state FROM {s}.events"
    " WHERE originator_id = %s AND originator_version > %s ORDER BY originator_version",
    "snapshot": "SELECT version, state FROM {s}.snapshots WHERE originator_id = %s",
    "prefix_key": "SELECT key FROM {s}.prefix_key",
    "insert_prefix_key": "INSERT INTO {s}.prefix_key VALUES (1, %s) ON CONFLICT DO NOTHING",
    "prefixes": "SELECT digest, opaque, originator_id, version, position FROM {s}.prefixes"
    " WHERE digest = ANY(%s) ORDER BY position DESC",
    "insert_settled": "INSERT INTO {s}.settled SELECT %s, u.key, %s, u.value"
    " FROM unnest(%s::text[], %s::bytea[]) AS u(key, value)",
    "settled": "SELECT key, value FROM {s}.settled WHERE originator_id = %s"
    " AND key = ANY(%s) AND version <= %s ORDER BY key, version",
    "first_events": "SELECT f.originator_id, f.state,"
    " (SELECT max(e.originator_version) FROM {s}.events e WHERE e.originator_id = f.originator_id)"
    " FROM {s}.events f WHERE f.originator_version = 1 ORDER BY f.id LIMIT %s OFFSET %s",
    "first_events_newest": "SELECT f.originator_id, f.state,"
    " (SELECT max(e.originator_version) FROM {s}.events e WHERE e.originator_id = f.originator_id)"
    " FROM {s}.events f WHERE f.originator_version = 1 ORDER BY f.id DESC LIMIT %s OFFSET %s",
    "catalogue_entry": f"SELECT {catalogue.COLUMNS} FROM {{s}}.catalogue c WHERE c.id = %s",
    "catalogue_ids": "SELECT id FROM {s}.catalogue WHERE id BETWEEN %s AND %s ORDER BY id LIMIT %s",
    "first_ids": "SELECT originator_id FROM {s}.events WHERE originator_id BETWEEN %s AND %s"
    " AND originator_version = 1 ORDER BY originator_id LIMIT %s",
    "max_id": "SELECT max(id) FROM {s}.events",
    "responses": "SELECT attempt, originator_id, originator_version FROM {s}.responses"
    " WHERE provider = %s AND server = %s AND response_id = %s ORDER BY attempt",
    "log": "SELECT id, state FROM {s}.events WHERE id > %s AND id <= %s ORDER BY id LIMIT %s",
    "track": "INSERT INTO {s}.tracking VALUES (%s, %s) ON CONFLICT (application_name)"
    " DO UPDATE SET notification_id = EXCLUDED.notification_id"
    " WHERE tracking.notification_id < EXCLUDED.notification_id RETURNING notification_id",
    "tracked": "SELECT notification_id FROM {s}.tracking WHERE application_name = %s",
    "untrack": "DELETE FROM {s}.tracking WHERE application_name = %s",
    "view_read": "SELECT set_config('transaction_read_only', 'on', true),"
    " set_config('search_path', quote_ident(%s), true)",
    "view_begin": "SELECT set_config('search_path', quote_ident(%s), true),"
    " set_config('synchronous_commit', 'off', true),"
    " pg_advisory_xact_lock(hashtext('convstore view ' || %s))",
}


def _catalogue_params(row: CatalogueRow | None) -> tuple[Any, ...]:
    """The append function's catalogue parameters (all NULL without a row)."""
    if row is None:
        return (None,) * 10
    labels = None if row.labels is None else Jsonb(list(row.labels))
    return (
        row.originator_id,
        row.created_at,
        row.last_activity_at,
        row.provider,
        row.model,
        row.turns,
        row.events,
        row.title,
        labels,
        row.forked_from,
    )


def _open(connection: Connection) -> bool:
    """Whether an idle connection is still open: False once the server has ended it.

    A session the server ended between calls (an administrator, an idle timeout, a
    restart) left its farewell and then end-of-file in the socket; reading what has
    arrived, without waiting, finds them (a microsecond when nothing has), so the next
    call gets a new connection instead of the error, and no write is lost to it.
    """
    if connection.closed:
        return False
    try:
        for _ in range(2):  # the server's last message, then end-of-file
            connection.pgconn.consume_input()
    except psycopg.OperationalError:
        return False
    return not connection.closed


class PostgresSubscription(ListenNotifySubscription[PostgresRecorder]):
    """eventsourcing's pull-on-notify subscription, woken by the append function's NOTIFY."""

    def __init__(
        self, recorder: PostgresRecorder, gt: int | None = None, topics: Sequence[str] = ()
    ) -> None:
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        self._listen_thread = threading.Thread(target=self._listen, daemon=True)
        self._listen_thread.start()

    def __exit__(self, *args: object, **kwargs: Any) -> None:
        try:
            super().__exit__(*args, **kwargs)
        finally:
            self._listen_thread.join()

    def _loop_on_pull(self) -> None:
        """eventsourcing's pull loop, in a thread of its own whose connection ends with it.

        Without the release, each subscription left its pull thread's connection open
        until the recorder closed: a follower resubscribing for days ran the server out
        of connections.
        """
        try:
            super()._loop_on_pull()
        finally:
            self._recorder.release()

    def _listen(self) -> None:
        recorder = self._recorder
        try:
            with translating(), psycopg.connect(recorder.dsn, autocommit=True) as connection:
                connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(recorder.channel)))
                # An append committed between the first pull and LISTEN sent no wake-up.
                self._has_been_notified.set()
                while not self._has_been_stopped and not self._thread_error:
                    # A short timeout so a stop is noticed; the payload does not matter.
                    for _ in connection.notifies(timeout=0.1, stop_after=1):
                        self._has_been_notified.set()
        except BaseException as error:
            if self._thread_error is None:
                self._thread_error = error
            self.stop()


class _Group(CommitGroup):
    """A group's shared transaction on a thread's connection (autocommit otherwise)."""

    def __init__(
        self, connection: Connection, *, every: int, within: float, lost: Callable[[], None]
    ) -> None:
        super().__init__(every=every, within=within, lost=lost)
        self.connection = connection

    def _begin(self) -> None:
        self.connection.execute("BEGIN")

    def _in_transaction(self) -> bool:
        status = self.connection.info.transaction_status
        return status in (TransactionStatus.INTRANS, TransactionStatus.INERROR)

    def _execute(self, statement: str) -> None:
        self.connection.execute(statement)
