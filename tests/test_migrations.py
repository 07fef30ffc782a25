"""Named, append-only store migrations (`storage.migrations`), on both backends.

The fixtures `golden/store_before_migrations.*.sql` are stores written by the code of
commit 0abadef, the last before migrations existed: the sample conversation
(`sample_conversation.build`) and the Anthropic `web_search_citations` example ingested,
with the search index built; the SQLite file dumped with `sqlite3 .dump`, the PostgreSQL
schema (`legacy_fixture`) with `pg_dump --schema=legacy_fixture --no-owner
--no-privileges --inserts`. They are the record of what that code stored: never
regenerate them.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from convstore.adapters import cli
from convstore.domain import UserMessage
from convstore.projections.verify import verify
from convstore.storage import PostgresLocation, open_store, parse_location
from convstore.storage.errors import (
    MigrationRequired,
    NewerSchema,
    OperationalError,
    StorageError,
    StoreNotFound,
)
from convstore.storage.migrations import MIGRATIONS, Migration
from convstore.storage.recorder import ConversationRecorder
from tests.conftest import POSTGRES_DSN

GOLDEN = Path(__file__).parent / "golden"
FIXTURE_SCHEMA = "legacy_fixture"
FIXTURE_CONVERSATIONS = {"sqlite": 3, "postgres": 2}

RELEASED = {
    "0001_initial": "dcca6ebf4b72b3b428896f744753a6b525bd96a9f3c5e7d962ec8d61ca318bc1",
    "0002_responses": "c9be8a414742de148fad328d9fa61101cbb49b7edb260df3dc614cd9a35f4fd7",
    "0003_catalogue": "65e04241f350e983893185fe3621037d650662c00d0d168ba59d31a5a1830671",
    "0004_settled": "1b76f8d5bb3b58c37bc760e22b432c5593344650dc6adae6576bf5e3c000a737",
    "0005_prefixes": "ee8f12aef30024befff610b118a4bdf90d8b5e9b05aa69b0754aa16282420170",
    "0006_prefix_heads": "17bafdde2a3be080efef83868e1e9bcffc6abffaac66b23b57b99821d7e0541a",
}
"""Every released migration's name and the SHA-256 of its statements: editing one that
was released is refused here; a correction is a new migration."""

NOTES = Migration(
    "0104_test_notes",
    sqlite=("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)",),
    postgres=("CREATE TABLE {s}.notes (id bigint PRIMARY KEY, body text NOT NULL)",),
)
"""A migration a reader needs (a table it would select from)."""

NOTES_INDEX = Migration(
    "0105_test_notes_index",
    sqlite=("CREATE INDEX notes_body ON notes (body)",),
    postgres=("CREATE INDEX notes_body ON {s}.notes (body)",),
    readable_without=True,
)
"""A migration a reader can do without (an index)."""

BROKEN = Migration(
    "0105_test_broken",
    sqlite=("CREATE TABLE half (id INTEGER)", "INSERT INTO no_such_table VALUES (1)"),
    postgres=("CREATE TABLE {s}.half (id bigint)", "INSERT INTO {s}.no_such_table VALUES (1)"),
)
"""A migration whose second statement fails: none of it may stay."""


def _digest(migration: Migration) -> str:
    text = json.dumps([migration.sqlite, migration.postgres, migration.readable_without])
    return hashlib.sha256(text.encode()).hexdigest()


def _recorder(
    url: str, *, read_only: bool = False, known: Sequence[Migration] = MIGRATIONS
) -> ConversationRecorder:
    location = parse_location(url)
    if isinstance(location, PostgresLocation):
        from convstore.storage.postgres import PostgresRecorder

        return PostgresRecorder(
            location.dsn, schema=location.schema, read_only=read_only, known=known
        )
    from convstore.storage.sqlite import SQLiteRecorder

    return SQLiteRecorder(location.path, read_only=read_only, known=known)


def _backend(url: str) -> str:
    return "postgres" if isinstance(parse_location(url), PostgresLocation) else "sqlite"


def _load_fixture(url: str) -> None:
    """Write the pre-migration store into the (empty) store at `url`."""
    location = parse_location(url)
    if isinstance(location, PostgresLocation):
        import psycopg

        script = (GOLDEN / "store_before_migrations.postgres.sql").read_text()
        script = script.replace(FIXTURE_SCHEMA, location.schema)
        script = script.replace(f"CREATE SCHEMA {location.schema};", "")  # the fixture's own
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as connection:
            connection.execute(script.encode())
        return
    with sqlite3.connect(location.path) as connection:
        connection.executescript((GOLDEN / "store_before_migrations.sqlite.sql").read_text())
    connection.close()


def _snapshot_of(url: str) -> Any:
    """Everything the store holds, to tell that nothing was written."""
    location = parse_location(url)
    if isinstance(location, PostgresLocation):
        import psycopg

        with psycopg.connect(POSTGRES_DSN) as connection:
            tables = connection.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
                " ORDER BY table_name",
                (location.schema,),
            ).fetchall()
            rows = {
                name: connection.execute(
                    f'SELECT * FROM "{location.schema}"."{name}" ORDER BY 1'
                ).fetchall()
                for (name,) in tables
            }
        return tables, rows
    return hashlib.sha256(Path(location.path).read_bytes()).hexdigest()


@pytest.fixture
def legacy_url(store_url: str) -> str:
    """A store written before migrations existed, on each backend."""
    _load_fixture(store_url)
    return store_url


def _names(recorder: ConversationRecorder) -> list[str]:
    return [applied.name for applied in recorder.applied_migrations()]


# --- the list itself ------------------------------------------------------------------------


def test_released_migrations_are_never_edited() -> None:
    names = [migration.name for migration in MIGRATIONS]
    assert names[: len(RELEASED)] == list(RELEASED)
    assert {m.name: _digest(m) for m in MIGRATIONS if m.name in RELEASED} == RELEASED
    assert len(set(names)) == len(names)
    assert all(name[:4].isdigit() and name[4] == "_" for name in names)


# --- writers --------------------------------------------------------------------------------


def test_a_new_store_records_every_migration(store_url: str) -> None:
    recorder = _recorder(store_url)
    try:
        assert recorder.migrated == tuple(m.name for m in MIGRATIONS)
        assert _names(recorder) == [m.name for m in MIGRATIONS]
        assert all(applied.applied_at for applied in recorder.applied_migrations())
    finally:
        recorder.close()
    again = _recorder(store_url)
    try:
        assert again.migrated == ()  # up to date: nothing applied twice
    finally:
        again.close()


def test_a_store_from_before_migrations_is_read_then_migrated(legacy_url: str) -> None:
    """Today's schema, as the code before migrations wrote it: a reader reads it as it is,
    the first writer records `0001_initial`, and every event, chain, snapshot and index
    row stays as it was; the store then takes new writes."""
    before = _snapshot_of(legacy_url)
    with open_store(legacy_url, read_only=True) as reader:
        summaries = reader.service.list(limit=100)
        assert len(summaries) == FIXTURE_CONVERSATIONS[_backend(legacy_url)]
        assert verify(reader).intact
    assert _snapshot_of(legacy_url) == before

    with open_store(legacy_url) as writer:
        assert writer.recorder.migrated == tuple(m.name for m in MIGRATIONS)
        assert _names(writer.recorder) == [m.name for m in MIGRATIONS]
        report = verify(writer)
        assert report.intact
        assert report.conversations == len(summaries)
        first = summaries[0].id
        events = list(writer.service.events(first))
        writer.service.add_user_input(first, [UserMessage(blocks=("and after migrating?",))])
        assert list(writer.service.events(first))[: len(events)] == events
    code = cli.main(["--db", legacy_url, "search", "--json", "Uji"])
    assert code == 0


def test_a_writer_applies_each_missing_migration_in_its_own_transaction(store_url: str) -> None:
    """A failing migration leaves the ones before it applied and nothing of itself."""
    _recorder(store_url).close()
    with pytest.raises(StorageError):
        _recorder(store_url, known=(*MIGRATIONS, NOTES, BROKEN))
    recorder = _recorder(store_url, known=(*MIGRATIONS, NOTES))
    try:
        assert recorder.migrated == ()  # NOTES was committed by the failed open
        assert _names(recorder) == [*(m.name for m in MIGRATIONS), NOTES.name]
        with recorder.view_reader() as cursor:
            cursor.execute("SELECT count(*) FROM notes")
            with pytest.raises(Exception, match="half"):
                cursor.execute("SELECT count(*) FROM half")
    finally:
        recorder.close()


def test_concurrent_writers_apply_each_migration_once(store_url: str) -> None:
    _recorder(store_url).close()
    known = (*MIGRATIONS, NOTES, NOTES_INDEX)
    applied: list[tuple[str, ...]] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            recorder = _recorder(store_url, known=known)
            applied.append(recorder.migrated)
            recorder.close()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(name for names in applied for name in names) == [NOTES.name, NOTES_INDEX.name]
    recorder = _recorder(store_url, known=known)
    try:
        assert _names(recorder) == [m.name for m in known]
    finally:
        recorder.close()


# --- readers --------------------------------------------------------------------------------


def test_a_reader_reads_one_migration_behind_when_it_can(store_url: str) -> None:
    _recorder(store_url, known=(*MIGRATIONS, NOTES)).close()
    before = _snapshot_of(store_url)
    reader = _recorder(store_url, read_only=True, known=(*MIGRATIONS, NOTES, NOTES_INDEX))
    reader.close()
    with pytest.raises(MigrationRequired) as refused:
        _recorder(store_url, read_only=True, known=(*MIGRATIONS, NOTES, NOTES_INDEX, BROKEN))
    assert "0105_test_notes_index, 0105_test_broken" in str(refused.value)
    assert "convstore --db URL migrate" in str(refused.value)
    assert _snapshot_of(store_url) == before


def test_a_reader_refuses_a_store_that_needs_a_migration(store_url: str) -> None:
    _recorder(store_url).close()
    before = _snapshot_of(store_url)
    with pytest.raises(MigrationRequired, match=r"needs migration 0104_test_notes, .*migrate"):
        _recorder(store_url, read_only=True, known=(*MIGRATIONS, NOTES))
    assert _snapshot_of(store_url) == before


def test_a_reader_never_writes(legacy_url: str) -> None:
    before = _snapshot_of(legacy_url)
    with open_store(legacy_url, read_only=True) as reader:
        assert reader.recorder.applied_migrations() == []  # nothing recorded, nothing made
        with pytest.raises(OperationalError):
            reader.service.start("not here")
    assert _snapshot_of(legacy_url) == before


def test_a_reader_refuses_a_missing_store(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFound, match="no convstore store"):
        open_store(f"sqlite:///{tmp_path / 'none.db'}", read_only=True)
    assert not (tmp_path / "none.db").exists()


# --- newer stores ---------------------------------------------------------------------------


@pytest.mark.parametrize("read_only", [False, True])
def test_a_store_written_by_a_newer_version_is_refused_by_name(
    store_url: str, read_only: bool
) -> None:
    _recorder(store_url, known=(*MIGRATIONS, NOTES)).close()
    before = _snapshot_of(store_url)
    with pytest.raises(NewerSchema, match=r"'0104_test_notes'.*newer convstore"):
        _recorder(store_url, read_only=read_only)
    assert _snapshot_of(store_url) == before


def test_the_command_line_refuses_a_newer_store(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _recorder(store_url, known=(*MIGRATIONS, NOTES)).close()
    assert cli.main(["--db", store_url, "list"]) == 2
    err = capsys.readouterr().err
    assert "0104_test_notes" in err and "upgrade convstore" in err
    assert len(err.strip().splitlines()) == 1


# --- convstore migrate ----------------------------------------------------------------------


def test_convstore_migrate_applies_in_place(
    legacy_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["--db", legacy_url, "migrate", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["applied"] == [m.name for m in MIGRATIONS]
    assert [m["name"] for m in report["migrations"]] == [m.name for m in MIGRATIONS]
    assert cli.main(["--db", legacy_url, "migrate"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"up to date: {len(MIGRATIONS)} migrations, latest {MIGRATIONS[-1].name}")
    with open_store(legacy_url, read_only=True) as reader:
        assert _names(reader.recorder) == [m.name for m in MIGRATIONS]
