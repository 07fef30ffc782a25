"""Stored events → the `input` items of a Responses API request: the history walk.

Part of the OpenAI encoder (see `encode` for the rules): every event becomes input
items, each stored item replayed byte for byte when its response can be, and a loss
otherwise; tool call ids and function names made valid for the API, deterministically.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from convstore.adapters.openai.binding import (
    OUTPUT_ITEM,
    ResponseScan,
    portable_reason,
)
from convstore.adapters.openai.context import PROVIDER
from convstore.adapters.wire.counts import UNREAD_USAGE
from convstore.adapters.wire.encoding import (
    ENCODER,
    context_envelope,
    event_loss,
)
from convstore.adapters.wire.providers import Loss
from convstore.domain.events import (
    AssistantText,
    ContextInjected,
    Event,
    HostedActivity,
    Reasoning,
    ToolCallRequested,
    ToolCallResponded,
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.vocabulary import ProviderPayload

INPUT_ITEM: Final = "input_item"
"""Payload format of an item kept from a captured request's `input` (user side)."""


_NOT_CONTENT: Final = frozenset({"response_fields", "stream_event", UNREAD_USAGE})
"""OpenAI UnknownArtifact formats that were never content: not replayed, not a loss."""


@dataclass(slots=True)
class BuiltInput:
    """The `input` items of a conversation, and what building them left out."""

    items: list[Any]
    """Each item a `msgspec.Raw` (a stored payload) or builtins."""
    losses: list[Loss]
    pending: list[HostedActivity]
    """The `started` transitions of pending hosted activities replayed."""
    reasoning_replayed: bool = False


def build_input(events: Sequence[Event], *, model: str, store: bool) -> BuiltInput:
    """The request's `input` items for `events`, payload bindings checked against `model`
    and reasoning items against `store`."""
    scan = ResponseScan(events)
    builder = _InputBuilder(scan, model, store)
    for event in events:
        builder.add(event)
    return BuiltInput(
        items=builder.items,
        losses=[*builder.losses, *scan.models.assumed()],
        pending=builder.pending,
        reasoning_replayed=builder.reasoning_replayed,
    )


def user_item(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "input_text", "text": text}]}


_FUNCTION_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
_FUNCTION_NAME_BAD: Final = re.compile(r"[^A-Za-z0-9_-]")


def function_name(name: str) -> str:
    """A function name OpenAI accepts (`[A-Za-z0-9_-]{1,64}`), derived deterministically."""
    if _FUNCTION_NAME.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{_FUNCTION_NAME_BAD.sub('_', name)[:55]}_{digest}"


MAX_CALL_ID: Final = 64
"""The longest `call_id` sent as it is; a longer one (another provider's) is shortened."""


def call_id_for(call_id: str) -> str:
    """The `call_id` sent for a stored call id: itself, or, past `MAX_CALL_ID` characters,
    a deterministic shortening (the same for a call and its output)."""
    if len(call_id) <= MAX_CALL_ID:
        return call_id
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:16]
    return f"{call_id[: MAX_CALL_ID - 17]}_{digest}"


def fresh_call_item_id(response_id: str, call_id: str) -> str:
    """The deterministic `fc_…` id of a tool call sent in portable form."""
    return "fc_" + hashlib.sha256(f"{response_id}\0{call_id}".encode()).hexdigest()[:40]


_OUTPUT_OF_CALL: Final[Mapping[str, str]] = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
}
"""Call item type → the output item type whose `output` is text."""

_FOREIGN: Final = "foreign"


class _MessageShape(msgspec.Struct):
    id: str = ""
    content: msgspec.Raw = msgspec.Raw(b"null")


_MESSAGE_SHAPE: Final = msgspec.json.Decoder(_MessageShape)


def _replayable_message(payload: ProviderPayload) -> bool:
    """Whether a message item can go back as stored: an output message with its `id`, or
    the short form whose content is a string (as a client sent it). A message of
    `output_text` parts without an id (some clients send one) is neither."""
    try:
        shape = _MESSAGE_SHAPE.decode(payload.raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
    return bool(shape.id) or bytes(shape.content).lstrip().startswith(b'"')


class _InputBuilder:
    """Folds events into input items, deciding for each payload whether it is replayed."""

    def __init__(self, scan: ResponseScan, model: str, store: bool) -> None:
        self.scan = scan
        self.model = model
        self.store = store
        self.items: list[Any] = []
        self.losses: list[Loss] = []
        self.pending: list[HostedActivity] = []
        self.reasoning_replayed = False
        self._why: dict[str, str | None] = {}
        """Response id → why it is sent in portable form (`_FOREIGN` for another provider's;
        None: replayed natively)."""
        self._sent: set[tuple[str, bytes]] = set()
        """(response id, payload bytes) of message items already sent."""
        self._message: tuple[str, dict[str, Any]] | None = None
        """The portable assistant message the next text of the same response joins."""
        self._fate: dict[str, bool] = {}
        """Activity id → whether its item is replayed (decided at its first event)."""
        self._portable_calls: set[str] = set()

    # --- helpers ---

    def lose(self, event: Event, kind: str, reason: str) -> None:
        self.losses.append(event_loss(event, kind, reason))

    def emit(self, item: Any) -> None:
        self._message = None
        self.items.append(item)

    def why_portable(self, response_id: str | None) -> str | None:
        """None when the response is replayed natively; else why not."""
        key = response_id or ""
        if key in self._why:
            return self._why[key]
        response = self.scan.responses.get(key)
        if response is None:
            why: str | None = "its response is not in the conversation"
        elif response.started.provider != PROVIDER:
            why = _FOREIGN
        else:
            why = portable_reason(response, self.model, self.store, self.scan.models)
        self._why[key] = why
        return why

    def foreign(self, response_id: str | None) -> str:
        return self.scan.provider_of(response_id) or "another provider"

    # --- events ---

    def add(self, event: Event) -> None:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    def user_message(self, event: UserMessage) -> None:
        if event.blocks:
            content = [{"type": "input_text", "text": text} for text in event.blocks]
            self.emit({"role": "user", "content": content})

    def context(self, event: ContextInjected) -> None:
        self.emit(user_item(context_envelope(event.source, event.text)))

    def text(self, event: AssistantText) -> None:
        why = self.why_portable(event.response_id)
        payload = event.payload
        if why is None and payload is not None and payload.format == OUTPUT_ITEM:
            if _replayable_message(payload):
                key = (event.response_id, payload.raw)
                if key not in self._sent:
                    self._sent.add(key)
                    self.emit(payload.value)
                return
            why = "an assistant message of output_text parts without its item id"
        if payload is not None:
            self.payload_loss(event, payload, why)
        self.portable_text(event)

    def payload_loss(self, event: Event, payload: ProviderPayload, why: str | None) -> None:
        if payload.provider != PROVIDER:
            self.lose(event, "payload", f"{payload.provider} {payload.format} payload left out")
        elif why is not None and why != _FOREIGN:
            self.lose(event, "payload", f"openai {payload.format} payload left out: {why}")
        else:
            self.lose(event, "payload", f"openai {payload.format} payload left out")

    def portable_text(self, event: AssistantText) -> None:
        """Assistant text without an OpenAI message item to replay: plain-string content
        (an output message needs the item's own `id`, never invented), the texts of one
        response joined into one message; the annotations it cannot carry are listed."""
        if event.attributions:
            self.lose(
                event,
                "citations",
                f"{len(event.attributions)} citation(s) left out: text sent without its "
                "OpenAI message item is plain-string content, which carries no annotations",
            )
        if not event.text:
            return
        current = self._message
        if current is not None and current[0] == event.response_id:
            current[1]["content"] += event.text
            return
        message = {"role": "assistant", "content": event.text}
        self.emit(message)
        self._message = (event.response_id, message)

    def reasoning(self, event: Reasoning) -> None:
        why = self.why_portable(event.response_id)
        if why == _FOREIGN:
            self.lose(event, "reasoning", f"{self.foreign(event.response_id)} reasoning left out")
            return
        if why is not None:
            self.lose(event, "reasoning", f"reasoning left out: {why}")
            return
        assert event.payload is not None  # checked by `portable_reason`
        self.reasoning_replayed = True
        self.emit(event.payload.value)

    def tool_call(self, event: ToolCallRequested) -> None:
        why = self.why_portable(event.response_id)
        payload = event.payload
        if why is None and payload is not None and payload.format == OUTPUT_ITEM:
            self.emit(payload.value)
            return
        if payload is not None:
            self.payload_loss(event, payload, why)
        self._portable_calls.add(event.call_id)
        self.emit(
            {
                "type": "function_call",
                "id": fresh_call_item_id(event.response_id, event.call_id),
                "call_id": call_id_for(event.call_id),
                "name": function_name(event.name),
                "arguments": ENCODER.encode(event.arguments).decode(),
            }
        )

    def tool_result(self, event: ToolCallResponded) -> None:
        payload = event.payload
        if payload is not None and payload.provider == PROVIDER and payload.format == INPUT_ITEM:
            self.emit(payload.value)
            return
        if payload is not None:
            self.lose(event, "payload", f"{payload.provider} {payload.format} payload left out")
        kind = "function_call_output"
        if event.call_id not in self._portable_calls:
            call_type = self.scan.calls.get(event.call_id, "function_call")
            output_type = _OUTPUT_OF_CALL.get(call_type)
            if output_type is None:
                self.lose(
                    event,
                    "tool_result",
                    f"the result of a {call_type} is sent as function_call_output: its own "
                    "output item cannot be rebuilt from text",
                )
            else:
                kind = output_type
        if event.is_error:
            self.lose(
                event,
                "tool_result",
                "is_error left out: function_call_output has no error flag; the content is "
                "sent as it is",
            )
        self.emit({"type": kind, "call_id": call_id_for(event.call_id), "output": event.content})

    def activity(self, event: HostedActivity) -> None:
        replay = self._fate.get(event.activity_id)
        if replay is None:
            replay = self._fate[event.activity_id] = self.decide(event)
        if not replay:
            return
        known = self.scan.activities[event.activity_id]
        started = known.started.payload if known.started is not None else None
        if event is known.started and started is not None and started.format == OUTPUT_ITEM:
            # A pending activity's item, or the call item of work whose result is its own
            # item (`paired_items`: hosted shell, tool search, MCP approval), in its place.
            self.emit(started.value)
        elif event is known.terminal and known.terminal.payload is not None:
            self.emit(known.terminal.payload.value)

    def decide(self, event: HostedActivity) -> bool:
        """Whether an activity's item is replayed: its terminal item, or the started one
        when the activity is pending."""
        known = self.scan.activities.get(event.activity_id)
        started = known.started if known else None
        terminal = known.terminal if known else None
        name = event.name
        response_id = (started or event).response_id
        why = self.why_portable(response_id)
        if why == _FOREIGN:
            provider = self.foreign(response_id)
            self.lose(event, "hosted_activity", f"{provider} {name} activity left out")
            return False
        if started is None:
            self.lose(event, "hosted_activity", f"{name}: its start is not in the conversation")
            return False
        if terminal is None:
            state = self.scan.end_state(started.response_id)
            if state != "completed":
                self.lose(
                    started,
                    "hosted_activity",
                    f"{name}: interrupted (its response ended {state}); left out",
                )
                return False
            if why is not None:
                self.lose(started, "hosted_activity", f"{name} left out: {why}")
                return False
            payload = started.payload
            if payload is None or payload.format != OUTPUT_ITEM:
                self.lose(started, "hosted_activity", f"{name}: pending without a whole item")
                return False
            self.pending.append(started)
            return True
        if terminal.state == "abandoned":
            self.lose(terminal, "hosted_activity", f"{name}: abandoned; left out")
            return False
        if why is not None:
            self.lose(terminal, "hosted_activity", f"{name} left out: {why}")
            return False
        payload = terminal.payload
        if payload is None or payload.provider != PROVIDER or payload.format != OUTPUT_ITEM:
            self.lose(terminal, "hosted_activity", f"{name}: no whole item to replay")
            return False
        return True

    def unknown(self, event: UnknownArtifact) -> None:
        payload = event.payload
        if payload.provider != PROVIDER:
            self.lose(event, "unknown_artifact", f"{payload.provider} {payload.format} left out")
            return
        if payload.format in _NOT_CONTENT:
            return
        if payload.format == INPUT_ITEM:
            self.emit(payload.value)
            return
        if event.response_id is None:
            self.lose(event, "unknown_artifact", f"{payload.format} outside a response left out")
            return
        why = self.why_portable(event.response_id)
        if why is None and payload.format == OUTPUT_ITEM:
            self.emit(payload.value)
            return
        reason = why if why is not None else f"a {payload.format} payload is never replayed"
        self.lose(event, "unknown_artifact", f"openai {payload.format} left out: {reason}")


_HANDLERS: Final[Mapping[type[Event], Any]] = {
    UserMessage: _InputBuilder.user_message,
    ContextInjected: _InputBuilder.context,
    AssistantText: _InputBuilder.text,
    Reasoning: _InputBuilder.reasoning,
    ToolCallRequested: _InputBuilder.tool_call,
    ToolCallResponded: _InputBuilder.tool_result,
    HostedActivity: _InputBuilder.activity,
    UnknownArtifact: _InputBuilder.unknown,
}
