"""Group commit (`storage.groups`): appends committed together, each its own savepoint,
acknowledged only once committed; both backends, and batch ingest killed mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from convstore.domain import Conversation, ConversationId, TurnEnded, TurnStarted, UserMessage
from convstore.domain.errors import ConcurrencyConflict
from convstore.domain.vocabulary import TurnId
from convstore.storage import Store, open_store
from convstore.storage.errors import StorageFull
from tests.replay_server import EXAMPLES
from tests.test_reliability_faults import CappedRecorder, _store_on


def _turn(text: str) -> list[TurnStarted | UserMessage | TurnEnded]:
    turn = TurnId(f"turn-{text}")
    return [TurnStarted(turn_id=turn), UserMessage(blocks=(text,)), TurnEnded(turn_id=turn)]


def _texts(store: Store, conversation: ConversationId) -> list[str]:
    return [e.blocks[0] for e in store.service.events(conversation) if isinstance(e, UserMessage)]


def test_a_group_commits_together_and_acknowledges_only_then(store_url: str) -> None:
    with open_store(store_url) as store, open_store(store_url) as other:
        one, two = store.service.start("one"), store.service.start("two")
        acknowledged: list[str] = []
        with store.recorder.grouped(every=1000, within=3600, lost=lambda: None) as group:
            store.service.append(one, _turn("a"))
            group.after_commit(lambda: acknowledged.append("a"))
            store.service.append(two, _turn("b"))
            group.after_commit(lambda: acknowledged.append("b"))
            assert _texts(store, one) == ["a"]  # the group's thread reads what it wrote
            assert acknowledged == []
            assert _texts(other, one) == [] and _texts(other, two) == []  # not committed yet
        assert acknowledged == ["a", "b"]
        assert _texts(other, one) == ["a"] and _texts(other, two) == ["b"]


def test_a_group_commits_every_so_many_appends(store_url: str) -> None:
    with open_store(store_url) as store, open_store(store_url) as other:
        conversation = store.service.start("counted")
        acknowledged: list[int] = []
        with store.recorder.grouped(every=2, within=3600, lost=lambda: None) as group:
            for n in range(3):
                store.service.append(conversation, _turn(str(n)))
                group.after_commit(lambda n=n: acknowledged.append(n))
            assert acknowledged == [0, 1]  # the second append's commit held both
            assert _texts(other, conversation) == ["0", "1"]
        assert acknowledged == [0, 1, 2]


def test_a_conflict_in_one_conversation_leaves_the_others_appends(store_url: str) -> None:
    with open_store(store_url) as store:
        one, two = store.service.start("one"), store.service.start("two")
        stale = store.repository.load(one)
        with store.recorder.grouped(every=1000, within=3600, lost=lambda: None):
            store.service.append(one, _turn("kept"))
            stale.record_all(_turn("stale"))
            with pytest.raises(ConcurrencyConflict):
                store.repository.save(stale)  # its version is taken: its savepoint undone
            store.service.append(two, _turn("after"))
    with open_store(store_url) as reopened:
        assert _texts(reopened, one) == ["kept"] and _texts(reopened, two) == ["after"]
        assert [e.originator_version for e in reopened.service.events(one)] == [1, 2, 3, 4]


def test_a_full_disk_under_a_group_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """A full disk under a group: every append acknowledged is stored and none other is
    (the refused append's savepoint is undone; what a transaction SQLite rolled back held
    is reported lost); the store then writes on."""
    recorder = CappedRecorder(tmp_path / "full.db")
    with _store_on(recorder) as store:
        conversation = store.service.start("filling")
        recorder.max_pages = recorder.page_count() + 30
        acknowledged: list[int] = []
        lost: list[int] = []
        failed = False
        grouped = store.recorder.grouped(every=5, within=3600, lost=store.repository.forget)
        with pytest.raises(StorageFull), grouped as group:  # from an append or the commit
            for n in range(100_000):
                try:
                    store.service.append(conversation, _turn(f"{n} " + "x" * 2000))
                except StorageFull:
                    failed = True
                    raise
                group.after_commit(
                    lambda n=n: acknowledged.append(n), lambda error, n=n: lost.append(n)
                )
        assert failed and acknowledged
        assert set(acknowledged).isdisjoint(lost)  # lost: what a rolled-back transaction held
        recorder.max_pages = 0
        recorder.close()
        stored = [int(text.split()[0]) for text in _texts(store, conversation)]
        assert stored == acknowledged  # nothing acknowledged is lost; nothing else is claimed
        store.service.append(conversation, _turn("on again"))  # the cache forgot the lost ones
    with open_store(f"sqlite:///{recorder.path}") as reopened:
        assert _texts(reopened, conversation)[-1] == "on again"


def test_a_commit_that_fails_acknowledges_nothing_it_held(postgres_url: str) -> None:
    """PostgreSQL refuses the group's COMMIT (a deferred constraint trigger, checked only
    then): every append it held is reported lost, none acknowledged, none stored, the
    cache forgets them, and the store writes on."""
    import psycopg
    from psycopg import sql

    from convstore.storage.url import PostgresLocation, parse_location

    location = parse_location(postgres_url)
    assert isinstance(location, PostgresLocation)
    with open_store(postgres_url) as store:
        conversation = store.service.start("poisoned at commit")
        with psycopg.connect(location.dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL(
                    "CREATE FUNCTION {s}.poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                    " IF position('poison' in convert_from(NEW.state, 'UTF8')) > 0 THEN"
                    " RAISE EXCEPTION 'poisoned event'; END IF; RETURN NULL; END $$;"
                    " CREATE CONSTRAINT TRIGGER poison AFTER INSERT ON {s}.events"
                    " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {s}.poison()"
                ).format(s=sql.Identifier(location.schema))
            )
        acknowledged: list[str] = []
        lost: list[str] = []
        grouped = store.recorder.grouped(every=1000, within=3600, lost=store.repository.forget)
        with pytest.raises(Exception, match="poisoned event"), grouped as group:
            for text in ("fine", "poison", "fine too"):
                store.service.append(conversation, _turn(text))
                group.after_commit(
                    lambda t=text: acknowledged.append(t), lambda error, t=text: lost.append(t)
                )
        assert acknowledged == [] and lost == ["fine", "poison", "fine too"]
        assert _texts(store, conversation) == []
        store.service.append(conversation, _turn("after"))  # the cache forgot the lost ones
        assert _texts(store, conversation) == ["after"]


def test_a_new_conversation_in_a_group_is_read_back_by_its_thread(store_url: str) -> None:
    with open_store(store_url) as store:
        with store.grouped():
            started = Conversation.start("in the group")
            store.repository.save(started)
            store.service.append(started.id, _turn("first"))
            assert [s.title for s in store.service.list()] == ["in the group"]
        assert _texts(store, started.id) == ["first"]


@pytest.mark.slow
def test_batch_ingest_killed_mid_run_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """`ingest` of 300 captures killed -9 mid-run: what it committed verifies, and the same
    command again stores every capture once (nothing duplicated, nothing missing)."""
    body = (EXAMPLES / "anthropic" / "web_search_citations" / "1.response.sse").read_bytes()
    marker = b'"id":"msg_'
    assert marker in body
    files = []
    for n in range(300):
        path = tmp_path / "captures" / f"{n:03d}.sse"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(body.replace(marker, marker + b"%03dx" % n))
        files.append(str(path))
    db = f"sqlite:///{tmp_path / 'store.db'}"
    command = [sys.executable, "-m", "convstore.adapters.cli", "--db", db, "ingest"]
    command += ["--provider", "anthropic", *files]
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _stored_some(tmp_path / "store.db"):
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    with open_store(db) as store:
        partial = store.service.count()
    assert 0 < partial < 300
    verify = subprocess.run(
        [sys.executable, "-m", "convstore.adapters.cli", "--db", db, "verify", "--all"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    again = subprocess.run(command, capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stderr
    with open_store(db) as store:
        listed = store.service.list(limit=1000)
        assert len(listed) == 300
        ids = [
            e.response_id
            for summary in listed
            for e in store.service.events(summary.id)
            if type(e).__name__ == "ResponseStarted"
        ]
        assert len(ids) == len(set(ids)) == 300


def _stored_some(path: Path) -> bool:
    """Whether another process committed conversations beyond the first few."""
    import sqlite3

    if not path.exists():
        return False
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
            row = connection.execute("SELECT count(*) FROM catalogue").fetchone()
    except sqlite3.Error:
        return False
    return bool(row and row[0] >= 20)
