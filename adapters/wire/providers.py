"""The provider adapters behind one interface, so commands treat every provider alike.

Each wire-format package (`anthropic`, `openai`, `google`) registers a `ProviderAdapter`
here: how to decode a response body, how to read the history a captured request holds,
how to encode a conversation as the provider's request, and how to send one. Modules are
imported on first use, so the command line starts fast.

A captured request body enters only through `decode` (see `decode_with_request`) and
`need_history`, and both read it scrubbed of credentials (`secrets.scrub_request`), so no
credential it carries reaches an event.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

import msgspec

from convstore.adapters.wire.names import PROVIDERS
from convstore.adapters.wire.preview import Preview
from convstore.adapters.wire.redacted import Signed, refuse_signed
from convstore.adapters.wire.secrets import scrub_request
from convstore.domain.errors import ConfigurationError
from convstore.domain.events import Event
from convstore.domain.redaction import overlay
from convstore.domain.vocabulary import PayloadReading, ProviderPayload


class Loss(msgspec.Struct, frozen=True, kw_only=True):
    """One thing a request leaves out, or converts, and why."""

    version: int
    """The event's `originator_version` (0 when the loss is not one event's)."""
    event: str
    """The event type, e.g. `Reasoning`, or `settings`."""
    kind: str
    """What is lost: `reasoning`, `hosted_activity`, `citations`, `payload`,
    `unknown_artifact`, `tool_declaration`, `tool_choice`, `settings`, `credential`,
    `text`, …"""
    reason: str


def iter_losses(losses: Sequence[Loss]) -> Iterator[str]:
    """One line per loss, for a person."""
    for loss in losses:
        where = f"event {loss.version} ({loss.event})" if loss.version else loss.event
        yield f"{where}: {loss.kind}: {loss.reason}"


class MessageDrafts(msgspec.Struct, frozen=True, kw_only=True):
    """The drafts of one message of a captured request."""

    index: int
    """The message's position in the request."""
    role: str
    """`user` (user text, context, tool results) or `assistant` (a response of origin
    `request`: ResponseStarted … ResponseEnded)."""
    drafts: tuple[Event, ...]


@dataclass(slots=True)
class DeclaredTool:
    """A tool of a request's `tools`: its name, native type, declaration, and whether the
    provider runs it."""

    name: str
    """A function's name, or a hosted tool's activity name (`web_search`, `mcp:<label>`)."""
    type: str
    """The native type (`web_search_20250305`, `function`, …; empty for a plain tool)."""
    value: Any
    """The native declaration (`msgspec.Raw` or builtins)."""
    hosted: bool


class _TypeOnly(msgspec.Struct):
    type: str = ""


_TYPE_ONLY: Final = msgspec.json.Decoder(_TypeOnly)


def payload_type(payload: ProviderPayload) -> str:
    """The `type` field of a payload's JSON object (empty when it has none)."""
    try:
        return _TYPE_ONLY.decode(payload.raw).type
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ""


class EncodedRequest(Protocol):
    """A provider's request body and what it leaves out."""

    @property
    def losses(self) -> Sequence[Loss]:
        """What the request leaves out or converts."""
        ...

    @property
    def kept_declared(self) -> Sequence[str]:
        """Hosted tools declared only because an activity of them is pending: the
        configuration does not enable them (`wire.consent`; each also a loss of kind
        `kept_declared`, whose reason says so to a person)."""
        ...

    @property
    def notes(self) -> Sequence[str]:
        """What a person is told before the request is sent (on stderr; unsanitized:
        render them): one sentence per hosted tool kept declared for pending work."""
        ...

    def to_json(self) -> bytes:
        """The body as JSON, every stored payload embedded byte for byte."""
        ...

    def recorded_json(self) -> bytes:
        """The request as a recording keeps it, for decoding its response: the body plus
        what the URL carries that the decoder needs (Gemini's model)."""
        ...


Decode = Callable[[bytes | Iterable[bytes], bytes | None, int | None], Iterator[Event]]
"""(body or chunks, the request body that produced it, HTTP status) → drafts."""
History = Callable[[Sequence[Event], bytes], list[MessageDrafts]]
"""(recorded events, request body) → drafts of the messages not recorded yet; raises
DecodeError when the recorded messages are not a prefix of the request's."""
Encode = Callable[[Sequence[Event], Mapping[str, Any], str | None, str | None], EncodedRequest]
"""(events, configuration, model, next user text) → the request continuing them."""
Send = Callable[[EncodedRequest, Mapping[str, Any]], AbstractContextManager[Iterable[bytes]]]
"""(request, configuration) → the streamed response body; raises ProviderHTTPError."""
Interpret = Callable[[ProviderPayload], PayloadReading | None]
"""(one of the provider's payloads) → its notices and sources; None for a kind it does not
type. Never raises: a value it cannot read is None."""


C_contra = TypeVar("C_contra", contravariant=True)


class ContextDecoder(Protocol[C_contra]):
    """A provider's `detect_and_decode`: a body decoded against what its request said."""

    def __call__(
        self,
        body: bytes | Iterable[bytes],
        *,
        request: C_contra | None = None,
        status: int | None = None,
    ) -> Iterator[Event]: ...


def decode_with_request(
    read: Callable[[bytes], C_contra], decode: ContextDecoder[C_contra]
) -> Decode:
    """The `Decode` that reads the request body, when there is one, scrubbed of
    credentials, with `read` (a provider's `RequestContext.from_body`) and decodes
    against what it says."""

    def decode_body(
        body: bytes | Iterable[bytes], request: bytes | None, status: int | None
    ) -> Iterator[Event]:
        context = read(scrub_request(request)) if request is not None else None
        return decode(body, request=context, status=status)

    return decode_body


class ConfiguredEncoder(Protocol[C_contra]):
    """A provider's `encode_request`: the request continuing `events` under its typed
    configuration."""

    def __call__(
        self,
        events: Sequence[Event],
        *,
        config: C_contra,
        model: str | None = None,
        user: str | None = None,
    ) -> EncodedRequest: ...


def encode_with_config(
    read: Callable[[Mapping[str, Any]], C_contra], encode: ConfiguredEncoder[C_contra]
) -> Encode:
    """The `Encode` that reads the provider's block of the configuration with `read` (its
    config's `from_config`) and encodes under it."""

    def encode_events(
        events: Sequence[Event], config: Mapping[str, Any], model: str | None, user: str | None
    ) -> EncodedRequest:
        return encode(events, config=read(config), model=model, user=user)

    return encode_events


@dataclass(frozen=True)
class ProviderAdapter:
    """What a provider's package offers the commands."""

    name: str
    decode: Decode
    history: History | None = None
    encode: Encode | None = None
    send: Send | None = None
    interpret: Interpret | None = None
    """Reads the provider's own payloads for the portable reading (see `read_payload`)."""
    preview: Preview | None = None
    """Reads a live stream's text and reasoning as it arrives, for a person watching."""
    configure: Callable[[Mapping[str, Any]], object] | None = None
    """Reads (and so checks) the provider's block of a whole configuration."""
    signed: Signed | None = None
    """Which of its payloads are signed over their text: replay of a redacted one to this
    provider is refused (`wire.redacted`)."""
    continues_prefill: bool = False
    """Whether the provider continues a conversation ending in assistant text (a prefill),
    so a response cut at its token limit can be continued."""

    def need_history(self) -> History:
        """`history`, reading the request body scrubbed of credentials, or a clear error
        where this provider has none yet."""
        history = self.history
        if history is None:
            raise ConfigurationError(f"--request is not supported for provider {self.name!r}")

        def scrubbed(events: Sequence[Event], request: bytes) -> list[MessageDrafts]:
            return history(events, scrub_request(request))

        return scrubbed

    def need_encode(self) -> Encode:
        """`encode` over the redaction overlay (`wire.redacted`), or a clear error.
        Raises RedactedReplay when a redacted text's signature would have to round-trip."""
        encode = self.encode
        if encode is None:
            raise ConfigurationError(f"replay to {self.name!r} is not supported")
        name, signed = self.name, self.signed

        def encode_redacted(
            events: Sequence[Event], config: Mapping[str, Any], model: str | None, user: str | None
        ) -> EncodedRequest:
            refuse_signed(
                events, name, signed, lambda: encode(events, config, model, user).to_json()
            )
            return encode(overlay(events), config, model, user)

        return encode_redacted

    def need_send(self) -> Send:
        """`send`, or a clear error."""
        if self.send is None:
            raise ConfigurationError(f"sending requests to {self.name!r} is not supported")
        return self.send


def read_payload(payload: ProviderPayload) -> PayloadReading | None:
    """What the adapter of `payload`'s provider reads out of it: its notices and sources.

    None when no adapter knows the payload's kind, so it stays an unknown artifact. Only
    the originating provider's adapter interprets a value; a store is never rewritten,
    so artifacts stored as unknown before a kind was typed are read this way too."""
    if payload.provider not in PROVIDERS:
        return None
    interpret = adapter(payload.provider).interpret
    return None if interpret is None else interpret(payload)


def adapter(name: str) -> ProviderAdapter:
    """The adapter of provider `name` (its package's `ADAPTER`)."""
    if name not in PROVIDERS:
        raise ConfigurationError(
            f"unknown provider {name!r}: expected one of {', '.join(PROVIDERS)}"
        )
    try:
        module = importlib.import_module(f"convstore.adapters.{package_of(name)}.adapter")
    except ModuleNotFoundError as error:
        if error.name != f"convstore.adapters.{package_of(name)}.adapter":
            raise
        raise ConfigurationError(f"provider {name!r} has no adapter in this version") from None
    found: ProviderAdapter = module.ADAPTER
    return found


def package_of(name: str) -> str:
    """The package of provider `name` under `convstore.adapters` (`openai-chat` →
    `openai_chat`)."""
    return name.replace("-", "_")


_SERVER: ContextVar[str] = ContextVar("convstore_server", default="")


@contextmanager
def serving(server: str) -> Iterator[None]:
    """Decode, within the block, as answers of `server` (a host, e.g. `localhost:11434`):
    for wire formats whose payloads are bound to the server as well as the model
    (`openai-chat`), which a captured body does not name. Others ignore it."""
    token = _SERVER.set(server)
    try:
        yield
    finally:
        _SERVER.reset(token)


def current_server() -> str:
    """The server `serving` names here ('' outside it)."""
    return _SERVER.get()
