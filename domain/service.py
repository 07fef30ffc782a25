"""The application service: commands and queries over conversations.

It receives its persistence at construction (a `ConversationRepository` and a `Liveness`,
both built by `convstore.storage`), so the domain imports nothing of ours outside itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Protocol

import msgspec

from convstore.domain import metadata
from convstore.domain.calls import check_answerable
from convstore.domain.conversation import Conversation, new_conversation_id
from convstore.domain.errors import (
    ConcurrencyConflict,
    ConversationForgotten,
    InvariantViolation,
    ResponseBeingWritten,
    WriterAlive,
)
from convstore.domain.events import (
    Event,
    Forgotten,
    HostedActivity,
    Redacted,
    Relabelled,
    ResponseEnded,
    ResponseStarted,
    Retitled,
    Started,
    ToolCallResponded,
    TurnEnded,
    TurnStarted,
    UserMessage,
)
from convstore.domain.redaction import draft as redaction_draft
from convstore.domain.redaction import hidden, redacted
from convstore.domain.responses import CONTINUES, ResponseOutcome, ResponseRecorder
from convstore.domain.sealing import Cipher
from convstore.domain.state import ConversationState
from convstore.domain.vocabulary import ActivityId, CallId, ConversationId, Writer
from convstore.domain.writers import (
    DEFAULT_STALE_AFTER,
    Liveness,
    OwnProcessOnly,
    WriterStatus,
    alive_because,
    current_writer,
    judge,
)

INTERRUPTED_RESULT = "The tool call was interrupted; no result was recorded."

METADATA_RETRIES = 3
"""How often a title or label change whose conversation moved on under it reads it again."""


class MetadataOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation's title and labels after a `retitle` or `relabel`."""

    title: str
    labels: tuple[str, ...]
    changed: bool
    """Whether an event was recorded (False: it already had them; nothing was written)."""


class ConversationSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a conversation listing."""

    id: ConversationId
    title: str
    labels: tuple[str, ...]
    created_on: datetime
    events: int
    """How many events the conversation holds."""
    last_activity_at: datetime | None = None
    """Its newest event's time (None where the store keeps no catalogue)."""
    provider: str | None = None
    """Of its newest response (for a fork without one, its parent's)."""
    model: str | None = None
    turns: int | None = None
    """Its turns (a fork's count its parent's up to the fork point)."""
    forked_from: ConversationId | None = None


class ConversationFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which conversations a listing shows: every condition given must hold."""

    provider: str | None = None
    model: str | None = None
    since: datetime | None = None
    """Started at or after."""
    until: datetime | None = None
    """Started before."""
    title: str | None = None
    """A substring of the title, in any case."""
    labels: tuple[str, ...] = ()
    """Labels it has, all of them."""

    @property
    def empty(self) -> bool:
        """Whether it lets every conversation through."""
        return self == ConversationFilter()


class ConversationRepository(Protocol):
    """What the service needs of persistence."""

    def load(self, conversation_id: ConversationId) -> Conversation:
        """The conversation as of its newest event; raises ConversationNotFound."""
        ...

    def state_at(self, conversation_id: ConversationId, version: int) -> ConversationState:
        """The aggregate's state as of `version` of the conversation's reading (for a
        fork, see `ConversationService.history`); raises ConversationNotFound."""
        ...

    def save(self, conversation: Conversation) -> None:
        """Write the collected events atomically; raises ConcurrencyConflict, EventTooLarge."""
        ...

    def events(self, conversation_id: ConversationId, *, after: int = 0) -> Iterator[Event]:
        """Stored events in version order, after version `after`."""
        ...

    def summaries(
        self,
        *,
        offset: int = 0,
        limit: int = 50,
        newest_first: bool = False,
        where: ConversationFilter | None = None,
    ) -> list[ConversationSummary]:
        """Conversations in the order they started (or the reverse), filtered."""
        ...

    def count(self, where: ConversationFilter | None = None) -> int:
        """How many conversations `where` lets through."""
        ...

    def matching(self, prefix: str, *, limit: int) -> list[ConversationId]:
        """At most `limit` conversations whose id starts with the hex `prefix`."""
        ...

    def locate(self, started: ResponseStarted) -> ConversationId | None:
        """The conversation holding the provider response `started` opens, store-wide."""
        ...


class Ciphers(Protocol):
    """The port to each conversation's cipher (`domain.sealing`), built by storage."""

    def cipher(self, conversation_id: ConversationId) -> Cipher:
        """The conversation's cipher, its data key made on first use; raises
        ConversationForgotten once its key was destroyed."""
        ...


class ConversationService:
    """Start conversations, append events, repair interruptions, and read them back."""

    def __init__(
        self,
        repository: ConversationRepository,
        *,
        liveness: Liveness | None = None,
        writer: Writer | None = None,
        stale_after: float = DEFAULT_STALE_AFTER,
        max_event_bytes: int | None = None,
        ciphers: Ciphers | None = None,
    ) -> None:
        self.repository = repository
        self.ciphers = ciphers
        """Each conversation's cipher on an encrypting store (None: a plain store)."""
        self.liveness: Liveness = liveness or OwnProcessOnly()
        """The writers' holds: this process's, taken before it records a response, and
        the test of another writer's (see `domain.writers`)."""
        self._writer = writer
        self.stale_after = stale_after
        """Seconds a response of a writer without a writer id stays open (the lease rule)."""
        self.max_event_bytes = max_event_bytes
        """Drafts over this many bytes end their response `failed` (`too_large`)."""

    # --- commands ---------------------------------------------------------------------------

    def start(
        self,
        title: str = "",
        labels: Iterable[str] = (),
        *,
        start_as: ConversationId | None = None,
    ) -> ConversationId:
        """Start a conversation (`start_as`: with that id, default a new one) and return
        its id."""
        conversation_id = start_as or new_conversation_id()
        conversation = Conversation.start(
            title, labels, conversation_id, cipher=self._cipher(conversation_id)
        )
        self.repository.save(conversation)
        return conversation.id

    def append(self, conversation_id: ConversationId, drafts: Iterable[Event]) -> list[Event]:
        """Record drafts as one atomic batch, after closing a response whose writer is gone.

        Raises an InvariantViolation (nothing written: ResponseBeingWritten for drafts
        outside the response a live writer holds open) or ConcurrencyConflict.
        """
        drafts = list(drafts)
        conversation = self._load(conversation_id)
        open_response = conversation.state.open_response
        if open_response is not None and any(
            getattr(draft, "response_id", None) != open_response.response_id for draft in drafts
        ):
            self._refuse_beside_live_writer(conversation, "events outside the open response")
        self._close_dead_response(conversation)
        recorded = conversation.record_all(drafts)
        self.repository.save(conversation)
        return recorded

    def add_user_input(
        self, conversation_id: ConversationId, drafts: Iterable[Event]
    ) -> list[Event]:
        """Record user-side drafts with their turn boundaries, as one atomic batch.

        A user message ends any open turn and starts a new one; tool results continue the
        open turn (or start one triggered by them); context alone joins the open turn (or
        starts one triggered by steering). Raises ResponseBeingWritten (nothing written)
        while a live writer holds a response open.
        """
        conversation = self._load(conversation_id)
        self._refuse_beside_live_writer(conversation, "user input")
        self._close_dead_response(conversation)
        recorded = _record_user_input(conversation, list(drafts))
        self.repository.save(conversation)
        return recorded

    def check_writable(self, conversation_id: ConversationId, what: str = "a write") -> None:
        """Raise ResponseBeingWritten when a live writer holds a response open in the
        conversation, so a caller can refuse `what` before any work (a request sent);
        reads only. Raises ConversationNotFound."""
        self._refuse_beside_live_writer(self._load(conversation_id), what)

    def answer(
        self, conversation_id: ConversationId, call_id: CallId, content: str, *, is_error: bool
    ) -> list[Event]:
        """Record the result of client tool call `call_id`, with its turn boundary (as
        `add_user_input` does), after closing a response whose writer is gone; returns
        what was recorded, that closing included.

        Raises, nothing written: UnknownToolCall for an id no client tool call of the
        conversation has (a hosted activity's id included: the provider ran it),
        ToolCallAlreadyAnswered, ResponseBeingWritten while a live writer holds a
        response open.
        """
        conversation = self._load(conversation_id)
        self._refuse_beside_live_writer(conversation, f"a result for tool call {call_id!r}")
        check_answerable(conversation, call_id)
        closed = self._close_dead_response(conversation)
        result = ToolCallResponded(call_id=call_id, content=content, is_error=is_error)
        recorded = _record_user_input(conversation, [result])
        self.repository.save(conversation)
        return [*closed, *recorded]

    def ingest(
        self,
        conversation_id: ConversationId,
        drafts: Iterable[Event],
        *,
        ready: Callable[[], bool] | None = None,
        continues: frozenset[str] = CONTINUES,
    ) -> ResponseOutcome:
        """Record one provider response from its drafts (ResponseStarted first), as it streams.

        Idempotent by response id: a stored response with the same content is reported
        `already_stored`; with other content it raises ResponseConflict. What arrived is
        committed even when the response ends `failed` or `abandoned`. `ready` and
        `continues`: the recorder's (see `ResponseRecorder`).
        """
        conversation = self._load(conversation_id)
        self._close_dead_response(conversation)
        recorder = self._recorder(conversation, ready=ready, continues=continues)
        return recorder.record(drafts, writer=self.writer)

    def ingest_exchange(
        self,
        conversation_id: ConversationId | None,
        history: Sequence[tuple[str, Sequence[Event]]],
        drafts: Iterable[Event],
        *,
        at_version: int = 0,
        title: str = "",
        ready: Callable[[], bool] | None = None,
        continues: frozenset[str] = CONTINUES,
        start_as: ConversationId | None = None,
    ) -> tuple[ConversationId, ResponseOutcome]:
        """Record a request's messages the conversation lacks, then its response, with
        the history and the response's first batch in one transaction.

        `history` is (role, drafts) per message (`assistant` messages are recorded as
        responses), computed from the conversation as of `at_version`. Raises
        ConcurrencyConflict (nothing written) when the conversation moved on since, so
        two ingests of one exchange never record its history twice. Without a
        conversation, one is started (titled `title`) in that same first transaction, so
        an ingest refused (`ResponseStoredElsewhere` included) leaves none behind.
        `ready` and `continues`: the recorder's (see `ResponseRecorder`); `start_as`: the
        id of the conversation started (default: a new one).
        """
        if conversation_id is None:
            new_id = start_as or new_conversation_id()
            conversation = Conversation.start(
                title, conversation_id=new_id, cipher=self._cipher(new_id)
            )
        else:
            conversation = self._load(conversation_id)
            if conversation.version != at_version:
                raise ConcurrencyConflict(
                    f"conversation {conversation_id} moved from version {at_version} to "
                    f"{conversation.version} while the request's history was read; nothing "
                    "was written: read it again"
                )
            self._close_dead_response(conversation)
        for role, message in history:
            if role == "assistant":  # pending until the response's first commit
                held = ResponseRecorder(
                    conversation,
                    _later,
                    max_event_bytes=self.max_event_bytes,
                    stored_events=self._stored_events(conversation),
                )
                held.record(message, writer=self.writer)
            else:
                _record_user_input(conversation, list(message))
        recorder = self._recorder(conversation, ready=ready, continues=continues)
        outcome = recorder.record(drafts, writer=self.writer)
        if conversation.pending:  # the history alone: the response was stored already
            self.repository.save(conversation)
        return conversation.id, outcome

    def fork(
        self,
        conversation_id: ConversationId,
        *,
        at: int,
        title: str = "",
        labels: Iterable[str] = (),
    ) -> ConversationId:
        """Start a conversation going on from `conversation_id` at version `at` (of its
        reading: a fork's reading numbers its parent's events first), titled `title` or
        else as the parent is: it records that
        reference, never a copy of the events; its readings (`history`) fold the parent up
        to `at`, then its own events. Raises InvariantViolation (nothing written) for a
        version the conversation does not have or one inside a response."""
        history = self.history(conversation_id)
        newest = history[-1].originator_version
        if not 1 <= at <= newest:
            raise InvariantViolation(
                f"conversation {conversation_id} reads as versions 1 to {newest}; there is "
                f"no version {at} to fork at"
            )
        state = self.repository.state_at(conversation_id, at)
        if not title:
            title = self._load(conversation_id).state.title  # the parent's now
        fork_id = new_conversation_id()
        fork = Conversation.fork(
            state,
            parent=conversation_id,
            at=at,
            title=title,
            labels=labels,
            conversation_id=fork_id,
            cipher=self._cipher(fork_id),
        )
        self.repository.save(fork)
        return fork.id

    def history(
        self, conversation_id: ConversationId, own: list[Event] | None = None
    ) -> list[Event]:
        """The events a reading of the conversation folds: its own, or for a fork its
        parent's history up to the fork point, then its own events after its Started,
        their versions continuing the parent's (version v of the fork reads as
        `forked_at + v - 1`), its parent's Retitled and Relabelled left out (a fork's
        metadata is its own), and the prefix with its parent's redactions applied, also
        those recorded after the fork (`domain.redaction`). `own`: its own events, when
        already read. Raises ConversationNotFound."""
        events = own if own is not None else list(self.repository.events(conversation_id))
        first = events[0]
        if not isinstance(first, Started) or first.forked_from is None:
            return events
        try:
            parent = self.history(ConversationId(first.forked_from))
        except ConversationForgotten:  # forgetting a parent hides the prefix forks read
            parent = []
        at = first.forked_at
        marks = hidden(parent)  # the prefix is hidden as its parent hides it, now
        return [
            first,
            *(  # the fork's title and labels are its own: its parent's changes stay there
                redacted(e, marks[e.originator_version]) if e.originator_version in marks else e
                for e in parent[1:]
                if e.originator_version <= at and type(e) not in _PARENTS_OWN
            ),
            *(_renumbered(e, at) for e in events[1:]),
        ]

    def repair(self, conversation_id: ConversationId, *, force: bool = False) -> list[Event]:
        """Close any open response as abandoned and answer every orphaned client tool call.

        Raises WriterAlive (nothing written) when the open response's writer is alive,
        unless `force`: its later writes to that response are then refused. Hosted
        activities are untouched: the provider ran them, not us.
        """
        conversation = self._load(conversation_id)
        open_response = conversation.state.open_response
        if open_response is not None:
            if not force and self._writer_status(conversation) == "alive":
                raise WriterAlive(
                    f"response {open_response.response_id!r} is still being written: "
                    f"{alive_because(open_response.writer, self.stale_after)}; nothing was "
                    "written. Wait for it to end, or close it anyway with "
                    f"`convstore repair {conversation_id} --force`"
                )
            conversation.record(
                ResponseEnded(
                    response_id=open_response.response_id,
                    state="abandoned",
                    stop_reason="repaired",
                    finish_reason="other",
                )
            )
        for call_id in conversation.open_calls():
            conversation.record(
                ToolCallResponded(
                    call_id=call_id,
                    content=INTERRUPTED_RESULT,
                    is_error=True,
                    synthetic=True,
                )
            )
        recorded = list(conversation.pending)
        if recorded:
            self.repository.save(conversation)
        return recorded

    def abandon_activities(
        self,
        conversation_id: ConversationId,
        *,
        provider: str | None = None,
        activity_ids: Iterable[ActivityId] | None = None,
    ) -> list[Event]:
        """Record pending hosted activities `abandoned` (all, one provider's, or those named).

        Raises ResponseBeingWritten (nothing written) while a live writer holds a
        response open."""
        conversation = self._load(conversation_id)
        self._refuse_beside_live_writer(conversation, "an abandonment")
        closed = self._close_dead_response(conversation)
        wanted = set(activity_ids) if activity_ids is not None else None
        for activity_id, activity in conversation.pending_activities().items():
            if wanted is not None and activity_id not in wanted:
                continue
            if provider is not None and activity.provider != provider:
                continue
            conversation.record(
                HostedActivity(
                    activity_id=activity_id,
                    name=activity.name,
                    state="abandoned",
                )
            )
        recorded = list(conversation.pending)
        if recorded:
            self.repository.save(conversation)
        return [*closed, *recorded]

    def forget(self, conversation_id: ConversationId, *, reason: str = "") -> Forgotten:
        """Record the conversation's Forgotten event: the commit point of `forget`, after
        which every reader treats it as forgotten (storage then destroys its key and
        cleans up). Raises, nothing written: ResponseBeingWritten while a live writer
        holds a response open, ConversationForgotten when it already was."""
        conversation = self._load(conversation_id)
        self._refuse_beside_live_writer(conversation, "forgetting the conversation")
        self._close_dead_response(conversation)
        event = conversation.record(Forgotten(reason=reason))
        self.repository.save(conversation)
        return event

    def redact(
        self,
        conversation_id: ConversationId,
        version: int,
        *,
        span: tuple[int, int] | None = None,
        reason: str = "",
    ) -> Redacted:
        """Record a Redacted event hiding `span` (None: all) of the text of event `version`
        from every portable reading (`domain.redaction`); the stored bytes stay. Raises,
        nothing written: InvalidRedaction (no such event, no text, a span outside it),
        ResponseBeingWritten while a live writer holds a response open."""
        conversation = self._load(conversation_id)
        target = None
        if 1 <= version <= conversation.version:
            target = next(iter(self.repository.events(conversation_id, after=version - 1)), None)
        drafted = redaction_draft(target, version, span, reason)
        self._refuse_beside_live_writer(conversation, "a redaction")
        self._close_dead_response(conversation)
        event = conversation.record(drafted)
        self.repository.save(conversation)
        return event

    def retitle(self, conversation_id: ConversationId, title: str) -> MetadataOutcome:
        """Give the conversation the title `title` (trimmed; empty: none), recording a
        Retitled unless it has it already. Raises, nothing written: InvalidMetadata for
        a title that cannot be one (`domain.metadata`), ResponseBeingWritten while a live
        writer holds a response open, ConcurrencyConflict when other writers kept
        appending."""
        wanted = metadata.title(title)

        def draft(state: ConversationState) -> Event | None:
            return None if state.title == wanted else Retitled(title=wanted)

        return self._change_metadata(conversation_id, draft, "a new title")

    def relabel(
        self,
        conversation_id: ConversationId,
        *,
        add: Iterable[str] = (),
        remove: Iterable[str] = (),
    ) -> MetadataOutcome:
        """Put the labels `add` on the conversation and take `remove` off, recording one
        Relabelled of what changes (a label already there, or one not there to remove,
        changes nothing). Raises, nothing written: InvalidMetadata for a label that
        cannot be one or one both added and removed, and as `retitle` does."""
        add, remove = tuple(add), tuple(remove)
        metadata.label_change((), add, ())  # refuse a bad label to add before any read

        def draft(state: ConversationState) -> Event | None:
            added, removed = metadata.label_change(state.labels, add, remove)
            return Relabelled(added=added, removed=removed) if added or removed else None

        return self._change_metadata(conversation_id, draft, "a label change")

    def _change_metadata(
        self,
        conversation_id: ConversationId,
        draft: Callable[[ConversationState], Event | None],
        what: str,
    ) -> MetadataOutcome:
        """Record the metadata event `draft` makes of the conversation's state (None:
        nothing to change) outside any response, read again when another writer appended
        first (up to METADATA_RETRIES times)."""
        retries = 0
        while True:
            conversation = self._load(conversation_id)
            self._refuse_beside_live_writer(conversation, what)
            self._close_dead_response(conversation)
            event = draft(conversation.state)
            if event is not None:
                conversation.record(event)
                try:
                    self.repository.save(conversation)
                except ConcurrencyConflict:
                    retries += 1
                    if retries > METADATA_RETRIES:
                        raise
                    continue
            state = conversation.state
            return MetadataOutcome(
                title=state.title, labels=state.labels, changed=event is not None
            )

    # --- queries ----------------------------------------------------------------------------

    def get(self, conversation_id: ConversationId) -> Conversation:
        """The conversation's aggregate; raises ConversationNotFound."""
        return self._load(conversation_id)

    def events(self, conversation_id: ConversationId, *, after: int = 0) -> Iterator[Event]:
        """One conversation's events in order."""
        return self.repository.events(conversation_id, after=after)

    def matching(self, prefix: str, *, limit: int = 10) -> list[ConversationId]:
        """At most `limit` conversations whose id starts with the hex `prefix` (dashes
        as printed allowed)."""
        return self.repository.matching(prefix, limit=limit)

    def list(
        self,
        *,
        offset: int = 0,
        limit: int = 50,
        newest_first: bool = False,
        where: ConversationFilter | None = None,
    ) -> list[ConversationSummary]:
        """A page of conversations, oldest first (or newest), filtered by `where`."""
        return self.repository.summaries(
            offset=offset, limit=limit, newest_first=newest_first, where=where
        )

    def count(self, where: ConversationFilter | None = None) -> int:
        """How many conversations `where` lets through (every one without it)."""
        return self.repository.count(where)

    def locate(self, started: ResponseStarted) -> ConversationId | None:
        """The conversation that holds the provider response `started` opens, if any: a
        provider response is stored once in the whole store."""
        return self.repository.locate(started)

    # --- internals --------------------------------------------------------------------------

    def _load(self, conversation_id: ConversationId) -> Conversation:
        """The conversation from the repository, with its cipher on an encrypting store."""
        conversation = self.repository.load(conversation_id)
        conversation.cipher = self._cipher(conversation_id)
        return conversation

    def _cipher(self, conversation_id: ConversationId) -> Cipher | None:
        return None if self.ciphers is None else self.ciphers.cipher(conversation_id)

    def _recorder(
        self,
        conversation: Conversation,
        *,
        ready: Callable[[], bool] | None = None,
        continues: frozenset[str] = CONTINUES,
    ) -> ResponseRecorder:
        return ResponseRecorder(
            conversation,
            self.repository.save,
            max_event_bytes=self.max_event_bytes,
            stored_events=self._stored_events(conversation),
            ready=ready,
            continues=continues,
        )

    def _stored_events(self, conversation: Conversation) -> Callable[[int], Iterator[Event]]:
        """The conversation's events from a version on: those stored, then those pending."""

        def from_version(version: int) -> Iterator[Event]:
            pending = conversation.pending
            saved = conversation.version - len(pending)
            if version <= saved:
                yield from self.repository.events(conversation.id, after=version - 1)
            for event in pending:
                if event.originator_version >= version:
                    yield event

        return from_version

    @property
    def writer(self) -> Writer:
        """This process as the writer of the responses it records, its hold taken."""
        if self._writer is not None:
            return self._writer
        return current_writer(self.liveness.hold())

    def _writer_status(self, conversation: Conversation) -> WriterStatus:
        open_response = conversation.state.open_response
        if open_response is None:
            return "unknown"
        if self._writer is not None and open_response.writer == self._writer:
            return "alive"
        return judge(
            open_response.writer,
            self.liveness,
            opened_at=open_response.started_at,
            now=time.time(),
            stale_after=self.stale_after,
        )

    def _refuse_beside_live_writer(self, conversation: Conversation, what: str) -> None:
        """Raise ResponseBeingWritten when a live writer holds a response open in
        `conversation`: a write outside that response would sit between its events."""
        open_response = conversation.state.open_response
        if open_response is None or self._writer_status(conversation) != "alive":
            return
        raise ResponseBeingWritten(
            f"{what} refused: response {open_response.response_id!r} of conversation "
            f"{conversation.id} is still being written: "
            f"{alive_because(open_response.writer, self.stale_after)}; nothing was written. "
            "Wait for it to end, or close it with "
            f"`convstore repair {conversation.id} --force`"
        )

    def _close_dead_response(self, conversation: Conversation) -> Sequence[Event]:
        """Close a response whose writer is gone, and commit that at once: the write that
        finds it closes it, whatever becomes of the rest of that write. Returns what it
        recorded."""
        open_response = conversation.state.open_response
        if open_response is None or self._writer_status(conversation) != "gone":
            return []
        closed = conversation.record(
            ResponseEnded(
                response_id=open_response.response_id,
                state="abandoned",
                stop_reason="writer_gone",
                finish_reason="other",
            )
        )
        self.repository.save(conversation)
        return [closed]


_PARENTS_OWN = (Retitled, Relabelled, Redacted)
"""What a fork leaves out of its parent's prefix: its metadata (a fork's is its own), and
its redactions (applied to the prefix instead)."""


def _renumbered(event: Event, at: int) -> Event:
    """A fork's own event at its version in the fork's history (a redaction's target too)."""
    if isinstance(event, Redacted):
        event = msgspec.structs.replace(event, event_version=at + event.event_version - 1)
    return msgspec.structs.replace(event, originator_version=at + event.originator_version - 1)


def _later(conversation: Conversation) -> None:
    """A save that waits: the events stay pending for the next real commit."""


def _record_user_input(conversation: Conversation, drafts: list[Event]) -> list[Event]:
    """Record user-side drafts with their turn boundaries (see `add_user_input`)."""
    open_turn = conversation.state.open_turn
    boundaries: list[Event] = []
    if any(isinstance(d, ToolCallResponded) for d in drafts):
        if open_turn is None:
            boundaries.append(
                TurnStarted(turn_id=conversation.next_turn_id(), trigger="tool_results")
            )
    elif any(isinstance(d, UserMessage) for d in drafts):
        if open_turn is not None:
            boundaries.append(TurnEnded(turn_id=open_turn, state="completed"))
        boundaries.append(TurnStarted(turn_id=conversation.next_turn_id(), trigger="user"))
    elif open_turn is None:
        boundaries.append(TurnStarted(turn_id=conversation.next_turn_id(), trigger="steering"))
    return conversation.record_all([*boundaries, *drafts])
