"""The portable reading of a conversation: what was said, searched, cited, called and spent.

A pure fold of one conversation's events, in one pass, into plain msgspec Structs that
any provider, tool or person can read: turns, and in each turn its items in event order
(user text, injected context, responses, assistant text with citations, reasoning, tool
calls with their results, hosted activities, placeholders for unknown artifacts). Memory
is proportional to the conversation's portable content; nothing else is kept.

What never appears: a ProviderPayload's value (signatures, encrypted content, encrypted
indexes, raw blocks), of which only an unknown artifact's provider, format and size are
shown; and a Display's content (only that the obligation exists: its kind, its content
type, and the links its anchors hold, read best effort by `anchors.links`, never its
markup). Text is stored text, unsanitized: `export` makes it inert for each output.

Schema `convstore.portable/1`. The rule for evolution (msgspec's): within one version, a
change may only add a field with a default, so every reader of the version keeps reading
(msgspec ignores fields it does not know). Anything else (a removed, renamed or retyped
field, a new item kind, which typed readers would refuse, or a changed meaning) is a new
version, `convstore.portable/2`; the `schema` field names it, and a typed decoder of one
version refuses a document of another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, Final, Literal, TypeAlias
from uuid import UUID

import msgspec

from convstore.domain import (
    AssistantText,
    Attribution,
    ContextInjected,
    ConversationId,
    ConversationService,
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
from convstore.domain.attempts import reading
from convstore.domain.errors import ConversationNotFound
from convstore.domain.metadata import relabelled
from convstore.domain.redaction import overlay
from convstore.domain.vocabulary import (
    EndState,
    FinishReason,
    Lifecycle,
    NoticeKind,
    PayloadReading,
    ProviderPayload,
    ResponseOrigin,
    Source,
    SourceKind,
    TurnTrigger,
)
from convstore.projections.anchors import links

SCHEMA: Final = "convstore.portable/1"
"""The schema this module writes and reads."""

Schema: TypeAlias = Literal["convstore.portable/1"]


# --- citations ----------------------------------------------------------------------------


class Span(msgspec.Struct, frozen=True, kw_only=True):
    """A half-open span of Unicode code points in the text it belongs to."""

    start: int
    """The first code point."""
    end: int
    """One past the last code point."""


class CitedLocation(msgspec.Struct, frozen=True, kw_only=True):
    """Where in a document a cited passage lies."""

    unit: Literal["char", "page", "block"]
    """What `start` and `end` count: characters, pages or content blocks."""
    start: int
    """The first unit."""
    end: int
    """One past the last unit."""
    document_index: int | None = None
    """The document's position in the request, where the provider names one."""


class CitedSource(msgspec.Struct, frozen=True, kw_only=True):
    """What a citation points at."""

    kind: SourceKind
    """`web` (a page), `document` (a document block), `file`, or `search_result`."""
    url: str | None = None
    """The page's address, for web sources."""
    title: str | None = None
    """The source's title, as the provider gave it."""
    id: str | None = None
    """A file id, a search result's source, or another provider-given identifier."""
    location: CitedLocation | None = None
    """The passage's place in a document, where the provider gives one."""


class Citation(msgspec.Struct, frozen=True, kw_only=True):
    """A citation attached to assistant text."""

    source: CitedSource
    """What is cited."""
    excerpt: str | None = None
    """Text quoted from the source."""
    range: Span | None = None
    """The cited span of the text item's `text`, where the provider gives one."""
    unplaced: str = ""
    """Why the provider's offsets were not kept as `range`: they did not fit the text."""


# --- items --------------------------------------------------------------------------------


class Item(msgspec.Struct, kw_only=True, tag_field="kind"):
    """One thing in a turn, in event order; `kind` tells which."""

    version: int
    """The version of the event the item comes from (its first event, for folded items)."""


class UserItem(Item, kw_only=True, tag="user"):
    """The user's message."""

    blocks: list[str]
    """Its text blocks, in order."""


class ContextItem(Item, kw_only=True, tag="context"):
    """Context or steering injected mid-conversation: data, never an instruction's role."""

    source: str
    """Where it came from, e.g. `steering` or `context`."""
    text: str
    """The injected text."""


class ToolInfo(msgspec.Struct, kw_only=True):
    """A tool declared on the request a response answered."""

    name: str
    """The tool's name."""
    hosted: bool = False
    """True when the provider runs it (web search, code execution)."""
    native_type: str = ""
    """The provider's own tool type, e.g. `web_search_20250305`; empty for plain functions."""
    description: str = ""
    """The description the model was given."""


class UsageInfo(msgspec.Struct, kw_only=True):
    """Usage counters of one response, as the provider reported them."""

    input_tokens: int | None = None
    """Tokens read."""
    output_tokens: int | None = None
    """Tokens written."""
    cache_read_tokens: int | None = None
    """Tokens read from the prompt cache."""
    cache_write_tokens: int | None = None
    """Tokens written to the prompt cache."""
    reasoning_tokens: int | None = None
    """Tokens of reasoning, where counted apart."""
    hosted: dict[str, int] = {}
    """Counters of hosted work, e.g. `{"web_search_requests": 1}`."""
    other: dict[str, int] = {}
    """Every other counter the provider reported, under its own name."""


class ErrorDetail(msgspec.Struct, kw_only=True):
    """A provider's error, as it reported it."""

    type: str
    """The provider's error type."""
    message: str = ""
    """Its message."""
    status: int | None = None
    """The HTTP status, when the error came as an HTTP error body."""


class NoticeInfo(msgspec.Struct, kw_only=True):
    """Something the provider said about a response besides its content."""

    kind: NoticeKind
    """`refusal`, `safety`, `blocked`, `incomplete`, `error`, `finish_message`,
    `stop_sequence`, `screening`, `container` or `context_management`."""
    code: str = ""
    """The provider's category, reason or id, verbatim."""
    message: str = ""
    """The provider's own words for a person."""
    details: dict[str, str] = {}
    """Further named values as the provider gave them."""


class ResponseItem(Item, kw_only=True, tag="response"):
    """One provider response: where it started, and how it ended."""

    id: str
    """The response id; content items name it in `response_id`."""
    provider: str
    """`anthropic`, `openai`, `google`, …"""
    model: str = ""
    """The model that answered."""
    origin: ResponseOrigin = "provider"
    """`provider`: a response it sent; `request`: assistant history found in a request."""
    system: str | None = None
    """The system prompt of the request, as text."""
    tools: list[ToolInfo] = []
    """The tools the request declared."""
    state: EndState | None = None
    """`completed`, `failed` or `abandoned`; None while the response is open."""
    finish_reason: FinishReason | None = None
    """The normalized reason it ended."""
    stop_reason: str | None = None
    """The provider's own stop reason, verbatim."""
    end_reason: str = ""
    """Why we ended it, not the provider: `interrupted` (a signal while it streamed)."""
    usage: UsageInfo | None = None
    """What the response spent."""
    error: ErrorDetail | None = None
    """The provider's error, for a response that failed."""
    notices: list[NoticeInfo] = []
    """What the provider said about it besides its content: refusal details, safety
    ratings, why it is incomplete, its container, …"""
    end_version: int | None = None
    """The version of the event that ended it."""
    started: datetime | None = None
    """When its ResponseStarted was recorded."""
    ended: datetime | None = None
    """When its ResponseEnded was recorded; None while open."""


class TextItem(Item, kw_only=True, tag="text"):
    """One block of assistant text with its citations."""

    response_id: str | None = None
    """The response it belongs to."""
    text: str
    """The text."""
    citations: list[Citation] = []
    """What the text cites, in the provider's order."""
    citations_complete: bool = True
    """False when the stream was cut before the block's citations finished."""


class ReasoningItem(Item, kw_only=True, tag="reasoning"):
    """Model reasoning, as readable text."""

    response_id: str | None = None
    """The response it belongs to."""
    text: str = ""
    """The reasoning text (empty when redacted)."""
    redacted: bool = False
    """True when the provider sent it encrypted only: there is nothing to read."""


class ToolResult(msgspec.Struct, kw_only=True):
    """The answer to a client tool call."""

    version: int
    """The version of the event that answered."""
    content: str = ""
    """What the tool returned."""
    is_error: bool = False
    """True when the tool reported an error."""
    synthetic: bool = False
    """True for a repair: the call was interrupted and never answered."""


class ToolCallItem(Item, kw_only=True, tag="tool_call"):
    """A client tool call with its result, matched by call id."""

    response_id: str | None = None
    """The response that asked for it."""
    call_id: str
    """The provider's call id."""
    name: str
    """The tool's name."""
    arguments: dict[str, Any] = {}
    """The arguments the model gave."""
    result: ToolResult | None = None
    """The result; None while the call is unanswered."""


class Transition(msgspec.Struct, kw_only=True):
    """One recorded lifecycle step of a hosted activity."""

    version: int
    """The version of the event that recorded it."""
    state: Lifecycle
    """The state it entered."""
    response_id: str | None = None
    """The response that reported it; None for an explicit abandonment."""


class DisplayLink(msgspec.Struct, kw_only=True):
    """One link of a display obligation's content (an HTML anchor), as text and address."""

    text: str
    """The anchor's text (e.g. a suggested search)."""
    url: str
    """Its `href`, as the provider wrote it; untrusted."""


class DisplayObligation(msgspec.Struct, kw_only=True):
    """A provider's display obligation: that one exists and its links, never its content."""

    kind: str
    """E.g. `search_suggestion` (Google's Search Suggestion)."""
    content_type: str
    """The type of the content a renderer would have to show, e.g. `text/html`."""
    links: list[DisplayLink] = []
    """The links of its HTML content's anchors, in order (best effort: the markup itself
    is never kept here; the web viewer shows the content as the provider requires)."""


class ActivityOutput(msgspec.Struct, kw_only=True):
    """What a hosted code run wrote on one channel, as its provider's adapter read it."""

    channel: str
    """`stdout`, `stderr`, `logs`, `output` (stdout and stderr mixed), `file`, `diff` or
    `error`."""
    text: str
    """The text written."""


class ActivityItem(Item, kw_only=True, tag="activity"):
    """Work the provider ran itself (a search, a fetch, code), every transition folded in."""

    response_id: str | None = None
    """The response that reported it first."""
    activity_id: str
    """The activity's id."""
    name: str
    """A capability name, e.g. `web_search`."""
    state: Lifecycle
    """The last state recorded: `started` means it never finished."""
    input: dict[str, Any] = {}
    """The normalized invocation input, e.g. `{"query": ...}`."""
    summary: str = ""
    """The last summary reported, e.g. `3 results`."""
    display: DisplayObligation | None = None
    """A display obligation that came with it."""
    sources: list[CitedSource] = []
    """Sources it consulted, as the provider listed them (cited or not)."""
    transitions: list[Transition] = []
    """Every recorded step, in order."""
    outputs: list[ActivityOutput] = []
    """What a code run wrote, read from its result, in order."""


class UnknownItem(Item, kw_only=True, tag="unknown"):
    """A placeholder for a block its adapter did not recognise (kept in the store)."""

    response_id: str | None = None
    """The response it came in, if any."""
    provider: str
    """The provider that sent it."""
    format: str
    """The provider's name for its format."""
    size: int
    """Its size in bytes."""


AnyItem: TypeAlias = (
    UserItem
    | ContextItem
    | ResponseItem
    | TextItem
    | ReasoningItem
    | ToolCallItem
    | ActivityItem
    | UnknownItem
)
"""Every item kind of this schema version."""


# --- the document -------------------------------------------------------------------------


class Turn(msgspec.Struct, kw_only=True):
    """One user query and every round-trip until the assistant yielded."""

    id: str | None
    """The turn id; None for events recorded outside any turn."""
    trigger: TurnTrigger | None = None
    """What opened it: `user`, `tool_results`, `continuation` or `steering`."""
    state: EndState | None = None
    """How it ended; None while it is open."""
    reason: str = ""
    """Why it ended, where recorded."""
    version: int
    """The version of the event that opened it (its first item's, outside a turn)."""
    items: list[AnyItem] = []
    """What happened in it, in event order."""
    started: datetime | None = None
    """When it was opened (its first item's time, outside a turn)."""
    ended: datetime | None = None
    """When it ended; None while open, and outside a turn."""


class PortableConversation(msgspec.Struct, kw_only=True):
    """One conversation's portable reading: the document the JSON export writes."""

    schema: Schema = SCHEMA
    """The schema name and version; see the module's rule for evolution."""
    id: UUID
    """The conversation's id."""
    title: str = ""
    """Its current title (its Started's, or its newest Retitled's)."""
    labels: list[str] = []
    """Its current labels (its Started's, changed by each Relabelled)."""
    created: datetime | None = None
    """When it started."""
    version: int = 0
    """The newest event folded: the reading is as of this version."""
    turns: list[Turn] = []
    """Its turns, in order."""


DECODER: Final = msgspec.json.Decoder(PortableConversation)
"""Validates and decodes one JSON document of this schema version."""


# --- the fold -----------------------------------------------------------------------------


Interpret: TypeAlias = Callable[[ProviderPayload], PayloadReading | None]
"""Reads a provider's payload into notices and sources (the provider adapters'
`read_payload`); None leaves the payload unread."""


def fold(events: Iterable[Event], interpret: Interpret | None = None) -> PortableConversation:
    """The portable reading of one conversation's events, in version order; `interpret`
    reads what the provider's adapter types out of payloads (notices, sources). Each
    response is read from its newest attempt (`domain.attempts`), each redacted text
    with its hidden spans marked (`domain.redaction`)."""
    log = events if isinstance(events, list) else list(events)
    reader = PortableFold(interpret)
    for event in reading(overlay(log)):
        reader.add(event)
    if log:  # as of the newest event, though the reading may leave it out
        reader.conversation.version = max(reader.conversation.version, log[-1].originator_version)
    return reader.conversation


class PortableFold:
    """The fold's state: the reading so far, and where folded items live by id."""

    def __init__(self, interpret: Interpret | None = None) -> None:
        self.conversation = PortableConversation(id=UUID(int=0))
        self._interpret = interpret
        self._turn: Turn | None = None
        self._turns: dict[str, Turn] = {}
        self._responses: dict[str, ResponseItem] = {}
        self._calls: dict[str, ToolCallItem] = {}
        self._activities: dict[str, ActivityItem] = {}
        self._now: datetime | None = None
        """The time of the event being folded."""

    def add(self, event: Event) -> None:
        """Fold in the next event."""
        conversation = self.conversation
        if conversation.version == 0:
            conversation.id = event.originator_id
        conversation.version = max(conversation.version, event.originator_version)
        self._now = event.timestamp
        handler = _FOLDS.get(type(event))
        if handler is not None:
            handler(self, event)

    def _items(self, version: int) -> list[AnyItem]:
        """The open turn's items; events outside any turn open an implicit one."""
        if self._turn is None:
            self._turn = Turn(id=None, version=version, items=[], started=self._now)
            self.conversation.turns.append(self._turn)
        return self._turn.items

    def _started(self, event: Started) -> None:
        self.conversation.title = event.title
        self.conversation.labels = list(event.labels)
        self.conversation.created = event.timestamp

    def _retitled(self, event: Retitled) -> None:
        self.conversation.title = event.title

    def _relabelled(self, event: Relabelled) -> None:
        self.conversation.labels = list(
            relabelled(tuple(self.conversation.labels), event.added, event.removed)
        )

    def _turn_started(self, event: TurnStarted) -> None:
        turn = Turn(
            id=event.turn_id,
            trigger=event.trigger,
            version=event.originator_version,
            items=[],
            started=event.timestamp,
        )
        self.conversation.turns.append(turn)
        self._turns[event.turn_id] = self._turn = turn

    def _turn_ended(self, event: TurnEnded) -> None:
        turn = self._turns.get(event.turn_id)
        if turn is None:  # an end without a start (the aggregate refuses one): keep the fact
            turn = Turn(id=event.turn_id, version=event.originator_version, items=[])
            self.conversation.turns.append(turn)
        turn.state, turn.reason, turn.ended = event.state, event.reason, event.timestamp
        self._turn = None

    def _user(self, event: UserMessage) -> None:
        version = event.originator_version
        self._items(version).append(UserItem(version=version, blocks=list(event.blocks)))

    def _context(self, event: ContextInjected) -> None:
        version = event.originator_version
        item = ContextItem(version=version, source=event.source, text=event.text)
        self._items(version).append(item)

    def _response_started(self, event: ResponseStarted) -> None:
        version, settings = event.originator_version, event.settings
        item = ResponseItem(
            version=version,
            id=event.response_id,
            provider=event.provider,
            model=event.model,
            origin=event.origin,
            system=settings.system,
            tools=[
                ToolInfo(
                    name=tool.name,
                    hosted=tool.hosted,
                    native_type=tool.native_type,
                    description=tool.description,
                )
                for tool in settings.tools
            ],
            started=event.timestamp,
        )
        self._responses[event.response_id] = item
        self._items(version).append(item)

    def _response_ended(self, event: ResponseEnded) -> None:
        item = self._responses.get(event.response_id)
        if item is None:  # an end without a start: keep what it says
            item = ResponseItem(version=event.originator_version, id=event.response_id, provider="")
            self._responses[event.response_id] = item
            self._items(event.originator_version).append(item)
        item.state = event.state
        item.finish_reason = event.finish_reason
        item.stop_reason = event.stop_reason
        item.end_reason = event.end_reason
        item.end_version = event.originator_version
        item.ended = event.timestamp
        usage = event.usage
        if usage is not None:
            item.usage = UsageInfo(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                reasoning_tokens=usage.reasoning_tokens,
                hosted=dict(usage.hosted),
                other=dict(usage.other),
            )
        error = event.error
        if error is not None:
            item.error = ErrorDetail(type=error.type, message=error.message, status=error.status)

    def _text(self, event: AssistantText) -> None:
        version = event.originator_version
        item = TextItem(
            version=version,
            response_id=event.response_id,
            text=event.text,
            citations=[_citation(attribution) for attribution in event.attributions],
            citations_complete=event.attributions_complete,
        )
        self._items(version).append(item)

    def _reasoning(self, event: Reasoning) -> None:
        version = event.originator_version
        item = ReasoningItem(
            version=version,
            response_id=event.response_id,
            text=event.text,
            redacted=event.redacted,
        )
        self._items(version).append(item)

    def _tool_call(self, event: ToolCallRequested) -> None:
        version = event.originator_version
        item = ToolCallItem(
            version=version,
            response_id=event.response_id,
            call_id=event.call_id,
            name=event.name,
            arguments=dict(event.arguments),
        )
        self._calls[event.call_id] = item
        self._items(version).append(item)

    def _tool_result(self, event: ToolCallResponded) -> None:
        version = event.originator_version
        item = self._calls.get(event.call_id)
        if item is None:  # a result naming no call (the aggregate refuses one): keep it
            item = ToolCallItem(version=version, call_id=event.call_id, name="")
            self._calls[event.call_id] = item
            self._items(version).append(item)
        item.result = ToolResult(
            version=version,
            content=event.content,
            is_error=event.is_error,
            synthetic=event.synthetic,
        )

    def _activity(self, event: HostedActivity) -> None:
        version = event.originator_version
        item = self._activities.get(event.activity_id)
        if item is None:
            item = ActivityItem(
                version=version,
                response_id=event.response_id,
                activity_id=event.activity_id,
                name=event.name,
                state=event.state,
                transitions=[],
            )
            self._activities[event.activity_id] = item
            self._items(version).append(item)
        item.state = event.state
        if event.input and not item.input:
            item.input = dict(event.input)
        if event.summary:
            item.summary = event.summary
        if event.display is not None:
            display = event.display
            item.display = DisplayObligation(
                kind=display.kind,
                content_type=display.content_type,
                links=[DisplayLink(text=text, url=url) for text, url in links(display)],
            )
        item.transitions.append(
            Transition(version=version, state=event.state, response_id=event.response_id)
        )
        reading = self._read(event.payload)
        if reading is not None:
            known = {source.url for source in item.sources}
            item.sources.extend(
                _cited_source(source) for source in reading.sources if source.url not in known
            )
            item.outputs.extend(
                ActivityOutput(channel=output.channel, text=output.text)
                for output in reading.outputs
            )

    def _read(self, payload: ProviderPayload | None) -> PayloadReading | None:
        if payload is None or self._interpret is None:
            return None
        return self._interpret(payload)

    def _unknown(self, event: UnknownArtifact) -> None:
        version, payload = event.originator_version, event.payload
        response = self._responses.get(event.response_id or "")
        reading = self._read(payload)
        # A kind now typed reads as notices (or as nothing to say); sources and outputs
        # alone belong to an activity, so such an artifact stays shown as unknown.
        if (
            reading is not None
            and response is not None
            and (reading.notices or not (reading.sources or reading.outputs))
        ):
            response.notices.extend(
                NoticeInfo(
                    kind=notice.kind,
                    code=notice.code,
                    message=notice.message,
                    details=dict(notice.details),
                )
                for notice in reading.notices
            )
            return
        item = UnknownItem(
            version=version,
            response_id=event.response_id,
            provider=payload.provider,
            format=payload.format,
            size=len(payload.value),  # its size only: the value is never read
        )
        self._items(version).append(item)


def _cited_source(source: Source) -> CitedSource:
    location = source.location
    return CitedSource(
        kind=source.kind,
        url=source.url,
        title=source.title,
        id=source.id,
        location=None
        if location is None
        else CitedLocation(
            unit=location.unit,
            start=location.start,
            end=location.end,
            document_index=location.document_index,
        ),
    )


def _citation(attribution: Attribution) -> Citation:
    span = attribution.range
    return Citation(
        source=_cited_source(attribution.source),
        excerpt=attribution.excerpt,
        range=None if span is None else Span(start=span.start, end=span.end),
        unplaced=attribution.unplaced,
    )


_FOLDS: Final[dict[type[Event], Callable[[PortableFold, Any], None]]] = {
    Started: PortableFold._started,
    TurnStarted: PortableFold._turn_started,
    TurnEnded: PortableFold._turn_ended,
    UserMessage: PortableFold._user,
    ContextInjected: PortableFold._context,
    ResponseStarted: PortableFold._response_started,
    ResponseEnded: PortableFold._response_ended,
    AssistantText: PortableFold._text,
    Reasoning: PortableFold._reasoning,
    ToolCallRequested: PortableFold._tool_call,
    ToolCallResponded: PortableFold._tool_result,
    HostedActivity: PortableFold._activity,
    UnknownArtifact: PortableFold._unknown,
    Retitled: PortableFold._retitled,
    Relabelled: PortableFold._relabelled,
}


# --- reading from the store ---------------------------------------------------------------


def load(
    service: ConversationService,
    conversation_id: ConversationId,
    interpret: Interpret | None = None,
) -> PortableConversation:
    """The portable reading of one stored conversation; raises ConversationNotFound."""
    reading = fold(service.history(conversation_id), interpret)
    if reading.version == 0:
        raise ConversationNotFound(f"no conversation {conversation_id}")
    return reading


def load_all(
    service: ConversationService, *, page: int = 100, interpret: Interpret | None = None
) -> Iterator[PortableConversation]:
    """Every stored conversation's reading, oldest first, one at a time (memory stays flat).

    Pages by position; conversations started meanwhile come last, so none is skipped.
    """
    offset = 0
    while True:
        summaries = service.list(offset=offset, limit=page)
        for summary in summaries:
            yield load(service, summary.id, interpret)
        if len(summaries) < page:
            return
        offset += len(summaries)
