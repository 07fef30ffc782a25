"""The transcript a person reads, built once; the terminal (`show`), the Markdown export
and the web view only render it.

`present(reading, chain)` turns the portable reading (`portable.fold` / `load`, with the
provider adapters' `read_payload` to type notices, sources and code outputs) and the
chain status (`chain.chain_status`) into a `Transcript`: turns, each with its times, its
responses (model, ids, stop reasons, usage, typed notices) and the hosted work it spent
(counted from its recorded activities, `wording.hosted_spend`), and in each, in order,
what a person reads:

- `Said`: the user's text, injected context;
- `Answer`: consecutive assistant text blocks of one response joined (Anthropic sends one
  block per cited passage), cut into `Segment`s after each cited span, the markers `[n]`
  numbered per answer, with that answer's `Sources`;
- `Thought`: reasoning (or that it was redacted);
- `Activity`: one hosted activity, every transition folded in: its line and its outcome
  in the one wording of every provider (`⚒ web search: "q" → 3 results`), a code run's
  code and outputs, a display obligation's links (Google's Search Suggestions);
- `Call`: a client tool call with its result;
- `Unknown`: an artifact no adapter types (kept in the store, never shown).

Content sits in the `Response` that produced it; what no open response produced (an
explicit abandonment, a repair's result) sits in the turn itself. Strings are stored
text, unsanitized; the wording's own lines (`label`, `outcome`) are one line each. Each
renderer makes them inert for its output.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, Literal, TypeAlias
from uuid import UUID

import msgspec

from convstore.projections.chain import ChainStatus
from convstore.projections.portable import (
    ActivityItem,
    ActivityOutput,
    AnyItem,
    Citation,
    CitedSource,
    ContextItem,
    DisplayLink,
    ErrorDetail,
    NoticeInfo,
    PortableConversation,
    ReasoningItem,
    ResponseItem,
    TextItem,
    ToolCallItem,
    ToolInfo,
    ToolResult,
    Turn,
    UnknownItem,
    UsageInfo,
    UserItem,
)
from convstore.projections.wording import (
    ACTIVITY_MARK,
    OUTCOME_ARROW,
    activity_label,
    activity_outcome,
    citation_marks,
    code_of,
    hosted_spend,
)


class Segment(msgspec.Struct, kw_only=True):
    """A piece of an answer's text, and the citation markers that follow it."""

    text: str
    """Stored text."""
    marks: list[int] = []
    """The numbers of the sources cited by the span that ends here, shown `[n]`."""


class SourceRef(msgspec.Struct, kw_only=True):
    """One entry of an answer's source list."""

    number: int
    """Its marker's number (1, 2, … per answer)."""
    source: CitedSource
    """What is cited."""
    excerpt: str | None = None
    """The passage quoted from it, where the provider gave one."""


class Said(msgspec.Struct, kw_only=True, tag="said"):
    """The user's message, or context injected mid-conversation (data, never a role)."""

    version: int
    role: Literal["user", "context"]
    text: str
    """The text (a user message's blocks joined by a blank line)."""
    source: str = ""
    """Where injected context came from (`steering`, `context`)."""


class Answer(msgspec.Struct, kw_only=True, tag="answer"):
    """Assistant text with its citation markers and its source list."""

    version: int
    response_id: str | None
    segments: list[Segment]
    sources: list[SourceRef] = []
    complete: bool = True
    """False when the stream was cut before its citations finished."""

    @property
    def text(self) -> str:
        """The text without markers."""
        return "".join(segment.text for segment in self.segments)


class Thought(msgspec.Struct, kw_only=True, tag="reasoning"):
    """Model reasoning."""

    version: int
    response_id: str | None
    text: str = ""
    redacted: bool = False
    """True when only encrypted reasoning exists: nothing to read."""


class Activity(msgspec.Struct, kw_only=True, tag="activity"):
    """One hosted activity as a person reads it."""

    version: int
    response_id: str | None
    activity_id: str
    name: str
    state: str
    """Its newest state."""
    label: str
    """`web search: "query"` (`wording.activity_label`; one line)."""
    outcome: str
    """`3 results`, `failed: max_uses_exceeded`, `pending` (`wording.activity_outcome`)."""
    input: dict[str, Any] = {}
    """Its normalized input, as recorded."""
    code: str | None = None
    """The code a code run was given (its input), shown as a block."""
    language: str = ""
    """The code's language, where known."""
    outputs: list[ActivityOutput] = []
    """What the run wrote, from its recorded result, shown as blocks."""
    display: str = ""
    """The kind of display obligation that came with it (`search_suggestion`), if any."""
    links: list[DisplayLink] = []
    """The obligation's links (Google's suggested searches), taken from its anchors."""

    @property
    def line(self) -> str:
        """`⚒ web search: "query" → 3 results`."""
        return f"{ACTIVITY_MARK} {self.label} {OUTCOME_ARROW} {self.outcome}"


class Call(msgspec.Struct, kw_only=True, tag="tool_call"):
    """A client tool call and its result."""

    version: int
    response_id: str | None
    call_id: str
    name: str
    arguments: dict[str, Any] = {}
    result: ToolResult | None = None
    """None while unanswered."""


class Unknown(msgspec.Struct, kw_only=True, tag="unknown"):
    """An artifact no adapter types: kept in the store, its content never shown."""

    version: int
    response_id: str | None
    provider: str
    format: str
    size: int


Content: TypeAlias = Answer | Thought | Activity | Call | Unknown
"""What a response produced."""


class Response(msgspec.Struct, kw_only=True, tag="response"):
    """One provider response and what it produced."""

    version: int
    id: str
    provider: str
    model: str = ""
    origin: str = "provider"
    """`request`: assistant history found in a request, not a response received."""
    system: str | None = None
    """The request's system prompt, when it differs from the previous response's."""
    tools: list[ToolInfo] = []
    started: datetime | None = None
    ended: datetime | None = None
    state: str | None = None
    """`completed`, `failed`, `abandoned`; None while open."""
    finish_reason: str | None = None
    stop_reason: str | None = None
    """The provider's own, verbatim."""
    end_reason: str = ""
    """Why we ended it (`interrupted`), where we did."""
    usage: UsageInfo | None = None
    error: ErrorDetail | None = None
    notices: list[NoticeInfo] = []
    """Typed details: a refusal's explanation, safety ratings, a finish message, …"""
    content: list[Content] = []


Part: TypeAlias = Said | Response | Content
"""What a turn holds."""


class TurnView(msgspec.Struct, kw_only=True):
    """One turn as a person reads it."""

    id: str | None
    """None for events recorded outside any turn."""
    trigger: str | None = None
    state: str | None = None
    reason: str = ""
    started: datetime | None = None
    ended: datetime | None = None
    parts: list[Part] = []
    spend: list[str] = []
    """Its hosted work counted from its activities: `2 searches`, `1 code run`."""
    usage: UsageInfo | None = None
    """Its responses' token counters summed (None when none reported any)."""
    stop_reason: str | None = None
    """The last response's stop reason (the provider's own, else the normalized one)."""

    @property
    def responses(self) -> list[Response]:
        """Its responses, in order."""
        return [part for part in self.parts if isinstance(part, Response)]


class Transcript(msgspec.Struct, kw_only=True):
    """A conversation as a person reads it."""

    id: UUID
    title: str = ""
    labels: list[str] = []
    created: datetime | None = None
    version: int = 0
    """The reading is as of this version."""
    chain: ChainStatus | None = None
    """Whether the stored chain behind it holds; None when not checked."""
    turns: list[TurnView] = []


# --- building it ---------------------------------------------------------------------------


def present(reading: PortableConversation, chain: ChainStatus | None = None) -> Transcript:
    """The transcript of a portable reading (see the module)."""
    builder = _Builder(reading)
    return Transcript(
        id=reading.id,
        title=reading.title,
        labels=list(reading.labels),
        created=reading.created,
        version=reading.version,
        chain=chain,
        turns=[builder.turn(turn) for turn in reading.turns],
    )


class _Builder:
    def __init__(self, reading: PortableConversation) -> None:
        self.responses = {
            item.id: item
            for turn in reading.turns
            for item in turn.items
            if isinstance(item, ResponseItem)
        }
        self.system: str | None = None

    def turn(self, turn: Turn) -> TurnView:
        view = TurnView(
            id=turn.id,
            trigger=turn.trigger,
            state=turn.state,
            reason=turn.reason,
            started=turn.started,
            ended=turn.ended,
            parts=[],
        )
        current: Response | None = None
        for group in _groups(turn.items):
            first = group[0]
            if isinstance(first, ResponseItem):
                current = self.response(first)
                view.parts.append(current)
                continue
            if isinstance(first, UserItem | ContextItem):
                current = None
                view.parts.append(_said(first))
                continue
            content = self.content(first, group)
            if current is not None and first.response_id == current.id:
                current.content.append(content)
            else:
                view.parts.append(content)
        activities = [i for i in turn.items if isinstance(i, ActivityItem)]
        view.spend = hosted_spend((a.name, a.input, a.state) for a in activities)
        responses = view.responses
        view.usage = _summed([r.usage for r in responses if r.usage is not None])
        if responses:
            last = responses[-1]
            view.stop_reason = last.stop_reason or last.finish_reason
        return view

    def response(self, item: ResponseItem) -> Response:
        system = item.system if item.system and item.system != self.system else None
        self.system = item.system or self.system
        return Response(
            version=item.version,
            id=item.id,
            provider=item.provider,
            model=item.model,
            origin=item.origin,
            system=system,
            tools=list(item.tools),
            started=item.started,
            ended=item.ended,
            state=item.state,
            finish_reason=item.finish_reason,
            stop_reason=item.stop_reason,
            end_reason=item.end_reason,
            usage=item.usage,
            error=item.error,
            notices=list(item.notices),
            content=[],
        )

    def content(
        self,
        item: TextItem | ReasoningItem | ActivityItem | ToolCallItem | UnknownItem,
        group: list[AnyItem],
    ) -> Content:
        if isinstance(item, TextItem):
            return _answer([i for i in group if isinstance(i, TextItem)])
        if isinstance(item, ReasoningItem):
            return Thought(
                version=item.version,
                response_id=item.response_id,
                text=item.text,
                redacted=item.redacted,
            )
        if isinstance(item, ActivityItem):
            return self.activity(item)
        if isinstance(item, ToolCallItem):
            return Call(
                version=item.version,
                response_id=item.response_id,
                call_id=item.call_id,
                name=item.name,
                arguments=dict(item.arguments),
                result=item.result,
            )
        return Unknown(
            version=item.version,
            response_id=item.response_id,
            provider=item.provider,
            format=item.format,
            size=item.size,
        )

    def activity(self, item: ActivityItem) -> Activity:
        last = item.transitions[-1].response_id if item.transitions else item.response_id
        reporter = self.responses.get(last or "")
        code = code_of(item.name, item.input)
        display = item.display
        return Activity(
            version=item.version,
            response_id=item.response_id,
            activity_id=item.activity_id,
            name=item.name,
            state=item.state,
            label=activity_label(item.name, item.input),
            outcome=activity_outcome(
                item.state, item.summary, reporter.state if reporter is not None else None
            ),
            input=dict(item.input),
            code=code[0] if code is not None else None,
            language=code[1] if code is not None else "",
            outputs=list(item.outputs),
            display=display.kind if display is not None else "",
            links=list(display.links) if display is not None else [],
        )


def _groups(items: list[AnyItem]) -> Iterator[list[AnyItem]]:
    """The items one by one, except consecutive text items of one response, together."""
    group: list[AnyItem] = []
    for item in items:
        if (
            group
            and isinstance(item, TextItem)
            and isinstance(group[0], TextItem)
            and group[0].response_id == item.response_id
        ):
            group.append(item)
            continue
        if group:
            yield group
        group = [item]
    if group:
        yield group


def _said(item: UserItem | ContextItem) -> Said:
    if isinstance(item, UserItem):
        return Said(version=item.version, role="user", text="\n\n".join(item.blocks))
    return Said(version=item.version, role="context", text=item.text, source=item.source)


def _answer(texts: list[TextItem]) -> Answer:
    numbers: dict[CitedSource, int] = {}
    sources: list[SourceRef] = []

    def number(source: CitedSource) -> int:
        return numbers.setdefault(source, len(numbers) + 1)

    for text in texts:
        for citation in text.citations:
            n = number(citation.source)
            if n > len(sources):
                sources.append(SourceRef(number=n, source=citation.source))
            if sources[n - 1].excerpt is None and _excerpt(citation):
                sources[n - 1].excerpt = citation.excerpt
    pieces = citation_marks(((t.text, t.citations) for t in texts), number)
    return Answer(
        version=texts[0].version,
        response_id=texts[0].response_id,
        segments=[Segment(text=text, marks=marks) for text, marks in pieces],
        sources=sources,
        complete=all(text.citations_complete for text in texts),
    )


def _excerpt(citation: Citation) -> bool:
    return bool(citation.excerpt and citation.excerpt.strip())


def _summed(usages: list[UsageInfo]) -> UsageInfo | None:
    """The token counters of `usages` added up (a counter none reported stays None)."""
    if not usages:
        return None

    def total(name: str) -> int | None:
        counts = [getattr(u, name) for u in usages if getattr(u, name) is not None]
        return sum(counts) if counts else None

    hosted: dict[str, int] = {}
    for usage in usages:
        for key, value in usage.hosted.items():
            hosted[key] = hosted.get(key, 0) + value
    return UsageInfo(
        input_tokens=total("input_tokens"),
        output_tokens=total("output_tokens"),
        cache_read_tokens=total("cache_read_tokens"),
        cache_write_tokens=total("cache_write_tokens"),
        reasoning_tokens=total("reasoning_tokens"),
        hosted=hosted,
    )
