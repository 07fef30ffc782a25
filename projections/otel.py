"""OpenTelemetry spans of a conversation, after the GenAI semantic conventions.

One CLIENT span per provider response (`chat {model}`; `generate_content {model}` for
Gemini) with the provider, the model, the response id, the finish reason and the token
usage; the conversation's messages as the conventions' opt-in content attributes
(`gen_ai.input.messages`, `gen_ai.output.messages`, `gen_ai.system_instructions`), left
out with `content=False`; and one INTERNAL `execute_tool {name}` span for each client
tool call and each hosted activity (a hosted one inside the span of the response that
reported it).

Spans are built from the portable reading (what was said, called and spent) and the
stored events' timestamps (`timeline`): a response spans its ResponseStarted to its
ResponseEnded, a client call its request to its answer, a hosted activity its first to
its last recorded transition. For an ingested capture every event carries the time it
was ingested, not the time the provider answered. Everything is derived: the trace id is
the conversation id's 128 bits, each span id a digest of the conversation id and the
version of the event the span comes from, so exporting twice gives the same trace.

Content is data: messages are JSON strings, never rendered; no ProviderPayload value
ever appears (the portable reading holds none); credentials are never stored, so none
can leave. The spans are the SDK's `ReadableSpan`s: any SpanExporter takes them (`otlp`
writes and sends them as OTLP). Needs the `otel` extra (`opentelemetry-sdk`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final
from uuid import UUID

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from convstore.domain import Event
from convstore.domain.events import EPOCH
from convstore.domain.vocabulary import FinishReason
from convstore.projections.portable import (
    ActivityItem,
    AnyItem,
    ContextItem,
    Interpret,
    PortableConversation,
    ReasoningItem,
    ResponseItem,
    TextItem,
    ToolCallItem,
    ToolInfo,
    UserItem,
    fold,
)

__all__ = ["PROVIDER_NAMES", "Trace", "TracedConversation", "read", "spans", "timeline"]

# Attribute names of the GenAI semantic conventions (checked against the pinned
# `opentelemetry-semantic-conventions` in the tests; spelled here so the base of the
# `otel` extra needs no incubating module).
OPERATION: Final = "gen_ai.operation.name"
PROVIDER: Final = "gen_ai.provider.name"
CONVERSATION: Final = "gen_ai.conversation.id"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
RESPONSE_MODEL: Final = "gen_ai.response.model"
RESPONSE_ID: Final = "gen_ai.response.id"
FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
REASONING_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
TOOL_DEFINITIONS: Final = "gen_ai.tool.definitions"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_TYPE: Final = "gen_ai.tool.type"
TOOL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_RESULT: Final = "gen_ai.tool.call.result"
ERROR_TYPE: Final = "error.type"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
STOP_REASON: Final = "convstore.stop_reason"
"""The provider's own stop reason, verbatim (the conventions' list holds ours)."""
HOSTED_USAGE: Final = "convstore.usage."
"""Prefix of the provider's counters of hosted work, e.g. `web_search_requests`."""

PROVIDER_NAMES: Final[Mapping[str, str]] = {
    "anthropic": "anthropic",
    "openai": "openai",
    "google": "gcp.gemini",
    "openai-chat": "openai",
}
"""Our provider names as the conventions' well-known `gen_ai.provider.name` values (the
Gemini API is `gcp.gemini`; Chat Completions are OpenAI's wire format, see `SERVERS`)."""

SERVERS: Final[Mapping[str, str]] = {
    "api.deepseek.com": "deepseek",
    "api.groq.com": "groq",
    "api.mistral.ai": "mistral_ai",
    "api.perplexity.ai": "perplexity",
    "api.x.ai": "x_ai",
}
"""Chat Completions servers the conventions name a provider for; any other server
(OpenAI's, or a compatible one of its own) stays `openai`, with `server.address` set."""

OPERATIONS: Final[Mapping[str, str]] = {"google": "generate_content"}
"""The operation of a provider's response where it is not `chat`."""

INPUT_EXCLUDES_CACHE: Final = frozenset({"anthropic"})
"""Providers whose input count leaves out the tokens read from or written to the cache;
the conventions' `gen_ai.usage.input_tokens` includes them, so they are added."""

FINISH: Final[Mapping[FinishReason, str]] = {
    "stop": "stop",
    "length": "length",
    "tool_use": "tool_call",
    "content_filter": "content_filter",
    "error": "error",
    "pause": "pause",
    "refusal": "refusal",
    "other": "other",
}
"""Our normalized finish reason as the conventions' (`tool_use` is their `tool_call`;
theirs is an open set, so ours that they lack keep their names)."""

SCOPE: Final = "convstore"
"""The instrumentation scope of every span."""


def _convstore_version() -> str:
    try:
        return version("convstore")
    except PackageNotFoundError:  # a source tree that was never installed
        return ""


_SCOPE: Final = InstrumentationScope(SCOPE, _convstore_version())
_RESOURCE: Final = Resource({"service.name": "convstore"})


# --- what the spans are made from -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TracedConversation:
    """A conversation's portable reading with what its spans need of its stored events."""

    reading: PortableConversation
    """What was said, called and spent."""
    times: Mapping[int, datetime]
    """When each event was recorded, by version."""
    servers: Mapping[str, str] = field(default_factory=dict)
    """The server each response came from, where its payloads' binding names one."""

    @property
    def id(self) -> UUID:
        """The conversation's id."""
        return self.reading.id

    @property
    def title(self) -> str:
        """Its title."""
        return self.reading.title


def timeline(events: Iterable[Event]) -> dict[int, datetime]:
    """When each event was recorded, by version."""
    return {event.originator_version: event.timestamp for event in events}


def _servers(events: Iterable[Event]) -> dict[str, str]:
    found: dict[str, str] = {}
    for event in events:
        payload = getattr(event, "payload", None)
        response_id = getattr(event, "response_id", None)
        if payload is not None and response_id and response_id not in found:
            server = payload.binding.get("server")
            if isinstance(server, str) and server:
                found[response_id] = server
    return found


def read(events: Sequence[Event], interpret: Interpret | None = None) -> TracedConversation:
    """The traced reading of one conversation's events (`ConversationService.history`)."""
    return TracedConversation(
        reading=fold(list(events), interpret), times=timeline(events), servers=_servers(events)
    )


# --- the spans ------------------------------------------------------------------------------


def _nanoseconds(moment: datetime) -> int:
    return ((moment - EPOCH) // timedelta(microseconds=1)) * 1000  # exact: no float


def _span_id(conversation: UUID, version: int, kind: str) -> int:
    digest = hashlib.sha256(f"{conversation}/{version}/{kind}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1  # zero is the invalid span id


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=False)


@dataclass(slots=True)
class _Message:
    role: str
    parts: list[dict[str, Any]]
    response_id: str | None = None

    def data(self) -> dict[str, Any]:
        return {"role": self.role, "parts": list(self.parts)}


@dataclass(slots=True)
class _Entry:
    """One part of the conversation's messages, at its place in the reading's order."""

    position: float
    """The index of the item it comes from (a tool's answer: just before the first item
    recorded after it)."""
    role: str
    part: dict[str, Any]
    response_id: str | None = None


def _answered_at(items: Sequence[AnyItem], index: int, version: int) -> float:
    """Where a tool's answer (recorded at `version`) goes among the items after `index`."""
    later = (j for j in range(index + 1, len(items)) if items[j].version > version)
    return next(later, len(items)) - 0.5


def _entries(items: Sequence[AnyItem]) -> Iterator[_Entry]:
    for index, item in enumerate(items):
        if isinstance(item, UserItem):
            for block in item.blocks:
                yield _Entry(index, "user", {"type": "text", "content": block})
        elif isinstance(item, ContextItem):
            part = {"type": "text", "content": item.text, "source": item.source}
            yield _Entry(index, "user", part)
        elif isinstance(item, TextItem):
            part = {"type": "text", "content": item.text}
            yield _Entry(index, "assistant", part, item.response_id)
        elif isinstance(item, ReasoningItem) and not item.redacted:
            part = {"type": "reasoning", "content": item.text}
            yield _Entry(index, "assistant", part, item.response_id)
        elif isinstance(item, ToolCallItem):
            call: dict[str, Any] = {"type": "tool_call", "id": item.call_id, "name": item.name}
            call["arguments"] = item.arguments
            yield _Entry(index, "assistant", call, item.response_id)
            if item.result is not None:
                response = item.result.content
                answer = {"type": "tool_call_response", "id": item.call_id, "response": response}
                yield _Entry(_answered_at(items, index, item.result.version), "tool", answer)
        elif isinstance(item, ActivityItem):
            yield from _activity_entries(index, item)


def _activity_entries(index: int, item: ActivityItem) -> Iterator[_Entry]:
    call = {"type": item.name, **item.input}
    part: dict[str, Any] = {"type": "server_tool_call", "id": item.activity_id, "name": item.name}
    part["server_tool_call"] = call
    yield _Entry(index, "assistant", part, item.response_id)
    if item.state != "started" and item.transitions:
        last = item.transitions[-1]
        result: dict[str, Any] = {"type": item.name, "state": item.state}
        if item.summary:
            result["summary"] = item.summary
        answer: dict[str, Any] = {"type": "server_tool_call_response", "id": item.activity_id}
        answer["server_tool_call_response"] = result
        yield _Entry(index, "assistant", answer, last.response_id or item.response_id)


def _tool_result(item: ActivityItem) -> dict[str, Any]:
    result: dict[str, Any] = {"state": item.state, "summary": item.summary}
    if item.sources:
        result["sources"] = [{"url": s.url, "title": s.title} for s in item.sources]
    if item.outputs:
        result["outputs"] = [{"channel": o.channel, "text": o.text} for o in item.outputs]
    return result


@dataclass(slots=True)
class _Builder:
    traced: TracedConversation
    content: bool
    spans: list[ReadableSpan] = field(default_factory=list)
    contexts: dict[str, SpanContext] = field(default_factory=dict)
    """The span context of each response's span, by response id."""

    def context(self, version: int, kind: str) -> SpanContext:
        conversation = self.traced.id
        span_id = _span_id(conversation, version, kind)
        flags = TraceFlags(TraceFlags.SAMPLED)
        return SpanContext(conversation.int or 1, span_id, is_remote=False, trace_flags=flags)

    def time(self, version: int | None, fallback: datetime | None = None) -> int:
        moment = self.traced.times.get(version) if version is not None else None
        moment = moment or fallback or self.traced.reading.created or EPOCH
        return _nanoseconds(moment)

    def add(
        self,
        name: str,
        context: SpanContext,
        kind: SpanKind,
        attributes: dict[str, Any],
        window: tuple[int, int],
        *,
        parent: SpanContext | None = None,
        status: Status | None = None,
    ) -> None:
        attributes = {CONVERSATION: str(self.traced.id), **attributes}
        span = ReadableSpan(
            name=name,
            context=context,
            parent=parent,
            resource=_RESOURCE,
            attributes={k: v for k, v in attributes.items() if v is not None},
            kind=kind,
            status=status or Status(StatusCode.UNSET),
            start_time=window[0],
            end_time=max(window),
            instrumentation_scope=_SCOPE,
        )
        self.spans.append(span)

    def response(
        self, item: ResponseItem, history: list[_Message], output: list[dict[str, Any]]
    ) -> None:
        provider = PROVIDER_NAMES.get(item.provider, item.provider)
        server = self.traced.servers.get(item.id, "")
        host, _, port = server.rpartition(":") if server.count(":") == 1 else (server, "", "")
        if item.provider == "openai-chat":
            provider = SERVERS.get(host, provider)
        operation = OPERATIONS.get(item.provider, "chat")
        finish = FINISH[item.finish_reason] if item.finish_reason is not None else None
        attributes: dict[str, Any] = {
            OPERATION: operation,
            PROVIDER: provider,
            REQUEST_MODEL: item.model or None,
            RESPONSE_MODEL: item.model or None,
            RESPONSE_ID: item.id,
            FINISH_REASONS: (finish,) if finish is not None else None,
            STOP_REASON: item.stop_reason,
            SERVER_ADDRESS: host or None,
            SERVER_PORT: int(port) if port.isdigit() else None,
        }
        attributes.update(self.usage(item))
        status = None
        if item.state in ("failed", "abandoned"):
            error = item.error
            attributes[ERROR_TYPE] = error.type if error is not None else item.state
            status = Status(StatusCode.ERROR, (error.message if error else "") or item.state)
        if self.content:
            attributes[INPUT_MESSAGES] = _dumps([message.data() for message in history])
            answer = {"role": "assistant", "parts": output, "finish_reason": finish or ""}
            attributes[OUTPUT_MESSAGES] = _dumps([answer])
            if item.system:
                attributes[SYSTEM_INSTRUCTIONS] = _dumps([{"type": "text", "content": item.system}])
            if item.tools:
                attributes[TOOL_DEFINITIONS] = _dumps([_tool(tool) for tool in item.tools])
        context = self.contexts[item.id]
        end = self.time(item.end_version, item.ended or item.started)
        window = (self.time(item.version, item.started), end)
        name = f"{operation} {item.model}".strip()
        self.add(name, context, SpanKind.CLIENT, attributes, window, status=status)

    def usage(self, item: ResponseItem) -> dict[str, Any]:
        usage = item.usage
        if usage is None:
            return {}
        read, written = usage.cache_read_tokens, usage.cache_write_tokens
        tokens = usage.input_tokens
        if tokens is not None and item.provider in INPUT_EXCLUDES_CACHE:
            tokens += (read or 0) + (written or 0)
        found = {
            INPUT_TOKENS: tokens,
            OUTPUT_TOKENS: usage.output_tokens,
            CACHE_READ_TOKENS: read,
            CACHE_CREATION_TOKENS: written,
            REASONING_TOKENS: usage.reasoning_tokens,
        }
        found.update({HOSTED_USAGE + name: count for name, count in sorted(usage.hosted.items())})
        return found

    def tool_call(self, item: ToolCallItem) -> None:
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool",
            TOOL_NAME: item.name,
            TOOL_CALL_ID: item.call_id,
            TOOL_TYPE: "function",
        }
        result = item.result
        status = None
        if result is not None and (result.is_error or result.synthetic):
            attributes[ERROR_TYPE] = "interrupted" if result.synthetic else "tool_error"
            status = Status(StatusCode.ERROR, attributes[ERROR_TYPE])
        if self.content:
            attributes[TOOL_ARGUMENTS] = _dumps(item.arguments)
            if result is not None:
                attributes[TOOL_RESULT] = result.content
        start = self.time(item.version)
        end = self.time(result.version) if result is not None else start
        context = self.context(item.version, "tool_call")
        name = f"execute_tool {item.name}"
        self.add(name, context, SpanKind.INTERNAL, attributes, (start, end), status=status)

    def activity(self, item: ActivityItem) -> None:
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool",
            TOOL_NAME: item.name,
            TOOL_CALL_ID: item.activity_id,
            TOOL_TYPE: "extension",
        }
        status = None
        if item.state in ("failed", "abandoned"):
            attributes[ERROR_TYPE] = item.state
            status = Status(StatusCode.ERROR, item.state)
        if self.content:
            attributes[TOOL_ARGUMENTS] = _dumps(item.input)
            if item.state != "started":
                attributes[TOOL_RESULT] = _dumps(_tool_result(item))
        versions = [step.version for step in item.transitions] or [item.version]
        window = (self.time(versions[0]), self.time(versions[-1]))
        parent = self.contexts.get(item.response_id or "")
        context = self.context(item.version, "activity")
        name = f"execute_tool {item.name}"
        self.add(name, context, SpanKind.INTERNAL, attributes, window, parent=parent, status=status)


def _tool(tool: ToolInfo) -> dict[str, Any]:
    kind = tool.native_type or ("extension" if tool.hosted else "function")
    found: dict[str, Any] = {"type": kind, "name": tool.name}
    if tool.description:
        found["description"] = tool.description
    return found


Trace = list[ReadableSpan]
"""A conversation's spans, in the order of the events they come from."""


def spans(traced: TracedConversation, *, content: bool = True) -> Trace:
    """The spans of one traced conversation; `content=False` leaves out the messages, the
    system prompt, the tool definitions and the tools' arguments and results."""
    builder = _Builder(traced, content)
    items = [item for turn in traced.reading.turns for item in turn.items]
    responses = [
        (index, item)
        for index, item in enumerate(items)
        if isinstance(item, ResponseItem) and item.origin == "provider"
    ]
    for _, response in responses:
        builder.contexts[response.id] = builder.context(response.version, "response")
    entries = sorted(_entries(items), key=lambda entry: entry.position)
    outputs: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        if entry.response_id in builder.contexts and entry.role == "assistant":
            outputs.setdefault(entry.response_id or "", []).append(entry.part)
    history: list[_Message] = []
    position = 0
    for index, response in responses:  # in the reading's order (a resent response's
        # newest attempt sits at its first attempt's place)
        while position < len(entries) and entries[position].position < index:
            _append(history, entries[position])
            position += 1
        builder.response(response, list(history), outputs.get(response.id, []))
    for item in items:
        if isinstance(item, ToolCallItem):
            builder.tool_call(item)
        elif isinstance(item, ActivityItem):
            builder.activity(item)
    return builder.spans


def _append(history: list[_Message], entry: _Entry) -> None:
    last = history[-1] if history else None
    if last is not None and last.role == entry.role and last.response_id == entry.response_id:
        last.parts.append(entry.part)
    else:
        history.append(_Message(entry.role, [entry.part], entry.response_id))
