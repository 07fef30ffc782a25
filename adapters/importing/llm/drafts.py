"""One `llm` turn as the drafts of an exchange, and what could not be carried.

The response: where `response_json` is a provider's own JSON (a Chat Completions
`chat.completion`; a Responses API `response`), it is decoded by that provider's adapter,
so its payloads are kept for exact replay (the JSON as `llm` stored it: the SDK's
`model_dump` with its nulls left out, opaque strings intact). Otherwise the response is
built from `llm`'s parts (text, reasoning, tool calls), its provider the one the model id
names as best known (`llm` where none), and whatever `response_json` it has (`llm`'s own
summary of a stream, not the provider's JSON) kept as an UnknownArtifact of provider
`llm`. `llm` records no finish reason: a built response ends `tool_use` when it calls a
tool, else `stop`. Response ids are `llm:<turn id>`, so they never meet a provider's.

The messages before it: user text, tool results answering the calls still open, and an
assistant message no earlier turn produced (a response of origin `request`). An
attachment is kept as its metadata only (an UnknownArtifact of provider `llm`: its type,
url, path, size, never its bytes); everything else that does not fit is a `Loss`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

import msgspec

from convstore.adapters.importing.llm.logs import LlmMessage, LlmTurn
from convstore.adapters.importing.source import ImportedExchange, Message
from convstore.adapters.wire.providers import Loss, adapter
from convstore.domain.errors import ConvstoreError
from convstore.domain.events import (
    AssistantText,
    ContextInjected,
    Event,
    Reasoning,
    ResponseEnded,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.vocabulary import (
    CallId,
    ProviderPayload,
    RequestSettings,
    ResponseId,
    Usage,
)

__all__ = ["exchange", "response_id"]

NATIVE: Final = {"chat.completion": "openai-chat", "response": "openai"}
"""A `response_json`'s `object` → the provider whose own JSON it is."""
BY_MODEL: Final = (
    (("gpt-", "o1", "o3", "o4", "chatgpt"), "openai-chat"),
    (("claude",), "anthropic"),
    (("gemini",), "google"),
)
"""Model id prefixes → the provider a built response is attributed to."""
STREAMED: Final = "chat.completion.chunk"
"""`llm`'s summary of a streamed Chat Completions response."""
SOURCE: Final = "llm"
"""The provider name of what only `llm` wrote (metadata, its own summaries)."""


def response_id(turn_id: str) -> ResponseId:
    """The response id of an `llm` turn."""
    return ResponseId(f"llm:{turn_id}")


def exchange(turn: LlmTurn, open_calls: set[str]) -> tuple[ImportedExchange, list[Loss]]:
    """The exchange of `turn`; `open_calls` (the conversation's unanswered call ids) is
    updated with what it answers and asks."""
    losses: list[Loss] = []
    history: list[Message] = []
    for message in turn.inputs:
        history.extend(_input(turn, message, open_calls, losses))
    if turn.diverged:
        losses.append(
            _loss("history", "history", turn, "its history does not continue the thread's "
                  "earlier turns (edited or sent by a client): only its new messages are kept")
        )  # fmt: skip
    if turn.unresolved:
        losses.append(_loss("ResponseStarted", "payload", turn, turn.unresolved))
    response = _native(turn, losses) or _built(turn, losses)
    for event in response:
        if isinstance(event, ToolCallRequested):
            open_calls.add(event.call_id)
    return ImportedExchange(history=history, response=response), losses


def _loss(event: str, kind: str, turn: LlmTurn, reason: str) -> Loss:
    return Loss(version=0, event=event, kind=kind, reason=f"turn {turn.id}: {reason}")


def _raw(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _settings(turn: LlmTurn) -> RequestSettings:
    return RequestSettings(system=turn.system, tools=turn.tools)


def _native(turn: LlmTurn, losses: list[Loss]) -> list[Event] | None:
    """The response decoded from a provider's own JSON, or None."""
    payload = turn.response_json
    kind = payload.get("object") if isinstance(payload, dict) else None
    provider = NATIVE.get(kind) if isinstance(kind, str) else None
    if provider is None:
        return None
    try:
        drafts = list(adapter(provider).decode(_raw(payload), None, 200))
    except ConvstoreError as error:
        losses.append(
            _loss("ResponseStarted", "payload", turn, f"its {provider} response_json could not "
                  f"be decoded ({error}): the response is built from llm's parts")
        )  # fmt: skip
        return None
    rid = response_id(turn.id)
    renamed: list[Event] = []
    for draft in drafts:
        event = draft
        if isinstance(event, ResponseStarted) and event.settings == RequestSettings():
            event = msgspec.structs.replace(event, settings=_settings(turn))
        if getattr(event, "response_id", None) is not None:
            event = msgspec.structs.replace(event, response_id=rid)
        renamed.append(event)
    return renamed


def _provider(turn: LlmTurn) -> str:
    payload = turn.response_json
    if isinstance(payload, dict) and payload.get("object") == STREAMED:
        return "openai-chat"
    model = (turn.resolved_model or turn.model).lower()
    for prefixes, provider in BY_MODEL:
        if model.startswith(prefixes):
            return provider
    return SOURCE


def _built(turn: LlmTurn, losses: list[Loss]) -> list[Event]:
    """The response built from `llm`'s parts."""
    rid = response_id(turn.id)
    events: list[Event] = [
        ResponseStarted(
            response_id=rid,
            provider=_provider(turn),
            model=turn.resolved_model or turn.model,
            settings=_settings(turn),
        )
    ]
    for message in turn.outputs:
        events.extend(_parts(turn, rid, message, losses))
    if turn.response_json is not None:
        events.append(
            UnknownArtifact(
                response_id=rid,
                payload=ProviderPayload.of(SOURCE, "response_json", _raw(turn.response_json)),
            )
        )
        losses.append(
            _loss("UnknownArtifact", "payload", turn, "its response_json is llm's own summary, "
                  "not the provider's JSON: kept as an llm artifact, not replayed")
        )  # fmt: skip
    calls = any(isinstance(e, ToolCallRequested) for e in events)
    events.append(
        ResponseEnded(
            response_id=rid,
            state="completed",
            finish_reason="tool_use" if calls else "stop",
            usage=_usage(turn),
        )
    )
    return events


def _usage(turn: LlmTurn) -> Usage | None:
    if turn.input_tokens is None and turn.output_tokens is None and not turn.token_details:
        return None
    return Usage(
        input_tokens=turn.input_tokens,
        output_tokens=turn.output_tokens,
        other=dict(_counters("", turn.token_details or {})),
    )


def _counters(prefix: str, details: dict[str, Any]) -> Iterable[tuple[str, int]]:
    for key, value in details.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _counters(f"{name}.", value)
        elif isinstance(value, int) and not isinstance(value, bool):
            yield name, value


def _parts(turn: LlmTurn, rid: ResponseId, message: LlmMessage, losses: list[Loss]) -> list[Event]:
    """The events of an assistant message's parts."""
    events: list[Event] = []
    for position, part in enumerate(message.parts):
        kind = part.get("type")
        if part.get("provider_metadata"):
            losses.append(
                _loss(kind or "part", "payload", turn, f"the provider metadata of its {kind} "
                      "part (e.g. a signature) is not carried: llm keeps it in its own shape")
            )  # fmt: skip
        if message.role == "assistant" and kind == "text":
            events.append(AssistantText(response_id=rid, text=str(part.get("text", ""))))
        elif message.role == "assistant" and kind == "reasoning":
            events.append(
                Reasoning(
                    response_id=rid,
                    text=str(part.get("text", "")),
                    redacted=bool(part.get("redacted")),
                )
            )
        elif kind == "tool_call" and not part.get("server_executed"):
            arguments = part.get("arguments")
            events.append(
                ToolCallRequested(
                    response_id=rid,
                    call_id=CallId(part.get("tool_call_id") or f"{rid}:{message.key}:{position}"),
                    name=str(part.get("name", "")),
                    arguments=arguments if isinstance(arguments, dict) else {},
                )
            )
        else:
            events.append(
                UnknownArtifact(
                    response_id=rid, payload=ProviderPayload.of(SOURCE, f"{kind}_part", _raw(part))
                )
            )
            losses.append(
                _loss("UnknownArtifact", "part", turn, f"a {message.role} {kind} part "
                      "(e.g. a tool the provider ran) is kept as an llm artifact, not replayed")
            )  # fmt: skip
    return events


def _input(
    turn: LlmTurn, message: LlmMessage, open_calls: set[str], losses: list[Loss]
) -> list[Message]:
    """The history entries of one message before the turn's response."""
    if message.role == "assistant":
        rid = ResponseId(f"llm:{turn.id}:{message.key}")
        drafts: list[Event] = [
            ResponseStarted(
                response_id=rid,
                provider=_provider(turn),
                model=turn.resolved_model or turn.model,
                origin="request",
            ),
            *_parts(turn, rid, message, losses),
            ResponseEnded(response_id=rid, state="completed"),
        ]
        open_calls.update(e.call_id for e in drafts if isinstance(e, ToolCallRequested))
        return [("assistant", drafts)]
    if message.role == "system":
        text = "".join(str(p.get("text", "")) for p in message.parts)
        if text != (turn.system or ""):
            losses.append(_loss("settings", "system", turn, "a system message after the first"))
        return []
    user: list[Event] = []
    texts: list[str] = []
    for part in message.parts:
        kind = part.get("type")
        if kind == "text":
            texts.append(str(part.get("text", "")))
        elif kind == "tool_result":
            user.extend(_result(turn, part, open_calls, losses))
        elif kind == "attachment":
            meta = part.get("attachment") or {}
            user.append(
                UnknownArtifact(payload=ProviderPayload.of(SOURCE, "attachment", _raw(meta)))
            )
            losses.append(
                _loss("UnknownArtifact", "attachment", turn, f"an attachment ({meta.get('type')}"
                      f", {meta.get('size', 0)} bytes) is kept as its metadata, not its content")
            )  # fmt: skip
        else:
            losses.append(_loss("UserMessage", kind or "part", turn, f"a {kind} part of a "
                                f"{message.role} message"))  # fmt: skip
    if texts:
        user.insert(0, UserMessage(blocks=tuple(texts)))
    return [("user", user)] if user else []


def _result(
    turn: LlmTurn, part: dict[str, Any], open_calls: set[str], losses: list[Loss]
) -> list[Event]:
    call = part.get("tool_call_id")
    output = str(part.get("output", ""))
    if part.get("attachments"):
        losses.append(
            _loss("ToolCallResponded", "attachment", turn, "a tool result's attachments are "
                  "not carried")
        )  # fmt: skip
    if isinstance(call, str) and call in open_calls:
        open_calls.discard(call)
        return [
            ToolCallResponded(
                call_id=CallId(call), content=output, is_error=part.get("exception") is not None
            )
        ]
    losses.append(
        _loss("ToolCallResponded", "tool_result", turn, f"a result of {part.get('name')!r} "
              "answers no call recorded before it: kept as context")
    )  # fmt: skip
    return [ContextInjected(source="tool_result", text=output)]
