"""Scenario 36: a newer store is named as such, on SQLite and PostgreSQL.

A store whose tables a later version changed (an extra NOT NULL or CHECKed column,
another unique index) refuses writes with `ConstraintFailed`, naming the constraint (exit
2), never as the concurrency conflict only a taken position is; a later migration is
refused by name. A stored event of a later schema version, or bytes that are no event,
stop nothing else: `audit --all`, `verify`, `anchor`, `verify --anchor` and `export --all`
go through every other conversation, name the unreadable one and exit 5, and `audit` and
`verify` agree about it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import LiteralString
from uuid import UUID, uuid4

import msgspec
import pytest
from eventsourcing.persistence import StoredEvent

from convstore.adapters import cli
from convstore.domain.chain import digest
from convstore.storage import PostgresLocation, SQLiteLocation, Store, open_store
from convstore.storage.errors import ConstraintFailed, IntegrityError
from convstore.storage.upcasting import unknown

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "anthropic"
CAPTURES = [EXAMPLES / name / "1.response.sse" for name in ("refusal", "pause_turn")]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _alter(store: Store, statement: LiteralString) -> None:
    """Run DDL a later version might have run, `{s}.` naming the tables' PostgreSQL schema."""
    location = store.location
    if isinstance(location, SQLiteLocation):
        with sqlite3.connect(location.path) as connection:
            connection.execute(statement.replace("{s}.", ""))
        return
    assert isinstance(location, PostgresLocation)
    import psycopg
    from psycopg import sql

    with psycopg.connect(location.dsn, autocommit=True) as connection:
        connection.execute(sql.SQL(statement).format(s=sql.Identifier(location.schema)))


LAYOUTS: dict[str, tuple[LiteralString, str]] = {
    "a NOT NULL column": ("ALTER TABLE {s}.events ADD COLUMN writer TEXT NOT NULL", "writer"),
    "a CHECKed column": (
        "ALTER TABLE {s}.events ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0 CHECK (attempt > 0)",
        "attempt",
    ),
}
"""Columns a later version's tables hold and this one does not write: (DDL, the name the
error must show)."""


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_newer_table_layout_is_named_never_a_conflict(
    capsys: pytest.CaptureFixture[str], store_url: str, layout: str
) -> None:
    """Scenario 36: ingesting into a store whose events table has a column this version does
    not write is one line naming it (exit 2), never "version 1 is taken; reload and retry";
    nothing is written and the row the database quotes (event bytes) is never shown."""
    statement, column = LAYOUTS[layout]
    with open_store(store_url) as store:
        _alter(store, statement)
    code, _, err = _run(
        capsys, "--db", store_url, "ingest", "--provider", "anthropic", str(CAPTURES[0])
    )
    assert code == 2 and len(err.splitlines()) == 1, err
    assert column in err and "nothing was written" in err
    assert "taken" not in err and "retry" not in err and "Failing row" not in err
    with open_store(store_url, read_only=True) as store:
        assert store.recorder.max_notification_id() is None


def test_only_a_taken_position_is_a_conflict(store: Store) -> None:
    """Scenario 36: with another unique index on the events table, a row it refuses is
    `ConstraintFailed` naming that index, while a taken (conversation, version) stays the
    `IntegrityError` the repository reads as the conflict (scenario 2's tests)."""
    _alter(store, "CREATE UNIQUE INDEX events_topic ON {s}.events (topic)")
    recorder, cid = store.recorder, uuid4()
    recorder.append([StoredEvent(cid, 1, "topic.a", b"{}")])
    with pytest.raises(ConstraintFailed) as refused:
        recorder.append([StoredEvent(cid, 2, "topic.a", b"{}")])
    assert "events_topic" in str(refused.value) or "events.topic" in str(refused.value)
    assert not isinstance(refused.value, IntegrityError)
    with pytest.raises(IntegrityError):
        recorder.append([StoredEvent(cid, 1, "topic.b", b"{}")])
    assert recorder.select_states(cid) == [(1, b"{}")]


def test_a_later_migration_refuses_writers_by_name(
    capsys: pytest.CaptureFixture[str], store_url: str
) -> None:
    """Scenario 36: a store recording a migration this version does not know (the schema
    marker) is refused by name for a writer too (exit 2, one line), before anything is
    written; readers are refused alike (test_migrations.py)."""
    with open_store(store_url) as store:
        _alter(store, "INSERT INTO {s}.migrations (position, name) VALUES (99, '0099_from_later')")
    code, _, err = _run(
        capsys, "--db", store_url, "ingest", "--provider", "anthropic", str(CAPTURES[0])
    )
    assert code == 2 and len(err.splitlines()) == 1
    assert "0099_from_later" in err and "newer convstore" in err and "taken" not in err


# --- one unreadable event -------------------------------------------------------------------


def _newest(store: Store, cid: UUID) -> tuple[int, bytes]:
    return store.recorder.select_states(cid)[-1]


def _append_later_version(store: Store, cid: UUID) -> None:
    """What a newer convstore appends: a later version of ResponseEnded, on the chain."""
    version, state = _newest(store, cid)
    prev = msgspec.json.decode(state)["hash"]
    fields = {
        "type": "ResponseEnded@2",
        "originator_id": str(cid),
        "originator_version": version + 1,
        "timestamp": "2031-01-01T00:00:00Z",
        "outcome": {"kind": "a shape this version does not know"},
    }
    sealed = {**fields, "prev_hash": prev, "hash": digest(prev, msgspec.json.encode(fields))}
    store.recorder.append([StoredEvent(cid, version + 1, "later", msgspec.json.encode(sealed))])


@pytest.fixture
def three(
    capsys: pytest.CaptureFixture[str], store_url: str, tmp_path: Path
) -> tuple[str, list[str]]:
    """A store of three conversations: readable, one whose newest event is of a later
    version (its chain holds), one whose newest bytes are no event at all."""
    again = tmp_path / "again.sse"  # a third response: the first capture under another id
    again.write_bytes(CAPTURES[0].read_bytes().replace(b'"id":"msg_', b'"id":"msg_again_'))
    for capture in (*CAPTURES, again):
        code, _, err = _run(
            capsys, "--db", store_url, "ingest", "--provider", "anthropic", str(capture)
        )
        assert code == 0, err
    with open_store(store_url) as store:
        ids = [summary.id for summary in store.service.list()]
        _append_later_version(store, ids[1])
        version, _ = _newest(store, ids[2])
        store.recorder.append([StoredEvent(ids[2], version + 1, "x", b"\xff\xfe not json")])
    return store_url, [str(c) for c in ids]


def test_audit_and_verify_agree_about_a_later_event_version(
    capsys: pytest.CaptureFixture[str], three: tuple[str, list[str]]
) -> None:
    """Scenario 36: `audit` and `verify` of a conversation holding an event of a later
    schema version both exit 5 and say it is a later version; `verify` marks it unreadable
    (its chain holds: not a break), and the readable conversation is intact for both."""
    url, (readable, later, _) = three
    code, _, err = _run(capsys, "--db", url, "audit", later)
    assert code == 5 and "'ResponseEnded@2' is a later version" in err
    code, out, _ = _run(capsys, "--db", url, "verify", later, "--json")
    report = json.loads(out)
    assert code == 5 and not report["intact"]
    [problem] = report["breaks"]
    assert problem["unreadable"] and "'ResponseEnded@2' is a later version" in problem["problem"]
    code, out, _ = _run(capsys, "--db", url, "verify", later)
    assert code == 5 and out.startswith(f"UNREADABLE {later} version ")
    assert "UNREADABLE: 1 unreadable in 1 of 1 conversations" in out
    assert _run(capsys, "--db", url, "audit", readable)[0] == 0
    assert _run(capsys, "--db", url, "verify", readable)[0] == 0


def test_one_unreadable_event_stops_no_other_conversation(
    capsys: pytest.CaptureFixture[str], three: tuple[str, list[str]], tmp_path: Path
) -> None:
    """Scenario 36: `audit --all`, `verify`, `anchor`, `verify --anchor` and `export --all`
    each go through every conversation, name the unreadable ones on stderr or in their
    report, and exit 5; the anchor file holds every readable head, and the unreadable
    conversation without one, which `verify --anchor` reports alone."""
    url, (readable, later, garbage) = three
    code, out, err = _run(capsys, "--db", url, "audit", "--all", "--json")
    assert code == 5 and [a["conversation_id"] for a in json.loads(out)] == [readable]
    assert later in err and garbage in err

    code, out, _ = _run(capsys, "--db", url, "verify", "--json")
    report = json.loads(out)
    assert code == 5 and report["conversations"] == 3
    flags = {b["conversation_id"]: b["unreadable"] for b in report["breaks"]}
    assert flags == {later: True, garbage: False}  # bytes that are no event: a break

    anchors = tmp_path / "heads.json"
    code, out, err = _run(capsys, "--db", url, "anchor", "-o", str(anchors), "--json")
    assert code == 5 and json.loads(out)["unreadable"] == [garbage]
    assert json.loads(out)["conversations"] == 2
    assert garbage in err and "not anchored" in err and len(err.splitlines()) == 1
    written = json.loads(anchors.read_text())
    assert len(written[readable]["head"]) == len(written[later]["head"]) == 64
    assert written[garbage]["head"] == "" and "no readable hash" in written[garbage]["unreadable"]

    code, out, _ = _run(capsys, "--db", url, "verify", "--anchor", str(anchors), "--json")
    report = json.loads(out)
    assert code == 5 and report["anchored"] == 3
    checks = {c["conversation_id"]: c for c in report["checks"]}
    assert checks[readable]["intact"] and checks[readable]["anchor"] is not None
    assert any(
        b["unreadable"] and "holds no head" in b["problem"] for b in checks[garbage]["breaks"]
    )

    folder = tmp_path / "out"
    code, out, err = _run(
        capsys, "--db", url, "export", "--all", "--format", "json", "-o", str(folder)
    )
    assert code == 5 and "1 conversation(s) exported" in out
    assert [json.loads(p.read_text())["id"] for p in folder.iterdir()] == [readable]
    assert later in err and garbage in err and "not exported" in err
    code, out, err = _run(capsys, "--db", url, "export", "--all", "--format", "jsonl")
    assert code == 5 and readable in out and later not in out and garbage in err


def test_an_anchor_file_with_an_empty_head_is_read_not_refused(
    capsys: pytest.CaptureFixture[str], three: tuple[str, list[str]], tmp_path: Path
) -> None:
    """Scenario 36: an anchor file an earlier version wrote with `"head": ""` for an
    unreadable conversation is read: the others are checked against their anchors, and
    that one is reported."""
    url, (readable, _, garbage) = three
    code, data, _ = _run(capsys, "--db", url, "anchor")
    assert code == 5
    old = {key: {"head": a["head"], "version": a["version"]} for key, a in json.loads(data).items()}
    anchors = tmp_path / "old.json"
    anchors.write_text(json.dumps(old))
    code, out, err = _run(capsys, "--db", url, "verify", "--anchor", str(anchors))
    assert code == 5 and err == ""
    assert f"UNREADABLE {garbage} version" in out and readable not in out


@pytest.mark.parametrize(
    ("tag", "says"),
    [
        ("ResponseEnded@2", "later version of ResponseEnded than version 1"),
        ("ResponseEnded@17", "later version"),
        ("Hologram", "none this convstore knows"),
        ("Hologram@3", "none this convstore knows"),
        ("AssistantText@0", "earlier version of AssistantText this convstore has no upcaster"),
    ],
)
def test_an_unreadable_tag_says_why(tag: str, says: str) -> None:
    """Scenario 36: the tag of a record decode refused says what it is; today's tags and
    records that carry none say nothing (the decoder's own error stands)."""
    why = unknown(msgspec.json.encode({"type": tag, "x": 1}))
    assert why is not None and says in why
    assert unknown(b'{"type": "ResponseEnded", "x": 1}') is None
    assert unknown(b'{"x": 1}') is None and unknown(b"\xff") is None


def test_an_unreadable_first_event_is_named_too(
    capsys: pytest.CaptureFixture[str], three: tuple[str, list[str]]
) -> None:
    """Scenario 36: a conversation a newer convstore started (its first event a later
    version of Started) is listed by id for `audit --all` and `export --all`, which name it
    and go on to the others, rather than stop before the first conversation."""
    url, (readable, _, _) = three
    started = uuid4()
    with open_store(url) as store:
        later = b'{"type":"Started@2","originator_id":"%s","prev_hash":"","hash":""}'
        store.recorder.append([StoredEvent(started, 1, "later", later % str(started).encode())])
    code, out, err = _run(capsys, "--db", url, "audit", "--all", "--json")
    assert code == 5 and [a["conversation_id"] for a in json.loads(out)] == [readable]
    assert str(started) in err and "later version of Started" in err
    code, out, err = _run(capsys, "--db", url, "export", "--all", "--format", "jsonl")
    assert code == 5 and readable in out and str(started) in err


def test_list_names_a_conversation_whose_first_event_is_unreadable(
    capsys: pytest.CaptureFixture[str], three: tuple[str, list[str]]
) -> None:
    """Scenario 36: `list` shows a conversation a newer convstore started among the others,
    titled as unreadable (with its time where the bytes still give it), never stopping."""
    url, ids = three
    started = uuid4()
    with open_store(url) as store:
        later = b'{"type":"Started@2","originator_id":"%s","timestamp":"2026-01-02T03:04:05Z"}'
        store.recorder.append([StoredEvent(started, 1, "later", later % str(started).encode())])
    code, out, err = _run(capsys, "--db", url, "list", "--json")
    assert (code, err) == (0, "")
    listed = {row["id"]: row for row in json.loads(out)}
    assert set(ids) < set(listed)
    assert "cannot be read" in listed[str(started)]["title"]
    assert listed[str(started)]["created_on"].startswith("2026-01-02T03:04:05")
