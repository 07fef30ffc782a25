"""Tamper evidence on both backends: the stored bytes are changed directly with SQL, as an
attacker with database access would, and `verify` must report each change by conversation
and version; with anchors exported earlier, removed newest events and removed conversations
are caught too.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore.adapters import cli
from convstore.adapters.recording.jobs import ingest
from convstore.domain import ConversationId, ConversationService, UserMessage
from convstore.domain.chain import seal
from convstore.domain.errors import ConfigurationError, ConversationNotFound, IntegrityError
from convstore.projections.audit import audit
from convstore.projections.verify import (
    VERIFY_SCHEMA,
    Anchor,
    VerifyReport,
    dump_anchors,
    export_anchors,
    parse_anchors,
    stored_conversations,
    verify,
)
from convstore.storage import SQLiteLocation, Store, open_store
from convstore.storage.mapper import EventMapper
from tests.terminal import Terminal

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "anthropic"


class Tamperer:
    """Direct SQL on a store's events table, outside convstore."""

    def __init__(self, store: Store) -> None:
        location = store.location
        self.sqlite: sqlite3.Connection | None = None
        if isinstance(location, SQLiteLocation):
            self.sqlite = sqlite3.connect(location.path, isolation_level=None)
            self.table = "events"
        else:
            import psycopg

            self.postgres = psycopg.connect(location.dsn, autocommit=True)
            self.table = '"' + location.schema.replace('"', '""') + '".events'

    def run(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        statement = statement.replace("events", self.table)
        if self.sqlite is not None:
            params = tuple(p.bytes if isinstance(p, UUID) else p for p in params)
            return self.sqlite.execute(statement.replace("%s", "?"), params).fetchall()
        cursor = self.postgres.execute(statement, params)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []

    def rows(self) -> list[tuple[UUID, int, bytes]]:
        found = self.run("SELECT originator_id, originator_version, state FROM events ORDER BY id")
        return [
            (UUID(bytes=key) if isinstance(key, bytes) else key, version, bytes(state))
            for key, version, state in found
        ]

    def state(self, conversation: UUID, version: int) -> bytes:
        ((state,),) = self.run(
            "SELECT state FROM events WHERE originator_id = %s AND originator_version = %s",
            (conversation, version),
        )
        return bytes(state)

    def set_state(self, conversation: UUID, version: int, state: bytes) -> None:
        self.run(
            "UPDATE events SET state = %s WHERE originator_id = %s AND originator_version = %s",
            (state, conversation, version),
        )

    def delete(self, conversation: UUID, *, above: int = 0, only: int | None = None) -> None:
        if only is not None:
            self.run(
                "DELETE FROM events WHERE originator_id = %s AND originator_version = %s",
                (conversation, only),
            )
        else:
            self.run(
                "DELETE FROM events WHERE originator_id = %s AND originator_version > %s",
                (conversation, above),
            )

    def copy(self, conversation: UUID, to: UUID) -> None:
        self.run(
            "INSERT INTO events (originator_id, originator_version, topic, state)"
            " SELECT %s, originator_version, topic, state FROM events WHERE originator_id = %s",
            (to, conversation),
        )

    def close(self) -> None:
        if self.sqlite is not None:
            self.sqlite.close()
        else:
            self.postgres.close()


def record(service: ConversationService, name: str, exchanges: tuple[int, ...]) -> UUID:
    conversation: ConversationId | None = None
    for n in exchanges:
        folder = EXAMPLES / name
        report = ingest(
            service,
            "anthropic",
            [next(folder.glob(f"{n}.response.*"))],
            request=(folder / f"{n}.request.json").read_bytes(),
            conversation_id=conversation,
        )
        assert report.exit_code == 0, report.error
        conversation = report.conversation_id
    assert conversation is not None
    return conversation


@pytest.fixture
def filled(store: Store) -> tuple[Store, list[UUID]]:
    """A store on each backend holding three realistic conversations (payloads, Unicode)."""
    ids = [
        record(store.service, "pause_turn", (1, 2)),
        record(store.service, "thinking_tool_roundtrip", (1, 2)),
        record(store.service, "mixed_batch", (1, 2)),
    ]
    return store, ids


@pytest.fixture
def tamper(filled: tuple[Store, list[UUID]]) -> Iterator[Tamperer]:
    tamperer = Tamperer(filled[0])
    yield tamperer
    tamperer.close()


def breaks_of(report: VerifyReport) -> set[tuple[str, int | None]]:
    return {(b.conversation_id, b.version) for b in report.breaks}


def problems(report: VerifyReport, conversation: UUID) -> str:
    return "\n".join(
        f"{b.version}: {b.problem}" for b in report.breaks if b.conversation_id == str(conversation)
    )


# --- an intact store --------------------------------------------------------------------------


def test_an_intact_store_verifies_clean(filled: tuple[Store, list[UUID]]) -> None:
    store, ids = filled
    report = verify(store)
    assert report.schema == VERIFY_SCHEMA
    assert report.intact and report.breaks == []
    assert report.conversations == 3 and report.anchored == 0
    assert [c.conversation_id for c in report.checks] == [str(i) for i in ids]
    assert report.events == sum(len(list(store.service.events(i))) for i in ids)
    for check, conversation in zip(report.checks, ids, strict=True):
        head = audit(store.service.events(conversation)).head
        assert (check.head, check.version, check.intact) == (head.hash, head.version, True)
    assert verify(store, ids[1]).checks[0].conversation_id == str(ids[1])


def test_an_empty_store_verifies_clean(store: Store) -> None:
    report = verify(store)
    assert (report.intact, report.conversations, report.events) == (True, 0, 0)
    assert export_anchors(store) == {}


def test_an_unknown_conversation_is_not_found(store: Store) -> None:
    with pytest.raises(ConversationNotFound):
        verify(store, uuid4())


# --- changed, removed, moved --------------------------------------------------------------------


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_single_flipped_byte_in_any_stored_event_is_detected(
    filled: tuple[Store, list[UUID]], tamper: Tamperer, data: st.DataObject
) -> None:
    store, _ = filled
    conversation, version, state = data.draw(st.sampled_from(tamper.rows()), label="event")
    at = data.draw(st.integers(0, len(state) - 1), label="byte")
    mask = data.draw(st.integers(1, 255), label="xor")
    flipped = bytearray(state)
    flipped[at] ^= mask
    tamper.set_state(conversation, version, bytes(flipped))
    try:
        report = verify(store)
        assert not report.intact
        assert (str(conversation), version) in breaks_of(report)
        assert {b.conversation_id for b in report.breaks} == {str(conversation)}
    finally:
        tamper.set_state(conversation, version, state)
    assert verify(store, conversation).intact


def test_a_deleted_middle_event_is_detected(
    filled: tuple[Store, list[UUID]], tamper: Tamperer
) -> None:
    store, ids = filled
    tamper.delete(ids[0], only=7)
    report = verify(store)
    assert not report.intact
    assert breaks_of(report) == {(str(ids[0]), 8)}
    assert "version 7 is missing" in problems(report, ids[0])
    assert "does not follow its predecessor" in problems(report, ids[0])


def test_a_deleted_first_event_is_detected(
    filled: tuple[Store, list[UUID]], tamper: Tamperer
) -> None:
    store, ids = filled
    tamper.delete(ids[1], only=1)
    assert ids[1] in [s.id for s in store.service.list()]  # the catalogue still names it
    assert ids[1] in stored_conversations(store)  # and so does verify's listing
    report = verify(store)
    assert (str(ids[1]), 1) in breaks_of(report)
    assert "version 1 missing" in problems(report, ids[1])


def test_two_swapped_states_are_detected(
    filled: tuple[Store, list[UUID]], tamper: Tamperer
) -> None:
    store, ids = filled
    fifth, sixth = tamper.state(ids[2], 5), tamper.state(ids[2], 6)
    tamper.set_state(ids[2], 5, sixth)
    tamper.set_state(ids[2], 6, fifth)
    report = verify(store)
    assert {(str(ids[2]), 5), (str(ids[2]), 6)} <= breaks_of(report)
    text = problems(report, ids[2])
    assert "5: holds the event written as version 6 (moved)" in text
    assert "6: holds the event written as version 5 (moved)" in text
    assert {b.conversation_id for b in report.breaks} == {str(ids[2])}


def test_a_conversation_copied_under_another_id_is_detected(
    filled: tuple[Store, list[UUID]], tamper: Tamperer
) -> None:
    store, ids = filled
    copy = uuid4()
    tamper.copy(ids[1], copy)
    report = verify(store)
    assert {b.conversation_id for b in report.breaks} == {str(copy)}
    assert f"written for conversation {ids[1]}" in problems(report, copy)


def test_a_rewritten_and_resealed_event_needs_an_anchor(
    filled: tuple[Store, list[UUID]], tamper: Tamperer
) -> None:
    """A consistent rewrite of the newest event (re-hashed) leaves a valid chain: only an
    anchor taken before tells."""
    store, ids = filled
    anchors = parse_anchors(dump_anchors(export_anchors(store)))
    conversation = ids[0]
    newest = max(v for c, v, _ in tamper.rows() if c == conversation)
    event = EventMapper.decode(tamper.state(conversation, newest))
    forged, _ = seal(msgspec.structs.replace(event, reason="forged"), event.prev_hash)
    tamper.set_state(conversation, newest, msgspec.json.encode(forged))
    assert verify(store).intact
    report = verify(store, anchors=anchors)
    assert breaks_of(report) == {(str(conversation), newest)}
    assert "differs from the anchored head" in problems(report, conversation)


# --- anchors ------------------------------------------------------------------------------------


def test_anchors_round_trip_and_name_every_head(filled: tuple[Store, list[UUID]]) -> None:
    store, ids = filled
    exported = export_anchors(store)
    assert list(exported) == [str(i) for i in ids]
    for conversation in ids:
        head = audit(store.service.events(conversation)).head
        assert exported[str(conversation)] == {"head": head.hash, "version": head.version}
    text = dump_anchors(exported)
    assert json.loads(text) == exported
    parsed = parse_anchors(text)
    assert parsed == {
        UUID(k): Anchor(head=v["head"], version=v["version"]) for k, v in exported.items()
    }
    report = verify(store, anchors=parsed)
    assert report.intact and report.anchored == 3


def test_deleted_newest_events_are_caught_only_with_an_anchor(
    filled: tuple[Store, list[UUID]], tamper: Tamperer
) -> None:
    store, ids = filled
    anchors = parse_anchors(dump_anchors(export_anchors(store)))
    anchored = anchors[ids[2]].version
    tamper.delete(ids[2], above=anchored - 2)
    assert verify(store).intact  # a shorter chain is a valid chain
    report = verify(store, anchors=anchors)
    assert breaks_of(report) == {(str(ids[2]), anchored - 1)}
    assert f"versions {anchored - 1}-{anchored} removed" in problems(report, ids[2])
    assert not verify(store, ids[2], anchors=anchors).intact


def test_a_deleted_conversation_is_caught_with_an_anchor(
    filled: tuple[Store, list[UUID]], tamper: Tamperer
) -> None:
    store, ids = filled
    anchors = parse_anchors(dump_anchors(export_anchors(store)))
    tamper.delete(ids[1])
    assert verify(store).intact
    report = verify(store, anchors=anchors)
    assert breaks_of(report) == {(str(ids[1]), None)}
    assert "conversation removed" in problems(report, ids[1])
    single = verify(store, ids[1], anchors=anchors)  # asked by id: reported, not "not found"
    assert not single.intact and single.checks[0].events == 0


def test_a_conversation_grown_since_its_anchor_is_intact(
    filled: tuple[Store, list[UUID]],
) -> None:
    store, ids = filled
    anchors = parse_anchors(dump_anchors(export_anchors(store)))
    store.service.add_user_input(ids[0], [UserMessage(blocks=("more",))])
    report = verify(store, anchors=anchors)
    assert report.intact
    assert report.checks[0].version > anchors[ids[0]].version


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        (b"not json", "not an anchor file"),
        (b"[]", "not an anchor file"),
        (b'{"x": {"head": "' + b"a" * 64 + b'", "version": 1}}', "not a conversation id"),
        (b'{"%s": {"head": "abc", "version": 1}}' % str(uuid4()).encode(), "64-digit hex head"),
        (b'{"%s": {"head": "%s", "version": 0}}' % (str(uuid4()).encode(), b"a" * 64), ">= 1"),
        (b'{"%s": {"version": 3}}' % str(uuid4()).encode(), "not an anchor file"),
    ],
)
def test_malformed_anchor_files_are_refused(text: bytes, complaint: str) -> None:
    with pytest.raises(ConfigurationError, match=complaint):
        parse_anchors(text)


# --- the commands -------------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_verify_and_anchor_commands_end_to_end(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_store(store_url) as store:
        ids = [
            record(store.service, "pause_turn", (1, 2)),
            record(store.service, "thinking_tool_roundtrip", (1, 2)),
        ]
        tamperer = Tamperer(store)
    try:
        code, out, err = run(capsys, "--db", store_url, "verify")
        assert (code, err) == (0, "")
        assert out == "intact: 2 conversations, 32 events checked\n"
        code, out, _ = run(capsys, "--db", store_url, "verify", "--all", "--json")
        assert code == 0 and json.loads(out)["intact"] is True
        code, out, _ = run(capsys, "--db", store_url, "verify", str(ids[0]))
        assert code == 0 and f"conversation {ids[0]}: 19 events, head " in out

        code, out, err = run(capsys, "--db", store_url, "anchor")
        assert (code, err) == (0, "")
        with open_store(store_url) as store:
            assert json.loads(out) == export_anchors(store)
        file = tmp_path / "anchors.json"
        code, out, _ = run(capsys, "--db", store_url, "anchor", "-o", str(file))
        assert code == 0 and out == f"2 chain heads written to {file}\n"
        assert json.loads(file.read_bytes()) == json.loads(
            run(capsys, "--db", store_url, "anchor")[1]
        )
        code, out, _ = run(capsys, "--db", store_url, "anchor", "-o", str(file), "--json")
        assert json.loads(out) == {"file": str(file), "conversations": 2, "unreadable": []}
        code, out, _ = run(capsys, "--db", store_url, "verify", "--anchor", str(file))
        assert code == 0 and "2 against an anchor" in out

        newest = json.loads(file.read_bytes())[str(ids[1])]["version"]
        tamperer.delete(ids[1], above=newest - 2)  # the second conversation's newest two
        state = tamperer.state(ids[0], 4)
        tamperer.set_state(ids[0], 4, state.replace(b"anthropic", b"anthropiq", 1))
        code, out, err = run(capsys, "--db", store_url, "verify")
        assert (code, err) == (5, "")
        assert f"BROKEN {ids[0]} version 4: content changed since it was written\n" in out
        assert str(ids[1]) not in out  # truncation is invisible without the anchor
        code, out, _ = run(capsys, "--db", store_url, "verify", "--anchor", str(file))
        assert code == 5
        removed = f"version {newest - 1}: versions {newest - 1}-{newest} removed"
        assert f"BROKEN {ids[1]} {removed}" in out
        assert out.splitlines()[-1].startswith("BROKEN: 2 breaks in 2 of 2 conversations")
        code, out, _ = run(capsys, "--db", store_url, "verify", "--anchor", str(file), "--json")
        data = json.loads(out)
        assert code == 5 and data["intact"] is False
        assert {(b["conversation_id"], b["version"]) for b in data["breaks"]} == {
            (str(ids[0]), 4),
            (str(ids[1]), newest - 1),
        }
        assert run(capsys, "--db", store_url, "verify", str(ids[1]))[0] == 0
        assert run(capsys, "--db", store_url, "verify", str(ids[0]))[0] == 5
    finally:
        tamperer.close()


def test_command_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    code, _, err = run(capsys, "--db", url, "verify", str(uuid4()))
    assert code == 2 and "no convstore store" in err  # reading creates nothing
    open_store(url).close()
    code, _, err = run(capsys, "--db", url, "verify", str(uuid4()))
    assert code == 2 and "no conversation" in err
    code, _, err = run(capsys, "--db", url, "verify", "--anchor", str(tmp_path / "missing.json"))
    assert code == 2 and "cannot be read" in err
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    code, _, err = run(capsys, "--db", url, "verify", "--anchor", str(bad))
    assert code == 2 and "not an anchor file" in err
    code, _, err = run(capsys, "--db", url, "verify", "x", "--all")
    assert code == 2
    code, _, err = run(capsys, "--db", url, "anchor", "-o", str(tmp_path / "no" / "such" / "dir"))
    assert code == 2 and "cannot use" in err
    assert run(capsys, "--db", url, "anchor") == (0, "{}\n", "")


def test_progress_shows_on_a_terminal_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with open_store(url) as store:
        record(store.service, "pause_turn", (1, 2))
    assert run(capsys, "--db", url, "verify", "--all")[2] == ""  # not a terminal: silent
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert cli.main(["--db", url, "verify", "--all"]) == 0
    assert "verify: verifying 1/1" in terminal.text
    assert terminal.text.endswith("\r")  # the line is cleared afterwards
    assert "\x1b" not in terminal.text


def test_a_stored_state_turned_into_invalid_text_is_an_unreadable_event(
    filled: tuple[Store, list[UUID]], tamper: Tamperer
) -> None:
    """An edit that makes a stored state text that is not UTF-8 (on SQLite, `X'FFFE' ||
    state` stores TEXT) is a break of its chain, and reading it an IntegrityError: never
    a driver error that stops every other conversation's check."""
    store, _ = filled
    conversation, version, _ = tamper.rows()[3]
    prefix = "X'FFFE'" if tamper.sqlite is not None else "'\\xfffe'::bytea"
    tamper.run(
        f"UPDATE events SET state = {prefix} || state"
        " WHERE originator_id = %s AND originator_version = %s",
        (conversation, version),
    )
    report = verify(store)
    assert (str(conversation), version) in breaks_of(report)
    with pytest.raises(IntegrityError):
        list(store.service.events(ConversationId(conversation)))
