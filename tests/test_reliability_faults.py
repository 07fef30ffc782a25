"""Process faults and the notification log at full size (RELIABILITY 4, 25; issue 6's faults).

- PostgreSQL: the server ends a writer's session (`pg_terminate_backend`) in the middle of
  an append, of an ingest and of the search follower's view transaction, or while its
  connection sits idle between calls. The caller gets `ConnectionLost`, nothing of the
  transaction is stored, the same store object carries on, and every chain verifies.
  A trigger installed for the test parks the victim's transaction on an advisory lock the
  test holds, after the batch's first rows are inserted: the kill lands mid-transaction,
  never between statements by luck.
- SQLite disk full: `PRAGMA max_page_count` (a per-connection limit, set by a recorder
  subclass on each of its connections) and, where this process may mount one, a real
  tmpfs filled to the last byte. The caller gets `StorageFull`, no partial batch, the store
  stays readable and verifiable, and once there is room again the next write succeeds.
- Scenario 4 at full size (soak): eight writer processes append 1,000 events each while
  followers read the log; the lighter threaded version is
  `test_storage_contract.test_a_follower_sees_every_event_once_in_order`.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import random
import shutil
import sqlite3
import subprocess
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from convstore.domain import ConversationId, UserMessage
from convstore.domain.events import AssistantText, Event, ResponseEnded, ResponseStarted
from convstore.domain.service import ConversationService
from convstore.domain.vocabulary import ResponseId
from convstore.projections import search
from convstore.projections.follower import Follower
from convstore.projections.search import SearchIndex
from convstore.projections.verify import verify
from convstore.storage import PostgresLocation, Store, open_store
from convstore.storage.errors import ConnectionLost, OperationalError, StorageFull
from convstore.storage.recorder import ConversationRecorder
from convstore.storage.repository import EventRepository
from convstore.storage.sqlite import SQLiteRecorder
from convstore.storage.url import parse_location
from tests.conftest import BACKENDS, POSTGRES_DSN

STALL = "STALL-POINT"
"""Text that makes the test trigger park an insert on the test's advisory lock."""


def _message(text: str) -> UserMessage:
    return UserMessage(blocks=(text,))


def _texts(service: ConversationService, cid: ConversationId) -> list[str]:
    return [e.blocks[0] for e in service.events(cid) if isinstance(e, UserMessage)]


def _versions(service: ConversationService, cid: ConversationId) -> list[int]:
    return [e.originator_version for e in service.events(cid)]


def _assert_intact(store: Store | ConversationRecorder) -> None:
    report = verify(store)
    assert report.intact, report.breaks


# --- PostgreSQL: a backend terminated mid-transaction, or while idle -----------------------


class Victim:
    """A store whose sessions the test can stall mid-insert and terminate from outside."""

    def __init__(self, postgres_url: str) -> None:
        import psycopg

        location = parse_location(postgres_url)
        assert isinstance(location, PostgresLocation)
        self.schema = location.schema
        self.application = f"victim_{self.schema}"
        self.url = f"{postgres_url}&application_name={self.application}"
        self.admin = psycopg.connect(POSTGRES_DSN, autocommit=True)
        self.lock_key = f"{self.schema} stall"

    def install_stall(self) -> None:
        """A trigger parking any insert whose bytes hold `STALL` until the test lets go."""
        from psycopg import sql

        s = sql.Identifier(self.schema)
        self.admin.execute(
            sql.SQL(
                "CREATE FUNCTION {s}.stall() RETURNS trigger LANGUAGE plpgsql AS $$\n"
                "BEGIN\n"
                "  IF position(convert_to({marker}, 'UTF8') in NEW.state) > 0 THEN\n"
                "    PERFORM pg_advisory_xact_lock(hashtext({key}));\n"
                "  END IF;\n"
                "  RETURN NEW;\n"
                "END $$"
            ).format(s=s, marker=sql.Literal(STALL), key=sql.Literal(self.lock_key))
        )
        self.admin.execute(
            sql.SQL(
                "CREATE TRIGGER stall BEFORE INSERT ON {s}.events"
                " FOR EACH ROW EXECUTE FUNCTION {s}.stall()"
            ).format(s=s)
        )

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Hold the stall lock: a stalled insert waits until the block ends."""
        self.admin.execute("SELECT pg_advisory_lock(hashtext(%s))", (self.lock_key,))
        try:
            yield
        finally:
            self.admin.execute("SELECT pg_advisory_unlock(hashtext(%s))", (self.lock_key,))

    def wait_stalled(self, timeout: float = 30) -> None:
        """Until one of the victim's sessions waits on the stall lock."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = self.admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                " AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
                (self.application,),
            ).fetchone()
            if row is not None and row[0]:
                return
            time.sleep(0.02)
        raise AssertionError("the victim's insert never reached the stall point")

    def terminate(self) -> int:
        """End every session of the victim (waiting until each is gone); how many there were."""
        rows = self.admin.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
            " WHERE application_name = %s",
            (self.application,),
        ).fetchall()
        assert all(row[0] for row in rows)
        return len(rows)

    def close(self) -> None:
        self.admin.close()


@pytest.fixture
def victim(postgres_url: str) -> Iterator[Victim]:
    """A PostgreSQL store URL whose sessions can be stalled and terminated."""
    opened = Victim(postgres_url)
    try:
        yield opened
    finally:
        opened.close()


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run `call` in a thread; the list receives its result or exception."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def _killed_mid_transaction(victim: Victim, call: Callable[[], Any]) -> BaseException:
    """Run `call` until its insert stalls, terminate its session, and return what it raised."""
    with victim.holding():
        thread, outcome = _in_thread(call)
        victim.wait_stalled()
        assert victim.terminate() >= 1
        thread.join(timeout=60)
    assert len(outcome) == 1 and isinstance(outcome[0], BaseException), outcome
    return outcome[0]


def _assert_lost(error: BaseException) -> None:
    assert isinstance(error, ConnectionLost), repr(error)
    message = str(error)
    assert "connection" in message and "retry" in message, message
    assert "\n" not in message  # one line a person can act on


@pytest.mark.postgres
def test_append_killed_mid_transaction_writes_nothing_and_the_store_carries_on(
    victim: Victim,
) -> None:
    """RELIABILITY 2 and 25 under a terminated backend: nothing of the batch, then on."""
    victim_store = open_store(victim.url)
    try:
        service = victim_store.service
        cid = service.start("killed")
        service.append(cid, [_message("acknowledged")])
        victim.install_stall()
        batch = [_message("first row"), _message(f"{STALL} second row"), _message("third row")]

        error = _killed_mid_transaction(victim, lambda: service.append(cid, batch))

        _assert_lost(error)
        assert _texts(service, cid) == ["acknowledged"]  # the first row went with the rest
        service.append(cid, batch)  # the same store object: the retry commits whole
        service.append(cid, [_message("after")])
        assert _texts(service, cid) == ["acknowledged", *(m.blocks[0] for m in batch), "after"]
    finally:
        victim_store.close()
    with open_store(victim.url) as reopened:  # and a new one
        reopened.service.append(cid, [_message("reopened")])
        assert _versions(reopened.service, cid) == list(range(1, 8))
        _assert_intact(reopened)


def _response(rid: str, *texts: str) -> list[Event]:
    response_id = ResponseId(rid)
    return [
        ResponseStarted(response_id=response_id, provider="anthropic"),
        *(AssistantText(response_id=response_id, text=text) for text in texts),
        ResponseEnded(response_id=response_id, state="completed", finish_reason="stop"),
    ]


@pytest.mark.postgres
def test_ingest_killed_mid_transaction_can_be_ingested_again(victim: Victim) -> None:
    """RELIABILITY 3 after a cut commit: nothing stored, so the same response records whole."""
    with open_store(victim.url) as store:
        service = store.service
        cid = service.start("ingest")
        service.ingest(cid, _response("r1", "kept"))
        victim.install_stall()
        drafts = _response("r2", "before", f"{STALL} in the middle", "after")

        error = _killed_mid_transaction(victim, lambda: service.ingest(cid, drafts))

        _assert_lost(error)
        assert [type(e).__name__ for e in service.events(cid)][-1] == "TurnEnded"  # r1's
        outcome = service.ingest(cid, drafts)
        assert (outcome.ended, outcome.already_stored) == ("completed", False)
        assert service.ingest(cid, drafts).already_stored
        texts = [e.text for e in service.events(cid) if isinstance(e, AssistantText)]
        assert texts == ["kept", "before", f"{STALL} in the middle", "after"]
        _assert_intact(store)


@pytest.mark.postgres
def test_search_follower_killed_between_view_write_and_commit(victim: Victim) -> None:
    """RELIABILITY 6 with a terminated backend: no view rows without their tracking record."""
    killed: list[int] = []

    def fault(point: str) -> None:
        if point == "written" and not killed:  # view rows written, commit not yet sent
            killed.append(victim.terminate())

    with open_store(victim.url) as store:
        cid = store.service.start("indexed")
        store.service.append(cid, [_message(f"koicha number {i}") for i in range(50)])
        keeper = Follower(
            store.recorder,
            SearchIndex(store.recorder),
            mapper=store.repository.mapper,
            batch_size=20,
            fault=fault,
        )
        index = keeper.projection
        assert isinstance(index, SearchIndex)

        with pytest.raises(ConnectionLost) as raised:
            keeper.catch_up()

        _assert_lost(raised.value)
        assert killed == [1]
        assert keeper.position() is None and index.count() == 0  # rolled back together
        report = keeper.catch_up()  # the same follower, on a fresh connection
        assert report.position == store.recorder.max_notification_id()
        assert len(search.search(store, "koicha", limit=100)) == 50
        caught_up = index.dump()
        keeper.fault = None
        keeper.rebuild()
        assert index.dump() == caught_up  # equal to a rebuild: nothing twice, nothing lost


@pytest.mark.postgres
def test_connection_killed_while_idle_is_replaced_before_the_next_call(victim: Victim) -> None:
    """RELIABILITY 25, a server that went away: the next call, a write too, reconnects."""
    with open_store(victim.url) as store:
        service, recorder = store.service, store.recorder
        cid = service.start("idle")
        conversation = service.get(cid)

        assert victim.terminate() == 1
        conversation.record(_message("a write with no read before it"))
        store.repository.save(conversation)

        assert victim.terminate() == 1
        service.append(cid, [_message("through the service")])

        assert victim.terminate() == 1
        keeper = search.follower(store)
        keeper.setup()
        assert victim.terminate() == 1
        assert keeper.catch_up().position == recorder.max_notification_id()

        assert victim.terminate() == 1
        assert _texts(service, cid) == ["a write with no read before it", "through the service"]
        _assert_intact(store)


@pytest.mark.postgres
def test_subscriptions_leave_no_connection_behind(victim: Victim) -> None:
    """RELIABILITY 4's followers run for days: each subscription's connections end with it."""
    with open_store(victim.url) as store:
        store.service.start("followed")
        for _ in range(10):  # a follower resubscribes after every TrackingConflict
            with store.recorder.subscribe() as subscription:
                assert next(subscription).originator_version == 1
                subscription.stop()
        open_sessions = victim.admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (victim.application,),
        ).fetchone()
        assert open_sessions is not None and open_sessions[0] <= 2  # this thread's, a listener


# --- SQLite: disk full ------------------------------------------------------------------------


class CappedRecorder(SQLiteRecorder):
    """The SQLite recorder with `PRAGMA max_page_count` on every connection it uses.

    The limit is a connection's, not the file's: setting it on each connection as it is
    used is the only way to give every thread's connection the same full disk.
    """

    max_pages = 0
    """The database's size limit in pages (0: SQLite's own)."""

    def _connection(self) -> sqlite3.Connection:
        return self._capped(super()._connection())

    def _writer(self) -> sqlite3.Connection:
        return self._capped(super()._writer())

    def _capped(self, connection: sqlite3.Connection) -> sqlite3.Connection:
        if self.max_pages:
            connection.execute(f"PRAGMA max_page_count = {self.max_pages}")
        return connection

    def page_count(self) -> int:
        """The database's size in pages now."""
        return int(self._connection().execute("PRAGMA page_count").fetchone()[0])


def _store_on(recorder: SQLiteRecorder) -> Store:
    """A store around a recorder built by the test (`open_store` builds its own)."""
    repository = EventRepository(recorder, cache_size=100)
    location = parse_location(f"sqlite:///{recorder.path}")
    return Store(location, recorder, repository, ConversationService(repository))


def _assert_full(error: BaseException) -> None:
    assert isinstance(error, StorageFull), repr(error)
    message = str(error)
    assert "full" in message and "free" in message and "retry" in message, message


def _fill(service: ConversationService, cid: ConversationId) -> tuple[int, BaseException]:
    """Append two ~3 KB messages a batch until the store refuses; (batches, the refusal)."""
    for batch in range(100_000):
        try:
            service.append(cid, [_message(f"{batch}a " + "x" * 3000), _message(f"{batch}b")])
        except Exception as error:
            return batch, error
    raise AssertionError("the store never filled up")


def _integrity(path: str) -> str:
    with contextlib.closing(sqlite3.connect(path)) as connection:
        return str(connection.execute("PRAGMA integrity_check").fetchone()[0])


def test_sqlite_full_refuses_whole_batches_and_resumes_once_there_is_room(
    tmp_path: Path,
) -> None:
    """RELIABILITY 2 and 25 at a size limit: StorageFull, whole batches only, then on again."""
    recorder = CappedRecorder(tmp_path / "full.db")
    with _store_on(recorder) as store:
        service = store.service
        cid = service.start("filling")
        keeper = search.follower(store)
        keeper.catch_up()
        recorder.max_pages = recorder.page_count() + 40

        acknowledged, error = _fill(service, cid)

        _assert_full(error)
        assert acknowledged > 0
        assert _versions(service, cid) == list(range(1, 2 * acknowledged + 2))  # whole batches
        assert len(service.list()) == 1 and [
            h.kind for h in search.search(store, "filling", catch_up=False)
        ] == ["title"]
        _assert_intact(store)
        with pytest.raises(StorageFull) as index_full:  # the index shares the full file
            keeper.catch_up()
        _assert_full(index_full.value)
        assert keeper.position() == 1  # the Started event's batch only: nothing half-indexed

        recorder.max_pages = 0  # room again: the same store object writes on
        recorder.close()  # (a connection's limit stays until it is reopened)
        service.append(cid, [_message("after the disk was freed")])
        assert keeper.catch_up().position == recorder.max_notification_id()
        assert len(search.search(store, "freed")) == 1
    assert _integrity(recorder.path) == "ok"
    with open_store(f"sqlite:///{recorder.path}") as reopened:
        assert len(_texts(reopened.service, cid)) == 2 * acknowledged + 1
        _assert_intact(reopened)


@contextlib.contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (skips the test where mounting is not allowed)."""
    mount = shutil.which("mount")
    if os.name != "posix" or os.geteuid() != 0 or mount is None:
        pytest.skip("mounting a tmpfs needs root (the max_page_count test covers the rest)")
    where.mkdir()
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_sqlite_on_a_full_filesystem_refuses_writes_and_resumes_once_freed(
    tmp_path: Path,
) -> None:
    """RELIABILITY 2 and 25 on a full filesystem (real ENOSPC): StorageFull, on once freed."""
    with _tmpfs(tmp_path / "fs", "4m") as fs:
        path = fs / "store.db"
        with open_store(f"sqlite:///{path}") as store:
            service = store.service
            cid = service.start("filling")
            keeper = search.follower(store)
            keeper.catch_up()
            filler = fs / "filler"
            with contextlib.suppress(OSError), filler.open("wb") as out:
                while True:  # take every byte but a few pages
                    out.write(b"\0" * 4096)
                    out.flush()
            filler.write_bytes(b"\0" * max(filler.stat().st_size - 200_000, 0))

            acknowledged, error = _fill(service, cid)

            _assert_full(error)
            assert _versions(service, cid) == list(range(1, 2 * acknowledged + 2))
            _assert_intact(store)
            with pytest.raises(StorageFull):
                keeper.catch_up()
            position = keeper.position()

            filler.unlink()  # space freed: the same store object writes on
            service.append(cid, [_message("after the disk was freed")])
            report = keeper.catch_up()
            assert report.position == store.recorder.max_notification_id()
            assert report.events == report.position - (position or 0)
            assert len(search.search(store, "freed")) == 1
        assert _integrity(str(path)) == "ok"
        with open_store(f"sqlite:///{path}") as reopened:
            assert len(_texts(reopened.service, cid)) == 2 * acknowledged + 1
            _assert_intact(reopened)


# --- RELIABILITY 4 at full size: eight writer processes, 1,000 events each --------------------

WRITERS = 8
EVENTS_EACH = 1000


def _busy(error: OperationalError) -> bool:
    """Whether SQLite refused the write lock after its busy timeout (nothing was written)."""
    cause = error.__cause__
    return getattr(cause, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY


def _writer(url: str, worker: int, start: Barrier, results: Any) -> None:
    """One process: `EVENTS_EACH` events over conversations of its own, in batches of 1-3.

    A writer refused the lock past its 5 s timeout (RELIABILITY 25's typed error, nothing
    written) does what a caller does: tries again. Such retries are counted and reported;
    since the SQLite recorder polls the lock instead of leaving the wait to SQLite's busy
    handler (whose growing sleeps let a writer that commits and begins again at once keep
    the lock), runs here have had none.
    """
    outcome: dict[str, Any] = {
        "worker": worker,
        "events": 0,
        "conversations": [],
        "busy": 0,
        "error": None,
    }

    def write(call: Callable[[], Any]) -> Any:
        while True:
            try:
                return call()
            except OperationalError as error:
                if not _busy(error):
                    raise
                outcome["busy"] += 1

    try:
        rng = random.Random(worker)
        with open_store(url) as store:
            service = store.service
            start.wait(timeout=120)
            while outcome["events"] < EVENTS_EACH:
                cid = write(functools.partial(service.start, f"writer {worker}"))
                outcome["conversations"].append(str(cid))
                outcome["events"] += 1
                for _ in range(rng.randint(5, 30)):
                    size = min(rng.randint(1, 3), EVENTS_EACH - outcome["events"])
                    if size == 0:
                        break
                    batch = [_message(f"w{worker} {i}") for i in range(size)]
                    write(functools.partial(service.append, cid, batch))
                    outcome["events"] += size
    except BaseException:  # reported to the parent, which fails the test
        outcome["error"] = traceback.format_exc()
    results.put(outcome)


def _poll(recorder: ConversationRecorder, done: threading.Event, seen: list[int]) -> None:
    """Read the log after the last id seen until the writers are done and it is read out."""
    while True:
        finished = done.is_set()  # read before polling: one full pass after the end
        batch = recorder.select_log(seen[-1] if seen else None, 97)
        seen.extend(nid for nid, _ in batch)
        if finished and not batch:
            return
        if not batch:
            time.sleep(0.005)


def _subscribe(recorder: ConversationRecorder, total: int, seen: list[int]) -> None:
    """Take notifications as LISTEN/NOTIFY wakes the subscription, up to `total`."""
    with recorder.subscribe() as subscription:
        for notification in subscription:
            seen.append(notification.id)
            if len(seen) == total:
                return


@pytest.mark.soak
@pytest.mark.parametrize("backend", BACKENDS)
def test_eight_writer_processes_and_followers_see_the_same_log(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """RELIABILITY 4: the ids followers saw equal the final log, none skipped or repeated."""
    url: str = request.getfixturevalue(f"{backend}_url")
    total = WRITERS * EVENTS_EACH
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(WRITERS + 1), context.Queue()
    with open_store(url) as store:
        recorder = store.recorder
        done = threading.Event()
        polled: list[int] = []
        readers = [threading.Thread(target=_poll, args=(recorder, done, polled))]
        pushed: list[int] = []
        if backend == "postgres":
            readers.append(threading.Thread(target=_subscribe, args=(recorder, total, pushed)))
        for reader in readers:
            reader.start()
        writers = [
            context.Process(target=_writer, args=(url, w, start, results)) for w in range(WRITERS)
        ]
        for writer in writers:
            writer.start()
        try:
            start.wait(timeout=120)
            outcomes = [results.get(timeout=600) for _ in writers]
        finally:
            for writer in writers:
                writer.join(timeout=60)
            done.set()
            for reader in readers:
                reader.join(timeout=120)
        assert [o["error"] for o in outcomes] == [None] * WRITERS
        busy = sum(o["busy"] for o in outcomes)
        print(f"scenario 4 on {backend}: {total} events, {busy} busy retries")
        assert sum(o["events"] for o in outcomes) == total

        log = [nid for nid, _ in recorder.select_log(None, 2 * total)]
        assert len(log) == total
        assert polled == log  # none skipped, none repeated, in order
        if backend == "postgres":
            assert pushed == log  # and through LISTEN/NOTIFY alike
        conversations = [UUID(c) for o in outcomes for c in o["conversations"]]
        assert len(set(conversations)) == len(conversations)
        report = verify(store)
        assert report.intact and report.conversations == len(conversations)
        assert report.events == total
