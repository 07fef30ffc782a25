"""Stored events → a Gemini `generateContent` request body: the native projection.

`encode_request` rebuilds, from a conversation's events alone, the request that continues
it on Gemini (`EncodedRequest`: the body, the model, which goes in the URL path, and the
`Loss`es). It reads only: it never writes to the store.

Contents
    `UserMessage` → text parts of a `user` content. `ContextInjected` → a text part
    `<context source="…">…</context>` in a `user` content, never `systemInstruction`.
    `ToolCallResponded` → a `functionResponse` part in a `user` content. Every event of one
    response → parts of one `model` content, in order. Consecutive contents of one role are
    merged, and in a `user` content the `functionResponse` parts come first.

Same provider (`payload.provider == "google"`, format `part`) and a matching binding
    Every stored part is embedded byte for byte (`msgspec.Raw`), where it stood: signed
    text and thought parts (a signed empty final part too), `functionCall` parts with their
    `thoughtSignature`, `executableCode` / `codeExecutionResult` parts (thought-time runs
    included), unknown parts, `functionResponse` parts captured from a request. Text and
    thought runs that carry no payload (unsigned) are rebuilt as `{"text": …}` and
    `{"text": …, "thought": true}`.

Binding
    A payload bound to a model (`binding["model"]`, the `modelVersion` that produced it) is
    replayed only to that model, compared as model ids (`same_model`: `models/` and
    Vertex resource prefixes ignored; `gemini-2.0-flash` ~ `gemini-2.0-flash-001`); any
    other binding key is not understood and never matches. Left out otherwise: a signed
    text part becomes plain text and a function call a portable one (each a loss of kind
    `payload`); signed reasoning is left out (`reasoning`).

Function results
    `functionResponse` = `{name, response}`: the stored part when it came from a Gemini
    request and its `id` agrees with its call's; otherwise built from the portable content:
    a JSON object is sent as the `response` object, plain text wrapped as
    `{"result": text}` (`{"error": text}` when `is_error`). `id` is sent only when the
    call's stored part had one — never a derived id.

Other providers
    Portable parts only: text (citations left out: Gemini cannot carry them), function
    calls with their arguments (names made valid for Gemini deterministically, no ids),
    function results. Foreign reasoning, hosted activities, payloads and unknown artifacts
    are left out and listed. For a Gemini 3 target, the first function call of a model
    content that has no signature bound to the target model carries Google's documented
    placeholder `thoughtSignature` (`SKIP_SIGNATURE`), which Gemini 3 accepts for calls
    transferred from another model.

Hosted work
    Gemini's grounding (`web_search`, `url_context` activities; their payloads are
    metadata, not content) is never sent back and is no loss. Its Search Suggestion (a
    `display` obligation) is never replayed as content: each is listed as a loss of kind
    `display`. Code execution is replayed as its two parts when both can be; a run whose
    result never came, abandoned, or bound to another model is left out with a loss.

Settings
    From the newest `ResponseStarted` that carries settings: its native request (the body
    without `contents`) when it is Google's, else the portable settings (system →
    `systemInstruction`, client tools → `functionDeclarations` with `parametersJsonSchema`,
    max tokens → `generationConfig.maxOutputTokens`, tool choice → `toolConfig`). `model`
    (argument, then `config.model`, then the newest Gemini response's model) goes in the
    URL path, never the body. `config.max_output_tokens` and `config.thinking` override
    `generationConfig`; hosted tools follow `config.hosted_tools` (`true` declares
    `googleSearch` / `urlContext` / `codeExecution`, `false` removes it, absent keeps what
    was recorded) and are validated against the model and endpoint (ConfigurationError).
    A recorded `thinkingConfig` sent to a model that does not think is left out (a loss).

toolConfig is never broadened to hosted tools
    Gemini's `ANY` mode forces a function call, which only declared functions satisfy, so
    hosted tools never satisfy it; `allowedFunctionNames` keeps only declared functions (a
    name of a hosted tool, which cannot be forced, or an undeclared one is removed), and a
    forcing mode with no function left to force is left out. Each change is a loss of kind
    `tool_choice`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from convstore.adapters.google.config import (
    NATIVE_TOOLS,
    GoogleConfig,
    model_generation,
    model_path,
    model_resource,
    normalized_model,
    tool_name_of,
    validate_hosted_tools,
    validate_thinking,
)
from convstore.adapters.google.context import HOSTED_TOOLS, PROVIDER, camel
from convstore.adapters.wire.encoding import (
    ANY_JSON,
    ENCODER,
    NO_SETTINGS,
    RAW_FIELDS,
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
    set_field,
    settings_loss,
    target_model,
)
from convstore.adapters.wire.providers import Loss
from convstore.domain.errors import ConfigurationError
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

__all__ = [
    "NOT_CONTENT",
    "SKIP_SIGNATURE",
    "USER_PART",
    "BuiltContents",
    "Content",
    "EncodedRequest",
    "Loss",
    "binding_mismatch",
    "build_contents",
    "context_envelope",
    "encode_request",
    "function_name",
    "same_model",
    "scope_tool_config",
    "signature_bytes",
]

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
    }
)
"""UnknownArtifact / activity payload formats that were never content: not replayed, no
loss."""

SKIP_SIGNATURE: Final = "skip_thought_signature_validator"
"""The placeholder `thoughtSignature` Google documents for function calls that no Gemini 3
model produced (a trace transferred from another model)."""


@dataclass(frozen=True, slots=True)
class EncodedRequest:
    """A `generateContent` request: its body, the model the URL names, and what it leaves
    out."""

    body: dict[str, Any]
    """Builtins plus `msgspec.Raw` values; encode with `to_json` to keep payload bytes."""
    model: str
    """The model the request goes to (it is in the URL path, never in the body)."""
    losses: list[Loss] = field(default_factory=list)

    def to_json(self) -> bytes:
        """The body as JSON, every stored payload embedded byte for byte."""
        return ENCODER.encode(self.body)

    def path(self, *, stream: bool = True) -> str:
        """The method's path relative to the base URL, e.g.
        `models/gemini-2.5-flash:streamGenerateContent?alt=sse`."""
        return model_path(self.model, stream=stream)


# --- public API ------------------------------------------------------------------------------


def encode_request(
    events: Sequence[Event],
    *,
    config: GoogleConfig,
    model: str | None = None,
    user: str | None = None,
) -> EncodedRequest:
    """The request continuing the conversation of `events` on Gemini.

    `model` overrides `config.model`, which overrides the newest Gemini response's model;
    `user` appends a final user content. Raises ConfigurationError when no model is known,
    or a hosted tool or the thinking settings cannot be served.
    """
    scan = _Scan(events)
    losses: list[Loss] = []
    settings = _Settings.resolve(scan, config, model, losses)
    built = build_contents(events, model=settings.model, scan=scan)
    losses.extend(built.losses)
    contents = built.contents
    if user is not None and user:
        _append(contents, "user", _Part("text", {"text": user}))
    body: dict[str, Any] = {"contents": [c.wire() for c in contents]}
    body.update(settings.body(config, losses))
    return EncodedRequest(body=body, model=settings.model, losses=losses)


_STABLE_SUFFIX: Final = re.compile(r"-\d{3}$")


def same_model(a: str, b: str) -> bool:
    """True when two model names can denote one model: equal once their resource prefix is
    dropped, or one is the other's stable version (`gemini-2.0-flash` ~
    `gemini-2.0-flash-001`); two different versions differ."""
    if a == b:
        return True
    x, y = normalized_model(a), normalized_model(b)
    if not x or not y:
        return False
    if x == y:
        return True
    base_x, base_y = _STABLE_SUFFIX.sub("", x), _STABLE_SUFFIX.sub("", y)
    return base_x == base_y and (base_x == x or base_y == y)


def binding_mismatch(payload: ProviderPayload, model: str | None) -> str | None:
    """Why `payload`'s binding does not hold for a request to `model` (None: it holds, or
    `model` is None: bindings are not checked)."""
    if model is None:
        return None
    return mismatched_binding(payload, model, same_model)


def signature_bytes(signature: str) -> bytes | str:
    """A thought signature's bytes: standard or URL-safe base64, padded or not, read alike
    (clients may re-send a signature in either alphabet); the text itself if it is not
    base64."""
    text = signature.strip()
    try:
        return base64.b64decode(
            text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4), validate=True
        )
    except (binascii.Error, ValueError):
        return text


_FUNCTION_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}")
_FUNCTION_NAME_BAD: Final = re.compile(r"[^A-Za-z0-9_.:-]")


def function_name(name: str) -> str:
    """A function name Gemini accepts (`[A-Za-z_][A-Za-z0-9_.:-]{0,63}`): the name itself
    when valid, else a deterministic valid one (its valid characters and a digest)."""
    if _FUNCTION_NAME.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    stem = _FUNCTION_NAME_BAD.sub("_", name)[:48]
    if not stem or not (stem[0].isalpha() or stem[0] == "_"):
        stem = f"_{stem}"[:48]
    return f"{stem}_{digest}"


# --- contents --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Part:
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
    parts: list[_Part] = field(default_factory=list)

    def wire(self) -> dict[str, Any]:
        """The content as the request carries it."""
        return {"role": self.role, "parts": [p.value for p in self.parts]}

    def json_parts(self) -> list[Any]:
        """The parts as builtins (for matching; encoding uses the stored bytes)."""
        return [p.json() for p in self.parts]


def _append(contents: list[Content], role: str, part: _Part) -> None:
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
    events: Sequence[Event], *, model: str | None, scan: _Scan | None = None
) -> BuiltContents:
    """The request contents for `events`, payload bindings checked against `model` (None:
    not checked, every stored part replayed)."""
    builder = _Builder(scan or _Scan(events), model)
    for event in events:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(builder, event)
    for content in builder.contents:
        if content.role == "user":
            content.parts.sort(key=lambda p: p.kind != "functionResponse")  # stable
    return BuiltContents(builder.contents, builder.losses, builder.names)


class _Scan(Scan[ResponseSpan]):
    """The shared scan, with each call and the newest Gemini response that names its
    model."""

    def __init__(self, events: Sequence[Event]) -> None:
        super().__init__(ResponseSpan)
        self.calls: dict[str, ToolCallRequested] = {}
        self.newest_google: ResponseStarted | None = None
        for event in events:
            self.note(event)
            if isinstance(event, ResponseStarted):
                if event.provider == PROVIDER and event.model:
                    self.newest_google = event
            elif isinstance(event, ToolCallRequested):
                self.calls.setdefault(event.call_id, event)


def _fields(payload: ProviderPayload) -> dict[str, Any]:
    try:
        value = ANY_JSON.decode(payload.raw)
    except (msgspec.DecodeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _part_kind(fields: Mapping[str, Any]) -> str:
    for key in fields:
        name = camel(key)
        if name not in ("thought", "thoughtSignature", "partMetadata", "videoMetadata"):
            return "thought" if name == "text" and fields.get("thought") is True else name
    return "text"


def _call_of(fields: Mapping[str, Any]) -> dict[str, Any]:
    call = fields.get("functionCall", fields.get("function_call"))
    return call if isinstance(call, dict) else {}


def _response_of(fields: Mapping[str, Any]) -> dict[str, Any]:
    response = fields.get("functionResponse", fields.get("function_response"))
    return response if isinstance(response, dict) else {}


def _given_id(value: Mapping[str, Any]) -> str | None:
    given = value.get("id")
    return given if isinstance(given, str) and given else None


class _Builder:
    """Folds events into contents, deciding for each payload whether it can be replayed."""

    def __init__(self, scan: _Scan, model: str | None) -> None:
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
        _append(self.contents, role, _Part(kind, value))

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
        if payload.format != "part":
            self.lose(event, kind, f"{payload.format} payload (cut short) left out")
            return False
        why = binding_mismatch(payload, self.model)
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
            self.emit("model", _part_kind(_fields(event.payload)), event.payload.value)

    def tool_call(self, event: ToolCallRequested) -> None:
        payload = event.payload
        given: str | None = None
        if payload is not None and payload.provider == PROVIDER:
            fields = _fields(payload)
            given = _given_id(_call_of(fields))
            if self.replayable(event, payload, "payload"):
                name = _call_of(fields).get("name")
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
            call_fields = _call_of(_fields(call.payload))
        call_id = _given_id(call_fields)
        name = call_fields.get("name")
        if not isinstance(name, str) or not name:
            name = function_name(call.name) if call is not None else "unknown_function"
        payload = event.payload
        if payload is not None and payload.provider == PROVIDER and payload.format == "part":
            stored = _response_of(_fields(payload))
            if stored and _given_id(stored) == call_id:
                self.emit("user", "functionResponse", payload.value)
                return
            response = _stored_response(payload)
            if response is not None:  # the stored object, with the call's id (or none)
                self.emit("user", "functionResponse", _response_part(name, response, call_id))
                return
        elif payload is not None:
            self.lose(event, "payload", f"{payload.provider} {payload.format} payload left out")
        value = _result_object(event.content, is_error=event.is_error)
        self.emit("user", "functionResponse", _response_part(name, value, call_id))

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
            self.emit("model", _part_kind(_fields(event.payload)), event.payload.value)

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
            self.emit("user", _part_kind(_fields(payload)), payload.value)
            return
        if event.response_id is None:
            self.lose(event, "unknown_artifact", f"{payload.format} outside a response left out")
            return
        if self.replayable(event, payload, "unknown_artifact"):
            self.emit("model", _part_kind(_fields(payload)), payload.value)


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


def _response_part(name: str, response: Any, call_id: str | None) -> dict[str, Any]:
    inner: dict[str, Any] = {"name": name, "response": response}
    if call_id is not None:
        inner["id"] = call_id
    return {"functionResponse": inner}


def _stored_response(payload: ProviderPayload) -> msgspec.Raw | None:
    """The `response` object of a stored `functionResponse` part, byte for byte."""
    try:
        fields = RAW_FIELDS.decode(payload.raw)
        inner = fields.get("functionResponse", fields.get("function_response"))
        return RAW_FIELDS.decode(inner).get("response") if inner is not None else None
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _result_object(content: str, *, is_error: bool) -> Any:
    """The `response` object of a function result: a JSON object as it is, plain text
    wrapped as `{"result": text}` (`{"error": text}` for an error)."""
    decoded: Any = None
    if content[:1] == "{":
        try:
            decoded = ANY_JSON.decode(content)
        except (msgspec.DecodeError, RecursionError):
            decoded = None
    if is_error:
        return {"error": decoded if isinstance(decoded, dict) else content}
    return decoded if isinstance(decoded, dict) else {"result": content}


# --- settings --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Tool:
    """One `tools[]` entry: its fields (camelCase) as raw JSON or builtins."""

    fields: dict[str, Any]

    def wire(self) -> dict[str, Any]:
        return self.fields


@dataclass(slots=True)
class _Settings(RecordedSettings):
    """The recorded settings, and the Gemini body the configuration makes of them."""

    @classmethod
    def resolve(
        cls, scan: _Scan, config: GoogleConfig, model: str | None, losses: list[Loss]
    ) -> _Settings:
        source = scan.newest_with_settings or scan.newest
        portable = source.settings if source is not None else NO_SETTINGS
        native: dict[str, msgspec.Raw] | None = None
        recorded_fields = recorded_native(source, PROVIDER, losses)
        if recorded_fields is not None:
            native = {}
            for key, value in recorded_fields.items():
                native.setdefault(camel(key), value)
        recorded = scan.newest_google.model if scan.newest_google is not None else ""
        named = (model or config.model or recorded or "").strip()
        chosen = target_model("google", "gemini-2.5-flash", named)
        chosen = model_resource(chosen).removeprefix("models/")
        return cls(chosen, native, portable, source)

    # --- the body ---

    def body(self, config: GoogleConfig, losses: list[Loss]) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.native is not None:
            body.update((k, v) for k, v in self.native.items() if k not in ("contents", "model"))
        elif self.portable.system:
            body["systemInstruction"] = {"parts": [{"text": self.portable.system}]}
        tools = self.tools(config, losses)
        functions = _function_names(tools)
        hosted = [key for tool in tools for key in tool.fields if key in HOSTED_TOOLS]
        validate_hosted_tools(config, self.model, hosted)
        set_field(body, "tools", [t.wire() for t in tools] if tools else None)
        set_field(body, "toolConfig", self.tool_config(functions, hosted, losses))
        set_field(body, "generationConfig", self.generation_config(config, losses))
        return body

    def recorded_tools(self, losses: list[Loss]) -> list[_Tool]:
        if self.native is not None:
            tools = []
            for entry in recorded_list(self.native, "tools"):
                try:
                    fields = RAW_FIELDS.decode(entry)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
                tools.append(_Tool({camel(k): v for k, v in fields.items()}))
            return tools
        declarations = []
        for declaration in client_tools(self.source, "Gemini", losses):
            function: dict[str, Any] = {"name": function_name(declaration.name)}
            if declaration.description:
                function["description"] = declaration.description
            if declaration.input_schema is not None:
                function["parametersJsonSchema"] = declaration.input_schema
            declarations.append(function)
        return [_Tool({"functionDeclarations": declarations})] if declarations else []

    def tools(self, config: GoogleConfig, losses: list[Loss]) -> list[_Tool]:
        tools = self.recorded_tools(losses)
        for name, key in NATIVE_TOOLS.items():
            setting = config.hosted_tools.setting(name)
            if setting is None:
                continue
            present = any(key in tool.fields for tool in tools)
            if setting and not present:
                tools.append(_Tool({key: {}}))
            elif not setting and present:
                for tool in tools:
                    tool.fields.pop(key, None)
                tools = [tool for tool in tools if tool.fields]
        return tools

    def tool_config(self, functions: list[str], hosted: list[str], losses: list[Loss]) -> Any:
        raw: msgspec.Raw | None = None
        choice: Any
        if self.native is not None:
            raw = self.native.get("toolConfig")
            if raw is None:
                return None
            choice = ANY_JSON.decode(raw)
        else:
            choice = self._portable_tool_config(functions, losses)
            if choice is None:
                return None
        scoped = scope_tool_config(choice, functions, hosted)
        return kept_choice(choice, raw, scoped, self.source, losses)

    def _portable_tool_config(self, functions: list[str], losses: list[Loss]) -> Any:
        name = self.portable.tool_choice
        if name is None:
            return None
        modes = {"auto": "AUTO", "any": "ANY", "none": "NONE"}
        if name in modes:
            if not functions and name != "any":
                return None
            return {"functionCallingConfig": {"mode": modes[name]}}
        mapped = function_name(name)
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [mapped]}}

    def generation_config(self, config: GoogleConfig, losses: list[Loss]) -> Any:
        recorded: dict[str, Any] | None = None
        raw: msgspec.Raw | None = None
        if self.native is not None:
            raw = self.native.get("generationConfig")
            if raw is not None:
                decoded = ANY_JSON.decode(raw)
                recorded = (
                    {camel(k): v for k, v in decoded.items()} if isinstance(decoded, dict) else {}
                )
        elif self.portable.max_tokens:
            recorded = {"maxOutputTokens": self.portable.max_tokens}
        generation = dict(recorded or {})
        changed = raw is None
        if config.max_output_tokens is not None:
            generation["maxOutputTokens"] = config.max_output_tokens
            changed = True
        thinking = config.thinking.wire() if config.thinking is not None else {}
        if thinking:
            validate_thinking(thinking, self.model)
            generation["thinkingConfig"] = thinking
            changed = True
        elif "thinkingConfig" in generation:
            try:
                validate_thinking(generation["thinkingConfig"], self.model)
            except ConfigurationError:
                del generation["thinkingConfig"]
                changed = True
                reason = f"recorded thinkingConfig left out: model {self.model!r} cannot take it"
                losses.append(settings_loss(self.source, reason))
        if not generation:
            return None
        if not changed:
            return raw
        return generation


def _function_names(tools: Sequence[_Tool]) -> list[str]:
    names: list[str] = []
    for tool in tools:
        raw = tool.fields.get("functionDeclarations")
        if raw is None:
            continue
        declarations = ANY_JSON.decode(raw) if isinstance(raw, msgspec.Raw) else raw
        for declaration in declarations if isinstance(declarations, list) else ():
            if isinstance(declaration, dict) and isinstance(declaration.get("name"), str):
                names.append(declaration["name"])
    return names


_HOSTED_NAMES: Final = (
    frozenset(HOSTED_TOOLS)
    | frozenset(HOSTED_TOOLS.values())
    | frozenset(tool_name_of(k) for k in HOSTED_TOOLS)
)


def scope_tool_config(
    choice: Any, functions: Sequence[str], hosted: Sequence[str]
) -> tuple[Any, str | None]:
    """`toolConfig` kept to declared functions: (the config to send or None, why it
    changed)."""
    if not isinstance(choice, dict):
        return None, f"toolConfig {choice!r} is not an object; left out"
    key = next(
        (k for k in ("functionCallingConfig", "function_calling_config") if k in choice), None
    )
    calling = choice.get(key) if key is not None else None
    if not isinstance(calling, dict):
        return choice, None
    mode = calling.get("mode")
    names_key = next(
        (k for k in ("allowedFunctionNames", "allowed_function_names") if k in calling), None
    )
    allowed = calling.get(names_key) if names_key is not None else None
    rest = {k: v for k, v in choice.items() if k != key}
    why: str | None = None
    scoped = dict(calling)
    if isinstance(allowed, list):
        kept = [n for n in allowed if n in functions]
        dropped = [str(n) for n in allowed if n not in functions]
        if dropped:
            hosted_named = [n for n in dropped if n in _HOSTED_NAMES or n in hosted]
            what = (
                f"hosted tool(s) {', '.join(hosted_named)}, which cannot be forced"
                if hosted_named
                else f"{', '.join(dropped)}, not declared"
            )
            if kept:
                assert names_key is not None
                scoped[names_key] = kept
                why = f"toolConfig allowedFunctionNames: {what}; removed"
            else:
                return (rest or None), f"toolConfig forces only {what}; left out"
    forcing = mode in ("ANY", "VALIDATED") or isinstance(scoped.get(names_key or ""), list)
    if forcing and not functions:
        extra = f" ({', '.join(hosted)} cannot satisfy it)" if hosted else ""
        return (rest or None), f"toolConfig mode {mode} with no function declared{extra}; left out"
    if not functions and not hosted:
        return (rest or None), why
    if scoped == calling:
        return choice, why
    return {**rest, key: scoped}, why
