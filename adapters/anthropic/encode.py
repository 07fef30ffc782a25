"""Stored events → an Anthropic Messages API request body: the native projection.

`encode_request` rebuilds, from a conversation's events alone, the request that continues
it on Anthropic, and lists what it had to leave out (`Loss`). It reads only: it never
writes to the store (recording an abandonment is the caller's decision).

Messages
    `UserMessage` → text blocks in a user message. `ContextInjected` → a text block
    `<context source="…">…</context>` in a user message, never a system prompt or a new
    role. `ToolCallResponded` → a `tool_result` block (`is_error` kept) in a user
    message. Every event of one response → blocks of one assistant message, in order.
    Consecutive messages of one role are merged (a `pause_turn` continuation and the
    response that continued it become one assistant message), and in a user message the
    `tool_result` blocks come first, as the API requires.

Same provider (`payload.provider == "anthropic"`) and a matching binding
    Every payload is embedded byte for byte (`msgspec.Raw`): thinking and redacted
    thinking, `tool_use`, both native blocks of each hosted activity (`server_tool_use` /
    `mcp_tool_use` and its `*_tool_result`), unknown content blocks as stored, `tool_result`
    blocks captured from a request. Text is rebuilt as `{"type": "text", "text": …}` with
    each citation's stored replay value (so `encrypted_index` round-trips).

Binding
    A payload bound to a model (`binding["model"]`) is replayed only when that model is
    the target model, compared as model ids: a dated snapshot and its alias match
    (`claude-sonnet-4-5-20250929` ~ `claude-sonnet-4-5`, `…-latest`, `…@20250929`,
    Bedrock's `anthropic.…-v1:0`); any other binding key is not understood and so never
    matches. Citations of a response whose model does not match are left out with it,
    since they point into the search results left out.

Hosted activities
    Replayed as a pair only when both blocks can be: the call payload, and the result
    payload or (pending work) none. Pending = started in a response that ended
    `completed` (a mixed batch stopped with `tool_use`, a `pause_turn`) with no terminal
    transition yet: its call block is replayed and its tool stays declared even if the
    configuration no longer enables it. Started in a response that was `abandoned` or
    `failed` (interrupted), abandoned explicitly, foreign, without a payload, cut
    (`partial`) or bound to another model: neither block, and a loss.

Other providers
    Portable content only: text (citations left out), tool calls as `tool_use` with the
    portable arguments (ids made valid for Anthropic, deterministically), tool results.
    Foreign reasoning, hosted activities, unknown artifacts and payloads are left out and
    listed.

Settings
    From the newest `ResponseStarted` that carries settings: its native request (the body
    without messages, `stream` dropped: the client chooses) when it is Anthropic's, else
    the portable settings. `model` (argument, then `config.model`) and `config.max_tokens`
    override; hosted tools follow `config.hosted_tools` (`enable = true` declares the tool
    with this adapter's native version, `false` removes it, absent keeps what was
    recorded) except that a pending activity keeps its recorded declaration. Every hosted
    tool declared is validated against the model and endpoint (ConfigurationError).

tool_choice is never broadened to hosted tools
    `any` with hosted tools declared becomes `{"type": "tool"}` naming the only client
    tool when there is exactly one, else `auto` (no way to say "any client tool"); a
    choice naming a hosted tool (forcing one is unsupported) or an undeclared tool is left
    out. Each such change is listed as a loss of kind `tool_choice`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from convstore.adapters.anthropic.config import (
    NATIVE_TOOL_BETAS,
    NATIVE_TOOL_VERSIONS,
    AnthropicConfig,
    hosted_tool_declarations,
    tool_name_of,
    validate_hosted_tools,
)
from convstore.adapters.anthropic.context import PROVIDER, TOOL_ALIASES, is_hosted_tool_type
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
    target_model,
)
from convstore.adapters.wire.providers import DeclaredTool, Loss, iter_losses, payload_type
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
    "DEFAULT_MAX_TOKENS",
    "DeclaredTool",
    "EncodedRequest",
    "Loss",
    "Message",
    "MessageBlock",
    "binding_mismatch",
    "build_messages",
    "context_envelope",
    "encode_request",
    "encode_request_bytes",
    "iter_losses",
    "same_model",
    "scope_tool_choice",
]

DEFAULT_MAX_TOKENS: Final = 4096
"""`max_tokens` when neither the configuration nor the recorded request gives one."""

USER_CONTENT_BLOCK: Final = "user_content_block"
"""UnknownArtifact format of a user-side block kept from a captured request (an image, a
document): replayed in a user message."""

_REPLAYED_FORMATS: Final = frozenset({"content_block"})
_NOT_CONTENT: Final = frozenset({"stream_event", "message_fields"})
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


@dataclass(frozen=True, slots=True)
class EncodedRequest:
    """A Messages API request body and what it leaves out."""

    body: dict[str, Any]
    """Builtins plus `msgspec.Raw` values; encode with `to_json` to keep payload bytes."""
    losses: list[Loss] = field(default_factory=list)
    betas: tuple[str, ...] = ()
    """`anthropic-beta` header values the declared tools need."""

    def to_json(self) -> bytes:
        """The body as JSON, every stored payload embedded byte for byte."""
        return ENCODER.encode(self.body)


# --- public API ------------------------------------------------------------------------------


def encode_request(
    events: Sequence[Event],
    *,
    config: AnthropicConfig,
    model: str | None = None,
    user: str | None = None,
) -> EncodedRequest:
    """The request continuing the conversation of `events` on Anthropic.

    `model` overrides `config.model`, which overrides the recorded model; `user` appends
    a final user message. Raises ConfigurationError when no model is known or a hosted
    tool cannot be served.
    """
    scan = _Scan(events)
    losses: list[Loss] = []
    settings = _Settings.resolve(scan, config, model, losses)
    built = build_messages(events, model=settings.model)
    losses.extend(built.losses)
    messages = built.messages
    if user is not None:
        _append(messages, "user", MessageBlock(type="text", value={"type": "text", "text": user}))
    tools = settings.tools(config, built.pending, losses)
    validate_hosted_tools(config, settings.model, [t.name for t in tools if t.hosted])
    body = settings.body(tools, losses)
    if built.container and "container" not in body:
        body["container"] = built.container
    body["messages"] = [m.wire() for m in messages]
    betas = tuple(
        dict.fromkeys(NATIVE_TOOL_BETAS[t.type] for t in tools if t.type in NATIVE_TOOL_BETAS)
    )
    return EncodedRequest(body=body, losses=losses, betas=betas)


def encode_request_bytes(
    events: Sequence[Event],
    *,
    config: AnthropicConfig,
    model: str | None = None,
    user: str | None = None,
) -> bytes:
    """`encode_request(...)` as JSON bytes, every stored payload embedded verbatim."""
    return encode_request(events, config=config, model=model, user=user).to_json()


_MODEL_PREFIX: Final = re.compile(r"^(?:[a-z]{2,4}\.)?anthropic\.")
_MODEL_PLATFORM: Final = re.compile(r"-v\d+(?::\d+)?$")
_MODEL_DATE: Final = re.compile(r"^(.*?)(?:[-@](\d{8}))?(?:-latest)?$")


def _model_id(model: str) -> tuple[str, str]:
    """(base name, snapshot date or ``)."""
    name = _MODEL_PREFIX.sub("", model.strip().lower())
    name = _MODEL_PLATFORM.sub("", name)
    dated = _MODEL_DATE.match(name)
    assert dated is not None  # the pattern matches every string
    return dated.group(1), dated.group(2) or ""


def same_model(a: str, b: str) -> bool:
    """True when two model names can denote one model: equal, or the same model named by
    an alias and a snapshot (`claude-sonnet-4-5` ~ `claude-sonnet-4-5-20250929`); two
    different snapshots differ."""
    return same_dated_model(a, b, _model_id)


def binding_mismatch(payload: ProviderPayload, model: str) -> str | None:
    """Why `payload`'s binding does not hold for a request to `model` (None: it holds)."""
    return mismatched_binding(payload, model, same_model)


# --- messages --------------------------------------------------------------------------------


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
    scan = _Scan(events)
    builder = _MessageBuilder(scan, model)
    for event in events:
        builder.add(event)
    messages = builder.messages
    for message in messages:
        if message.role == "user":
            message.blocks.sort(key=lambda b: b.type != "tool_result")  # stable
    return BuiltMessages(
        messages=messages,
        losses=builder.losses,
        pending=builder.pending,
        container=scan.continuation_container(),
    )


def _append(messages: list[Message], role: str, block: MessageBlock) -> None:
    if messages and messages[-1].role == role:
        messages[-1].blocks.append(block)
    else:
        messages.append(Message(role=role, blocks=[block]))


@dataclass(slots=True)
class _Response(ResponseSpan):
    container: str | None = None


class _Scan(Scan[_Response]):
    """The shared scan, with the code execution container each response ran in."""

    def __init__(self, events: Sequence[Event]) -> None:
        super().__init__(_Response)
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

    def __init__(self, scan: _Scan, model: str) -> None:
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
        _append(self.messages, role, MessageBlock(type=block_type, value=value))

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
        why = binding_mismatch(payload, self.model)
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
            unbound = bool(response_model) and not same_model(response_model, self.model)
            for attribution in event.attributions:
                replay = attribution.replay
                if foreign or replay is None or replay.provider != PROVIDER:
                    continue
                if unbound or binding_mismatch(replay, self.model) is not None:
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


# --- settings --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Settings(RecordedSettings):
    """The recorded settings, and the Anthropic body the configuration makes of them."""

    max_tokens: int

    @classmethod
    def resolve(
        cls,
        scan: _Scan,
        config: AnthropicConfig,
        model: str | None,
        losses: list[Loss],
    ) -> _Settings:
        source = scan.newest_with_settings or scan.newest
        portable = source.settings if source is not None else NO_SETTINGS
        native = recorded_native(source, PROVIDER, losses)
        recorded_model = ""
        if native is not None and "model" in native:
            value = ANY_JSON.decode(native["model"])
            recorded_model = value if isinstance(value, str) else ""
        if not recorded_model and source is not None and source.provider == PROVIDER:
            recorded_model = source.model
        chosen = target_model("anthropic", "claude-sonnet-4-5", model, config.model, recorded_model)
        max_tokens = config.max_tokens
        if max_tokens is None and native is not None and "max_tokens" in native:
            value = ANY_JSON.decode(native["max_tokens"])
            max_tokens = value if type(value) is int else None
        if max_tokens is None:
            max_tokens = portable.max_tokens or DEFAULT_MAX_TOKENS
        return cls(chosen, native, portable, source, max_tokens)

    def recorded_tools(self, losses: list[Loss]) -> list[DeclaredTool]:
        if self.native is not None:
            tools = []
            for item in recorded_list(self.native, "tools"):
                decoded = ANY_JSON.decode(item)
                if not isinstance(decoded, dict):
                    continue
                kind = decoded.get("type")
                kind = kind if isinstance(kind, str) else ""
                name = decoded.get("name")
                name = name if isinstance(name, str) else tool_name_of(kind)
                tools.append(DeclaredTool(name, kind, item, is_hosted_tool_type(kind)))
            return tools
        tools = []
        for declaration in client_tools(self.source, "Anthropic", losses):
            value: dict[str, Any] = {"name": declaration.name}
            if declaration.description:
                value["description"] = declaration.description
            value["input_schema"] = declaration.input_schema or {"type": "object"}
            tools.append(DeclaredTool(declaration.name, "", value, False))
        return tools

    def tools(
        self, config: AnthropicConfig, pending: list[HostedActivity], losses: list[Loss]
    ) -> list[DeclaredTool]:
        tools = self.recorded_tools(losses)
        keep = _pending_declarations(pending)
        configured = hosted_tool_declarations(config)
        for name in NATIVE_TOOL_VERSIONS:
            setting = config.hosted_tools.setting(name)
            if setting is None or name in keep:
                continue
            position = next((i for i, t in enumerate(tools) if t.name == name), None)
            if setting:
                declaration = configured[name]
                tool = DeclaredTool(name, declaration["type"], declaration, True)
                if position is None:
                    tools.append(tool)
                else:
                    tools[position] = tool
            elif position is not None:
                del tools[position]
        for name, native_type in keep.items():
            if not any(t.name == name for t in tools):
                tools.append(
                    DeclaredTool(name, native_type, {"type": native_type, "name": name}, True)
                )
        return tools

    def body(self, tools: list[DeclaredTool], losses: list[Loss]) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.native is not None:
            body.update((k, v) for k, v in self.native.items() if k not in ("messages", "stream"))
        body["model"] = self.model
        body["max_tokens"] = self.max_tokens
        if self.native is None and self.portable.system:
            body["system"] = self.portable.system
        set_field(body, "tools", [t.value for t in tools] if tools else None)
        set_field(body, "tool_choice", self.tool_choice(tools, losses))
        return body

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
            choice = (
                {"type": name}
                if name in ("auto", "any", "none")
                else {
                    "type": "tool",
                    "name": name,
                }
            )
        return kept_choice(choice, raw, scope_tool_choice(choice, tools), self.source, losses)


def scope_tool_choice(choice: Any, tools: Sequence[DeclaredTool]) -> tuple[Any, str | None]:
    """`choice` kept to client tools: (the choice to send or None, why it changed)."""
    if not isinstance(choice, dict):
        return None, f"tool_choice {choice!r} is not an object; left out"
    if not tools:
        kind = choice.get("type")
        if kind in ("auto", None):
            return None, None
        return None, f"tool_choice {kind!r} without any tool declared; left out"
    kind = choice.get("type")
    hosted = [t.name for t in tools if t.hosted]
    clients = [t.name for t in tools if not t.hosted]
    if kind == "tool":
        name = choice.get("name")
        if name in hosted:
            return None, f"tool_choice forces hosted tool {name!r}, which is unsupported; left out"
        if name not in clients:
            return None, f"tool_choice names {name!r}, which is not declared; left out"
        return choice, None
    if kind == "any" and hosted:
        rest = {k: v for k, v in choice.items() if k not in ("type", "name")}
        if len(clients) == 1:
            return (
                {"type": "tool", "name": clients[0], **rest},
                f"tool_choice any narrowed to the only client tool {clients[0]!r} so that "
                f"hosted tools ({', '.join(hosted)}) cannot satisfy it",
            )
        if not clients:
            return None, "tool_choice any with only hosted tools declared; left out"
        return (
            {"type": "auto", **rest},
            "tool_choice any sent as auto: Anthropic cannot limit it to the client tools "
            f"while hosted tools ({', '.join(hosted)}) are declared",
        )
    return choice, None


def _pending_declarations(pending: list[HostedActivity]) -> dict[str, str]:
    """Tool name → native type, for the tools pending activities need declared."""
    out: dict[str, str] = {}
    for activity in pending:
        payload = activity.payload
        version = payload.version if payload is not None else ""
        if version:
            out.setdefault(tool_name_of(version), version)
            continue
        name = TOOL_ALIASES.get(activity.name, activity.name)
        if name in NATIVE_TOOL_VERSIONS:
            out.setdefault(name, NATIVE_TOOL_VERSIONS[name])
    return out
