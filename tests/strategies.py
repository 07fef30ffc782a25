"""Hypothesis strategies for the domain vocabulary and for drafts of every event kind.

Reusable by any test suite (`from tests.strategies import conversation_drafts, ...`).

A *draft* is an event whose envelope still holds its defaults; `Conversation.record`
stamps it. The single-kind draft strategies (`*_drafts`) build one well-formed draft
each, taking strategies for the ids they reference so callers can aim them at a
particular response, call or activity; `drafts()` draws a draft of any kind (not
necessarily acceptable where it is recorded). `conversation_drafts()` draws a whole
*valid* conversation (Started first, then turns, responses, text with in-range
citations, reasoning, tool cycles, hosted activities through their lifecycles, unknown
artifacts, optionally an interrupted tail), and `conversations()` records one into an
aggregate whose events are pending, ready for a repository's `save`.

Payload bytes come from `json_documents()`: msgspec-encoded JSON values and hand-spelled
JSON texts with odd spellings (key order, `\\u00e9` escapes, big integers, `1.0e10`,
`-0.0`, `1E+2`, inner whitespace) that must survive storage byte-for-byte.
"""

from __future__ import annotations

import string
from functools import cache
from typing import Any, Final

import msgspec
from hypothesis import strategies as st

from convstore.domain import (
    ActivityId,
    AssistantText,
    Attribution,
    CallId,
    ContextInjected,
    Conversation,
    ConversationId,
    Display,
    ErrorInfo,
    Event,
    HostedActivity,
    Location,
    ProviderPayload,
    Reasoning,
    RequestSettings,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    Source,
    Started,
    TextRange,
    ToolCallRequested,
    ToolCallResponded,
    ToolDeclaration,
    TurnEnded,
    TurnId,
    TurnStarted,
    UnknownArtifact,
    Usage,
    UserMessage,
    Writer,
)
from convstore.domain.vocabulary import EndState, FinishReason, Lifecycle, SourceKind, TurnTrigger

__all__ = [
    "ACTIVITY_NAMES",
    "END_STATES",
    "FINISH_REASONS",
    "INVALID_JSON_DOCUMENTS",
    "LIFECYCLES",
    "PADDED_JSON_DOCUMENTS",
    "PROVIDERS",
    "TRICKY_JSON_DOCUMENTS",
    "activity_ids",
    "assistant_text_drafts",
    "attributions",
    "call_ids",
    "context_injected_drafts",
    "conversation_drafts",
    "conversation_ids",
    "conversations",
    "displays",
    "drafts",
    "error_infos",
    "hosted_activity_drafts",
    "json_documents",
    "json_texts",
    "json_values",
    "locations",
    "provider_payloads",
    "providers",
    "reasoning_drafts",
    "request_settings",
    "response_ended_drafts",
    "response_ids",
    "response_started_drafts",
    "sources",
    "started_drafts",
    "text_ranges",
    "texts",
    "tool_call_requested_drafts",
    "tool_call_responded_drafts",
    "tool_declarations",
    "turn_ended_drafts",
    "turn_ids",
    "turn_started_drafts",
    "unknown_artifact_drafts",
    "usages",
    "user_message_drafts",
    "writers",
]

PROVIDERS: Final = ("anthropic", "openai", "google")
ACTIVITY_NAMES: Final = ("web_search", "code_execution", "web_fetch")
LIFECYCLES: Final[tuple[Lifecycle, ...]] = ("started", "completed", "failed", "abandoned")
END_STATES: Final[tuple[EndState, ...]] = ("completed", "failed", "abandoned")
FINISH_REASONS: Final[tuple[FinishReason, ...]] = (
    "stop",
    "length",
    "tool_use",
    "pause",
    "refusal",
    "content_filter",
    "error",
    "other",
)
TRIGGERS: Final[tuple[TurnTrigger, ...]] = ("user", "tool_results", "continuation", "steering")
SOURCE_KINDS: Final[tuple[SourceKind, ...]] = ("web", "document", "file", "search_result")

# Characters whose UTF-8 (and UTF-16) lengths differ from one code point, combining marks
# and joiners, JSON's special characters: where byte and code-point offsets part ways.
_INTERESTING: Final = 'aZ9 é中文字😀🎉👩\u200d\u0301\n\t"\\/\x00\u2028'

# --- scalars and ids ------------------------------------------------------------------------


@cache
def texts(*, min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[str]:
    """Unicode text rich in multi-byte characters (no surrogates, so always encodable)."""
    alphabet = st.one_of(st.sampled_from(_INTERESTING), st.characters(codec="utf-8"))
    return st.text(alphabet, min_size=min_size, max_size=max_size)


_ID_ALPHABET: Final = string.ascii_letters + string.digits + "_-"


@cache
def _ids(prefix: str) -> st.SearchStrategy[str]:
    return st.text(_ID_ALPHABET, min_size=1, max_size=12).map(lambda s: prefix + s)


@cache
def turn_ids() -> st.SearchStrategy[TurnId]:
    return _ids("turn_").map(TurnId)


@cache
def response_ids() -> st.SearchStrategy[ResponseId]:
    return _ids("msg_").map(ResponseId)


@cache
def call_ids() -> st.SearchStrategy[CallId]:
    return _ids("toolu_").map(CallId)


@cache
def activity_ids() -> st.SearchStrategy[ActivityId]:
    return _ids("srvtoolu_").map(ActivityId)


@cache
def conversation_ids() -> st.SearchStrategy[ConversationId]:
    return st.uuids().map(ConversationId)


@cache
def providers() -> st.SearchStrategy[str]:
    return st.sampled_from(PROVIDERS)


# --- JSON -----------------------------------------------------------------------------------

_INT64: Final = 2**63


@cache
def json_values(*, max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Python values that msgspec encodes to JSON and decodes back equal (no NaN/inf)."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-_INT64, _INT64 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        texts(max_size=12),
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(texts(max_size=8), children, max_size=4),
        ),
        max_leaves=max_leaves,
    )


@cache
def json_objects(*, max_leaves: int = 8) -> st.SearchStrategy[dict[str, Any]]:
    """JSON objects, e.g. tool arguments or activity input."""
    return st.dictionaries(texts(max_size=8), json_values(max_leaves=max_leaves), max_size=4)


_NUMBER_SPELLINGS: Final = (
    "0",
    "-0",
    "-0.0",
    "1.0e10",
    "1E+2",
    "1e-7",
    "2.50",
    "123456789012345678901234567890",
    "-98765432109876543210.5",
    "3.14159265358979323846264338327950288",
)
_STRING_SPELLINGS: Final = (
    '""',
    '"\\u00e9"',
    '"caf\\u00E9"',
    '"\\ud83d\\ude00"',
    '"\\/"',
    '"\\"quoted\\""',
    '"é"',
    '"中文"',
    '"😀"',
    '"EqQKCkIIAxgCKkCzp3+/=="',
)
_WS: Final = ("", " ", "\n  ", "\t")


@st.composite
def _spelled_strings(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return draw(st.sampled_from(_STRING_SPELLINGS))
    return msgspec.json.encode(draw(texts(max_size=10))).decode()


@cache
def json_texts() -> st.SearchStrategy[bytes]:
    """Hand-spelled JSON documents: any key order (duplicates too), escapes, odd numbers.

    msgspec would never spell them this way, so they only survive a round trip if the
    bytes are carried verbatim. Whitespace appears inside, never around, the document.
    """
    ws = st.sampled_from(_WS)
    leaves = st.one_of(
        st.sampled_from(("true", "false", "null")),
        st.sampled_from(_NUMBER_SPELLINGS),
        st.integers().map(str),
        _spelled_strings(),
    )

    def containers(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        arrays = st.tuples(st.lists(st.tuples(ws, children, ws), max_size=4), ws).map(
            lambda t: "[" + ",".join(a + v + b for a, v, b in t[0]) + t[1] + "]"
        )
        members = st.tuples(ws, _spelled_strings(), ws, ws, children, ws)
        objects = st.tuples(st.lists(members, max_size=4), ws).map(
            lambda t: (
                "{"
                + ",".join(a + k + b + ":" + c + v + d for a, k, b, c, v, d in t[0])
                + t[1]
                + "}"
            )
        )
        return st.one_of(arrays, objects)

    return st.recursive(leaves, containers, max_leaves=10).map(lambda s: s.encode("utf-8"))


TRICKY_JSON_DOCUMENTS: Final[tuple[bytes, ...]] = (
    b'{"z":1,"a":2,"m":{"y":true,"b":null}}',
    b'"\\u00e9"',
    b'{"name":"caf\\u00e9","emoji":"\\ud83d\\ude00","raw":"\xc3\xa9"}',
    b"123456789012345678901234567890",
    b'{"big":123456789012345678901234567890,"neg":-123456789012345678901234567890}',
    b"1.0e10",
    b"-0.0",
    b"1E+2",
    b"[1.0e10,-0.0,1E+2,2.50,1e-7]",
    b'{ "spaced" : [ 1 , 2 ] ,\n  "tabbed":\t"x" }',
    b'{"dup":1,"dup":2}',
    b'{"signature":"EqQKCkIIAxgCKkCzp3+/==","encrypted_content":"gAAAAABo..."}',
)
"""JSON documents msgspec would spell differently: each must come back byte-identical."""

INVALID_JSON_DOCUMENTS: Final[tuple[bytes, ...]] = (
    b"",
    b"   ",
    b'{"a":',
    b'{"a": 1',
    b'{"type":"web_search_tool_result","content":[{"url":"https://exa',
    b"nul",
    b'{"a":1} {"b":2}',
    b"[1,]",
    b"{'single': 'quotes'}",
    b"NaN",
    b'{"a":"\xff"}',
    b'\xef\xbb\xbf{"bom":1}',
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    b"[" * 100_000,
)
"""Bytes that are not exactly one JSON document storage can keep: InvalidPayload."""

PADDED_JSON_DOCUMENTS: Final[tuple[bytes, ...]] = (b" {} ", b"{}\n", b'\r\n\t[1, "x" ]\n ')
"""JSON with whitespace around it: `ProviderPayload.of` strips it; recorded as-is, refused."""


@cache
def json_documents() -> st.SearchStrategy[bytes]:
    """Valid payload bytes: msgspec encodings, hand-spelled texts and the tricky ones."""
    return st.one_of(
        json_values().map(msgspec.json.encode),
        json_texts(),
        st.sampled_from(TRICKY_JSON_DOCUMENTS),
    )


# --- value objects --------------------------------------------------------------------------


@cache
def provider_payloads(
    *,
    provider: st.SearchStrategy[str] | None = None,
    value: st.SearchStrategy[bytes] | None = None,
) -> st.SearchStrategy[ProviderPayload]:
    """Payloads built through `ProviderPayload.of`, with valid JSON bytes."""
    return st.builds(
        ProviderPayload.of,
        provider if provider is not None else providers(),
        st.sampled_from(("content_block", "output_item", "part", "partial", "future_format")),
        value if value is not None else json_documents(),
        version=st.sampled_from(("", "web_search_20250305", "2025-03-11", "v99")),
        binding=st.one_of(
            st.none(),
            st.dictionaries(st.sampled_from(("model", "system")), texts(max_size=8), max_size=2),
        ),
    )


@cache
def locations() -> st.SearchStrategy[Location]:
    return st.builds(
        lambda unit, a, b, index: Location(
            unit=unit, start=min(a, b), end=max(a, b), document_index=index
        ),
        st.sampled_from(("char", "page", "block")),
        st.integers(0, 10_000),
        st.integers(0, 10_000),
        st.none() | st.integers(0, 5),
    )


@cache
def sources() -> st.SearchStrategy[Source]:
    return st.builds(
        Source,
        kind=st.sampled_from(SOURCE_KINDS),
        url=st.none()
        | st.sampled_from(("https://example.com/", "https://例え.jp/パス?q=é#frag"))
        | texts(max_size=20).map(lambda s: "https://example.org/" + s),
        title=st.none() | texts(max_size=20),
        id=st.none() | _ids("file_"),
        location=st.none() | locations(),
    )


@st.composite
def text_ranges(draw: st.DrawFn, text: str) -> TextRange:
    """A half-open code-point span lying inside `text`."""
    length = len(text)
    start = draw(st.integers(0, length))
    end = draw(st.integers(start, length))
    return TextRange(start, end)


@cache
def _attribution_parts() -> st.SearchStrategy[
    tuple[Source, str | None, bool, ProviderPayload | None]
]:
    return st.tuples(
        sources(),
        st.none() | texts(max_size=20),
        st.booleans(),
        st.none() | provider_payloads(provider=st.just("anthropic")),
    )


@st.composite
def attributions(draw: st.DrawFn, text: str, *, max_size: int = 3) -> tuple[Attribution, ...]:
    """Citations for `text`, each range (where present) inside it."""
    out = []
    for _ in range(draw(st.integers(0, max_size))):
        source, excerpt, ranged, replay = draw(_attribution_parts())
        span = draw(text_ranges(text)) if ranged else None
        out.append(Attribution(source=source, excerpt=excerpt, range=span, replay=replay))
    return tuple(out)


@cache
def tool_declarations() -> st.SearchStrategy[ToolDeclaration]:
    return st.one_of(
        st.builds(
            ToolDeclaration,
            name=st.sampled_from(("get_weather", "lookup", "run_sql")),
            description=texts(max_size=20),
            input_schema=st.none() | st.just({"type": "object", "properties": {}}),
        ),
        st.builds(
            ToolDeclaration,
            name=st.sampled_from(ACTIVITY_NAMES),
            hosted=st.just(True),
            native_type=st.sampled_from(("web_search_20250305", "code_execution_20250522")),
        ),
    )


@cache
def request_settings() -> st.SearchStrategy[RequestSettings]:
    return st.builds(
        RequestSettings,
        system=st.none() | texts(max_size=30),
        tools=st.lists(tool_declarations(), max_size=3).map(tuple),
        tool_choice=st.sampled_from((None, "auto", "any", "none", "get_weather")),
        max_tokens=st.none() | st.integers(1, 64_000),
        native=st.none() | provider_payloads(),
    )


@cache
def usages() -> st.SearchStrategy[Usage]:
    counts = st.none() | st.integers(0, 10**9)
    return st.builds(
        Usage,
        input_tokens=counts,
        output_tokens=counts,
        cache_read_tokens=counts,
        cache_write_tokens=counts,
        reasoning_tokens=counts,
        hosted=st.dictionaries(
            st.sampled_from(("web_search_requests", "code_execution_requests")),
            st.integers(0, 100),
            max_size=2,
        ),
        other=st.dictionaries(st.sampled_from(("service_tier_units",)), st.integers(0, 9)),
    )


@cache
def error_infos() -> st.SearchStrategy[ErrorInfo]:
    return st.builds(
        ErrorInfo,
        type=st.sampled_from(("overloaded_error", "api_error", "too_large", "invalid_request")),
        message=texts(max_size=30),
        status=st.none() | st.sampled_from((400, 413, 429, 500, 529)),
    )


@cache
def writers() -> st.SearchStrategy[Writer]:
    return st.builds(
        Writer,
        host=st.sampled_from(("localhost", "worker-1.internal", "elsewhere.invalid")),
        pid=st.integers(1, 2**22),
        started=st.floats(0, 1e9, allow_nan=False),
    )


@cache
def displays() -> st.SearchStrategy[Display]:
    return st.builds(
        Display,
        kind=st.just("search_suggestion"),
        content=texts(max_size=30).map(lambda s: f"<div class='chip'>{s}</div>"),
    )


# --- drafts, one kind each --------------------------------------------------------------------


@cache
def started_drafts() -> st.SearchStrategy[Started]:
    return st.builds(
        Started,
        title=texts(max_size=30),
        labels=st.lists(texts(min_size=1, max_size=8), max_size=3).map(tuple),
    )


@cache
def turn_started_drafts(
    turn_id: st.SearchStrategy[TurnId] | None = None,
) -> st.SearchStrategy[TurnStarted]:
    return st.builds(
        TurnStarted,
        turn_id=turn_id if turn_id is not None else turn_ids(),
        trigger=st.sampled_from(TRIGGERS),
    )


@cache
def turn_ended_drafts(
    turn_id: st.SearchStrategy[TurnId] | None = None,
) -> st.SearchStrategy[TurnEnded]:
    return st.builds(
        TurnEnded,
        turn_id=turn_id if turn_id is not None else turn_ids(),
        state=st.sampled_from(END_STATES),
        reason=st.sampled_from(("", "end_turn", "interrupted", "max_tokens")),
    )


@cache
def user_message_drafts() -> st.SearchStrategy[UserMessage]:
    return st.builds(UserMessage, blocks=st.lists(texts(), min_size=1, max_size=3).map(tuple))


@cache
def context_injected_drafts() -> st.SearchStrategy[ContextInjected]:
    return st.builds(ContextInjected, source=st.sampled_from(("steering", "context")), text=texts())


@cache
def response_started_drafts(
    response_id: st.SearchStrategy[ResponseId] | None = None,
    provider: st.SearchStrategy[str] | None = None,
) -> st.SearchStrategy[ResponseStarted]:
    return st.builds(
        ResponseStarted,
        response_id=response_id if response_id is not None else response_ids(),
        provider=provider if provider is not None else providers(),
        model=st.sampled_from(("claude-sonnet-4-5", "gpt-5", "gemini-2.5-pro", "")),
        settings=request_settings(),
        origin=st.sampled_from(("provider", "request")),
        writer=st.none() | writers(),
    )


@cache
def response_ended_drafts(
    response_id: st.SearchStrategy[ResponseId] | None = None,
    state: st.SearchStrategy[EndState] | None = None,
) -> st.SearchStrategy[ResponseEnded]:
    return st.builds(
        ResponseEnded,
        response_id=response_id if response_id is not None else response_ids(),
        state=state if state is not None else st.sampled_from(END_STATES),
        finish_reason=st.sampled_from(FINISH_REASONS),
        stop_reason=st.none() | st.sampled_from(("end_turn", "tool_use", "pause_turn", "STOP")),
        usage=st.none() | usages(),
        error=st.none() | error_infos(),
        digest=st.sampled_from(("", "sha256:0f3a")),
    )


@st.composite
def assistant_text_drafts(
    draw: st.DrawFn, response_id: st.SearchStrategy[ResponseId] | None = None
) -> AssistantText:
    """Assistant text with citations whose ranges lie inside the text."""
    text = draw(texts(max_size=60))
    return AssistantText(
        response_id=draw(response_id if response_id is not None else response_ids()),
        text=text,
        attributions=draw(attributions(text)),
        attributions_complete=draw(st.booleans()),
        payload=draw(st.none() | provider_payloads()),
    )


@cache
def reasoning_drafts(
    response_id: st.SearchStrategy[ResponseId] | None = None,
) -> st.SearchStrategy[Reasoning]:
    return st.builds(
        Reasoning,
        response_id=response_id if response_id is not None else response_ids(),
        text=texts(),
        redacted=st.booleans(),
        payload=st.none() | provider_payloads(),
    )


@cache
def tool_call_requested_drafts(
    response_id: st.SearchStrategy[ResponseId] | None = None,
    call_id: st.SearchStrategy[CallId] | None = None,
) -> st.SearchStrategy[ToolCallRequested]:
    return st.builds(
        ToolCallRequested,
        response_id=response_id if response_id is not None else response_ids(),
        call_id=call_id if call_id is not None else call_ids(),
        name=st.sampled_from(("get_weather", "lookup", "run_sql")),
        arguments=json_objects(),
        payload=st.none() | provider_payloads(),
    )


@cache
def tool_call_responded_drafts(
    call_id: st.SearchStrategy[CallId] | None = None,
) -> st.SearchStrategy[ToolCallResponded]:
    return st.builds(
        ToolCallResponded,
        call_id=call_id if call_id is not None else call_ids(),
        content=texts(),
        is_error=st.booleans(),
        synthetic=st.booleans(),
        payload=st.none() | provider_payloads(),
    )


@cache
def hosted_activity_drafts(
    activity_id: st.SearchStrategy[ActivityId] | None = None,
    response_id: st.SearchStrategy[ResponseId | None] | None = None,
    state: st.SearchStrategy[Lifecycle] | None = None,
    name: st.SearchStrategy[str] | None = None,
) -> st.SearchStrategy[HostedActivity]:
    return st.builds(
        HostedActivity,
        activity_id=activity_id if activity_id is not None else activity_ids(),
        name=name if name is not None else st.sampled_from(ACTIVITY_NAMES),
        state=state if state is not None else st.sampled_from(LIFECYCLES),
        response_id=response_id if response_id is not None else response_ids(),
        input=st.one_of(
            st.builds(lambda q: {"query": q}, texts(max_size=20)),
            st.builds(lambda qs: {"queries": qs}, st.lists(texts(max_size=10), max_size=3)),
            json_objects(max_leaves=4),
        ),
        summary=st.sampled_from(("", "3 results", "error: max_uses_exceeded")),
        display=st.none() | displays(),
        payload=st.none() | provider_payloads(),
    )


@cache
def unknown_artifact_drafts(
    response_id: st.SearchStrategy[ResponseId | None] | None = None,
) -> st.SearchStrategy[UnknownArtifact]:
    return st.builds(
        UnknownArtifact,
        payload=provider_payloads(),
        response_id=response_id if response_id is not None else st.none() | response_ids(),
    )


@cache
def drafts() -> st.SearchStrategy[Event]:
    """A draft of any kind, with random ids: whether it may be recorded depends on where."""
    return st.one_of(
        started_drafts(),
        turn_started_drafts(),
        turn_ended_drafts(),
        user_message_drafts(),
        context_injected_drafts(),
        response_started_drafts(),
        response_ended_drafts(),
        assistant_text_drafts(),
        reasoning_drafts(),
        tool_call_requested_drafts(),
        tool_call_responded_drafts(),
        hosted_activity_drafts(),
        unknown_artifact_drafts(),
    )


# --- whole conversations --------------------------------------------------------------------


_KINDS: Final = ("text", "reasoning", "call", "hosted", "unknown")
_FIRST_STATES: Final[tuple[Lifecycle, ...]] = ("started", "completed")
_LATER_STATES: Final[tuple[Lifecycle | None, ...]] = (None, "completed", "failed")
_replace = msgspec.structs.replace


@st.composite
def _response_drafts(
    draw: st.DrawFn, tag: str, provider: str, *, max_items: int
) -> tuple[list[Event], list[CallId], list[ActivityId], bool]:
    """One response's events: (drafts, its client calls, its pending activities, ended)."""
    rid = ResponseId(f"msg_{tag}")
    out: list[Event] = [
        _replace(draw(response_started_drafts()), response_id=rid, provider=provider)
    ]
    calls: list[CallId] = []
    names: dict[ActivityId, str] = {}
    for k in range(draw(st.integers(0, max_items))):
        kind = draw(st.sampled_from(_KINDS))
        if kind == "text":
            out.append(_replace(draw(assistant_text_drafts()), response_id=rid))
        elif kind == "reasoning":
            out.append(_replace(draw(reasoning_drafts()), response_id=rid))
        elif kind == "call":
            call = CallId(f"toolu_{tag}_{k}")
            out.append(_replace(draw(tool_call_requested_drafts()), response_id=rid, call_id=call))
            calls.append(call)
        elif kind == "hosted":
            aid = ActivityId(f"srvtoolu_{tag}_{k}")
            first = draw(st.sampled_from(_FIRST_STATES))  # Google reports only finished work
            event = _replace(
                draw(hosted_activity_drafts()), activity_id=aid, response_id=rid, state=first
            )
            out.append(event)
            if first == "started":
                names[aid] = event.name
        else:
            artifact = draw(unknown_artifact_drafts())
            out.append(_replace(artifact, response_id=draw(st.sampled_from((None, rid)))))
    pending: list[ActivityId] = []
    for aid, name in names.items():  # each started activity finishes here, or stays pending
        later = draw(st.sampled_from(_LATER_STATES))
        if later is None:
            pending.append(aid)
        else:
            out.append(
                _replace(
                    draw(hosted_activity_drafts()),
                    activity_id=aid,
                    response_id=rid,
                    state=later,
                    name=name,
                )
            )
    ended = draw(st.integers(0, 9)) > 0
    if ended:
        out.append(_replace(draw(response_ended_drafts()), response_id=rid))
    return out, calls, pending, ended


@st.composite
def conversation_drafts(
    draw: st.DrawFn, *, max_turns: int = 3, max_responses: int = 2, max_items: int = 4
) -> list[Event]:
    """Drafts of one valid conversation, Started first; every prefix is valid too.

    Turns hold user messages or context, one or more responses and the tool results
    they asked for; activities go started → completed/failed, begin completed, stay
    pending, or are abandoned explicitly; the tail may be interrupted (an open
    response, unanswered calls), as a crashed writer leaves it.
    """
    out: list[Event] = [draw(started_drafts())]
    pending: dict[ActivityId, str] = {}
    for t in range(draw(st.integers(0, max_turns))):
        tid = TurnId(f"turn_{t}")
        out.append(_replace(draw(turn_started_drafts()), turn_id=tid))
        out.append(draw(_user_side_drafts()))
        for r in range(draw(st.integers(1, max_responses))):
            provider = draw(providers())
            events, calls, still, ended = draw(
                _response_drafts(f"{t}_{r}", provider, max_items=max_items)
            )
            out.extend(events)
            for event in events:
                if isinstance(event, HostedActivity) and event.activity_id in still:
                    pending[event.activity_id] = event.name
            if not ended:
                return out  # interrupted: the writer died mid-response
            for call in calls:
                if draw(st.integers(0, 5)) == 0:
                    return out  # interrupted between a call and its result
                out.append(_replace(draw(tool_call_responded_drafts()), call_id=call))
        for aid, name in list(pending.items()):
            if draw(st.booleans()):  # e.g. the provider was switched
                out.append(HostedActivity(activity_id=aid, name=name, state="abandoned"))
                del pending[aid]
        out.append(_replace(draw(turn_ended_drafts()), turn_id=tid))
    return out


@cache
def _user_side_drafts() -> st.SearchStrategy[UserMessage | ContextInjected]:
    return st.one_of(user_message_drafts(), context_injected_drafts())


@st.composite
def conversations(draw: st.DrawFn, /, **kwargs: int) -> Conversation:
    """An aggregate holding a valid conversation's events, all still pending."""
    conversation = Conversation(draw(conversation_ids()))
    conversation.record_all(draw(conversation_drafts(**kwargs)))
    return conversation
