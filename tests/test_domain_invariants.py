"""One focused test per invariant of the Conversation aggregate (DESIGN.md, conversation.py).

Each refused command raises its documented typed error and leaves the aggregate exactly
as it was: version, state and pending events compare equal before and after.
"""

from __future__ import annotations

from collections.abc import Callable
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
    ContextInjected,
    Conversation,
    ConversationState,
    Event,
    HostedActivity,
    ProviderPayload,
    Reasoning,
    RequestSettings,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    Source,
    Started,
    TextRange,
    ToolCallRequested,
    ToolCallResponded,
    TurnEnded,
    TurnId,
    TurnStarted,
    UnknownArtifact,
    UserMessage,
    new_conversation_id,
)
from convstore.domain.errors import (
    ConvstoreError,
    DuplicateId,
    IntegrityError,
    InvalidPayload,
    InvalidTransition,
    InvariantViolation,
    RangeOutOfBounds,
    ResponseNotOpen,
    ResponseStillOpen,
    ToolCallAlreadyAnswered,
    TurnStateError,
    UnknownToolCall,
)
from convstore.domain.vocabulary import Lifecycle
from tests.strategies import (
    INVALID_JSON_DOCUMENTS,
    PADDED_JSON_DOCUMENTS,
    TRICKY_JSON_DOCUMENTS,
    conversations,
    drafts,
)

R1 = ResponseId("msg_1")
R2 = ResponseId("msg_2")
T1 = TurnId("turn_1")
C1 = CallId("toolu_1")
A1 = ActivityId("srvtoolu_1")
TEXT = "Grüße, 😀 中文!"  # 12 code points, 21 UTF-8 bytes, 13 UTF-16 units
Snapshot = tuple[int, ConversationState, tuple[Event, ...]]


def snapshot(conversation: Conversation) -> Snapshot:
    return conversation.version, conversation.snapshot_state(), conversation.pending


def assert_refused(
    conversation: Conversation, draft: Event, error: type[InvariantViolation]
) -> InvariantViolation:
    """Recording `draft` raises exactly `error`, and the aggregate is untouched."""
    before = snapshot(conversation)
    with pytest.raises(InvariantViolation) as info:
        conversation.record(draft)
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
    assert str(info.value)  # every refusal says why
    assert snapshot(conversation) == before
    return info.value


def started() -> Conversation:
    return Conversation.start("invariants", ["test"])


def in_response(provider: str = "anthropic") -> Conversation:
    """A conversation inside turn T1 with response R1 open."""
    conversation = started()
    conversation.record_all(
        [
            TurnStarted(turn_id=T1),
            UserMessage(blocks=("hi",)),
            ResponseStarted(response_id=R1, provider=provider, model="m"),
        ]
    )
    return conversation


def after_response(*drafts_inside: Event) -> Conversation:
    """A conversation whose response R1 recorded `drafts_inside` and then ended."""
    conversation = in_response()
    conversation.record_all(
        [*drafts_inside, ResponseEnded(response_id=R1, state="completed", finish_reason="stop")]
    )
    return conversation


def payload(raw: bytes) -> ProviderPayload:
    """A payload built around `of`'s check, as a careless adapter might."""
    return ProviderPayload(provider="anthropic", format="content_block", value=msgspec.Raw(raw))


# --- tool calls -----------------------------------------------------------------------------


def test_tool_response_to_unknown_call_is_refused() -> None:
    conversation = after_response(ToolCallRequested(response_id=R1, call_id=C1, name="f"))
    assert_refused(conversation, ToolCallResponded(call_id=CallId("toolu_nope")), UnknownToolCall)
    conversation.record(ToolCallResponded(call_id=C1, content="ok"))
    assert conversation.open_calls() == []


def test_second_answer_to_a_call_is_refused() -> None:
    conversation = after_response(ToolCallRequested(response_id=R1, call_id=C1, name="f"))
    conversation.record(ToolCallResponded(call_id=C1, content="42"))
    assert_refused(
        conversation, ToolCallResponded(call_id=C1, content="43"), ToolCallAlreadyAnswered
    )
    # a repair is no exception: a synthetic answer to an answered call is refused too
    synthetic = ToolCallResponded(call_id=C1, is_error=True, synthetic=True)
    assert_refused(conversation, synthetic, ToolCallAlreadyAnswered)


def test_duplicate_call_id_is_refused_in_the_same_and_a_later_response() -> None:
    conversation = in_response()
    conversation.record(ToolCallRequested(response_id=R1, call_id=C1, name="f"))
    assert_refused(
        conversation, ToolCallRequested(response_id=R1, call_id=C1, name="g"), DuplicateId
    )
    conversation.record(ResponseEnded(response_id=R1, state="completed"))
    conversation.record(ToolCallResponded(call_id=C1))
    conversation.record(ResponseStarted(response_id=R2, provider="anthropic"))
    assert_refused(
        conversation, ToolCallRequested(response_id=R2, call_id=C1, name="f"), DuplicateId
    )


def test_duplicate_response_id_is_refused() -> None:
    conversation = after_response()
    assert_refused(conversation, ResponseStarted(response_id=R1, provider="openai"), DuplicateId)


# --- hosted activity lifecycle -----------------------------------------------------------------


@pytest.mark.parametrize("terminal", ["completed", "failed", "abandoned"])
@pytest.mark.parametrize("after", ["started", "completed", "failed", "abandoned"])
def test_hosted_transition_after_a_terminal_state_is_refused(terminal: Any, after: Any) -> None:
    conversation = in_response()
    conversation.record(
        HostedActivity(activity_id=A1, name="web_search", state="started", response_id=R1)
    )
    conversation.record(
        HostedActivity(activity_id=A1, name="web_search", state=terminal, response_id=R1)
    )
    late = HostedActivity(activity_id=A1, name="web_search", state=after, response_id=R1)
    error = assert_refused(conversation, late, InvalidTransition)
    assert terminal in str(error)
    if after == "abandoned":  # an explicit abandonment after the end is no different
        explicit = HostedActivity(activity_id=A1, name="web_search", state="abandoned")
        assert_refused(conversation, explicit, InvalidTransition)


def test_hosted_started_twice_is_refused() -> None:
    conversation = in_response()
    conversation.record(
        HostedActivity(activity_id=A1, name="web_search", state="started", response_id=R1)
    )
    again = HostedActivity(activity_id=A1, name="web_search", state="started", response_id=R1)
    assert_refused(conversation, again, InvalidTransition)
    assert list(conversation.pending_activities()) == [A1]


def test_conversation_started_twice_is_refused() -> None:
    conversation = started()
    assert_refused(conversation, Started(title="again"), InvariantViolation)


def test_hosted_activity_cannot_change_its_name() -> None:
    conversation = in_response()
    conversation.record(
        HostedActivity(activity_id=A1, name="web_search", state="started", response_id=R1)
    )
    renamed = HostedActivity(
        activity_id=A1, name="code_execution", state="completed", response_id=R1
    )
    assert_refused(conversation, renamed, InvalidTransition)
    abandoned_renamed = HostedActivity(activity_id=A1, name="web_fetch", state="abandoned")
    assert_refused(conversation, abandoned_renamed, InvalidTransition)


def test_abandoning_an_unknown_activity_is_refused() -> None:
    conversation = after_response()
    ghost = HostedActivity(activity_id=ActivityId("srvtoolu_ghost"), name="x", state="abandoned")
    assert_refused(conversation, ghost, InvalidTransition)


def test_only_an_abandonment_is_recorded_outside_a_response() -> None:
    conversation = after_response(
        HostedActivity(activity_id=A1, name="web_search", state="started", response_id=R1)
    )
    states: tuple[Lifecycle, ...] = ("started", "completed", "failed")
    for state in states:
        outside = HostedActivity(activity_id=A1, name="web_search", state=state)
        assert_refused(conversation, outside, ResponseNotOpen)
    conversation.record(HostedActivity(activity_id=A1, name="web_search", state="abandoned"))
    assert conversation.pending_activities() == {}


def test_google_style_activity_may_begin_completed() -> None:
    conversation = in_response("google")
    grounding = HostedActivity(
        activity_id=ActivityId("msg_1:grounding:0"),
        name="web_search",
        state="completed",
        response_id=R1,
        input={"queries": ["weather berlin"]},
    )
    recorded = conversation.record(grounding)
    assert recorded.state == "completed"
    assert conversation.pending_activities() == {}
    activity = conversation.state.activities["msg_1:grounding:0"]
    assert (activity.name, activity.state, activity.provider) == (
        "web_search",
        "completed",
        "google",
    )
    # ... and, being terminal, it takes no further transition
    states: tuple[Lifecycle, ...] = ("started", "completed", "abandoned")
    for state in states:
        late = msgspec.structs.replace(grounding, state=state)
        assert_refused(conversation, late, InvalidTransition)


def test_activity_may_begin_failed_or_abandoned_inside_a_response() -> None:
    conversation = in_response()
    states: tuple[Lifecycle, ...] = ("failed", "abandoned")
    for n, state in enumerate(states):
        conversation.record(
            HostedActivity(
                activity_id=ActivityId(f"a{n}"), name="web_search", state=state, response_id=R1
            )
        )
    assert conversation.pending_activities() == {}


# --- ranges ------------------------------------------------------------------------------------


def test_text_fixture_lengths_differ() -> None:
    assert (len(TEXT), len(TEXT.encode()), len(TEXT.encode("utf-16-le")) // 2) == (12, 21, 13)


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (0, 13),  # one past the code points (the UTF-16 length)
        (0, 21),  # the UTF-8 byte length
        (12, 13),
        (13, 13),
        (-1, 3),
        (5, 4),  # reversed
        (0, 10**9),
    ],
)
def test_range_outside_its_text_is_refused(start: int, end: int) -> None:
    conversation = in_response()
    inside = Attribution(source=Source(kind="web", url="https://a.example"), range=TextRange(0, 3))
    outside = Attribution(source=Source(kind="web"), range=TextRange(start, end))
    draft = AssistantText(response_id=R1, text=TEXT, attributions=(inside, outside))
    error = assert_refused(conversation, draft, RangeOutOfBounds)
    assert "12 code points" in str(error)


@pytest.mark.parametrize(("start", "end"), [(0, 12), (7, 8), (11, 12), (12, 12), (0, 0)])
def test_range_inside_its_text_in_code_points_is_kept(start: int, end: int) -> None:
    conversation = in_response()
    cited = Attribution(source=Source(kind="document"), range=TextRange(start, end))
    event = conversation.record(AssistantText(response_id=R1, text=TEXT, attributions=(cited,)))
    span = event.attributions[0].range
    assert span is not None
    assert TEXT[span.start : span.end] == TEXT[start:end]
    assert TEXT[7:8] == "😀"


# --- response bracketing -------------------------------------------------------------------------


def _response_drafts(response_id: ResponseId) -> list[Event]:
    return [
        AssistantText(response_id=response_id, text="x"),
        Reasoning(response_id=response_id, text="hmm"),
        ToolCallRequested(response_id=response_id, call_id=CallId("toolu_x"), name="f"),
        HostedActivity(
            activity_id=ActivityId("srvtoolu_x"),
            name="web_search",
            state="started",
            response_id=response_id,
        ),
        UnknownArtifact(
            payload=ProviderPayload.of("anthropic", "x", b"{}"), response_id=response_id
        ),
        ResponseEnded(response_id=response_id, state="completed"),
    ]


@pytest.mark.parametrize("index", range(6), ids=lambda i: type(_response_drafts(R1)[i]).__name__)
def test_response_event_outside_any_response_is_refused(index: int) -> None:
    draft = _response_drafts(R1)[index]
    assert_refused(started(), draft, ResponseNotOpen)
    error = assert_refused(after_response(), draft, ResponseNotOpen)
    assert "no response is open" in str(error)


@pytest.mark.parametrize("index", range(6), ids=lambda i: type(_response_drafts(R1)[i]).__name__)
def test_response_event_naming_another_response_is_refused(index: int) -> None:
    conversation = in_response()
    error = assert_refused(conversation, _response_drafts(R2)[index], ResponseNotOpen)
    assert "msg_1" in str(error)
    conversation.record(_response_drafts(R1)[index])  # the right id is accepted


def test_response_ended_without_an_open_response_is_refused() -> None:
    conversation = after_response()
    assert_refused(conversation, ResponseEnded(response_id=R1, state="completed"), ResponseNotOpen)
    assert_refused(started(), ResponseEnded(response_id=R1, state="abandoned"), ResponseNotOpen)


def test_unknown_artifact_without_a_response_id_is_allowed_anywhere() -> None:
    conversation = started()
    artifact = UnknownArtifact(payload=ProviderPayload.of("openai", "output_item", b'{"a":1}'))
    conversation.record(artifact)
    conversation.record(ResponseStarted(response_id=R1, provider="openai"))
    conversation.record(artifact)
    assert conversation.version == 4


@pytest.mark.parametrize(
    "draft",
    [
        UserMessage(blocks=("more",)),
        ContextInjected(source="steering", text="be brief"),
        ToolCallResponded(call_id=C1, content="early"),
        ResponseStarted(response_id=R2, provider="anthropic"),
        TurnEnded(turn_id=T1),
    ],
    ids=lambda d: type(d).__name__,
)
def test_user_side_event_while_a_response_is_open_is_refused(draft: Event) -> None:
    conversation = in_response()
    conversation.record(ToolCallRequested(response_id=R1, call_id=C1, name="f"))
    error = assert_refused(conversation, draft, ResponseStillOpen)
    assert "msg_1" in str(error)


def test_turn_start_while_a_response_is_open_outside_a_turn_is_refused() -> None:
    conversation = started()
    conversation.record(ResponseStarted(response_id=R1, provider="anthropic"))
    assert_refused(conversation, TurnStarted(turn_id=T1), ResponseStillOpen)


# --- turns -------------------------------------------------------------------------------------


def test_turn_cannot_start_inside_an_open_turn() -> None:
    conversation = started()
    conversation.record(TurnStarted(turn_id=T1))
    assert_refused(conversation, TurnStarted(turn_id=TurnId("turn_2")), TurnStateError)
    assert_refused(conversation, TurnStarted(turn_id=T1), TurnStateError)


def test_turn_cannot_end_without_starting() -> None:
    conversation = started()
    assert_refused(conversation, TurnEnded(turn_id=T1), TurnStateError)
    conversation.record_all([TurnStarted(turn_id=T1), TurnEnded(turn_id=T1)])
    assert_refused(conversation, TurnEnded(turn_id=T1), TurnStateError)


def test_turn_end_must_name_the_open_turn() -> None:
    conversation = started()
    conversation.record(TurnStarted(turn_id=T1))
    assert_refused(conversation, TurnEnded(turn_id=TurnId("turn_other")), TurnStateError)
    conversation.record(TurnEnded(turn_id=T1, state="failed", reason="interrupted"))
    assert conversation.state.open_turn is None


# --- the first event -----------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(drafts().filter(lambda d: not isinstance(d, Started)))
def test_first_event_must_be_started(draft: Event) -> None:
    conversation = Conversation(new_conversation_id())
    before = snapshot(conversation)
    with pytest.raises(InvariantViolation) as info:
        conversation.record(draft)
    # an invalid payload is reported first; otherwise the first-event rule
    assert type(info.value) in {InvariantViolation, InvalidPayload}
    assert snapshot(conversation) == before
    assert conversation.created_on is None


def test_replay_refuses_a_log_not_starting_with_started() -> None:
    source = in_response()
    events = source.collect_events()
    with pytest.raises(InvariantViolation):
        Conversation.replay(source.id, events[1:])  # versions do not start at 1
    renumbered = [msgspec.structs.replace(events[1], originator_version=1, prev_hash="")]
    with pytest.raises(InvariantViolation, match="first event must be Started"):
        Conversation.replay(source.id, renumbered)


def test_replay_refuses_events_off_the_chain() -> None:
    source = in_response()
    events = source.collect_events()
    forged = [events[0], msgspec.structs.replace(events[1], prev_hash="0" * 64)]
    with pytest.raises(IntegrityError):
        Conversation.replay(source.id, forged)
    assert Conversation.replay(source.id, events) == source


# --- batches -------------------------------------------------------------------------------


def test_record_all_rolls_back_the_whole_batch_when_its_third_draft_is_invalid() -> None:
    conversation = in_response()
    conversation.record(AssistantText(response_id=R1, text="before"))
    before = snapshot(conversation)
    batch: list[Event] = [
        ToolCallRequested(response_id=R1, call_id=C1, name="f"),
        HostedActivity(activity_id=A1, name="web_search", state="started", response_id=R1),
        ToolCallRequested(response_id=R1, call_id=C1, name="again"),  # duplicate id
        ResponseEnded(response_id=R1, state="completed"),
    ]
    with pytest.raises(DuplicateId):
        conversation.record_all(batch)
    assert snapshot(conversation) == before
    assert conversation.open_calls() == []
    assert conversation.pending_activities() == {}
    # the valid part alone is then accepted, numbered as if the failed batch never was
    recorded = conversation.record_all([batch[0], batch[1], batch[3]])
    assert [e.originator_version for e in recorded] == [
        before[0] + 1,
        before[0] + 2,
        before[0] + 3,
    ]
    assert recorded[0].prev_hash == before[1].head


def test_record_all_rolls_back_when_a_draft_cannot_be_encoded() -> None:
    conversation = in_response()
    before = snapshot(conversation)
    batch: list[Event] = [
        AssistantText(response_id=R1, text="one"),
        AssistantText(response_id=R1, text="two"),
        ToolCallRequested(response_id=R1, call_id=C1, name="f", arguments={"x": object()}),
    ]
    with pytest.raises(TypeError):
        conversation.record_all(batch)
    assert snapshot(conversation) == before


@settings(max_examples=25, deadline=None)
@given(conversations(max_turns=2), st.data())
def test_a_refused_batch_leaves_any_conversation_unchanged(
    conversation: Conversation, data: st.DataObject
) -> None:
    valid = data.draw(st.lists(drafts(), max_size=3))
    before = snapshot(conversation)
    batch = [*valid, Started(title="never twice")]  # always refused, at the end of the batch
    with pytest.raises(InvariantViolation):
        conversation.record_all(batch)
    assert snapshot(conversation) == before


# --- payload bytes ---------------------------------------------------------------------------


@pytest.mark.parametrize("raw", INVALID_JSON_DOCUMENTS, ids=lambda b: repr(b[:16]))
def test_invalid_payload_bytes_are_refused_by_of(raw: bytes) -> None:
    with pytest.raises(InvalidPayload) as info:
        ProviderPayload.of("anthropic", "content_block", raw)
    assert "payload" in str(info.value)


PAYLOAD_SITES: dict[str, Callable[[ProviderPayload], Event]] = {
    "AssistantText.payload": lambda p: AssistantText(response_id=R1, text="t", payload=p),
    "Attribution.replay": lambda p: AssistantText(
        response_id=R1, text="t", attributions=(Attribution(source=Source(kind="web"), replay=p),)
    ),
    "Reasoning.payload": lambda p: Reasoning(response_id=R1, payload=p),
    "ToolCallRequested.payload": lambda p: ToolCallRequested(
        response_id=R1, call_id=CallId("toolu_p"), name="f", payload=p
    ),
    "HostedActivity.payload": lambda p: HostedActivity(
        activity_id=A1, name="web_search", state="started", response_id=R1, payload=p
    ),
    "UnknownArtifact.payload": lambda p: UnknownArtifact(payload=p, response_id=R1),
    "ToolCallResponded.payload": lambda p: ToolCallResponded(call_id=C1, payload=p),
    "ResponseStarted.settings.native": lambda p: ResponseStarted(
        response_id=R2, provider="anthropic", settings=RequestSettings(native=p)
    ),
}


@pytest.mark.parametrize("site", PAYLOAD_SITES)
@pytest.mark.parametrize(
    "raw", INVALID_JSON_DOCUMENTS + PADDED_JSON_DOCUMENTS, ids=lambda b: repr(b[:16])
)
def test_invalid_payload_bytes_are_refused_wherever_they_sit(site: str, raw: bytes) -> None:
    # Payloads are checked before anything else: a ToolCallResponded or ResponseStarted
    # inside the open response would be refused for that too, but InvalidPayload comes
    # first. Deep nesting is InvalidPayload too, never a RecursionError.
    conversation = in_response()
    draft = PAYLOAD_SITES[site](payload(raw))
    error = assert_refused(conversation, draft, InvalidPayload)
    assert isinstance(error, ConvstoreError)


@pytest.mark.parametrize("raw", PADDED_JSON_DOCUMENTS, ids=repr)
def test_of_strips_whitespace_around_a_document_and_keeps_the_inside(raw: bytes) -> None:
    wrapped = ProviderPayload.of("google", "part", raw)
    assert wrapped.raw == raw.strip(b" \t\r\n")
    conversation = in_response()
    event = conversation.record(UnknownArtifact(payload=wrapped, response_id=R1))
    assert event.payload.raw == wrapped.raw


@pytest.mark.parametrize("raw", TRICKY_JSON_DOCUMENTS, ids=lambda b: repr(b[:16]))
def test_valid_payload_bytes_are_kept_as_given(raw: bytes) -> None:
    conversation = in_response()
    for site, build in PAYLOAD_SITES.items():
        if site.startswith(("ResponseStarted", "ToolCallResponded", "HostedActivity")):
            continue  # they need another place in the conversation: see the chain tests
        event = conversation.record(build(payload(raw)))
        if site == "Attribution.replay":
            assert isinstance(event, AssistantText)
            kept = event.attributions[0].replay
        else:
            kept = getattr(event, "payload", None)
        assert kept is not None
        assert kept.raw == raw


def test_the_checked_payloads_map_forgets_the_dead_and_keeps_the_living() -> None:
    """`of` marks a payload checked by a weak reference; the map is swept of payloads that
    died, so it stays the size of the living ones, and a living one stays checked."""
    import gc

    from convstore.domain.vocabulary import _CHECKED

    kept = [ProviderPayload.of("openai", "output_item", b'{"kept":%d}' % i) for i in range(10)]
    for i in range(20_000):  # made and dropped at once, as a decoder's are once recorded
        ProviderPayload.of("openai", "output_item", b'{"n":%d}' % i)
    gc.collect()
    live = sum(ref() is not None for ref in _CHECKED.refs.values())
    assert len(_CHECKED.refs) <= max(1024, 2 * live) + 1  # not the 20,000 made
    assert all(_CHECKED.has(p) for p in kept)
    # A payload built without `of` is not marked: its bytes are checked when recorded.
    assert not _CHECKED.has(payload(b'{"never":"checked"}'))
