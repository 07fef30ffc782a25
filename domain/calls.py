"""Client tool calls a conversation has not answered yet.

A client tool call (`ToolCallRequested`) is work this system must dispatch: the provider
refuses the next request until every call it made has a result (`ToolCallResponded`).
`unanswered_calls` lists the calls of a conversation's reading that have none, oldest
first, so that `replay --dry-run` and `ask --conversation` can say so before a request
is sent, and `convstore answer` (`ConversationService.answer`) or `convstore repair` can
record the missing results. Hosted activities are never among them: the provider ran
those, and they take no result from us.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from convstore.domain.attempts import reading
from convstore.domain.conversation import Conversation
from convstore.domain.errors import ToolCallAlreadyAnswered, UnknownToolCall
from convstore.domain.events import Event, ToolCallRequested, ToolCallResponded
from convstore.domain.vocabulary import CallId, ResponseId

__all__ = ["UnansweredCall", "check_answerable", "unanswered_calls"]


class UnansweredCall(msgspec.Struct, frozen=True, kw_only=True):
    """A client tool call without a result."""

    call_id: CallId
    name: str
    """The tool the call names."""
    version: int
    """The `originator_version` of its ToolCallRequested (of the conversation's reading)."""
    response_id: ResponseId
    """The response that made the call."""


def unanswered_calls(events: Iterable[Event]) -> list[UnansweredCall]:
    """The client tool calls of `events` (a conversation's history, in order) that no
    ToolCallResponded answers, oldest first. Each response is read from its newest
    attempt, as every reading is (`domain.attempts`)."""
    read = reading(events)
    answered = {e.call_id for e in read if isinstance(e, ToolCallResponded)}
    calls: dict[CallId, UnansweredCall] = {}
    for event in read:
        if isinstance(event, ToolCallRequested) and event.call_id not in answered:
            calls.setdefault(
                event.call_id,
                UnansweredCall(
                    call_id=event.call_id,
                    name=event.name,
                    version=event.originator_version,
                    response_id=event.response_id,
                ),
            )
    return list(calls.values())


def check_answerable(conversation: Conversation, call_id: str) -> None:
    """Raise, before anything is written, unless `call_id` is a client tool call of
    `conversation` without a result: UnknownToolCall (a hosted activity's id included:
    the provider ran it, it takes no result), ToolCallAlreadyAnswered."""
    answered = conversation.call_answered(call_id)
    if answered is None:
        activity = conversation.activity(call_id)
        if activity is not None:
            raise UnknownToolCall(
                f"{call_id!r} is a hosted activity ({activity.name}), which the "
                "provider ran itself: it takes no result; nothing was written"
            )
        raise UnknownToolCall(
            f"conversation {conversation.id} has no client tool call {call_id!r}; nothing "
            "was written (`convstore replay ID --to PROVIDER --dry-run` lists the calls "
            "without a result)"
        )
    if answered:
        raise ToolCallAlreadyAnswered(
            f"tool call {call_id!r} already has a result; nothing was written"
        )
