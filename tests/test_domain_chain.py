"""The per-conversation hash chain: links, verification from stored bytes, tamper evidence,
and payload bytes that survive encoding byte-for-byte."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convstore.domain import (
    ActivityId,
    AssistantText,
    Attribution,
    CallId,
    Conversation,
    ConversationEvent,
    Event,
    HostedActivity,
    ProviderPayload,
    Reasoning,
    RequestSettings,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    Source,
    TextRange,
    ToolCallRequested,
    ToolCallResponded,
    TurnEnded,
    TurnId,
    TurnStarted,
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.chain import (
    as_sealed,
    canonical_from_stored,
    digest,
    seal,
    verify_stored,
)
from tests.strategies import TRICKY_JSON_DOCUMENTS, conversations, json_documents

Stored = list[tuple[int, bytes]]
_decode_event = msgspec.json.Decoder(ConversationEvent).decode


def store(events: Sequence[Event]) -> Stored:
    """Events as a store keeps them: msgspec JSON, hash fields included, by version."""
    return [(e.originator_version, msgspec.json.encode(e)) for e in events]


def load(stored: Stored) -> list[Any]:
    return [_decode_event(state) for _, state in stored]


def small_conversation() -> Conversation:
    """Every kind of event, with multi-byte text and a payload, in a few hundred bytes each."""
    r, c, a = ResponseId("msg_1"), CallId("toolu_1"), ActivityId("srvtoolu_1")
    conversation = Conversation.start("chain é", ["t"])
    conversation.record_all(
        [
            TurnStarted(turn_id=TurnId("t1")),
            UserMessage(blocks=("Wetter in Köln? 😀",)),
            ResponseStarted(response_id=r, provider="anthropic", model="claude"),
            Reasoning(response_id=r, text="hm", payload=ProviderPayload.of("x", "s", b'"sig="')),
            HostedActivity(activity_id=a, name="web_search", state="started", response_id=r,
                           input={"query": "köln"}),
            HostedActivity(activity_id=a, name="web_search", state="completed", response_id=r),
            AssistantText(response_id=r, text="Sonnig 中文",
                          attributions=(Attribution(source=Source(kind="web", url="https://w.de"),
                                                    range=TextRange(0, 6)),)),
            ToolCallRequested(response_id=r, call_id=c, name="f", arguments={"x": 1.5}),
            ResponseEnded(response_id=r, state="completed", finish_reason="tool_use"),
            ToolCallResponded(call_id=c, content="ok"),
            TurnEnded(turn_id=TurnId("t1")),
        ]
    )  # fmt: skip
    return conversation


# --- links ----------------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(conversations())
def test_every_event_links_to_its_predecessor(conversation: Conversation) -> None:
    events = conversation.collect_events()
    assert events[0].prev_hash == ""
    for before, after in itertools.pairwise(events):
        assert after.prev_hash == before.hash
    for event in events:
        assert len(event.hash) == 64
        assert event == seal(event, event.prev_hash)[0]  # the hash is a function of the content
    assert conversation.state.head == events[-1].hash
    assert len({e.hash for e in events}) == len(events)


@settings(max_examples=30, deadline=None)
@given(conversations())
def test_the_one_encoding_sealing_makes_is_the_stored_record(conversation: Conversation) -> None:
    """What sealing encoded once is what a store keeps: it decodes to the event, verifies
    on its own bytes, and holds the canonical encoding of a fresh encode of the event."""
    encoded, events = conversation.encoded, conversation.collect_events()
    assert len(encoded) == len(events) and conversation.encoded == ()
    for event, state in zip(events, encoded, strict=True):
        assert _decode_event(state) == event
        canonical, prev_hash, own_hash = canonical_from_stored(state)
        assert as_sealed(state) == (canonical, prev_hash, own_hash)  # read by position
        assert (prev_hash, own_hash) == (event.prev_hash, event.hash)
        assert canonical_from_stored(msgspec.json.encode(event))[0] == canonical
        assert digest(prev_hash, canonical) == own_hash
    stored = [(e.originator_version, s) for e, s in zip(events, encoded, strict=True)]
    assert verify_stored(stored) == []
    # The same events with their fields in another order (not as `seal` lays them out)
    # verify all the same, field by field; field order is not part of the chain.
    reordered = [(e.originator_version, msgspec.json.encode(e)) for e in events]
    assert verify_stored(reordered) == []


@settings(max_examples=30, deadline=None)
@given(conversations())
def test_stored_events_verify_and_decode_back_equal(conversation: Conversation) -> None:
    events = conversation.collect_events()
    stored = store(events)
    assert verify_stored(stored) == []
    for (_, state), event in zip(stored, events, strict=True):
        canonical, prev_hash, own_hash = canonical_from_stored(state)
        assert (prev_hash, own_hash) == (event.prev_hash, event.hash)
        assert digest(prev_hash, canonical) == own_hash
    decoded = load(stored)
    assert decoded == events
    assert store(decoded) == stored  # decoding and re-encoding is stable
    assert Conversation.replay(conversation.id, decoded) == conversation


def test_a_suffix_verifies_from_an_anchor() -> None:
    stored = store(small_conversation().collect_events())
    anchor = msgspec.json.decode(stored[4][1])["hash"]
    assert verify_stored(stored[5:], first_prev=anchor) == []
    assert verify_stored(stored[5:]) != []  # without the anchor it does not follow ""


# --- tampering ------------------------------------------------------------------------------------


def _flipped(stored: Stored, index: int, position: int, mask: int) -> Stored:
    version, state = stored[index]
    changed = bytearray(state)
    changed[position] ^= mask
    return [*stored[:index], (version, bytes(changed)), *stored[index + 1 :]]


def test_flipping_any_single_byte_is_detected_exhaustively() -> None:
    stored = store(small_conversation().collect_events())
    assert verify_stored(stored) == []
    checked = 0
    for index, (version, state) in enumerate(stored):
        for position in range(len(state)):
            for mask in (0x01, 0x20, 0x80):
                breaks = verify_stored(_flipped(stored, index, position, mask))
                assert breaks, (version, position, mask, state[position : position + 1])
                assert version in {b.version for b in breaks}
                checked += 1
    assert checked > 10_000


@settings(max_examples=150, deadline=None)
@given(conversations(max_turns=2), st.data())
def test_flipping_a_chosen_byte_is_detected(
    conversation: Conversation, data: st.DataObject
) -> None:
    stored = store(conversation.collect_events())
    index = data.draw(st.integers(0, len(stored) - 1), label="event")
    version, state = stored[index]
    position = data.draw(st.integers(0, len(state) - 1), label="byte")
    mask = data.draw(st.integers(1, 255), label="xor")
    breaks = verify_stored(_flipped(stored, index, position, mask))
    assert version in {b.version for b in breaks}


def test_bytes_that_stop_being_json_are_reported() -> None:
    stored = store(small_conversation().collect_events())
    for broken in (b"", b"{", b"[]", b"null", stored[3][1][:-1], stored[3][1] + b"x"):
        tampered = [*stored[:3], (stored[3][0], broken), *stored[4:]]
        breaks = verify_stored(tampered)
        assert stored[3][0] in {b.version for b in breaks}
        assert stored[4][0] in {b.version for b in breaks}  # its successor no longer follows


@pytest.mark.parametrize(("i", "j"), [(0, 1), (3, 4), (2, 9), (1, 11)])
def test_swapping_two_events_is_detected(i: int, j: int) -> None:
    stored = store(small_conversation().collect_events())
    # the bytes change places, each keeping its slot's version ...
    swapped = list(stored)
    swapped[i] = (stored[i][0], stored[j][1])
    swapped[j] = (stored[j][0], stored[i][1])
    assert {stored[i][0], stored[j][0]} <= {b.version for b in verify_stored(swapped)}
    # ... or whole records move
    moved = list(stored)
    moved[i], moved[j] = moved[j], moved[i]
    assert verify_stored(moved)


@pytest.mark.parametrize("index", [1, 5, 10])
def test_deleting_a_middle_event_is_detected(index: int) -> None:
    stored = store(small_conversation().collect_events())
    breaks = verify_stored([*stored[:index], *stored[index + 1 :]])
    problems = {b.problem for b in breaks if b.version == stored[index + 1][0]}
    assert any("missing" in p for p in problems)
    assert any("does not follow" in p for p in problems)


def test_truncating_the_newest_events_needs_an_anchor() -> None:
    """Documented limit: removal at the end is invisible without a head recorded elsewhere."""
    conversation = small_conversation()
    stored = store(conversation.collect_events())
    anchor = conversation.state.head
    truncated = stored[:-2]
    assert verify_stored(truncated) == []
    assert msgspec.json.decode(truncated[-1][1])["hash"] != anchor


def test_replacing_an_event_with_a_resealed_forgery_breaks_the_successor() -> None:
    events = small_conversation().collect_events()
    forged, _ = seal(msgspec.structs.replace(events[3], model="forged"), events[3].prev_hash)
    stored = store([*events[:3], forged, *events[4:]])
    breaks = verify_stored(stored)
    assert [b.version for b in breaks] == [events[4].originator_version]


# --- payload bytes survive encoding --------------------------------------------------------------

MEGABYTE_VALUE = (
    b'{"encrypted_content":"'
    + b"QUJD" * 250_000
    + b'","text":"'
    + "é中😀\\u00e9".encode() * 1000
    + b'","n":123456789012345678901234567890}'
)


def _with_payloads(raw: bytes) -> tuple[Conversation, list[ProviderPayload]]:
    """Every place a payload sits, all holding `raw`."""
    p = ProviderPayload.of("anthropic", "content_block", raw, version="v1", binding={"model": "m"})
    r, c, a = ResponseId("msg_p"), CallId("toolu_p"), ActivityId("srvtoolu_p")
    conversation = Conversation.start("payloads")
    conversation.record_all(
        [
            ResponseStarted(response_id=r, provider="x", settings=RequestSettings(native=p)),
            AssistantText(response_id=r, text="x", payload=p,
                          attributions=(Attribution(source=Source(kind="web"), replay=p),)),
            Reasoning(response_id=r, payload=p),
            ToolCallRequested(response_id=r, call_id=c, name="f", payload=p),
            HostedActivity(activity_id=a, name="web_search", state="started", response_id=r,
                           payload=p),
            UnknownArtifact(payload=p, response_id=r),
            ResponseEnded(response_id=r, state="completed"),
            ToolCallResponded(call_id=c, payload=p),
        ]
    )  # fmt: skip
    return conversation, [p] * 8


def _payloads_of(event: Any) -> list[ProviderPayload]:
    found: list[ProviderPayload] = []
    if getattr(event, "payload", None) is not None:
        found.append(event.payload)
    if isinstance(event, AssistantText):
        found.extend(at.replay for at in event.attributions if at.replay is not None)
    if isinstance(event, ResponseStarted) and event.settings.native is not None:
        found.append(event.settings.native)
    return found


def _assert_payloads_survive(raw: bytes) -> None:
    conversation, expected = _with_payloads(raw)
    events = conversation.collect_events()
    stored = store(events)
    assert verify_stored(stored) == []
    decoded = load(stored)
    kept = [p for event in decoded for p in _payloads_of(event)]
    assert len(kept) == len(expected)
    for p in kept:
        assert p.raw == raw
        assert (p.provider, p.format, p.version, p.binding) == (
            "anthropic",
            "content_block",
            "v1",
            {"model": "m"},
        )
    assert decoded == events
    assert store(decoded) == stored
    assert verify_stored(store(decoded)) == []
    for event, (_, state) in zip(decoded, stored, strict=True):
        if _payloads_of(event):
            assert raw in state  # embedded verbatim, not re-encoded


@pytest.mark.parametrize("raw", TRICKY_JSON_DOCUMENTS, ids=lambda b: repr(b[:24]))
def test_tricky_payload_spellings_survive_byte_identical(raw: bytes) -> None:
    _assert_payloads_survive(raw)


def test_specific_spellings_survive_byte_identical() -> None:
    for raw in (
        b'{"b":1,"a":2}',
        b'"\\u00e9"',
        b"123456789012345678901234567890",
        b"1.0e10",
        b"-0.0",
        b"1E+2",
    ):
        _assert_payloads_survive(raw)


def test_a_megabyte_payload_survives_byte_identical() -> None:
    assert len(MEGABYTE_VALUE) > 1_000_000
    _assert_payloads_survive(MEGABYTE_VALUE)


@settings(max_examples=60, deadline=None)
@given(json_documents())
def test_any_payload_document_survives_byte_identical(raw: bytes) -> None:
    _assert_payloads_survive(raw)
