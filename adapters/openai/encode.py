"""Stored events → an OpenAI Responses API request body: the native projection.

`encode_request` rebuilds, from a conversation's events alone, the request that continues
it on OpenAI (`POST /v1/responses`, the whole history in `input`, never a
`previous_response_id`), and lists what it had to leave out (`Loss`). It reads only: it
never writes to the store.

Input items, in event order
    `UserMessage` → `{"role": "user", "content": [{"type": "input_text", …}]}`.
    `ContextInjected` → a user message whose one `input_text` is the tagged envelope
    `<context source="…">…</context>`, never a system or developer message. A user-side
    item captured from a request (`UnknownArtifact` of format `input_item`: a developer
    message, a message with images, an item reference) → the item as captured.
    `ToolCallResponded` → `{"type": "function_call_output", "call_id", "output"}`
    (`custom_tool_call_output` for a custom tool's call), or the item as captured from a
    request. OpenAI has no error flag on a result: `is_error` is listed as a loss.

A response is replayed natively when it is OpenAI's, ended `completed`, and every payload
of it holds for the target (below). Then every item is the stored payload byte for byte
(`msgspec.Raw`): reasoning items with their `id` and `encrypted_content` (OpenAI rejects
a re-minted id), message items (every AssistantText of one message carries the same
payload: it is sent once), `function_call` and the typed client calls with their `id`,
hosted call items (`web_search_call`, `file_search_call`, `code_interpreter_call`, …) from
their terminal transition, unknown output items. `partial` payloads (a stream cut) are
never replayed, nor are `response_fields` / `stream_event` artifacts (metadata, not
content).

Payloads hold when
    - bound to a model (`binding["model"]`), that model is the target model, compared as
      model ids: a dated snapshot and its alias match (`gpt-5.1-2025-11-13` ~ `gpt-5.1`),
      two different snapshots do not; any other binding key is not understood and never
      matches;
    - a reasoning item has `encrypted_content`, or the request is sent with `store: true`
      (the item then lives on OpenAI's side and its id resolves).
    One reasoning item that cannot be replayed sends the whole response in portable form:
    OpenAI refuses an item of a stored response "provided without its required reasoning
    item", and a reasoning item without the item that followed it.

Portable form (other providers, and OpenAI responses that cannot be replayed natively)
    Assistant text → an assistant message of `output_text` parts (consecutive texts of one
    response share one message); web citations with a URL and a range become `url_citation`
    annotations (OpenAI counts code points, as TextRange does); any other citation is
    listed as lost. Tool calls → `function_call` items with a fresh deterministic id
    (`fc_<sha256>`) and the call id (shortened deterministically past 64 characters, alike
    for the call and its output), arguments as JSON text, names made valid
    (`[A-Za-z0-9_-]{1,64}`) the same way in `tools`. Reasoning, hosted activities, unknown
    artifacts and other providers' payloads are left out and listed.

Hosted activities (OpenAI)
    The call and its result are one item on this wire, carried by the terminal transition.
    Pending (started in a response that ended `completed`, never finished): its started
    payload is replayed and its tool stays declared even if the configuration no longer
    enables it. Abandoned explicitly, interrupted (started in a response that did not
    complete) or without a payload: left out, a loss.

Settings
    From the newest OpenAI `ResponseStarted` that carries its native request (the body
    without `input`; `stream` dropped: the client chooses; `previous_response_id` and
    `conversation` dropped: the whole history is sent), even when another provider
    answered since (its settings do not map onto OpenAI's); when the conversation holds
    none, from the newest `ResponseStarted` that carries settings, read portably (system
    prompt → `instructions`, client tools → `function` tools with `strict: false`, tool
    choice, max tokens). `model` (argument, then `config.model`) and
    `config.max_output_tokens` override; `store` is `config.store`, else the recorded value,
    else false; with `store: false` and reasoning replayed, `include` gains
    `reasoning.encrypted_content` so the next reasoning comes back replayable; a target
    model that does not reason (`config.NON_REASONING_FAMILIES`: GPT-4o, GPT-4.1, …) gets
    neither the recorded `reasoning` nor that include (a `settings` loss). Hosted tools
    follow `config.hosted_tools` (`enable = true` declares the tool with the adapter's
    native type, `false` removes it, absent keeps what was recorded) except that a pending
    activity keeps its declaration. Every hosted tool declared is validated against the
    model and endpoint (ConfigurationError).

tool_choice is never broadened to hosted tools
    A choice that demands a tool call (`required`, the portable `any`, `allowed_tools` in
    mode `required`) while hosted tools are declared is narrowed to the client tools with
    `{"type": "allowed_tools", "mode": "required", "tools": [client tools]}` (a hosted call
    could otherwise satisfy it), or left out when no client tool is declared. A choice
    naming a tool (a function, or a hosted tool type) is kept only while that tool is
    declared (OpenAI answers 400 "Tool choice … not found in 'tools'"). Each change is a
    loss of kind `tool_choice`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from convstore.adapters.openai.config import (
    NATIVE_TOOL_TYPES,
    NON_REASONING_FAMILIES,
    OpenAIConfig,
    hosted_tool_declarations,
    model_family,
    validate_hosted_tools,
)
from convstore.adapters.openai.context import CLIENT_TOOL_NAMES, PROVIDER, hosted_name_of
from convstore.adapters.wire.encoding import (
    ANY_JSON,
    ENCODER,
    NO_SETTINGS,
    RecordedSettings,
    ResponseSpan,
    Scan,
    client_tools,
    context_envelope,
    event_loss,
    kept_choice,
    mismatched_binding,
    recorded_list,
    recorded_native,
    same_dated_model,
    set_field,
    settings_loss,
    target_model,
)
from convstore.adapters.wire.providers import DeclaredTool, Loss, iter_losses, payload_type
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
from convstore.domain.vocabulary import ProviderPayload

__all__ = [
    "ENCRYPTED_REASONING",
    "INPUT_ITEM",
    "BuiltInput",
    "DeclaredTool",
    "EncodedRequest",
    "Loss",
    "binding_mismatch",
    "build_input",
    "call_id_for",
    "context_envelope",
    "encode_request",
    "encode_request_bytes",
    "fresh_call_item_id",
    "function_name",
    "iter_losses",
    "same_model",
    "scope_tool_choice",
]

INPUT_ITEM: Final = "input_item"
"""Payload format of an item kept from a captured request's `input` (user side)."""

ENCRYPTED_REASONING: Final = "reasoning.encrypted_content"

_OUTPUT_ITEM: Final = "output_item"
_NOT_CONTENT: Final = frozenset({"response_fields", "stream_event"})
"""OpenAI UnknownArtifact formats that were never content: not replayed, not a loss."""
_DROPPED_SETTINGS: Final = frozenset({"input", "stream", "previous_response_id", "conversation"})


@dataclass(frozen=True, slots=True)
class EncodedRequest:
    """A Responses API request body and what it leaves out."""

    body: dict[str, Any]
    """Builtins plus `msgspec.Raw` values; encode with `to_json` to keep payload bytes."""
    losses: list[Loss] = field(default_factory=list)

    def to_json(self) -> bytes:
        """The body as JSON, every stored payload embedded byte for byte."""
        return ENCODER.encode(self.body)


# --- public API ------------------------------------------------------------------------------


def encode_request(
    events: Sequence[Event],
    *,
    config: OpenAIConfig,
    model: str | None = None,
    user: str | None = None,
) -> EncodedRequest:
    """The request continuing the conversation of `events` on OpenAI.

    `model` overrides `config.model`, which overrides the recorded model; `user` appends
    a final user message. Raises ConfigurationError when no model is known or a hosted
    tool cannot be served.
    """
    scan = _Scan(events)
    losses: list[Loss] = []
    settings = _Settings.resolve(scan, config, model, losses)
    built = build_input(events, model=settings.model, store=settings.store)
    losses.extend(built.losses)
    items = built.items
    if user is not None:
        items.append(_user_item(user))
    tools = settings.tools(config, built.pending, losses)
    validate_hosted_tools(
        config,
        settings.model,
        [t.name for t in tools if t.hosted],
        reasoning_effort=settings.reasoning_effort(),
    )
    body = settings.body(tools, losses, reasoning_replayed=built.reasoning_replayed)
    body["input"] = items
    return EncodedRequest(body=body, losses=losses)


def encode_request_bytes(
    events: Sequence[Event],
    *,
    config: OpenAIConfig,
    model: str | None = None,
    user: str | None = None,
) -> bytes:
    """`encode_request(...)` as JSON bytes, every stored payload embedded verbatim."""
    return encode_request(events, config=config, model=model, user=user).to_json()


_FINE_TUNED: Final = re.compile(r"^ft:")
_MODEL_DATE: Final = re.compile(r"^(.*?)(?:-(\d{4}-\d{2}-\d{2}|\d{4}))?$")


def _model_id(model: str) -> tuple[str, str]:
    """(base name, snapshot date or ``)."""
    name = model.strip().lower().removeprefix("openai/")
    if _FINE_TUNED.match(name):
        return name, ""  # a fine-tune is its own model: equal names only
    dated = _MODEL_DATE.match(name)
    assert dated is not None  # the pattern matches every string
    return dated.group(1), dated.group(2) or ""


def same_model(a: str, b: str) -> bool:
    """True when two model names can denote one model: equal, or the same model named by
    an alias and a dated snapshot (`gpt-5.1` ~ `gpt-5.1-2025-11-13`, `gpt-4` ~
    `gpt-4-0613`); two different snapshots differ."""
    return same_dated_model(a, b, _model_id)


def binding_mismatch(payload: ProviderPayload, model: str) -> str | None:
    """Why `payload`'s binding does not hold for a request to `model` (None: it holds)."""
    return mismatched_binding(payload, model, same_model)


# --- the scan ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Response(ResponseSpan):
    reasoning: list[Reasoning] = field(default_factory=list)
    bound: list[tuple[Event, ProviderPayload]] = field(default_factory=list)
    """Every OpenAI payload of the response, with its event."""


class _Scan(Scan[_Response]):
    """The shared scan, with each response's reasoning and OpenAI payloads, and the call
    item type of each call."""

    def __init__(self, events: Sequence[Event]) -> None:
        super().__init__(_Response)
        self.newest_native: ResponseStarted | None = None
        """The newest OpenAI response whose settings hold its native request."""
        self.calls: dict[str, str] = {}
        """Call id → the OpenAI call item type (`function_call`, `custom_tool_call`, …)."""
        for event in events:
            self.note(event)
            if isinstance(event, ResponseStarted):
                native = event.settings.native
                if native is not None and native.provider == PROVIDER:
                    self.newest_native = event
                continue
            if isinstance(event, ResponseEnded):
                continue
            response_id = getattr(event, "response_id", None)
            response = self.responses.get(response_id or "")
            if response is None:
                continue
            if isinstance(event, Reasoning):
                response.reasoning.append(event)
            payload = getattr(event, "payload", None)
            if isinstance(payload, ProviderPayload) and payload.provider == PROVIDER:
                response.bound.append((event, payload))
                if isinstance(event, ToolCallRequested):
                    self.calls[event.call_id] = payload_type(payload)


class _Encrypted(msgspec.Struct):
    id: str | None = None
    encrypted_content: str | None = None


_ENCRYPTED: Final = msgspec.json.Decoder(_Encrypted)


def _portable_reason(response: _Response, model: str, store: bool) -> str | None:
    """Why an OpenAI response cannot be replayed natively (None: it can)."""
    if response.ended is None:
        return "its response never ended (interrupted)"
    if response.ended.state != "completed":
        return f"its response ended {response.ended.state} (interrupted)"
    for event, payload in response.bound:
        if payload.format == "partial":
            return f"an item of its response was cut short ({type(event).__name__})"
        why = binding_mismatch(payload, model)
        if why is not None:
            return f"its items are {why}"
    for reasoning in response.reasoning:
        signed = reasoning.payload
        if signed is None or signed.provider != PROVIDER:
            return "a reasoning item of its response was cut short (no encrypted content)"
        if signed.format != _OUTPUT_ITEM:
            return f"a reasoning item of its response is a {signed.format} payload"
        if not store:
            try:
                item = _ENCRYPTED.decode(signed.raw)
            except (msgspec.DecodeError, msgspec.ValidationError):
                return "a reasoning item of its response is not an object"
            if not item.encrypted_content:
                return (
                    f"reasoning item {item.id or '?'} has no encrypted_content and the request "
                    "is sent with store=false, so OpenAI cannot resolve it"
                )
    return None


# --- input items -------------------------------------------------------------------------------


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
    scan = _Scan(events)
    builder = _InputBuilder(scan, model, store)
    for event in events:
        builder.add(event)
    return BuiltInput(
        items=builder.items,
        losses=builder.losses,
        pending=builder.pending,
        reasoning_replayed=builder.reasoning_replayed,
    )


def _user_item(text: str) -> dict[str, Any]:
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


class _InputBuilder:
    """Folds events into input items, deciding for each payload whether it is replayed."""

    def __init__(self, scan: _Scan, model: str, store: bool) -> None:
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
            why = _portable_reason(response, self.model, self.store)
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
        self.emit(_user_item(context_envelope(event.source, event.text)))

    def text(self, event: AssistantText) -> None:
        why = self.why_portable(event.response_id)
        payload = event.payload
        if why is None and payload is not None and payload.format == _OUTPUT_ITEM:
            key = (event.response_id, payload.raw)
            if key not in self._sent:
                self._sent.add(key)
                self.emit(payload.value)
            return
        if payload is not None:
            self.payload_loss(event, payload, why)
        self.portable_text(event, why)

    def payload_loss(self, event: Event, payload: ProviderPayload, why: str | None) -> None:
        if payload.provider != PROVIDER:
            self.lose(event, "payload", f"{payload.provider} {payload.format} payload left out")
        elif why is not None and why != _FOREIGN:
            self.lose(event, "payload", f"openai {payload.format} payload left out: {why}")
        else:
            self.lose(event, "payload", f"openai {payload.format} payload left out")

    def portable_text(self, event: AssistantText, why: str | None) -> None:
        annotations: list[dict[str, Any]] = []
        dropped = 0
        for attribution in event.attributions:
            source, span = attribution.source, attribution.range
            if source.kind == "web" and source.url and span is not None:
                annotation: dict[str, Any] = {
                    "type": "url_citation",
                    "url": source.url,
                    "title": source.title or "",
                    "start_index": span.start,
                    "end_index": span.end,
                }
                annotations.append(annotation)
            else:
                dropped += 1
        if dropped:
            self.lose(
                event,
                "citations",
                f"{dropped} citation(s) left out: OpenAI carries only web citations with a "
                "URL and a range (url_citation)",
            )
        if not event.text:
            if annotations:
                self.lose(event, "text", "empty text left out with its citations")
            return
        part: dict[str, Any] = {"type": "output_text", "text": event.text}
        if annotations:
            part["annotations"] = annotations
        current = self._message
        if current is not None and current[0] == event.response_id:
            current[1]["content"].append(part)
            return
        message = {"role": "assistant", "content": [part]}
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
        assert event.payload is not None  # checked by `_portable_reason`
        self.reasoning_replayed = True
        self.emit(event.payload.value)

    def tool_call(self, event: ToolCallRequested) -> None:
        why = self.why_portable(event.response_id)
        payload = event.payload
        if why is None and payload is not None and payload.format == _OUTPUT_ITEM:
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
        if known.terminal is None:
            if event is known.started and known.started.payload is not None:
                self.emit(known.started.payload.value)
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
            if payload is None or payload.format != _OUTPUT_ITEM:
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
        if payload is None or payload.provider != PROVIDER or payload.format != _OUTPUT_ITEM:
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
        if why is None and payload.format == _OUTPUT_ITEM:
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


# --- settings --------------------------------------------------------------------------------


def _declared_tool(raw: Any) -> DeclaredTool | None:
    """The DeclaredTool of a native declaration (`msgspec.Raw` or builtins)."""
    decoded = ANY_JSON.decode(raw) if isinstance(raw, msgspec.Raw) else raw
    if not isinstance(decoded, dict):
        return None
    kind = decoded.get("type")
    kind = kind if isinstance(kind, str) else ""
    name = decoded.get("name")
    name = name if isinstance(name, str) else ""
    if kind in ("function", "custom"):
        return DeclaredTool(name, kind, raw, False)
    hosted = hosted_name_of(kind)
    if hosted == "mcp":
        label = decoded.get("server_label")
        return DeclaredTool(f"mcp:{label if isinstance(label, str) else ''}", kind, raw, True)
    if hosted is not None:
        return DeclaredTool(hosted, kind, raw, True)
    return DeclaredTool(CLIENT_TOOL_NAMES.get(kind) or name or kind, kind, raw, False)


def _choice_entry(tool: DeclaredTool) -> dict[str, Any]:
    """How an `allowed_tools` choice names a declared client tool."""
    if tool.type in ("function", "custom"):
        return {"type": tool.type, "name": tool.name}
    return {"type": tool.type}


def _names_declared(entry: Any, tools: Sequence[DeclaredTool]) -> DeclaredTool | None:
    """The declared tool a tool_choice (or an `allowed_tools` entry) names, if any."""
    if not isinstance(entry, dict):
        return None
    kind = entry.get("type")
    if not isinstance(kind, str):
        return None
    if kind in ("function", "custom"):
        name = entry.get("name")
        return next((t for t in tools if t.type == kind and t.name == name), None)
    hosted = hosted_name_of(kind)
    if hosted == "mcp":
        label = entry.get("server_label")
        return next((t for t in tools if t.hosted and t.name == f"mcp:{label}"), None)
    if hosted is not None:
        return next((t for t in tools if t.hosted and t.name == hosted), None)
    return next((t for t in tools if t.type == kind), None)


def _describe(choice: Any) -> str:
    if isinstance(choice, dict):
        kind = choice.get("type")
        name = choice.get("name") or choice.get("server_label")
        return f"{kind} {name!r}" if name else repr(kind)
    return repr(choice)


def _narrowed(
    clients: Sequence[DeclaredTool], hosted: Sequence[DeclaredTool], what: str
) -> tuple[Any, str]:
    hosted_names = ", ".join(t.name for t in hosted)
    if not clients:
        return None, f"tool_choice {what} with only hosted tools ({hosted_names}); left out"
    return (
        {"type": "allowed_tools", "mode": "required", "tools": [_choice_entry(t) for t in clients]},
        f"tool_choice {what} narrowed to the client tools "
        f"({', '.join(t.name for t in clients)}) so that hosted tools ({hosted_names}) cannot "
        "satisfy it",
    )


def scope_tool_choice(choice: Any, tools: Sequence[DeclaredTool]) -> tuple[Any, str | None]:
    """`choice` never broadened to hosted tools: (the choice to send or None, why it changed)."""
    hosted = [t for t in tools if t.hosted]
    clients = [t for t in tools if not t.hosted]
    if not tools:
        if choice in ("auto", "none"):
            return None, None
        return None, f"tool_choice {_describe(choice)} without any tool declared; left out"
    if isinstance(choice, str):
        if choice == "required" and hosted:
            return _narrowed(clients, hosted, "required")
        if choice in ("auto", "none", "required"):
            return choice, None
        return None, f"tool_choice {choice!r} is not understood; left out"
    if not isinstance(choice, dict):
        return None, f"tool_choice {choice!r} is neither a string nor an object; left out"
    kind = choice.get("type")
    if kind == "allowed_tools":
        listed = choice.get("tools")
        listed = listed if isinstance(listed, list) else []
        found = [(entry, _names_declared(entry, tools)) for entry in listed]
        kept = [entry for entry, tool in found if tool is not None]
        why = []
        if len(kept) < len(listed):
            why.append(f"{len(listed) - len(kept)} tool(s) it allows are not declared")
        if choice.get("mode") == "required":
            hosted_kept = [e for e, t in found if t is not None and t.hosted]
            if hosted_kept:
                kept = [e for e, t in found if t is not None and not t.hosted]
                why.append("its hosted tools could satisfy mode required")
        if not kept:
            return None, f"tool_choice allowed_tools left out: {'; '.join(why) or 'no tools'}"
        if not why:
            return choice, None
        return {**choice, "tools": kept}, f"tool_choice allowed_tools narrowed: {'; '.join(why)}"
    if _names_declared(choice, tools) is not None:
        return choice, None
    return None, f"tool_choice names {_describe(choice)}, which is not declared; left out"


def _pending_declarations(pending: list[HostedActivity]) -> dict[str, str]:
    """Activity name → native tool type, for the tools pending activities need declared."""
    out: dict[str, str] = {}
    for activity in pending:
        payload = activity.payload
        version = payload.version if payload is not None else ""
        name = activity.name
        if name in NATIVE_TOOL_TYPES:
            out.setdefault(name, version or NATIVE_TOOL_TYPES[name])
    return out


@dataclass(slots=True)
class _Settings(RecordedSettings):
    """The recorded settings, and the OpenAI body the configuration makes of them."""

    store: bool
    max_output_tokens: Any
    """An int, the recorded `msgspec.Raw`, or None (not sent)."""

    @classmethod
    def resolve(
        cls, scan: _Scan, config: OpenAIConfig, model: str | None, losses: list[Loss]
    ) -> _Settings:
        source = scan.newest_native or scan.newest_with_settings or scan.newest
        portable = source.settings if source is not None else NO_SETTINGS
        native = recorded_native(source, PROVIDER, losses)
        recorded = _decoded(native, "model")
        recorded_model = recorded if isinstance(recorded, str) else ""
        if not recorded_model and source is not None and source.provider == PROVIDER:
            recorded_model = source.model
        chosen = target_model("openai", "gpt-5.1", model, config.model, recorded_model)
        store = config.store
        if store is None:
            recorded_store = _decoded(native, "store")
            store = recorded_store if isinstance(recorded_store, bool) else False
        limit: Any = config.max_output_tokens
        if limit is None and native is not None and "max_output_tokens" in native:
            limit = native["max_output_tokens"]
        if limit is None and native is None:
            limit = portable.max_tokens
        return cls(
            chosen,
            native=native,
            portable=portable,
            source=source,
            store=store,
            max_output_tokens=limit,
        )

    def reasoning_effort(self) -> str | None:
        reasoning = _decoded(self.native, "reasoning")
        effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
        return effort if isinstance(effort, str) else None

    def recorded_tools(self, losses: list[Loss]) -> list[DeclaredTool]:
        if self.native is not None:
            items = recorded_list(self.native, "tools")
            return [tool for item in items if (tool := _declared_tool(item)) is not None]
        tools = []
        for declaration in client_tools(self.source, "OpenAI", losses):
            name = function_name(declaration.name)
            value: dict[str, Any] = {"type": "function", "name": name}
            if declaration.description:
                value["description"] = declaration.description
            value["parameters"] = declaration.input_schema or {"type": "object", "properties": {}}
            value["strict"] = False
            tools.append(DeclaredTool(name, "function", value, False))
        return tools

    def tools(
        self, config: OpenAIConfig, pending: list[HostedActivity], losses: list[Loss]
    ) -> list[DeclaredTool]:
        tools = self.recorded_tools(losses)
        keep = _pending_declarations(pending)
        configured = hosted_tool_declarations(config)
        for name in NATIVE_TOOL_TYPES:
            setting = config.hosted_tools.setting(name)
            if setting is None or name in keep:
                continue
            positions = [i for i, t in enumerate(tools) if t.hosted and t.name == name]
            if setting:
                declaration = configured[name]
                tool = DeclaredTool(name, declaration["type"], declaration, True)
                if positions:
                    tools[positions[0]] = tool
                    positions = positions[1:]
                else:
                    tools.append(tool)
            for position in reversed(positions):
                del tools[position]
        for name, native_type in keep.items():
            if not any(t.hosted and t.name == name for t in tools):
                tools.append(DeclaredTool(name, native_type, {"type": native_type}, True))
        return tools

    def body(
        self, tools: list[DeclaredTool], losses: list[Loss], *, reasoning_replayed: bool
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model}
        if self.native is not None:
            body.update((k, v) for k, v in self.native.items() if k not in _DROPPED_SETTINGS)
            body["model"] = self.model
        elif self.portable.system:
            body["instructions"] = self.portable.system
        set_field(body, "max_output_tokens", self.max_output_tokens)
        set_field(body, "tools", [t.value for t in tools] if tools else None)
        set_field(body, "tool_choice", self.tool_choice(tools, losses))
        body["store"] = self.store
        if model_family(self.model) in NON_REASONING_FAMILIES:
            self.drop_reasoning(body, losses)
        elif not self.store and reasoning_replayed:
            include = _decoded(self.native, "include")
            include = include if isinstance(include, list) else []
            if ENCRYPTED_REASONING not in include:
                body["include"] = [*include, ENCRYPTED_REASONING]
        return body

    def drop_reasoning(self, body: dict[str, Any], losses: list[Loss]) -> None:
        """Leave the reasoning settings out of a request to a model that does not reason."""
        dropped = []
        if body.pop("reasoning", None) is not None:
            dropped.append("reasoning")
        include = _decoded(self.native, "include")
        if isinstance(include, list) and ENCRYPTED_REASONING in include:
            rest = [name for name in include if name != ENCRYPTED_REASONING]
            if rest:
                body["include"] = rest
            else:
                body.pop("include", None)
            dropped.append(f"include {ENCRYPTED_REASONING}")
        if dropped and self.source is not None:
            reason = f"{' and '.join(dropped)} left out: model {self.model!r} does not reason"
            losses.append(settings_loss(self.source, reason))

    def tool_choice(self, tools: list[DeclaredTool], losses: list[Loss]) -> Any:
        raw: msgspec.Raw | None = None
        choice: Any
        if self.native is not None:
            raw = self.native.get("tool_choice")
            if raw is None:
                return None
            choice = ANY_JSON.decode(raw)
        else:
            name = self.portable.tool_choice
            if name is None:
                return None
            if name in ("auto", "none"):
                choice = name
            elif name == "any":
                choice = "required"
            else:
                choice = {"type": "function", "name": function_name(name)}
        return kept_choice(choice, raw, scope_tool_choice(choice, tools), self.source, losses)


def _decoded(native: Mapping[str, msgspec.Raw] | None, key: str) -> Any:
    if native is None or key not in native:
        return None
    try:
        return ANY_JSON.decode(native[key])
    except msgspec.DecodeError:
        return None
