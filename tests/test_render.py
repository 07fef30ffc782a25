"""The sanitizing renderer: nothing that can drive a terminal gets through; text does."""

from __future__ import annotations

import io
import json
import re
import unicodedata
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convstore.adapters.terminal.render import Renderer, one_line, sanitize, to_json
from convstore.adapters.terminal.transcript import transcript
from convstore.adapters.terminal.values import summary_line, to_data
from convstore.domain import (
    AssistantText,
    Attribution,
    CallId,
    ContextInjected,
    Conversation,
    ConversationSummary,
    Display,
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
    TextRange,
    ToolCallRequested,
    ToolCallResponded,
    ToolDeclaration,
    TurnEnded,
    TurnId,
    TurnStarted,
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.vocabulary import ActivityId

# --- an independent statement of what must never reach a terminal ----------------------------

KEPT_FORMAT = {"\u200c", "\u200d"}  # ZWNJ, ZWJ
FILLERS = {"\u115f", "\u1160", "\u17b4", "\u17b5", "\u3164", "\uffa0"}
EMOJI_TAG_SEQUENCE = re.compile("\U0001f3f4[\U000e0030-\U000e0039\U000e0061-\U000e007a]+\U000e007f")


def is_forbidden(char: str) -> bool:
    """A character the sanitizer must never let through."""
    code = ord(char)
    if char in "\n\t":
        return False
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return True
    if char in FILLERS or (0xE0000 <= code <= 0xE0FFF and not 0xE0100 <= code <= 0xE01EF):
        return True
    category = unicodedata.category(char)
    return category in {"Cf", "Cs", "Zl", "Zp"} and char not in KEPT_FORMAT


def forbidden_in(text: str) -> list[str]:
    """The forbidden characters in `text` (a well-formed emoji tag sequence is allowed)."""
    return [c for c in EMOJI_TAG_SEQUENCE.sub("", text) if is_forbidden(c)]


HOSTILE = [
    "\x1b",
    "\x1b[2J",
    "\x1b[31;1m",
    "\x1b[?1049h",
    "\x1b]0;pwned title\x07",
    "\x1b]8;;http://evil.example\x1b\\",
    "\x1b]52;c;ZXZpbA==\x07",
    "\x1bPq#0;2;0;0;0\x1b\\",
    "\x1b_apc\x1b\\",
    "\x1b^pm\x9c",
    "\x1bXsos\x1b\\",
    "\x1bc",
    "\x1b(0",
    "\x9b31m",
    "\x9d0;title\x9c",
    "\x90dcs\x9c",
    "\x07",
    "\x08\x08\x08",
    "\r",
    "\x7f",
    "\x85",
    "\x00",
    "\u202e",
    "\u202a",
    "\u2066",
    "\u2069",
    "\u200e",
    "\u200f",
    "\u061c",
    "\u200b",
    "\ufeff",
    "\u2028",
    "\U000e0041\U000e0042",
    "\ud800",
]

hostile_text = st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=20)), max_size=30).map(
    "".join
)

printable = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cc", "Cf", "Cs", "Zl", "Zp", "Cn"),
        blacklist_characters="".join(FILLERS),
    )
    | st.sampled_from(["\n", "\t", "\u200d", "\u200c"]),
    max_size=200,
)


# --- sanitize ---------------------------------------------------------------------------------


@given(hostile_text)
def test_nothing_forbidden_gets_through(text: str) -> None:
    assert forbidden_in(sanitize(text)) == []


@given(st.text())
def test_any_text_comes_out_inert_and_sanitizing_is_idempotent(text: str) -> None:
    once = sanitize(text)
    assert forbidden_in(once) == []
    assert sanitize(once) == once


@given(printable)
def test_printable_text_passes_unchanged(text: str) -> None:
    assert sanitize(text) == text


@pytest.mark.parametrize(
    "text",
    [
        "宇治抹茶とは\uff1f What “Uji matcha” really means",
        "Enjoy your trip — and your first bowl of koicha! 🍵",
        "family 👨\u200d👩\u200d👧 and a heart ❤\ufe0f, flags 🇯🇵 🏴\U000e0067\U000e0062"
        "\U000e0065\U000e006e\U000e0067\U000e007f",
        "שלום עולם and مرحبا بالعالم, नमस्ते, café, Zürich, 한국어",
        "tabs\tand\nnewlines\n",
        "葛\U000e0100 (an ideographic variation sequence)",
    ],
)
def test_real_text_passes_unchanged(text: str) -> None:
    assert sanitize(text) == text


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\b", "a␛link␛b"),
        ("\x1b]0;title\x07after", "␛after"),
        ("red \x1b[31;1malert\x1b[0m", "red ␛alert␛"),
        ("\x9b2J\x9d0;x\x9c", "␛␛"),
        ("\x1bPq#0;2\x1b\\sixel", "␛sixel"),
        ("\x1b_hidden\x1b\\ok", "␛ok"),
        ("\x1bc", "␛"),
        ("lone \x1b", "lone ␛"),
        ("bell\x07", "bell␇"),
        ("over\rwrite", "over␍write"),
        ("windows\r\nline", "windows\nline"),
        ("back\x08space", "back␈space"),
        ("del\x7f", "del␡"),
        ("c1\x85\x9f", "c1\ufffd\ufffd"),
        ("evil\u202eexe.txt", "evil\ufffdexe.txt"),
        ("\u2066isolate\u2069", "\ufffdisolate\ufffd"),
        ("zero\u200bwidth", "zero\ufffdwidth"),
        ("smuggled \U000e0069\U000e0067\U000e006e", "smuggled \ufffd\ufffd\ufffd"),
        ("unterminated \x1b]0;title", "unterminated ␛0;title"),
    ],
)
def test_each_control_becomes_one_placeholder(text: str, shown: str) -> None:
    assert sanitize(text) == shown


def test_every_format_character_is_caught() -> None:
    missed = [
        f"U+{code:04X}"
        for code in range(0x110000)
        if unicodedata.category(chr(code)) in {"Cf", "Cc", "Zl", "Zp", "Cs"}
        and chr(code) not in KEPT_FORMAT | {"\n", "\t"}
        and sanitize(chr(code)) == chr(code)
    ]
    assert missed == []


def test_one_line_flattens_newlines_and_tabs() -> None:
    assert one_line("a\nb\tc\x1b[2J") == "a b c␛"


# --- JSON -------------------------------------------------------------------------------------

json_data = st.recursive(
    st.none() | st.booleans() | st.integers() | hostile_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile_text, inner, max_size=4),
    max_leaves=12,
)


@given(json_data)
def test_json_is_inert_and_lossless(data: Any) -> None:
    encoded = to_json(data)
    assert forbidden_in(encoded) == []
    assert sanitize(encoded) == encoded
    assert json.loads(encoded) == data


def test_json_keeps_readable_unicode() -> None:
    assert to_json({"t": "宇治 🍵"}) == '{"t":"宇治 🍵"}'
    assert to_json(["\x1b\x9b\u202e\U000e0041"]) == r'["\u001b\u009b\u202e\udb40\udc41"]'


# --- the Renderer -----------------------------------------------------------------------------


def test_renderer_sanitizes_everything_it_writes() -> None:
    stream = io.StringIO()
    out = Renderer(stream)
    out.line("title \x1b]0;x\x07")
    out.lines(["a\u202eb", "c"])
    out.write("no newline\x07")
    out.json({"k": "\x1b[2J"})
    assert stream.getvalue() == 'title ␛\na\ufffdb\nc\nno newline␇{"k":"\\u001b[2J"}\n'


def test_renderer_streams_a_json_array() -> None:
    stream = io.StringIO()
    Renderer(stream).json_array(iter([{"a": 1}, {"b": "\x1b"}]))
    assert json.loads(stream.getvalue()) == [{"a": 1}, {"b": "\x1b"}]
    empty = io.StringIO()
    Renderer(empty).json_array([])
    assert json.loads(empty.getvalue()) == []


def test_renderer_escapes_what_the_stream_cannot_encode() -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    Renderer(stream).line("宇治 \x1b[2J")
    stream.flush()
    assert raw.getvalue() == b"\\u5b87\\u6cbb \\u241b\n"


# --- what `show` and `list` print -------------------------------------------------------------

SECRET = "SECRET-OPAQUE-VALUE"


def payload(format: str = "content_block", version: str = "") -> ProviderPayload:
    return ProviderPayload.of(
        "anthropic", format, json.dumps({"signature": SECRET}).encode(), version=version
    )


def recorded(*drafts: Event, title: str = "A title") -> list[Event]:
    """Drafts stamped by a real aggregate, as storage would return them."""
    conversation = Conversation.start(title, ["x"])
    conversation.record_all(drafts)
    return conversation.collect_events()


R1 = ResponseId("msg_1")
WEB = Source(kind="web", url="https://example.org/a", title="Page A")


def sample_events() -> list[Event]:
    return recorded(
        TurnStarted(turn_id=TurnId("t1")),
        UserMessage(blocks=("What is up?", "second block")),
        ContextInjected(source="steering", text="be brief"),
        ResponseStarted(
            response_id=R1,
            provider="anthropic",
            model="claude-x",
            settings=RequestSettings(
                system="You are terse.",
                tools=(ToolDeclaration(name="web_search", hosted=True), ToolDeclaration(name="f")),
                native=payload("request"),
            ),
        ),
        Reasoning(response_id=R1, text="thinking\nmore", payload=payload()),
        Reasoning(response_id=R1, redacted=True, payload=payload()),
        HostedActivity(
            activity_id=ActivityId("a1"),
            name="web_search",
            state="started",
            response_id=R1,
            input={"query": "what is up"},
            payload=payload(version="web_search_20250305"),
        ),
        HostedActivity(
            activity_id=ActivityId("a1"),
            name="web_search",
            state="completed",
            response_id=R1,
            summary="3 results",
            display=Display(kind="search_suggestion", content="<b>SHOWN-NEVER</b>"),
            payload=payload(),
        ),
        AssistantText(
            response_id=R1,
            text="Everything is up",
            attributions=(Attribution(source=WEB, excerpt="up, up", replay=payload("citation")),),
        ),
        AssistantText(response_id=R1, text=", mostly."),
        AssistantText(
            response_id=R1,
            text=" See the doc.",
            attributions=(
                Attribution(
                    source=Source(
                        kind="document", title="Doc", location=Location(unit="page", start=1, end=2)
                    ),
                    range=TextRange(5, 8),
                ),
                Attribution(source=WEB),
            ),
            attributions_complete=False,
        ),
        ToolCallRequested(response_id=R1, call_id=CallId("c1"), name="f", arguments={"x": 1}),
        UnknownArtifact(response_id=R1, payload=payload("quantum_widget")),
        ResponseEnded(
            response_id=R1, state="completed", finish_reason="tool_use", stop_reason="tool_use"
        ),
        ToolCallResponded(call_id=CallId("c1"), content="42", is_error=True),
        TurnEnded(turn_id=TurnId("t1")),
    )


def test_transcript_reads_like_a_conversation() -> None:
    events = sample_events()
    lines = [
        re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "<time>", line) for line in transcript(events)
    ]
    assert lines[0] == f"conversation {events[0].originator_id} — A title"
    body = lines[2:]
    assert body == [
        "",
        "turn t1 (user) · <time>",
        "  user: What is up?",
        "",
        "    second block",
        "  context (steering): be brief",
        "  response msg_1 · anthropic claude-x · <time> · tools: web_search (hosted), f",
        "    system: You are terse.",
        "    reasoning: thinking",
        "      more",
        "    reasoning: [redacted]",
        '    ⚒ web search: "what is up" → 3 results',
        "      [search suggestion: no links in it; the web viewer shows it]",
        "    assistant: Everything is up[1], mostly. See the[2] doc.[1]",
        "      [1] Page A — https://example.org/a",
        "          “up, up”",
        "      [2] document: Doc (pages 1-2)",
        "      (citations may be incomplete: the response broke off)",
        '    tool call f (c1): {"x":1}',
        "      tool error: 42",
        f"    [unknown anthropic artifact: quantum_widget, {len(payload().raw)} bytes]",
        "    response ended: completed · tool_use",
        "turn t1 ended: completed · 1 search · tool_use",
    ]


def test_no_payload_value_or_display_content_is_ever_shown() -> None:
    events = sample_events()
    shown = "\n".join(transcript(events)) + to_json([to_data(e) for e in events])
    assert SECRET not in shown
    assert "SHOWN-NEVER" not in "\n".join(transcript(events))


def test_event_data_keeps_payload_metadata_only() -> None:
    event = sample_events()[8]  # the completed web search
    data = to_data(event)
    assert data["type"] == "HostedActivity"
    assert data["payload"] == {
        "provider": "anthropic",
        "format": "content_block",
        "version": "",
        "size": len(payload().raw),
    }
    assert data["originator_id"] == str(event.originator_id)
    assert json.loads(to_json(data)) == data


def test_summary_line_is_one_line_whatever_the_title() -> None:
    events = recorded(title="two\nlines \x1b]0;t\x07")
    summary = ConversationSummary(
        id=events[0].originator_id,  # type: ignore[arg-type]
        title="two\nlines \x1b]0;t\x07",
        labels=(),
        created_on=events[0].timestamp,
        events=12,
    )
    line = summary_line(summary)
    assert "\n" not in line
    assert line.endswith("  two lines ␛")
    assert forbidden_in(line) == []
