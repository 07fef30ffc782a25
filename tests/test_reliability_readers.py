"""Readers need no write lock and create nothing (scenarios 31 and 32), on both backends.

The read commands (`list`, `show`, `search --no-catch-up`, `verify`, `audit`, `export`,
`replay`) open the store read-only: no DDL, no journal-mode switch, no write lock. They
run while a writer holds the lock, on a read-only copy of the store, and given a store
that does not exist they exit 2 and leave nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from convstore.adapters import cli
from tests.conftest import BACKENDS, POSTGRES_DSN, require_postgres

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "anthropic" / "web_search_citations"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def recorded(capsys: pytest.CaptureFixture[str], url: str) -> str:
    """Ingest an example exchange (indexed for search); its conversation id."""
    code, out, err = run(
        capsys,
        "--db",
        url,
        "ingest",
        "--provider",
        "anthropic",
        "--request",
        str(EXAMPLE / "1.request.json"),
        str(EXAMPLE / "1.response.sse"),
        "--json",
    )
    assert code == 0, err
    assert run(capsys, "--db", url, "project")[0] == 0
    return str(json.loads(out)["conversation_id"])


def read_commands(conversation: str) -> list[list[str]]:
    return [
        ["list"],
        ["show", conversation],
        ["search", "--no-catch-up", "Kyoto"],
        ["verify", "--all"],
        ["audit", "--all"],
        ["export", conversation, "--format", "md"],
        ["replay", conversation, "--to", "anthropic"],
    ]


def every_read_works(capsys: pytest.CaptureFixture[str], url: str, conversation: str) -> None:
    for argv in read_commands(conversation):
        code, out, err = run(capsys, "--db", url, *argv)
        assert code == 0, (argv, err)
        assert out, argv
        assert "behind" not in err, (argv, err)  # the index was at the head


@contextlib.contextmanager
def write_lock(url: str) -> Iterator[None]:
    """A writer holding the store's write lock for the duration."""
    if url.startswith("sqlite:///"):
        connection = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            connection.rollback()
            connection.close()
        return
    import psycopg
    from psycopg import sql

    schema = url.rsplit("schema=", 1)[1]
    with psycopg.connect(POSTGRES_DSN) as connection:  # one open transaction
        for table in ("events", "snapshots", "tracking", "migrations"):
            connection.execute(
                sql.SQL("LOCK TABLE {}.{} IN EXCLUSIVE MODE").format(
                    sql.Identifier(schema), sql.Identifier(table)
                )
            )
        yield
        connection.rollback()


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_readers_work_while_a_writer_holds_the_lock(
    capsys: pytest.CaptureFixture[str], store_url: str
) -> None:
    """Scenario 31: list, show, search --no-catch-up, verify, audit, export and replay
    work while a writer holds the write lock (SQLite `BEGIN IMMEDIATE`; PostgreSQL
    tables locked EXCLUSIVE, which lets plain reads through and nothing else)."""
    conversation = recorded(capsys, store_url)
    with write_lock(store_url):
        every_read_works(capsys, store_url, conversation)
        another = EXAMPLE.parent / "thinking_tool_roundtrip" / "1.response.sse"
        code, _, err = run(capsys, "--db", store_url, "ingest", "--provider", "anthropic",
                           str(another))  # fmt: skip
        assert code == 2 and "error" in err  # the writer waits, then gives up: typed


def test_readers_work_on_a_read_only_mount(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Scenario 31: the read commands work on a read-only copy of an SQLite store (a
    read-only bind mount: no `-shm` can be made there), and a write says the folder is
    read-only."""
    source = tmp_path / "source"
    source.mkdir()
    conversation = recorded(capsys, f"sqlite:///{source / 'store.db'}")
    assert not (source / "store.db-wal").exists()  # the writer closed cleanly
    copy, mount = tmp_path / "copy", tmp_path / "mount"
    copy.mkdir()
    mount.mkdir()
    shutil.copy(source / "store.db", copy / "store.db")
    bound = subprocess.run(
        ["mount", "--bind", str(copy), str(mount)], check=False, capture_output=True
    )
    if bound.returncode != 0:
        pytest.skip(f"cannot bind-mount here (needs root): {bound.stderr.decode().strip()}")
    try:
        remount = ["mount", "-o", "remount,ro,bind", str(mount)]
        subprocess.run(remount, check=True, capture_output=True)
        url = f"sqlite:///{mount / 'store.db'}"
        every_read_works(capsys, url, conversation)
        code, _, err = run(capsys, "--db", url, "search", "Kyoto")  # indexing writes
        assert code == 2 and "read-only" in err
    finally:
        subprocess.run(["umount", str(mount)], check=True)
    assert sorted(p.name for p in copy.iterdir()) == ["store.db"]


def test_reading_a_missing_postgres_schema_creates_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Scenario 32: a read command given a PostgreSQL schema that does not exist exits 2
    and creates nothing; `verify` of it never says intact."""
    import psycopg

    dsn = require_postgres()
    schema = "t_never_created_by_a_reader"
    url = f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
    for argv in read_commands("00000000-0000-4000-8000-000000000000"):
        code, out, err = run(capsys, "--db", url, *argv)
        assert (code, out) == (2, ""), argv
        assert "no convstore store" in err and "intact" not in err
    with psycopg.connect(dsn) as connection:
        found = connection.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (schema,)
        ).fetchone()
    assert found == (0,)


test_reading_a_missing_postgres_schema_creates_nothing = pytest.mark.postgres(
    test_reading_a_missing_postgres_schema_creates_nothing
)
