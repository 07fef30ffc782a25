"""The Anthropic decoder against recorded traffic, the project's examples, cuts and junk.

Expectations come from the captures themselves, read here with plain `json` (a reference
reading independent of the decoder): hosted calls and results, citations, tool calls,
signatures and stop reasons.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore.adapters.anthropic.context import RequestContext
from convstore.adapters.anthropic.decode import decode_message, decode_stream, detect_and_decode
from convstore.domain.conversation import Conversation
from convstore.domain.errors import DecodeError
from convstore.domain.events import (
    AssistantText,
    Event,
    HostedActivity,
    Reasoning,
    ResponseEnded,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    TurnStarted,
    UnknownArtifact,
)
from convstore.domain.vocabulary import CallId, TurnId

WIRE = Path(__file__).resolve().parents[2] / "shared" / "wire" / "anthropic"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "anthropic"
CUT_ALL_OFFSETS = 16 * 1024


@dataclass(frozen=True)
class Exchange:
    """One recorded request/response pair."""

    folder: Path
    n: str

    @property
    def name(self) -> str:
        return f"{self.folder.parent.name}/{self.folder.name}/{self.n}"

    @property
    def response(self) -> Path:
        [path] = self.folder.glob(f"{self.n}.response.*")
        return path

    @property
    def streamed(self) -> bool:
        return self.response.suffix == ".sse"

    @property
    def status(self) -> int:
        meta = self.folder / f"{self.n}.meta.json"
        return int(json.loads(meta.read_text()).get("status", 200)) if meta.exists() else 200

    def context(self) -> RequestContext | None:
        request = self.folder / f"{self.n}.request.json"
        return RequestContext.from_body(request.read_bytes()) if request.exists() else None

    def decode(self, body: bytes | None = None) -> list[Event]:
        data = self.response.read_bytes() if body is None else body
        return list(detect_and_decode(data, request=self.context(), status=self.status))


def exchanges(root: Path) -> list[Exchange]:
    if not root.is_dir():
        return []
    found = [
        Exchange(folder, path.name.split(".")[0])
        for folder in sorted(root.iterdir())
        for path in sorted(folder.glob("*.response.*"))
    ]
    return found


def params(root: Path, reason: str) -> list[Any]:
    found = exchanges(root)
    if not found:
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason))]
    return [pytest.param(x, id=x.name) for x in found]


WIRE_CASES = params(WIRE, f"no recorded traffic at {WIRE}")
EXAMPLE_CASES = params(EXAMPLES, f"no example captures at {EXAMPLES}")
ALL_CASES = WIRE_CASES + EXAMPLE_CASES
STREAM_CASES = [p for p in ALL_CASES if p.values[0] is None or p.values[0].streamed]
JSON_CASES = [p for p in ALL_CASES if p.values[0] is None or not p.values[0].streamed]


# --- a reference reading of a capture, with plain json ---------------------------------------


@dataclass
class Facts:
    """What a capture contains, read without the decoder."""

    blocks: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    error: dict[str, Any] | None = None
    unknown_events: list[dict[str, Any]] = field(default_factory=list)

    def of_type(self, *kinds: str) -> list[dict[str, Any]]:
        return [b for b in self.blocks if b.get("type") in kinds]


KNOWN_EVENTS = {
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
}


def read_facts(path: Path) -> Facts:
    body = path.read_bytes()
    facts = Facts()
    if path.suffix == ".json":
        message = json.loads(body)
        if message.get("type") == "error":
            facts.error = message["error"]
        else:
            facts.blocks = message["content"]
            facts.stop_reason = message.get("stop_reason")
        return facts
    open_blocks: dict[int, dict[str, Any]] = {}
    buffers: dict[int, str] = {}
    for line in body.decode().splitlines():
        if not line.startswith("data:"):
            continue
        event = json.loads(line[5:])
        kind = event["type"]
        if kind == "content_block_start":
            open_blocks[event["index"]] = dict(event["content_block"])
        elif kind == "content_block_delta":
            block, delta = open_blocks[event["index"]], event["delta"]
            for name in ("text", "thinking", "signature"):
                if delta["type"] == f"{name}_delta":
                    block[name] = block.get(name, "") + delta[name]
            if delta["type"] == "citations_delta":
                block.setdefault("citations", []).append(delta["citation"])
            if delta["type"] == "input_json_delta":
                buffers[event["index"]] = buffers.get(event["index"], "") + delta["partial_json"]
        elif kind == "content_block_stop":
            block = open_blocks.pop(event["index"])
            if buffers.get(event["index"], "").strip():
                block["input"] = json.loads(buffers.pop(event["index"]))
            facts.blocks.append(block)
        elif kind == "message_delta":
            facts.stop_reason = event["delta"].get("stop_reason")
        elif kind == "error":
            facts.error = event["error"]
        elif kind not in KNOWN_EVENTS:
            facts.unknown_events.append(event)
    facts.blocks.extend(open_blocks.values())  # cut by an error event
    return facts


def payload_json(event: Any) -> Any:
    return json.loads(event.payload.raw)


def kinds(events: Iterable[Event]) -> list[str]:
    return [type(e).__name__ for e in events]


def record(*responses: list[Event]) -> Conversation:
    """Record responses in one conversation, answering client calls between them."""
    conversation = Conversation.start("test")
    conversation.record(TurnStarted(turn_id=TurnId("turn-1")))
    for drafts in responses:
        conversation.record_all(drafts)
        for call in conversation.open_calls():
            conversation.record(ToolCallResponded(call_id=CallId(call), content="ok"))
    return conversation


# --- every capture decodes and matches what it contains --------------------------------------


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_decodes_to_one_recordable_response(exchange: Exchange) -> None:
    facts = read_facts(exchange.response)
    events = exchange.decode()
    assert isinstance(events[0], ResponseStarted) and events[0].provider == "anthropic"
    end = events[-1]
    assert isinstance(end, ResponseEnded)
    assert all(getattr(e, "response_id", end.response_id) == end.response_id for e in events)
    if facts.error is not None:
        assert end.state == "failed" and end.error is not None
        assert (end.error.type, end.error.message) == (
            facts.error["type"],
            facts.error["message"],
        )
    else:
        assert end.state == "completed"
        assert end.stop_reason == facts.stop_reason
    record(events)  # the drafts satisfy the aggregate's invariants


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_hosted_activities(exchange: Exchange) -> None:
    """One `started` per call block, one terminal per result block, payloads unchanged."""
    facts = read_facts(exchange.response)
    calls = facts.of_type("server_tool_use", "mcp_tool_use")
    results = [b for b in facts.blocks if str(b.get("type")).endswith("_tool_result")]
    activities = [e for e in exchange.decode() if isinstance(e, HostedActivity)]
    started = [a for a in activities if a.state == "started"]
    ended = [a for a in activities if a.state != "started"]
    assert [a.activity_id for a in started] == [b["id"] for b in calls]
    assert [a.activity_id for a in ended] == [b["tool_use_id"] for b in results]
    for activity, block in zip(ended, results, strict=True):
        content = block["content"]
        failed = block.get("is_error") is True or (
            isinstance(content, dict) and content["type"].endswith("_error")
        )
        assert activity.state == ("failed" if failed else "completed")
        assert payload_json(activity) == block  # encrypted_content and all
    for activity, block in zip(started, calls, strict=True):
        assert payload_json(activity) == block


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_text_and_citations(exchange: Exchange) -> None:
    """Every text block is one event; every citation is kept, its replay value unchanged."""
    facts = read_facts(exchange.response)
    cited = [c for b in facts.of_type("text") for c in b.get("citations") or ()]
    texts = [e for e in exchange.decode() if isinstance(e, AssistantText)]
    assert [t.text for t in texts] == [b["text"] for b in facts.of_type("text")]
    attributions = [a for t in texts for a in t.attributions]
    assert len(attributions) == len(cited)
    for attribution, citation in zip(attributions, cited, strict=True):
        assert attribution.replay is not None
        assert json.loads(attribution.replay.raw) == citation
        assert attribution.excerpt == citation.get("cited_text")
        if citation["type"] == "web_search_result_location":
            assert attribution.source.kind == "web"
            assert attribution.source.url == citation["url"]


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_tool_calls_and_reasoning(exchange: Exchange) -> None:
    """Client calls as requested; signatures and redacted data unchanged, bound to the model."""
    facts = read_facts(exchange.response)
    events = exchange.decode()
    requested = [e for e in events if isinstance(e, ToolCallRequested)]
    if facts.error is None:
        assert [(r.call_id, r.name, r.arguments) for r in requested] == [
            (b["id"], b["name"], b.get("input", {})) for b in facts.of_type("tool_use")
        ]
    reasoning = [e for e in events if isinstance(e, Reasoning)]
    thinking = facts.of_type("thinking", "redacted_thinking")
    assert len(reasoning) == len(thinking)
    for event, block in zip(reasoning, thinking, strict=True):
        assert event.payload is not None
        assert payload_json(event) == block
        assert event.payload.binding == {"model": events[0].model}  # type: ignore[attr-defined]
        assert event.redacted == (block["type"] == "redacted_thinking")


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_unknown_blocks_and_events_are_kept(exchange: Exchange) -> None:
    """Scenario 11 (backend-independent: decoding, before anything reaches a store; stored on both
    backends: test_reliability_ingest.py)."""
    facts = read_facts(exchange.response)
    known = {"text", "thinking", "redacted_thinking", "tool_use", "server_tool_use", "mcp_tool_use"}
    odd = [b for b in facts.blocks if b["type"] not in known and not b["type"].endswith("_result")]
    kept = [e for e in exchange.decode() if isinstance(e, UnknownArtifact)]
    by_format = {
        fmt: [payload_json(e) for e in kept if e.payload.format == fmt]
        for fmt in ("content_block", "stream_event")
    }
    assert by_format == {"content_block": odd, "stream_event": facts.unknown_events}


@pytest.mark.parametrize("exchange", JSON_CASES)
def test_non_streamed_payloads_are_the_bytes_received(exchange: Exchange) -> None:
    body = exchange.response.read_bytes()
    for event in exchange.decode():
        payload = getattr(event, "payload", None)
        if payload is not None and payload.format == "content_block":
            assert payload.raw in body


@pytest.mark.parametrize("exchange", STREAM_CASES)
def test_chunking_does_not_matter(exchange: Exchange) -> None:
    body = exchange.response.read_bytes()
    whole = exchange.decode()
    for size in (1, 7, 64):
        chunks = [body[i : i + size] for i in range(0, len(body), size)]
        assert list(detect_and_decode(chunks, request=exchange.context())) == whole


def test_settings_come_from_the_request() -> None:
    body = json.dumps(
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": [{"type": "text", "text": "Be brief."}],
            "tool_choice": {"type": "tool", "name": "lookup"},
            "tools": [
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
                {"type": "bash_20250124", "name": "bash"},
                {"name": "lookup", "description": "Find", "input_schema": {"type": "object"}},
            ],
            "messages": [{"role": "user", "content": "secret conversation"}],
        }
    ).encode()
    context = RequestContext.from_body(body)
    settings = context.settings
    assert settings.system == "Be brief." and settings.max_tokens == 1024
    assert settings.tool_choice == "lookup"
    assert [(t.name, t.hosted, t.native_type) for t in settings.tools] == [
        ("web_search", True, "web_search_20250305"),
        ("bash", False, "bash_20250124"),
        ("lookup", False, ""),
    ]
    assert settings.native is not None
    native = json.loads(settings.native.raw)
    assert "messages" not in native and native["tools"][0]["max_uses"] == 2
    assert context.version_of("web_search") == "web_search_20250305"
    with pytest.raises(DecodeError):
        RequestContext.from_body(b"[1, 2]")


# --- the project's examples: specific expectations -------------------------------------------


def example(name: str, n: str) -> Exchange:
    exchange = Exchange(EXAMPLES / name, n)
    if not (EXAMPLES / name).is_dir():
        pytest.skip(f"no example capture {name}")
    return exchange


def comparable(events: list[Event]) -> list[Any]:
    """What streamed and non-streamed forms must share (payload values, not bytes)."""
    out: list[Any] = []
    for event in events:
        fields = msgspec.structs.asdict(event)
        for name in ("payload", "settings"):
            fields.pop(name, None)
        fields["attributions"] = [
            (a.source, a.excerpt, json.loads(a.replay.raw) if a.replay else None)
            for a in fields.get("attributions", ())
        ]
        payload = getattr(event, "payload", None)
        if payload is not None:
            value = payload_json(event)
            fields["payload"] = (payload.format, payload.version, payload.binding, value)
        out.append((type(event).__name__, fields))
    return out


def test_streamed_and_non_streamed_forms_give_equivalent_drafts() -> None:
    """Scenario 12 (backend-independent: decoding, before anything reaches a store): the streamed
    form (with pings) equals the non-streamed one."""
    streamed = example("web_search_citations", "1").decode()
    whole = example("web_search_citations", "2").decode()
    assert comparable(streamed) == comparable(whole)
    assert kinds(streamed).count("AssistantText") >= 4


def test_a_deferred_search_completes_in_the_next_response() -> None:
    first = example("mixed_batch", "1").decode()
    second = example("mixed_batch", "2").decode()
    [pending] = [e for e in first if isinstance(e, HostedActivity)]
    assert pending.state == "started" and first[-1].state == "completed"  # type: ignore[attr-defined]
    assert any(isinstance(e, ToolCallRequested) for e in first)
    [done] = [e for e in second if isinstance(e, HostedActivity)]
    assert (done.activity_id, done.state) == (pending.activity_id, "completed")
    assert done.name == pending.name == "web_search"
    conversation = record(first, second)
    assert conversation.pending_activities() == {}


def test_pause_turn_keeps_the_response_completed() -> None:
    events = example("pause_turn", "1").decode()
    end = events[-1]
    assert isinstance(end, ResponseEnded)
    assert (end.state, end.finish_reason, end.stop_reason) == ("completed", "pause", "pause_turn")
    record(events, example("pause_turn", "2").decode())


def test_a_thinking_round_trip_records() -> None:
    first = example("thinking_tool_roundtrip", "1").decode()
    second = example("thinking_tool_roundtrip", "2").decode()
    request = json.loads((EXAMPLES / "thinking_tool_roundtrip" / "2.request.json").read_text())
    [reasoning] = [e for e in first if isinstance(e, Reasoning)]
    assert payload_json(reasoning)["signature"] == request["messages"][1]["content"][0]["signature"]
    record(first, second)


def test_an_error_event_mid_stream_fails_the_response_and_keeps_the_text() -> None:
    """Scenario 14 (backend-independent: decoding, before anything reaches a store; stored on both
    backends: test_reliability_ingest.py)."""
    events = example("errors", "1").decode()
    assert kinds(events) == ["ResponseStarted", "AssistantText", "ResponseEnded"]
    text, end = events[1], events[2]
    assert isinstance(text, AssistantText) and not text.attributions_complete
    assert text.text.startswith("Vague après vague")
    assert isinstance(end, ResponseEnded)
    assert (end.state, end.finish_reason) == ("failed", "error")
    assert end.error is not None and end.error.type == "overloaded_error"
    record(events)


def test_an_http_error_body_is_a_failed_response() -> None:
    events = example("errors", "2").decode()
    assert kinds(events) == ["ResponseStarted", "ResponseEnded"]
    end = events[1]
    assert isinstance(end, ResponseEnded) and end.state == "failed"
    assert end.error is not None and end.error.type == "invalid_request_error"
    assert end.error.status == 400
    assert end.response_id == "req_01wYcMknqgMXifHmAQGPF3Ue"
    assert events == example("errors", "2").decode()  # the same id each time
    record(events)


def test_hosted_failures_and_unknowns_are_kept() -> None:
    events = example("errors", "3").decode()
    activities = {(e.name, e.state): e for e in events if isinstance(e, HostedActivity)}
    assert activities[("web_fetch", "failed")].summary == "url_not_accessible"
    assert activities[("web_fetch", "started")].payload.version == "web_fetch_20250910"  # type: ignore[union-attr]
    bash = activities[("bash_code_execution", "completed")]
    assert bash.summary == "exit 0"
    assert bash.payload is not None and bash.payload.version == "code_execution_20250825"
    assert activities[("bash_code_execution", "started")].input == {
        "command": "echo $((1234 + 5678 + 91011)); echo 'note: computed locally' >&2"
    }
    unknown = [e for e in events if isinstance(e, UnknownArtifact)]
    assert [(e.payload.format, payload_json(e).get("type")) for e in unknown] == [
        ("content_block", "quantum_widget"),
        ("stream_event", "future_event"),
        ("message_fields", None),
    ]
    assert payload_json(unknown[2])["container"]["id"].startswith("container_")


# --- cuts at every byte ----------------------------------------------------------------------


def is_partial(event: Event) -> bool:
    """One of the forms the partial-commit table gives a block cut open."""
    if isinstance(event, AssistantText):
        return not event.attributions_complete
    if isinstance(event, Reasoning):
        return event.payload is None or event.redacted
    if isinstance(event, UnknownArtifact):
        return event.payload.format in ("partial", "message_fields")
    if isinstance(event, HostedActivity):
        return (
            event.state == "started"
            and event.payload is not None
            and (event.payload.format == "partial")
        )
    return False


def check_cut(exchange: Exchange, offset: int, whole: list[Event]) -> None:
    """Decoding the first `offset` bytes follows the partial-commit table."""
    full = exchange.response.read_bytes()
    body = full[:offset]
    opened = full.index(b"\n", full.index(b'"message_start"'))  # its data line's end
    try:
        events = list(decode_stream([body], request=exchange.context()))
    except DecodeError:
        assert offset < opened  # only a stream cut before message_start is refused
        return
    assert isinstance(events[0], ResponseStarted)
    end = events[-1]
    assert isinstance(end, ResponseEnded)
    if events == whole:  # the final event arrived whole
        return
    assert end.state == "abandoned"
    common = 0
    while common < len(events) - 1 and events[common] == whole[common]:
        common += 1
    for event in events[common:-1]:
        assert is_partial(event), event
    for event in events:
        if isinstance(event, ToolCallRequested):
            assert event in whole  # never a cut call
        if isinstance(event, AssistantText) and not event.attributions_complete:
            assert any(
                isinstance(w, AssistantText) and w.text.startswith(event.text) for w in whole
            )
    record(events)


@pytest.mark.parametrize("exchange", STREAM_CASES)
def test_a_cut_at_every_byte_follows_the_partial_commit_table(exchange: Exchange) -> None:
    """Scenario 13 (backend-independent: decoding, before anything reaches a store): a cut at every
    byte follows DESIGN.md's partial-commit table."""
    size = exchange.response.stat().st_size
    if size > CUT_ALL_OFFSETS:
        pytest.skip("large: sampled by the hypothesis test")
    whole = exchange.decode()
    for offset in range(size + 1):
        check_cut(exchange, offset, whole)


@pytest.mark.parametrize("exchange", STREAM_CASES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_cut_anywhere_follows_the_partial_commit_table(exchange: Exchange, data: Any) -> None:
    """Scenario 13 (backend-independent: decoding, before anything reaches a store): cuts sampled in
    the larger captures."""
    size = exchange.response.stat().st_size
    offset = data.draw(st.integers(0, size))
    check_cut(exchange, offset, exchange.decode())


@pytest.mark.parametrize("exchange", JSON_CASES)
def test_a_cut_json_body_is_a_decode_error(exchange: Exchange) -> None:
    body = exchange.response.read_bytes()
    for offset in range(0, len(body) - 1, max(1, len(body) // 500)):
        with pytest.raises(DecodeError):
            decode_message(body[:offset])


# --- synthetic streams: the partial-commit rules one by one ----------------------------------


def sse(*events: dict[str, Any] | str) -> bytes:
    out = []
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event)
        out.append(f"data: {data}\n\n")
    return "".join(out).encode()


START = {
    "type": "message_start",
    "message": {"id": "msg_1", "type": "message", "model": "claude-x", "content": [], "usage": {}},
}


def block(index: int, content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": content}


def delta(index: int, **fields: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": fields}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def test_open_blocks_at_a_cut() -> None:
    """Scenario 13 (backend-independent: decoding, before anything reaches a store): open blocks at
    a cut; partial tool input is never a finished call."""
    body = sse(
        START,
        block(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, type="thinking_delta", thinking="Hmm"),
        delta(0, type="signature_delta", signature="EuYBpartial"),
        block(1, {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}}),
        delta(1, type="input_json_delta", partial_json='{"query": "par'),
        block(2, {"type": "tool_use", "id": "tu_1", "name": "f", "input": {}}),
        delta(2, type="input_json_delta", partial_json='{"a": 1}'),
        block(3, {"type": "text", "text": "", "citations": []}),
        delta(3, type="text_delta", text="Cited"),
        delta(3, type="citations_delta", citation={"type": "char_location", "cited_text": "x"}),
    )
    events = list(decode_stream([body]))
    assert kinds(events) == [
        "ResponseStarted",
        "Reasoning",
        "HostedActivity",
        "UnknownArtifact",
        "AssistantText",
        "ResponseEnded",
    ]
    reasoning, activity, call, text, end = events[1:]
    assert isinstance(reasoning, Reasoning) and reasoning.payload is None
    assert reasoning.text == "Hmm"  # unsigned: the partial signature is not kept
    assert isinstance(activity, HostedActivity) and activity.state == "started"
    assert activity.payload is not None and activity.payload.format == "partial"
    assert payload_json(activity)["partial_json"] == '{"query": "par'
    assert isinstance(call, UnknownArtifact) and call.payload.format == "partial"
    assert isinstance(text, AssistantText) and not text.attributions_complete
    assert len(text.attributions) == 1
    assert isinstance(end, ResponseEnded) and end.state == "abandoned"
    assert end.error is not None and end.error.type == "incomplete_stream"
    record(events)


def test_malformed_json_ends_the_stream_there() -> None:
    body = sse(
        START,
        block(0, {"type": "text", "text": ""}),
        delta(0, type="text_delta", text="kept"),
        stop(0),
        '{"type": "content_block_start", "index": 1, "content_block": {"type": "te',
        block(2, {"type": "text", "text": "never read"}),
        stop(2),
        {"type": "message_stop"},
    )
    events = list(decode_stream([body]))
    assert kinds(events) == ["ResponseStarted", "AssistantText", "ResponseEnded"]
    assert events[1].text == "kept"  # type: ignore[attr-defined]
    end = events[-1]
    assert isinstance(end, ResponseEnded) and end.state == "abandoned"
    assert end.error is not None and end.error.type == "malformed_stream"


def test_unknown_deltas_and_events_are_kept_as_stream_events() -> None:
    body = sse(
        {"type": "prelude", "n": 1},
        START,
        block(0, {"type": "text", "text": ""}),
        delta(0, type="hologram_delta", hologram=[1]),
        delta(0, type="text_delta"),  # malformed: no text
        delta(5, type="text_delta", text="no such block"),
        stop(0),
        {"type": "message_stop"},
    )
    events = list(decode_stream([body]))
    kept = [e for e in events if isinstance(e, UnknownArtifact)]
    assert [payload_json(e).get("type") for e in kept] == ["prelude"] + ["content_block_delta"] * 3
    assert all(e.payload.format == "stream_event" for e in kept)
    record(events)


def test_citation_kinds() -> None:
    citations = [
        {"type": "char_location", "cited_text": "a", "document_index": 0,
         "document_title": "Doc", "start_char_index": 3, "end_char_index": 9},
        {"type": "page_location", "cited_text": "b", "document_index": 1,
         "document_title": None, "start_page_number": 2, "end_page_number": 3},
        {"type": "content_block_location", "cited_text": "c", "document_index": 2,
         "start_block_index": 0, "end_block_index": 1},
        {"type": "search_result_location", "cited_text": "d", "source": "https://example.com/r",
         "title": "R", "search_result_index": 0, "start_block_index": 1, "end_block_index": 2},
        {"type": "hologram_location", "cited_text": "e", "url": "https://example.org"},
    ]  # fmt: skip
    message = {"id": "msg_2", "type": "message", "model": "m", "stop_reason": "end_turn",
               "content": [{"type": "text", "text": "t", "citations": citations}]}  # fmt: skip
    [_, text, _] = decode_message(json.dumps(message).encode())
    assert isinstance(text, AssistantText)
    sources = [a.source for a in text.attributions]
    assert [(s.kind, s.title) for s in sources] == [
        ("document", "Doc"),
        ("document", None),
        ("document", None),
        ("search_result", "R"),
        ("document", None),
    ]
    locations = [(s.location.unit, s.location.start, s.location.end, s.location.document_index)
                 for s in sources[:4] if s.location]  # fmt: skip
    expected = [("char", 3, 9, 0), ("page", 2, 3, 1), ("block", 0, 1, 2), ("block", 1, 2, 0)]
    assert locations == expected
    assert sources[3].url == "https://example.com/r"
    assert [a.excerpt for a in text.attributions] == list("abcde")
    assert all(a.range is None for a in text.attributions)


def test_results_without_their_call_and_mcp() -> None:
    content = [
        {"type": "web_search_tool_result", "tool_use_id": "srv_9",
         "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}},
        {"type": "mcp_tool_use", "id": "mcp_1", "name": "echo", "server_name": "tools",
         "input": {"x": 1}},
        {"type": "mcp_tool_result", "tool_use_id": "mcp_1", "is_error": True,
         "content": [{"type": "text", "text": "boom"}]},
        {"type": "web_search_tool_result", "tool_use_id": "srv_9", "content": []},
        {"type": "tool_use", "id": "tu", "name": "f", "input": "not an object"},
    ]  # fmt: skip
    message = {"id": "msg_3", "type": "message", "content": content}
    events = decode_message(json.dumps(message).encode())
    assert [(e.name, e.state, e.summary) for e in events if isinstance(e, HostedActivity)] == [
        ("web_search", "failed", "max_uses_exceeded"),
        ("mcp:tools/echo", "started", ""),
        ("mcp:tools/echo", "failed", "error"),
    ]
    # A second result for the same search, and a malformed call: kept, not dropped.
    assert [payload_json(e)["type"] for e in events if isinstance(e, UnknownArtifact)] == [
        "web_search_tool_result",
        "tool_use",
    ]
    record(events)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   ",
        b"hello",
        b"[1, 2]",
        b'{"type": "ping"}',
        b'{"type": "message"}',
        sse({"type": "ping"}),
        sse({"type": "content_block_stop", "index": 0}),
        b'data: {"type": "message_st',
    ],
)
def test_input_without_a_response_is_a_decode_error(body: bytes) -> None:
    with pytest.raises(DecodeError):
        list(detect_and_decode(body))


def test_an_unreadable_error_body_with_an_error_status_is_still_recorded() -> None:
    events = list(detect_and_decode(b"<html>502 Bad Gateway</html>", status=502))
    end = events[-1]
    assert isinstance(end, ResponseEnded) and end.state == "failed"
    assert end.error is not None and end.error.status == 502


def test_an_error_event_before_message_start_is_a_failed_response() -> None:
    body = sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    events = list(decode_stream([body]))
    assert kinds(events) == ["ResponseStarted", "ResponseEnded"]
    record(events)


# --- junk: only DecodeError, or drafts the aggregate accepts ---------------------------------


def decode_or_refuse(chunks: Iterable[bytes]) -> list[Event] | None:
    try:
        return list(detect_and_decode(list(chunks)))
    except DecodeError:
        return None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_raise_anything_but_decode_error(body: bytes) -> None:
    events = decode_or_refuse([body])
    if events is not None:
        record(events)


def mutations(body: bytes) -> st.SearchStrategy[bytes]:
    def mutate(edits: list[tuple[int, int]]) -> bytes:
        data = bytearray(body)
        for position, value in edits:
            data[position % len(data)] = value
        return bytes(data)

    return st.lists(st.tuples(st.integers(0, len(body)), st.integers(0, 255)), max_size=6).map(
        mutate
    )


def stream_bodies() -> Iterator[bytes]:
    for exchange in exchanges(EXAMPLES) + exchanges(WIRE):
        if exchange.streamed and exchange.response.stat().st_size <= CUT_ALL_OFFSETS:
            yield exchange.response.read_bytes()


BODIES = list(stream_bodies())


@pytest.mark.skipif(not BODIES, reason="no stream captures")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_streams_never_raise_anything_but_decode_error(data: Any) -> None:
    body = data.draw(st.sampled_from(BODIES))
    mutated = data.draw(mutations(body))
    events = decode_or_refuse([mutated])
    if events is not None:
        record(events)


PIECES = [
    json.dumps(START),
    json.dumps(block(0, {"type": "text", "text": ""})),
    json.dumps(block(0, {"type": "tool_use", "id": "t", "name": "f", "input": {}})),
    json.dumps(block(1, {"type": "server_tool_use", "id": "s", "name": "web_search"})),
    json.dumps(block(2, {"type": "web_search_tool_result", "tool_use_id": "s", "content": []})),
    json.dumps(block(0, {"type": "thinking", "thinking": ""})),
    json.dumps(delta(0, type="text_delta", text="x")),
    json.dumps(delta(0, type="input_json_delta", partial_json='{"a"')),
    json.dumps(delta(0, type="citations_delta", citation={"type": "char_location"})),
    json.dumps(delta(1, type="input_json_delta", partial_json="{}")),
    json.dumps(stop(0)),
    json.dumps(stop(1)),
    json.dumps(stop(2)),
    json.dumps({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"n": 3}}),
    '{"type": "message_stop"}',
    '{"type": "error", "error": {"type": "api_error"}}',
    '{"type": "content_block_start", "index": "zero", "content_block": []}',
    "[]",
]
"""Stream event data, well-formed and not, to shuffle."""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=20)), max_size=25))
def test_arbitrary_event_sequences_give_valid_drafts(datas: list[str]) -> None:
    body = "".join(f"data: {d}\n\n" for d in datas).encode()
    events = decode_or_refuse([body])
    if events is not None:
        record(events)


def test_unreadable_bytes_mid_stream_abandon_the_response() -> None:
    head = sse(
        START, block(0, {"type": "text", "text": ""}), delta(0, type="text_delta", text="ok")
    )
    events = list(decode_stream([head, b"data: \xff\xfe\n\n"]))
    end = events[-1]
    assert isinstance(end, ResponseEnded) and end.state == "abandoned"
    assert end.error is not None and end.error.type == "malformed_stream"
    assert isinstance(events[1], AssistantText) and events[1].text == "ok"
    with pytest.raises(DecodeError):
        list(decode_stream([b"data: \xff\n\n", head]))


def test_drafts_come_out_as_blocks_close() -> None:
    """Memory stays flat: each block's drafts are yielded before the rest is read."""
    consumed = 0

    def chunks() -> Iterator[bytes]:
        nonlocal consumed
        yield sse(START)
        for index in range(2_000):
            consumed = index
            yield sse(
                block(index, {"type": "text", "text": ""}),
                delta(index, type="text_delta", text=f"block {index}"),
                stop(index),
            )
        yield sse({"type": "message_stop"})

    stream = decode_stream(chunks())
    assert isinstance(next(stream), ResponseStarted)
    first = next(stream)
    assert isinstance(first, AssistantText) and first.text == "block 0" and consumed == 0
    assert sum(isinstance(e, AssistantText) for e in stream) == 1_999


def test_a_json_body_in_chunks_and_with_a_bom() -> None:
    message = {"id": "msg_4", "type": "message", "content": [{"type": "text", "text": "hi"}]}
    body = b"\xef\xbb\xbf" + json.dumps(message).encode()
    events = list(detect_and_decode(iter([body[:3], body[3:5], body[5:]])))
    assert kinds(events) == ["ResponseStarted", "AssistantText", "ResponseEnded"]


def test_a_stream_of_only_unknown_events_is_not_a_response() -> None:
    with pytest.raises(DecodeError, match="no message_start"):
        list(decode_stream([sse(*[{"type": "mystery"}] * 100, START)]))


def huge(value: Any) -> str:
    """JSON with 1e400 wherever `value` says HUGE."""
    return json.dumps(value).replace('"HUGE"', "1e400")


def test_numbers_out_of_range_are_kept_not_raised() -> None:
    """1e400 is well-formed JSON that msgspec will not decode: never a crash."""
    message = {"id": "m", "model": "HUGE", "usage": {"x": "HUGE"}}
    ending = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"a": "HUGE"}}
    body = sse(
        huge({"type": "message_start", "message": message}),
        block(0, {"type": "text", "text": ""}),
        huge(delta(0, type="citations_delta", citation={"a": "HUGE"})),
        stop(0),
        huge(block(1, {"type": "x", "n": "HUGE"})),
        huge(ending),
        {"type": "message_stop"},
    )
    events = list(decode_stream([body]))
    assert kinds(events) == [
        "ResponseStarted",
        "AssistantText",
        "UnknownArtifact",
        "UnknownArtifact",
        "ResponseEnded",
    ]
    text = events[1]
    assert isinstance(text, AssistantText) and text.attributions[0].replay is not None
    assert text.attributions[0].replay.raw == b'{"a": 1e400}'
    # Scenario 37: the usage values out of range are kept raw; the stop reason stays.
    unread = events[3]
    assert isinstance(unread, UnknownArtifact) and unread.payload.format == "unread_usage"
    assert unread.payload.raw == b'{"usage":{"x":1e400,"a":1e400}}'
    assert isinstance(events[-1], ResponseEnded) and events[-1].stop_reason == "end_turn"
    record(events)
    whole = huge({"id": "m", "type": "message", "usage": "HUGE", "content": [{"n": "HUGE"}]})
    drafts = list(decode_message(whole.encode()))
    assert kinds(drafts) == [
        "ResponseStarted",
        "UnknownArtifact",
        "UnknownArtifact",
        "ResponseEnded",
    ]
    assert isinstance(drafts[2], UnknownArtifact) and drafts[2].payload.raw == b'{"usage":1e400}'
    with pytest.raises(DecodeError):
        RequestContext.from_body(huge({"max_tokens": "HUGE"}).encode())


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
BLOCK_TYPES = [
    "text", "thinking", "redacted_thinking", "tool_use", "server_tool_use", "mcp_tool_use",
    "mcp_tool_result", "web_search_tool_result", "web_fetch_tool_result",
    "bash_code_execution_tool_result", "future_tool_result", "quantum_widget",
]  # fmt: skip
FIELDS = ["id", "name", "input", "text", "thinking", "signature", "data", "citations",
          "content", "tool_use_id", "is_error", "server_name"]  # fmt: skip


@st.composite
def odd_blocks(draw: st.DrawFn) -> dict[str, Any]:
    """Blocks of known types whose fields hold any JSON at all."""
    fields = draw(st.dictionaries(st.sampled_from(FIELDS), JSON_VALUES, max_size=6))
    if draw(st.booleans()):
        fields["content"] = {"type": draw(JSON_VALUES), "error_code": draw(JSON_VALUES)}
    return {"type": draw(st.sampled_from(BLOCK_TYPES)), **fields}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(odd_blocks(), max_size=6), st.booleans())
def test_blocks_of_any_shape_give_valid_drafts(blocks: list[dict[str, Any]], cut: bool) -> None:
    whole = {"id": "msg_odd", "type": "message", "content": blocks}
    record(decode_message(json.dumps(whole).encode()))
    events: list[dict[str, Any] | str] = [START]
    for index, content in enumerate(blocks):
        events.append(block(index, content))
        events.append(delta(index, type="citations_delta", citation={"type": "char_location"}))
        events.append(delta(index, type="input_json_delta", partial_json='{"k": 1}'))
        if not cut:
            events.append(stop(index))
    record(list(decode_stream([sse(*events)])))
