"""How the aggregate reaches the items a settled state let go (`domain.settled`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from convstore.domain.events import (
    Event,
    HostedActivity,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
)
from convstore.domain.settled import ActivityState, Settled, StoredResponse
from convstore.domain.state import ConversationState

_Kind = Literal["responses", "calls", "activities"]


class Lookup:
    """How the appliers reach the items a settled state let go: through `settled`, the
    store's port, remembering each answer (what was settled at or before a version never
    changes). A fold of stored events (`folding`, in `Conversation.replay`) asks only where
    the state it builds depends on the answer: the log's events passed every check when
    they were recorded, so a check alone is not repeated against the store."""

    __slots__ = ("_known", "_known_at", "folding", "settled")

    def __init__(self, settled: Settled | None) -> None:
        self.settled = settled
        self.folding = False
        self._known: dict[tuple[_Kind, str], Any] = {}
        self._known_at = 0

    def item(self, state: ConversationState, kind: _Kind, item_id: str, *, check_only: bool) -> Any:
        """Item `item_id` of `kind` as the state holds it, or else as the store settled it;
        None when neither has it, or when only a check a fold skips would ask the store."""
        held = getattr(state, kind).get(item_id)
        if held is not None or not state.settled_at or (check_only and self.folding):
            return held
        known = self._answers(state)
        key = (kind, item_id)
        if key not in known:
            self._ask(state, {kind: [item_id]})
        return known[key]

    def prefetch(self, state: ConversationState, drafts: Sequence[Event]) -> None:
        """Ask in one call for every id the drafts name that neither the state nor an
        earlier answer holds, so recording them asks the store no more."""
        if not state.settled_at:
            return
        known = self._answers(state)
        wanted: dict[_Kind, list[str]] = {"responses": [], "calls": [], "activities": []}
        for draft in drafts:
            named = _named(draft)
            if named is not None:
                kind, item_id = named
                ids = wanted[kind]  # a call may be requested, then answered, in one batch
                fresh = item_id not in getattr(state, kind) and (kind, item_id) not in known
                if fresh and item_id not in ids:
                    ids.append(item_id)
        if any(wanted.values()):
            self._ask(state, wanted)

    def _answers(self, state: ConversationState) -> dict[tuple[_Kind, str], Any]:
        if self._known_at != state.settled_at:
            self._known.clear()
            self._known_at = state.settled_at
        return self._known

    def _ask(self, state: ConversationState, wanted: dict[_Kind, list[str]]) -> None:
        if self.settled is None:
            raise RuntimeError("a settled state needs the Settled port of the store it came from")
        found = self.settled.found(**wanted, upto=state.settled_at)
        for kind, ids in wanted.items():
            values = getattr(found, kind)
            for item_id in ids:
                self._known[kind, item_id] = values.get(item_id)


def _named(draft: Event) -> tuple[_Kind, str] | None:
    """The settled item a draft names, if any."""
    if isinstance(draft, ResponseStarted):
        return "responses", draft.response_id
    if isinstance(draft, ToolCallRequested | ToolCallResponded):
        return "calls", draft.call_id
    if isinstance(draft, HostedActivity):
        return "activities", draft.activity_id
    return None


def response(
    state: ConversationState, response_id: str, lookup: Lookup, *, check_only: bool = False
) -> StoredResponse | None:
    found: StoredResponse | None = lookup.item(
        state, "responses", response_id, check_only=check_only
    )
    return found


def call(
    state: ConversationState, call_id: str, lookup: Lookup, *, check_only: bool = False
) -> bool | None:
    answered: bool | None = lookup.item(state, "calls", call_id, check_only=check_only)
    return answered


def activity(
    state: ConversationState, activity_id: str, lookup: Lookup, *, check_only: bool = False
) -> ActivityState | None:
    found: ActivityState | None = lookup.item(
        state, "activities", activity_id, check_only=check_only
    )
    return found
