"""The storage contract, run on SQLite and on PostgreSQL.

Two layers: eventsourcing's own recorder contract tests (subclassed per backend, their
abstract bases deleted so pytest does not collect them), and our repository/service
contract (`TestStoreContract`), parametrized over both backends by the `store_url`
fixture.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, cast
from uuid import uuid4

import msgspec
import pytest
from eventsourcing.persistence import ProcessRecorder, StoredEvent
from eventsourcing.tests.persistence import (
    ApplicationRecorderTestCase,
    NonInterleavingNotificationIDsBaseCase,
    ProcessRecorderTestCase,
    TrackingRecorderTestCase,
)
from hypothesis import HealthCheck, given, settings

from convstore.domain import (
    Conversation,
    ConversationId,
    ProviderPayload,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    Started,
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.errors import ConcurrencyConflict, ConversationNotFound, EventTooLarge
from convstore.domain.service import ConversationService
from convstore.storage import PostgresLocation, Store, open_store, parse_location
from convstore.storage.errors import IntegrityError, OperationalError
from convstore.storage.postgres import PostgresRecorder
from convstore.storage.recorder import ConversationRecorder
from convstore.storage.repository import EventRepository
from convstore.storage.sqlite import SQLiteRecorder
from tests.conftest import drop_postgres_schema
from tests.strategies import conversation_drafts


def _postgres_location(url: str) -> PostgresLocation:
    location = parse_location(url)
    assert isinstance(location, PostgresLocation)
    return location


def _postgres_recorder(url: str, **kwargs: Any) -> PostgresRecorder:
    location = _postgres_location(url)
    return PostgresRecorder(location.dsn, schema=location.schema, **kwargs)


# --- eventsourcing's contract tests -----------------------------------------------------------


class _SQLite:
    """Backend mixin: a fresh SQLite file per test."""

    path: Path

    @pytest.fixture(autouse=True)
    def _database(self, tmp_path: Path) -> None:
        self.path = tmp_path / "contract.db"

    def create_recorder(self) -> Any:
        recorder = SQLiteRecorder(self.path)
        cast(Any, self).addCleanup(recorder.close)
        return recorder


@pytest.mark.postgres
class _Postgres:
    """Backend mixin: a fresh PostgreSQL schema per test."""

    url: str

    @pytest.fixture(autouse=True)
    def _database(self, postgres_url: str) -> None:
        self.url = postgres_url

    def create_recorder(self) -> Any:
        recorder = _postgres_recorder(self.url)
        cast(Any, self).addCleanup(recorder.close)
        return recorder


# AggregateRecorderTestCase does not apply: it requires `insert_events` to return None,
# which only a recorder without a notification log does; ours return notification ids.


class TestSQLiteApplicationRecorder(_SQLite, ApplicationRecorderTestCase[Any]):
    """eventsourcing's ApplicationRecorder contract on SQLite."""


class TestSQLiteTrackingRecorder(_SQLite, TrackingRecorderTestCase):
    """eventsourcing's TrackingRecorder contract on SQLite."""


class TestSQLiteProcessRecorder(_SQLite, ProcessRecorderTestCase):
    """Events and a tracking record in one transaction, on SQLite."""


class TestSQLiteNonInterleaving(_SQLite, NonInterleavingNotificationIDsBaseCase):
    """Two racing batches get disjoint ranges of notification ids, on SQLite."""


class TestPostgresApplicationRecorder(_Postgres, ApplicationRecorderTestCase[Any]):
    """eventsourcing's ApplicationRecorder contract on PostgreSQL, with subscriptions."""

    def test_insert_subscribe(self) -> None:
        self.optional_test_insert_subscribe()


class TestPostgresTrackingRecorder(_Postgres, TrackingRecorderTestCase):
    """eventsourcing's TrackingRecorder contract on PostgreSQL."""


class TestPostgresProcessRecorder(_Postgres, ProcessRecorderTestCase):
    """Events and a tracking record in one transaction, on PostgreSQL."""


class TestPostgresNonInterleaving(_Postgres, NonInterleavingNotificationIDsBaseCase):
    """Two racing batches get disjoint ranges of notification ids, on PostgreSQL."""


del (
    ApplicationRecorderTestCase,
    NonInterleavingNotificationIDsBaseCase,
    ProcessRecorderTestCase,
    TrackingRecorderTestCase,
)


def test_sqlite_cannot_subscribe(tmp_path: Path) -> None:
    recorder = SQLiteRecorder(tmp_path / "s.db")
    try:
        with pytest.raises(NotImplementedError, match="poll"):
            recorder.subscribe()
    finally:
        recorder.close()


def test_our_recorders_are_process_recorders_in_all_but_name() -> None:
    # eventsourcing's ProcessRecorder adds nothing but `insert_events(tracking=...)`.
    assert set(ProcessRecorder.__abstractmethods__) <= set(dir(ConversationRecorder))


# --- our repository and service contract ------------------------------------------------------

MEGABYTE_VALUE = b'{"data":"' + b"\\u00e9abc" * 131_072 + b'","n":1.0e10}'
"""Just over 1 MB of JSON, escapes and all."""

PAYLOAD_VALUES = (
    b'{"b":1,"a":2,"c":{"z":[],"y":{}}}',
    b'"\\u00e9\\ud83d\\ude00\\n\\"\\\\"',
    b'{"text":"caf\xc3\xa9 \xe2\x9c\x93"}',
    b"123456789012345678901234567890",
    b'{"big":123456789012345678901234567890}',
    b"1.0e10",
    b"-0.0",
    b"[1.0e10,-0.0,1E+2,2.50,1e-7,0.1]",
    b'{"dup":1,"dup":2}',
    b'{ "spaced" : [ 1 , 2 ] ,\n  "tabbed":\t"x" }',
    b"null",
    MEGABYTE_VALUE,
)


R1 = ResponseId("r1")


def _message(text: str = "hello") -> UserMessage:
    return UserMessage(blocks=(text,))


def _versions(store: Store, conversation_id: ConversationId) -> list[int]:
    return [version for version, _ in store.recorder.select_states(conversation_id)]


def _own_response_ids(drafts: list[Any]) -> list[Any]:
    """The drafts with response ids of their own: a response id is stored once per store,
    and hypothesis examples share one."""
    suffix = uuid4().hex[:8]
    return [
        msgspec.structs.replace(d, response_id=f"{d.response_id}_{suffix}")
        if getattr(d, "response_id", None) is not None
        else d
        for d in drafts
    ]


class TestStoreContract:
    """What every backend promises the service; each test runs on SQLite and PostgreSQL."""

    def test_start_append_get_and_events_in_order(self, store: Store) -> None:
        service = store.service
        cid = service.start("first", ["a", "b"])
        recorded = service.append(cid, [_message("one"), _message("two")])
        recorded += service.append(cid, [_message("three")])

        conversation = service.get(cid)
        assert conversation.version == 4
        events = list(service.events(cid))
        assert [e.originator_version for e in events] == [1, 2, 3, 4]
        assert isinstance(events[0], Started)
        assert events[0].title == "first" and events[0].labels == ("a", "b")
        assert events[1:] == recorded
        assert list(service.events(cid, after=2)) == recorded[1:]

    def test_unknown_conversation_is_not_found(self, store: Store) -> None:
        missing = ConversationId(uuid4())
        with pytest.raises(ConversationNotFound):
            store.service.get(missing)
        with pytest.raises(ConversationNotFound):
            list(store.service.events(missing))

    def test_list_pages_in_start_order_with_event_counts(self, store: Store) -> None:
        ids = [store.service.start(f"c{i}", [f"l{i}"]) for i in range(5)]
        store.service.append(ids[3], [_message(), _message()])

        pages = [store.service.list(offset=offset, limit=2) for offset in (0, 2, 4, 6)]
        assert [[s.title for s in page] for page in pages] == [
            ["c0", "c1"],
            ["c2", "c3"],
            ["c4"],
            [],
        ]
        listed = [s for page in pages for s in page]
        assert [s.id for s in listed] == ids
        assert [s.events for s in listed] == [1, 1, 1, 3, 1]
        assert listed[0].labels == ("l0",)

    def test_reload_in_a_new_store_equals_the_saved_aggregate(self, store_url: str) -> None:
        with open_store(store_url) as first:
            cid = first.service.start("t")
            first.service.append(cid, [_message("x")])
            saved = first.service.get(cid)
        with open_store(store_url) as second:
            assert second.service.get(cid) == saved
            assert second.service.list()[0].id == cid

    @given(drafts=conversation_drafts())
    @settings(
        max_examples=10,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    def test_any_valid_conversation_reloads_equal(self, store: Store, drafts: list[Any]) -> None:
        conversation = Conversation(ConversationId(uuid4()))  # fresh: examples share a store
        conversation.record_all(_own_response_ids(drafts))
        events = list(conversation.pending)

        store.repository.save(conversation)

        assert store.repository.load(conversation.id) == conversation
        assert list(store.repository.events(conversation.id)) == events

    def test_snapshot_load_equals_full_replay(self, store_url: str) -> None:
        with open_store(store_url, snapshot_every=5) as store:
            cid = store.service.start("snapped")
            for size in (1, 3, 2, 4, 2):  # versions 2, 5, 7, 11, 13: 10 is crossed inside a batch
                store.service.append(cid, [_message(str(i)) for i in range(size)])

            snapshot = store.recorder.select_snapshot(cid)
            assert snapshot is not None
            assert snapshot.version == 11  # taken at the end of the batch that crossed 10

            loaded = store.repository.load(cid)
            replayed = Conversation.replay(cid, store.service.events(cid))
            assert loaded == replayed
            assert loaded.version == 13

            # The next append folds on top of the snapshot.
            store.service.append(cid, [_message("after")])
            assert store.service.get(cid) == Conversation.replay(cid, store.service.events(cid))

    def test_no_snapshot_below_the_interval(self, store_url: str) -> None:
        with open_store(store_url, snapshot_every=5) as store:
            cid = store.service.start()
            store.service.append(cid, [_message(), _message()])
            assert store.recorder.select_snapshot(cid) is None

    def test_event_too_large_is_refused_before_anything_is_written(self, store_url: str) -> None:
        """Scenario 21, both backends: an event over max_event_bytes is a typed EventTooLarge before
        anything of its batch is written."""
        with open_store(store_url, max_event_bytes=1000) as store:
            cid = store.service.start()
            store.service.append(cid, [_message("fits")])
            before = store.recorder.max_notification_id()

            with pytest.raises(EventTooLarge, match="max_event_bytes"):
                store.service.append(cid, [_message("small"), _message("x" * 2000)])
            with pytest.raises(EventTooLarge):
                store.service.append(cid, [_message("x" * 2000)])

            assert _versions(store, cid) == [1, 2]
            assert store.recorder.max_notification_id() == before
            assert store.service.get(cid).version == 2

    def test_a_stale_batch_writes_nothing(self, store: Store) -> None:
        """Scenario 2, both backends: a stale batch of three raises the typed conflict and none of
        it is written."""
        cid = store.service.start()
        stale = store.repository.load(cid)
        winner = store.service.append(cid, [_message("winner")])

        stale.record_all([_message("a"), _message("b"), _message("c")])
        with pytest.raises(ConcurrencyConflict, match="reload and retry"):
            store.repository.save(stale)

        events = list(store.service.events(cid))
        assert [e.originator_version for e in events] == [1, 2]
        assert events[1] == winner[0]

    @pytest.mark.parametrize("taken", [0, 1, 2])
    def test_a_batch_with_one_taken_position_writes_nothing(self, store: Store, taken: int) -> None:
        """Scenario 2, both backends: one taken position anywhere in a batch fails it whole; nothing
        written, no notification id used."""
        recorder, cid = store.recorder, uuid4()
        recorder.append([StoredEvent(cid, 1, "topic.a", b"{}")])
        before = recorder.max_notification_id()
        batch = [StoredEvent(cid, v, "topic.b", b"[]") for v in (2, 3, 4)]
        batch[taken] = StoredEvent(cid, 1, "topic.b", b"[]")

        with pytest.raises(IntegrityError):
            recorder.append(batch)

        assert recorder.select_states(cid) == [(1, b"{}")]
        assert [n.id for n in recorder.select_notifications(before, 10)] == [before]
        assert recorder.select_snapshot(cid) is None

    def test_provider_payloads_survive_byte_for_byte(self, store_url: str) -> None:
        payloads = [ProviderPayload.of("acme", "block", value) for value in PAYLOAD_VALUES]
        assert [p.raw for p in payloads] == list(PAYLOAD_VALUES)  # nothing to strip
        with open_store(store_url) as store:
            cid = store.service.start()
            store.service.append(
                cid,
                [
                    ResponseStarted(response_id=R1, provider="acme"),
                    *(UnknownArtifact(payload=p, response_id=R1) for p in payloads),
                    ResponseEnded(response_id=R1, state="completed"),
                ],
            )
        with open_store(store_url) as reopened:  # a new connection reads it back
            artifacts = [e for e in reopened.service.events(cid) if isinstance(e, UnknownArtifact)]
            assert [a.payload.raw for a in artifacts] == list(PAYLOAD_VALUES)
            assert reopened.service.get(cid).version == len(PAYLOAD_VALUES) + 3


# --- the notification log under concurrent writers (RELIABILITY 4, 5) ---------------------


def test_a_follower_sees_every_event_once_in_order(store: Store) -> None:
    """Scenarios 4 (in small: threads, both backends) and 5: writers race on different
    conversations while a follower polls the log; a rolled-back batch (a gap on PostgreSQL) is
    passed over; the follower saw exactly the final log."""
    recorder = store.recorder
    done = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []

    def write(worker: int) -> None:
        try:
            for _ in range(40):
                cid = uuid4()
                recorder.append([StoredEvent(cid, v, f"w{worker}", b"{}") for v in (1, 2, 3)])
            # A rolled-back batch: on PostgreSQL it consumes ids, leaving a gap.
            with contextlib.suppress(IntegrityError):
                recorder.append([StoredEvent(cid, 4, "w", b"{}"), StoredEvent(cid, 1, "w", b"")])
        except BaseException as error:
            errors.append(error)

    def follow() -> None:
        try:
            while True:
                finished = done.is_set()  # read before polling: one full pass after the end
                batch = recorder.select_notifications(
                    seen[-1] if seen else None, 7, inclusive_of_start=False
                )
                seen.extend(n.id for n in batch)
                if finished and not batch:
                    return
        except BaseException as error:
            errors.append(error)

    follower = threading.Thread(target=follow)
    follower.start()
    writers = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    done.set()
    follower.join()

    assert errors == []
    log = [n.id for n in recorder.select_notifications(None, 10_000)]
    assert len(log) == 4 * 40 * 3
    assert seen == log  # none skipped, none repeated, in order


# --- a busy database: bounded retry, then a typed error, nothing partial (RELIABILITY 25) -----


def _assert_busy_then_free(service: ConversationService, cid: ConversationId) -> None:
    started = time.monotonic()
    with pytest.raises(OperationalError):
        service.append(cid, [_message("blocked a"), _message("blocked b")])
    waited = time.monotonic() - started
    assert 0.15 <= waited < 5, f"waited {waited:.2f}s for a 0.2s timeout"


def test_busy_sqlite_gives_a_typed_error_and_commits_nothing(tmp_path: Path) -> None:
    """Scenario 25 on SQLite: another connection holds the write lock; busy_timeout bounds the wait,
    then a typed OperationalError; nothing of the batch is committed, reads go on."""
    path = tmp_path / "busy.db"
    recorder = SQLiteRecorder(path, busy_timeout_ms=200)
    service = ConversationService(EventRepository(recorder))
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        cid = service.start()
        service.append(cid, [_message("before")])  # its topic is interned already
        blocker.execute("BEGIN IMMEDIATE")

        _assert_busy_then_free(service, cid)
        assert [e.originator_version for e in service.events(cid)] == [1, 2]  # reads go on

        blocker.execute("ROLLBACK")
        assert [e.originator_version for e in service.events(cid)] == [1, 2]
        service.append(cid, [_message("after")])
        assert service.get(cid).version == 3
    finally:
        blocker.close()
        recorder.close()


def test_a_waiting_sqlite_writer_takes_the_lock_once_it_is_free(tmp_path: Path) -> None:
    """Scenario 25 on SQLite: a writer waiting for another's lock takes it as soon as it is
    released within the timeout, and writes."""
    path = tmp_path / "wait.db"
    recorder = SQLiteRecorder(path, busy_timeout_ms=5000)
    service = ConversationService(EventRepository(recorder))
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        cid = service.start()
        service.append(cid, [_message("before")])  # its topic is interned already
        blocker.execute("BEGIN IMMEDIATE")
        release = threading.Timer(0.3, blocker.execute, args=("ROLLBACK",))
        release.start()
        service.append(cid, [_message("waited")])  # blocks until the release, then writes
        release.join()
        assert service.get(cid).version == 3
        assert recorder.max_notification_id() == 3
    finally:
        blocker.close()
        recorder.close()


@pytest.mark.postgres
def test_busy_postgres_gives_a_typed_error_and_commits_nothing(postgres_url: str) -> None:
    """Scenario 25 on PostgreSQL: another transaction holds the events table lock; lock_timeout
    bounds the wait, then a typed OperationalError; nothing of the batch is committed, reads go
    on."""
    import psycopg
    from psycopg import sql

    location = _postgres_location(postgres_url)
    recorder = _postgres_recorder(postgres_url, lock_timeout_ms=200)
    service = ConversationService(EventRepository(recorder))
    blocker = psycopg.connect(location.dsn)
    try:
        cid = service.start()
        service.append(cid, [_message("before")])
        blocker.execute(
            sql.SQL("LOCK TABLE {}.events IN EXCLUSIVE MODE").format(
                sql.Identifier(location.schema)
            )
        )

        _assert_busy_then_free(service, cid)
        assert [e.originator_version for e in service.events(cid)] == [1, 2]  # reads go on

        blocker.rollback()
        service.append(cid, [_message("after")])
        assert [e.originator_version for e in service.events(cid)] == [1, 2, 3]
    finally:
        blocker.close()
        recorder.close()


# --- PostgreSQL specifics -------------------------------------------------------------------


@pytest.mark.postgres
def test_concurrent_first_opens_of_a_schema_all_succeed(postgres_url: str) -> None:
    fresh = f"{postgres_url}_fresh"  # a schema nobody created yet
    opened: list[PostgresRecorder] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def open_one() -> None:
        try:
            start.wait()
            opened.append(_postgres_recorder(fresh))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len(opened) == 4
        opened[0].append([StoredEvent(uuid4(), 1, "t", b"{}")])
        assert opened[3].max_notification_id() == 1
    finally:
        for recorder in opened:
            recorder.close()
        drop_postgres_schema(_postgres_location(fresh).schema)


@pytest.mark.postgres
def test_a_lost_connection_is_replaced(postgres_url: str) -> None:
    import psycopg

    name = f"lost_{uuid4().hex[:12]}"  # marks this recorder's connections, and only them
    recorder = _postgres_recorder(f"{postgres_url}&application_name={name}")
    admin = psycopg.connect(_postgres_location(postgres_url).dsn, autocommit=True)
    cid = uuid4()

    def kill_connections() -> None:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (name,),
        )

    try:
        recorder.append([StoredEvent(cid, 1, "t", b"{}")])
        kill_connections()
        assert recorder.select_states(cid) == [(1, b"{}")]  # a read is repeated once
        kill_connections()
        # A connection seen dead before the call is replaced; one that dies under a write
        # is not retried (the write's outcome is unknown): which of the two happens depends
        # on whether the server's goodbye has reached the socket yet.
        try:
            recorder.append([StoredEvent(cid, 2, "t", b"{}")])
        except OperationalError:
            recorder.append([StoredEvent(cid, 2, "t", b"[]")])
        assert recorder.select_states(cid) in (
            [(1, b"{}"), (2, b"{}")],
            [(1, b"{}"), (2, b"[]")],
        )
    finally:
        admin.close()
        recorder.close()


def test_closing_a_store_ends_its_running_subscriptions(postgres_url: str) -> None:
    """A subscription nobody stopped ends with its store: its pull thread (not a daemon)
    would otherwise keep the process alive at exit."""
    store = open_store(postgres_url)
    store.service.start("subscribed")
    subscription = store.recorder.subscribe(gt=None)
    first = next(iter(subscription))
    assert first.originator_version == 1
    store.close()
    with pytest.raises(StopIteration):
        next(subscription)
    pull_thread = cast(Any, subscription)._pull_thread
    pull_thread.join(timeout=10)
    assert not pull_thread.is_alive()
