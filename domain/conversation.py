"""The Conversation aggregate: the invariants, checked where each event is applied.

The aggregate's state holds only what its invariants need (open turn and response, tool
calls, activity states, response digests, the chain head, counters, the current title
and labels, which a metadata change is checked against), never message text, so
snapshots stay small and every reading of content folds events through a projection.
It satisfies eventsourcing's mutable-aggregate protocol (`id`, `version`, `created_on`,
`modified_on`, `collect_events`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Generic, Literal, NamedTuple, TypeVar
from uuid import UUID, uuid4

import msgspec

from convstore.domain import chain, errors, metadata
from convstore.domain.events import (
    AssistantText,
    ContextInjected,
    Event,
    HostedActivity,
    Reasoning,
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
from convstore.domain.settled import ActivityState, Settled, SettledItems, StoredResponse
from convstore.domain.vocabulary import (
    TERMINAL,
    ActivityId,
    CallId,
    ConversationId,
    ProviderPayload,
    ResponseId,
    TurnId,
    Writer,
    check_payload,
)

E = TypeVar("E", bound=Event)


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


def _now() -> datetime:
    return datetime.now(UTC)


class Sealed(NamedTuple, Generic[E]):
    """A draft stamped and sealed as a conversation's next event, and its stored encoding."""

    event: E
    encoded: bytes


class Conversation:
    """One conversation: records drafts as events, enforcing every invariant."""

    def __init__(
        self,
        conversation_id: ConversationId,
        *,
        state: ConversationState | None = None,
        version: int = 0,
        settled: Settled | None = None,
    ) -> None:
        self._id = conversation_id
        self._version = version
        self.state = state if state is not None else ConversationState()
        self._lookup = Lookup(settled)
        self._pending: list[Event] = []
        self._encoded: list[bytes] = []
        self.clock: Callable[[], datetime] = _now

    # --- eventsourcing's aggregate protocol -------------------------------------------------

    @property
    def id(self) -> ConversationId:
        """The conversation's id."""
        return self._id

    @property
    def version(self) -> int:
        """The version of the newest event applied (0 before any)."""
        return self._version

    @version.setter
    def version(self, value: int) -> None:
        self._version = value

    @property
    def created_on(self) -> datetime | None:
        """When the conversation started."""
        return self.state.created_on

    @property
    def modified_on(self) -> datetime | None:
        """When the newest event was recorded."""
        return self.state.modified_on

    def collect_events(self) -> list[Event]:
        """Take the events recorded since the last collection (eventsourcing's protocol)."""
        pending, self._pending, self._encoded = self._pending, [], []
        return pending

    @property
    def pending(self) -> tuple[Event, ...]:
        """Recorded events not collected yet."""
        return tuple(self._pending)

    @property
    def encoded(self) -> tuple[bytes, ...]:
        """The stored encoding of each pending event, as sealing made it (`chain.seal`):
        what a repository writes, without encoding the events again."""
        return tuple(self._encoded)

    # --- commands ---------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        title: str = "",
        labels: Iterable[str] = (),
        conversation_id: ConversationId | None = None,
    ) -> Conversation:
        """A new conversation with its Started event recorded."""
        conversation = cls(conversation_id or ConversationId(uuid4()))
        conversation.record(Started(title=title, labels=tuple(labels)))
        return conversation

    @classmethod
    def fork(
        cls,
        state: ConversationState,
        *,
        parent: ConversationId,
        at: int,
        title: str = "",
        labels: Iterable[str] = (),
    ) -> Conversation:
        """A new conversation going on from version `at` of `parent`, whose state there is
        `state`; its Started records where from. Raises InvariantViolation while a
        response is open at that version."""
        open_response = state.open_response
        if open_response is not None:
            raise errors.InvariantViolation(
                f"version {at} of conversation {parent} is inside response "
                f"{open_response.response_id!r}: fork at a version outside a response"
            )
        conversation = cls(new_conversation_id(), state=forked(state))
        conversation.record(
            Started(title=title, labels=tuple(labels), forked_from=parent, forked_at=at)
        )
        return conversation

    def record(self, draft: E) -> E:
        """Stamp, seal and apply a draft; raises an InvariantViolation and changes nothing."""
        return self.record_sealed(self.seal(draft))

    def seal(self, draft: E, *, max_bytes: int | None = None) -> Sealed[E]:
        """The draft stamped as the next event and sealed, not applied yet (nothing
        changes): `record_sealed` applies it, as long as nothing was recorded meanwhile.
        Raises EventTooLarge when its stored encoding is over `max_bytes`."""
        _check_payloads(draft)
        event, encoded = chain.seal(
            msgspec.structs.replace(
                draft,
                originator_id=self._id,
                originator_version=self._version + 1,
                timestamp=self.clock(),
                prev_hash="",
                hash="",
            ),
            self.state.head,
        )
        if max_bytes is not None and len(encoded) > max_bytes:
            raise errors.EventTooLarge(
                f"a {type(draft).__name__} of {len(encoded)} bytes exceeds "
                f"limits.max_event_bytes = {max_bytes}"
            )
        return Sealed(event, encoded)

    def record_sealed(self, sealed: Sealed[E]) -> E:
        """Apply a sealed event (`seal`); raises an InvariantViolation and changes
        nothing, also when another event was recorded since it was sealed."""
        self.apply(sealed.event)
        self._pending.append(sealed.event)
        self._encoded.append(sealed.encoded)
        return sealed.event

    def record_all(self, drafts: Iterable[Event]) -> list[Event]:
        """Record drafts in order; on a violation nothing of the batch stays applied."""
        # A shallow copy is enough to roll back: the appliers replace values, never mutate
        # them in place. (A deep copy costs ~0.3 ms per thousand events of history.)
        snapshot = self._state_copy()
        version, pending = self._version, len(self._pending)
        drafts = list(drafts)
        self._lookup.prefetch(self.state, drafts)
        try:
            return [self.record(draft) for draft in drafts]
        except BaseException:  # a violation, or a draft that cannot even be encoded
            self.state, self._version = snapshot, version
            del self._pending[pending:], self._encoded[pending:]
            raise

    # --- replay -----------------------------------------------------------------------------

    @classmethod
    def replay(
        cls,
        conversation_id: ConversationId,
        events: Iterable[Event],
        *,
        state: ConversationState | None = None,
        version: int = 0,
        settled: Settled | None = None,
    ) -> Conversation:
        """Fold stored events (after an optional snapshot) into an aggregate."""
        conversation = cls(conversation_id, state=state, version=version, settled=settled)
        apply = conversation.apply
        lookup = conversation._lookup
        lookup.folding = True
        try:
            for event in events:
                apply(event)
        finally:
            lookup.folding = False
        return conversation

    def apply(self, event: Event) -> None:
        """Check that `event` may follow, then fold it into the state."""
        if event.originator_version != self._version + 1:
            raise errors.InvariantViolation(
                f"event version {event.originator_version} does not follow {self._version}"
            )
        if event.prev_hash != self.state.head:
            raise errors.IntegrityError(
                f"event {event.originator_version} does not follow the chain head"
            )
        if self._version == 0 and not isinstance(event, Started):
            raise errors.InvariantViolation("a conversation's first event must be Started")
        _APPLY[type(event)](self.state, event, self._lookup)
        state = self.state
        name = type(event).__name__
        state.counts[name] = state.counts.get(name, 0) + 1
        state.head = event.hash
        state.modified_on = event.timestamp
        self._version = event.originator_version

    def snapshot_state(self) -> ConversationState:
        """A deep copy of the state, for snapshots and rollback."""
        return _STATE_DECODER.decode(_STATE_ENCODER.encode(self.state))

    def _state_copy(self) -> ConversationState:
        """A copy of the state sharing its immutable values: its containers are new."""
        return copy_state(self.state)

    # --- queries ----------------------------------------------------------------------------

    def next_turn_id(self) -> TurnId:
        """A fresh turn id: `turn-N` for the conversation's N-th turn."""
        return TurnId(f"turn-{self.state.counts.get('TurnStarted', 0) + 1}")

    def open_calls(self) -> list[CallId]:
        """Client tool calls without a response, oldest first."""
        return [CallId(call) for call, answered in self.state.calls.items() if not answered]

    def stored_response(self, response_id: str) -> StoredResponse | None:
        """The newest attempt of response `response_id` recorded here, if any."""
        return _response(self.state, response_id, self._lookup)

    def call_answered(self, call_id: str) -> bool | None:
        """Whether client tool call `call_id` has a result; None when it was never
        requested here."""
        return _call(self.state, call_id, self._lookup)

    def activity(self, activity_id: str) -> ActivityState | None:
        """Hosted activity `activity_id`'s state, if it was recorded here."""
        return _activity(self.state, activity_id, self._lookup)

    def pending_activities(self) -> dict[ActivityId, ActivityState]:
        """Hosted activities still `started`."""
        return {ActivityId(a): s for a, s in self.state.activities.items() if s.state == "started"}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Conversation):
            return NotImplemented
        return (self._id, self._version, _kept(self.state)) == (
            other._id,
            other._version,
            _kept(other.state),
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Conversation(id={self._id}, version={self._version})"


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
    kept = _kept(state)
    kept.settled_at = version
    open_response = state.open_response
    return kept, SettledItems(
        responses={
            rid: stored
            for rid, stored in state.responses.items()
            if open_response is None or rid != open_response.response_id
        },
        calls={call: True for call, answered in state.calls.items() if answered},
        activities={a: s for a, s in state.activities.items() if s.state in TERMINAL},
    )


def _kept(state: ConversationState) -> ConversationState:
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


def _response(
    state: ConversationState, response_id: str, lookup: Lookup, *, check_only: bool = False
) -> StoredResponse | None:
    found: StoredResponse | None = lookup.item(
        state, "responses", response_id, check_only=check_only
    )
    return found


def _call(
    state: ConversationState, call_id: str, lookup: Lookup, *, check_only: bool = False
) -> bool | None:
    answered: bool | None = lookup.item(state, "calls", call_id, check_only=check_only)
    return answered


def _activity(
    state: ConversationState, activity_id: str, lookup: Lookup, *, check_only: bool = False
) -> ActivityState | None:
    found: ActivityState | None = lookup.item(
        state, "activities", activity_id, check_only=check_only
    )
    return found


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


_STATE_ENCODER = msgspec.msgpack.Encoder()
_STATE_DECODER = msgspec.msgpack.Decoder(ConversationState)


# --- the checks, next to the events they guard -----------------------------------------------


def _check_payloads(event: Event) -> None:
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
    known = _response(state, event.response_id, lookup, check_only=True)
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
    answered = _call(state, event.call_id, lookup, check_only=not _again(state))
    if answered is not None:
        if _again(state):
            return  # requested again by the copy completing the one cut short
        raise errors.DuplicateId(f"tool call {event.call_id!r} was already requested")
    state.calls[event.call_id] = False


def _tool_call_responded(
    state: ConversationState, event: ToolCallResponded, lookup: Lookup
) -> None:
    _no_open_response(state, f"a result for tool call {event.call_id!r}")
    answered = _call(state, event.call_id, lookup, check_only=True)
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
    known = _activity(state, event.activity_id, lookup, check_only=True)
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


def _unknown_artifact(state: ConversationState, event: UnknownArtifact, lookup: Lookup) -> None:
    if event.response_id is not None:
        _inside_response(state, event.response_id, "UnknownArtifact")


_APPLY: dict[type[Event], Callable[[ConversationState, Any, Lookup], None]] = {
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
}


def new_conversation_id() -> ConversationId:
    """A fresh random conversation id."""
    return ConversationId(uuid4())


def parse_conversation_id(text: str) -> ConversationId:
    """A conversation id from its printed form; raises ConversationNotFound if malformed."""
    try:
        return ConversationId(UUID(text.strip()))
    except ValueError:
        raise errors.ConversationNotFound(
            f"{text!r} is not a conversation id (expected a UUID such as "
            "'0b8f6c1e-...'; `convstore list` shows them)"
        ) from None
