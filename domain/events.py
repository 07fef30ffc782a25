"""The events of a Conversation: append-only records of what happened.

Each event is a frozen, tagged `msgspec.Struct` that satisfies eventsourcing's
`DomainEventProtocol` (`originator_id`, `originator_version`, `timestamp`). An event
not yet recorded is a *draft*: its envelope holds the defaults below until
`Conversation.record` stamps it with the conversation's id, the next version, the time and
the hash chain.

Events and the vocabulary's values inside them are not tracked by the garbage collector
(`gc=False`): they are immutable records of decoded data, which cannot form a reference
cycle, and a reader holding a long conversation's events then pays no collection passes
over them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final, TypeAlias
from uuid import UUID

import msgspec

from convstore.domain.vocabulary import (
    ActivityId,
    Attribution,
    CallId,
    Display,
    EndState,
    ErrorInfo,
    FinishReason,
    Lifecycle,
    Provider,
    ProviderPayload,
    RequestSettings,
    ResponseId,
    ResponseOrigin,
    TurnId,
    TurnTrigger,
    Usage,
    Writer,
)

NIL: Final = UUID(int=0)
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class Event(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type", gc=False
):
    """Base of every conversation event: the envelope and the hash chain."""

    originator_id: UUID = NIL
    """The conversation's id."""
    originator_version: int = 0
    """Position in the conversation, from 1, gapless."""
    timestamp: datetime = EPOCH
    prev_hash: str = ""
    """The preceding event's `hash` (empty for the first event)."""
    hash: str = ""
    """SHA-256 over `prev_hash` and this event's canonical encoding (see `chain`)."""


class Started(Event, frozen=True, kw_only=True, tag=True):
    """A conversation began (a fork: from another's version, never copying its events)."""

    title: str = ""
    labels: tuple[str, ...] = ()
    forked_from: UUID | None = None
    """The conversation this one was forked from (`convstore fork`), or None."""
    forked_at: int = 0
    """The version of `forked_from` it goes on from: its readings fold that conversation
    up to this version, then its own events (`ConversationService.history`)."""


class TurnStarted(Event, frozen=True, kw_only=True, tag=True):
    """A turn began: one user query and every round-trip until the assistant yields."""

    turn_id: TurnId
    trigger: TurnTrigger = "user"


class TurnEnded(Event, frozen=True, kw_only=True, tag=True):
    """A turn ended."""

    turn_id: TurnId
    state: EndState = "completed"
    reason: str = ""


class UserMessage(Event, frozen=True, kw_only=True, tag=True):
    """The user's text blocks."""

    blocks: tuple[str, ...]


class ContextInjected(Event, frozen=True, kw_only=True, tag=True):
    """Mid-conversation context or steering; encoders render it as a tagged user envelope."""

    source: str
    """E.g. `steering` or `context`."""
    text: str


class ResponseStarted(Event, frozen=True, kw_only=True, tag=True):
    """A provider response began; its events follow until ResponseEnded."""

    response_id: ResponseId
    provider: Provider
    model: str = ""
    settings: RequestSettings = RequestSettings()
    origin: ResponseOrigin = "provider"
    writer: Writer | None = None
    """The writing process, so a response left open by a dead writer can be closed."""
    attempt: int = 1
    """Which copy of the response this is: a response is identified by (response id,
    attempt). A copy cut short (ended `abandoned`) is completed by recording the whole
    response again as the next attempt; readings use the newest attempt, at the position
    of the first (see `domain.attempts`)."""


class ResponseEnded(Event, frozen=True, kw_only=True, tag=True):
    """A provider response ended."""

    response_id: ResponseId
    state: EndState
    finish_reason: FinishReason = "other"
    stop_reason: str | None = None
    """The provider's own stop reason, verbatim."""
    usage: Usage | None = None
    error: ErrorInfo | None = None
    digest: str = ""
    """A digest of the response's content, so a re-ingested response id can be compared."""
    end_reason: str = ""
    """Why we, not the provider, ended it: `interrupted` (SIGINT or SIGTERM while it
    streamed; what arrived is kept). Empty when the stream itself ended it."""


class AssistantText(Event, frozen=True, kw_only=True, tag=True):
    """One block of assistant text with its citations."""

    response_id: ResponseId
    text: str
    attributions: tuple[Attribution, ...] = ()
    attributions_complete: bool = True
    """False when the stream was cut before the block's citations finished."""
    payload: ProviderPayload | None = None


class Reasoning(Event, frozen=True, kw_only=True, tag=True):
    """Model reasoning; partial reasoning is stored without its signature."""

    response_id: ResponseId
    text: str = ""
    redacted: bool = False
    payload: ProviderPayload | None = None
    """Signature or encrypted content, for exact replay."""


class ToolCallRequested(Event, frozen=True, kw_only=True, tag=True):
    """A client tool call this system must dispatch; never made up for hosted work."""

    response_id: ResponseId
    call_id: CallId
    name: str
    arguments: dict[str, Any] = {}
    payload: ProviderPayload | None = None


class ToolCallResponded(Event, frozen=True, kw_only=True, tag=True):
    """The result of a client tool call."""

    call_id: CallId
    content: str = ""
    is_error: bool = False
    synthetic: bool = False
    """True for a repair: the call was interrupted and never answered."""
    payload: ProviderPayload | None = None


class HostedActivity(Event, frozen=True, kw_only=True, tag=True):
    """One lifecycle transition of work the provider ran itself (search, code execution)."""

    activity_id: ActivityId
    name: str
    """A capability name, e.g. `web_search`."""
    state: Lifecycle
    response_id: ResponseId | None = None
    """The response that reported the transition; None for an explicit abandonment."""
    input: dict[str, Any] = {}
    """The normalized invocation input, e.g. `{"query": ...}`."""
    summary: str = ""
    display: Display | None = None
    payload: ProviderPayload | None = None


class Retitled(Event, frozen=True, kw_only=True, tag=True):
    """The conversation's title was changed (`convstore title`); outside any response."""

    title: str
    """The new title, trimmed (`domain.metadata.title`); empty: the conversation has none."""


class Relabelled(Event, frozen=True, kw_only=True, tag=True):
    """Labels were put on the conversation or taken off it (`convstore label`); outside
    any response. It records a change only: each added label was not on it, each removed
    one was."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


class Forgotten(Event, frozen=True, kw_only=True, tag=True):
    """The conversation was forgotten (`convstore forget`): its data key is destroyed
    after this event is committed, and every reader treats it as forgotten from then on.
    Stored in clear (never sealed); it records when (its timestamp) and why, never the
    content. Nothing may follow it."""

    reason: str = ""


class Redacted(Event, frozen=True, kw_only=True, tag=True):
    """A span of an earlier event's text, or all of it, is hidden from every portable
    reading (`convstore redact`; `domain.redaction`). An overlay: the stored bytes of that
    event stay as they were (erasure is `forget`'s). Outside any response."""

    event_version: int
    """The version of the event whose text is hidden (in this conversation's own log)."""
    span: tuple[int, int] | None = None
    """The half-open span of Unicode code points of its stored text that is hidden; None:
    all of it."""
    reason: str = ""


class UnknownArtifact(Event, frozen=True, kw_only=True, tag=True):
    """A block or item its adapter does not recognise: kept, replayed to its own provider."""

    payload: ProviderPayload
    response_id: ResponseId | None = None


ConversationEvent: TypeAlias = (
    Started
    | TurnStarted
    | TurnEnded
    | UserMessage
    | ContextInjected
    | ResponseStarted
    | ResponseEnded
    | AssistantText
    | Reasoning
    | ToolCallRequested
    | ToolCallResponded
    | HostedActivity
    | UnknownArtifact
    | Retitled
    | Relabelled
    | Forgotten
    | Redacted
)
"""Every event a conversation records."""

EVENT_TYPES: Final[tuple[type[Event], ...]] = (
    Started,
    TurnStarted,
    TurnEnded,
    UserMessage,
    ContextInjected,
    ResponseStarted,
    ResponseEnded,
    AssistantText,
    Reasoning,
    ToolCallRequested,
    ToolCallResponded,
    HostedActivity,
    UnknownArtifact,
    Retitled,
    Relabelled,
    Forgotten,
    Redacted,
)
