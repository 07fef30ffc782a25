"""What the command line shows: domain values as lines of text and as JSON data.

Pure functions from domain values to unsanitized text and plain data; the `Renderer`
sanitizes the lines and `to_json` escapes the data. A ProviderPayload's value is never
read here (only its size), and a Display's content is never shown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, Final
from uuid import UUID

import msgspec

from convstore.adapters.terminal.render import one_line, sanitize, shorten, to_json
from convstore.domain import (
    AssistantText,
    Attribution,
    ContextInjected,
    ConversationSummary,
    Event,
    HostedActivity,
    ProviderPayload,
    Reasoning,
    ResponseEnded,
    ResponseStarted,
    Source,
    Started,
    ToolCallRequested,
    ToolCallResponded,
    TurnEnded,
    TurnStarted,
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.attempts import reading
from convstore.domain.responses import ResponseOutcome
from convstore.projections.wording import (
    activity_label,
    cite,
    source_line,
    usage_counters,
    when,
)

__all__ = ["activity_label", "source_line", "when"]  # shared with the exports: one wording


def payload_data(payload: ProviderPayload) -> dict[str, Any]:
    """A payload's metadata (provider, format, version, size): never its value."""
    return {
        "provider": payload.provider,
        "format": payload.format,
        "version": payload.version,
        "size": len(payload.raw),
    }


def to_data(value: Any) -> Any:
    """Plain JSON data for a domain value, every ProviderPayload reduced to its metadata."""
    if isinstance(value, ProviderPayload):
        return payload_data(value)
    if isinstance(value, msgspec.Struct):
        config = value.__struct_config__
        data: dict[str, Any] = {}
        if config.tag_field is not None:
            data[config.tag_field] = config.tag
        for name in value.__struct_fields__:
            data[name] = to_data(getattr(value, name))
        return data
    if isinstance(value, dict):
        return {str(key): to_data(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_data(item) for item in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, msgspec.Raw | bytes):
        return {"size": len(value)}  # opaque bytes are never shown
    return value


def summary_line(summary: ConversationSummary) -> str:
    """One listing line: id, created, events, title."""
    title = one_line(summary.title) or "(untitled)"
    return f"{summary.id}  {when(summary.created_on)}  {summary.events:>6}  {title}"


def transcript(events: Iterable[Event]) -> Iterator[str]:
    """A conversation's events as readable lines, in order (unsanitized: render them);
    each response from its newest attempt (`domain.attempts`)."""
    reader = _Transcript()
    texts: list[AssistantText] = []
    for event in reading(events):
        if isinstance(event, AssistantText):
            texts.append(event)  # Anthropic sends one block per cited passage: join them
            continue
        if texts:
            yield from reader.assistant(texts)
            texts = []
        yield from reader.event(event)
    if texts:
        yield from reader.assistant(texts)


class _Transcript:
    """The reading state of one transcript: nesting, source numbers, activity inputs."""

    def __init__(self) -> None:
        self.in_turn = False
        self.in_response = False
        self.sources: dict[Source, int] = {}
        self.inputs: dict[str, dict[str, Any]] = {}

    @property
    def pad(self) -> str:
        return "  " * (self.in_turn + self.in_response)

    def block(self, label: str, text: str) -> Iterator[str]:
        first, *rest = sanitize(text).split("\n")
        yield f"{self.pad}{label}: {first}"
        for line in rest:
            yield f"{self.pad}  {line}" if line else ""

    def event(self, event: Event) -> Iterator[str]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            yield f"{self.pad}[{type(event).__name__} event]"
        else:
            yield from handler(self, event)

    def number(self, source: Source) -> int:
        return self.sources.setdefault(source, len(self.sources) + 1)

    def assistant(self, texts: list[AssistantText]) -> Iterator[str]:
        cited: dict[int, Attribution] = {}
        for event in texts:
            for attribution in event.attributions:
                cited.setdefault(self.number(attribution.source), attribution)
        text = cite(((event.text, event.attributions) for event in texts), self.number)
        yield from self.block("assistant", text.strip("\n") or "[no text]")
        for n, attribution in sorted(cited.items()):
            yield f"{self.pad}  {source_line(n, attribution.source)}"
            if attribution.excerpt:
                yield f"{self.pad}      “{shorten(attribution.excerpt, 100)}”"
        if not all(event.attributions_complete for event in texts):
            yield f"{self.pad}  (citations may be incomplete: the response broke off)"


def _started(reader: _Transcript, event: Started) -> Iterator[str]:
    yield f"conversation {event.originator_id} — {one_line(event.title) or '(untitled)'}"
    labels = f" · labels: {', '.join(one_line(label) for label in event.labels)}"
    yield f"started {when(event.timestamp)}{labels if event.labels else ''}"


def _turn_started(reader: _Transcript, event: TurnStarted) -> Iterator[str]:
    yield ""
    yield f"turn {one_line(event.turn_id)} ({event.trigger})"
    reader.in_turn = True


def _turn_ended(reader: _Transcript, event: TurnEnded) -> Iterator[str]:
    reader.in_turn = False
    reason = f": {one_line(event.reason)}" if event.reason else ""
    yield f"turn {one_line(event.turn_id)} ended: {event.state}{reason}"


def _user_message(reader: _Transcript, event: UserMessage) -> Iterator[str]:
    yield from reader.block("user", "\n\n".join(event.blocks) or "[no text]")


def _context(reader: _Transcript, event: ContextInjected) -> Iterator[str]:
    yield from reader.block(f"context ({one_line(event.source)})", event.text)


def _response_started(reader: _Transcript, event: ResponseStarted) -> Iterator[str]:
    line = f"{reader.pad}response {one_line(event.response_id)} · {one_line(event.provider)}"
    if event.model:
        line += f" {one_line(event.model)}"
    tools = [
        f"{one_line(tool.name)} (hosted)" if tool.hosted else one_line(tool.name)
        for tool in event.settings.tools
    ]
    if tools:
        line += f" · tools: {', '.join(tools)}"
    if event.origin == "request":
        line += " · from request history"
    yield line
    reader.in_response = True
    if event.settings.system:
        yield f"{reader.pad}system: {shorten(event.settings.system, 100)}"


def _response_ended(reader: _Transcript, event: ResponseEnded) -> Iterator[str]:
    reader.in_response = False
    line = f"{reader.pad}response ended: {event.state} · {event.finish_reason}"
    if event.stop_reason and event.stop_reason != event.finish_reason:
        line += f" (provider: {one_line(event.stop_reason)})"
    counters = usage_counters(event.usage, one_line) if event.usage is not None else []
    if counters:
        line += f" · tokens {', '.join(counters)}"
    if event.error is not None:
        status = f" (HTTP {event.error.status})" if event.error.status is not None else ""
        line += (
            f" · error {one_line(event.error.type)}{status}: {shorten(event.error.message, 200)}"
        )
    yield line


def _reasoning(reader: _Transcript, event: Reasoning) -> Iterator[str]:
    if event.redacted:
        yield f"{reader.pad}reasoning: [redacted]"
    else:
        yield from reader.block("reasoning", event.text or "[no text]")


def _tool_call(reader: _Transcript, event: ToolCallRequested) -> Iterator[str]:
    arguments = shorten(to_json(event.arguments), 300)
    yield f"{reader.pad}tool call {one_line(event.name)} ({one_line(event.call_id)}): {arguments}"


def _tool_result(reader: _Transcript, event: ToolCallResponded) -> Iterator[str]:
    label = "tool error" if event.is_error else "tool result"
    synthetic = ", synthetic" if event.synthetic else ""
    yield from reader.block(f"{label} ({one_line(event.call_id)}{synthetic})", event.content)


def _activity(reader: _Transcript, event: HostedActivity) -> Iterator[str]:
    arguments = reader.inputs.setdefault(event.activity_id, event.input) or event.input
    line = f"{reader.pad}{activity_label(event.name, arguments)} — {event.state}"
    if event.summary:
        line += f": {shorten(event.summary, 200)}"
    yield line
    display = event.display
    if display is not None:
        kind = one_line(display.kind).replace("_", " ")
        size = f"{one_line(display.content_type)}, {len(display.content)} chars"
        yield f"{reader.pad}  [{kind}: {size}, not shown]"


def _unknown(reader: _Transcript, event: UnknownArtifact) -> Iterator[str]:
    payload = event.payload
    size = len(payload.raw)
    yield (
        f"{reader.pad}[unknown {one_line(payload.provider)} artifact: "
        f"{one_line(payload.format)}, {size} bytes]"
    )


_HANDLERS: Final[dict[type[Event], Callable[[_Transcript, Any], Iterator[str]]]] = {
    Started: _started,
    TurnStarted: _turn_started,
    TurnEnded: _turn_ended,
    UserMessage: _user_message,
    ContextInjected: _context,
    ResponseStarted: _response_started,
    ResponseEnded: _response_ended,
    Reasoning: _reasoning,
    ToolCallRequested: _tool_call,
    ToolCallResponded: _tool_result,
    HostedActivity: _activity,
    UnknownArtifact: _unknown,
}


def outcome_line(outcome: ResponseOutcome, conversation: object = None) -> str:
    """One line per ingested response (`conversation`: the one it is stored in)."""
    if outcome.already_stored:
        where = f" in conversation {conversation}" if conversation is not None else ""
        return f"response {outcome.response_id}: already stored{where}, nothing written"
    attempt = (
        f" (attempt {outcome.attempt}: the whole copy of one stored cut short)"
        if outcome.attempt > 1
        else ""
    )
    return f"response {outcome.response_id}: {outcome.ended}, {outcome.events} events{attempt}"


def loss_line(loss: Any) -> str:
    """One line of a loss report (a `providers.Loss`)."""
    where = f"event {loss.version} ({loss.event})" if loss.version else loss.event
    if loss.kind == "assumed same model":  # nothing is left out: an assumption is listed
        return f"{where}: {loss.kind}: {loss.reason}"
    return f"{where}: {loss.kind} left out: {loss.reason}"
