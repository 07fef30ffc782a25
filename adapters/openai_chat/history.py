"""A captured Chat Completions request → drafts of the history it carries (`ingest --request`).

`history` records the request's `messages` that the conversation does not hold yet, by
position:

- `system` / `developer`: nothing (their text is the response's `settings.system`);
- `user`: a `UserMessage`, a block per text part (a string content is one block); any
  other part (an image, audio, a file) → an `UnknownArtifact` of format `user_part`;
- `assistant`: a response of origin `request` with the id
  `request:<sha256(body)[:16]>:<index>`, its message mapped by the response mapper itself
  (`choice`, as choice 0 of a whole response: the same reasoning, text, refusal and tool
  call mapping, its bytes kept as payloads);
- `tool`: a `ToolCallResponded` for its `tool_call_id` (text parts joined as content)
  when it answers a call the conversation or the request holds open, else an artifact;
- anything else (a legacy `function` message) → an `UnknownArtifact` of format `message`;
  a message without a string `role` is a DecodeError.

Matching a conversation against a request compares text blocks by their text, tool calls
and results by their call id; reasoning and artifacts are left out, as clients often drop
them (DeepSeek refuses `reasoning_content` sent back).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from convstore.adapters.openai_chat.context import PROVIDER, RequestContext, text_of
from convstore.adapters.openai_chat.decode import whole_choice
from convstore.adapters.openai_chat.response import ResponseHead
from convstore.adapters.wire.captured import held_prefix, open_calls, request_fields
from convstore.adapters.wire.providers import MessageDrafts, current_server
from convstore.domain.errors import DecodeError
from convstore.domain.events import (
    AssistantText,
    Event,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.vocabulary import CallId, ProviderPayload, RequestSettings, ResponseId

__all__ = ["history"]

_LIST: Final = msgspec.json.Decoder(list[msgspec.Raw])
_FIELDS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY: Final = msgspec.json.Decoder()
_SYSTEM: Final = frozenset({"system", "developer"})
Key = tuple[str, tuple[Any, ...]]


class HistoryMismatch(DecodeError):
    """A conversation that is not a prefix of the request it is matched against."""


def _messages(body: bytes) -> list[msgspec.Raw]:
    fields = request_fields(body, "Chat Completions")
    raw = fields.get("messages")
    try:
        return _LIST.decode(raw) if raw is not None else []
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise DecodeError("the Chat Completions request's messages are not a list") from None


def _message(raw: msgspec.Raw, index: int) -> dict[str, Any]:
    try:
        value = _ANY.decode(raw)
    except (msgspec.DecodeError, RecursionError) as error:
        raise DecodeError(f"messages[{index}] is unreadable: {error}") from None
    if not isinstance(value, dict):
        raise DecodeError(f"messages[{index}] is not an object")
    if not isinstance(value.get("role"), str):
        raise DecodeError(f"messages[{index}] has no role (a string)")
    return value


def history(events: Sequence[Event], request_body: bytes) -> list[MessageDrafts]:
    """Drafts of the request's messages the conversation of `events` does not hold yet;
    raises HistoryMismatch when its messages are not a prefix of the request's."""
    raws = _messages(request_body)
    messages = [_message(raw, index) for index, raw in enumerate(raws)]
    wanted = [(index, role, key) for index, m in enumerate(messages) for role, key in _keys(m)]
    held = _held(events)
    start = held_prefix(
        held, wanted, len(messages), turns="messages", unit="block", mismatch=HistoryMismatch
    )
    context = RequestContext.from_body(request_body, server=current_server())
    digest = hashlib.sha256(request_body).hexdigest()[:16]
    calls = open_calls(events)
    out: list[MessageDrafts] = []
    for index, (raw, message) in enumerate(zip(raws, messages, strict=True)):
        role = message.get("role")
        if index < start or role in _SYSTEM:
            continue
        if role == "assistant":
            drafts = _assistant(raw, ResponseId(f"request:{digest}:{index}"), context)
            calls.update(d.call_id for d in drafts if isinstance(d, ToolCallRequested))
            out.append(MessageDrafts(index=index, role="assistant", drafts=tuple(drafts)))
        else:
            drafts = _user(raw, message, calls)
            out.append(MessageDrafts(index=index, role="user", drafts=tuple(drafts)))
    return out


def _assistant(raw: msgspec.Raw, response_id: ResponseId, context: RequestContext) -> list[Event]:
    head = ResponseHead(response_id, {}, context)
    choice = whole_choice(_FIELDS.decode(b'{"index":0,"message":' + bytes(raw) + b"}"), 0)
    drafts = head.mapper(choice)
    started = ResponseStarted(
        response_id=response_id,
        provider=PROVIDER,
        model=context.model,
        settings=RequestSettings(),
        origin="request",
    )
    return [started, *drafts, *head.ended("completed")[-1:]]


def _user(raw: msgspec.Raw, message: dict[str, Any], calls: set[str]) -> list[Event]:
    role, content = message.get("role"), message.get("content")
    if role == "tool":
        call_id = message.get("tool_call_id")
        if isinstance(call_id, str) and call_id in calls:
            calls.discard(call_id)
            return [ToolCallResponded(call_id=CallId(call_id), content=text_of(content))]
    if role != "user":
        return [_artifact(bytes(raw), "message")]
    if isinstance(content, str):
        return [UserMessage(blocks=(content,))]
    out: list[Event] = []
    texts = (
        [
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
        if isinstance(content, list)
        else []
    )
    if texts:
        out.append(UserMessage(blocks=tuple(texts)))
    for part in content if isinstance(content, list) else ():
        if not (isinstance(part, dict) and part.get("type") == "text"):
            out.append(_artifact(msgspec.json.encode(part), "user_part"))
    return out


def _artifact(value: bytes, fmt: str) -> UnknownArtifact:
    return UnknownArtifact(payload=ProviderPayload.of(PROVIDER, fmt, value))


def _keys(message: dict[str, Any]) -> list[Key]:
    role, content = message.get("role"), message.get("content")
    if role == "user":
        if isinstance(content, str):
            return [("user", ("text", content))]
        return (
            [
                ("user", ("text", p["text"]))
                for p in content
                if isinstance(p, dict)
                and p.get("type") == "text"
                and isinstance(p.get("text"), str)
            ]
            if isinstance(content, list)
            else []
        )
    if role == "assistant":
        keys: list[Key] = []
        text = text_of(content)
        if text:
            keys.append(("assistant", ("text", text)))
        refusal = message.get("refusal")
        if isinstance(refusal, str) and refusal:
            keys.append(("assistant", ("text", refusal)))
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            if isinstance(call, dict):
                keys.append(("assistant", ("call", call.get("id"))))
        return keys
    if role == "tool":
        return [("tool", ("result", message.get("tool_call_id")))]
    return []


def _held(events: Sequence[Event]) -> list[Key]:
    """The (role, key) of each block the conversation holds, as `_keys` reads a request."""
    held: list[Key] = []
    for event in events:
        if isinstance(event, UserMessage):
            held.extend(("user", ("text", block)) for block in event.blocks)
        elif isinstance(event, AssistantText):
            held.append(("assistant", ("text", event.text)))
        elif isinstance(event, ToolCallRequested):
            held.append(("assistant", ("call", event.call_id)))
        elif isinstance(event, ToolCallResponded):
            held.append(("tool", ("result", event.call_id)))
    return held
