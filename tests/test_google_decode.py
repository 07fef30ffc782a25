"""The Gemini decoder against recorded traffic, the project's examples, cuts and junk.

Expectations come from the captures themselves, read here with plain `json` (a reference
reading independent of the decoder): the candidate's parts in order, the grounding blocks,
function calls, code runs, thought signatures and finish reasons.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore.adapters.google.array import ArrayReader, MalformedArray
from convstore.adapters.google.context import RequestContext, model_from_path
from convstore.adapters.google.decode import (
    decode_array,
    decode_message,
    decode_stream,
    detect_and_decode,
)
from convstore.adapters.google.grounding import (
    UNPLACED_MISMATCH,
    UNPLACED_OUTSIDE,
    UNPLACED_SPLIT,
    TextSlot,
    byte_offsets_to_code_points,
)
from convstore.adapters.google.grounding import text_attributions as attributions_of
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
from convstore.domain.responses import ResponseRecorder
from convstore.domain.vocabulary import Attribution, CallId, Source, TextRange, TurnId
from tests.gemini_reference import whole_calls

WIRE = Path(__file__).resolve().parents[2] / "shared" / "wire" / "gemini"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "google"
CUT_ALL_OFFSETS = 16 * 1024


# --- captures --------------------------------------------------------------------------------


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

    @cached_property
    def meta(self) -> dict[str, Any]:
        path = self.folder / f"{self.n}.meta.json"
        return json.loads(path.read_text()) if path.exists() else {}

    @cached_property
    def body(self) -> bytes:
        """The response body, gunzipped where the meta (or the bytes) say it is gzip."""
        data = self.response.read_bytes()
        said = any("gzip" in str(value).lower() for value in self.meta.values())
        if said or data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        return data

    @property
    def status(self) -> int:
        return int(self.meta.get("status", 200))

    @property
    def shape(self) -> str:
        """`sse`, `array` or `object`, from the body's first bytes."""
        start = self.body.lstrip()
        return "array" if start.startswith(b"[") else "object" if start[:1] == b"{" else "sse"

    @property
    def streamed(self) -> bool:
        return self.shape != "object"

    def context(self) -> RequestContext | None:
        request = self.folder / f"{self.n}.request.json"
        if not request.exists():
            return None
        model = model_from_path(str(self.meta.get("path", "")))
        return RequestContext.from_body(request.read_bytes(), model=model)

    def decode(self, body: bytes | Iterable[bytes] | None = None) -> list[Event]:
        data = self.body if body is None else body
        return list(detect_and_decode(data, request=self.context(), status=self.status))

    @cached_property
    def facts(self) -> Facts:
        return read_facts(self.body)


def exchanges(root: Path) -> list[Exchange]:
    if not root.is_dir():
        return []
    return [
        Exchange(folder, path.name.split(".")[0])
        for folder in sorted(root.iterdir())
        for path in sorted(folder.glob("*.response.*"))
    ]


def params(root: Path, reason: str) -> list[Any]:
    found = exchanges(root)
    if not found:
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason))]
    return [pytest.param(x, id=x.name) for x in found]


WIRE_CASES = params(WIRE, f"no recorded Gemini traffic at {WIRE}")
EXAMPLE_CASES = params(EXAMPLES, f"no example captures at {EXAMPLES}")
ALL_CASES = WIRE_CASES + EXAMPLE_CASES
STREAM_CASES = [p for p in ALL_CASES if p.values[0] is None or p.values[0].streamed]
OBJECT_CASES = [p for p in ALL_CASES if p.values[0] is None or not p.values[0].streamed]


# --- a reference reading of a capture, with plain json ---------------------------------------


def chunks_of(body: bytes) -> list[dict[str, Any]]:
    """The response chunks of a body in any of the three shapes."""
    text = body.decode().lstrip("\ufeff \t\r\n")
    if text.startswith("["):
        return list(json.loads(text))
    if text.startswith("{"):
        return [json.loads(text)]
    out = []
    for block in re.split(r"\r\n\r\n|\n\n|\r\r", text):
        data = [
            line[5:].removeprefix(" ") for line in block.splitlines() if line.startswith("data:")
        ]
        if data:
            out.append(json.loads("\n".join(data)))
    return out


@dataclass
class Facts:
    """What a capture contains, read without the decoder."""

    chunks: list[dict[str, Any]]
    parts: list[dict[str, Any]] = field(default_factory=list)
    finish: str | None = None
    blocked: str | None = None
    error: dict[str, Any] | None = None
    grounding: list[dict[str, Any]] = field(default_factory=list)
    url_context: list[dict[str, Any]] = field(default_factory=list)

    @property
    def response_id(self) -> str:
        return str(self.chunks[0].get("responseId", ""))

    @property
    def model(self) -> str:
        return str(self.chunks[0].get("modelVersion", ""))

    def texts(self, *, thought: bool) -> str:
        return "".join(
            p["text"]
            for p in self.parts
            if isinstance(p.get("text"), str) and bool(p.get("thought")) == thought
        )

    def having(self, key: str) -> list[dict[str, Any]]:
        return [p for p in self.parts if key in p]

    def calls(self) -> list[dict[str, Any]]:
        """The function call parts, a call streamed in pieces as one whole part."""
        return [p for p in whole_calls(self.parts) if "functionCall" in p]

    def code_results(self) -> list[list[dict[str, Any]]]:
        """The result parts of each code run, grouped: consecutive results and results
        naming one id belong to one run."""
        groups: list[list[dict[str, Any]]] = []
        previous: dict[str, Any] | None = None
        for part in self.parts:
            result = part.get("codeExecutionResult")
            if result is not None:
                named = [
                    g
                    for g in groups
                    if result.get("id")
                    and g[0]["codeExecutionResult"].get("id") == result.get("id")
                ]
                if named:
                    named[0].append(part)
                elif (
                    previous is not None
                    and "codeExecutionResult" in previous
                    and not result.get("id")
                ):
                    groups[-1].append(part)
                else:
                    groups.append([part])
            previous = part
        return groups


def read_facts(body: bytes) -> Facts:
    facts = Facts(chunks_of(body))
    for chunk in facts.chunks:
        if "error" in chunk and "candidates" not in chunk:
            facts.error = chunk["error"]
            break
        blocked = chunk.get("promptFeedback", {}).get("blockReason")
        facts.blocked = blocked or facts.blocked
        for candidate in chunk.get("candidates", []):
            if candidate.get("index", 0) != 0:
                continue
            facts.parts.extend(candidate.get("content", {}).get("parts", []))
            facts.finish = candidate.get("finishReason", facts.finish)
            for key, kept in (
                ("groundingMetadata", facts.grounding),
                ("urlContextMetadata", facts.url_context),
            ):
                if candidate.get(key) and candidate[key] not in kept:
                    kept.append(candidate[key])
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


def of_type(events: Iterable[Event], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


# --- every capture decodes and matches what it contains --------------------------------------


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_decodes_to_one_recordable_response(exchange: Exchange) -> None:
    facts = exchange.facts
    events = exchange.decode()
    started, end = events[0], events[-1]
    assert isinstance(started, ResponseStarted) and started.provider == "google"
    assert isinstance(end, ResponseEnded)
    assert kinds(events).count("ResponseStarted") == kinds(events).count("ResponseEnded") == 1
    assert all(getattr(e, "response_id", end.response_id) == end.response_id for e in events)
    if facts.error is not None:
        assert end.state == "failed" and end.error is not None
        assert end.error.type == facts.error["status"]
        assert end.error.message == facts.error["message"]
    else:
        assert end.state == "completed"
        assert end.response_id == facts.response_id
        assert started.model == facts.model
        assert end.stop_reason == (facts.blocked or facts.finish)
    record(events)  # the drafts satisfy the aggregate's invariants


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_text_and_reasoning(exchange: Exchange) -> None:
    """All visible text, in order, across text events; thought text in Reasoning."""
    facts, events = exchange.facts, exchange.decode()
    texts = of_type(events, AssistantText)
    assert "".join(t.text for t in texts) == facts.texts(thought=False)
    assert all(t.text for t in texts)
    assert "".join(r.text for r in of_type(events, Reasoning)) == facts.texts(thought=True)
    if facts.error is None:
        assert all(t.attributions_complete for t in texts)


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_attributions_point_at_their_segments(exchange: Exchange) -> None:
    """Each support's segment, per cited chunk, is found at its byte offset: the ranges
    (split across text events where it spans several, joined here) hold exactly the
    segment's text, which is never an excerpt (source-side text only)."""
    facts, events = exchange.facts, exchange.decode()
    visible = facts.texts(thought=False)
    expected: set[tuple[int, int, str | None]] = set()
    unplaced: set[str | None] = set()
    for block in facts.grounding:
        chunks = block.get("groundingChunks", [])
        for support in block.get("groundingSupports", []):
            segment = support["segment"]
            start = segment.get("startIndex", 0)
            uris = [
                (chunks[i].get("web") or chunks[i].get("retrievedContext") or {}).get("uri")
                for i in support["groundingChunkIndices"]
            ]
            if not fits(visible.encode(), start, segment["endIndex"], segment.get("text")):
                unplaced.update(uris)
                continue
            at = len(visible.encode()[:start].decode())  # the segment's code-point offset
            assert visible[at : at + len(segment["text"])] == segment["text"]
            expected.update((at, at + len(segment["text"]), uri) for uri in uris)
    pieces: list[tuple[int, int, str | None]] = []
    boundaries: set[int] = set()
    offset = 0
    kept: set[str | None] = set()
    for event in of_type(events, AssistantText):
        for a in event.attributions:
            assert a.excerpt is None and (a.range is None) == bool(a.unplaced)
            if a.range is None:
                kept.add(a.source.url)
                continue
            pieces.append((offset + a.range.start, offset + a.range.end, a.source.url))
        offset += len(event.text)
        boundaries.add(offset)
    joined: set[tuple[int, int, str | None]] = set()
    for start, end, url in sorted(pieces):
        follows = [p for p in joined if p[1] == start and p[2] == url and start in boundaries]
        if follows:
            joined.remove(follows[0])
        joined.add((follows[0][0] if follows else start, end, url))
    assert joined == expected
    assert kept == unplaced  # a support that does not fit keeps its sources, unplaced


def fits(encoded: bytes, start: int, end: int, text: str | None) -> bool:
    """Whether a segment's byte offsets hold its text (or, without one, fall on
    character boundaries) inside the visible text."""
    if not 0 <= start < end <= len(encoded):
        return False
    try:
        held = encoded[start:end].decode()
    except UnicodeDecodeError:
        return False
    return text is None or held == text


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_signatures_are_kept_exactly(exchange: Exchange) -> None:
    """Every signed part is one event's payload, byte-identical, bound to the model."""
    facts, events = exchange.facts, exchange.decode()
    pieces = [p for p in facts.having("functionCall") if p not in facts.calls()]
    signed = [p for p in facts.having("thoughtSignature") if p not in pieces] + [
        c for c in facts.calls() if "thoughtSignature" in c and c not in facts.parts
    ]
    payloads: list[Any] = [e for e in events if getattr(e, "payload", None) is not None]
    for part in signed:
        [event] = [
            e
            for e in payloads
            if e.payload.format in ("part", "parts")
            and part in (v if isinstance(v := payload_json(e), list) else [v])
        ]
        assert part["thoughtSignature"].encode() in event.payload.raw
        assert event.payload.binding == {"model": facts.model}
    for reasoning in of_type(events, Reasoning):
        assert (reasoning.payload is not None) == ("thoughtSignature" in reasoning_part(reasoning))


def reasoning_part(event: Reasoning) -> dict[str, Any]:
    return payload_json(event) if event.payload is not None else {}


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_function_calls(exchange: Exchange) -> None:
    facts, events = exchange.facts, exchange.decode()
    calls = facts.calls()
    requested = of_type(events, ToolCallRequested)
    assert [(r.call_id, r.name, r.arguments) for r in requested] == [
        (
            p["functionCall"].get("id") or f"{facts.response_id}:call:{k}",
            p["functionCall"]["name"],
            p["functionCall"].get("args", {}),
        )
        for k, p in enumerate(calls)
    ]
    assert [payload_json(r) for r in requested] == calls
    end = events[-1]
    assert isinstance(end, ResponseEnded)
    if calls and facts.finish == "STOP":
        assert end.finish_reason == "tool_use"


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_code_execution(exchange: Exchange) -> None:
    """One `started` per executableCode (thought-time ones too), ended by its result."""
    facts, events = exchange.facts, exchange.decode()
    runs = [e for e in of_type(events, HostedActivity) if e.name == "code_execution"]
    started = [a for a in runs if a.state == "started"]
    ended = [a for a in runs if a.state != "started"]
    codes, results = facts.having("executableCode"), facts.code_results()
    assert [a.input["code"] for a in started] == [p["executableCode"]["code"] for p in codes]
    assert [payload_json(a) for a in started] == codes
    assert [payload_json(a) for a in ended] == [g[0] if len(g) == 1 else g for g in results]
    assert [a.activity_id for a in ended] == [a.activity_id for a in started][: len(ended)]
    for activity, group in zip(ended, results, strict=True):
        ok = group[-1]["codeExecutionResult"]["outcome"] == "OUTCOME_OK"  # the last result
        assert activity.state == ("completed" if ok else "failed")
        assert activity.summary


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_grounding_and_url_context_activities(exchange: Exchange) -> None:
    """One completed `web_search` per grounding block with queries; its Search Suggestion
    as a display obligation; `url_context` from urlContextMetadata."""
    facts, events = exchange.facts, exchange.decode()
    activities = of_type(events, HostedActivity)
    searches = [
        a
        for a in activities
        if a.name == "web_search" and a.payload and a.payload.format == "grounding_metadata"
    ]
    blocks = [b for b in facts.grounding if b.get("webSearchQueries")]
    assert [payload_json(a) for a in searches] == blocks
    for activity, block in zip(searches, blocks, strict=True):
        assert activity.state == "completed"
        assert activity.input == {"queries": block["webSearchQueries"]}
        n = len(block.get("groundingChunks", []))
        assert activity.summary == (f"{n} source" if n == 1 else f"{n} sources")
        assert activity.display is not None and activity.display.kind == "search_suggestion"
        assert activity.display.content == block["searchEntryPoint"]["renderedContent"]
        assert activity.display.content_type == "text/html"
        assert activity.payload is not None and activity.payload.format == "grounding_metadata"
    others = [b for b in facts.grounding if not b.get("webSearchQueries")]
    kept = [payload_json(e) for e in of_type(events, UnknownArtifact)]
    assert all(b in kept for b in others)
    fetches = [a for a in activities if a.name == "url_context"]
    assert [payload_json(a) for a in fetches] == facts.url_context
    for activity, block in zip(fetches, facts.url_context, strict=True):
        statuses = [m["urlRetrievalStatus"] for m in block["urlMetadata"]]
        failed = all(s != "URL_RETRIEVAL_STATUS_SUCCESS" for s in statuses)
        assert activity.state == ("failed" if failed else "completed")
        assert activity.input == {"urls": [m["retrievedUrl"] for m in block["urlMetadata"]]}
    ids = [a.activity_id for a in searches + fetches]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_unknown_parts_are_kept(exchange: Exchange) -> None:
    """Scenario 11 (backend-independent: decoding, before anything reaches a store; stored on both
    backends: test_reliability_ingest.py)."""
    known = ("text", "functionCall", "executableCode", "codeExecutionResult", "toolCall")
    known += ("toolResponse",)
    odd = [p for p in exchange.facts.parts if not any(k in p for k in known)]
    kept = [e for e in of_type(exchange.decode(), UnknownArtifact) if e.payload.format == "part"]
    assert [payload_json(e) for e in kept] == odd


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_usage(exchange: Exchange) -> None:
    facts = exchange.facts
    end = exchange.decode()[-1]
    assert isinstance(end, ResponseEnded)
    if facts.error is not None:
        return
    counters = facts.chunks[-1].get("usageMetadata", {})
    assert end.usage is not None
    assert end.usage.input_tokens == counters.get("promptTokenCount")
    assert end.usage.output_tokens == counters.get("candidatesTokenCount")
    assert end.usage.reasoning_tokens == counters.get("thoughtsTokenCount")
    assert end.usage.hosted.get("toolUsePromptTokenCount") == counters.get(
        "toolUsePromptTokenCount"
    )
    assert end.usage.other.get("totalTokenCount") == counters.get("totalTokenCount")


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_decoding_twice_gives_the_same_ids(exchange: Exchange) -> None:
    assert exchange.decode() == exchange.decode()


@pytest.mark.parametrize("exchange", STREAM_CASES)
def test_chunking_does_not_matter(exchange: Exchange) -> None:
    body, whole = exchange.body, exchange.decode()
    for size in (1, 7, 64):
        chunks = [body[i : i + size] for i in range(0, len(body), size)]
        assert exchange.decode(iter(chunks)) == whole


@pytest.mark.parametrize("exchange", OBJECT_CASES)
def test_non_streamed_payloads_are_the_bytes_received(exchange: Exchange) -> None:
    for event in exchange.decode():
        payload = getattr(event, "payload", None)
        if payload is not None and payload.format in ("part", "grounding_metadata"):
            assert payload.raw in exchange.body


@pytest.mark.parametrize("exchange", STREAM_CASES)
def test_the_fast_path_reads_chunks_as_the_general_one_does(exchange: Exchange) -> None:
    """A null field the typed fast path does not know sends every chunk down the general
    path; the drafts are the same."""
    chunks = chunks_of(exchange.body)
    general = [{**chunk, "futureField": None} for chunk in chunks]
    assert comparable(exchange.decode(sse(*general))) == comparable(exchange.decode(sse(*chunks)))


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_ingesting_a_response_twice_stores_it_once(exchange: Exchange) -> None:
    conversation = record()
    recorder = ResponseRecorder(conversation, lambda _: None)
    first = recorder.record(exchange.decode())
    again = recorder.record(exchange.decode())
    assert again.already_stored and again.response_id == first.response_id
    assert again.events == 0


# --- cuts at every byte ----------------------------------------------------------------------


def first_chunk_end(exchange: Exchange) -> int:
    """The byte offset at which the body's first chunk is whole."""
    body = exchange.body
    if exchange.shape == "sse":
        data = body.index(b"data:")
        return min(i for i in (body.find(b"\r", data), body.find(b"\n", data)) if i >= 0)
    text = body.decode()
    start = text.index("[") + 1
    while text[start] in " \t\r\n":
        start += 1
    _, end = json.JSONDecoder().raw_decode(text, start)
    return len(text[:end].encode())


def visible(events: Iterable[Event]) -> str:
    return "".join(e.text for e in of_type(events, AssistantText))


def check_cut(exchange: Exchange, offset: int, whole: list[Event]) -> None:
    """Decoding the first `offset` bytes raises DecodeError only before anything
    response-like, and otherwise follows the partial-commit table."""
    body = exchange.body[:offset]
    context = exchange.context()
    try:
        events = list(detect_and_decode([body], request=context, status=exchange.status))
    except DecodeError:
        assert offset < first_chunk_end(exchange)
        return
    started, end = events[0], events[-1]
    assert started == whole[0]  # the same response id however much arrived
    assert isinstance(end, ResponseEnded)
    if events == whole:
        return
    assert end.state == "abandoned"
    assert whole_text_starts_with(whole, events)
    for event in events[1:-1]:
        if isinstance(event, AssistantText):  # a closed run as usual, or kept incomplete
            assert event in whole or not event.attributions_complete
        elif isinstance(event, Reasoning) and event.payload is None:
            assert any(w.text.startswith(event.text) for w in of_type(whole, Reasoning))
        elif isinstance(event, UnknownArtifact):
            fmt = event.payload.format
            assert event in whole or fmt.endswith("_fields") or fmt == "partial", event
        else:  # tool calls, activities, signed reasoning: whole parts, never made up
            assert event in whole, event
    record(events)


def whole_text_starts_with(whole: list[Event], cut: list[Event]) -> bool:
    return visible(whole).startswith(visible(cut))


@pytest.mark.parametrize("exchange", STREAM_CASES)
def test_a_cut_at_every_byte_follows_the_partial_commit_table(exchange: Exchange) -> None:
    """Scenario 13 (backend-independent: decoding, before anything reaches a store): a cut at every
    byte follows DESIGN.md's partial-commit table."""
    size = len(exchange.body)
    if size > CUT_ALL_OFFSETS:
        pytest.skip("large: sampled by the hypothesis test")
    whole = exchange.decode()
    for offset in range(size + 1):
        check_cut(exchange, offset, whole)


@pytest.mark.parametrize("exchange", STREAM_CASES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_cut_anywhere_follows_the_partial_commit_table(exchange: Exchange, data: Any) -> None:
    """Scenario 13 (backend-independent: decoding, before anything reaches a store): cuts sampled in
    the larger captures."""
    offset = data.draw(st.integers(0, len(exchange.body)))
    check_cut(exchange, offset, exchange.decode())


@pytest.mark.parametrize("exchange", OBJECT_CASES)
def test_a_cut_json_object_is_a_decode_error(exchange: Exchange) -> None:
    body = exchange.body.rstrip()
    for offset in range(0, len(body), max(1, len(body) // 400)):
        with pytest.raises(DecodeError):
            decode_message(body[:offset])


# --- byte offsets → code points --------------------------------------------------------------


def test_byte_offsets_to_code_points_pinned() -> None:
    text = "é京😀a"  # 2 + 3 + 4 + 1 bytes
    encoded = text.encode()
    assert len(encoded) == 10
    points = byte_offsets_to_code_points(encoded, [0, 1, 2, 3, 5, 6, 9, 10, 11, -1])
    assert points == {0: 0, 1: None, 2: 1, 3: None, 5: 2, 6: None, 9: 3, 10: 4, 11: None, -1: None}
    assert byte_offsets_to_code_points(b"abc", [0, 3, 4]) == {0: 0, 3: 3, 4: None}


def reference_attributions(slots: list[TextSlot], block: dict[str, Any]) -> list[list[Any]]:
    """`text_attributions` of one block of one source, slot by slot (the obvious way)."""
    out: list[list[Any]] = [[] for _ in slots]
    source = Source(kind="web", url="u")

    def points(slot: TextSlot, offset: int) -> int | None:
        try:
            return len(slot.encoded[:offset].decode())
        except UnicodeDecodeError:
            return None

    for support in block["groundingSupports"]:
        segment = support["segment"]
        start, end, text = segment.get("startIndex", 0), segment["endIndex"], segment.get("text")
        covered = [s for s in slots if max(start, s.start) < min(end, s.end)]
        got = b"".join(s.encoded[max(start, s.start) - s.start : end - s.start] for s in covered)
        why = ""
        if not 0 <= start < end <= slots[-1].end:
            why = UNPLACED_OUTSIDE
        elif text is not None and got != text.encode():
            why = UNPLACED_MISMATCH
        ranges = []
        for s in [] if why else covered:
            low, high = max(start, s.start) - s.start, min(end, s.end) - s.start
            ranges.append((slots.index(s), points(s, low), points(s, high)))
        if not why and any(a is None or b is None for _, a, b in ranges):
            why = UNPLACED_SPLIT
        if why:
            n = next((n for n, s in enumerate(slots) if start < s.end), len(slots) - 1)
            cited = [(n, Attribution(source=source, unplaced=why))]
        else:
            cited = [(n, Attribution(source=source, range=TextRange(a, b))) for n, a, b in ranges]
        for n, attribution in cited:
            if attribution not in out[n]:
                out[n].append(attribution)
    return out


@given(data=st.data())
@settings(max_examples=300)
def test_text_attributions_agree_with_the_slot_by_slot_reading(data: Any) -> None:
    """One pass over the joined text gives what reading each slot alone gives."""
    texts = data.draw(
        st.lists(st.text(alphabet="ab é京😀", min_size=1, max_size=8), min_size=1, max_size=4)
    )
    slots, at = [], 0
    for text in texts:
        slots.append(TextSlot(text, at))
        at += len(text.encode())
    joined = "".join(texts).encode()
    supports = []
    for _ in range(data.draw(st.integers(1, 6))):
        start = data.draw(st.integers(0, at + 2))
        end = data.draw(st.integers(start + 1, at + 3))
        segment: dict[str, Any] = {"startIndex": start, "endIndex": end}
        kind = data.draw(st.sampled_from(["none", "true", "wrong"]))
        if kind == "true":
            segment["text"] = joined[start:end].decode(errors="replace")
        elif kind == "wrong":
            segment["text"] = "x"
        supports.append({"segment": segment, "groundingChunkIndices": [0]})
    block = {"groundingChunks": [{"web": {"uri": "u"}}], "groundingSupports": supports}
    assert attributions_of(slots, [block]) == reference_attributions(slots, block)


def gemini_text(pieces: list[str], supports: list[dict[str, Any]], **extra: Any) -> bytes:
    """An SSE body: one chunk per piece, grounding on the last."""
    chunks = []
    for n, piece in enumerate(pieces):
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": piece}]}}
        if n == len(pieces) - 1:
            candidate["finishReason"] = "STOP"
            candidate["groundingMetadata"] = {
                "groundingChunks": [{"web": {"uri": "https://example.com/a", "title": "A"}}],
                "groundingSupports": supports,
                "webSearchQueries": ["q"],
                **extra,
            }
        chunks.append({"candidates": [candidate], "responseId": "r1", "modelVersion": "m"})
    return sse(*chunks)


def sse(*chunks: dict[str, Any] | str) -> bytes:
    out = []
    for chunk in chunks:
        data = chunk if isinstance(chunk, str) else json.dumps(chunk, ensure_ascii=False)
        out.append(f"data: {data}\r\n\r\n")
    return "".join(out).encode()


def seg(
    text: str, sentence: str, *, start: int | None = None, end: int | None = None
) -> dict[str, Any]:
    encoded = text.encode()
    at = encoded.index(sentence.encode()) if start is None else start
    segment: dict[str, Any] = {
        "endIndex": at + len(sentence.encode()) if end is None else end,
        "text": sentence,
    }
    if at:
        segment["startIndex"] = at
    return {"segment": segment, "groundingChunkIndices": [0]}


@pytest.mark.parametrize(
    "sentence",
    ["Café crème à Genève.", "東京は晴れ。", "Emoji 🎉 here 👩‍👩‍👧!", "plain ascii"],
)
def test_ranges_convert_bytes_to_code_points(sentence: str) -> None:
    pieces = ["Avant — ", "naïve 日本 😀 ", sentence, " Après ✓"]
    text = "".join(pieces)
    events = list(decode_stream([gemini_text(pieces, [seg(text, sentence)])]))
    [event] = of_type(events, AssistantText)
    [attribution] = event.attributions
    assert attribution.range == TextRange(
        text.index(sentence), text.index(sentence) + len(sentence)
    )
    assert event.text[attribution.range.start : attribution.range.end] == sentence
    assert attribution.source == Source(kind="web", url="https://example.com/a", title="A")
    assert attribution.excerpt is None  # the segment is answer text, never an excerpt
    record(events)


def test_supports_that_do_not_fit_keep_their_source_without_a_range() -> None:
    """A support one byte off, inside a UTF-8 character or past the end keeps its citation
    (source and title) with no range and the reason; a support citing no known chunk
    cites nothing."""
    text = "Été 京都 🙂 fin."
    good = seg(text, "京都")
    one_off = seg(text, "京都", start=text.encode().index("京".encode()) + 1)
    wrong_text = seg(text, "京都")
    wrong_text["segment"]["text"] = "Kyoto"
    inside_char = {"segment": {"startIndex": 1, "endIndex": 5}, "groundingChunkIndices": [0]}
    beyond = {"segment": {"startIndex": 5, "endIndex": 500}, "groundingChunkIndices": [0]}
    no_chunk = {**seg(text, "fin"), "groundingChunkIndices": [7]}
    untexted = {"segment": {"startIndex": 0, "endIndex": 3}, "groundingChunkIndices": [0]}
    supports = [good, one_off, wrong_text, inside_char, beyond, no_chunk, untexted]
    events = list(decode_stream([gemini_text([text], supports)]))
    [event] = of_type(events, AssistantText)
    assert [(a.range, a.unplaced) for a in event.attributions] == [
        (TextRange(4, 6), ""),
        (None, UNPLACED_MISMATCH),  # one byte off: the bytes there are not the segment's
        (None, UNPLACED_SPLIT),  # no text to check, a boundary inside "É"
        (None, UNPLACED_OUTSIDE),
        (TextRange(0, 2), ""),  # no text to check: on character boundaries, kept
    ]  # the wrong-text support cites what the one-byte-off one does: one citation
    source = Source(kind="web", url="https://example.com/a", title="A")
    assert all(a.source == source and a.excerpt is None for a in event.attributions)
    record(events)


def test_an_unplaced_support_past_the_end_is_cited_by_the_last_text() -> None:
    pieces = ["First. ", "Second."]
    beyond = {"segment": {"startIndex": 40, "endIndex": 50}, "groundingChunkIndices": [0]}
    texts = of_type(decode_stream([gemini_text(pieces, [beyond])]), AssistantText)
    assert [len(t.attributions) for t in texts] == [1]  # one run: the two pieces join
    [attribution] = texts[0].attributions
    assert attribution.range is None and attribution.unplaced == UNPLACED_OUTSIDE


def test_text_attributions_split_across_slots() -> None:
    slots = [TextSlot("añb", 0), TextSlot("c😀d", 4)]
    block = {
        "groundingChunks": [{"web": {"uri": "u"}}],
        "groundingSupports": [
            {"segment": {"startIndex": 1, "endIndex": 9, "text": "ñbc😀"},
             "groundingChunkIndices": [0]},
        ],
    }  # fmt: skip
    first, second = attributions_of(slots, [block])
    assert [a.range for a in first] == [TextRange(1, 3)]
    assert [a.range for a in second] == [TextRange(0, 2)]


def test_a_support_across_a_signed_part_is_split_between_its_events() -> None:
    exchange = example("grounding_search_stream", "1")
    texts = of_type(exchange.decode(), AssistantText)
    assert len(texts) == 2 and texts[0].payload is not None  # the signed first part alone
    [support] = [
        s
        for s in exchange.facts.grounding[0]["groundingSupports"]
        if "startIndex" not in s["segment"]
    ]
    sentence = support["segment"]["text"]
    end = len(sentence)  # it starts at 0: code points of the joined text
    first, second = texts
    assert any(a.range == TextRange(0, len(first.text)) for a in first.attributions)
    assert any(a.range == TextRange(0, end - len(first.text)) for a in second.attributions)
    assert first.text + second.text[: end - len(first.text)] == sentence


# --- the project's examples: specific expectations -------------------------------------------


def example(name: str, n: str) -> Exchange:
    if not (EXAMPLES / name).is_dir():
        pytest.skip(f"no example capture {name}")
    return Exchange(EXAMPLES / name, n)


def test_a_thinking_round_trip_replays_the_signature() -> None:
    first = example("thinking_function_roundtrip", "1").decode()
    second = example("thinking_function_roundtrip", "2").decode()
    request = json.loads((EXAMPLES / "thinking_function_roundtrip" / "2.request.json").read_text())
    [call] = of_type(first, ToolCallRequested)
    replayed = request["contents"][1]["parts"][1]
    assert payload_json(call) == replayed  # the signature goes back byte for byte
    [thought] = of_type(first, Reasoning)
    assert thought.payload is None and thought.text == request["contents"][1]["parts"][0]["text"]
    *_, signature, end = second
    assert isinstance(signature, Reasoning) and signature.redacted and signature.text == ""
    assert payload_json(signature) == {"text": "", "thoughtSignature": ANY_STR}
    assert isinstance(end, ResponseEnded) and end.finish_reason == "stop"
    record(first, second)


class _AnyStr:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(other)

    __hash__ = None  # type: ignore[assignment]


ANY_STR: Any = _AnyStr()


def test_failed_code_and_unknown_kinds() -> None:
    code = example("code_execution", "1").decode()
    runs = [(a.state, a.summary) for a in of_type(code, HostedActivity)]
    assert runs == [
        ("started", ""),
        ("failed", "failed: ModuleNotFoundError: No module named 'sympy'"),
        ("started", ""),
        ("completed", "5117 229"),
    ]
    events = example("errors", "4").decode()
    [fetch] = of_type(events, HostedActivity)
    assert (fetch.name, fetch.state, fetch.summary) == (
        "url_context",
        "failed",
        "0/2 urls retrieved",
    )
    formats = [e.payload.format for e in of_type(events, UnknownArtifact)]
    assert formats == ["part", "response_fields", "candidate_fields"]
    assert "safetyRatings" in payload_json(of_type(events, UnknownArtifact)[2])


def test_error_bodies_and_blocked_prompts() -> None:
    events = example("errors", "1").decode()
    assert kinds(events) == ["ResponseStarted", "ResponseEnded"]
    end = events[1]
    assert isinstance(end, ResponseEnded) and end.state == "failed"
    assert end.error is not None and (end.error.type, end.error.status) == ("INVALID_ARGUMENT", 400)
    assert events == example("errors", "1").decode()  # a derived id, the same each time
    blocked = example("errors", "2").decode()[-1]
    assert isinstance(blocked, ResponseEnded)
    assert (blocked.state, blocked.finish_reason, blocked.stop_reason) == (
        "completed",
        "content_filter",
        "PROHIBITED_CONTENT",
    )
    failing = example("errors", "3").decode()
    assert kinds(failing) == ["ResponseStarted", "AssistantText", "ResponseEnded"]
    text, end = failing[1], failing[2]
    assert isinstance(text, AssistantText) and not text.attributions_complete
    assert isinstance(end, ResponseEnded) and end.state == "failed"
    assert end.error is not None and end.error.type == "UNAVAILABLE"


def comparable(events: list[Event]) -> list[Any]:
    """What every body shape must share (payload values, not their bytes)."""
    out = []
    for event in events:
        fields = msgspec.structs.asdict(event)
        payload = getattr(event, "payload", None)
        if payload is not None:
            fields["payload"] = (payload.format, payload.binding, payload_json(event))
        out.append((type(event).__name__, fields))
    return out


def test_the_three_body_shapes_are_detected() -> None:
    exchange = example("array_stream", "1")
    chunks = chunks_of(exchange.body)
    as_array = exchange.decode()
    as_sse = exchange.decode(sse(*chunks))
    assert comparable(as_sse) == comparable(as_array)
    text = "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks[:-1])
    last = chunks[-1]["candidates"][0]
    parts = [{"text": text}, *last["content"]["parts"]]
    merged = {**chunks[-1], "candidates": [{**last, "content": {"role": "model", "parts": parts}}]}
    as_object = exchange.decode(json.dumps(merged, ensure_ascii=False).encode())
    assert comparable(as_object) == comparable(as_array)
    assert kinds(as_array) == [
        "ResponseStarted",
        "AssistantText",
        "ToolCallRequested",
        "ToolCallRequested",
        "ResponseEnded",
    ]
    assert list(decode_array([exchange.body])) == list(detect_and_decode(exchange.body))


# --- synthetic responses: the rules one by one -----------------------------------------------


def part_chunk(*parts: dict[str, Any], finish: str | None = None, **fields: Any) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "responseId": "resp-1", "modelVersion": "gemini-x", **fields}


def test_stop_mid_stream_does_not_end_the_response() -> None:
    body = sse(
        part_chunk({"text": "one"}, finish="STOP"),
        part_chunk({"executableCode": {"language": "PYTHON", "code": "print(2)"}}),
        part_chunk({"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "2\n"}}),
        part_chunk({"text": "two"}, finish="STOP"),
    )
    events = list(decode_stream([body]))
    assert kinds(events) == [
        "ResponseStarted",
        "AssistantText",
        "HostedActivity",
        "HostedActivity",
        "AssistantText",
        "ResponseEnded",
    ]
    end = events[-1]
    assert isinstance(end, ResponseEnded) and end.state == "completed"
    # Cut right after the mid-stream STOP: nothing says more was coming, yet every chunk
    # is read before deciding.
    head = sse(part_chunk({"text": "one"}, finish="STOP"), part_chunk({"text": "t"}))
    assert list(decode_stream([head]))[-1].state == "abandoned"  # type: ignore[attr-defined]


def test_a_usage_only_chunk_after_the_finish_keeps_it_finished() -> None:
    usage: dict[str, Any] = {"usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2}}
    tails: list[dict[str, Any]] = [{**usage, "responseId": "resp-1"}, usage, {"candidates": []}]
    for tail in tails:
        events = list(decode_stream([sse(part_chunk({"text": "a"}, finish="STOP"), tail)]))
        end = events[-1]
        assert isinstance(end, ResponseEnded) and end.state == "completed"
    end = list(decode_stream([sse(part_chunk({"text": "a"}, finish="STOP"), usage)]))[-1]
    assert end.usage is not None and end.usage.output_tokens == 2  # type: ignore[attr-defined]
    odd = list(decode_stream([sse(part_chunk({"text": "a"}, finish="STOP"), {})]))
    assert [e.payload.format for e in of_type(odd, UnknownArtifact)] == ["chunk"]


def test_open_blocks_at_a_cut() -> None:
    """Scenario 13 (backend-independent: decoding, before anything reaches a store): open parts at a
    cut; partial tool input is never a finished call."""
    body = sse(
        part_chunk({"text": "Let me think", "thought": True}),
        part_chunk({"executableCode": {"language": "PYTHON", "code": "print(1)"}}),
        part_chunk({"text": "Partial answer"}),
        part_chunk({"functionCall": {"name": "f", "partialArgs": [{"jsonPath": "$.a"}],
                                     "willContinue": True}}),
        part_chunk({"text": "more", "thought": True}),
    )  # fmt: skip
    events = list(decode_stream([body + b'data: {"candidates": [{"content": {"par']))
    assert kinds(events) == [
        "ResponseStarted",
        "Reasoning",
        "HostedActivity",
        "AssistantText",
        "Reasoning",
        "UnknownArtifact",
        "ResponseEnded",
    ]  # the streamed call stays open across the text until the cut
    _, thought, run, text, more, piece, end = events
    assert isinstance(thought, Reasoning) and thought.payload is None
    assert isinstance(run, HostedActivity) and run.state == "started"
    assert isinstance(text, AssistantText) and not text.attributions_complete
    assert isinstance(piece, UnknownArtifact) and piece.payload.format == "partial"
    assert isinstance(more, Reasoning) and more.payload is None and more.text == "more"
    assert isinstance(end, ResponseEnded) and end.state == "abandoned"
    assert end.error is not None and end.error.type == "incomplete_stream"
    record(events)


def test_signed_parts_stand_alone() -> None:
    body = sse(
        part_chunk({"text": "a", "thought": True}, {"text": "b", "thought": True}),
        part_chunk({"text": "c", "thought": True, "thoughtSignature": "c2ln"}),
        part_chunk({"text": "d"}, {"text": "e", "thoughtSignature": "ZQ=="}, {"text": "f"}),
        part_chunk({"text": ""}, {"text": "", "thoughtSignature": "Zg=="}, finish="STOP"),
    )
    events = list(decode_stream([body]))
    shown = [
        (type(e).__name__, e.text, e.payload is not None)
        for e in events
        if isinstance(e, AssistantText | Reasoning)
    ]
    assert shown == [
        ("Reasoning", "ab", False),
        ("Reasoning", "c", True),
        ("AssistantText", "d", False),
        ("AssistantText", "e", True),
        ("AssistantText", "f", False),
        ("Reasoning", "", True),
    ]
    record(events)


def test_other_candidates_unknown_parts_and_chunks_are_kept() -> None:
    chunk = part_chunk({"text": "hi"}, {"fileData": {"fileUri": "gs://x", "mimeType": "a/b"}})
    chunk["candidates"].append({"content": {"parts": [{"text": "alt"}]}, "index": 1})
    body = sse(chunk, {"mystery": 1}, part_chunk(finish="MAX_TOKENS"))
    events = list(decode_stream([body]))
    kept = [(e.payload.format, payload_json(e)) for e in of_type(events, UnknownArtifact)]
    assert kept == [
        ("part", {"fileData": {"fileUri": "gs://x", "mimeType": "a/b"}}),
        ("candidate", {"content": {"parts": [{"text": "alt"}]}, "index": 1}),
        ("chunk", {"mystery": 1}),
    ]
    end = events[-1]
    assert isinstance(end, ResponseEnded) and end.finish_reason == "length"
    record(events)


def test_a_missing_response_id_is_derived_deterministically() -> None:
    chunk = part_chunk({"functionCall": {"name": "f", "args": {"x": 1}}}, finish="STOP")
    del chunk["responseId"]
    body = json.dumps(chunk).encode()
    events = decode_message(body)
    assert events == decode_message(body)
    [call] = of_type(events, ToolCallRequested)
    assert call.call_id == f"{events[0].response_id}:call:0"  # type: ignore[attr-defined]
    assert events[0].response_id.startswith("gemini_")  # type: ignore[attr-defined]
    assert events[-1].finish_reason == "tool_use"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("STOP", "stop"),
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("BLOCKLIST", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("SPII", "content_filter"),
        ("MALFORMED_FUNCTION_CALL", "error"),
        ("LANGUAGE", "other"),
        ("SOMETHING_NEW", "other"),
    ],
)
def test_finish_reasons(reason: str, finish: str) -> None:
    [*_, end] = decode_message(json.dumps(part_chunk({"text": "x"}, finish=reason)).encode())
    assert isinstance(end, ResponseEnded)
    assert (end.state, end.finish_reason, end.stop_reason) == ("completed", finish, reason)


def test_error_chunks_and_unreadable_error_bodies() -> None:
    """Scenario 14 (backend-independent: decoding, before anything reaches a store; stored on both
    backends: test_reliability_ingest.py): an error chunk mid-stream fails the response, the text
    kept."""
    error = {
        "error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}
    }
    events = list(detect_and_decode(json.dumps([error]).encode(), status=429))
    assert kinds(events) == ["ResponseStarted", "ResponseEnded"]
    end = events[-1]
    assert isinstance(end, ResponseEnded) and end.error is not None
    assert (end.error.type, end.error.status) == ("RESOURCE_EXHAUSTED", 429)
    mid = list(detect_and_decode(json.dumps([part_chunk({"text": "a"}), error]).encode()))
    assert kinds(mid) == ["ResponseStarted", "AssistantText", "ResponseEnded"]
    assert mid[-1].state == "failed"  # type: ignore[attr-defined]
    html = list(detect_and_decode(b"<html>502 Bad Gateway</html>", status=502))
    assert html[-1].state == "failed" and html[-1].error.status == 502  # type: ignore[attr-defined]
    record(html)


def test_text_comes_out_as_parts_close_when_no_grounding_is_declared() -> None:
    """Memory stays flat without grounding tools: drafts are yielded before the rest."""
    consumed = 0

    def chunks() -> Iterator[bytes]:
        nonlocal consumed
        for index in range(2_000):
            consumed = index
            yield sse(part_chunk({"text": f"t{index}"}, {"functionCall": {"name": "f"}}))
        yield sse(part_chunk(finish="STOP"))

    context = RequestContext.from_body(b'{"tools": [{"functionDeclarations": []}]}', model="m")
    stream = decode_stream(chunks(), request=context)
    assert isinstance(next(stream), ResponseStarted)
    first = next(stream)
    assert isinstance(first, AssistantText) and first.text == "t0" and consumed == 0
    assert sum(isinstance(e, ToolCallRequested) for e in stream) == 2_000
    grounded = RequestContext.from_body(b'{"tools": [{"googleSearch": {}}]}')
    held = decode_stream(chunks(), request=grounded)
    next(held)
    next(held)
    assert consumed == 1_999  # grounding arrives last: text waits for it


def test_settings_come_from_the_request() -> None:
    body = json.dumps(
        {
            "contents": [{"role": "user", "parts": [{"text": "secret conversation"}]}],
            "system_instruction": {"parts": [{"text": "Be brief."}, {"text": "Cite."}]},
            "tools": [
                {"googleSearch": {}},
                {"code_execution": {}},
                {"functionDeclarations": [
                    {"name": "lookup", "description": "Find", "parameters": {"type": "object"}}
                ]},
            ],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY",
                                                      "allowedFunctionNames": ["lookup"]}},
            "generationConfig": {"maxOutputTokens": 512},
        }
    ).encode()  # fmt: skip
    context = RequestContext.from_body(
        body, model=model_from_path("/v1beta/models/g-2:generateContent")
    )
    settings = context.settings
    assert context.model == "g-2" and context.grounding is True
    assert settings.system == "Be brief.\nCite." and settings.max_tokens == 512
    assert settings.tool_choice == "lookup"
    assert [(t.name, t.hosted, t.native_type) for t in settings.tools] == [
        ("web_search", True, "googleSearch"),
        ("code_execution", True, "codeExecution"),
        ("lookup", False, ""),
    ]
    assert settings.native is not None and "contents" not in json.loads(settings.native.raw)
    assert context.version_of("web_search") == "googleSearch"
    assert RequestContext.from_body(b"{}").grounding is False
    assert RequestContext().grounding is None
    with pytest.raises(DecodeError):
        RequestContext.from_body(b"[1, 2]")


# --- the array reader ------------------------------------------------------------------------


def read_array(pieces: Iterable[bytes]) -> tuple[list[bytes], bool]:
    reader = ArrayReader()
    out = [element for piece in pieces for element in reader.feed(piece)]
    out.extend(reader.close())
    return out, reader.ended


def test_the_array_reader_splits_elements_however_the_bytes_arrive() -> None:
    body = b'\xef\xbb\xbf [ {"a": "}],\\"["}\n,\r\n{"b": [1, {"c": 2}]} ,{}\n]\n'
    expected = [b'{"a": "}],\\"["}', b'{"b": [1, {"c": 2}]}', b"{}"]
    for size in (1, 2, 5, len(body)):
        assert read_array(body[i : i + size] for i in range(0, len(body), size)) == (expected, True)
    assert read_array([b"[]"]) == ([], True)
    assert read_array([b'[{"a": 1}, {"b"']) == ([b'{"a": 1}'], False)
    for bad in (b'{"a": 1}', b"[1 2]", b'[{"a": 1}] x', b"[,]"):
        with pytest.raises(MalformedArray):
            read_array([bad])


# --- junk: only DecodeError, or drafts the aggregate accepts ---------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   ",
        b"hello",
        b"[]",
        b"[1, 2]",
        b'{"foo": 1}',
        b'{"candidates": [',
        b'[{"candidates": []',
        sse({"foo": 1}),
        b'data: {"candidates": [{"content": {"par',
    ],
)
def test_input_without_a_response_is_a_decode_error(body: bytes) -> None:
    with pytest.raises(DecodeError):
        list(detect_and_decode(body))


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


BODIES = [x.body for x in exchanges(EXAMPLES) + exchanges(WIRE)]


@pytest.mark.skipif(not BODIES, reason="no captures")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_bodies_never_raise_anything_but_decode_error(data: Any) -> None:
    body = data.draw(st.sampled_from(BODIES))
    events = decode_or_refuse([data.draw(mutations(body))])
    if events is not None:
        record(events)


PIECES = [
    part_chunk({"text": "x"}),
    part_chunk({"text": "y", "thought": True}),
    part_chunk({"text": "", "thoughtSignature": "c2ln"}),
    part_chunk({"functionCall": {"name": "f", "args": {"a": 1}}}),
    part_chunk({"functionCall": {"name": "f", "id": "dup"}}),
    part_chunk({"functionCall": {"args": []}}),
    part_chunk({"executableCode": {"code": "1"}}),
    part_chunk({"codeExecutionResult": {"outcome": "OUTCOME_FAILED"}}),
    part_chunk({"text": "z"}, finish="STOP"),
    part_chunk(finish="STOP", promptFeedback={"blockReason": "SAFETY"}),
    {"candidates": [{"groundingMetadata": {"webSearchQueries": ["q"], "groundingSupports": [
        {"segment": {"endIndex": 1, "text": "x"}, "groundingChunkIndices": [0]}],
        "groundingChunks": [{"web": {"uri": "u"}}]}}], "responseId": "resp-1"},
    {"candidates": [{"urlContextMetadata": {"urlMetadata": [{"retrievedUrl": 1}]}}]},
    {"candidates": "no", "usageMetadata": {"promptTokenCount": 1e400}},
    {"candidates": [{"content": {"parts": {"text": "x"}}}]},
    {"error": {"code": 500}},
    [],
]  # fmt: skip
"""Chunks, well-formed and not, to shuffle."""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=20)), max_size=20))
def test_arbitrary_chunk_sequences_give_valid_drafts(chunks: list[Any]) -> None:
    datas = [c if isinstance(c, str) else json.dumps(c) for c in chunks]
    for body in (
        "".join(f"data: {d}\r\n\r\n" for d in datas).encode(),
        ("[" + ",".join(datas) + "]").encode(),
    ):
        events = decode_or_refuse([body])
        if events is not None:
            record(events)
