"""A conversation as a pydantic-ai message history (`ModelMessagesTypeAdapter` JSON), for
an agent to continue from (`agent.run(..., message_history=...)`).

A pure fold of the stored events (each response read from its newest attempt): user-side
events between two responses make one `ModelRequest` (user text as `user-prompt` parts,
injected context as a tagged prompt, tool results as `tool-return` parts, `failed` for an
error), every response one `ModelResponse` (text, thinking, tool calls, hosted activities
as `builtin-tool-call` and `builtin-tool-return` parts; its model, provider, id, usage and
finish reason). Every message names the conversation as its `conversation_id`
(`convstore:ID`: an agent continuing the history keeps it, and the importer brings the
longer history back to the same conversation) and each response keeps its stored id as
`provider_response_id` (so that import finds the responses it holds). The first
response's system prompt opens the first request. Reasoning
keeps the signature pydantic-ai carries for its provider (`providers.signature_of`: the
one reading of a payload here, for Anthropic's and OpenAI's signed reasoning); no other
payload is read, and unknown artifacts are left out.

The JSON is written with msgspec (convstore does not import pydantic-ai) and is inert on
a terminal (`render.inert_json`: lossless).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Final
from uuid import UUID

import msgspec

from convstore.adapters.importing.pydantic_ai import wire
from convstore.adapters.importing.pydantic_ai.history import OURS_PREFIX, UNNAMED
from convstore.adapters.importing.pydantic_ai.providers import THEIRS, signature_of
from convstore.adapters.terminal.render import inert_json
from convstore.adapters.wire.encoding import context_envelope
from convstore.domain.attempts import reading
from convstore.domain.events import (
    AssistantText,
    ContextInjected,
    Event,
    HostedActivity,
    Reasoning,
    ResponseEnded,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    UserMessage,
)
from convstore.domain.redaction import overlay
from convstore.domain.vocabulary import FinishReason, Usage

__all__ = ["history", "history_json"]

FINISH: Final[dict[FinishReason, str]] = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content_filter",
    "tool_use": "tool_call",
    "error": "error",
}
"""Our finish reason → pydantic-ai's (another: none)."""

_ENCODER: Final = msgspec.json.Encoder()


def _raw(part: wire.AnyPart) -> msgspec.Raw:
    return msgspec.Raw(_ENCODER.encode(part))


class _Fold:
    def __init__(self, conversation: str) -> None:
        self.conversation = conversation
        """The `conversation_id` of every message."""
        self.messages: list[wire.Message] = []
        self.request: list[msgspec.Raw] = []
        self.request_time: datetime | None = None
        self.system_written = False
        self.response: wire.Response | None = None
        self.provider: str | None = None
        self.tools: dict[str, str] = {}
        """Call id → tool name."""

    def flush(self) -> None:
        if self.request:
            request = wire.Request(
                parts=self.request,
                timestamp=self.request_time,
                conversation_id=self.conversation,
            )
            self.messages.append(request)
        self.request, self.request_time = [], None

    def user(self, event: Event, part: wire.AnyPart) -> None:
        if not self.request:
            self.request_time = event.timestamp
        self.request.append(_raw(part))

    def add(self, event: Event) -> None:
        if isinstance(event, UserMessage):
            blocks = event.blocks
            content: str | list[object] = blocks[0] if len(blocks) == 1 else list(blocks)
            self.user(event, wire.UserPrompt(content=content, timestamp=event.timestamp))
        elif isinstance(event, ContextInjected):
            text = context_envelope(event.source, event.text)
            self.user(event, wire.UserPrompt(content=text, timestamp=event.timestamp))
        elif isinstance(event, ToolCallResponded):
            result = wire.ToolReturn(
                tool_name=self.tools.get(event.call_id, ""),
                content=event.content,
                tool_call_id=event.call_id,
                outcome="failed" if event.is_error else "success",
                timestamp=event.timestamp,
            )
            self.user(event, result)
        elif isinstance(event, ResponseStarted):
            self._started(event)
        elif self.response is not None:
            self._content(event, self.response)

    def _started(self, event: ResponseStarted) -> None:
        system = event.settings.system
        if system and not self.system_written:
            first = self.request_time or event.timestamp
            self.request.insert(0, _raw(wire.SystemPrompt(content=system, timestamp=first)))
            self.request_time = first
        self.system_written = self.system_written or bool(system)
        self.flush()
        named = event.provider
        self.provider = None if named == UNNAMED else THEIRS.get(named, named)
        self.response = wire.Response(
            parts=[],
            model_name=event.model or None,
            timestamp=event.timestamp,
            provider_name=self.provider,
            provider_response_id=event.response_id,
            conversation_id=self.conversation,
        )

    def _content(self, event: Event, response: wire.Response) -> None:
        part: wire.AnyPart | None = None
        if isinstance(event, AssistantText):
            part = wire.Text(content=event.text)
        elif isinstance(event, Reasoning):
            part = self._thinking(event)
        elif isinstance(event, ToolCallRequested):
            self.tools[event.call_id] = event.name
            part = wire.ToolCall(
                tool_name=event.name, args=dict(event.arguments), tool_call_id=event.call_id
            )
        elif isinstance(event, HostedActivity) and event.state == "started":
            part = wire.BuiltinToolCall(
                tool_name=event.name,
                args=dict(event.input),
                tool_call_id=event.activity_id,
                provider_name=self.provider,
            )
        elif isinstance(event, HostedActivity) and event.response_id is not None:
            part = wire.BuiltinToolReturn(
                tool_name=event.name,
                content=event.summary or None,
                tool_call_id=event.activity_id,
                outcome="success" if event.state == "completed" else "failed",
                provider_name=self.provider,
            )
        elif isinstance(event, ResponseEnded):
            self._ended(event, response)
        if part is not None:
            response.parts.append(_raw(part))

    def _thinking(self, event: Reasoning) -> wire.Thinking | None:
        signed = signature_of(event.payload) if event.payload is not None else None
        if signed is None:
            if not event.text:  # redacted, and its value is not one pydantic-ai carries
                return None
            return wire.Thinking(content=event.text)
        assert event.payload is not None  # signed came from it
        signature, part_id = signed
        return wire.Thinking(
            content=event.text,
            id=part_id,
            signature=signature,
            provider_name=THEIRS[event.payload.provider],
        )

    def _ended(self, event: ResponseEnded, response: wire.Response) -> None:
        finish = FINISH.get(event.finish_reason)
        response.finish_reason = finish
        response.state = "complete" if event.state == "completed" else "interrupted"
        if event.stop_reason and event.stop_reason != finish:
            response.provider_details = {"finish_reason": event.stop_reason}
        if event.usage is not None:
            response.usage = _usage(event.usage)
        self.messages.append(response)
        self.response = None


def _usage(usage: Usage) -> wire.Usage:
    return wire.Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_read_tokens=usage.cache_read_tokens or 0,
        cache_write_tokens=usage.cache_write_tokens or 0,
        output_reasoning_tokens=usage.reasoning_tokens or 0,
        details={**usage.other, **usage.hosted},
    )


def history(conversation: UUID, events: Iterable[Event]) -> list[wire.Message]:
    """The events of `conversation` (`ConversationService.history`) as pydantic-ai's
    messages, oldest first."""
    fold = _Fold(f"{OURS_PREFIX}{conversation}")
    for event in reading(overlay(list(events))):
        fold.add(event)
    if fold.response is not None:  # still open: what arrived, as an interrupted response
        fold.response.state = "interrupted"
        fold.messages.append(fold.response)
    fold.flush()
    return fold.messages


def history_json(conversation: UUID, events: Iterable[Event]) -> str:
    """`history` as one inert JSON document (no newline)."""
    return inert_json(_ENCODER.encode(history(conversation, events)).decode())
