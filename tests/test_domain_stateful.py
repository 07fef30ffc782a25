"""Random command sequences against the Conversation aggregate and an independent model.

`ConversationMachine` records drafts of every kind, valid and invalid, and checks each
against `Model`: plain sets and dicts written here from DESIGN.md's rules, sharing no code
with `conversation.py`. A command the model refuses must raise exactly the predicted
`InvariantViolation` subclass and leave the aggregate unchanged; an accepted one advances
the version by one per event. After every step: the aggregate equals a replay of the
stored events, the stored bytes verify, and the version counts the events.

Persistence is a hook. After each accepted command the machine hands the aggregate to
`Backend.persist_and_reload` and carries on with what comes back; the default
`InMemoryBackend` keeps msgspec-encoded events and replays them. A storage-backed run
subclasses the machine and overrides `make_backend`, e.g.::

    from tests.test_domain_stateful import SETTINGS, ConversationMachine

    class StoreBackend:
        def __init__(self, url: str) -> None:
            self.store = open_store(url)
        def persist_and_reload(self, conversation: Conversation) -> Conversation:
            self.store.repository.save(conversation)
            return self.store.repository.load(conversation.id)
        def stored_events(self, conversation_id):
            return list(self.store.repository.events(conversation_id))
        def stored_records(self, conversation_id):
            ...  # (version, stored bytes) as the recorder holds them
        def close(self) -> None: ...

    class SQLiteMachine(ConversationMachine):
        def make_backend(self) -> Backend:
            return StoreBackend(f"sqlite:///{tmp_path}/s.db")

    TestSQLiteMachine = SQLiteMachine.TestCase
    TestSQLiteMachine.settings = SETTINGS
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

import msgspec
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from convstore.domain import (
    EVENT_TYPES,
    ActivityId,
    AssistantText,
    Attribution,
    CallId,
    ContextInjected,
    Conversation,
    ConversationEvent,
    ConversationId,
    ConversationState,
    Event,
    Forgotten,
    HostedActivity,
    ProviderPayload,
    Reasoning,
    Redacted,
    Relabelled,
    RequestSettings,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    Retitled,
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
)
from convstore.domain.chain import verify_stored
from convstore.domain.errors import (
    DuplicateId,
    InvalidMetadata,
    InvalidPayload,
    InvalidRedaction,
    InvalidTransition,
    InvariantViolation,
    RangeOutOfBounds,
    ResponseNotOpen,
    ResponseStillOpen,
    ToolCallAlreadyAnswered,
    TurnStateError,
    UnknownToolCall,
)
from convstore.domain.vocabulary import Lifecycle, TurnTrigger
from tests.strategies import (
    ACTIVITY_NAMES,
    END_STATES,
    FINISH_REASONS,
    INVALID_JSON_DOCUMENTS,
    PADDED_JSON_DOCUMENTS,
    PROVIDERS,
    provider_payloads,
    texts,
    writers,
)

T = TypeVar("T")
Refusal = type[InvariantViolation]

# --- persistence hook ---------------------------------------------------------------------------


class Backend(Protocol):
    """Where the machine keeps a conversation's events between commands."""

    def persist_and_reload(self, conversation: Conversation) -> Conversation:
        """Store the aggregate's collected events; return the aggregate as loaded back."""
        ...

    def stored_events(self, conversation_id: ConversationId) -> list[Event]:
        """Every stored event of the conversation, in version order."""
        ...

    def stored_records(self, conversation_id: ConversationId) -> list[tuple[int, bytes]]:
        """(version, stored bytes) of every event, for `chain.verify_stored`."""
        ...

    def close(self) -> None: ...


_decode = msgspec.json.Decoder(ConversationEvent).decode


class InMemoryBackend:
    """Events kept as msgspec JSON in a list; loading replays them."""

    def __init__(self) -> None:
        self.records: dict[ConversationId, list[bytes]] = {}

    def persist_and_reload(self, conversation: Conversation) -> Conversation:
        records = self.records.setdefault(conversation.id, [])
        for event in conversation.collect_events():
            assert event.originator_version == len(records) + 1
            records.append(msgspec.json.encode(event))
        return Conversation.replay(conversation.id, self.stored_events(conversation.id))

    def stored_events(self, conversation_id: ConversationId) -> list[Event]:
        return [_decode(record) for record in self.records.get(conversation_id, [])]

    def stored_records(self, conversation_id: ConversationId) -> list[tuple[int, bytes]]:
        return list(enumerate(self.records.get(conversation_id, []), start=1))

    def close(self) -> None:
        self.records.clear()


# --- the independent model ------------------------------------------------------------------------

BAD_PAYLOAD_BYTES: frozenset[bytes] = frozenset(INVALID_JSON_DOCUMENTS + PADDED_JSON_DOCUMENTS)
TERMINAL_STATES = {"completed", "failed", "abandoned"}


def payloads_in(draft: Event) -> list[ProviderPayload]:
    found: list[ProviderPayload] = []
    own = getattr(draft, "payload", None)
    if own is not None:
        found.append(own)
    for attribution in getattr(draft, "attributions", ()):
        if attribution.replay is not None:
            found.append(attribution.replay)
    settings_ = getattr(draft, "settings", None)
    if settings_ is not None and settings_.native is not None:
        found.append(settings_.native)
    return found


def code_points(text: str) -> int:
    return len(text.encode("utf-32-le")) // 4


@dataclass
class Model:
    """What DESIGN.md's invariants predict, kept in plain collections."""

    events: int = 0
    turn: str | None = None
    response: str | None = None
    responses: set[str] = field(default_factory=set)
    calls: dict[str, bool] = field(default_factory=dict)
    """Client call id → answered."""
    activities: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Activity id → (name, state)."""
    title: str = ""
    labels: set[str] = field(default_factory=set)

    def open_calls(self) -> list[str]:
        return [call for call, answered in self.calls.items() if not answered]

    def pending_activities(self) -> dict[str, str]:
        return {a: name for a, (name, state) in self.activities.items() if state == "started"}

    def refusal(self, draft: Event) -> Refusal | None:
        """The error recording `draft` must raise now, or None if it is accepted."""
        if any(p.raw in BAD_PAYLOAD_BYTES for p in payloads_in(draft)):
            return InvalidPayload
        if isinstance(draft, Started):
            return None if self.events == 0 else InvariantViolation
        if self.events == 0:
            return InvariantViolation
        if isinstance(draft, TurnStarted):
            if self.turn is not None:
                return TurnStateError
            return ResponseStillOpen if self.response is not None else None
        if isinstance(draft, TurnEnded):
            if self.turn != draft.turn_id:
                return TurnStateError
            return ResponseStillOpen if self.response is not None else None
        if isinstance(draft, UserMessage | ContextInjected):
            return ResponseStillOpen if self.response is not None else None
        if isinstance(draft, ResponseStarted):
            if self.response is not None:
                return ResponseStillOpen
            return DuplicateId if draft.response_id in self.responses else None
        if isinstance(draft, ResponseEnded | Reasoning):
            return None if self.response == draft.response_id else ResponseNotOpen
        if isinstance(draft, AssistantText):
            if self.response != draft.response_id:
                return ResponseNotOpen
            n = code_points(draft.text)
            spans = [a.range for a in draft.attributions if a.range is not None]
            inside = all(s.start >= 0 and s.start <= s.end and s.end <= n for s in spans)
            return None if inside else RangeOutOfBounds
        if isinstance(draft, ToolCallRequested):
            if self.response != draft.response_id:
                return ResponseNotOpen
            return DuplicateId if draft.call_id in self.calls else None
        if isinstance(draft, ToolCallResponded):
            if self.response is not None:
                return ResponseStillOpen
            if draft.call_id not in self.calls:
                return UnknownToolCall
            return ToolCallAlreadyAnswered if self.calls[draft.call_id] else None
        if isinstance(draft, HostedActivity):
            return self._activity_refusal(draft)
        if isinstance(draft, Retitled | Relabelled):
            return ResponseStillOpen if self.response is not None else self._metadata(draft)
        if isinstance(draft, Redacted):  # its text is checked by the service (test_redact)
            if self.response is not None:
                return ResponseStillOpen
            return None if 1 <= draft.event_version <= self.events else InvalidRedaction
        if isinstance(draft, UnknownArtifact):
            if draft.response_id is None:
                return None
            return None if self.response == draft.response_id else ResponseNotOpen
        raise AssertionError(f"no rule for {type(draft).__name__}")

    def _metadata(self, draft: Retitled | Relabelled) -> Refusal | None:
        """A title is trimmed, one line, new; a change of labels adds valid labels it
        lacks and removes labels it has, each once, and changes something."""
        if isinstance(draft, Retitled):
            title = draft.title
            one_line = title == title.strip() and title.isprintable() and len(title) <= 500
            return None if one_line and title != self.title else InvalidMetadata
        added, removed = draft.added, draft.removed
        words = all(name and name.isprintable() and " " not in name for name in added + removed)
        once = len(set(added)) == len(added) and len(set(removed)) == len(removed)
        real = not set(added) & self.labels and set(removed) <= self.labels
        changes = bool(added or removed) and not set(added) & set(removed)
        return None if words and once and real and changes else InvalidMetadata

    def _activity_refusal(self, draft: HostedActivity) -> Refusal | None:
        explicit_abandonment = draft.response_id is None
        if explicit_abandonment:
            if draft.state != "abandoned":
                return ResponseNotOpen
        elif self.response != draft.response_id:
            return ResponseNotOpen
        if draft.activity_id not in self.activities:
            return InvalidTransition if explicit_abandonment else None  # may begin terminal
        name, state = self.activities[draft.activity_id]
        if name != draft.name or state in TERMINAL_STATES or draft.state == "started":
            return InvalidTransition
        return None

    def advance(self, draft: Event) -> None:
        """Fold an accepted draft in."""
        self.events += 1
        if isinstance(draft, TurnStarted):
            self.turn = draft.turn_id
        elif isinstance(draft, TurnEnded):
            self.turn = None
        elif isinstance(draft, ResponseStarted):
            self.response = draft.response_id
            self.responses.add(draft.response_id)
        elif isinstance(draft, ResponseEnded):
            self.response = None
        elif isinstance(draft, ToolCallRequested):
            self.calls[draft.call_id] = False
        elif isinstance(draft, ToolCallResponded):
            self.calls[draft.call_id] = True
        elif isinstance(draft, HostedActivity):
            self.activities[draft.activity_id] = (draft.name, draft.state)
        elif isinstance(draft, Started):
            self.title, self.labels = draft.title, set(draft.labels)
        elif isinstance(draft, Retitled):
            self.title = draft.title
        elif isinstance(draft, Relabelled):
            self.labels = (self.labels | set(draft.added)) - set(draft.removed)

    def batch_refusal(self, drafts: Sequence[Event]) -> Refusal | None:
        """The first refusal within a batch, recorded in order; None if all are accepted."""
        trial = copy.deepcopy(self)
        for draft in drafts:
            refusal = trial.refusal(draft)
            if refusal is not None:
                return refusal
            trial.advance(draft)
        return None


# --- the machine ---------------------------------------------------------------------------------

OUTCOMES: Counter[str] = Counter()
"""How often each outcome happened (refusal class name, or `accepted:<event>`), for coverage."""

Snapshot = tuple[int, ConversationState, tuple[Event, ...]]
_BAD_PAYLOADS = tuple(
    ProviderPayload(provider="anthropic", format="content_block", value=msgspec.Raw(raw))
    for raw in sorted(BAD_PAYLOAD_BYTES)
    if len(raw) < 1000  # the 100000-deep ones are covered by test_domain_invariants
)
_PAYLOADS = st.none() | provider_payloads()
_TEXTS = texts(max_size=20)
_TRIGGERS: st.SearchStrategy[TurnTrigger] = st.sampled_from(
    ("user", "tool_results", "continuation", "steering")
)


def _weighted(data: st.DataObject, *choices: tuple[int, Sequence[T]]) -> T:
    """Draw from the non-empty option lists, each picked with its weight."""
    pools = [(w, list(options)) for w, options in choices if options]
    pick = data.draw(st.sampled_from([pool for w, pool in pools for _ in range(w)]))
    return data.draw(st.sampled_from(pick))


class ConversationMachine(RuleBasedStateMachine):
    """One conversation driven by random commands, checked against `Model`."""

    def __init__(self) -> None:
        super().__init__()
        self.backend = self.make_backend()
        self.model = Model()
        self.fresh = 0
        conversation = Conversation.start("stateful", ["hypothesis"])
        self.model.advance(Started(title="stateful", labels=("hypothesis",)))
        self.conversation = self.backend.persist_and_reload(conversation)

    def make_backend(self) -> Backend:
        """Override to run the same machine against a real store."""
        return InMemoryBackend()

    def teardown(self) -> None:
        self.backend.close()

    # --- executing commands ---------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        c = self.conversation
        return c.version, c.snapshot_state(), c.pending

    def execute(self, drafts: Sequence[Event]) -> bool:
        """Record `drafts` (one, or a batch); check the outcome the model predicts."""
        expected = self.model.batch_refusal(drafts)
        before = self.snapshot()
        head = self.conversation.state.head
        if expected is not None:
            with pytest.raises(InvariantViolation) as info:
                if len(drafts) == 1:
                    self.conversation.record(drafts[0])
                else:
                    self.conversation.record_all(drafts)
            assert type(info.value) is expected, f"expected {expected.__name__}: {info.value!r}"
            assert self.snapshot() == before, "a refused command changed the aggregate"
            OUTCOMES[expected.__name__] += 1
            return False
        if len(drafts) == 1:
            recorded = [self.conversation.record(drafts[0])]
        else:
            recorded = self.conversation.record_all(drafts)
        assert self.conversation.version == before[0] + len(drafts)
        assert [e.originator_version for e in recorded] == [
            before[0] + n for n in range(1, len(drafts) + 1)
        ]
        assert recorded[0].prev_hash == head
        assert self.conversation.pending == before[2] + tuple(recorded)
        for draft in drafts:
            self.model.advance(draft)
            OUTCOMES[f"accepted:{type(draft).__name__}"] += 1
        self.conversation = self.backend.persist_and_reload(self.conversation)
        return True

    def new_id(self, prefix: str) -> str:
        self.fresh += 1
        return f"{prefix}{self.fresh}"

    # --- ids ------------------------------------------------------------------------------

    def _inside_response_id(self, data: st.DataObject) -> ResponseId:
        """Mostly the open response; sometimes a closed one or one never seen."""
        current = [self.model.response] if self.model.response else []
        others = sorted(self.model.responses - set(current))
        return ResponseId(
            _weighted(data, (8, current), (1, others), (1, [self.new_id("msg_unknown_")]))
        )

    def _turn_id(self, data: st.DataObject) -> TurnId:
        current = [self.model.turn] if self.model.turn else []
        return TurnId(_weighted(data, (3, current), (1, ["t1", "t2"])))

    # --- draft builders (each reads the model, so it aims mostly at valid commands) -------

    def _turn_started(self, data: st.DataObject) -> Event:
        return TurnStarted(turn_id=TurnId(self.new_id("turn_")), trigger=data.draw(_TRIGGERS))

    def _turn_ended(self, data: st.DataObject) -> Event:
        state = data.draw(st.sampled_from(END_STATES))
        return TurnEnded(turn_id=self._turn_id(data), state=state)

    def _user_message(self, data: st.DataObject) -> Event:
        return UserMessage(blocks=tuple(data.draw(st.lists(_TEXTS, min_size=1, max_size=2))))

    def _context(self, data: st.DataObject) -> Event:
        source = data.draw(st.sampled_from(("steering", "context")))
        return ContextInjected(source=source, text=data.draw(_TEXTS))

    def _response_started(self, data: st.DataObject) -> Event:
        known = sorted(self.model.responses)
        rid = _weighted(data, (6, [self.new_id("msg_")]), (1, known))
        return ResponseStarted(
            response_id=ResponseId(rid),
            provider=data.draw(st.sampled_from(PROVIDERS)),
            model="m",
            writer=data.draw(st.none() | writers()),
            settings=RequestSettings(native=data.draw(_PAYLOADS)),
        )

    def _response_ended(self, data: st.DataObject) -> Event:
        return ResponseEnded(
            response_id=self._inside_response_id(data),
            state=data.draw(st.sampled_from(END_STATES)),
            finish_reason=data.draw(st.sampled_from(FINISH_REASONS)),
        )

    def _assistant_text(self, data: st.DataObject) -> Event:
        text = data.draw(texts(max_size=12))
        n = len(text)
        spans = st.one_of(
            st.integers(0, n).flatmap(lambda s: st.tuples(st.just(s), st.integers(s, n))),
            st.tuples(st.integers(-2, n + 3), st.integers(-2, n + 3)),  # often outside
            st.just((0, len(text.encode()))),  # bytes instead of code points
        )
        attributions = tuple(
            Attribution(source=Source(kind="web"), range=None if span is None else TextRange(*span))
            for span in data.draw(st.lists(st.none() | spans, max_size=2))
        )
        return AssistantText(
            response_id=self._inside_response_id(data),
            text=text,
            attributions=attributions,
            attributions_complete=data.draw(st.booleans()),
            payload=data.draw(_PAYLOADS),
        )

    def _reasoning(self, data: st.DataObject) -> Event:
        return Reasoning(
            response_id=self._inside_response_id(data),
            text=data.draw(_TEXTS),
            payload=data.draw(_PAYLOADS),
        )

    def _tool_call(self, data: st.DataObject) -> Event:
        call = _weighted(data, (6, [self.new_id("toolu_")]), (1, sorted(self.model.calls)))
        return ToolCallRequested(
            response_id=self._inside_response_id(data),
            call_id=CallId(call),
            name="f",
            arguments=data.draw(st.dictionaries(_TEXTS, st.integers(), max_size=2)),
        )

    def _tool_result(self, data: st.DataObject) -> Event:
        answered = sorted(c for c, done in self.model.calls.items() if done)
        call = _weighted(
            data,
            (6, self.model.open_calls()),
            (1, answered),
            (1, [self.new_id("toolu_unknown_")]),
        )
        synthetic = data.draw(st.booleans())
        return ToolCallResponded(
            call_id=CallId(call),
            content=data.draw(_TEXTS),
            is_error=synthetic or data.draw(st.booleans()),
            synthetic=synthetic,
        )

    def _hosted(self, data: st.DataObject) -> Event:
        pending = sorted(self.model.pending_activities())
        ended = sorted(set(self.model.activities) - set(pending))
        aid = _weighted(data, (4, pending), (2, [self.new_id("srvtoolu_")]), (1, ended))
        known_name, known_state = self.model.activities.get(aid, (None, None))
        name = _weighted(data, (3, [known_name] if known_name else []), (1, ACTIVITY_NAMES))
        start: list[Lifecycle] = ["started"]
        terminal: list[Lifecycle] = ["completed", "failed", "abandoned"]
        # new ones mostly start; pending ones mostly finish; finished ones get anything
        later = {None: (4, 1), "started": (1, 4)}.get(known_state, (1, 1))
        state = _weighted(data, (later[0], start), (later[1], terminal))
        current = [self.model.response] if self.model.response else []
        rid = _weighted(
            data,
            (6, current),
            (2, [None]),
            (1, [self.new_id("msg_unknown_")]),
        )
        return HostedActivity(
            activity_id=ActivityId(aid),
            name=name,
            state=state,
            response_id=None if rid is None else ResponseId(rid),
            input={"query": data.draw(_TEXTS)},
            payload=data.draw(_PAYLOADS),
        )

    def _unknown_artifact(self, data: st.DataObject) -> Event:
        rid = data.draw(st.sampled_from((None, self._inside_response_id(data))))
        return UnknownArtifact(payload=data.draw(provider_payloads()), response_id=rid)

    BUILDERS: ClassVar[tuple[str, ...]] = (
        "_turn_started",
        "_turn_ended",
        "_user_message",
        "_context",
        "_response_started",
        "_response_ended",
        "_assistant_text",
        "_reasoning",
        "_tool_call",
        "_tool_result",
        "_hosted",
        "_unknown_artifact",
    )

    INSIDE: ClassVar[tuple[str, ...]] = (
        "_assistant_text",
        "_reasoning",
        "_tool_call",
        "_hosted",
        "_hosted",  # lifecycles need several steps: twice as likely
        "_unknown_artifact",
    )

    def draft(self, name: str, data: st.DataObject) -> Event:
        build: Any = getattr(self, name)
        event: Event = build(data)
        return event

    # --- rules -----------------------------------------------------------------------------

    @rule(data=st.data())
    def turn_started(self, data: st.DataObject) -> None:
        self.execute([self._turn_started(data)])

    @rule(data=st.data())
    def turn_ended(self, data: st.DataObject) -> None:
        self.execute([self._turn_ended(data)])

    @rule(data=st.data())
    def user_side(self, data: st.DataObject) -> None:
        maker = data.draw(st.sampled_from((self._user_message, self._context)))
        self.execute([maker(data)])

    @rule(data=st.data())
    def response_started(self, data: st.DataObject) -> None:
        self.execute([self._response_started(data)])

    @rule(data=st.data())
    def response_ended(self, data: st.DataObject) -> None:
        self.execute([self._response_ended(data)])

    @rule(data=st.data())
    def assistant_text(self, data: st.DataObject) -> None:
        self.execute([self._assistant_text(data)])

    @rule(data=st.data())
    def reasoning(self, data: st.DataObject) -> None:
        self.execute([self._reasoning(data)])

    @rule(data=st.data())
    def tool_call(self, data: st.DataObject) -> None:
        self.execute([self._tool_call(data)])

    @rule(data=st.data())
    def tool_result(self, data: st.DataObject) -> None:
        self.execute([self._tool_result(data)])

    @rule(data=st.data())
    def hosted_transition(self, data: st.DataObject) -> None:
        self.execute([self._hosted(data)])

    @rule(data=st.data())
    def unknown_artifact(self, data: st.DataObject) -> None:
        self.execute([self._unknown_artifact(data)])

    @rule(data=st.data())
    def retitled(self, data: st.DataObject) -> None:
        """Mostly a new title; sometimes the same one, untrimmed, or of two lines."""
        title = data.draw(st.sampled_from((self.model.title, "plan", "", " padded ", "a\nb")))
        self.execute([Retitled(title=title)])

    @rule(data=st.data())
    def relabelled(self, data: st.DataObject) -> None:
        """Mostly a real change; sometimes labels from a few, some invalid, present or
        not, repeated."""
        if data.draw(st.integers(0, 3)):
            lacking = sorted({"hypothesis", "a", "b"} - self.model.labels)
            added = data.draw(st.lists(st.sampled_from(lacking), unique=True)) if lacking else []
            having = sorted(self.model.labels)
            removed = data.draw(st.lists(st.sampled_from(having), unique=True)) if having else []
        else:
            names = st.sampled_from(("hypothesis", "a", "b", "two words", ""))
            added, removed = data.draw(st.lists(names, max_size=3)), data.draw(st.lists(names))
        self.execute([Relabelled(added=tuple(added), removed=tuple(removed))])

    @rule(data=st.data())
    def redacted(self, data: st.DataObject) -> None:
        """A redaction of an earlier event, mostly; sometimes of one not recorded yet."""
        version = data.draw(st.integers(0, self.model.events + 1))
        span = data.draw(st.none() | st.tuples(st.integers(0, 3), st.integers(4, 8)))
        self.execute([Redacted(event_version=version, span=span, reason="hypothesis")])

    @rule()
    def start_again(self) -> None:
        self.execute([Started(title="again")])

    @rule(data=st.data())
    def invalid_payload(self, data: st.DataObject) -> None:
        bad = data.draw(st.sampled_from(_BAD_PAYLOADS))
        draft = self.draft(data.draw(st.sampled_from(self.BUILDERS)), data)
        if hasattr(draft, "payload"):
            draft = msgspec.structs.replace(draft, payload=bad)
        elif isinstance(draft, ResponseStarted):
            draft = msgspec.structs.replace(draft, settings=RequestSettings(native=bad))
        else:
            draft = UnknownArtifact(payload=bad)
        assert self.model.refusal(draft) is InvalidPayload
        self.execute([draft])

    @precondition(lambda self: self.model.response is not None or bool(self.model.open_calls()))
    @rule()
    def repair(self) -> None:
        """What `convstore repair` appends: close the response, answer every orphan."""
        activities = dict(self.model.activities)
        drafts: list[Event] = []
        if self.model.response is not None:
            drafts.append(
                ResponseEnded(
                    response_id=ResponseId(self.model.response),
                    state="abandoned",
                    stop_reason="repaired",
                )
            )
        drafts += [
            ToolCallResponded(
                call_id=CallId(c), content="interrupted", is_error=True, synthetic=True
            )
            for c in self.model.open_calls()
        ]
        assert self.execute(drafts)
        assert self.conversation.open_calls() == []
        assert self.conversation.state.open_response is None
        assert self.model.activities == activities  # hosted work is not ours to repair

    @precondition(lambda self: bool(self.model.pending_activities()))
    @rule(data=st.data())
    def abandon_pending(self, data: st.DataObject) -> None:
        """An explicit abandonment (e.g. the provider was switched): valid anywhere, as
        long as it keeps the activity's name."""
        aid, name = data.draw(st.sampled_from(sorted(self.model.pending_activities().items())))
        name = _weighted(data, (3, [name]), (1, [name + "_renamed"]))
        draft = HostedActivity(activity_id=ActivityId(aid), name=name, state="abandoned")
        self.execute([draft])

    def _round_trip(self, data: st.DataObject) -> None:
        if self.model.response is None:
            self.execute([self._response_started(data)])
        for name in data.draw(st.lists(st.sampled_from(self.INSIDE), min_size=1, max_size=4)):
            self.execute([self.draft(name, data)])

    def _close_and_answer(self, data: st.DataObject) -> None:
        if self.model.response is not None:
            state = data.draw(st.sampled_from(END_STATES))
            self.execute([ResponseEnded(response_id=ResponseId(self.model.response), state=state)])
        for call in self.model.open_calls():
            self.execute([ToolCallResponded(call_id=CallId(call), content="ok")])

    @rule(data=st.data())
    def provider_round_trip(self, data: st.DataObject) -> None:
        """A response with a few blocks, often ended and its calls answered: the common
        path, one command at a time (each still checked against the model)."""
        self._round_trip(data)
        if data.draw(st.booleans()):
            self._close_and_answer(data)

    @rule(data=st.data())
    def whole_turn(self, data: st.DataObject) -> None:
        """A turn as a client drives one: start, ask, one or two round trips, end."""
        self._close_and_answer(data)
        if self.model.turn is None:
            self.execute([self._turn_started(data)])
        self.execute([self._user_message(data)])
        for _ in range(data.draw(st.integers(1, 2))):
            self._round_trip(data)
            self._close_and_answer(data)
        assert self.model.turn is not None
        self.execute([TurnEnded(turn_id=TurnId(self.model.turn))])

    @precondition(lambda self: any(self.model.calls.values()))
    @rule(data=st.data())
    def answer_again(self, data: st.DataObject) -> None:
        """A second answer, e.g. a repair racing a late result."""
        answered = sorted(call for call, done in self.model.calls.items() if done)
        synthetic = data.draw(st.booleans())
        draft = ToolCallResponded(
            call_id=CallId(data.draw(st.sampled_from(answered))),
            is_error=synthetic,
            synthetic=synthetic,
        )
        self.execute([draft])

    @precondition(lambda self: bool(self.model.responses))
    @rule(data=st.data())
    def reuse_an_id(self, data: st.DataObject) -> None:
        """A response or call id that is already recorded."""
        if self.model.response is not None and self.model.calls and data.draw(st.booleans()):
            call = data.draw(st.sampled_from(sorted(self.model.calls)))
            rid = ResponseId(self.model.response)
            self.execute([ToolCallRequested(response_id=rid, call_id=CallId(call), name="f")])
        else:
            rid = ResponseId(data.draw(st.sampled_from(sorted(self.model.responses))))
            self.execute([ResponseStarted(response_id=rid, provider="openai")])

    @rule(data=st.data())
    def batch(self, data: st.DataObject) -> None:
        """Several drafts in one `record_all`: all accepted, or none."""
        names = data.draw(st.lists(st.sampled_from(self.BUILDERS), min_size=2, max_size=4))
        self.execute([self.draft(name, data) for name in names])

    # --- invariants --------------------------------------------------------------------------

    @invariant()
    def equals_the_replay_of_its_stored_events(self) -> None:
        cid = self.conversation.id
        events = self.backend.stored_events(cid)
        assert self.conversation.version == len(events) == self.model.events
        assert [e.originator_version for e in events] == list(range(1, len(events) + 1))
        assert Conversation.replay(cid, events) == self.conversation
        assert self.conversation.pending == ()

    @invariant()
    def stored_chain_verifies(self) -> None:
        records = self.backend.stored_records(self.conversation.id)
        assert verify_stored(records) == []
        if records:
            last = msgspec.json.decode(records[-1][1])
            assert last["hash"] == self.conversation.state.head

    @invariant()
    def agrees_with_the_model(self) -> None:
        state = self.conversation.state
        assert state.open_turn == self.model.turn
        open_id = state.open_response.response_id if state.open_response else None
        assert open_id == self.model.response
        # A settled state keeps only the open items; the lookups see the settled ones too.
        conversation = self.conversation
        assert set(state.responses) <= self.model.responses
        assert all(conversation.stored_response(r) for r in self.model.responses)
        assert conversation.open_calls() == self.model.open_calls()
        assert {c: conversation.call_answered(c) for c in self.model.calls} == self.model.calls
        assert set(conversation.pending_activities()) == set(self.model.pending_activities())
        assert set(state.activities) <= set(self.model.activities)
        recorded = {a: conversation.activity(a) for a in self.model.activities}
        assert {a: (s.name, s.state) for a, s in recorded.items() if s} == self.model.activities
        assert state.title == self.model.title
        assert set(state.labels) == self.model.labels
        assert len(state.labels) == len(self.model.labels)


SETTINGS = settings(max_examples=40, stateful_step_count=30, deadline=None)
"""For subclasses' TestCases too: a few seconds in memory."""

TestConversationMachine = ConversationMachine.TestCase
TestConversationMachine.settings = SETTINGS


def test_the_machine_reaches_every_outcome() -> None:
    """A fixed-seed run must see every refusal and accept every kind of event, so the
    machine stays meaningful as it evolves (random runs above explore further)."""
    OUTCOMES.clear()
    fixed = settings(SETTINGS, max_examples=60, derandomize=True, database=None)
    run_state_machine_as_test(ConversationMachine, settings=fixed)
    refusals = {
        InvariantViolation,
        TurnStateError,
        ResponseStillOpen,
        ResponseNotOpen,
        DuplicateId,
        RangeOutOfBounds,
        UnknownToolCall,
        ToolCallAlreadyAnswered,
        InvalidTransition,
        InvalidPayload,
        InvalidMetadata,
        InvalidRedaction,
    }
    missing = {r.__name__ for r in refusals} - set(OUTCOMES)
    assert not missing, f"never refused: {missing} ({OUTCOMES})"
    # Forgotten ends a conversation: tests/test_forget.py covers it, not this machine.
    kinds = {f"accepted:{t.__name__}" for t in EVENT_TYPES if t not in (Started, Forgotten)}
    assert not kinds - set(OUTCOMES), f"never accepted: {kinds - set(OUTCOMES)}"
