"""Stored events → the `contents` of a Gemini request: the history walk.

Part of the Gemini encoder (see `encode` for the rules): every event becomes parts of a
user or model content, each stored part replayed byte for byte (its thought signature
included) when its binding holds, and a loss otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from convstore.adapters.google.binding import SKIP_SIGNATURE, function_name, model_names
from convstore.adapters.google.config import model_generation
from convstore.adapters.google.context import PROVIDER
from convstore.adapters.google.request_parts import (
    call_of,
    fields_of,
    fields_of_raw,
    given_id,
    part_kind,
    response_of,
    response_part,
    result_object,
    stored_parts,
    stored_response,
)
from convstore.adapters.wire.counts import UNREAD_USAGE
from convstore.adapters.wire.encoding import (
    ANY_JSON,
    ENCODER,
    ResponseSpan,
    Scan,
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
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.vocabulary import ProviderPayload

USER_PART: Final = "user_part"
"""UnknownArtifact format of a user-side part kept from a captured request (inline data,
a file): replayed in a user content."""

NOT_CONTENT: Final = frozenset(
    {
        "grounding_metadata",
        "url_context_metadata",
        "response_fields",
        "candidate_fields",
        "candidate",
        "chunk",
        UNREAD_USAGE,
    }
)
"""UnknownArtifact / activity payload formats that were never content: not replayed, no
loss."""

STORED_PARTS: Final = frozenset({"part", "parts"})
"""Payload formats holding whole parts: one part, or several in order (a code run's
results)."""


@dataclass(slots=True)
class Part:
    kind: str
    """`text`, `thought`, `functionCall`, `functionResponse`, `executableCode`, … (the
    part's data field), for ordering and inspection."""
    value: Any
    """`msgspec.Raw` (embedded byte for byte) or builtins (may hold `msgspec.Raw`s)."""

    def json(self) -> Any:
        value = self.value
        if isinstance(value, msgspec.Raw):
            return ANY_JSON.decode(value)
        return ANY_JSON.decode(ENCODER.encode(value))


@dataclass(slots=True)
class Content:
    """One content of the request."""

    role: str
    """`user` or `model`."""
    parts: list[Part] = field(default_factory=list)

    def wire(self) -> dict[str, Any]:
        """The content as the request carries it."""
        return {"role": self.role, "parts": [p.value for p in self.parts]}

    def json_parts(self) -> list[Any]:
        """The parts as builtins (for matching; encoding uses the stored bytes)."""
        return [p.json() for p in self.parts]


def append_part(contents: list[Content], role: str, part: Part) -> None:
    if contents and contents[-1].role == role:
        contents[-1].parts.append(part)
    else:
        contents.append(Content(role=role, parts=[part]))


@dataclass(slots=True)
class BuiltContents:
    """The contents of a conversation, and what building them left out."""

    contents: list[Content]
    losses: list[Loss]
    names: set[str] = field(default_factory=set)
    """Function names the contents call (as sent)."""


def build_contents(
    events: Sequence[Event], *, model: str | None, scan: ContentScan | None = None
) -> BuiltContents:
    """The request contents for `events`, payload bindings checked against `model` (None:
    not checked, every stored part replayed)."""
    builder = _Builder(scan or ContentScan(events), model)
    for event in events:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(builder, event)
    for content in builder.contents:
        if content.role == "user":
            content.parts.sort(key=lambda p: p.kind != "functionResponse")  # stable
    losses = [*builder.losses, *builder.scan.models.assumed()]
    return BuiltContents(builder.contents, losses, builder.names)


class ContentScan(Scan[ResponseSpan]):
    """The shared scan, with each call and the newest Gemini response that names its
    model."""

    def __init__(self, events: Sequence[Event]) -> None:
        super().__init__(ResponseSpan, model_names())
        self.calls: dict[str, ToolCallRequested] = {}
        self.newest_google: ResponseStarted | None = None
        for event in events:
            self.note(event)
            if isinstance(event, ResponseStarted):
                if event.provider == PROVIDER and event.model:
                    self.newest_google = event
            elif isinstance(event, ToolCallRequested):
                self.calls.setdefault(event.call_id, event)


class _Builder:
    """Folds events into contents, deciding for each payload whether it can be replayed."""

    def __init__(self, scan: ContentScan, model: str | None) -> None:
        self.scan = scan
        self.model = model
        generation = model_generation(model) if model else None
        self.placeholder = generation is not None and generation.version >= (3, 0)
        """Whether unsigned function calls carry SKIP_SIGNATURE (a Gemini 3 target)."""
        self.contents: list[Content] = []
        self.losses: list[Loss] = []
        self.names: set[str] = set()
        self.decided: dict[str, bool] = {}
        """Activity id → whether its parts are replayed (decided at its first event)."""

    # --- helpers ---

    def lose(self, event: Event, kind: str, reason: str) -> None:
        self.losses.append(event_loss(event, kind, reason))

    def emit(self, role: str, kind: str, value: Any) -> None:
        append_part(self.contents, role, Part(kind, value))

    def foreign(self, response_id: str | None) -> str | None:
        """The provider of a response that is not Google's (None for Google's own)."""
        provider = self.scan.provider_of(response_id)
        return provider if provider and provider != PROVIDER else None

    def replayable(self, event: Event, payload: ProviderPayload | None, kind: str) -> bool:
        """True when `payload` is a whole Gemini part bound to the target model; a loss of
        `kind` otherwise (nothing, when there is no payload)."""
        if payload is None:
            return False
        if payload.provider != PROVIDER:
            self.lose(event, kind, f"{payload.provider} {payload.format} payload left out")
            return False
        if payload.format not in STORED_PARTS:
            self.lose(event, kind, f"{payload.format} payload (cut short) left out")
            return False
        why = None if self.model is None else self.scan.models.mismatch(payload, self.model)
        if why is not None:
            self.lose(event, kind, f"thought signature left out: {why}")
            return False
        return True

    def open_model_calls(self) -> bool:
        """Whether the current model content already holds a function call."""
        last = self.contents[-1] if self.contents else None
        return (
            last is not None
            and last.role == "model"
            and any(p.kind == "functionCall" for p in last.parts)
        )

    # --- events ---

    def user_message(self, event: UserMessage) -> None:
        for text in event.blocks:
            if text:
                self.emit("user", "text", {"text": text})

    def context(self, event: ContextInjected) -> None:
        self.emit("user", "text", {"text": context_envelope(event.source, event.text)})

    def text(self, event: AssistantText) -> None:
        payload = event.payload
        foreign = self.foreign(event.response_id)
        if payload is not None and payload.provider == PROVIDER and foreign is None:
            if self.replayable(event, payload, "payload"):
                self.emit("model", "text", payload.value)
                return
        elif payload is not None:
            self.lose(event, "payload", f"{payload.provider} {payload.format} payload left out")
        if foreign is not None and event.attributions:
            self.lose(
                event,
                "citations",
                f"{len(event.attributions)} citation(s) left out: Gemini cannot carry "
                f"{foreign} citations",
            )
        if event.text:
            self.emit("model", "text", {"text": event.text})

    def reasoning(self, event: Reasoning) -> None:
        foreign = self.foreign(event.response_id)
        if foreign is not None:
            self.lose(event, "reasoning", f"{foreign} reasoning left out")
            return
        if event.payload is None:
            if event.text:
                self.emit("model", "thought", {"text": event.text, "thought": True})
            return
        if self.replayable(event, event.payload, "reasoning"):
            self.emit("model", part_kind(fields_of(event.payload)), event.payload.value)

    def tool_call(self, event: ToolCallRequested) -> None:
        payload = event.payload
        given: str | None = None
        if payload is not None and payload.provider == PROVIDER:
            fields = fields_of(payload)
            given = given_id(call_of(fields))
            if self.replayable(event, payload, "payload"):
                name = call_of(fields).get("name")
                self.names.add(name if isinstance(name, str) else event.name)
                self.emit("model", "functionCall", payload.value)
                return
        elif payload is not None:
            self.lose(event, "payload", f"{payload.provider} {payload.format} payload left out")
        name = function_name(event.name)
        call: dict[str, Any] = {"name": name, "args": event.arguments}
        if given is not None:
            call["id"] = given
        part: dict[str, Any] = {"functionCall": call}
        if self.placeholder and not self.open_model_calls():
            part["thoughtSignature"] = SKIP_SIGNATURE
        self.names.add(name)
        self.emit("model", "functionCall", part)

    def tool_result(self, event: ToolCallResponded) -> None:
        call = self.scan.calls.get(event.call_id)
        call_fields: dict[str, Any] = {}
        if call is not None and call.payload is not None and call.payload.provider == PROVIDER:
            call_fields = call_of(fields_of(call.payload))
        call_id = given_id(call_fields)
        name = call_fields.get("name")
        if not isinstance(name, str) or not name:
            name = function_name(call.name) if call is not None else "unknown_function"
        payload = event.payload
        if payload is not None and payload.provider == PROVIDER and payload.format == "part":
            stored = response_of(fields_of(payload))
            if stored and given_id(stored) == call_id:
                self.emit("user", "functionResponse", payload.value)
                return
            response = stored_response(payload)
            if response is not None:  # the stored object, with the call's id (or none)
                self.emit("user", "functionResponse", response_part(name, response, call_id))
                return
        elif payload is not None:
            self.lose(event, "payload", f"{payload.provider} {payload.format} payload left out")
        value = result_object(event.content, is_error=event.is_error)
        self.emit("user", "functionResponse", response_part(name, value, call_id))

    def activity(self, event: HostedActivity) -> None:
        if event.display is not None:
            self.lose(
                event,
                "display",
                f"{event.display.kind} of {event.name} (a display obligation) is never "
                "replayed as content",
            )
        replay = self.decided.get(event.activity_id)
        if replay is None:
            replay = self.decided[event.activity_id] = self.decide(event)
        if replay and event.payload is not None and event.state != "abandoned":
            for part in stored_parts(event.payload):
                self.emit("model", part_kind(fields_of_raw(part)), part)

    def decide(self, event: HostedActivity) -> bool:
        """Whether an activity's parts are replayed: both, or the result alone when its code
        is in no part."""
        known = self.scan.activities.get(event.activity_id)
        started = known.started if known else None
        terminal = known.terminal if known else None
        name = event.name
        foreign = self.foreign((started or event).response_id)
        if foreign is not None:
            self.lose(event, "hosted_activity", f"{foreign} {name} activity left out")
            return False
        payloads = [a.payload for a in (started, terminal) if a is not None and a.payload]
        if payloads and all(p.provider == PROVIDER and p.format in NOT_CONTENT for p in payloads):
            return False  # grounding: metadata, never content
        if started is not None and started.payload is None:
            self.lose(event, "hosted_activity", f"{name}: no payload, neither part replayed")
            return False
        if started is not None and terminal is None:
            state = self.scan.end_state(started.response_id)
            self.lose(
                started,
                "hosted_activity",
                f"{name}: its result never came (its response ended {state}); left out",
            )
            return False
        assert terminal is not None  # an activity has at least one transition
        if terminal.state == "abandoned":
            self.lose(terminal, "hosted_activity", f"{name}: abandoned; neither part replayed")
            return False
        if terminal.payload is None:
            self.lose(terminal, "hosted_activity", f"{name}: result without a payload")
            return False
        if (
            started is not None
            and started.payload is not None
            and not self.replayable(started, started.payload, "hosted_activity")
        ):
            return False
        return self.replayable(terminal, terminal.payload, "hosted_activity")

    def unknown(self, event: UnknownArtifact) -> None:
        payload = event.payload
        if payload.provider != PROVIDER:
            self.lose(event, "unknown_artifact", f"{payload.provider} {payload.format} left out")
            return
        if payload.format in NOT_CONTENT:
            return
        if payload.format == USER_PART:
            self.emit("user", part_kind(fields_of(payload)), payload.value)
            return
        if event.response_id is None:
            self.lose(event, "unknown_artifact", f"{payload.format} outside a response left out")
            return
        if self.replayable(event, payload, "unknown_artifact"):
            self.emit("model", part_kind(fields_of(payload)), payload.value)


_HANDLERS: Final[Mapping[type[Event], Any]] = {
    UserMessage: _Builder.user_message,
    ContextInjected: _Builder.context,
    AssistantText: _Builder.text,
    Reasoning: _Builder.reasoning,
    ToolCallRequested: _Builder.tool_call,
    ToolCallResponded: _Builder.tool_result,
    HostedActivity: _Builder.activity,
    UnknownArtifact: _Builder.unknown,
}
