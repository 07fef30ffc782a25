"""The Conversation aggregate: records drafts as events, each checked as it is applied.

Its state (`domain.state`) holds only what the invariants need, never message text, so
snapshots stay small and every reading of content folds events through a projection;
each event kind's check and fold is in `domain.appliers`. It satisfies eventsourcing's
mutable-aggregate protocol (`id`, `version`, `created_on`, `modified_on`,
`collect_events`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Generic, NamedTuple, TypeVar
from uuid import UUID, uuid4

import msgspec

from convstore.domain import chain, errors
from convstore.domain.appliers import APPLY, check_payloads
from convstore.domain.events import Event, Started
from convstore.domain.lookup import Lookup, activity, call, response
from convstore.domain.sealing import Cipher
from convstore.domain.settled import ActivityState, Settled, StoredResponse
from convstore.domain.state import ConversationState, copy_state, forked, kept
from convstore.domain.vocabulary import ActivityId, CallId, ConversationId, TurnId

__all__ = ["Conversation", "Sealed", "new_conversation_id", "parse_conversation_id"]

E = TypeVar("E", bound=Event)


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
        self.cipher: Cipher | None = None
        """The conversation's cipher on an encrypting store (`domain.sealing`): events
        recorded from now on are sealed with it. The service hands it in."""

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
        *,
        cipher: Cipher | None = None,
    ) -> Conversation:
        """A new conversation with its Started event recorded (sealed with `cipher`)."""
        conversation = cls(conversation_id or ConversationId(uuid4()))
        conversation.cipher = cipher
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
        conversation_id: ConversationId | None = None,
        cipher: Cipher | None = None,
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
        conversation = cls(conversation_id or new_conversation_id(), state=forked(state))
        conversation.cipher = cipher
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
        check_payloads(draft)
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
            self.cipher,
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
        if self.state.forgotten_on is not None:
            raise errors.ConversationForgotten(
                f"conversation {self._id} was forgotten on "
                f"{self.state.forgotten_on:%Y-%m-%d}: nothing can be recorded in it",
                conversation_id=self._id,
                on=self.state.forgotten_on,
            )
        if self._version == 0 and not isinstance(event, Started):
            raise errors.InvariantViolation("a conversation's first event must be Started")
        APPLY[type(event)](self.state, event, self._lookup)
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
        return response(self.state, response_id, self._lookup)

    def call_answered(self, call_id: str) -> bool | None:
        """Whether client tool call `call_id` has a result; None when it was never
        requested here."""
        return call(self.state, call_id, self._lookup)

    def activity(self, activity_id: str) -> ActivityState | None:
        """Hosted activity `activity_id`'s state, if it was recorded here."""
        return activity(self.state, activity_id, self._lookup)

    def pending_activities(self) -> dict[ActivityId, ActivityState]:
        """Hosted activities still `started`."""
        return {ActivityId(a): s for a, s in self.state.activities.items() if s.state == "started"}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Conversation):
            return NotImplemented
        return (self._id, self._version, kept(self.state)) == (
            other._id,
            other._version,
            kept(other.state),
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Conversation(id={self._id}, version={self._version})"


_STATE_ENCODER = msgspec.msgpack.Encoder()
_STATE_DECODER = msgspec.msgpack.Decoder(ConversationState)


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
