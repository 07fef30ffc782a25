"""Settled items: a snapshot keeps what is open; the store answers for what closed.

`domain.conversation.settle` lets a snapshot's state drop the responses, answered calls
and ended activities it holds; the store keeps them in its `settled` table, written with
the snapshot, and the aggregate asks for them through the `Settled` port. These tests
show that nothing the invariants need is lost by that, in the domain alone (the state
machine, settling after every command) and in a real store on both backends (refusals and
idempotence across a snapshot, a snapshot whose size stays flat as the conversation grows,
lookups bounded by the version a state was settled at).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

import pytest

from convstore.domain import (
    ActivityId,
    CallId,
    Conversation,
    ConversationId,
    Event,
    HostedActivity,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    UserMessage,
)
from convstore.domain.errors import DuplicateId, ToolCallAlreadyAnswered, UnknownToolCall
from convstore.domain.settled import SettledItems
from convstore.domain.state import settle
from convstore.storage import SQLiteLocation, Store, open_store, parse_location
from convstore.storage.repository import StoreSettled, decode_snapshot, encode_snapshot
from tests.test_domain_stateful import SETTINGS, ConversationMachine, InMemoryBackend
from tests.test_storage_cache import _sql

# --- the domain alone: the state machine with a state settled after every command -----------


class DictSettled:
    """The `Settled` port over dicts: each key's values with the version that settled them."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], list[tuple[int, object]]] = {}

    def keep(self, items: SettledItems, version: int) -> None:
        for kind, found in (
            ("r", items.responses),
            ("c", items.calls),
            ("a", items.activities),
        ):
            for key, value in found.items():
                self.rows.setdefault((kind, key), []).append((version, value))

    def _newest(self, kind: str, key: str, upto: int) -> object | None:
        values = [value for at, value in self.rows.get((kind, key), []) if at <= upto]
        return values[-1] if values else None

    def found(
        self,
        *,
        responses: Collection[str] = (),
        calls: Collection[str] = (),
        activities: Collection[str] = (),
        upto: int,
    ) -> SettledItems:
        items = SettledItems(responses={}, calls={}, activities={})
        for kind, ids, into in (
            ("r", responses, items.responses),
            ("c", calls, items.calls),
            ("a", activities, items.activities),
        ):
            for key in ids:
                value = self._newest(kind, key, upto)
                if value is not None:
                    into[key] = value  # type: ignore[index]
        return items


class SettlingBackend(InMemoryBackend):
    """Stores events as the in-memory backend does, and loads each conversation back from a
    state settled at its newest version, as a store does after every snapshot: the
    reloaded aggregate holds only open items and must ask the port for the rest."""

    def __init__(self) -> None:
        super().__init__()
        self.settled: dict[ConversationId, DictSettled] = {}

    def persist_and_reload(self, conversation: Conversation) -> Conversation:
        super().persist_and_reload(conversation)  # stores the events
        port = self.settled.setdefault(conversation.id, DictSettled())
        kept, items = settle(conversation.state, conversation.version)
        port.keep(items, conversation.version)
        return Conversation.replay(
            conversation.id, (), state=kept, version=conversation.version, settled=port
        )


class SettlingMachine(ConversationMachine):
    def make_backend(self) -> SettlingBackend:
        return SettlingBackend()


TestSettlingMachine = SettlingMachine.TestCase
TestSettlingMachine.settings = SETTINGS


def test_a_settled_state_keeps_only_what_is_open() -> None:
    conversation = Conversation.start("settle")
    conversation.record(UserMessage(blocks=("q",)))
    _respond(conversation, 1, answered=False)
    _respond(conversation, 2, answered=True)
    opened = ResponseId("resp-open")
    conversation.record(ResponseStarted(response_id=opened, provider="anthropic"))

    kept, items = settle(conversation.state, conversation.version)

    assert set(kept.responses) == {opened}
    assert set(items.responses) == {"resp-1", "resp-2"}
    assert kept.calls == {"call-1": False}
    assert items.calls == {"call-2": True}
    assert kept.activities == {}
    assert set(items.activities) == {"act-1", "act-2"}
    assert kept.settled_at == conversation.version
    # Settling is a reading of the same state: the two compare equal.
    assert Conversation.replay(
        conversation.id, (), state=kept, version=conversation.version, settled=DictSettled()
    ) == Conversation.replay(
        conversation.id, (), state=conversation.snapshot_state(), version=conversation.version
    )


def test_a_settled_state_without_its_port_says_so() -> None:
    conversation = Conversation.start("settle")
    _respond(conversation, 1, answered=True)
    kept, _ = settle(conversation.state, conversation.version)
    orphan = Conversation.replay(conversation.id, (), state=kept, version=conversation.version)
    with pytest.raises(RuntimeError, match="Settled port"):
        orphan.stored_response("resp-1")


def _respond(conversation: Conversation, n: int, *, answered: bool) -> None:
    """Record response `resp-N` with client call `call-N` and a completed activity."""
    rid = ResponseId(f"resp-{n}")
    activity = ActivityId(f"act-{n}")
    for draft in (
        ResponseStarted(response_id=rid, provider="anthropic"),
        ToolCallRequested(response_id=rid, call_id=CallId(f"call-{n}"), name="lookup"),
        HostedActivity(activity_id=activity, name="web_search", state="started", response_id=rid),
        HostedActivity(activity_id=activity, name="web_search", state="completed", response_id=rid),
        ResponseEnded(response_id=rid, state="completed", digest=f"digest-{n}"),
    ):
        conversation.record(draft)
    if answered:
        conversation.record(ToolCallResponded(call_id=CallId(f"call-{n}"), content="ok"))


# --- a real store, both backends -----------------------------------------------------------------

EVERY = 8


def _response(n: int, *, call: str | None = None) -> Iterator[Event]:
    rid = ResponseId(f"msg_{n}")
    activity = ActivityId(f"srvtoolu_{n}")
    yield ResponseStarted(response_id=rid, provider="anthropic", model="claude-test")
    yield HostedActivity(activity_id=activity, name="web_search", state="started", response_id=rid)
    yield HostedActivity(
        activity_id=activity, name="web_search", state="completed", response_id=rid
    )
    yield ToolCallRequested(response_id=rid, call_id=CallId(call or f"toolu_{n}"), name="lookup")
    yield ResponseEnded(response_id=rid, state="completed", finish_reason="tool_use")


def _turn(store: Store, cid: ConversationId, n: int, *, answer: bool = True) -> None:
    """One exchange: a question, a response with a hosted activity and a call, its answer."""
    service = store.service
    service.add_user_input(cid, [UserMessage(blocks=(f"question {n}",))])
    assert service.ingest(cid, _response(n)).ended == "completed"
    if answer:
        service.answer(cid, CallId(f"toolu_{n}"), "ok", is_error=False)


def _snapshot_bytes(store: Store, cid: ConversationId) -> tuple[int, bytes]:
    snapshot = store.repository.recorder.select_snapshot(cid)
    assert snapshot is not None
    return snapshot.version, snapshot.state


@pytest.fixture
def grown(store_url: str) -> Iterator[tuple[str, ConversationId]]:
    """A conversation of 30 answered exchanges, snapshot every 8 versions, in a store."""
    with open_store(store_url, snapshot_every=EVERY, cache_size=0) as store:
        cid = store.service.start("grown")
        for n in range(1, 31):
            _turn(store, cid, n)
    yield store_url, cid


def test_the_snapshot_stays_the_size_of_what_is_open(store_url: str) -> None:
    with open_store(store_url, snapshot_every=EVERY, cache_size=0) as store:
        cid = store.service.start("flat")
        sizes = []
        for n in range(1, 61):
            _turn(store, cid, n)
            if n in (10, 60):
                version, state = _snapshot_bytes(store, cid)
                kept = decode_snapshot(state)
                assert kept is not None and kept.settled_at == version
                # At most the last exchange's call, when the snapshot fell before its answer.
                assert (kept.responses, kept.activities) == ({}, {})
                assert set(kept.calls) <= {f"toolu_{n}"}
                sizes.append(len(state))
    small, large = sizes
    # Six times the exchanges; only the counters' digits and that one call may differ.
    assert large <= small + 32, (small, large)


def test_a_response_from_before_the_snapshot_is_already_stored(
    grown: tuple[str, ConversationId],
) -> None:
    url, cid = grown
    with open_store(url, snapshot_every=EVERY, cache_size=0) as store:
        before = store.repository.load(cid)
        assert before.state.settled_at > 0
        assert "msg_3" not in before.state.responses  # settled: the store answers for it
        outcome = store.service.ingest(cid, _response(3))
        assert outcome.already_stored
        assert store.repository.load(cid).version == before.version


def test_refusals_reach_across_the_snapshot(grown: tuple[str, ConversationId]) -> None:
    url, cid = grown
    with open_store(url, snapshot_every=EVERY, cache_size=0) as store:
        service = store.service
        version = store.repository.load(cid).version
        with pytest.raises(ToolCallAlreadyAnswered):
            service.answer(cid, CallId("toolu_2"), "again", is_error=False)
        with pytest.raises(UnknownToolCall, match="hosted activity"):
            service.answer(cid, CallId("srvtoolu_2"), "no", is_error=False)
        with pytest.raises(UnknownToolCall, match="no client tool call"):
            service.answer(cid, CallId("toolu_never"), "no", is_error=False)
        assert store.repository.load(cid).version == version
        # A new response that reuses a settled call id: the call is refused, the response
        # ends failed with why, as a stream with a bad event does.
        outcome = service.ingest(cid, _response(99, call="toolu_4"))
        assert outcome.ended == "failed"
        events = list(service.events(cid, after=version))
        ended = next(e for e in events if isinstance(e, ResponseEnded))
        assert ended.error is not None and ended.error.type == DuplicateId.__name__
        assert not any(isinstance(e, ToolCallRequested) for e in events)


def test_a_call_left_open_before_the_snapshot_is_still_answerable(store_url: str) -> None:
    with open_store(store_url, snapshot_every=EVERY, cache_size=0) as store:
        cid = store.service.start("open call")
        _turn(store, cid, 1, answer=False)
        for n in range(2, 12):
            _turn(store, cid, n)
        loaded = store.repository.load(cid)
        assert loaded.state.settled_at > 0
        assert loaded.open_calls() == [CallId("toolu_1")]
        store.service.answer(cid, CallId("toolu_1"), "late", is_error=False)
        assert store.repository.load(cid).open_calls() == []


def test_lookups_answer_as_of_the_version_a_state_was_settled_at(
    grown: tuple[str, ConversationId],
) -> None:
    url, cid = grown
    with open_store(url, snapshot_every=EVERY, cache_size=0) as store:
        port = StoreSettled(store.repository.recorder, cid)
        newest = store.repository.load(cid).state.settled_at

        def call(call_id: str, upto: int) -> bool | None:
            return port.found(calls=[call_id], upto=upto).calls.get(call_id)

        first = port.found(responses=["msg_1"], upto=newest).responses["msg_1"]
        assert first.ended == "completed" and first.digest
        # Nothing was settled before the first snapshot.
        assert not port.found(responses=["msg_1"], activities=["srvtoolu_1"], upto=EVERY - 1)
        answered_at = {
            e.call_id: e.originator_version
            for e in store.service.events(cid)
            if isinstance(e, ToolCallResponded)
        }
        assert len(answered_at) == 30
        for call_id in ("toolu_1", "toolu_15", "toolu_30"):
            # Unknown until the first snapshot at or after its answer, answered from then on.
            seen = [call(call_id, upto) for upto in range(1, newest + 1)]
            unknown = seen.index(True) if True in seen else len(seen)
            assert seen == [None] * unknown + [True] * (newest - unknown)
            settled = unknown < newest
            assert settled is (answered_at[call_id] <= newest)
            assert not settled or unknown + 1 >= answered_at[call_id]  # never before its answer
        # One call answers for many ids of every kind; ids never settled are left out.
        many = port.found(
            responses=["msg_1", "msg_2", "msg_nowhere"],
            calls=["toolu_1", "toolu_nowhere"],
            activities=["srvtoolu_1", "srvtoolu_2"],
            upto=newest,
        )
        assert set(many.responses) == {"msg_1", "msg_2"}
        assert many.calls == {"toolu_1": True}
        assert {a: (s.name, s.state) for a, s in many.activities.items()} == {
            "srvtoolu_1": ("web_search", "completed"),
            "srvtoolu_2": ("web_search", "completed"),
        }


def test_recording_a_batch_asks_the_store_once(
    grown: tuple[str, ConversationId], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`record_all` asks for every id its drafts name in one query, and an answer is
    remembered: recording a response with a call and an activity reads the table once."""
    url, cid = grown
    with open_store(url, snapshot_every=EVERY, cache_size=0) as store:
        recorder = store.repository.recorder
        asked: list[list[str]] = []
        select = recorder.select_settled

        def spy(originator_id: object, keys: list[str], upto: int) -> dict[str, bytes]:
            asked.append(list(keys))
            return select(originator_id, keys, upto)  # type: ignore[arg-type]

        monkeypatch.setattr(recorder, "select_settled", spy)
        store.service.add_user_input(cid, [UserMessage(blocks=("one more",))])
        store.service.append(cid, list(_response(77)))
        assert asked == [["rmsg_77", "ctoolu_77", "asrvtoolu_77"]]


def test_a_snapshot_an_older_version_wrote_is_passed_over(
    grown: tuple[str, ConversationId],
) -> None:
    """A tag-4 snapshot (every item in its state, as convstore wrote them before settled
    items) is not read: the conversation is folded from its events, and the next snapshot
    is a settled one whose rows answer for everything the old state held."""
    url, cid = grown
    with open_store(url, snapshot_every=EVERY, cache_size=0) as store:
        events = list(store.service.events(cid))
        full = Conversation.replay(cid, events)
        old = bytearray(encode_snapshot(full.state))
        assert old[:2] == b"\x95\x05"  # a 5-element array whose first element is the tag
        old[1] = 4
        recorder = store.repository.recorder
        key: Any = cid.bytes if isinstance(parse_location(url), SQLiteLocation) else cid
        with _sql(url) as run:
            run(
                "UPDATE snapshots SET version = ?, state = ? WHERE originator_id = ?",
                (full.version, bytes(old), key),
            )
        assert decode_snapshot(bytes(old)) is None
        loaded = store.repository.load(cid)
        assert loaded == full and loaded.state.settled_at == 0
        # The next save that takes a snapshot settles everything the state held.
        for n in range(100, 100 + EVERY):
            _turn(store, cid, n)
        snapshot = recorder.select_snapshot(cid)
        assert snapshot is not None and snapshot.version > full.version
        kept = decode_snapshot(snapshot.state)
        assert kept is not None and kept.settled_at == snapshot.version
        port = StoreSettled(recorder, cid)
        found = port.found(
            responses=list(full.state.responses),
            calls=list(full.state.calls),
            activities=list(full.state.activities),
            upto=snapshot.version,
        )
        assert (found.responses, found.calls, found.activities) == (
            full.state.responses,
            full.state.calls,
            full.state.activities,
        )
        assert store.repository.load(cid) == Conversation.replay(cid, store.service.events(cid))
