"""A conversation's state: what its invariants need, and what a snapshot keeps of it.

The state holds only what the invariants need (open turn and response, tool calls,
activity states, response digests, the chain head, counters, the current title and
labels, which a metadata change is checked against), never message text. `settle` gives
a snapshot the state without its closed items, which the store keeps (`domain.settled`).
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from convstore.domain import errors
from convstore.domain.settled import ActivityState, SettledItems, StoredResponse
from convstore.domain.vocabulary import TERMINAL, ResponseId, TurnId, Writer


class OpenResponse(msgspec.Struct, frozen=True, kw_only=True):
    """The response whose events are being recorded."""

    response_id: ResponseId
    provider: str
    started_at: float
    """POSIX time of its ResponseStarted."""
    writer: Writer | None = None
    attempt: int = 1
    """Above 1, it records again a response cut short: its calls and activities may carry
    the ids that copy recorded (`domain.copies` checked that it extends that copy)."""


class ConversationState(msgspec.Struct, kw_only=True):
    """Everything the invariants need; snapshots encode exactly this."""

    head: str = ""
    """The hash of the newest event: the chain head."""
    open_turn: TurnId | None = None
    open_response: OpenResponse | None = None
    responses: dict[str, StoredResponse] = {}
    """Response id → its newest attempt, for idempotent re-ingestion."""
    calls: dict[str, bool] = {}
    """Client tool call id → answered."""
    activities: dict[str, ActivityState] = {}
    settled_at: int = 0
    """The version at which the three maps above last let their closed items go to the
    store (`settle`), which answers for them through the `Settled` port; 0 while they
    hold every item the conversation recorded."""
    counts: dict[str, int] = {}
    """Events recorded, by event type."""
    created_on: datetime | None = None
    modified_on: datetime | None = None
    title: str = ""
    """The current title: its Started's, or its newest Retitled's."""
    labels: tuple[str, ...] = ()
    """The current labels, in the order they were put on, each once."""
    forgotten_on: datetime | None = None
    """When it was forgotten (its Forgotten event): nothing may follow."""


def copy_state(state: ConversationState) -> ConversationState:
    """A copy that no apply to either side changes in the other.

    The appliers assign the state's fields and set keys of its four dicts, never change a
    value in place (OpenResponse and ActivityState are frozen; the rest are str, bool,
    int, datetime): new dicts sharing the values are enough, far cheaper than a deep copy.
    """
    return msgspec.structs.replace(
        state,
        responses=state.responses.copy(),
        calls=state.calls.copy(),
        activities=state.activities.copy(),
        counts=state.counts.copy(),
    )


def settle(state: ConversationState, version: int) -> tuple[ConversationState, SettledItems]:
    """The state as a snapshot taken at `version` keeps it, and the closed items it lets go
    to the store (`domain.settled`): every response but the open one, answered calls,
    activities that ended. What stays is what is open, so a snapshot's size follows the
    open items, not the conversation's length."""
    kept_state = kept(state)
    kept_state.settled_at = version
    open_response = state.open_response
    return kept_state, SettledItems(
        responses={
            rid: stored
            for rid, stored in state.responses.items()
            if open_response is None or rid != open_response.response_id
        },
        calls={call: True for call, answered in state.calls.items() if answered},
        activities={a: s for a, s in state.activities.items() if s.state in TERMINAL},
    )


def kept(state: ConversationState) -> ConversationState:
    """The state without its closed items (what `settle` keeps), `settled_at` 0: two
    conversations that recorded the same events keep the same."""
    open_response = state.open_response
    return msgspec.structs.replace(
        state,
        responses={}
        if open_response is None
        else {
            rid: stored
            for rid, stored in state.responses.items()
            if rid == open_response.response_id
        },
        calls={call: False for call, answered in state.calls.items() if not answered},
        activities={a: s for a, s in state.activities.items() if s.state not in TERMINAL},
        counts=state.counts.copy(),
        settled_at=0,
    )


def forked(state: ConversationState) -> ConversationState:
    """The state a fork starts from: its parent's at the fork point (open turn, calls,
    activities, responses, counts), as a chain of its own. Its parent's responses are
    marked as stored in an ancestor (`StoredResponse.version` 0). `state` holds every
    item (`settled_at` 0): it is folded from the parent's events."""
    if state.settled_at:
        raise errors.InvariantViolation("a fork starts from a state folded from its events")
    return msgspec.structs.replace(
        copy_state(state),
        head="",
        created_on=None,
        modified_on=None,
        responses={
            rid: msgspec.structs.replace(stored, version=0)
            for rid, stored in state.responses.items()
        },
    )
