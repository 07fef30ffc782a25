"""Stored events → the `messages` of an Anthropic request: the history walk.

Part of the Anthropic encoder (see `encode` for the rules): every event becomes content
blocks of a user or assistant message, each payload replayed byte for byte when it is
Anthropic's, whole, and bound to the target model, and a loss otherwise.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from convstore.adapters.anthropic.binding import model_names
from convstore.adapters.anthropic.context import PROVIDER
from convstore.adapters.wire.counts import UNREAD_USAGE
from convstore.adapters.wire.encoding import (
    ResponseSpan,
    Scan,
    context_envelope,
    event_loss,
)
from convstore.adapters.wire.providers import Loss, payload_type
from convstore.domain.events import (
    AssistantText,
    ContextInjected,
    Event,
    HostedActivity,
    Reasoning,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.vocabulary import ProviderPayload

USER_CONTENT_BLOCK: Final = "user_content_block"
"""UnknownArtifact format of a user-side block kept from a captured request (an image, a
document): replayed in a user message."""

_REPLAYED_FORMATS: Final = frozenset({"content_block"})
_NOT_CONTENT: Final = frozenset({"stream_event", "message_fields", UNREAD_USAGE})
"""UnknownArtifact formats that were never message content: not replayed, not a loss."""


class MessageBlock(msgspec.Struct, kw_only=True):
    """One content block of a message: a stored payload (`msgspec.Raw`) or built JSON."""

    type: str
    value: Any
    """`msgspec.Raw` (embedded byte for byte) or builtins (may hold `msgspec.Raw`s)."""

    def json(self) -> Any:
        """The block as builtins (for inspection; encoding uses `value`)."""
        value = self.value
        if isinstance(value, msgspec.Raw):
            return msgspec.json.decode(value)
        return msgspec.json.decode(msgspec.json.encode(value))


class Message(msgspec.Struct, kw_only=True):
    """One message of the request."""

    role: str
    blocks: list[MessageBlock] = []

    def wire(self) -> dict[str, Any]:
        """The message as the request carries it."""
        return {"role": self.role, "content": [b.value for b in self.blocks]}


@dataclass(slots=True)
class BuiltMessages:
    """The messages of a conversation, and what building them left out."""

    messages: list[Message]
    losses: list[Loss]
    pending: list[HostedActivity]
    """The `started` transitions of pending hosted activities replayed."""
    container: str | None = None
    """The code execution container to continue in, when a continuation needs it."""


def build_messages(events: Sequence[Event], *, model: str) -> BuiltMessages:
    """The request messages for `events`, with payload bindings checked against `model`."""
    scan = MessageScan(events)
    builder = _MessageBuilder(scan, model)
    for event in events:
        builder.add(event)
    messages = builder.messages
    for message in messages:
        if message.role == "user":
            message.blocks.sort(key=lambda b: b.type != "tool_result")  # stable
    return BuiltMessages(
        messages=messages,
        losses=[*builder.losses, *scan.models.assumed()],
        pending=builder.pending,
        container=scan.continuation_container(),
    )


def append_block(messages: list[Message], role: str, block: MessageBlock) -> None:
    if messages and messages[-1].role == role:
        messages[-1].blocks.append(block)
    else:
        messages.append(Message(role=role, blocks=[block]))


@dataclass(slots=True)
class _Response(ResponseSpan):
    container: str | None = None


class MessageScan(Scan[_Response]):
    """The shared scan, with the code execution container each response ran in."""

    def __init__(self, events: Sequence[Event]) -> None:
        super().__init__(_Response, model_names())
        self.last_response: _Response | None = None
        for event in events:
            self.note(event)
            if isinstance(event, ResponseStarted):
                self.last_response = self.responses[event.response_id]
            elif isinstance(event, UnknownArtifact) and event.response_id is not None:
                self._container(event)

    def _container(self, event: UnknownArtifact) -> None:
        payload = event.payload
        if payload.provider != PROVIDER or payload.format != "message_fields":
            return
        response = self.responses.get(event.response_id or "")
        if response is None:
            return
        try:
            container = msgspec.json.decode(payload.raw).get("container")
        except (msgspec.DecodeError, AttributeError):
            return
        if isinstance(container, dict) and isinstance(container.get("id"), str):
            response.container = container["id"]
        elif isinstance(container, str):
            response.container = container

    def continuation_container(self) -> str | None:
        """The newest response's container, when that response is continued (pause_turn,
        or a mixed batch stopped with tool_use); a finished turn starts afresh."""
        last = self.last_response
        if last is None or last.container is None or last.ended is None:
            return None
        if last.ended.state == "completed" and last.ended.stop_reason in ("pause_turn", "tool_use"):
            return last.container
        return None


class _MessageBuilder:
    """Folds events into messages, deciding for each payload whether it can be replayed."""

    def __init__(self, scan: MessageScan, model: str) -> None:
        self.scan = scan
        self.model = model
        self.messages: list[Message] = []
        self.losses: list[Loss] = []
        self.pending: list[HostedActivity] = []
        self.ids: dict[str, str] = {}
        self.decided: dict[str, bool] = {}
        """Activity id → whether its blocks are replayed (decided at its first event)."""

    # --- helpers ---

    def lose(self, event: Event, kind: str, reason: str) -> None:
        self.losses.append(event_loss(event, kind, reason))

    def emit(self, role: str, block_type: str, value: Any) -> None:
        append_block(self.messages, role, MessageBlock(type=block_type, value=value))

    def replayable(self, event: Event, payload: ProviderPayload | None, kind: str) -> bool:
        """True when `payload` is Anthropic's, whole, and bound to the target model; a
        loss otherwise (nothing, when there is no payload)."""
        if payload is None:
            return False
        if payload.provider != PROVIDER:
            self.lose(event, kind, f"{payload.provider} {payload.format} payload left out")
            return False
        if payload.format not in _REPLAYED_FORMATS:
            self.lose(event, kind, f"{payload.format} payload (cut short) left out")
            return False
        why = self.scan.models.mismatch(payload, self.model)
        if why is not None:
            self.lose(event, kind, f"payload left out: {why}")
            return False
        return True

    def call_id(self, call_id: str) -> str:
        """A tool call id Anthropic accepts (`[A-Za-z0-9_-]+`), derived deterministically."""
        if _TOOL_ID.fullmatch(call_id):
            return call_id
        mapped = self.ids.get(call_id)
        if mapped is None:
            digest = hashlib.sha256(call_id.encode()).hexdigest()[:12]
            mapped = self.ids[call_id] = f"{_TOOL_ID_BAD.sub('_', call_id)[:40]}_{digest}"
        return mapped

    # --- events ---

    def add(self, event: Event) -> None:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    def user_message(self, event: UserMessage) -> None:
        for text in event.blocks:
            self.emit("user", "text", {"type": "text", "text": text})

    def context(self, event: ContextInjected) -> None:
        text = context_envelope(event.source, event.text)
        self.emit("user", "text", {"type": "text", "text": text})

    def text(self, event: AssistantText) -> None:
        if not event.text:
            if event.attributions:
                self.lose(event, "text", "empty text block left out with its citations")
            return
        block: dict[str, Any] = {"type": "text", "text": event.text}
        citations: list[msgspec.Raw] = []
        if event.attributions:
            foreign = self.scan.provider_of(event.response_id) != PROVIDER
            response_model = self.scan.model_of(event.response_id)
            unbound = bool(response_model) and not self.scan.models.same(response_model, self.model)
            for attribution in event.attributions:
                replay = attribution.replay
                if foreign or replay is None or replay.provider != PROVIDER:
                    continue
                if unbound or self.scan.models.mismatch(replay, self.model) is not None:
                    continue
                citations.append(replay.value)
            dropped = len(event.attributions) - len(citations)
            if dropped:
                why = (
                    "Anthropic cannot carry another provider's citations"
                    if foreign
                    else f"their response came from model {response_model!r}, not "
                    f"{self.model!r}, and its search results are left out"
                    if unbound
                    else "no Anthropic replay value"
                )
                self.lose(event, "citations", f"{dropped} citation(s) left out: {why}")
        if citations:
            block["citations"] = citations
        self.emit("assistant", "text", block)

    def reasoning(self, event: Reasoning) -> None:
        provider = self.scan.provider_of(event.response_id)
        if provider and provider != PROVIDER:
            self.lose(event, "reasoning", f"{provider} reasoning left out")
            return
        if event.payload is None:
            what = "redacted reasoning" if event.redacted else "reasoning"
            self.lose(event, "reasoning", f"{what} without a signature (cut short) left out")
            return
        if self.replayable(event, event.payload, "reasoning"):
            self.emit("assistant", payload_type(event.payload), event.payload.value)

    def tool_call(self, event: ToolCallRequested) -> None:
        payload = event.payload
        if payload is not None and payload.provider == PROVIDER:
            if self.replayable(event, payload, "payload"):
                self.emit("assistant", "tool_use", payload.value)
                return
        elif payload is not None:
            self.lose(event, "payload", f"{payload.provider} {payload.format} payload left out")
        block = {
            "type": "tool_use",
            "id": self.call_id(event.call_id),
            "name": event.name,
            "input": event.arguments,
        }
        self.emit("assistant", "tool_use", block)

    def tool_result(self, event: ToolCallResponded) -> None:
        payload = event.payload
        if (
            payload is not None
            and payload.provider == PROVIDER
            and self.replayable(event, payload, "payload")
        ):
            self.emit("user", "tool_result", payload.value)
            return
        if payload is not None and payload.provider != PROVIDER:
            self.lose(event, "payload", f"{payload.provider} {payload.format} payload left out")
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": self.call_id(event.call_id)}
        if event.content:
            block["content"] = event.content
        if event.is_error:
            block["is_error"] = True
        self.emit("user", "tool_result", block)

    def activity(self, event: HostedActivity) -> None:
        replay = self.decided.get(event.activity_id)
        if replay is None:
            replay = self.decided[event.activity_id] = self.decide(event)
        if not replay or event.payload is None:
            return
        if event.state != "abandoned":  # the call block, then the result block
            self.emit("assistant", payload_type(event.payload), event.payload.value)

    def decide(self, event: HostedActivity) -> bool:
        """Whether an activity's blocks are replayed: both, or the call alone when pending."""
        known = self.scan.activities.get(event.activity_id)
        started = known.started if known else None
        terminal = known.terminal if known else None
        name = event.name
        provider = self.scan.provider_of((started or event).response_id)
        if provider and provider != PROVIDER:
            self.lose(event, "hosted_activity", f"{provider} {name} activity left out")
            return False
        if started is None:
            self.lose(event, "hosted_activity", f"{name}: its call is not in the conversation")
            return False
        if started.payload is None:
            self.lose(event, "hosted_activity", f"{name}: no payload, neither block replayed")
            return False
        if not self.replayable(started, started.payload, "hosted_activity"):
            return False
        if terminal is None:
            state = self.scan.end_state(started.response_id)
            if state != "completed":
                self.lose(
                    started,
                    "hosted_activity",
                    f"{name}: interrupted (its response ended {state}); neither block replayed",
                )
                return False
            self.pending.append(started)
            return True
        if terminal.state == "abandoned":
            self.lose(terminal, "hosted_activity", f"{name}: abandoned; neither block replayed")
            return False
        if terminal.payload is None:
            self.lose(terminal, "hosted_activity", f"{name}: result without a payload")
            return False
        return self.replayable(terminal, terminal.payload, "hosted_activity")

    def unknown(self, event: UnknownArtifact) -> None:
        payload = event.payload
        if payload.provider != PROVIDER:
            self.lose(event, "unknown_artifact", f"{payload.provider} {payload.format} left out")
            return
        if payload.format in _NOT_CONTENT:
            return
        if payload.format == USER_CONTENT_BLOCK:
            self.emit("user", payload_type(payload), payload.value)
            return
        if event.response_id is None:
            self.lose(event, "unknown_artifact", f"{payload.format} outside a response left out")
            return
        if self.replayable(event, payload, "unknown_artifact"):
            self.emit("assistant", payload_type(payload), payload.value)


_TOOL_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,256}")
_TOOL_ID_BAD: Final = re.compile(r"[^A-Za-z0-9_-]")

_HANDLERS: Final[Mapping[type[Event], Any]] = {
    UserMessage: _MessageBuilder.user_message,
    ContextInjected: _MessageBuilder.context,
    AssistantText: _MessageBuilder.text,
    Reasoning: _MessageBuilder.reasoning,
    ToolCallRequested: _MessageBuilder.tool_call,
    ToolCallResponded: _MessageBuilder.tool_result,
    HostedActivity: _MessageBuilder.activity,
    UnknownArtifact: _MessageBuilder.unknown,
}
