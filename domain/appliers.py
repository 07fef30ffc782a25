"""The checks and folds of each event kind into a conversation's state (`APPLY`).

Each applier checks that its event may follow, then folds it in; the checks live next to
the events they guard. An applier that needs an item the state let go asks the store
through the `Lookup` (`domain.lookup`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from convstore.domain import errors, metadata
from convstore.domain.events import (
    AssistantText,
    ContextInjected,
    Event,
    Forgotten,
    HostedActivity,
    Reasoning,
    Redacted,
    Relabelled,
    ResponseEnded,
    ResponseStarted,
    Retitled,
    Started,
    ToolCallRequested,
    ToolCallResponded,
    TurnEnded,
    TurnStarted,
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.lookup import Lookup, activity, call, response
from convstore.domain.settled import ActivityState, StoredResponse
from convstore.domain.state import ConversationState, OpenResponse
from convstore.domain.vocabulary import TERMINAL, ProviderPayload, ResponseId, check_payload


def check_payloads(event: Event) -> None:
    payload: ProviderPayload | None = getattr(event, "payload", None)
    if payload is not None:
        check_payload(payload)
    if isinstance(event, AssistantText):
        for attribution in event.attributions:
            if attribution.replay is not None:
                check_payload(attribution.replay)
    elif isinstance(event, ResponseStarted) and event.settings.native is not None:
        check_payload(event.settings.native)


def _no_open_response(state: ConversationState, what: str) -> None:
    if state.open_response is not None:
        raise errors.ResponseStillOpen(
            f"{what} while response {state.open_response.response_id!r} is still open; "
            "its writer may still be writing it: wait for it to end (the next write closes it "
            "once its writer is gone), or close it with `convstore repair` (`--force` while "
            "its writer is alive)"
        )


def _inside_response(state: ConversationState, response_id: ResponseId | None, what: str) -> None:
    open_response = state.open_response
    if open_response is None:
        raise errors.ResponseNotOpen(
            f"{what} for response {response_id!r}, but no response is open"
        )
    if response_id != open_response.response_id:
        raise errors.ResponseNotOpen(
            f"{what} for response {response_id!r}, but the open response is "
            f"{open_response.response_id!r}"
        )


def _started(state: ConversationState, event: Started, lookup: Lookup) -> None:
    if state.created_on is not None:
        raise errors.InvariantViolation("a conversation is started only once")
    state.created_on = event.timestamp
    state.title = event.title
    state.labels = tuple(dict.fromkeys(event.labels))


def _retitled(state: ConversationState, event: Retitled, lookup: Lookup) -> None:
    _no_open_response(state, "a new title")
    if metadata.title(event.title) != event.title:
        raise errors.InvalidMetadata(f"the title {event.title!r} is not trimmed")
    if event.title == state.title:
        raise errors.InvalidMetadata("a Retitled must change the title; it is already that")
    state.title = event.title


def _relabelled(state: ConversationState, event: Relabelled, lookup: Lookup) -> None:
    _no_open_response(state, "a label change")
    added, removed = metadata.label_change(state.labels, event.added, event.removed)
    if (added, removed) != (event.added, event.removed) or not (added or removed):
        raise errors.InvalidMetadata(
            "a Relabelled must change the labels: add only labels the conversation lacks "
            f"(it has {list(state.labels)}), remove only labels it has, each once"
        )
    state.labels = metadata.relabelled(state.labels, added, removed)


def _turn_started(state: ConversationState, event: TurnStarted, lookup: Lookup) -> None:
    if state.open_turn is not None:
        raise errors.TurnStateError(
            f"turn {event.turn_id!r} cannot start inside open turn {state.open_turn!r}"
        )
    _no_open_response(state, "a turn start")
    state.open_turn = event.turn_id


def _turn_ended(state: ConversationState, event: TurnEnded, lookup: Lookup) -> None:
    if state.open_turn != event.turn_id:
        raise errors.TurnStateError(
            f"turn {event.turn_id!r} is not the open turn ({state.open_turn!r})"
        )
    _no_open_response(state, "a turn end")
    state.open_turn = None


def _user_side(
    state: ConversationState, event: UserMessage | ContextInjected, lookup: Lookup
) -> None:
    _no_open_response(state, type(event).__name__)


def _response_started(state: ConversationState, event: ResponseStarted, lookup: Lookup) -> None:
    _no_open_response(state, f"response {event.response_id!r}")
    # The new entry does not depend on the old one: looked up only to check the attempt.
    known = response(state, event.response_id, lookup, check_only=True)
    if known is None and event.attempt != 1:
        raise errors.InvariantViolation(
            f"attempt {event.attempt} of response {event.response_id!r}, which has no attempt 1"
        )
    if known is not None and (event.attempt != known.attempt + 1 or not known.cut):
        raise errors.DuplicateId(
            f"response {event.response_id!r} is already recorded (attempt {known.attempt}"
            f"{', cut short' if known.cut else ', whole'}): only the next attempt of a copy "
            "cut short may follow"
        )
    state.open_response = OpenResponse(
        response_id=event.response_id,
        provider=event.provider,
        started_at=event.timestamp.timestamp(),
        writer=event.writer,
        attempt=event.attempt,
    )
    state.responses[event.response_id] = StoredResponse(
        attempt=event.attempt, version=event.originator_version
    )


def _response_ended(state: ConversationState, event: ResponseEnded, lookup: Lookup) -> None:
    _inside_response(state, event.response_id, "ResponseEnded")
    state.open_response = None
    started = state.responses[event.response_id]
    state.responses[event.response_id] = StoredResponse(
        attempt=started.attempt,
        version=started.version,
        digest=event.digest,
        ended=event.state,
    )


def _assistant_text(state: ConversationState, event: AssistantText, lookup: Lookup) -> None:
    _inside_response(state, event.response_id, "AssistantText")
    length = len(event.text)
    for attribution in event.attributions:
        span = attribution.range
        if span is not None and not 0 <= span.start <= span.end <= length:
            raise errors.RangeOutOfBounds(
                f"range [{span.start}, {span.end}) lies outside the text of {length} code points"
            )


def _reasoning(state: ConversationState, event: Reasoning, lookup: Lookup) -> None:
    _inside_response(state, event.response_id, "Reasoning")


def _tool_call_requested(
    state: ConversationState, event: ToolCallRequested, lookup: Lookup
) -> None:
    _inside_response(state, event.response_id, "ToolCallRequested")
    # A later attempt's copy of a call keeps its answer: that much a fold must know.
    answered = call(state, event.call_id, lookup, check_only=not _again(state))
    if answered is not None:
        if _again(state):
            return  # requested again by the copy completing the one cut short
        raise errors.DuplicateId(f"tool call {event.call_id!r} was already requested")
    state.calls[event.call_id] = False


def _tool_call_responded(
    state: ConversationState, event: ToolCallResponded, lookup: Lookup
) -> None:
    _no_open_response(state, f"a result for tool call {event.call_id!r}")
    answered = call(state, event.call_id, lookup, check_only=True)
    if answered is None:
        raise errors.UnknownToolCall(f"no tool call {event.call_id!r} was requested")
    if answered:
        raise errors.ToolCallAlreadyAnswered(f"tool call {event.call_id!r} already has a response")
    state.calls[event.call_id] = True


def _hosted_activity(state: ConversationState, event: HostedActivity, lookup: Lookup) -> None:
    if event.response_id is not None:
        _inside_response(state, event.response_id, "HostedActivity")
    elif event.state != "abandoned":
        raise errors.ResponseNotOpen(
            f"activity {event.activity_id!r}: only an abandonment is recorded outside a response"
        )
    # A settled activity has ended: a valid log starts it again (a later attempt) or not at
    # all, and either way the entry is new, so a fold need not ask.
    known = activity(state, event.activity_id, lookup, check_only=True)
    if known is not None and event.state == "started" and _again(state):
        known = None  # started again by the copy completing the one cut short
    if known is None:
        if event.state == "abandoned" and event.response_id is None:
            raise errors.InvalidTransition(f"activity {event.activity_id!r} was never started")
        provider = state.open_response.provider if state.open_response else ""
        state.activities[event.activity_id] = ActivityState(
            name=event.name, state=event.state, provider=provider
        )
        return
    if known.name != event.name:
        raise errors.InvalidTransition(
            f"activity {event.activity_id!r} is {known.name!r}; it cannot become {event.name!r}"
        )
    if known.state in TERMINAL:
        raise errors.InvalidTransition(
            f"activity {event.activity_id!r} already ended {known.state!r}; "
            f"it cannot become {event.state!r}"
        )
    if event.state not in TERMINAL:
        raise errors.InvalidTransition(f"activity {event.activity_id!r} is already started")
    # Replaced, not mutated: `record_all` rolls back with a shallow copy of the state.
    state.activities[event.activity_id] = ActivityState(
        name=known.name, state=event.state, provider=known.provider
    )


def _again(state: ConversationState) -> bool:
    """Whether the open response is a later attempt (see `OpenResponse.attempt`)."""
    return state.open_response is not None and state.open_response.attempt > 1


def _forgotten(state: ConversationState, event: Forgotten, lookup: Lookup) -> None:
    _no_open_response(state, "forgetting the conversation")
    state.forgotten_on = event.timestamp


def _redacted(state: ConversationState, event: Redacted, lookup: Lookup) -> None:
    # That the event holds the text is checked where it is read (`domain.redaction.draft`).
    _no_open_response(state, "a redaction")
    if not 1 <= event.event_version < event.originator_version:
        raise errors.InvalidRedaction(
            f"a redaction of event {event.event_version} at version {event.originator_version}:"
            " only an earlier event of the conversation can be redacted"
        )


def _unknown_artifact(state: ConversationState, event: UnknownArtifact, lookup: Lookup) -> None:
    if event.response_id is not None:
        _inside_response(state, event.response_id, "UnknownArtifact")


APPLY: dict[type[Event], Callable[[ConversationState, Any, Lookup], None]] = {
    Started: _started,
    TurnStarted: _turn_started,
    TurnEnded: _turn_ended,
    UserMessage: _user_side,
    ContextInjected: _user_side,
    ResponseStarted: _response_started,
    ResponseEnded: _response_ended,
    AssistantText: _assistant_text,
    Reasoning: _reasoning,
    ToolCallRequested: _tool_call_requested,
    ToolCallResponded: _tool_call_responded,
    HostedActivity: _hosted_activity,
    UnknownArtifact: _unknown_artifact,
    Retitled: _retitled,
    Relabelled: _relabelled,
    Forgotten: _forgotten,
    Redacted: _redacted,
}
