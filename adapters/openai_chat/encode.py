"""Stored events → a Chat Completions request body: the native projection.

`encode_request` rebuilds, from a conversation's events alone, the request that continues
it on a Chat Completions server (`EncodedRequest`: the body and the `Loss`es). It reads
only: it never writes to the store.

Messages
    `UserMessage` → a `user` message (one block: a string; several: text parts); a part
    of a user message this format kept as it came (`user_part`: an image, audio, a file)
    joins the user message before it, byte for byte.
    `ContextInjected` → a `user` message `<context source="…">…</context>`. A response →
    one `assistant` message: its texts joined as `content`, a refusal as `refusal`, its
    client tool calls as `tool_calls`. `ToolCallResponded` → a `tool` message for its
    call. The system prompt is the first message (`system`).

Same server and model (a payload of provider `openai-chat` whose binding names the
target's model, by `wire.models`, and the target's server)
    Each tool call is its stored `tool_call` bytes (id, arguments string exactly as the
    server sent them); OpenRouter's `reasoning_details` (signatures) go back byte for
    byte; a message's own unknown fields (`message_fields`) go back into it.
    Otherwise (another provider, model or server): portable content only — tool calls
    rebuilt from their id, name and arguments; payloads left out and listed.

What the format cannot carry, whatever the target (each a loss)
    Reasoning text (`reasoning_content` / `reasoning`): DeepSeek documents that it must
    not be sent back (a 400), and no other server reads it in input; citations (an input
    message has no annotations); hosted activities; unknown artifacts.

Settings
    From the newest `ResponseStarted` that carries settings: its native request (the body
    less `messages`) when it is this provider's and bound to the same server, else the
    portable settings (client tools as `function` tools, tool choice, max tokens as
    `max_completion_tokens`). `model`: the argument, then `config.model`, then the newest
    openai-chat response's model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from convstore.adapters.openai_chat.config import ChatConfig
from convstore.adapters.openai_chat.context import PROVIDER, SERVER_FIELD
from convstore.adapters.wire.consent import kept_declared_notes
from convstore.adapters.wire.encoding import (
    ENCODER,
    RAW_FIELDS,
    ResponseSpan,
    Scan,
    client_tools,
    context_envelope,
    event_loss,
    recorded_native,
    settings_loss,
    target_model,
)
from convstore.adapters.wire.models import ModelId, ModelNames
from convstore.adapters.wire.providers import Loss
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
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.vocabulary import ProviderPayload, ToolDeclaration

__all__ = ["EncodedRequest", "encode_request"]

_RESPONSE_METADATA: Final = frozenset({"response_fields", "choice_fields", "unread_usage"})
"""Artifact formats that describe a response rather than hold its content: never sent,
and no loss (the store keeps them)."""


@dataclass(frozen=True, slots=True)
class EncodedRequest:
    """A Chat Completions request: its body and what it leaves out."""

    body: dict[str, Any]
    """Builtins plus `msgspec.Raw` values; encode with `to_json` to keep payload bytes."""
    server: str = ""
    """The server the request goes to (the configured `base_url`'s host)."""
    losses: list[Loss] = field(default_factory=list)
    kept_declared: tuple[str, ...] = ()
    """Hosted tools declared for pending work: none on this format."""

    @property
    def notes(self) -> list[str]:
        """One sentence per hosted tool kept declared for pending work, for a person."""
        return kept_declared_notes(self)

    def to_json(self) -> bytes:
        """The body as JSON, every stored payload embedded byte for byte."""
        return ENCODER.encode(self.body)

    def recorded_json(self) -> bytes:
        """The request as its recording keeps it: the body and the server it went to
        (`context.SERVER_FIELD`: its payloads are bound to it)."""
        return ENCODER.encode({**self.body, SERVER_FIELD: self.server})


def _model_id(model: str) -> ModelId:
    """A model name as compatible servers spell it: one name, one model (no naming rule
    is common to them; a recording joins an alias to what it resolved to)."""
    return ModelId(base=model.strip().lower())


class _Target:
    """Where the request goes, and which stored payloads hold for it."""

    def __init__(self, model: str, server: str, names: ModelNames) -> None:
        self.model = model
        self.server = server
        self.names = names

    def mismatch(self, payload: ProviderPayload) -> str | None:
        """Why `payload` cannot be replayed to this target (None: it can)."""
        if payload.provider != PROVIDER:
            return f"{payload.provider}'s payload, not this format's"
        bound_server = payload.binding.get("server", "")
        if bound_server != self.server:
            where = repr(bound_server) if bound_server else "an unnamed server"
            return f"bound to {where}, not {self.server!r}"
        model = payload.binding.get("model", "")
        if model and not self.names.same(model, self.model):
            return f"bound to model {model!r}, not {self.model!r}"
        return None


class _Assistant:
    """The assistant message of one response, as its events arrive."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.texts: list[str] = []
        self.refusals: list[str] = []
        self.calls: list[Any] = []
        self.extra: dict[str, msgspec.Raw] = {}

    def message(self) -> dict[str, Any] | None:
        if not (self.texts or self.refusals or self.calls):
            return None
        message: dict[str, Any] = {"role": "assistant", **self.extra}
        message["content"] = "".join(self.texts) if self.texts else None
        if self.refusals:
            message["refusal"] = "".join(self.refusals)
        if self.calls:
            message["tool_calls"] = self.calls
        return message


def encode_request(
    events: Sequence[Event],
    *,
    config: ChatConfig,
    model: str | None = None,
    user: str | None = None,
) -> EncodedRequest:
    """The request continuing the conversation of `events` on the configured server.

    `model` overrides `config.model`, which overrides the newest openai-chat response's
    model; `user` appends a final user message. Raises ConfigurationError when no model is
    known."""
    events = reading(events)
    scan: Scan[ResponseSpan] = Scan(ResponseSpan, ModelNames(_model_id))
    for event in events:
        scan.note(event)
    newest = next(
        (
            e.model
            for e in reversed(events)
            if isinstance(e, ResponseStarted) and e.provider == PROVIDER and e.origin == "provider"
        ),
        None,
    )
    target = _Target(
        target_model(PROVIDER, "gpt-4.1", model, config.model, newest), config.server, scan.models
    )
    losses: list[Loss] = []
    messages: list[Any] = []
    assistant: _Assistant | None = None
    for event in events:
        if isinstance(event, ResponseStarted):
            assistant = _Assistant(event.provider)
        elif isinstance(event, ResponseEnded):
            message = assistant.message() if assistant is not None else None
            if message is not None:
                messages.append(message)
            assistant = None
        elif isinstance(event, UserMessage):
            content: Any = (
                event.blocks[0]
                if len(event.blocks) == 1
                else [{"type": "text", "text": block} for block in event.blocks]
            )
            messages.append({"role": "user", "content": content})
        elif isinstance(event, ContextInjected):
            messages.append({"role": "user", "content": context_envelope(event.source, event.text)})
        elif isinstance(event, ToolCallResponded):
            messages.append(
                {"role": "tool", "tool_call_id": event.call_id, "content": event.content}
            )
        elif assistant is not None:
            _response_event(event, assistant, target, losses)
        elif isinstance(event, UnknownArtifact) and _user_part(event, messages):
            continue
        elif isinstance(event, UnknownArtifact | HostedActivity):
            losses.append(event_loss(event, _kind(event), "outside any response; left out"))
    if user:
        messages.append({"role": "user", "content": user})
    source = scan.newest_with_settings
    body = _settings(source, target, _server_of(events, source), losses)
    system = scan.newest_with_settings.settings.system if scan.newest_with_settings else None
    if system:
        messages.insert(0, {"role": "system", "content": system})
    body["messages"] = messages
    return EncodedRequest(body=body, server=target.server, losses=[*losses, *scan.models.assumed()])


def _user_part(event: UnknownArtifact, messages: list[Any]) -> bool:
    """Add a user message's part this format kept (an image, audio, a file: `user_part`)
    to the user message before it, or a message of a role it does not type (`message`)
    as it came; False for any other artifact."""
    payload = event.payload
    if payload.provider != PROVIDER or payload.format not in ("user_part", "message"):
        return False
    part = msgspec.Raw(payload.raw)
    if payload.format == "message":
        messages.append(part)
        return True
    last = messages[-1] if messages else None
    if isinstance(last, dict) and last.get("role") == "user":
        content = last["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        last["content"] = [*content, part]
    else:
        messages.append({"role": "user", "content": [part]})
    return True


def _kind(event: Event) -> str:
    return "hosted_activity" if isinstance(event, HostedActivity) else "unknown_artifact"


def _response_event(
    event: Event, assistant: _Assistant, target: _Target, losses: list[Loss]
) -> None:
    """Add one event of a response to its assistant message (or to the losses)."""
    if isinstance(event, AssistantText):
        # A refusal: an openai-chat text without a payload (a text carries its message).
        refusal = assistant.provider == PROVIDER and event.payload is None
        (assistant.refusals if refusal else assistant.texts).append(event.text)
        if event.attributions:
            losses.append(
                event_loss(event, "citations", "a Chat Completions input message has no citations")
            )
    elif isinstance(event, ToolCallRequested):
        why = target.mismatch(event.payload) if event.payload is not None else "no payload"
        if why is None and event.payload is not None:
            assistant.calls.append(msgspec.Raw(event.payload.raw))
            return
        if event.payload is not None:
            losses.append(event_loss(event, "payload", f"{why}: the call is rebuilt portably"))
        assistant.calls.append(
            {
                "id": event.call_id,
                "type": "function",
                "function": {
                    "name": event.name,
                    "arguments": ENCODER.encode(event.arguments).decode(),
                },
            }
        )
    elif isinstance(event, Reasoning):
        payload = event.payload
        if (
            payload is not None
            and payload.format == "reasoning_details"
            and target.mismatch(payload) is None
        ):
            assistant.extra["reasoning_details"] = msgspec.Raw(payload.raw)
            return
        losses.append(
            event_loss(
                event,
                "reasoning",
                "a Chat Completions input message carries no reasoning (DeepSeek refuses"
                " reasoning_content sent back)",
            )
        )
    elif isinstance(event, UnknownArtifact):
        payload = event.payload
        if payload.provider == PROVIDER and payload.format in _RESPONSE_METADATA:
            return
        if payload.format == "message_fields" and target.mismatch(payload) is None:
            try:
                assistant.extra.update(RAW_FIELDS.decode(payload.raw))
            except (msgspec.DecodeError, msgspec.ValidationError):
                pass
            else:
                return
        losses.append(
            event_loss(event, "unknown_artifact", f"{payload.provider} {payload.format}: left out")
        )
    elif isinstance(event, HostedActivity):
        losses.append(event_loss(event, "hosted_activity", f"{event.name}: not replayable here"))


def _server_of(events: Sequence[Event], source: ResponseStarted | None) -> str:
    """The server the response `source` came from, as its payloads' binding names it."""
    if source is None:
        return ""
    for event in events:
        payload = getattr(event, "payload", None)
        if getattr(event, "response_id", None) == source.response_id and payload is not None:
            server = payload.binding.get("server")
            if server:
                return str(server)
    return ""


def _settings(
    source: ResponseStarted | None, target: _Target, server: str, losses: list[Loss]
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": target.model}
    native = None
    if source is not None and source.provider == PROVIDER:
        if server == target.server:
            native = recorded_native(source, PROVIDER, losses)
        else:
            where = repr(server) if server else "an unnamed server"
            reason = f"recorded for {where}, not {target.server!r}; portable settings used"
            losses.append(settings_loss(source, reason))
    if native is not None:
        native = {k: v for k, v in native.items() if k != "model"}
        body.update(native)
        return body
    if source is None:
        return body
    tools = client_tools(source, PROVIDER, losses)
    if tools:
        body["tools"] = [_tool(t) for t in tools]
    choice = source.settings.tool_choice
    if choice is not None:
        names = {t.name for t in tools}
        if choice in ("auto", "none"):
            body["tool_choice"] = choice
        elif choice == "any" and tools:
            body["tool_choice"] = "required"
        elif choice in names:
            body["tool_choice"] = {"type": "function", "function": {"name": choice}}
        else:
            losses.append(
                settings_loss(
                    source, f"tool choice {choice!r} names no declared function", kind="tool_choice"
                )
            )
    if source.settings.max_tokens is not None:
        body["max_completion_tokens"] = source.settings.max_tokens
    return body


def _tool(tool: ToolDeclaration) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = tool.input_schema or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}
