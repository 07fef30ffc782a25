"""A captured Messages API request → drafts of the history it carries (`ingest --request`).

`history_drafts` turns the request's `messages` into drafts, message by message, by
position:

- a user message: its text blocks → one `UserMessage` per run of text; each `tool_result`
  block → `ToolCallResponded` (its text as `content`, `is_error` kept, the block itself
  as an Anthropic `content_block` payload so replay sends it back unchanged); any other
  block (an image, a document) → an `UnknownArtifact` of format `user_content_block`,
  replayed in a user message;
- an assistant message: a response of origin `request` (it has no provider response id):
  `ResponseStarted(origin="request")` with the id `request:<sha256(body)[:16]>:<index>`,
  its blocks decoded by the response decoder's own block mapper (`blocks.BlockMapper`,
  bound to the request's model, the model the API accepted them for), then
  `ResponseEnded(completed, finish_reason="other")`.

`request_settings` reads the settings the response to this request was produced with
(model via `request_model`), and `recorded_prefix` tells how many of the request's
messages a conversation already holds, refusing a conversation that is not a prefix.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from convstore.adapters.anthropic.blocks import BlockMapper
from convstore.adapters.anthropic.context import PROVIDER, RequestContext
from convstore.adapters.anthropic.messages import USER_CONTENT_BLOCK, build_messages
from convstore.adapters.wire.assembler import AssembledBlock
from convstore.adapters.wire.captured import held_prefix
from convstore.adapters.wire.providers import MessageDrafts
from convstore.domain.errors import DecodeError
from convstore.domain.events import (
    Event,
    ResponseEnded,
    ResponseStarted,
    ToolCallResponded,
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.vocabulary import CallId, ProviderPayload, RequestSettings, ResponseId

__all__ = [
    "HistoryMismatch",
    "MessageDrafts",
    "block_key",
    "history_drafts",
    "recorded_prefix",
    "request_model",
    "request_settings",
]


class HistoryMismatch(DecodeError):
    """The conversation's recorded messages are not a prefix of the request's."""


class _Message(msgspec.Struct):
    role: str
    content: str | list[msgspec.Raw] = ""


class _Request(msgspec.Struct):
    messages: list[_Message]
    """Required: a body without it (another provider's request) is refused, not read as empty."""


_REQUEST: Final = msgspec.json.Decoder(_Request)
_OBJECT: Final = msgspec.json.Decoder(dict[str, Any])


def _messages(request_body: bytes) -> list[_Message]:
    try:
        return _REQUEST.decode(request_body).messages
    except (msgspec.DecodeError, RecursionError) as error:
        raise DecodeError(f"not an Anthropic request body: {error}") from None


def request_settings(request_body: bytes) -> RequestSettings:
    """The request's settings: system (text blocks joined), tools (server tools
    `hosted=True` with their native type), tool choice, max tokens, and `native`: the body
    without `messages`, values byte for byte."""
    return RequestContext.from_body(request_body).settings


def request_model(request_body: bytes) -> str:
    """The model the request names (empty when it names none)."""
    return RequestContext.from_body(request_body).model


def history_drafts(request_body: bytes, *, start: int = 0) -> list[MessageDrafts]:
    """Drafts for the request's messages from position `start` on (earlier ones are
    already recorded: see `recorded_prefix`). Raises DecodeError for a body that is not a
    Messages API request."""
    messages = _messages(request_body)
    context = RequestContext.from_body(request_body)
    digest = hashlib.sha256(request_body).hexdigest()[:16]
    calls = _call_ids(messages)
    out: list[MessageDrafts] = []
    for index, message in enumerate(messages):
        if index < start:
            continue
        if message.role == "assistant":
            response_id = ResponseId(f"request:{digest}:{index}")
            drafts = _assistant(message, response_id, context)
        elif message.role == "user":
            drafts = _user(message, calls)
        else:
            raise DecodeError(f"messages[{index}]: unknown role {message.role!r}")
        out.append(MessageDrafts(index=index, role=message.role, drafts=tuple(drafts)))
    return out


def _call_ids(messages: Sequence[_Message]) -> set[str]:
    """Ids of the client tool calls the request's assistant messages hold."""
    ids: set[str] = set()
    for message in messages:
        if message.role != "assistant" or isinstance(message.content, str):
            continue
        for raw in message.content:
            block = _block(raw)
            if block is not None and block.get("type") == "tool_use":
                call_id = block.get("id")
                if isinstance(call_id, str):
                    ids.add(call_id)
    return ids


def _block(raw: msgspec.Raw) -> dict[str, Any] | None:
    try:
        return _OBJECT.decode(raw)
    except msgspec.ValidationError:
        return None


def _assistant(message: _Message, response_id: ResponseId, context: RequestContext) -> list[Event]:
    mapper = BlockMapper(response_id, context.model, context)
    drafts: list[Event] = [
        ResponseStarted(
            response_id=response_id, provider=PROVIDER, model=context.model, origin="request"
        )
    ]
    if isinstance(message.content, str):
        if message.content:
            text: dict[str, Any] = {"type": "text", "text": message.content}
            drafts.extend(mapper(AssembledBlock(0, text, None)))
    else:
        for index, raw in enumerate(message.content):
            value = bytes(raw)
            block = _block(raw)
            if block is None:
                drafts.append(mapper.unknown_value(value, "content_block"))
            else:
                drafts.extend(mapper(AssembledBlock(index, block, value)))
    drafts.append(ResponseEnded(response_id=response_id, state="completed", finish_reason="other"))
    return drafts


def _user(message: _Message, calls: set[str]) -> list[Event]:
    if isinstance(message.content, str):
        return [UserMessage(blocks=(message.content,))]
    drafts: list[Event] = []
    texts: list[str] = []

    def flush() -> None:
        if texts:
            drafts.append(UserMessage(blocks=tuple(texts)))
            texts.clear()

    for raw in message.content:
        block = _block(raw)
        kind = block.get("type") if block is not None else None
        if block is not None and kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
            continue
        flush()
        call_id = block.get("tool_use_id") if block is not None else None
        if kind == "tool_result" and isinstance(call_id, str) and call_id in calls:
            assert block is not None
            drafts.append(
                ToolCallResponded(
                    call_id=CallId(call_id),
                    content=_result_text(block.get("content")),
                    is_error=block.get("is_error") is True,
                    payload=ProviderPayload(
                        provider=PROVIDER, format="content_block", value=msgspec.Raw(bytes(raw))
                    ),
                )
            )
        else:
            payload = ProviderPayload(
                provider=PROVIDER, format=USER_CONTENT_BLOCK, value=msgspec.Raw(bytes(raw))
            )
            drafts.append(UnknownArtifact(payload=payload))
    flush()
    return drafts


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            b["text"]
            for b in content
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        )
    return ""


# --- matching a conversation against a request -----------------------------------------------


def block_key(block: Any) -> tuple[Any, ...]:
    """What identifies a content block when a conversation is matched against a request:
    its type and its text or id (a signature for thinking, the data for redacted)."""
    if not isinstance(block, dict):
        return ("?",)
    kind = block.get("type")
    if kind == "text":
        return (kind, block.get("text"))
    if kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
        return (kind, block.get("id"))
    if "tool_use_id" in block:
        return (kind, block.get("tool_use_id"))
    if kind == "thinking":
        return (kind, block.get("signature"))
    if kind == "redacted_thinking":
        return (kind, block.get("data"))
    return (kind,)


def _request_keys(messages: Sequence[_Message]) -> list[tuple[int, str, tuple[Any, ...]]]:
    keys: list[tuple[int, str, tuple[Any, ...]]] = []
    for index, message in enumerate(messages):
        if isinstance(message.content, str):
            if message.content:
                keys.append((index, message.role, ("text", message.content)))
            continue
        for raw in message.content:
            keys.append((index, message.role, block_key(_block(raw))))
    return keys


def recorded_prefix(events: Sequence[Event], request_body: bytes) -> int:
    """How many of the request's messages the conversation of `events` already holds.

    The conversation's messages (as the encoder builds them, bindings checked against
    the request's model) must be a prefix of the request's, block by block and ending on
    a message boundary; otherwise HistoryMismatch says where they part.
    """
    messages = _messages(request_body)
    wanted = _request_keys(messages)
    built = build_messages(events, model=request_model(request_body))
    held = [(m.role, block_key(b.json())) for m in built.messages for b in m.blocks]
    return held_prefix(
        held, wanted, len(messages), turns="messages", unit="block", mismatch=HistoryMismatch
    )
