"""Encrypted stores and `forget` (issue 19), on real SQLite files and real PostgreSQL.

Content is sealed under each conversation's key with the chain over the ciphertext;
forgetting appends Forgotten (the commit point), destroys the key and deletes the derived
plaintext: afterwards no byte of the conversation's known phrases is in the database
files (WAL included) or any PostgreSQL row, the key is gone from the key store, `verify`
passes, and the other conversations are untouched.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore.adapters import cli
from convstore.domain import ConversationId, ResponseId, ResponseStarted, UserMessage
from convstore.domain.errors import (
    ConfigurationError,
    ConversationForgotten,
    IntegrityError,
    ResponseBeingWritten,
)
from convstore.projections.follower import Follower
from convstore.projections.search import SearchIndex
from convstore.projections.verify import verify
from convstore.storage import (
    PostgresLocation,
    Store,
    forgetting,
    open_recorder,
    open_store,
    parse_location,
)
from convstore.storage.keys import keys_dsn
from tests.conftest import BACKENDS

SCHEMAS = Path(__file__).resolve().parents[1] / "adapters" / "cli" / "schemas"
PURGES = (SearchIndex.purge,)
"""The command line's: a forgotten conversation leaves the search index at once."""


def drop_key_schema(url: str) -> None:
    """Drop a PostgreSQL store's schema in its key database (the test fixture drops the
    events' one)."""
    location = parse_location(url)
    if not isinstance(location, PostgresLocation):
        return
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(keys_dsn(location.dsn), autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(location.schema))
            )
    except psycopg.OperationalError:
        pass  # the key database was never made


@pytest.fixture(params=BACKENDS)
def encrypted_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A store URL on each backend, its store created encrypted."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    open_store(url, encrypt=True).close()
    try:
        yield url
    finally:
        drop_key_schema(url)


@pytest.fixture
def encrypted(encrypted_url: str) -> Iterator[Store]:
    with open_store(encrypted_url, purges=PURGES) as store:
        yield store


def _converse(store: Store, title: str, *texts: str) -> ConversationId:
    service = store.service
    cid = service.start(title, ["tea"])
    for text in texts:
        service.add_user_input(cid, [UserMessage(blocks=(text,))])
    return cid


def _index(store: Store) -> SearchIndex:
    index = SearchIndex(store.recorder)
    Follower(store.recorder, index).catch_up()
    return index


# --- sealing ----------------------------------------------------------------------------------


@given(text=st.text(min_size=1, max_size=200))
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_any_content_is_stored_sealed_and_reads_back(encrypted: Store, text: str) -> None:
    marker = f"mk{uuid4().hex}"
    cid = _converse(encrypted, f"title {marker}", f"{marker} {text}")
    stored = b"".join(state for _, state in encrypted.recorder.select_states(cid))
    assert marker.encode() not in stored
    assert b'"sealed":"' in stored
    events = list(encrypted.service.events(cid))
    assert events[0].title == f"title {marker}"  # type: ignore[attr-defined]
    assert events[-1].blocks == (f"{marker} {text}",)  # type: ignore[attr-defined]
    assert verify(encrypted, cid).intact


def test_the_chain_verifies_without_any_key(encrypted_url: str) -> None:
    with open_store(encrypted_url) as store:
        _converse(store, "kept", "one", "two")
    recorder = open_recorder(parse_location(encrypted_url), read_only=True)  # no key store
    try:
        report = verify(recorder, None)
        assert report.intact and report.events == 6
    finally:
        recorder.close()


def test_a_ciphertext_moved_to_another_event_does_not_decrypt(sqlite_url: str) -> None:
    with open_store(sqlite_url, encrypt=True) as store:
        cid = _converse(store, "t", "first secret", "second secret")
    db = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    (one,), (two,) = db.execute(
        "SELECT state FROM events WHERE originator_version IN (3, 5) ORDER BY 1"
    ).fetchall()
    sealed = json.loads(bytes(two))["sealed"]
    moved = json.loads(bytes(one))
    moved["sealed"] = sealed
    db.execute(
        "UPDATE events SET state = ? WHERE originator_version = 3",
        (json.dumps(moved, separators=(",", ":")).encode(),),
    )
    db.commit()
    db.close()
    with open_store(sqlite_url) as store:
        with pytest.raises(IntegrityError, match="does not decrypt"):
            list(store.service.events(cid))
        assert not verify(store, cid).intact


def test_encryption_is_recorded_in_the_store_and_never_half_on(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    with open_store(url, encrypt=True) as store:
        assert store.encrypted
    with open_store(url) as reopened:  # the store says so, not the caller
        assert reopened.encrypted
        cid = _converse(reopened, "t", "hello")
    with open_store(url, read_only=True) as reader:
        assert reader.encrypted
        assert [type(e).__name__ for e in reader.service.events(cid)][-1] == "UserMessage"

    plain = f"sqlite:///{tmp_path / 'p.db'}"
    with open_store(plain) as store:
        _converse(store, "t", "in clear")
    with pytest.raises(ConfigurationError, match="migrate --encrypt"):
        open_store(plain, encrypt=True)
    with open_store(plain) as store:
        assert not store.encrypted
        assert forgetting.store_option(store.recorder, forgetting.ENCRYPT_OPTION) is None


def test_an_event_without_its_cipher_is_refused_on_an_encrypted_store(encrypted: Store) -> None:
    from convstore.domain import Conversation

    conversation = Conversation.start("in clear")  # no cipher handed in
    with pytest.raises(IntegrityError, match="not sealed"):
        encrypted.repository.save(conversation)
    assert encrypted.recorder.select_states(conversation.id) == []


# --- forget -----------------------------------------------------------------------------------


def _files(url: str) -> dict[str, bytes]:
    path = Path(url.removeprefix("sqlite:///"))
    found = {}
    for suffix in ("", "-wal", ".keys", ".keys-journal"):
        file = Path(f"{path}{suffix}")
        if file.exists():
            found[suffix or "db"] = file.read_bytes()
    return found


PHRASES = ("zebra-umbrella-42", "Secret Kyoto trip", "koicha-whisper")


def test_forget_leaves_no_plaintext_in_the_sqlite_file_its_wal_or_the_key_file(
    sqlite_url: str,
) -> None:
    with open_store(sqlite_url, encrypt=True, purges=PURGES) as store:
        gone = _converse(store, PHRASES[1], f"the passphrase is {PHRASES[0]}", PHRASES[2])
        store.service.retitle(gone, f"{PHRASES[1]} again")
        kept = _converse(store, "other trip", "keep this passage around")
        index = _index(store)
        assert index.search("zebra") and index.search("koicha")
        key = store.ciphers.keys.key(gone, create=False)  # type: ignore[union-attr]
        assert key is not None
        before = {
            phrase: any(phrase.encode() in b for b in _files(sqlite_url).values())
            for phrase in PHRASES
        }
        assert all(before.values())  # the index and catalogue held them in clear
        kept_events = list(store.service.events(kept))

        on = forgetting.forget(store, gone, reason="asked to be forgotten")

        files = _files(sqlite_url)  # while the store is still open: the WAL is there
        for name, data in files.items():
            for phrase in PHRASES:
                assert phrase.encode() not in data, (name, phrase)
            assert key not in data, name
        assert store.ciphers.keys.key(gone, create=False) is None  # type: ignore[union-attr]
        assert index.search("zebra") == [] and index.search("koicha") == []
        assert [h.conversation_id for h in index.search("passage")] == [kept]
        assert list(store.service.events(kept)) == kept_events
        assert [s.id for s in store.service.list()] == [kept]
        with pytest.raises(ConversationForgotten) as said:
            list(store.service.events(gone))
        assert said.value.on == on
        with pytest.raises(ConversationForgotten):
            store.service.add_user_input(gone, [UserMessage(blocks=("more",))])
        assert verify(store, None).intact
    assert cli.main(["--db", sqlite_url, "verify", "--all"]) == 0


@pytest.mark.postgres
def test_forget_leaves_no_postgres_row_holding_the_text(postgres_url: str) -> None:
    import psycopg
    from psycopg import sql

    open_store(postgres_url, encrypt=True).close()
    location = parse_location(postgres_url)
    assert isinstance(location, PostgresLocation)
    try:
        with open_store(postgres_url, purges=PURGES) as store:
            gone = _converse(store, PHRASES[1], PHRASES[0], PHRASES[2])
            kept = _converse(store, "other", "keep this passage")
            index = _index(store)
            key = store.ciphers.keys.key(gone, create=False)  # type: ignore[union-attr]
            assert key is not None and index.search("zebra")
            forgetting.forget(store, gone)
            assert [h.conversation_id for h in index.search("passage")] == [kept]

        def rows(dsn: str) -> str:
            with psycopg.connect(dsn, autocommit=True) as connection:
                tables = connection.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                    (location.schema,),
                ).fetchall()
                texts = []
                for (table,) in tables:
                    query = sql.SQL("SELECT t::text FROM {}.{} t").format(
                        sql.Identifier(location.schema), sql.Identifier(table)
                    )
                    texts += [row[0] for row in connection.execute(query)]
            return "\n".join(texts)

        events, keys = rows(location.dsn), rows(keys_dsn(location.dsn))
        for phrase in PHRASES:
            assert phrase not in events and phrase.encode().hex() not in events
        assert key.hex() not in keys and str(gone) not in keys
        assert "keep this passage" in events  # the other conversation's index rows stay
    finally:
        drop_key_schema(postgres_url)


def test_forget_refuses_a_plain_store_and_writes_nothing(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_store(sqlite_url) as store:
        cid = _converse(store, "t", "hello")
        head = store.recorder.max_notification_id()
    assert cli.main(["--db", sqlite_url, "forget", str(cid)]) == 2
    assert "convstore migrate --encrypt" in capsys.readouterr().err
    with open_store(sqlite_url) as store:
        assert store.recorder.max_notification_id() == head
        assert len(list(store.service.events(cid))) == 3


def test_forget_beside_a_live_writer_is_refused_and_writes_nothing(encrypted: Store) -> None:
    service = encrypted.service
    cid = _converse(encrypted, "t", "hi")
    service.append(
        cid,
        [
            ResponseStarted(
                response_id=ResponseId("r1"), provider="anthropic", writer=service.writer
            )
        ],
    )
    head = encrypted.recorder.max_notification_id()
    with pytest.raises(ResponseBeingWritten):
        forgetting.forget(encrypted, cid)
    assert encrypted.recorder.max_notification_id() == head
    assert len(list(service.events(cid))) == 4  # readable: its key is kept
    assert forgetting.finish_pending(encrypted) == []


def test_a_crash_after_the_commit_point_is_finished_by_the_next_writer(
    encrypted_url: str,
) -> None:
    with open_store(encrypted_url) as store:
        cid = _converse(store, "t", "a crash-surviving phrase")
        _index(store)
        forgetting._intent(store.recorder, cid, add=True)
        store.service.forget(cid, reason="crash test")  # the commit point, then the "crash"
    with open_store(encrypted_url, read_only=True) as reader:
        with pytest.raises(ConversationForgotten):  # forgotten already, key or not
            list(reader.service.events(cid))
        assert reader.ciphers.keys.key(cid, create=False) is not None  # type: ignore[union-attr]
    with open_store(encrypted_url, purges=PURGES) as writer:  # the next writer finishes it
        assert writer.ciphers.keys.key(cid, create=False) is None  # type: ignore[union-attr]
        assert SearchIndex(writer.recorder).search("phrase") == []
        assert forgetting.finish_pending(writer) == []
        assert verify(writer, cid).intact


def test_a_crash_before_the_commit_point_leaves_the_conversation_whole(
    encrypted_url: str,
) -> None:
    with open_store(encrypted_url) as store:
        cid = _converse(store, "t", "still here")
        forgetting._intent(store.recorder, cid, add=True)  # then the "crash"
    with open_store(encrypted_url) as writer:
        assert [e.blocks for e in writer.service.events(cid) if isinstance(e, UserMessage)] == [
            ("still here",)
        ]
        assert writer.ciphers.keys.key(cid, create=False) is not None  # type: ignore[union-attr]
        assert forgetting.finish_pending(writer) == []


def test_forgetting_a_parent_hides_the_prefix_its_fork_reads(encrypted: Store) -> None:
    service = encrypted.service
    parent = _converse(encrypted, "parent", "the parent's words")
    fork = service.fork(parent, at=3)
    service.add_user_input(fork, [UserMessage(blocks=("the fork's own words",))])
    assert len(service.history(fork)) == 6
    forgetting.forget(encrypted, parent)
    reading = service.history(fork)
    texts = [e.blocks for e in reading if isinstance(e, UserMessage)]
    assert texts == [("the fork's own words",)]
    service.add_user_input(fork, [UserMessage(blocks=("and it goes on",))])


# --- the command line ---------------------------------------------------------------------------


def _json(command: str, out: str) -> Any:
    data = json.loads(out)
    schema = json.loads((SCHEMAS / f"{command}.schema.json").read_text())
    jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    ).validate(data)
    return data


def test_forget_on_the_command_line(
    sqlite_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CONVSTORE_CONFIG", "CONVSTORE_URL"):
        monkeypatch.delenv(name, raising=False)
    examples = Path(__file__).resolve().parents[1] / "examples" / "anthropic"
    capture = examples / "web_search_citations"
    ingest = ["ingest", "--provider", "anthropic", "--request", str(capture / "1.request.json")]
    db = ["--db", sqlite_url]
    assert (
        cli.main(
            [*db, *ingest, "--cfg", "store.encrypt=true", str(capture / "1.response.sse"), "--json"]
        )
        == 0
    )
    cid = json.loads(capsys.readouterr().out)["conversation_id"]
    with open_store(sqlite_url) as store:
        other = _converse(store, "other", "a second one")
        store.service.relabel(other, add=["keep"])

    assert cli.main([*db, "forget", "--all", "--dry-run", "--json"]) == 0
    data = _json("forget", capsys.readouterr().out)
    assert data["dry_run"] and data["count"] == 2
    assert all(item["forgotten_on"] is None for item in data["conversations"])
    assert cli.main([*db, "forget", "--all"]) == 2  # off a terminal: --yes or nothing
    assert "--yes" in capsys.readouterr().err
    assert cli.main([*db, "forget", "--older-than", "90d", "--yes", "--json"]) == 0
    assert _json("forget", capsys.readouterr().out)["count"] == 0  # all of them are new
    assert cli.main([*db, "forget", "--older-than", "soon"]) == 2
    capsys.readouterr()

    assert cli.main([*db, "forget", cid, "--reason", "asked", "--json"]) == 0
    data = _json("forget", capsys.readouterr().out)
    assert [item["conversation_id"] for item in data["conversations"]] == [cid]
    day = data["conversations"][0]["forgotten_on"][:10]
    for reading in (
        ["show", cid],
        ["export", cid, "--format", "md"],
        ["replay", cid, "--to", "openai"],
        ["audit", cid],
    ):
        assert cli.main([*db, *reading]) == 0, reading
        out = capsys.readouterr().out
        assert out == f"conversation {cid} was forgotten on {day}\n", reading
    for command in ("show", "audit"):
        assert cli.main([*db, command, cid, "--json"]) == 0
        assert _json(command, capsys.readouterr().out)["forgotten_on"][:10] == day
    assert cli.main([*db, *ingest, str(capture / "1.response.sse")]) == 2
    assert "was forgotten" in capsys.readouterr().err
    assert cli.main([*db, "search", "matcha"]) == 0
    assert "no matches" in capsys.readouterr().err
    assert cli.main([*db, "forget", cid]) == 0  # again: the cleanup, idempotent
    capsys.readouterr()
    assert cli.main([*db, "forget", "--label", "keep", "--yes", "--json"]) == 0
    data = _json("forget", capsys.readouterr().out)
    assert [item["conversation_id"] for item in data["conversations"]] == [str(other)]
    assert cli.main([*db, "verify", "--all"]) == 0


# --- the aggregate ------------------------------------------------------------------------------


@given(
    texts=st.lists(st.text(max_size=20), max_size=4),
    after=st.sampled_from(("UserMessage", "Retitled", "Forgotten", "Started")),
)
def test_nothing_follows_a_forgotten_and_a_refusal_changes_nothing(
    texts: list[str], after: str
) -> None:
    from convstore.domain import Conversation, Retitled, Started
    from convstore.domain.events import Forgotten

    conversation = Conversation.start("t")
    for text in texts:
        conversation.record(UserMessage(blocks=(text,)))
    forgotten = conversation.record(Forgotten(reason="why"))
    assert conversation.state.forgotten_on == forgotten.timestamp
    draft = {
        "UserMessage": UserMessage(blocks=("more",)),
        "Retitled": Retitled(title="new"),
        "Forgotten": Forgotten(),
        "Started": Started(),
    }[after]
    version, head = conversation.version, conversation.state.head
    with pytest.raises(ConversationForgotten, match="was forgotten on"):
        conversation.record(draft)
    assert (conversation.version, conversation.state.head) == (version, head)


def test_a_forgotten_is_refused_inside_a_response() -> None:
    from convstore.domain import Conversation
    from convstore.domain.errors import ResponseStillOpen
    from convstore.domain.events import Forgotten

    conversation = Conversation.start("t")
    conversation.record(ResponseStarted(response_id=ResponseId("r"), provider="anthropic"))
    with pytest.raises(ResponseStillOpen):
        conversation.record(Forgotten())


# --- kill -9 at each step of forget -------------------------------------------------------------

_CHILD = """
import os, sys, time
from convstore.storage import open_store, forgetting
from convstore.domain.vocabulary import ConversationId
from uuid import UUID
url, cid, target = sys.argv[1], ConversationId(UUID(sys.argv[2])), sys.argv[3]
def step(name):
    print(name, flush=True)
    if name == target:
        time.sleep(60)  # the parent kills it here
from convstore.projections.search import SearchIndex
store = open_store(url, purges=(SearchIndex.purge,))
forgetting.forget(store, cid, reason="killed", step=step)
"""


@pytest.mark.parametrize("target", forgetting.STEPS)
def test_kill_9_at_each_step_of_forget(encrypted_url: str, target: str) -> None:
    """The conversation is whole when no Forgotten was committed, forgotten otherwise; the
    next writer open finishes the cleanup."""
    import signal
    import subprocess
    import sys

    with open_store(encrypted_url) as store:
        cid = _converse(store, PHRASES[1], PHRASES[0])
        kept = _converse(store, "other", "a surviving passage")
        _index(store)
        key = store.ciphers.keys.key(cid, create=False)  # type: ignore[union-attr]
    assert key is not None
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, encrypted_url, str(cid), target],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    seen = []
    for line in child.stdout:
        seen.append(line.strip())
        if seen[-1] == target:
            break
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert seen == list(forgetting.STEPS[: forgetting.STEPS.index(target) + 1])

    committed = target != "intent"
    with open_store(encrypted_url, read_only=True) as reader:
        if committed:
            with pytest.raises(ConversationForgotten):
                list(reader.service.events(cid))
        else:
            assert any(isinstance(e, UserMessage) for e in reader.service.events(cid))
    with open_store(encrypted_url, purges=PURGES) as writer:  # it finishes what was cut
        keys = writer.ciphers.keys  # type: ignore[union-attr]
        assert (keys.key(cid, create=False) is None) is committed
        assert keys.key(kept, create=False) is not None
        assert bool(SearchIndex(writer.recorder).search("zebra")) is not committed
        assert [h.conversation_id for h in SearchIndex(writer.recorder).search("passage")] == [kept]
        assert verify(writer, None).intact
        assert forgetting.finish_pending(writer) == []
        if committed and encrypted_url.startswith("sqlite"):
            for name, data in _files(encrypted_url).items():
                assert PHRASES[0].encode() not in data and key not in data, name
            db = sqlite3.connect(encrypted_url.removeprefix("sqlite:///"))
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            db.close()


# --- migrate --encrypt --to ---------------------------------------------------------------------


def _unchained(events: list[Any]) -> list[Any]:
    import msgspec

    return [msgspec.structs.replace(e, prev_hash="", hash="") for e in events]


def test_migrate_encrypt_writes_an_encrypted_copy_with_both_heads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CONVSTORE_CONFIG", "CONVSTORE_URL"):
        monkeypatch.delenv(name, raising=False)
    plain, copy = f"sqlite:///{tmp_path / 'plain.db'}", f"sqlite:///{tmp_path / 'copy.db'}"
    examples = Path(__file__).resolve().parents[1] / "examples"
    for provider, folder in (
        ("anthropic", "web_search_citations"),
        ("openai", "web_search_citations"),
        ("google", "grounding_search_stream"),
    ):
        capture = examples / provider / folder
        request, response = capture / "1.request.json", capture / "1.response.sse"
        argv = ["--db", plain, "ingest", "--provider", provider, "--request", str(request)]
        assert cli.main([*argv, str(response)]) == 0
    with open_store(plain) as store:
        ids = [s.id for s in store.service.list()]
        store.service.retitle(ids[0], "Uji day trip")
        fork = store.service.fork(ids[0], at=3)
        store.service.add_user_input(fork, [UserMessage(blocks=("and then?",))])
        before = {cid: store.recorder.select_states(cid) for cid in [*ids, fork]}
        readings = {cid: _unchained(store.service.history(cid)) for cid in before}
    capsys.readouterr()

    assert cli.main(["--db", plain, "migrate", "--encrypt"]) == 2  # --to is needed
    assert cli.main(["--db", plain, "migrate", "--encrypt", "--to", copy, "--json"]) == 0
    data = _json("migrate", capsys.readouterr().out)
    assert [c["conversation_id"] for c in data["conversations"]] == [str(c) for c in before]
    with open_store(plain, read_only=True) as store:  # the source is only read
        assert {cid: store.recorder.select_states(cid) for cid in before} == before
        assert not store.encrypted
    with open_store(copy) as store:
        assert store.encrypted
        for item in data["conversations"]:
            cid = ConversationId(UUID(item["conversation_id"]))
            assert _unchained(store.service.history(cid)) == readings[cid]
            assert item["source_head"] == before[cid][-1][1].split(b'"hash":"')[-1][:64].decode()
            assert item["head"] == store.service.get(cid).state.head != item["source_head"]
        assert verify(store, None).intact
        forgetting.forget(store, ids[1])
    assert cli.main(["--db", plain, "migrate", "--encrypt", "--to", copy]) == 2  # not new
    assert "holds conversations already" in capsys.readouterr().err


def test_a_follower_purges_what_it_indexed_when_it_meets_the_forgotten_event(
    encrypted: Store,
) -> None:
    """Followers elsewhere see the commit point in the log: the index drops the
    conversation there, before any cleanup ran; a rebuild (`reindex`) skips it."""
    gone = _converse(encrypted, "t", "an indexed zebra phrase")
    kept = _converse(encrypted, "k", "a kept passage")
    index = _index(encrypted)
    assert index.search("zebra")
    encrypted.service.forget(gone)  # the commit point alone: no cleanup yet
    Follower(encrypted.recorder, index).catch_up()
    assert index.search("zebra") == []
    forgetting.finish_pending(encrypted)  # nothing pending: no intent was written
    Follower(encrypted.recorder, index).rebuild()
    assert index.search("zebra") == []
    assert [h.conversation_id for h in index.search("passage")] == [kept]


# --- every reading, encrypted as plain ----------------------------------------------------------

READINGS = (
    ("show", "{id}"),
    ("show", "{id}", "--json"),
    ("export", "{id}", "--format", "md"),
    ("export", "{id}", "--format", "json"),
    ("export", "{id}", "--format", "otel"),
    ("export", "{id}", "--format", "pydantic-ai"),
    ("audit", "{id}", "--json"),
    ("replay", "{id}", "--to", "anthropic", "--model", "claude-sonnet-4-5"),
    ("replay", "{id}", "--to", "openai", "--model", "gpt-5.1", "--dry-run", "--json"),
    ("replay", "{id}", "--to", "google", "--model", "gemini-2.5-flash"),
)


def _normalized(text: str, ids: list[str]) -> str:
    import re

    for n, cid in enumerate(ids):
        text = text.replace(cid, f"<conversation {n}>").replace(cid.replace("-", ""), f"<c{n}>")
        text = text.replace(cid[:8], f"<short {n}>")
    text = re.sub(r"[0-9a-f]{64}", "<hash>", text)
    text = re.sub(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?", "<time>", text)
    # OTel's span ids (of event hashes) first: one may be 16 decimal digits, like a time
    text = re.sub(r'"[0-9a-f]{16}"', '"<span>"', text)
    text = re.sub(r"\b\d{16,19}\b", "<nanos>", text)  # OTel's times
    return re.sub(r'"pid":\d+,"started":[0-9.]+,"id":"[0-9a-f]+"', "<writer>", text)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_reading_of_an_encrypted_store_equals_the_plain_one(
    backend: str,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The same captures recorded in a plain and an encrypted store read the same through
    show, export (every format), audit, replay (each provider), search and list."""
    for name in ("CONVSTORE_CONFIG", "CONVSTORE_URL"):
        monkeypatch.delenv(name, raising=False)
    if backend == "sqlite":
        urls = {"plain": f"sqlite:///{tmp_path / 'p.db'}", "enc": f"sqlite:///{tmp_path / 'e.db'}"}
    else:
        urls = {"plain": request.getfixturevalue("postgres_url")}
        urls["enc"] = urls["plain"].replace("schema=", "schema=e")
        from tests.conftest import _on_schema, drop_postgres_schema

        _on_schema("CREATE SCHEMA {}", parse_location(urls["enc"]).schema)  # type: ignore[union-attr]
        request.addfinalizer(lambda: drop_postgres_schema(parse_location(urls["enc"]).schema))  # type: ignore[union-attr]
        request.addfinalizer(lambda: drop_key_schema(urls["enc"]))
    examples = Path(__file__).resolve().parents[1] / "examples"
    readings = {}
    for kind, url in urls.items():
        cfg = ["--cfg", "store.encrypt=true"] if kind == "enc" else []
        for provider, folder in (
            ("anthropic", "web_search_citations"),
            ("openai", "web_search_citations"),
            ("google", "grounding_search_stream"),
        ):
            capture = examples / provider / folder
            argv = ["--db", url, "ingest", *cfg, "--provider", provider]
            argv += ["--request", str(capture / "1.request.json"), str(capture / "1.response.sse")]
            assert cli.main(argv) == 0
        capsys.readouterr()
        with open_store(url, read_only=True) as store:
            assert store.encrypted is (kind == "enc")
            ids = [str(s.id) for s in store.service.list()]
        outputs = []
        for cid in ids:
            for reading in READINGS:
                code = cli.main(["--db", url, *(part.format(id=cid) for part in reading)])
                outputs.append(f"{reading} {code}\n{capsys.readouterr().out}")
        for extra in (["search", "matcha"], ["list"], ["verify", "--all"]):
            code = cli.main(["--db", url, *extra])
            outputs.append(f"{extra} {code}\n{capsys.readouterr().out}")
        readings[kind] = _normalized("\n".join(outputs), ids)
    assert readings["enc"] == readings["plain"]


def test_projections_pass_over_a_forgotten_conversation(encrypted: Store) -> None:
    """A projection that does not forget (the proxy's prefix index) never meets a
    forgotten conversation's events, before or after its key is gone; it catches up and
    rebuilds past it."""
    from convstore.adapters.proxy.prefixes import PrefixIndex
    from convstore.domain import ResponseEnded

    gone = _converse(encrypted, "t", "a prefix of words")
    kept = _converse(encrypted, "k", "other words")
    for cid in (gone, kept):
        rid = ResponseId(f"r-{cid}")
        encrypted.service.append(
            cid,
            [
                ResponseStarted(response_id=rid, provider="anthropic"),
                ResponseEnded(response_id=rid, state="completed"),
            ],
        )
    index = PrefixIndex(encrypted)
    encrypted.service.forget(gone)  # committed, its key still there: passed over all the same
    assert index.catch_up() > 0
    forgetting.finish_pending(encrypted)
    forgetting.forget(encrypted, gone)  # the cleanup, its key destroyed
    rebuilt = PrefixIndex(encrypted)
    assert rebuilt._follower.rebuild().undecodable == 0


def test_response_digests_are_keyed_on_an_encrypted_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored digest cannot confirm guessed content (it is an HMAC under the store's
    key, in the key store), and re-ingesting still says "already stored"."""
    from convstore.domain import ResponseEnded

    for name in ("CONVSTORE_CONFIG", "CONVSTORE_URL"):
        monkeypatch.delenv(name, raising=False)
    capture = Path(__file__).resolve().parents[1] / "examples/anthropic/web_search_citations"
    digests = {}
    for kind in ("plain", "enc"):
        url = f"sqlite:///{tmp_path / kind}.db"
        cfg = ["--cfg", "store.encrypt=true"] if kind == "enc" else []
        argv = ["--db", url, "ingest", *cfg, "--provider", "anthropic"]
        argv += ["--request", str(capture / "1.request.json"), str(capture / "1.response.sse")]
        assert cli.main(argv) == 0
        assert cli.main(argv) == 0
        assert "already stored" in capsys.readouterr().out
        with open_store(url, read_only=True) as store:
            [summary] = store.service.list()
            [end] = [e for e in store.service.events(summary.id) if isinstance(e, ResponseEnded)]
            digests[kind] = end.digest
        data = b"".join(_files(url).values())
        assert (digests[kind].encode() in data) is (kind == "plain")
    assert digests["enc"] != digests["plain"]
    unkeyed = digests["plain"].split(":")[1].encode()  # the same response's plain digest
    assert unkeyed not in b"".join(_files(f"sqlite:///{tmp_path / 'enc'}.db").values())
    assert digests["enc"].split(":")[0] == digests["plain"].split(":")[0]  # the version


def test_forgetting_several_stops_at_a_refusal_and_cleans_up_those_before_it(
    encrypted: Store,
) -> None:
    service = encrypted.service
    first = _converse(encrypted, "a", "first zebra words")
    busy = _converse(encrypted, "b", "busy words")
    last = _converse(encrypted, "c", "last words")
    service.append(
        busy,
        [
            ResponseStarted(
                response_id=ResponseId("r1"), provider="anthropic", writer=service.writer
            )
        ],
    )
    _index(encrypted)
    with pytest.raises(ResponseBeingWritten):
        forgetting.forget_all(encrypted, [first, busy, last])
    keys = encrypted.ciphers.keys  # type: ignore[union-attr]
    assert keys.key(first, create=False) is None
    assert SearchIndex(encrypted.recorder).search("zebra") == []
    for kept in (busy, last):
        assert keys.key(kept, create=False) is not None
        assert list(service.events(kept))
    assert forgetting.finish_pending(encrypted) == []
