"""Old data stays readable: golden fixtures and upcasters (RELIABILITY scenario 10).

`tests/golden/` holds the stored bytes of today's schema (version 1), written once by
`tests/golden/generate.py`: every later version must read them into today's classes, the
same events, chain and readings, or register an upcaster. The test-only upcasters below
read a synthetic "version 0" (older than anything the library ever wrote) of two event
types, to prove the mechanism end to end on both backends: typed loads, the search
index's partial decode, export and audit read the upcast events, while `verify` checks
the stored bytes, never rewritten.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from eventsourcing.persistence import StoredEvent

from convstore.domain import EVENT_TYPES, Conversation, ConversationId, Event, UserMessage
from convstore.domain.chain import digest, verify_stored
from convstore.domain.errors import IntegrityError
from convstore.projections import audit, export, portable, search
from convstore.projections.verify import verify_conversation
from convstore.storage import Store, open_store
from convstore.storage.mapper import EventMapper, topic_of
from convstore.storage.recorder import SnapshotRecord
from convstore.storage.repository import decode_snapshot
from convstore.storage.upcasting import UPCASTERS, Fields, Upcaster, tag_of, upcast, upcaster
from tests import sample_conversation

GOLDEN = Path(__file__).parent / "golden"
STATES: list[bytes] = (GOLDEN / "conversation.jsonl").read_bytes().splitlines()
"""The golden conversation's stored events, version 1 first."""
METADATA_STATES: list[bytes] = (GOLDEN / "metadata.jsonl").read_bytes().splitlines()
"""A conversation's title and label changes, as the version that added them stored them."""
FORGOTTEN_STATES: list[bytes] = (GOLDEN / "forgotten.jsonl").read_bytes().splitlines()
"""A sealed conversation of an encrypted store, then forgotten (its key destroyed)."""
REDACTED_STATES: list[bytes] = (GOLDEN / "redacted.jsonl").read_bytes().splitlines()
"""A user message, a span of it redacted, then all of it."""
_SNAPSHOT = json.loads((GOLDEN / "snapshot.json").read_text())
SNAPSHOT_VERSION: int = _SNAPSHOT["version"]
SNAPSHOT_STATE = base64.b64decode(_SNAPSHOT["state"])

decode = EventMapper.decode
encode = msgspec.json.encode
CLASSES = {cls.__name__: cls for cls in EVENT_TYPES}


class _Head(msgspec.Struct):
    type: str
    hash: str


def conversation_id() -> ConversationId:
    """The golden conversation's id."""
    return ConversationId(decode(STATES[0]).originator_id)


def insert(store: Store, states: list[bytes], snapshot: SnapshotRecord | None = None) -> None:
    """Stored records put in as they are, through the recorder (no mapper, no aggregate)."""
    records = []
    for version, state in enumerate(states, 1):
        tag = msgspec.json.decode(state, type=_Head).type
        cls = CLASSES[tag.partition("@")[0]]
        records.append(StoredEvent(conversation_id(), version, topic_of(cls), state))
    store.recorder.append(records, snapshot)


def without_hashes(event: Event) -> Event:
    """The event as its fields read, its chain fields left out."""
    return msgspec.structs.replace(event, prev_hash="", hash="")


def golden_events() -> list[Event]:
    """The golden events, decoded."""
    return [decode(state) for state in STATES]


# --- the golden fixtures ----------------------------------------------------------------------


def test_golden_fixtures_hold_every_event_type_and_read_back_exactly() -> None:
    """Scenario 10: every event type's version-1 bytes decode into today's class and encode
    back to the same fields (as stored, or as their upcaster returns them): nothing dropped,
    renamed or reinterpreted, and the stored chain holds."""
    every = STATES + METADATA_STATES + FORGOTTEN_STATES + REDACTED_STATES
    assert {msgspec.json.decode(s, type=_Head).type for s in every} >= {
        cls.__struct_config__.tag for cls in EVENT_TYPES
    }
    for state, event in zip(STATES, golden_events(), strict=True):
        assert json.loads(encode(event)) == json.loads(upcast(state) or state)
    assert verify_stored(enumerate(STATES, 1)) == []
    for state in METADATA_STATES:
        assert json.loads(encode(decode(state))) == json.loads(upcast(state) or state)
    assert verify_stored(enumerate(METADATA_STATES, 1)) == []
    metadata = Conversation.replay(
        ConversationId(decode(METADATA_STATES[0]).originator_id), map(decode, METADATA_STATES)
    )
    assert (metadata.state.title, metadata.state.labels) == ("", ("japan",))
    for state in REDACTED_STATES:
        assert json.loads(encode(decode(state))) == json.loads(upcast(state) or state)
    assert verify_stored(enumerate(REDACTED_STATES, 1)) == []


def test_a_golden_sealed_and_forgotten_conversation_still_verifies_without_its_key() -> None:
    """The sealed fixture's chain holds over its ciphertext with no key anywhere; its
    Forgotten reads back; its sealed events name known types."""
    from convstore.domain.events import Forgotten
    from convstore.domain.sealing import sealed_kind

    assert verify_stored(enumerate(FORGOTTEN_STATES, 1)) == []
    kinds = [sealed_kind(state) for state in FORGOTTEN_STATES]
    assert kinds == ["Started", "TurnStarted", "UserMessage", None]
    forgotten = decode(FORGOTTEN_STATES[-1])
    assert isinstance(forgotten, Forgotten) and forgotten.reason == "golden fixture"
    assert json.loads(encode(forgotten)) == json.loads(FORGOTTEN_STATES[-1])


def test_golden_snapshot_reads_as_the_state_its_events_fold_to() -> None:
    """Scenario 10: the golden snapshot reads as exactly the state replaying its events
    gives, or is passed over (None) for a replay: never read as another state."""
    replayed = Conversation.replay(conversation_id(), golden_events()[:SNAPSHOT_VERSION])
    state = decode_snapshot(SNAPSHOT_STATE)
    assert state is None or state == replayed.state


def test_golden_conversation_loads_and_reads_on_each_backend(store_url: str) -> None:
    """Scenario 10: golden records inserted through the recorder (with the snapshot written
    part-way) load, list, export, audit, search and verify as the conversation they
    recorded, and the conversation takes new events on its chain."""
    key = conversation_id()
    expected = golden_events()
    with open_store(store_url, cache_size=0) as store:
        insert(store, STATES, SnapshotRecord(key, SNAPSHOT_VERSION, SNAPSHOT_STATE))
        service = store.service

        loaded = service.get(key)
        assert loaded.version == len(STATES)
        assert loaded.state == Conversation.replay(key, expected).state
        assert list(service.events(key)) == expected
        [summary] = service.list()
        assert (summary.title, summary.events) == (
            sample_conversation.TITLE_OF_CONVERSATION,
            len(STATES),
        )

        reading = portable.load(service, key)
        assert reading == portable.fold(expected)
        markdown = "".join(export.render(reading, "md"))
        assert sample_conversation.QUESTION in markdown and "Byōdō-in opens at 8:30" in markdown

        report = audit.audit(service.events(key))
        assert [r.state for r in report.responses] == ["completed", "completed", "failed"]
        assert report.head.hash == expected[-1].hash

        [hit] = search.search(store, "koicha wagashi")
        assert (hit.version, hit.kind) == (8, "text")
        assert verify_conversation(store, key).intact

        added = service.add_user_input(key, [UserMessage(blocks=("Thanks!",))])
        assert added[0].prev_hash == expected[-1].hash
        assert verify_conversation(store, key).intact


def test_a_snapshot_of_another_layout_is_passed_over(store_url: str) -> None:
    """Scenario 10: a snapshot this version cannot read (a later layout's tag) is ignored and
    the conversation rebuilt from its events, never mis-read."""
    key = conversation_id()
    foreign = msgspec.msgpack.encode([99, {"head": "not this state"}, [], b"", []])
    with open_store(store_url, cache_size=0) as store:
        insert(store, STATES, SnapshotRecord(key, SNAPSHOT_VERSION, foreign))
        loaded = store.service.get(key)
        assert loaded.state == Conversation.replay(key, golden_events()).state


# --- the mechanism --------------------------------------------------------------------------


@pytest.fixture
def registry() -> Iterator[dict[str, Upcaster]]:
    """The upcaster registry, restored after the test."""
    saved = dict(UPCASTERS)
    yield UPCASTERS
    UPCASTERS.clear()
    UPCASTERS.update(saved)


def test_upcasters_chain_from_a_version_to_today_keeping_the_envelope_and_raw_values(
    registry: dict[str, Upcaster],
) -> None:
    """Scenario 10: a record upcasts version by version until no upcaster is registered;
    the envelope and every value an upcaster leaves alone keep their stored bytes."""

    @upcaster("Note", 1)
    def _renamed(fields: Fields) -> Fields:
        fields["body"] = fields.pop("text")
        return fields

    @upcaster("Note", 2)
    def _counted(fields: Fields) -> Fields:
        fields["words"] = len(msgspec.json.decode(fields["body"], type=str).split())
        return fields

    stored = (
        b'{"type":"Note","text":"caf\\u00e9 au lait","raw":{"n":1e5},'
        b'"originator_version":3,"timestamp":"2026-01-01T00:00:00Z","hash":"h"}'
    )
    assert upcast(stored) == (
        b'{"type":"Note@3","raw":{"n":1e5},"body":"caf\\u00e9 au lait","words":3,'
        b'"originator_version":3,"timestamp":"2026-01-01T00:00:00Z","hash":"h"}'
    )
    assert upcast(stored.replace(b'"Note"', b'"Note@3"')) is None  # today's: no upcaster
    assert upcast(b"[1]") is None


def test_today_s_tags_and_second_registrations_are_refused(
    registry: dict[str, Upcaster],
) -> None:
    """Scenario 10: only an earlier version gets an upcaster, and only one."""
    with pytest.raises(ValueError, match="today's tag"):
        upcaster("AssistantText", 1)(dict)
    upcaster("AssistantText", 0)(dict)
    with pytest.raises(ValueError, match="registered already"):
        upcaster("AssistantText", 0)(dict)


def test_an_unknown_record_and_a_refused_upcast_are_integrity_errors(
    registry: dict[str, Upcaster],
) -> None:
    """Scenario 10: bytes no version reads, or an upcaster refuses, raise IntegrityError."""
    unknown = STATES[0].replace(b'"Started"', b'"Begun"')
    with pytest.raises(IntegrityError, match="cannot be decoded"):
        decode(unknown)

    @upcaster("Started", 0)
    def _needs_name(fields: Fields) -> Fields:
        fields["title"] = fields.pop("name")
        return fields

    old = STATES[0].replace(b'"Started"', b'"Started@0"')
    with pytest.raises(IntegrityError, match="cannot be upcast: KeyError"):
        decode(old)
    with pytest.raises(IntegrityError, match="cannot be upcast"):
        search.read_event(old)


# --- a synthetic version 0, end to end ----------------------------------------------------------


def _assistant_text_v0(fields: Fields) -> Fields:
    """Version 0 of AssistantText (synthetic): the text under `content`, and `cut` where
    version 1 says `attributions_complete: false`."""
    fields["text"] = fields.pop("content")
    if msgspec.json.decode(fields.pop("cut", b"false"), type=bool):
        fields["attributions_complete"] = False
    return fields


def _response_ended_v0(fields: Fields) -> Fields:
    """Version 0 of ResponseEnded (synthetic): its token counters as flat fields."""
    usage = {name: fields.pop(name) for name in ("input_tokens", "output_tokens") if name in fields}
    if usage:
        fields["usage"] = usage
    return fields


HASHES = ("prev_hash", "hash")
FLAT_USAGE = {"input_tokens", "output_tokens"}
"""The counters version 0 of ResponseEnded had (a response with others stays version 1)."""


def _to_v0(record: dict[str, Any]) -> dict[str, Any]:
    """A version-1 record's fields (JSON values raw) in the synthetic version-0 shape."""
    tag = msgspec.json.decode(record["type"], type=str)
    if tag == "AssistantText":
        fields: dict[str, Any] = {"type": tag_of(tag, 0)}
        for name, value in record.items():
            if name == "text":
                fields["content"] = value
            elif name == "attributions_complete":
                fields["cut"] = not msgspec.json.decode(value, type=bool)
            elif name != "type":
                fields[name] = value
        return fields
    usage = msgspec.json.decode(record.get("usage", b"{}"), type=dict[str, Any])
    if tag == "ResponseEnded" and usage and set(usage) <= FLAT_USAGE:
        del record["usage"]
        return {**record, "type": tag_of(tag, 0), **usage}
    return record


def legacy_states() -> list[bytes]:
    """The golden conversation stored in the synthetic version 0 where it has one, every
    record hashed and chained as it would have been when written that way."""
    states = []
    prev_hash = ""
    for state in STATES:
        record = _to_v0(msgspec.json.decode(state, type=dict[str, msgspec.Raw]))
        body = {name: value for name, value in record.items() if name not in HASHES}
        if prev_hash:
            record["prev_hash"] = prev_hash  # in its place: only the values change
        record["hash"] = prev_hash = digest(prev_hash, encode(body))
        states.append(encode(record))
    return states


@pytest.fixture
def version_0(registry: dict[str, Upcaster]) -> None:
    """The test-only upcasters of the synthetic version 0, registered for one test."""
    upcaster("AssistantText", 0)(_assistant_text_v0)
    upcaster("ResponseEnded", 0)(_response_ended_v0)


def test_version_0_records_are_written_as_such() -> None:
    """Scenario 10 (the fixture's own check): the synthetic records differ from version 1 in
    shape and hash, and today's decoder alone refuses them."""
    legacy = legacy_states()
    changed = [v for v, (a, b) in enumerate(zip(STATES, legacy, strict=True), 1) if a != b]
    assert changed[0] == 8 and changed[-1] == len(STATES)  # a change re-chains what follows
    tags = {msgspec.json.decode(legacy[v - 1], type=_Head).type for v in (8, 13, 14, 25)}
    assert tags == {"AssistantText@0", "ResponseEnded@0"}
    for version in (10, 28):  # responses with hosted or cache counters stay version 1
        assert msgspec.json.decode(legacy[version - 1], type=_Head).type == "ResponseEnded"
    with pytest.raises(IntegrityError):
        decode(legacy[7])


@pytest.mark.usefixtures("version_0")
def test_version_0_records_read_as_today_s_events_on_each_backend(store_url: str) -> None:
    """Scenario 10: records of an earlier version, inserted as stored, load through the
    upcasters into today's classes (the same events as version 1, payload bytes included);
    export, audit and the search index read them; the chain verifies from the stored
    bytes, which no read rewrote."""
    key = conversation_id()
    legacy = legacy_states()
    expected = golden_events()
    with open_store(store_url, cache_size=0) as store:
        insert(store, legacy)
        service = store.service

        events = list(service.events(key))
        assert [type(e) for e in events] == [type(e) for e in expected]
        assert list(map(without_hashes, events)) == list(map(without_hashes, expected))
        assert [e.hash for e in events] == [msgspec.json.decode(s, type=_Head).hash for s in legacy]
        assert service.get(key).version == len(STATES)

        assert portable.load(service, key) == portable.fold(expected)
        report = audit.audit(service.events(key))
        assert report.responses == audit.audit(expected).responses
        assert report.head.hash == events[-1].hash

        [hit] = search.search(store, "opens")
        assert (hit.version, hit.kind) == (25, "text")
        assert {h.version for h in search.search(store, "koicha")} == {8, 13}

        check = verify_conversation(store, key)
        assert check.intact and check.head == events[-1].hash
        assert [s for _, s in store.recorder.select_states(key)] == legacy


def test_without_its_upcaster_a_version_0_record_is_refused_not_misread(store_url: str) -> None:
    """Scenario 10: with no upcaster registered, an earlier version's record is an error for
    the typed read, and the search index passes it over (an unknown tag, like a type added
    later) rather than index it as empty text; verify still checks its bytes (the chain
    holds) and, agreeing with the typed read, reports those records unreadable."""
    key = conversation_id()
    with open_store(store_url, cache_size=0) as store:
        insert(store, legacy_states())
        with pytest.raises(IntegrityError, match="no upcaster"):
            store.service.get(key)
        assert search.search(store, "opens") == []
        check = verify_conversation(store, key)
        assert check.breaks and all(item.unreadable for item in check.breaks)
        assert all("no upcaster" in item.problem for item in check.breaks)


def test_a_record_its_upcaster_refuses_is_passed_over_by_the_index(
    store_url: str, registry: dict[str, Upcaster]
) -> None:
    """Scenario 10: a record of an earlier version its upcaster refuses is an IntegrityError
    for the typed read, and the search follower counts it undecodable and carries on."""

    @upcaster("AssistantText", 0)
    def _refuse(fields: Fields) -> Fields:
        raise KeyError("content")

    upcaster("ResponseEnded", 0)(_response_ended_v0)
    with open_store(store_url, cache_size=0) as store:
        insert(store, legacy_states())
        with pytest.raises(IntegrityError, match="cannot be upcast"):
            store.service.get(conversation_id())
        report = search.follower(store).catch_up()
        assert (report.undecodable, report.position) == (3, len(STATES))
