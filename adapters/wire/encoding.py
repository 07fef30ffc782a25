"""What the provider encoders share: the pieces of turning stored events into a request.

Each provider's `encode` module builds its own request shape. The pieces here are alike
for all three: the JSON codecs that keep stored payloads byte for byte, the `<context>`
envelope, the losses, the model binding check, the recorded settings, and the scan of a
conversation's responses and hosted activities that encoding needs ahead.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import msgspec

from convstore.adapters.wire.models import ModelNames
from convstore.adapters.wire.providers import Loss
from convstore.adapters.wire.secrets import MARKER, credential_paths
from convstore.domain.errors import ConfigurationError
from convstore.domain.events import Event, HostedActivity, ResponseEnded, ResponseStarted
from convstore.domain.vocabulary import RequestSettings, ToolDeclaration

__all__ = [
    "ANY_JSON",
    "ENCODER",
    "NO_SETTINGS",
    "RAW_FIELDS",
    "RAW_LIST",
    "ActivitySpan",
    "RecordedSettings",
    "ResponseSpan",
    "Scan",
    "client_tools",
    "context_envelope",
    "event_loss",
    "kept_choice",
    "recorded_list",
    "recorded_native",
    "set_field",
    "settings_loss",
    "target_model",
]

ENCODER: Final = msgspec.json.Encoder()
"""Encodes a body of builtins and `msgspec.Raw` values, each payload's bytes kept."""
RAW_FIELDS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
RAW_LIST: Final = msgspec.json.Decoder(list[msgspec.Raw])
ANY_JSON: Final = msgspec.json.Decoder()
NO_SETTINGS: Final = RequestSettings()
"""The settings of a `ResponseStarted` that recorded none."""


def context_envelope(source: str, text: str) -> str:
    """How ContextInjected reads inside a user turn: `<context source="…">…</context>`."""
    return f'<context source="{html.escape(source, quote=True)}">{text}</context>'


def event_loss(event: Event, kind: str, reason: str) -> Loss:
    """The loss of (part of) `event`."""
    return Loss(
        version=event.originator_version, event=type(event).__name__, kind=kind, reason=reason
    )


def settings_loss(source: ResponseStarted | None, reason: str, *, kind: str = "settings") -> Loss:
    """A loss of the recorded settings of `source` (`settings` when none is recorded)."""
    return Loss(
        version=source.originator_version if source is not None else 0,
        event="ResponseStarted" if source is not None else "settings",
        kind=kind,
        reason=reason,
    )


def recorded_native(
    source: ResponseStarted | None, provider: str, losses: list[Loss]
) -> dict[str, msgspec.Raw] | None:
    """The fields of the native request `source` recorded, when it is `provider`'s (None
    otherwise, with a settings loss when there was one that cannot be used); a
    `credential` loss for each credential scrubbed from it (`secrets.MARKER`)."""
    if source is None or source.settings.native is None:
        return None
    payload = source.settings.native
    if payload.provider != provider:
        reason = f"{payload.provider} request settings left out; portable settings used"
        losses.append(settings_loss(source, reason))
        return None
    try:
        fields = RAW_FIELDS.decode(payload.raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        losses.append(settings_loss(source, "recorded settings are not an object"))
        return None
    for path in credential_paths(payload.raw):
        reason = (
            f"{path} was not stored (convstore never stores a credential) and must be "
            f"supplied by configuration; the request carries {MARKER!r} in its place"
        )
        losses.append(settings_loss(source, reason, kind="credential"))
    return fields


def recorded_list(native: Mapping[str, msgspec.Raw], key: str) -> list[msgspec.Raw]:
    """The items of the recorded list `native[key]` ([] when absent or not a list)."""
    raw = native.get(key)
    if raw is None:
        return []
    try:
        return RAW_LIST.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return []


def kept_choice(
    choice: Any,
    raw: msgspec.Raw | None,
    scoped: tuple[Any, str | None],
    source: ResponseStarted | None,
    losses: list[Loss],
) -> Any:
    """The tool choice to send: `scoped` (what the provider's scoping made of `choice`,
    and why it changed it: a `tool_choice` loss), or the recorded `raw` bytes when
    `choice`, decoded from them, is kept as it is."""
    kept, why = scoped
    if why is not None:
        losses.append(settings_loss(source, why, kind="tool_choice"))
    if kept is choice and raw is not None:
        return raw
    return kept


def set_field(body: dict[str, Any], key: str, value: Any) -> None:
    """`body[key] = value` (in place when present), or no `key` at all when `value` is
    None."""
    if value is None:
        body.pop(key, None)
    else:
        body[key] = value


def client_tools(
    source: ResponseStarted | None, target: str, losses: list[Loss]
) -> list[ToolDeclaration]:
    """The client tools `source`'s portable settings declare; each hosted tool is a loss
    (no `target` equivalent is declared for it)."""
    if source is None:
        return []
    tools = []
    for declaration in source.settings.tools:
        if declaration.hosted:
            reason = (
                f"{source.provider} hosted tool {declaration.name} has no {target} "
                "equivalent declared; left out"
            )
            losses.append(settings_loss(source, reason, kind="tool_declaration"))
        else:
            tools.append(declaration)
    return tools


def target_model(provider: str, example: str, *candidates: str | None) -> str:
    """The first model named among `candidates`; ConfigurationError when none is."""
    for candidate in candidates:
        if candidate:
            return candidate
    raise ConfigurationError(
        f"no model to send the request to: set providers.{provider}.model "
        f"(e.g. --cfg providers.{provider}.model={example}) or pass a model"
    )


@dataclass(slots=True)
class RecordedSettings:
    """The request's settings: the recorded ones, which the configuration overrides."""

    model: str
    """The model the request goes to."""
    native: dict[str, msgspec.Raw] | None
    """The recorded native request's fields, when it is the target provider's."""
    portable: RequestSettings
    """The recorded settings, read portably (used when there is no native request)."""
    source: ResponseStarted | None
    """The response whose settings these are."""


@dataclass(slots=True)
class ResponseSpan:
    """A response of the conversation: its start, and its end once recorded."""

    started: ResponseStarted
    ended: ResponseEnded | None = None


@dataclass(slots=True)
class ActivitySpan:
    """A hosted activity: its first `started` and its first terminal transition."""

    started: HostedActivity | None = None
    terminal: HostedActivity | None = None


R = TypeVar("R", bound=ResponseSpan)


class Scan(Generic[R]):
    """What encoding needs to know ahead: how each response ended, each activity's fate,
    the newest responses. A provider's scan calls `note` for each event, then keeps what
    its own encoding needs."""

    def __init__(self, response: Callable[[ResponseStarted], R], models: ModelNames) -> None:
        self._response = response
        self.models = models
        """The conversation's model names: which are one model for binding."""
        self.responses: dict[str, R] = {}
        self.activities: dict[str, ActivitySpan] = {}
        self.newest: ResponseStarted | None = None
        self.newest_with_settings: ResponseStarted | None = None

    def note(self, event: Event) -> None:
        """Take in a response's start or end, or a hosted activity's transition."""
        if isinstance(event, ResponseStarted):
            self.responses[event.response_id] = self._response(event)
            self.models.note(event)
            self.newest = event
            if event.settings != NO_SETTINGS:
                self.newest_with_settings = event
        elif isinstance(event, ResponseEnded):
            known = self.responses.get(event.response_id)
            if known is not None:
                known.ended = event
        elif isinstance(event, HostedActivity):
            activity = self.activities.setdefault(event.activity_id, ActivitySpan())
            if event.state == "started":
                activity.started = activity.started or event
            else:
                activity.terminal = activity.terminal or event

    def end_state(self, response_id: str | None) -> str:
        """`completed`, `failed`, `abandoned`, or `open` (no ResponseEnded yet)."""
        response = self.responses.get(response_id or "")
        if response is None or response.ended is None:
            return "open"
        return response.ended.state

    def provider_of(self, response_id: str | None) -> str:
        """The provider of a response ('' when it is not in the conversation)."""
        response = self.responses.get(response_id or "")
        return response.started.provider if response is not None else ""

    def model_of(self, response_id: str | None) -> str:
        """The model of a response ('' when it is not in the conversation)."""
        response = self.responses.get(response_id or "")
        return response.started.model if response is not None else ""
