"""The portable reading: a fold over every example capture and over generated conversations."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings

from convstore.adapters.recording import jobs
from convstore.adapters.wire.names import PROVIDERS
from convstore.domain import (
    ActivityId,
    CallId,
    Conversation,
    ConversationId,
    ConversationService,
    Display,
    Event,
    HostedActivity,
    Notice,
    PayloadReading,
    ProviderPayload,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    Source,
    ToolCallRequested,
    ToolCallResponded,
    TurnId,
    TurnStarted,
    UnknownArtifact,
)
from convstore.domain.errors import ConversationNotFound
from convstore.projections import export, portable
from convstore.projections.portable import (
    ActivityItem,
    PortableConversation,
    ReasoningItem,
    ResponseItem,
    TextItem,
    ToolCallItem,
    UnknownItem,
    UserItem,
)
from convstore.storage import Store, open_store
from tests import sample_conversation as sample
from tests.strategies import conversation_drafts

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
OPAQUE_KEYS = frozenset(
    {
        "signature",
        "encrypted_content",
        "encrypted_index",
        "thoughtSignature",
        "thought_signature",
        "data",
        "renderedContent",
    }
)
"""Keys whose string values are opaque (or, for Gemini's Search Suggestion, display HTML)."""


# --- the example captures, ingested ---------------------------------------------------------


def ingest_examples(service: ConversationService) -> dict[str, list[ConversationId]]:
    """Every example capture, through `jobs.ingest`: a sequence's exchanges into one
    conversation, and an exchange that does not continue it into one of its own."""
    found: dict[str, list[ConversationId]] = {}
    for provider in PROVIDERS:
        for folder in sorted(p for p in (EXAMPLES / provider).iterdir() if p.is_dir()):
            name = f"{provider}/{folder.name}"
            responses = sorted(folder.glob("*.response.*"), key=lambda p: int(p.name.split(".")[0]))
            current: ConversationId | None = None
            for response in responses:
                request = (folder / f"{response.name.split('.')[0]}.request.json").read_bytes()
                report = jobs.ingest(
                    service, provider, [response], request=request, conversation_id=current
                )
                if report.exit_code == 2 and current is not None:  # not a continuation
                    report = jobs.ingest(service, provider, [response], request=request)
                assert report.exit_code in (0, 3), f"{response}: {report.error}"
                assert report.conversation_id is not None
                current = report.conversation_id
                if current not in found.setdefault(name, []):
                    found[name].append(current)
    return found


def _strings_under(data: Any, keys: frozenset[str]) -> Iterator[str]:
    if isinstance(data, dict):
        for key, value in data.items():
            if key in keys and isinstance(value, str) and len(value) >= 16:
                yield value
            yield from _strings_under(value, keys)
    elif isinstance(data, list):
        for value in data:
            yield from _strings_under(value, keys)


def _documents(path: Path) -> Iterator[Any]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        yield json.loads(text)
        return
    for line in text.splitlines():
        data = line[5:].strip()
        if line.startswith("data:") and data.startswith(("{", "[")) and data != "[DONE]":
            yield json.loads(data)


def opaque_values(events: list[Event] | None = None) -> set[str]:
    """Every opaque string of the example captures (and of `events`' payloads)."""
    found: set[str] = set()
    for path in EXAMPLES.glob("*/*/*.*.*"):
        if path.suffix in {".json", ".sse"} and not path.name.endswith("meta.json"):
            for document in _documents(path):
                found.update(_strings_under(document, OPAQUE_KEYS))
    for event in events or ():
        payload = getattr(event, "payload", None)
        if isinstance(payload, ProviderPayload):
            found.update(_strings_under(json.loads(payload.raw), OPAQUE_KEYS))
        display = getattr(event, "display", None)
        if isinstance(display, Display) and len(display.content) >= 16:
            found.add(display.content)
    return found


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, dict[str, Any]]]:
    """A store holding every example capture, and the conversation ids by sequence."""
    folder = tmp_path_factory.mktemp("examples")
    with open_store(f"sqlite:///{folder / 'store.db'}") as store:
        yield store, ingest_examples(store.service)


def only(store: Store, ids: dict[str, Any], name: str) -> PortableConversation:
    """The reading of the (first) conversation of an example sequence."""
    return portable.load(store.service, ids[name][0])


def items(conversation: PortableConversation, kind: type[Any]) -> list[Any]:
    return [i for turn in conversation.turns for i in turn.items if isinstance(i, kind)]


# --- the fold over real captures ------------------------------------------------------------


def test_every_capture_folds_and_its_json_decodes_back_equal(
    examples: tuple[Store, dict[str, Any]],
) -> None:
    store, ids = examples
    for name, conversations in ids.items():
        for conversation_id in conversations:
            events = list(store.service.events(conversation_id))
            reading = portable.fold(events)
            assert reading.id == conversation_id and reading.version == len(events), name
            assert reading.schema == portable.SCHEMA
            document = export.json_document(reading).encode()
            assert portable.DECODER.decode(document) == reading, name
            # Every response event is accounted for: one response item per ResponseStarted.
            started = {e.response_id for e in events if isinstance(e, ResponseStarted)}
            assert {r.id for r in items(reading, ResponseItem)} == started, name


def test_web_search_reads_as_one_search_and_cited_text(
    examples: tuple[Store, dict[str, Any]],
) -> None:
    store, ids = examples
    reading = only(store, ids, "anthropic/web_search_citations")
    (turn,) = reading.turns
    assert (turn.trigger, turn.state) == ("user", "completed")
    (response,) = items(reading, ResponseItem)  # the non-streamed copy was not stored again
    assert (response.provider, response.state, response.finish_reason) == (
        "anthropic",
        "completed",
        "stop",
    )
    assert response.stop_reason == "end_turn"
    assert response.usage is not None and response.usage.hosted == {"web_search_requests": 1}
    assert [(t.name, t.hosted) for t in response.tools] == [("web_search", True)]
    (search,) = items(reading, ActivityItem)
    assert (search.name, search.state, search.summary) == ("web_search", "completed", "3 results")
    assert search.input == {"query": "Uji matcha cafés 宇治抹茶"}
    assert [t.state for t in search.transitions] == ["started", "completed"]
    cited = [c for text in items(reading, TextItem) for c in text.citations]
    assert len(cited) == 4
    for citation in cited:
        source = citation.source
        assert source.kind == "web" and source.url and source.title
        assert citation.excerpt
    texts = items(reading, TextItem)
    for text in texts:
        for citation in text.citations:
            assert citation.range is None or 0 <= citation.range.end <= len(text.text)


def test_tool_calls_carry_their_results_and_reasoning_is_text_or_redacted(
    examples: tuple[Store, dict[str, Any]],
) -> None:
    store, ids = examples
    for name in ("anthropic/thinking_tool_roundtrip", "openai/reasoning_function_roundtrip"):
        reading = only(store, ids, name)
        (call,) = items(reading, ToolCallItem)
        assert call.name == "get_weather" and call.arguments, name
        assert call.result is not None and not call.result.synthetic, name
        assert "precipitation_probability" in call.result.content, name
        assert call.result.version > call.version
        reasoning = items(reading, ReasoningItem)
        assert [r.redacted for r in reasoning] == [False, True], name
        assert reasoning[0].text and reasoning[1].text == "", name


def test_an_activity_across_responses_is_one_item(examples: tuple[Store, dict[str, Any]]) -> None:
    store, ids = examples
    reading = only(store, ids, "anthropic/mixed_batch")
    first, second = items(reading, ResponseItem)
    (search,) = items(reading, ActivityItem)
    assert search.response_id == first.id and search.state == "completed"
    assert [(t.state, t.response_id) for t in search.transitions] == [
        ("started", first.id),
        ("completed", second.id),
    ]
    (call,) = items(reading, ToolCallItem)
    assert call.name == "lookup_order" and call.result is not None


def test_a_cut_stream_says_so(examples: tuple[Store, dict[str, Any]]) -> None:
    store, ids = examples
    reading = only(store, ids, "anthropic/errors")
    (response,) = items(reading, ResponseItem)
    assert response.state == "failed" and response.error is not None
    assert response.error.type == "overloaded_error"
    (text,) = items(reading, TextItem)
    assert not text.citations_complete
    assert reading.turns[0].state == "failed"


def test_unknown_artifacts_are_placeholders_and_displays_obligations(
    examples: tuple[Store, dict[str, Any]],
) -> None:
    store, ids = examples
    unknown = [
        u
        for c in ids["anthropic/errors"]
        for u in items(portable.load(store.service, c), UnknownItem)
    ]
    assert unknown and all(u.provider == "anthropic" and u.size > 0 for u in unknown)
    (search,) = items(only(store, ids, "google/grounding_search_stream"), ActivityItem)
    assert search.display is not None
    assert (search.display.kind, search.display.content_type) == ("search_suggestion", "text/html")
    assert search.input["queries"]


def test_file_citations_keep_their_ids(examples: tuple[Store, dict[str, Any]]) -> None:
    store, ids = examples
    reading = only(store, ids, "openai/file_search_citation")
    sources = [c.source for t in items(reading, TextItem) for c in t.citations]
    assert sources and all(s.kind == "file" and s.id for s in sources)


# --- the fold's shape -----------------------------------------------------------------------


def test_the_sample_conversation_folds_in_event_order() -> None:
    with open_store("sqlite:///:memory:") as store:
        conversation_id = sample.build(store.service)
        events = list(store.service.events(conversation_id))
    reading = portable.fold(events)
    assert reading.title == sample.TITLE_OF_CONVERSATION
    assert reading.labels == list(sample.LABELS)
    assert reading.created == events[0].timestamp
    kinds = [item.__struct_config__.tag for turn in reading.turns for item in turn.items]
    assert kinds[0] == "user" and kinds[1] == "response"
    assert kinds.count("response") == 2 and kinds.count("activity") == 1
    assert kinds.count("tool_call") == 1  # its result is folded into it
    (call,) = items(reading, ToolCallItem)
    assert call.call_id == sample.WEATHER and call.result is not None
    (user,) = items(reading, UserItem)
    assert user.blocks == [sample.QUESTION]


def test_the_fold_is_incremental() -> None:
    with open_store("sqlite:///:memory:") as store:
        events = list(store.service.events(sample.build(store.service)))
    reader = portable.PortableFold()
    snapshots = []
    for event in events:
        reader.add(event)
        snapshots.append(export.json_document(reader.conversation))
    assert reader.conversation == portable.fold(events)
    for n, snapshot in enumerate(snapshots, 1):
        assert snapshot == export.json_document(portable.fold(events[:n]))


def test_load_and_load_all(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        service = store.service
        made = [service.start(f"c{n}") for n in range(5)]
        assert [c.id for c in portable.load_all(service, page=2)] == made
        assert portable.load(service, made[3]).title == "c3"
        with pytest.raises(ConversationNotFound):
            portable.load(service, ConversationId(uuid4()))


def test_events_outside_a_turn_and_orphans_are_kept_not_dropped() -> None:
    r1 = ResponseId("r1")
    events = _recorded(
        ResponseStarted(response_id=r1, provider="acme"),
        UnknownArtifact(
            response_id=r1, payload=ProviderPayload.of("acme", "blob", b'{"secret":"x"}')
        ),
        ResponseEnded(response_id=r1, state="abandoned"),
        TurnStarted(turn_id=TurnId("t1")),
    )
    reading = portable.fold(events)
    assert [t.id for t in reading.turns] == [None, "t1"]
    response, unknown = reading.turns[0].items
    assert isinstance(response, ResponseItem) and response.state == "abandoned"
    assert isinstance(unknown, UnknownItem) and unknown.size == len(b'{"secret":"x"}')


def test_a_typed_payload_reads_as_notices_and_sources_alone_stay_unknown() -> None:
    """What `interpret` types: notices attach to the response and replace the placeholder;
    a kind with nothing to say leaves nothing; sources alone belong to an activity, so an
    artifact reading only as sources stays a placeholder. Without `interpret`, every
    artifact is a placeholder."""
    r1 = ResponseId("r1")
    kinds = ("notice", "silent", "sources", "other")
    events = _recorded(
        ResponseStarted(response_id=r1, provider="acme"),
        *(
            UnknownArtifact(response_id=r1, payload=ProviderPayload.of("acme", kind, b"{}"))
            for kind in kinds
        ),
        ResponseEnded(response_id=r1, state="completed"),
    )
    readings = {
        "notice": PayloadReading(notices=(Notice(kind="refusal", code="cyber"),)),
        "silent": PayloadReading(),
        "sources": PayloadReading(sources=(Source(kind="web", url="https://example.com"),)),
    }
    reading = portable.fold(events, lambda payload: readings.get(payload.format))
    response, *rest = reading.turns[0].items
    assert isinstance(response, ResponseItem)
    assert [(n.kind, n.code) for n in response.notices] == [("refusal", "cyber")]
    assert [item.format for item in rest if isinstance(item, UnknownItem)] == ["sources", "other"]
    plain = portable.fold(events).turns[0].items
    assert [item.format for item in plain if isinstance(item, UnknownItem)] == list(kinds)


def _recorded(*drafts: Event) -> list[Event]:
    conversation = Conversation.start("t", [])
    conversation.record_all(drafts)
    return conversation.collect_events()


def test_a_pending_activity_abandoned_later_folds_into_its_item() -> None:
    r1, a1 = ResponseId("r1"), ActivityId("a1")
    events = _recorded(
        ResponseStarted(response_id=r1, provider="anthropic"),
        HostedActivity(
            activity_id=a1, name="web_search", state="started", response_id=r1, input={"query": "q"}
        ),
        ToolCallRequested(response_id=r1, call_id=CallId("c1"), name="f"),
        ResponseEnded(response_id=r1, state="completed", finish_reason="tool_use"),
        HostedActivity(activity_id=a1, name="web_search", state="abandoned"),
        ToolCallResponded(call_id=CallId("c1"), content="", is_error=True, synthetic=True),
    )
    reading = portable.fold(events)
    (activity,) = items(reading, ActivityItem)
    assert activity.state == "abandoned" and activity.input == {"query": "q"}
    assert [t.response_id for t in activity.transitions] == [r1, None]
    (call,) = items(reading, ToolCallItem)
    assert call.result is not None and call.result.synthetic and call.result.is_error


# --- the schema ------------------------------------------------------------------------------

V1_FIELDS = {
    "PortableConversation": {"schema", "id", "title", "labels", "created", "version", "turns"},
    "Turn": {"id", "trigger", "state", "reason", "version", "items"},
    "UserItem": {"version", "blocks"},
    "ContextItem": {"version", "source", "text"},
    "ResponseItem": {
        "version",
        "id",
        "provider",
        "model",
        "origin",
        "system",
        "tools",
        "state",
        "finish_reason",
        "stop_reason",
        "usage",
        "error",
        "end_version",
    },
    "TextItem": {"version", "response_id", "text", "citations", "citations_complete"},
    "ReasoningItem": {"version", "response_id", "text", "redacted"},
    "ToolCallItem": {"version", "response_id", "call_id", "name", "arguments", "result"},
    "ToolResult": {"version", "content", "is_error", "synthetic"},
    "ActivityItem": {
        "version",
        "response_id",
        "activity_id",
        "name",
        "state",
        "input",
        "summary",
        "display",
        "transitions",
    },
    "UnknownItem": {"version", "response_id", "provider", "format", "size"},
    "Citation": {"source", "excerpt", "range"},
    "CitedSource": {"kind", "url", "title", "id", "location"},
    "DisplayObligation": {"kind", "content_type"},
}
"""Version 1's fields: the rule allows adding fields with defaults, never taking one away."""


def _structs(kind: Any, seen: dict[str, type[msgspec.Struct]]) -> dict[str, type[msgspec.Struct]]:
    info = msgspec.inspect.type_info(kind)
    stack: list[Any] = [info]
    while stack:
        node = stack.pop()
        if isinstance(node, msgspec.inspect.StructType):
            if node.cls.__name__ in seen:
                continue
            seen[node.cls.__name__] = node.cls
            stack.extend(field.type for field in node.fields)
        elif isinstance(node, msgspec.inspect.UnionType):
            stack.extend(node.types)
        elif isinstance(node, msgspec.inspect.ListType | msgspec.inspect.DictType):
            stack.extend(
                [node.item_type]
                if isinstance(node, msgspec.inspect.ListType)
                else [node.key_type, node.value_type]
            )
    return seen


def test_the_schema_keeps_version_1_and_has_no_place_for_a_payload() -> None:
    structs = _structs(PortableConversation, {})
    for name, fields in V1_FIELDS.items():
        assert fields <= set(structs[name].__struct_fields__), name
    every_field = {f for cls in structs.values() for f in cls.__struct_fields__}
    assert not every_field & {"payload", "replay", "value", "binding", "content_html"}
    assert "content" not in structs["DisplayObligation"].__struct_fields__
    for cls in structs.values():
        assert cls.__module__ == "convstore.projections.portable", cls  # no domain value leaks
        for field in cls.__struct_fields__:
            assert cls.__doc__, cls
            assert field in _documented(cls), f"{cls.__name__}.{field} has no docstring"


def _documented(cls: type) -> set[str]:
    import ast
    import inspect

    names: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("convstore"):
            continue
        body = ast.parse(inspect.getsource(klass)).body[0]
        assert isinstance(body, ast.ClassDef)
        for statement, following in zip(body.body, body.body[1:], strict=False):
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
            ):
                names.add(statement.target.id)
    return names


def test_a_document_of_another_version_is_refused() -> None:
    with open_store("sqlite:///:memory:") as store:
        reading = portable.load(store.service, sample.build(store.service))
    document = json.loads(export.json_document(reading))
    document["schema"] = "convstore.portable/2"
    with pytest.raises(msgspec.ValidationError):
        portable.DECODER.decode(json.dumps(document).encode())


# --- generated conversations ----------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation_drafts())
def test_any_conversation_folds_and_round_trips(drafts: list[Event]) -> None:
    conversation = Conversation.start("generated", [])
    conversation.record_all(drafts[1:])
    events = conversation.collect_events()
    reading = portable.fold(events)
    assert portable.DECODER.decode(export.json_document(reading).encode()) == reading
    turns = [e.turn_id for e in events if isinstance(e, TurnStarted)]
    assert [t.id for t in reading.turns if t.id is not None] == turns
    calls = {e.call_id for e in events if isinstance(e, ToolCallRequested)}
    answered = {e.call_id for e in events if isinstance(e, ToolCallResponded)}
    folded = items(reading, ToolCallItem)
    assert {c.call_id for c in folded} == calls
    assert {c.call_id for c in folded if c.result is not None} == answered
    activities = {e.activity_id: e.state for e in events if isinstance(e, HostedActivity)}
    assert {a.activity_id: a.state for a in items(reading, ActivityItem)} == activities
    ends = {e.response_id: e.state for e in events if isinstance(e, ResponseEnded)}
    assert {r.id: r.state for r in items(reading, ResponseItem) if r.state} == ends
