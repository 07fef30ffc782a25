"""The provider-neutral vocabulary: ids, lifecycles and the value objects events carry.

Every value is a frozen `msgspec.Struct`; new fields get defaults and types never change
(msgspec's schema-evolution rule), so stored data stays readable.
"""

from __future__ import annotations

import weakref
from typing import Any, Final, Literal, NewType, TypeAlias
from uuid import UUID

import msgspec

from convstore.domain.errors import InvalidPayload

# Ids that cross module boundaries are distinct types at zero runtime cost.
ConversationId = NewType("ConversationId", UUID)
TurnId = NewType("TurnId", str)
ResponseId = NewType("ResponseId", str)
CallId = NewType("CallId", str)
ActivityId = NewType("ActivityId", str)

Provider = str
"""A provider name: `anthropic`, `openai`, `google`; others are carried, not interpreted."""

Lifecycle = Literal["started", "completed", "failed", "abandoned"]
"""States of a hosted activity and of a response: `started` then one terminal state."""

TERMINAL: Final[frozenset[str]] = frozenset({"completed", "failed", "abandoned"})

EndState = Literal["completed", "failed", "abandoned"]
"""How a response or a turn ended."""

FinishReason = Literal[
    "stop", "length", "tool_use", "pause", "refusal", "content_filter", "error", "other"
]
"""The closed, normalized set of reasons a response ended; the provider's own is kept beside."""

TurnTrigger = Literal["user", "tool_results", "continuation", "steering"]
"""What opened a turn."""

ResponseOrigin = Literal["provider", "request"]
"""`provider`: a response the provider sent; `request`: assistant history found in a request."""

SourceKind = Literal["web", "document", "file", "search_result"]


class ProviderPayload(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, weakref=True):
    """The native artifact of one provider, kept byte-for-byte for exact replay.

    Only the originating provider's adapter interprets `value`; every other reader keeps
    it and ignores it. Payloads are untrusted: never rendered, logged or indexed.
    (Weak references let `check_payload` remember which payloads `of` already checked.)
    """

    provider: Provider
    """The provider that produced the artifact."""
    format: str
    """Provider-defined discriminator, e.g. `content_block` or `output_item`."""
    version: str = ""
    """The wire contract selected when the artifact was made, e.g. `web_search_20250305`."""
    binding: dict[str, str] = {}
    """What the provider ties the value to beyond itself, e.g. `{"model": ...}`."""
    value: msgspec.Raw
    """The provider's JSON as raw bytes; opaque strings inside are byte-identical to the wire."""

    @classmethod
    def of(
        cls,
        provider: Provider,
        format: str,
        value: bytes,
        *,
        version: str = "",
        binding: dict[str, str] | None = None,
    ) -> ProviderPayload:
        """Wrap raw JSON bytes; raises InvalidPayload unless they are one JSON document.

        Whitespace around the document is dropped (it is not part of the value, and
        `msgspec.Raw` would not keep it through storage); the value itself is untouched.
        """
        value = bytes(value).strip(JSON_WHITESPACE)
        check_json_document(value, what=f"{provider} {format} payload")
        return cls.parsed(provider, format, value, version=version, binding=binding)

    @classmethod
    def parsed(
        cls,
        provider: Provider,
        format: str,
        value: bytes,
        *,
        version: str = "",
        binding: dict[str, str] | None = None,
    ) -> ProviderPayload:
        """Wrap JSON bytes a decoder has just parsed (or encoded) as one value, marked
        checked without reading them again: recording does not re-parse them. Only for
        bytes that are exactly one JSON value, as msgspec parses or encodes it."""
        payload = cls(
            provider=provider,
            format=format,
            version=version,
            binding=binding or {},
            value=msgspec.Raw(value),
        )
        _CHECKED.add(payload)
        return payload

    @property
    def raw(self) -> bytes:
        """The payload's bytes exactly as stored."""
        return bytes(self.value)


JSON_WHITESPACE: Final = b" \t\n\r"


def check_json_document(value: bytes, *, what: str = "payload") -> None:
    """Raise InvalidPayload unless `value` is exactly one well-formed UTF-8 JSON document.

    Whitespace around it is refused too: decoding a stored event yields the value
    without it, so those bytes would not survive a round trip through storage.
    """
    try:
        msgspec.json.decode(value, type=msgspec.Raw)
    except (msgspec.DecodeError, RecursionError) as error:
        raise InvalidPayload(f"{what} is not one JSON document: {error}") from None
    if not value.strip():
        raise InvalidPayload(f"{what} is empty")
    if value[0] in JSON_WHITESPACE or value[-1] in JSON_WHITESPACE:
        raise InvalidPayload(
            f"{what} has whitespace around its JSON value, which storage does not keep; "
            "strip it (ProviderPayload.of does)"
        )
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidPayload(f"{what} is not UTF-8: {error}") from None


class _Checked:
    """id → weak reference of every payload whose value passed `check_json_document`.

    A payload is frozen, so one checked stays valid; an entry counts only while its
    reference still points at the very object asked about (an id is reused only after its
    object died). References carry no callback (one per payload costs more than the
    check it saves): the dead ones are swept whenever the map has doubled since.
    """

    __slots__ = ("refs", "sweep_at")

    def __init__(self) -> None:
        self.refs: dict[int, weakref.ref[ProviderPayload]] = {}
        self.sweep_at = 1024

    def has(self, payload: ProviderPayload) -> bool:
        ref = self.refs.get(id(payload))
        return ref is not None and ref() is payload

    def add(self, payload: ProviderPayload) -> None:
        refs = self.refs
        refs[id(payload)] = weakref.ref(payload)
        if len(refs) >= self.sweep_at:
            for key, ref in list(refs.items()):  # a copy: other threads add meanwhile
                if ref() is None and refs.get(key) is ref:
                    del refs[key]
            self.sweep_at = max(1024, 2 * len(refs))


_CHECKED = _Checked()


def check_payload(payload: ProviderPayload) -> None:
    """Raise InvalidPayload unless the payload's value is one JSON document (see
    `check_json_document`); a payload made by `ProviderPayload.of` was checked already."""
    if _CHECKED.has(payload):
        return
    check_json_document(payload.raw, what=f"{payload.provider} {payload.format} payload")
    _CHECKED.add(payload)


class Location(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """Where in a document a cited passage lies."""

    unit: Literal["char", "page", "block"]
    """What `start` and `end` count: characters, pages or content blocks."""
    start: int
    end: int
    """Half-open."""
    document_index: int | None = None
    """The document's position in the request, where the provider names one."""


class Source(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """What an attribution points at."""

    kind: SourceKind
    """A web page, a document block, a file or container file, or a search result block."""
    url: str | None = None
    title: str | None = None
    id: str | None = None
    """A file id, a search-result source, or another provider-given identifier."""
    location: Location | None = None


class TextRange(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A half-open span of Unicode code points in an event's final stored text."""

    start: int
    end: int


class Attribution(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A citation attached to assistant text."""

    source: Source
    excerpt: str | None = None
    """Text quoted from the source; never stands in for `range`."""
    range: TextRange | None = None
    """The cited span of the event's text, where the provider gives one."""
    unplaced: str = ""
    """Why the provider's offsets were not kept as `range` (they do not fit the text)."""
    replay: ProviderPayload | None = None
    """The provider's opaque replay value (e.g. Anthropic's `encrypted_index`)."""


class ToolDeclaration(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A tool declared on a request: a client tool, or a hosted one with its native version."""

    name: str
    hosted: bool = False
    """True when the provider runs it (web search, code execution), False for client tools."""
    native_type: str = ""
    """The provider's own tool type, e.g. `web_search_20250305`; empty for plain functions."""
    description: str = ""
    input_schema: dict[str, Any] | None = None


class RequestSettings(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """The request a response answered: what replay and binding checks need."""

    system: str | None = None
    """The system prompt as text."""
    tools: tuple[ToolDeclaration, ...] = ()
    tool_choice: str | None = None
    """`auto`, `any`, `none`, or a client tool's name."""
    max_tokens: int | None = None
    native: ProviderPayload | None = None
    """The provider's own request settings (body without the conversation), for exact replay."""


class Usage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """Usage counters of one response, including counters of hosted work."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    hosted: dict[str, int] = {}
    """Provider counters of hosted work, e.g. `{"web_search_requests": 1}`."""
    other: dict[str, int] = {}
    """Every other numeric counter the provider reported, under its own name."""


class ErrorInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A provider's error, as it reported it."""

    type: str
    message: str = ""
    status: int | None = None
    """The HTTP status, when the error came as an HTTP error body."""


NoticeKind: TypeAlias = Literal[
    "refusal",
    "safety",
    "blocked",
    "incomplete",
    "error",
    "finish_message",
    "stop_sequence",
    "screening",
    "container",
    "context_management",
]
"""What a notice is about: a refusal, a safety rating, a blocked prompt, why an answer is
incomplete, the error of a failed response, the provider's finish message, the stop
sequence that ended the answer, a screening
result (e.g. Model Armor), the container the work ran in, context management applied."""


class Notice(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """Something a provider said about a response besides its content, as typed fields."""

    kind: NoticeKind
    code: str = ""
    """The provider's category, reason or id, verbatim (`cyber`, `SAFETY`, `max_output_tokens`)."""
    message: str = ""
    """The provider's own words for a person, if any."""
    details: dict[str, str] = {}
    """Further named values as the provider gave them (a probability, an expiry time)."""


class CodeOutput(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What hosted code wrote on one channel, as its provider's adapter read the result."""

    channel: str
    """`stdout`, `stderr`, `logs` (OpenAI's code interpreter), `output` (Gemini's, stdout
    and stderr mixed), `file` (a file's content a text editor viewed), `diff` (an edit),
    `error` (the provider's words for a run that failed)."""
    text: str
    """The text as the provider reported it; untrusted."""


class PayloadReading(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a provider's adapter reads out of one of its payloads for the portable reading."""

    notices: tuple[Notice, ...] = ()
    """Notices about the response the payload came in."""
    sources: tuple[Source, ...] = ()
    """Sources a hosted activity consulted beyond those cited (OpenAI's `action.sources`)."""
    outputs: tuple[CodeOutput, ...] = ()
    """What a hosted code run wrote, from its result (a hosted activity's payload)."""


class Writer(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """The process that wrote a ResponseStarted, to tell a live stream from a dead one.

    `id` names the hold the writer keeps for its life (see `domain.writers`); it alone
    decides liveness. Host, pid and process start are kept for people (and for readers of
    earlier versions); a response recorded before writer ids has `id == ""`.
    """

    host: str
    pid: int
    started: float
    """The process start time in clock ticks since boot (0.0 where unknown)."""
    id: str = ""
    """The writer id: the key of the hold (a lock) the writing process keeps."""


class Display(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A provider's display obligation, kept as data for renderers; never printed raw."""

    kind: str
    """E.g. `search_suggestion` (Google's Search Suggestion)."""
    content: str
    """The provider's content, e.g. HTML; untrusted."""
    content_type: str = "text/html"
