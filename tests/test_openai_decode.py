"""The OpenAI Responses decoder against recorded traffic, the project's examples, cuts and junk.

Expectations come from the captures themselves, read here with plain `json` (a reference
reading independent of the decoder): hosted items and their final states, citations and
the text they cover, function calls, reasoning payloads, finish reasons and usage.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore.adapters.openai.context import RequestContext
from convstore.adapters.openai.decode import decode_message, decode_stream, detect_and_decode
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
from convstore.domain.vocabulary import CallId, TextRange, TurnId

WIRE = Path(__file__).resolve().parents[2] / "shared" / "wire" / "openai"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "openai"
CUT_ALL_OFFSETS = 16 * 1024
MODEL_PATH = "/v1/responses"


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
    def meta(self) -> dict[str, Any]:
        path = self.folder / f"{self.n}.meta.json"
        return json.loads(path.read_text()) if path.exists() else {}

    @property
    def streamed(self) -> bool:
        return self.response.suffix == ".sse"

    @property
    def status(self) -> int:
        return int(self.meta.get("status", 200))

    def context(self) -> RequestContext | None:
        request = self.folder / f"{self.n}.request.json"
        return RequestContext.from_body(request.read_bytes()) if request.exists() else None

    def decode(self, body: bytes | None = None) -> list[Event]:
        data = self.response.read_bytes() if body is None else body
        return list(detect_and_decode(data, request=self.context(), status=self.status))


def exchanges(root: Path) -> list[Exchange]:
    """The model exchanges under `root` (setup calls such as file uploads are context)."""
    if not root.is_dir():
        return []
    found = [
        Exchange(folder, path.name.split(".")[0])
        for folder in sorted(root.iterdir())
        for path in sorted(folder.glob("*.response.*"))
    ]
    return [x for x in found if x.meta.get("path", MODEL_PATH) == MODEL_PATH]


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

KNOWN_EVENTS = {
    "response.created",
    "response.in_progress",
    "response.queued",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
    "response.output_item.added",
    "response.output_item.done",
    "response.content_part.added",
    "response.content_part.done",
    "response.output_text.delta",
    "response.output_text.done",
    "response.output_text.annotation.added",
    "response.refusal.delta",
    "response.refusal.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_part.done",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done",
    "response.reasoning_text.delta",
    "response.reasoning_text.done",
    "response.code_interpreter_call_code.delta",
    "response.code_interpreter_call_code.done",
    *(
        f"response.{item}.{stage}"
        for item in ("web_search_call", "file_search_call", "code_interpreter_call")
        for stage in ("in_progress", "searching", "interpreting", "completed", "failed")
    ),
    *(
        f"response.{item}.{stage}"
        for item in ("mcp_call", "mcp_list_tools")
        for stage in ("in_progress", "completed", "failed")
    ),
    "response.mcp_call_arguments.delta",
    "response.mcp_call_arguments.done",
    "response.shell_call_command.added",
    "response.shell_call_command.delta",
    "response.shell_call_command.done",
    "response.shell_call_output_content.delta",
    "response.shell_call_output_content.done",
    "response.apply_patch_call_operation_diff.delta",
    "response.apply_patch_call_operation_diff.done",
    "response.compaction.compacting",
}
HOSTED = {
    "web_search_call": "web_search",
    "file_search_call": "file_search",
    "code_interpreter_call": "code_interpreter",
    "image_generation_call": "image_generation",
    "mcp_call": "mcp",
    "mcp_list_tools": "mcp",
}
CLIENT = {
    "function_call",
    "computer_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
    "custom_tool_call",
    "tool_search_call",
}
PAIRED = {"shell_call_output", "tool_search_output", "mcp_approval_request"}
"""Items of provider-run work that comes as a call item and a result item (tests/
test_openai_items.py checks them)."""
KNOWN_ITEMS = {"message", "reasoning", *HOSTED, *CLIENT, *PAIRED}


def is_client_call(item: dict[str, Any]) -> bool:
    """A call the client runs: a hosted shell or a server-run tool search is not one."""
    if item["type"] not in CLIENT:
        return False
    environment = item.get("environment") or {}
    return environment.get("type") != "container_reference" and item.get("execution") != "server"


def is_single_hosted(item: dict[str, Any]) -> bool:
    """A hosted item that is the whole activity (an approved MCP call closes its request's)."""
    return item["type"] in HOSTED and not item.get("approval_request_id")


@dataclass
class Facts:
    """What a capture contains, read without the decoder."""

    items: list[dict[str, Any]] = field(default_factory=list)
    """Output items as they closed (`output_item.done`), else from the final `output`."""
    added: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Items as `output_item.added` announced them, by id."""
    final: dict[str, Any] | None = None
    """The final response object (`response.completed` / … or the JSON body)."""
    error: dict[str, Any] | None = None
    unknown_events: list[dict[str, Any]] = field(default_factory=list)

    def of_type(self, *kinds: str) -> list[dict[str, Any]]:
        return [i for i in self.items if i.get("type") in kinds]

    @property
    def status(self) -> str | None:
        return None if self.final is None else self.final.get("status")


def read_facts(path: Path) -> Facts:
    facts = Facts()
    if path.suffix == ".json":
        body = json.loads(path.read_bytes())
        if "output" not in body and isinstance(body.get("error"), dict):
            facts.error = body["error"]
        else:
            facts.final = body
            facts.items = body["output"]
            facts.error = body.get("error")
        return facts
    done: dict[int, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if not line.startswith("data:"):
            continue
        event = json.loads(line[5:])
        kind = event["type"]
        if kind == "response.output_item.added":
            facts.added[event["item"]["id"]] = event["item"]
        elif kind == "response.output_item.done":
            done[event["output_index"]] = event["item"]
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            facts.final = event["response"]
            facts.error = facts.final.get("error")
        elif kind == "error":
            facts.error = event
        elif kind not in KNOWN_EVENTS:
            facts.unknown_events.append(event)
    final_output = facts.final["output"] if facts.final else []
    indexes = sorted(set(done) | set(range(len(final_output))))
    facts.items = [done[i] if i in done else final_output[i] for i in indexes]
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


def only(events: Iterable[Event], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


# --- every capture decodes and matches what it contains --------------------------------------


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_decodes_to_one_recordable_response(exchange: Exchange) -> None:
    facts = read_facts(exchange.response)
    events = exchange.decode()
    start, end = events[0], events[-1]
    assert isinstance(start, ResponseStarted) and start.provider == "openai"
    assert isinstance(end, ResponseEnded)
    assert all(getattr(e, "response_id", end.response_id) == end.response_id for e in events)
    if facts.final is not None:
        assert end.response_id == facts.final["id"] and end.response_id.startswith("resp_")
        assert start.model == facts.final["model"]
    if facts.error is not None:
        assert end.state == "failed" and end.finish_reason == "error" and end.error is not None
        expected = facts.error.get("type")
        if expected in (None, "error"):
            expected = facts.error.get("code")
        assert (end.error.type, end.error.message) == (expected, facts.error["message"])
        if facts.final is None and not exchange.streamed:
            assert end.error.status == exchange.status and end.response_id.startswith("error_")
    else:
        assert facts.final is not None
        assert end.state == "completed"
        details = facts.final.get("incomplete_details") or {}
        assert end.stop_reason == details.get("reason", facts.status)
    record(events)  # the drafts satisfy the aggregate's invariants


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_finish_reason_and_usage(exchange: Exchange) -> None:
    facts = read_facts(exchange.response)
    end = exchange.decode()[-1]
    assert isinstance(end, ResponseEnded)
    parts = [p for m in facts.of_type("message") for p in m["content"]]
    if facts.error is not None:
        expected = "error"
    elif facts.status == "incomplete":
        reason = facts.final["incomplete_details"]["reason"]  # type: ignore[index]
        expected = {"max_output_tokens": "length", "content_filter": "content_filter"}[reason]
    elif any(is_client_call(i) for i in facts.items):
        expected = "tool_use"
    elif any(p["type"] == "refusal" for p in parts):
        expected = "refusal"
    else:
        expected = "stop"
    assert end.finish_reason == expected
    usage = facts.final.get("usage") if facts.final else None
    if not usage:
        return
    assert end.usage is not None
    assert (end.usage.input_tokens, end.usage.output_tokens) == (
        usage["input_tokens"],
        usage["output_tokens"],
    )
    assert end.usage.cache_read_tokens == usage["input_tokens_details"]["cached_tokens"]
    assert end.usage.reasoning_tokens == usage["output_tokens_details"]["reasoning_tokens"]
    assert end.usage.other["total_tokens"] == usage["total_tokens"]
    searches = (facts.final or {}).get("tool_usage", {}).get("web_search", {}).get("num_requests")
    assert end.usage.hosted.get("web_search_requests") == searches


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_hosted_activities(exchange: Exchange) -> None:
    """A `started` and a terminal transition per hosted item; the item is the payload."""
    facts = read_facts(exchange.response)
    hosted = [i for i in facts.items if is_single_hosted(i)]
    events = exchange.decode()
    single = {i["id"] for i in hosted}
    activities = [a for a in only(events, HostedActivity) if a.activity_id in single]
    started = [a for a in activities if a.state == "started"]
    ended = [a for a in activities if a.state != "started"]
    assert [a.activity_id for a in started] == [i["id"] for i in hosted]
    assert [a.activity_id for a in ended] == [i["id"] for i in hosted]
    for activity, item in zip(ended, hosted, strict=True):
        assert activity.name.partition(":")[0] == HOSTED[item["type"]]
        status = item.get("status", "completed")
        assert activity.state == ("completed" if status == "completed" else "failed")
        assert payload_json(activity) == item
        assert activity.payload is not None and activity.payload.format == "output_item"
        assert activity.payload.binding == {"model": events[0].model}  # type: ignore[attr-defined]
        if activity.state == "failed":
            error = item.get("error")
            assert activity.summary == (error["message"] if isinstance(error, dict) else status)
        action = item.get("action") or {}
        if item["type"] == "web_search_call" and action.get("type") == "search":
            assert activity.input["query"] == action["query"]
            shown = action.get("queries") or [action["query"]]
            if activity.state == "completed":
                prefix = "searched " + ", ".join(f'"{q}"' for q in shown)
                assert activity.summary.startswith(prefix)
        if item["type"] == "web_search_call" and action.get("type") in ("open_page", "find"):
            assert activity.input["url"] == action["url"]
        if item["type"] == "file_search_call":
            assert activity.input == {"queries": item["queries"]}
            if isinstance(item.get("results"), list):
                assert activity.summary == f"{len(item['results'])} results"
        if item["type"] == "code_interpreter_call":
            assert activity.input == {"code": item["code"]}
    for activity in started:
        assert activity.payload is None


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_text_and_citations(exchange: Exchange) -> None:
    """One AssistantText per text or refusal part; every range covers the cited text."""
    facts = read_facts(exchange.response)
    texts = only(exchange.decode(), AssistantText)
    parts = [
        (message, part)
        for message in facts.of_type("message")
        for part in message["content"]
        if part["type"] in ("output_text", "refusal")
    ]
    if facts.error is not None and exchange.streamed and facts.final is None:
        return  # cut by an error event: checked by the example's own test
    assert len(texts) == len(parts)
    for event, (message, part) in zip(texts, parts, strict=True):
        assert event.text == part.get("text", part.get("refusal"))
        assert payload_json(event) == message  # the whole message item, id included
        assert event.attributions_complete
        annotations = part.get("annotations") or []
        assert len(event.attributions) == len(annotations)
        for attribution, annotation in zip(event.attributions, annotations, strict=True):
            span = attribution.range
            assert span is not None
            if annotation["type"] == "url_citation":
                assert attribution.source.kind == "web"
                assert attribution.source.url == annotation["url"]
                assert attribution.source.title == annotation["title"]
                assert span == TextRange(annotation["start_index"], annotation["end_index"])
                cited = event.text[span.start : span.end]  # code points, as the wire counts
                assert cited.startswith("([") and cited.endswith(f"]({annotation['url']}))")
            elif annotation["type"] == "file_citation":
                assert attribution.source.kind == "file"
                assert attribution.source.id == annotation["file_id"]
                assert attribution.source.title == annotation["filename"]
                assert span == TextRange(annotation["index"], annotation["index"])
                # A point where the citation marker stood: before its sentence's period.
                assert event.text[span.start : span.start + 1] == "."
            elif annotation["type"] == "container_file_citation":
                assert attribution.source.id == annotation["file_id"]
                assert event.text[span.start : span.end] == annotation["filename"]


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_tool_calls_and_reasoning(exchange: Exchange) -> None:
    """Function calls as requested with their ids; reasoning as `output_item.done` had it."""
    facts = read_facts(exchange.response)
    events = exchange.decode()
    requested = only(events, ToolCallRequested)
    calls = [i for i in facts.items if is_client_call(i)]
    assert [r.call_id for r in requested] == [c["call_id"] for c in calls]
    for event, call in zip(requested, calls, strict=True):
        if call["type"] == "function_call":
            assert (event.name, event.arguments) == (call["name"], json.loads(call["arguments"]))
        assert payload_json(event) == call  # with its `id`: OpenAI refuses a re-minted one
    reasoning = only(events, Reasoning)
    items = facts.of_type("reasoning")
    assert len(reasoning) == len(items)
    for event, item in zip(reasoning, items, strict=True):
        assert event.payload is not None
        assert payload_json(event) == item
        assert event.payload.binding == {"model": events[0].model}  # type: ignore[attr-defined]
        readable = [s["text"] for s in item.get("summary") or () if s["text"]]
        assert event.text == "\n\n".join(readable)
        assert event.redacted == (not readable and bool(item.get("encrypted_content")))
        added = facts.added.get(item["id"], {}).get("encrypted_content")
        if added is not None:  # store=false: the announced value is not the one kept
            assert payload_json(event)["encrypted_content"] != added


@pytest.mark.parametrize("exchange", ALL_CASES)
def test_capture_unknown_items_and_events_are_kept(exchange: Exchange) -> None:
    """Scenario 11 (backend-independent: decoding, before anything reaches a store; stored on both
    backends: test_reliability_ingest.py)."""
    facts = read_facts(exchange.response)
    kept = only(exchange.decode(), UnknownArtifact)
    odd = [i for i in facts.items if i["type"] not in KNOWN_ITEMS]
    by_format = {
        fmt: [payload_json(e) for e in kept if e.payload.format == fmt]
        for fmt in ("output_item", "stream_event")
    }
    assert by_format == {"output_item": odd, "stream_event": facts.unknown_events}
    fields = [payload_json(e) for e in kept if e.payload.format == "response_fields"]
    if facts.final is not None:
        [extras] = fields
        assert extras["created_at"] == facts.final["created_at"]
        assert "output" not in extras and "usage" not in extras


@pytest.mark.parametrize("exchange", JSON_CASES)
def test_non_streamed_payloads_are_the_bytes_received(exchange: Exchange) -> None:
    body = exchange.response.read_bytes()
    for event in exchange.decode():
        payload = getattr(event, "payload", None)
        if payload is not None and payload.format == "output_item":
            assert payload.raw in body


@pytest.mark.parametrize("exchange", STREAM_CASES)
def test_streamed_payloads_are_the_bytes_of_output_item_done(exchange: Exchange) -> None:
    body = exchange.response.read_bytes()
    for event in exchange.decode():
        payload = getattr(event, "payload", None)
        if payload is not None and payload.format == "output_item":
            assert b'"item":' + payload.raw in body


@pytest.mark.parametrize("exchange", STREAM_CASES)
def test_chunking_does_not_matter(exchange: Exchange) -> None:
    body = exchange.response.read_bytes()
    whole = exchange.decode()
    for size in (1, 7, 64):
        chunks = [body[i : i + size] for i in range(0, len(body), size)]
        assert list(detect_and_decode(chunks, request=exchange.context())) == whole


def comparable(events: list[Event]) -> list[Any]:
    """What streamed and non-streamed forms must share: payload values, not their bytes.

    A reasoning item's `encrypted_content` is left out: with store=false OpenAI encrypts
    it afresh in each copy it sends (`output_item.done` and `response.completed` differ).
    """
    out: list[Any] = []
    for event in events:
        fields = msgspec.structs.asdict(event)
        fields.pop("payload", None)
        fields.pop("settings", None)
        payload = getattr(event, "payload", None)
        if payload is not None:
            value = payload_json(event)
            if isinstance(event, Reasoning):
                value.pop("encrypted_content", None)
            fields["payload"] = (payload.format, payload.version, payload.binding, value)
        out.append((type(event).__name__, fields))
    return out


@pytest.mark.parametrize("exchange", STREAM_CASES)
def test_a_stream_and_its_final_response_object_decode_alike(exchange: Exchange) -> None:
    """The body built from `response.completed`'s response decodes like the stream."""
    facts = read_facts(exchange.response)
    if facts.final is None or facts.error is not None:
        pytest.skip("no completed response object in this stream")
    body = json.dumps(facts.final, ensure_ascii=False).encode()
    streamed = [e for e in exchange.decode() if not is_stream_event(e)]  # only in a stream
    whole = list(detect_and_decode(body, request=exchange.context()))
    assert comparable(streamed) == comparable(whole)


def is_stream_event(event: Event) -> bool:
    return isinstance(event, UnknownArtifact) and event.payload.format == "stream_event"


def test_settings_come_from_the_request() -> None:
    body = json.dumps(
        {
            "model": "gpt-5.1",
            "instructions": "Be brief.",
            "max_output_tokens": 512,
            "tool_choice": {"type": "function", "name": "lookup"},
            "tools": [
                {"type": "web_search_preview_2025_03_11", "search_context_size": "low"},
                {"type": "file_search", "vector_store_ids": ["vs_1"]},
                {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example"},
                {"type": "computer_use_preview", "display_width": 1024},
                {
                    "type": "function",
                    "name": "lookup",
                    "description": "Find",
                    "parameters": {"type": "object"},
                },
                {"type": "custom", "name": "grammar_tool"},
            ],
            "include": ["reasoning.encrypted_content"],
            "store": False,
            "input": [{"role": "user", "content": "secret conversation"}],
        }
    ).encode()
    context = RequestContext.from_body(body)
    settings = context.settings
    assert settings.system == "Be brief." and settings.max_tokens == 512
    assert settings.tool_choice == "lookup"
    assert [(t.name, t.hosted, t.native_type) for t in settings.tools] == [
        ("web_search", True, "web_search_preview_2025_03_11"),
        ("file_search", True, "file_search"),
        ("mcp:docs", True, "mcp"),
        ("computer", False, "computer_use_preview"),
        ("lookup", False, ""),
        ("grammar_tool", False, "custom"),
    ]
    assert settings.tools[4].input_schema == {"type": "object"}
    assert settings.native is not None
    native = json.loads(settings.native.raw)
    assert "input" not in native and native["include"] == ["reasoning.encrypted_content"]
    assert context.version_of("web_search") == "web_search_preview_2025_03_11"
    assert context.version_of("mcp:docs/search") == "mcp"
    choices = {"required": "any", "auto": "auto", "none": "none"}
    for wire, normalized in choices.items():
        assert RequestContext.from_body(json.dumps({"tool_choice": wire})).settings.tool_choice == (
            normalized
        )
    hosted_choice = json.dumps({"tool_choice": {"type": "web_search_preview"}})
    assert RequestContext.from_body(hosted_choice).settings.tool_choice == "web_search"
    with pytest.raises(DecodeError):
        RequestContext.from_body(b"[1, 2]")


# --- the project's examples: specific expectations -------------------------------------------


def example(name: str, n: str) -> Exchange:
    if not (EXAMPLES / name).is_dir():
        pytest.skip(f"no example capture {name}")
    return Exchange(EXAMPLES / name, n)


def test_streamed_and_non_streamed_forms_give_equivalent_drafts() -> None:
    """Scenario 12 (backend-independent: decoding, before anything reaches a store): the streamed
    form equals the non-streamed one."""
    streamed = example("web_search_citations", "1").decode()
    whole = example("web_search_citations", "2").decode()
    assert comparable(streamed) == comparable(whole)
    [text] = only(streamed, AssistantText)
    assert len(text.attributions) == 3
    activities = only(streamed, HostedActivity)
    assert [a.summary for a in activities if a.state == "completed"] == [
        'searched "spécialité lyonnaise quenelle", "いただきます 意味" (3 sources)',
        "opened https://nihongo.example.com/phrases/itadakimasu",
        'found "tablier de sapeur" in https://bouchons.example.net/guide/tablier-de-sapeur',
    ]
    assert activities[0].payload is None and activities[1].payload is not None
    assert activities[1].payload.version == "web_search"


def test_ranges_count_code_points_not_utf16_units_or_bytes() -> None:
    """The example's text puts accents, CJK and emoji before its citations."""
    [text] = only(example("web_search_citations", "1").decode(), AssistantText)
    for attribution in text.attributions:
        span = attribution.range
        assert span is not None
        before = text.text[: span.start]
        assert len(before.encode("utf-16-le")) // 2 != len(before) != len(before.encode())
        assert attribution.source.url is not None
        assert text.text[span.start : span.end].endswith(f"]({attribution.source.url}))")


def message_body(text: str, annotations: list[dict[str, Any]]) -> bytes:
    return json.dumps(
        {
            "id": "resp_t",
            "object": "response",
            "status": "completed",
            "model": "gpt-t",
            "output": [
                {
                    "id": "msg_t",
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": annotations}],
                }
            ],
        }
    ).encode()


def test_range_conversion_is_pinned_with_non_ascii_text(caplog: pytest.LogCaptureFixture) -> None:
    text = "Crème brûlée à 東京 🍮🎉: ([ex](https://example.org/é)) fin"
    link = "([ex](https://example.org/é))"
    start = text.index(link)
    assert (start, len(text[:start].encode("utf-16-le")) // 2, len(text[:start].encode())) == (
        22,
        24,
        36,
    )
    annotations = [
        {"type": "url_citation", "url": "https://example.org/é", "title": "É",
         "start_index": start, "end_index": start + len(link)},
        {"type": "url_citation", "url": "https://example.org/x", "title": "stale",
         "start_index": len(text) - 2, "end_index": len(text) + 3},
        {"type": "file_citation", "file_id": "file-1", "filename": "notes.md",
         "index": len(text)},
        {"type": "file_path", "file_id": "file-2", "index": len(text) + 1},
        {"type": "hologram_citation", "url": "https://example.net", "start_index": 0,
         "end_index": 5},
    ]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="convstore.adapters.openai"):
        [_, event, *_] = decode_message(message_body(text, annotations))
    assert isinstance(event, AssistantText)
    ranges = [a.range for a in event.attributions]
    assert ranges == [
        TextRange(start, start + len(link)),
        None,  # [len - 2, len + 3) does not lie in the text: dropped, not clipped
        TextRange(len(text), len(text)),  # a point after the passage it supports
        None,
        TextRange(0, 5),
    ]
    first = ranges[0]
    assert first is not None and text[first.start : first.end] == link
    assert [a.source.kind for a in event.attributions] == ["web", "web", "file", "file", "document"]
    unplaced = [a.unplaced for a in event.attributions]
    assert [bool(why) for why in unplaced] == [False, True, False, True, False]
    assert f"[{len(text) - 2}, {len(text) + 3})" in unplaced[1]  # the source is kept
    assert payload_json(event)["content"][0]["annotations"] == annotations  # nothing lost
    assert "does not lie in its text" in caplog.text and "example.org" not in caplog.text
    record(decode_message(message_body(text, annotations)))


def test_a_reasoning_and_function_call_round_trip() -> None:
    first = example("reasoning_function_roundtrip", "1").decode()
    second = example("reasoning_function_roundtrip", "2").decode()
    folder = EXAMPLES / "reasoning_function_roundtrip"
    request = json.loads((folder / "2.request.json").read_text())
    [reasoning] = only(first, Reasoning)
    [call] = only(first, ToolCallRequested)
    replayed_reasoning, replayed_call, output = request["input"][1:]
    value = payload_json(reasoning)
    assert value["id"] == replayed_reasoning["id"]
    assert value["encrypted_content"] == replayed_reasoning["encrypted_content"]
    assert reasoning.payload is not None
    assert value["encrypted_content"].encode() in reasoning.payload.raw  # the bytes, unchanged
    sse = (folder / "1.response.sse").read_text()
    datas = [json.loads(line[6:]) for line in sse.splitlines() if line.startswith("data: ")]
    [added] = [
        d for d in datas if d["type"] == "response.output_item.added" and d["output_index"] == 0
    ]
    [completed] = [d for d in datas if d["type"] == "response.completed"]
    assert added["item"]["encrypted_content"] != value["encrypted_content"]
    assert completed["response"]["output"][0]["encrypted_content"] != value["encrypted_content"]
    assert payload_json(call)["id"] == replayed_call["id"]
    assert call.call_id == replayed_call["call_id"] == output["call_id"]
    assert call.arguments == {"city": "Zürich, Suisse", "unit": "celsius"}
    [hidden] = only(second, Reasoning)
    assert hidden.redacted and hidden.text == "" and hidden.payload is not None
    record(first, second)


def test_a_refusal_ends_with_refusal_and_a_cut_by_length_with_length() -> None:
    refused = example("refusal_incomplete", "1").decode()
    [text] = only(refused, AssistantText)
    assert text.text.startswith("Désolé")
    assert payload_json(text)["content"][0]["type"] == "refusal"
    assert refused[-1].finish_reason == "refusal"  # type: ignore[attr-defined]
    cut = example("refusal_incomplete", "2").decode()
    end = cut[-1]
    assert isinstance(end, ResponseEnded)
    assert (end.state, end.finish_reason, end.stop_reason) == (
        "completed",
        "length",
        "max_output_tokens",
    )
    [poem] = only(cut, AssistantText)
    assert poem.attributions_complete and payload_json(poem)["status"] == "incomplete"
    record(refused, cut)


def test_an_error_event_mid_stream_fails_the_response_and_keeps_the_text() -> None:
    """Scenario 14 (backend-independent: decoding, before anything reaches a store; stored on both
    backends: test_reliability_ingest.py)."""
    events = example("errors", "1").decode()
    assert kinds(events) == ["ResponseStarted", "AssistantText", "UnknownArtifact", "ResponseEnded"]
    text, end = events[1], events[-1]
    assert isinstance(text, AssistantText) and not text.attributions_complete
    assert text.text.startswith("Le Transsibérien") and text.text.endswith("9 289 km")
    assert text.payload is not None and text.payload.format == "partial"
    assert isinstance(end, ResponseEnded)
    assert (end.state, end.finish_reason) == ("failed", "error")
    assert end.error is not None and end.error.type == "server_error"
    record(events)


def test_response_failed_keeps_the_failed_search() -> None:
    events = example("errors", "2").decode()
    activities = only(events, HostedActivity)
    assert [(a.state, a.summary) for a in activities] == [("started", ""), ("failed", "failed")]
    assert activities[1].input == {"query": "météo Reykjavík"}
    end = events[-1]
    assert isinstance(end, ResponseEnded) and end.state == "failed" and end.usage is None
    record(events)


def test_an_http_error_body_is_a_failed_response() -> None:
    events = example("errors", "3").decode()
    assert kinds(events) == ["ResponseStarted", "ResponseEnded"]
    end = events[1]
    assert isinstance(end, ResponseEnded) and end.state == "failed"
    assert end.error is not None
    assert (end.error.type, end.error.status) == ("tokens", 429)
    assert end.error.message.startswith("Rate limit reached")
    assert events == example("errors", "3").decode()  # the same derived id each time
    assert events[0].model == "gpt-5.1"  # type: ignore[attr-defined]
    record(events)


def test_unknown_items_and_events_are_kept_in_order() -> None:
    events = example("errors", "4").decode()
    unknown = only(events, UnknownArtifact)
    assert [(e.payload.format, payload_json(e).get("type")) for e in unknown] == [
        ("stream_event", "response.hologram_call.rendering"),
        ("output_item", "hologram_call"),
        ("stream_event", "response.telemetry"),
        ("response_fields", None),
    ]
    record(events)


def test_hosted_tools_and_a_computer_call() -> None:
    streamed = example("hosted_tools", "1").decode()
    code = only(streamed, HostedActivity)
    assert [(a.name, a.state, a.summary) for a in code] == [
        ("code_interpreter", "started", ""),
        ("code_interpreter", "completed", "1 log"),
    ]
    assert code[1].input["code"].startswith("values = [3, 1, 4")
    whole = example("hosted_tools", "2").decode()
    activities = only(whole, HostedActivity)
    assert [(a.name, a.state, a.summary) for a in activities if a.state != "started"] == [
        ("mcp:docs/tools/list", "completed", "1 tool"),
        ("mcp:docs/search_docs", "completed", "done"),
        ("image_generation", "completed", "1 image"),
    ]
    assert activities[2].input == {"q": "crêpe"}
    versions = [a.payload.version for a in activities if a.payload is not None]
    assert versions == ["mcp", "mcp", "image_generation"]
    [computer] = only(whole, ToolCallRequested)
    assert computer.name == "computer"
    assert computer.arguments == {"action": {"type": "screenshot"}, "pending_safety_checks": []}
    [odd] = [e for e in only(whole, UnknownArtifact) if e.payload.format == "output_item"]
    assert payload_json(odd)["type"] == "hologram_call"
    end = whole[-1]
    assert isinstance(end, ResponseEnded) and end.finish_reason == "tool_use"
    assert end.usage is not None and end.usage.hosted == {
        "image_gen.input_tokens": 52,
        "image_gen.output_tokens": 196,
    }
    record(streamed, whole)


# --- cuts at every byte ----------------------------------------------------------------------


def is_partial(event: Event) -> bool:
    """One of the forms the partial-commit table gives an item cut open."""
    if isinstance(event, AssistantText):
        return not event.attributions_complete or (
            event.payload is not None and event.payload.format == "partial"
        )
    if isinstance(event, Reasoning):
        return event.payload is None
    if isinstance(event, UnknownArtifact):
        return event.payload.format in ("partial", "response_fields")
    if isinstance(event, HostedActivity):
        return (
            event.state == "started"
            and event.payload is not None
            and event.payload.format == "partial"
        )
    return False


def check_cut(exchange: Exchange, offset: int, whole: list[Event]) -> None:
    """Decoding the first `offset` bytes follows the partial-commit table."""
    full = exchange.response.read_bytes()
    body = full[:offset]
    opened = full.index(b"\n", full.index(b'"response.created"'))  # its data line's end
    try:
        events = list(decode_stream([body], request=exchange.context()))
    except DecodeError:
        assert offset < opened  # only a stream cut before response.created is refused
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
        if isinstance(event, Reasoning) and event.payload is not None:
            assert event in whole  # never a payload before output_item.done
        if isinstance(event, HostedActivity) and event.state != "started":
            assert event in whole
        if isinstance(event, AssistantText) and not event.attributions_complete:
            assert any(
                isinstance(w, AssistantText)
                and w.text.startswith(event.text)
                and set(event.attributions) <= set(w.attributions)
                for w in whole
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
        data = event if isinstance(event, str) else json.dumps(event, ensure_ascii=False)
        out.append(f"data: {data}\n\n")
    return "".join(out).encode()


RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "model": "gpt-x",
    "status": "in_progress",
}
CREATED = {"type": "response.created", "response": {**RESPONSE, "output": []}}


def added(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def done(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.done", "output_index": index, "item": item}


def event(kind: str, index: int, item_id: str, **fields: Any) -> dict[str, Any]:
    return {"type": f"response.{kind}", "output_index": index, "item_id": item_id, **fields}


def completed(*output: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    response = {**RESPONSE, "status": status, "output": list(output)}
    return {"type": f"response.{status}", "response": response}


def test_open_items_at_a_cut() -> None:
    """Scenario 13 (backend-independent: decoding, before anything reaches a store): open items at a
    cut; partial tool input is never a finished call."""
    text_part = {"type": "output_text", "text": "", "annotations": []}
    citation = {
        "type": "url_citation",
        "url": "https://example.org",
        "title": "E",
        "start_index": 0,
        "end_index": 4,
    }
    body = sse(
        CREATED,
        added(0, {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "A"}),
        event("reasoning_summary_part.added", 0, "rs_1", summary_index=0,
              part={"type": "summary_text", "text": ""}),
        event("reasoning_summary_text.delta", 0, "rs_1", summary_index=0, delta="Hmm, "),
        event("reasoning_summary_text.delta", 0, "rs_1", summary_index=0, delta="well"),
        added(1, {"id": "ws_1", "type": "web_search_call", "status": "in_progress"}),
        event("web_search_call.searching", 1, "ws_1"),
        added(2, {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f",
                  "arguments": ""}),
        event("function_call_arguments.delta", 2, "fc_1", delta='{"a": 1'),
        added(3, {"id": "msg_1", "type": "message", "role": "assistant", "content": []}),
        event("content_part.added", 3, "msg_1", content_index=0, part=text_part),
        event("output_text.delta", 3, "msg_1", content_index=0, delta="Done"),
        event("output_text.annotation.added", 3, "msg_1", content_index=0, annotation_index=0,
              annotation=citation),
        event("content_part.done", 3, "msg_1", content_index=0,
              part={**text_part, "text": "Done", "annotations": [citation]}),
        event("content_part.added", 3, "msg_1", content_index=1, part=text_part),
        event("output_text.delta", 3, "msg_1", content_index=1, delta="Cut "),
        event("output_text.annotation.added", 3, "msg_1", content_index=1, annotation_index=0,
              annotation={**citation, "end_index": 3}),
        event("output_text.delta", 3, "msg_1", content_index=1, delta="here"),
        added(4, {"id": "ci_1", "type": "code_interpreter_call", "code": "",
                  "container_id": "c", "outputs": None}),
        event("code_interpreter_call_code.delta", 4, "ci_1", delta="print("),
    )  # fmt: skip
    events = list(decode_stream([body]))
    assert kinds(events) == [
        "ResponseStarted",
        "Reasoning",
        "HostedActivity",
        "UnknownArtifact",
        "AssistantText",
        "AssistantText",
        "HostedActivity",
        "UnknownArtifact",
        "ResponseEnded",
    ]
    reasoning, search, call, closed, cut, code, fields, end = events[1:]
    assert isinstance(reasoning, Reasoning) and reasoning.payload is None
    assert reasoning.text == "Hmm, well"  # unsigned: the announced encrypted value is dropped
    assert isinstance(search, HostedActivity) and search.state == "started"
    assert search.payload is not None and search.payload.format == "partial"
    assert payload_json(search)["status"] == "searching"
    assert isinstance(call, UnknownArtifact) and call.payload.format == "partial"
    assert payload_json(call)["arguments"] == '{"a": 1'
    assert isinstance(closed, AssistantText) and closed.attributions_complete
    assert closed.text == "Done" and len(closed.attributions) == 1
    assert isinstance(cut, AssistantText) and not cut.attributions_complete
    assert cut.text == "Cut here" and cut.attributions[0].range == TextRange(0, 3)
    assert cut.payload is not None and cut.payload.format == "partial"
    assert [p["text"] for p in payload_json(cut)["content"]] == ["Done", "Cut here"]
    assert isinstance(code, HostedActivity) and code.input == {"code": "print("}
    assert isinstance(fields, UnknownArtifact) and fields.payload.format == "response_fields"
    assert isinstance(end, ResponseEnded) and end.state == "abandoned"
    assert end.error is not None and end.error.type == "incomplete_stream"
    record(events)


def test_a_final_event_closes_open_items_with_its_output_and_maps_unannounced_ones() -> None:
    call = {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_1",
        "name": "f",
        "arguments": '{"a": 1}',
        "status": "completed",
    }
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Hi", "annotations": []}],
    }
    body = sse(
        CREATED,
        added(0, {**call, "arguments": "", "status": "in_progress"}),
        event("function_call_arguments.delta", 0, "fc_1", delta='{"a"'),
        completed(call, message),
    )
    events = list(decode_stream([body]))
    assert kinds(events) == [
        "ResponseStarted",
        "ToolCallRequested",
        "AssistantText",
        "UnknownArtifact",
        "ResponseEnded",
    ]
    assert events[1].arguments == {"a": 1}  # type: ignore[attr-defined]
    assert events[-1].finish_reason == "tool_use"  # type: ignore[attr-defined]
    # Only the final event: the whole response is in it.
    assert kinds(decode_stream([sse(completed(message))])) == [
        "ResponseStarted",
        "AssistantText",
        "UnknownArtifact",
        "ResponseEnded",
    ]
    record(events)


def test_a_progress_event_without_its_item_announces_it() -> None:
    search = {
        "id": "ws_1",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "q"},
    }
    cut = sse(CREATED, event("web_search_call.in_progress", 0, "ws_1"))
    events = list(decode_stream([cut]))
    [activity] = only(events, HostedActivity)
    assert activity.state == "started" and activity.activity_id == "ws_1"
    whole = sse(
        CREATED, event("web_search_call.in_progress", 0, "ws_1"), done(0, search), completed(search)
    )
    states = [a.state for a in only(decode_stream([whole]), HostedActivity)]
    assert states == ["started", "completed"]
    record(events)


def test_incomplete_and_failed_final_events() -> None:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "incomplete",
        "content": [{"type": "output_text", "text": "Long", "annotations": []}],
    }
    final = completed(message, status="incomplete")
    final["response"]["incomplete_details"] = {"reason": "content_filter"}
    end = list(decode_stream([sse(CREATED, final)]))[-1]
    assert isinstance(end, ResponseEnded)
    assert (end.state, end.finish_reason, end.stop_reason) == (
        "completed",
        "content_filter",
        "content_filter",
    )
    failed = completed(status="failed")
    failed["response"]["error"] = {"code": "server_error", "message": "Boom"}
    end = list(decode_stream([sse(CREATED, failed)]))[-1]
    assert isinstance(end, ResponseEnded) and end.state == "failed"
    assert end.error is not None and (end.error.type, end.error.message) == ("server_error", "Boom")


def test_malformed_json_ends_the_stream_there() -> None:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "kept", "annotations": []}],
    }
    body = sse(
        CREATED,
        done(0, message),
        '{"type": "response.output_item.added", "output_index": 1, "item": {"type": "me',
        done(2, {**message, "id": "msg_2"}),
        completed(message),
    )
    events = list(decode_stream([body]))
    assert kinds(events) == ["ResponseStarted", "AssistantText", "UnknownArtifact", "ResponseEnded"]
    assert events[1].text == "kept"  # type: ignore[attr-defined]
    end = events[-1]
    assert isinstance(end, ResponseEnded) and end.state == "abandoned"
    assert end.error is not None and end.error.type == "malformed_stream"


def test_done_marker_and_trailing_input_are_not_read() -> None:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Hi", "annotations": []}],
    }
    cut = list(decode_stream([sse(CREATED, "[DONE]", done(0, message))]))
    assert kinds(cut) == ["ResponseStarted", "UnknownArtifact", "ResponseEnded"]
    assert cut[-1].state == "abandoned"  # type: ignore[attr-defined]
    whole = list(decode_stream([sse(CREATED, completed(message), "[DONE]", "junk")]))
    assert whole[-1].state == "completed"  # type: ignore[attr-defined]


def test_stray_and_unknown_events_are_kept_as_stream_events() -> None:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    body = sse(
        {"type": "response.prelude", "n": 1},
        CREATED,
        added(0, message),
        event("output_text.delta", 0, "msg_1", content_index=0, delta=7),  # malformed
        event("output_text.delta", 0, "msg_other", content_index=0, delta="x"),  # another item
        event("output_text.delta", 5, "msg_5", content_index=0, delta="no such item"),
        event("hologram.delta", 0, "msg_1", delta="?"),
        completed({**message, "status": "completed"}),
    )
    events = list(decode_stream([body]))
    kept = [
        payload_json(e)
        for e in only(events, UnknownArtifact)
        if e.payload.format != "response_fields"
    ]
    assert [k["type"] for k in kept] == [
        "response.prelude",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.hologram.delta",
        "message",  # a message with no text part: kept whole
    ]
    record(events)


def test_calls_that_cannot_be_requested() -> None:
    calls = [
        {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "f", "arguments": "{",
         "status": "completed"},
        {"id": "fc_2", "type": "function_call", "call_id": "c2", "name": "f",
         "arguments": '{"a": 1}', "status": "incomplete"},
        {"id": "fc_3", "type": "function_call", "call_id": "c3", "name": "f", "arguments": "[1]",
         "status": "completed"},
        {"id": "fc_4", "type": "function_call", "call_id": "c4", "name": "f", "arguments": "",
         "status": "completed"},
        {"id": "fc_5", "type": "function_call", "call_id": "c4", "name": "f", "arguments": "{}",
         "status": "completed"},
        {"id": "cc_1", "type": "custom_tool_call", "call_id": "c6", "name": "sql",
         "input": "SELECT 1"},
    ]  # fmt: skip
    body = json.dumps({**RESPONSE, "status": "completed", "output": calls}).encode()
    events = decode_message(body)
    kept = [payload_json(e).get("id", e.payload.format) for e in only(events, UnknownArtifact)]
    assert kept == ["fc_1", "fc_2", "fc_3", "fc_5", "response_fields"]
    formats = [e.payload.format for e in only(events, UnknownArtifact)]
    assert formats[:4] == ["partial", "partial", "output_item", "output_item"]
    assert [(e.call_id, e.name, e.arguments) for e in only(events, ToolCallRequested)] == [
        ("c4", "f", {}),
        ("c6", "sql", {"input": "SELECT 1"}),
    ]
    record(events)


def test_hosted_item_states() -> None:
    items = [
        {"id": "fs_1", "type": "file_search_call", "status": "incomplete", "queries": ["q"]},
        {"id": "mcp_1", "type": "mcp_call", "server_label": "s", "name": "t",
         "arguments": "not json", "error": "tool exploded"},
        {"id": "ci_1", "type": "code_interpreter_call", "status": "interpreting", "code": "1"},
        {"id": "ws_1", "type": "web_search_call", "status": "completed"},
        {"id": "ws_1", "type": "web_search_call", "status": "completed"},
        {"type": "web_search_call", "status": "completed"},
        "not an object",
    ]  # fmt: skip
    body = json.dumps({**RESPONSE, "status": "completed", "output": items}).encode()
    events = decode_message(body)
    assert [(a.activity_id, a.state, a.summary, a.input) for a in only(events, HostedActivity)] == [
        ("fs_1", "started", "", {"queries": ["q"]}),
        ("fs_1", "failed", "incomplete", {"queries": ["q"]}),
        ("mcp_1", "started", "", {"arguments": "not json"}),
        ("mcp_1", "failed", "tool exploded", {"arguments": "not json"}),
        ("ci_1", "started", "", {"code": "1"}),  # still running: the item rides with it
        ("ws_1", "started", "", {}),
        ("ws_1", "completed", "done", {}),
    ]
    unknown = [e.payload.format for e in only(events, UnknownArtifact)]
    assert unknown == ["output_item", "output_item", "output_item", "response_fields"]
    record(events)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   ",
        b"hello",
        b"[1, 2]",
        b'{"object": "list", "id": "x"}',
        b'{"id": "resp_1"}',
        b'{"error": null}',
        b'{"id": "resp_1", "object": "response", "output": {}}',
        sse({"type": "response.output_text.delta", "output_index": 0, "delta": "x"}),
        sse({"type": "response.created", "response": {"object": "response"}}),
        sse({"type": "response.created"}),
        b'data: {"type": "response.crea',
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


def test_an_error_event_before_response_created_is_a_failed_response() -> None:
    body = sse({"type": "error", "code": "rate_limit_exceeded", "message": "Slow down"})
    events = list(decode_stream([body]))
    assert kinds(events) == ["ResponseStarted", "ResponseEnded"]
    end = events[1]
    assert isinstance(end, ResponseEnded) and end.error is not None
    assert end.error.type == "rate_limit_exceeded"
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
    json.dumps(CREATED),
    json.dumps(added(0, {"id": "msg_1", "type": "message", "content": []})),
    json.dumps(
        added(
            0, {"id": "fc_1", "type": "function_call", "call_id": "c", "name": "f", "arguments": ""}
        )
    ),
    json.dumps(added(1, {"id": "ws_1", "type": "web_search_call"})),
    json.dumps(added(2, {"id": "rs_1", "type": "reasoning", "summary": []})),
    json.dumps(
        event(
            "content_part.added",
            0,
            "msg_1",
            content_index=0,
            part={"type": "output_text", "text": ""},
        )
    ),
    json.dumps(event("output_text.delta", 0, "msg_1", content_index=0, delta="x")),
    json.dumps(event("refusal.delta", 0, "msg_1", content_index=1, delta="no")),
    json.dumps(
        event(
            "output_text.annotation.added",
            0,
            "msg_1",
            content_index=0,
            annotation={"type": "url_citation", "start_index": 0, "end_index": 9},
        )
    ),
    json.dumps(event("function_call_arguments.delta", 0, "fc_1", delta='{"a"')),
    json.dumps(event("reasoning_summary_text.delta", 2, "rs_1", summary_index=0, delta="r")),
    json.dumps(event("web_search_call.searching", 1, "ws_1")),
    json.dumps(event("web_search_call.in_progress", 3, "ws_3")),
    json.dumps(
        done(
            0,
            {
                "id": "msg_1",
                "type": "message",
                "content": [{"type": "output_text", "text": "hi", "annotations": []}],
            },
        )
    ),
    json.dumps(
        done(
            0,
            {"id": "fc_1", "type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        )
    ),
    json.dumps(done(1, {"id": "ws_1", "type": "web_search_call", "status": "completed"})),
    json.dumps(done(2, {"id": "rs_1", "type": "reasoning", "summary": []})),
    json.dumps(completed()),
    json.dumps(completed({"id": "ws_9", "type": "web_search_call"}, status="incomplete")),
    '{"type": "error", "code": "server_error", "message": "x"}',
    '{"type": "response.output_item.added", "output_index": "zero", "item": []}',
    "[]",
    "[DONE]",
]
"""Stream event data, well-formed and not, to shuffle."""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=20)), max_size=25))
def test_arbitrary_event_sequences_give_valid_drafts(datas: list[str]) -> None:
    body = "".join(f"data: {d}\n\n" for d in datas).encode()
    events = decode_or_refuse([body])
    if events is not None:
        record(events)


def test_a_stream_of_only_unknown_events_is_not_a_response() -> None:
    with pytest.raises(DecodeError, match=r"no response\.created"):
        list(decode_stream([sse(*[{"type": "mystery"}] * 100, CREATED)]))


def huge(value: Any) -> str:
    """JSON with 1e400 wherever `value` says HUGE."""
    return json.dumps(value).replace('"HUGE"', "1e400")


def test_numbers_out_of_range_are_kept_not_raised() -> None:
    """1e400 is well-formed JSON that msgspec will not decode: never a crash."""
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    text_part = {"type": "output_text", "text": "", "annotations": []}
    body = sse(
        huge({"type": "response.created", "response": {**RESPONSE, "model": "HUGE"}}),
        added(0, message),
        event("content_part.added", 0, "msg_1", content_index=0, part=text_part),
        event("output_text.delta", 0, "msg_1", content_index=0, delta="Hi"),
        huge(event("output_text.annotation.added", 0, "msg_1", content_index=0,
                   annotation={"type": "url_citation", "start_index": "HUGE"})),
        huge(added(1, {"id": "x_1", "type": "widget", "n": "HUGE"})),
        huge(event("output_text.delta", 0, "msg_1", content_index=0, delta="HUGE")),
        huge({"type": "response.completed", "response": {**RESPONSE, "status": "HUGE"}}),
    )  # fmt: skip
    events = list(decode_stream([body]))
    assert kinds(events) == [
        "ResponseStarted",
        "UnknownArtifact",
        "UnknownArtifact",
        "UnknownArtifact",
        "AssistantText",
        "UnknownArtifact",
        "ResponseEnded",
    ]
    assert events[-1].state == "completed"  # type: ignore[attr-defined]
    record(events)
    whole = huge({**RESPONSE, "usage": "HUGE", "output": [{"id": "x", "n": "HUGE"}]})
    drafts = list(decode_message(whole.encode()))
    assert kinds(drafts) == [
        "ResponseStarted",
        "UnknownArtifact",
        "UnknownArtifact",
        "UnknownArtifact",
        "ResponseEnded",
    ]
    # Scenario 37: a usage that is not an object is kept raw, whole.
    assert isinstance(drafts[3], UnknownArtifact) and drafts[3].payload.raw == b'{"usage":1e400}'
    with pytest.raises(DecodeError):
        RequestContext.from_body(huge({"max_output_tokens": "HUGE"}).encode())


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
ITEM_TYPES = [
    "message", "reasoning", "function_call", "custom_tool_call", "computer_call",
    "web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call",
    "mcp_call", "mcp_list_tools", "quantum_widget",
]  # fmt: skip
FIELDS = ["id", "call_id", "name", "arguments", "status", "content", "summary", "action",
          "queries", "results", "code", "outputs", "error", "server_label", "input",
          "encrypted_content", "content/0", "content/0/text", "summary/1/done"]  # fmt: skip


@st.composite
def odd_items(draw: st.DrawFn) -> dict[str, Any]:
    """Items of known types whose fields hold any JSON at all."""
    fields = draw(st.dictionaries(st.sampled_from(FIELDS), JSON_VALUES, max_size=7))
    if draw(st.booleans()):
        parts = st.fixed_dictionaries(
            {"type": st.sampled_from(["output_text", "refusal", "summary_text", "x"])},
            optional={"text": JSON_VALUES, "refusal": JSON_VALUES, "annotations": JSON_VALUES},
        )
        fields[draw(st.sampled_from(["content", "summary"]))] = draw(st.lists(parts, max_size=3))
    return {"type": draw(st.sampled_from(ITEM_TYPES)), **fields}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(odd_items(), max_size=6), st.booleans())
def test_items_of_any_shape_give_valid_drafts(items: list[dict[str, Any]], cut: bool) -> None:
    whole = {**RESPONSE, "status": "completed", "output": items}
    record(decode_message(json.dumps(whole).encode()))
    events: list[dict[str, Any] | str] = [CREATED]
    for index, item in enumerate(items):
        item_id = item.get("id") if isinstance(item.get("id"), str) else None
        events.append(added(index, item))
        for kind, fields in (
            ("output_text.delta", {"content_index": 0, "delta": "t"}),
            ("output_text.annotation.added", {"content_index": 1, "annotation": {"a": 1}}),
            ("refusal.delta", {"content_index": 2, "delta": "r"}),
            ("reasoning_summary_text.delta", {"summary_index": 0, "delta": "s"}),
            ("function_call_arguments.delta", {"delta": '{"k": 1}'}),
            ("code_interpreter_call_code.delta", {"delta": "print()"}),
            ("web_search_call.searching", {}),
        ):
            events.append({"type": f"response.{kind}", "output_index": index,
                           "item_id": item_id, **fields})  # fmt: skip
        if not cut:
            events.append(done(index, item))
    if not cut:
        events.append(completed(*items))
    record(list(decode_stream([sse(*events)])))
