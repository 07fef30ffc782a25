"""pydantic-ai's message history as JSON (`ModelMessagesTypeAdapter`): the parts we read
and write, as msgspec structs.

A history is a list of messages, each a `request` (what the application sent: system and
user prompts, tool returns, retry feedback) or a `response` (what the model answered:
text, thinking, tool calls, built-in tool calls and their returns). Parts are tagged by
`part_kind`; a message's parts decode in two passes (`parts`), so a part kind this module
does not model is named, never a failure. Fields we do not model are ignored on reading
and left to pydantic-ai's defaults on writing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal, TypeAlias

import msgspec

__all__ = [
    "HISTORY",
    "AnyPart",
    "Message",
    "Request",
    "Response",
    "Usage",
    "kind_of",
    "parts",
]


class Part(msgspec.Struct, kw_only=True, omit_defaults=True, tag_field="part_kind"):
    """Base of every part."""


class SystemPrompt(Part, kw_only=True, tag="system-prompt"):
    """A system prompt the application sent."""

    content: str
    timestamp: datetime | None = None


class UserPrompt(Part, kw_only=True, tag="user-prompt"):
    """The user's prompt: a string, or a list of strings and media."""

    content: str | list[Any]
    timestamp: datetime | None = None


class ToolReturn(Part, kw_only=True, tag="tool-return"):
    """What a client tool returned (`outcome` `retried`: the model is asked to retry)."""

    tool_name: str
    content: Any = None
    tool_call_id: str
    outcome: str = "success"
    timestamp: datetime | None = None


class RetryPrompt(Part, kw_only=True, tag="retry-prompt"):
    """A retry request (the form before `outcome='retried'` and `retry-feedback`)."""

    content: Any
    tool_name: str | None = None
    tool_call_id: str | None = None
    timestamp: datetime | None = None


class RetryFeedback(Part, kw_only=True, tag="retry-feedback"):
    """Feedback asking the model to retry, answering no tool call."""

    content: Any
    timestamp: datetime | None = None


class Text(Part, kw_only=True, tag="text"):
    """Text the model wrote."""

    content: str
    id: str | None = None
    provider_name: str | None = None
    citations: list[Any] | None = None


class Thinking(Part, kw_only=True, tag="thinking"):
    """The model's thinking; `signature` is the provider's (Anthropic's signature or
    redacted data, OpenAI's encrypted content), sent back only to `provider_name`."""

    content: str
    id: str | None = None
    signature: str | None = None
    provider_name: str | None = None


class ToolCall(Part, kw_only=True, tag="tool-call"):
    """A client tool call."""

    tool_name: str
    args: str | dict[str, Any] | None = None
    tool_call_id: str
    id: str | None = None
    provider_name: str | None = None


class BuiltinToolCall(Part, kw_only=True, tag="builtin-tool-call"):
    """A call of a tool the provider runs (pydantic-ai's `NativeToolCallPart`)."""

    tool_name: str
    args: str | dict[str, Any] | None = None
    tool_call_id: str
    provider_name: str | None = None


class BuiltinToolReturn(Part, kw_only=True, tag="builtin-tool-return"):
    """What a tool the provider runs returned (`NativeToolReturnPart`)."""

    tool_name: str
    content: Any = None
    tool_call_id: str
    outcome: str = "success"
    provider_name: str | None = None


AnyPart: TypeAlias = (
    SystemPrompt
    | UserPrompt
    | ToolReturn
    | RetryPrompt
    | RetryFeedback
    | Text
    | Thinking
    | ToolCall
    | BuiltinToolCall
    | BuiltinToolReturn
)


class Usage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A response's `RequestUsage`."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_reasoning_tokens: int = 0
    details: dict[str, int] = {}


class Request(msgspec.Struct, kw_only=True, omit_defaults=True, tag_field="kind", tag="request"):
    """A `ModelRequest`."""

    parts: list[msgspec.Raw]
    instructions: str | None = None
    timestamp: datetime | None = None
    conversation_id: str | None = None


class Response(msgspec.Struct, kw_only=True, omit_defaults=True, tag_field="kind", tag="response"):
    """A `ModelResponse`."""

    parts: list[msgspec.Raw]
    usage: Usage | None = None
    model_name: str | None = None
    timestamp: datetime | None = None
    provider_name: str | None = None
    provider_details: dict[str, Any] | None = None
    provider_response_id: str | None = None
    finish_reason: str | None = None
    conversation_id: str | None = None
    state: Literal["complete", "incomplete", "suspended", "interrupted"] | str = "complete"


Message: TypeAlias = Request | Response

HISTORY: Final = msgspec.json.Decoder(list[Message])
"""Validates and decodes a history's JSON (its parts left raw: see `parts`)."""


class _Kind(msgspec.Struct):
    part_kind: Any = None


_KIND: Final = msgspec.json.Decoder(_Kind)
_PART: Final = msgspec.json.Decoder(AnyPart)
KNOWN_KINDS: Final = frozenset(str(kind.__struct_config__.tag) for kind in AnyPart.__args__)


def kind_of(part: AnyPart) -> str:
    """The part's `part_kind`."""
    return str(part.__struct_config__.tag)


def parts(message: Message) -> list[AnyPart | str]:
    """The message's parts in order, each decoded, or the `part_kind` of one this module
    does not model (`?` when it names none). Raises msgspec.ValidationError for a known
    kind of the wrong shape."""
    out: list[AnyPart | str] = []
    for raw in message.parts:
        kind = _KIND.decode(raw).part_kind
        if kind in KNOWN_KINDS:
            out.append(_PART.decode(raw))
        else:
            out.append(kind if isinstance(kind, str) else "?")
    return out
