"""`export --format otel`: GenAI-convention spans of every capture (issue 17, item 3).

The spans go through the SDK's in-memory exporter and are checked against the stored
events (timestamps, usage, ids) and against the pinned `opentelemetry-semantic-conventions`
(every `gen_ai.*` name we write is one of its constants; the provider and operation values
are its well-known ones). The OTLP JSON file is parsed back with `opentelemetry-proto`,
and a real HTTP receiver on 127.0.0.1 decodes the protobuf body the OTLP exporter sends.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from uuid import UUID

import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as semconv
from opentelemetry.semconv.attributes import error_attributes, server_attributes
from opentelemetry.trace import SpanKind, StatusCode

from convstore.adapters import cli
from convstore.adapters.cli.integrity import EXIT_BROKEN
from convstore.adapters.terminal.render import sanitize
from convstore.adapters.wire.providers import read_payload
from convstore.domain import ConversationId, Event, ResponseEnded, ResponseStarted
from convstore.projections import otel, otlp, portable
from convstore.projections.portable import ActivityItem, ResponseItem, ToolCallItem, UserItem
from convstore.storage import Store, open_store
from tests.test_chain_on_read import tampered
from tests.test_export import SECRET, hostile_events, hostile_texts
from tests.test_json_schemas import _check as check_schema
from tests.test_portable import ingest_examples, items, opaque_values

__all__ = ["tampered"]  # the fixture, shared with the chain-on-read tests

ROOT = Path(__file__).resolve().parent.parent
PROVIDERS = ("anthropic", "openai", "google", "openai-chat")
CONTENT = (
    otel.INPUT_MESSAGES,
    otel.OUTPUT_MESSAGES,
    otel.SYSTEM_INSTRUCTIONS,
    otel.TOOL_DEFINITIONS,
    otel.TOOL_ARGUMENTS,
    otel.TOOL_RESULT,
)


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("otel-examples")
    with open_store(f"sqlite:///{folder / 'store.db'}") as store:
        yield store, ingest_examples(store.service)


def traced(store: Store, conversation: ConversationId) -> otel.TracedConversation:
    return otel.read(store.service.history(conversation), read_payload)


def every(
    examples: tuple[Store, dict[str, Any]],
) -> Iterator[tuple[str, list[Event], otel.TracedConversation]]:
    store, ids = examples
    for name, conversations in sorted(ids.items()):
        for conversation in conversations:
            events = store.service.history(conversation)
            yield name, events, otel.read(events, read_payload)


def exported(trace: list[ReadableSpan]) -> tuple[ReadableSpan, ...]:
    """The spans as the SDK's in-memory exporter holds them."""
    exporter = InMemorySpanExporter()
    assert otlp.send(trace, exporter)
    return exporter.get_finished_spans()


def nanoseconds(event: Event) -> int:
    return round(event.timestamp.timestamp() * 1_000_000) * 1000


def semconv_names() -> set[str]:
    return {
        value
        for name, value in vars(semconv).items()
        if name.startswith("GEN_AI_") and isinstance(value, str)
    }


# --- the names and values, against the pinned conventions ----------------------------------


def test_attribute_names_are_the_pinned_conventions() -> None:
    assert otel.OPERATION == semconv.GEN_AI_OPERATION_NAME
    assert otel.PROVIDER == semconv.GEN_AI_PROVIDER_NAME == "gen_ai.provider.name"
    assert otel.CONVERSATION == semconv.GEN_AI_CONVERSATION_ID
    assert otel.REQUEST_MODEL == semconv.GEN_AI_REQUEST_MODEL
    assert otel.REQUEST_MAX_TOKENS == semconv.GEN_AI_REQUEST_MAX_TOKENS
    assert otel.RESPONSE_MODEL == semconv.GEN_AI_RESPONSE_MODEL
    assert otel.RESPONSE_ID == semconv.GEN_AI_RESPONSE_ID
    assert otel.FINISH_REASONS == semconv.GEN_AI_RESPONSE_FINISH_REASONS
    assert otel.INPUT_TOKENS == semconv.GEN_AI_USAGE_INPUT_TOKENS
    assert otel.OUTPUT_TOKENS == semconv.GEN_AI_USAGE_OUTPUT_TOKENS
    assert otel.CACHE_READ_TOKENS == semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
    assert otel.CACHE_CREATION_TOKENS == semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
    assert otel.REASONING_TOKENS == semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS
    assert otel.INPUT_MESSAGES == semconv.GEN_AI_INPUT_MESSAGES
    assert otel.OUTPUT_MESSAGES == semconv.GEN_AI_OUTPUT_MESSAGES
    assert otel.SYSTEM_INSTRUCTIONS == semconv.GEN_AI_SYSTEM_INSTRUCTIONS
    assert otel.TOOL_DEFINITIONS == semconv.GEN_AI_TOOL_DEFINITIONS
    assert otel.TOOL_NAME == semconv.GEN_AI_TOOL_NAME
    assert otel.TOOL_CALL_ID == semconv.GEN_AI_TOOL_CALL_ID
    assert otel.TOOL_TYPE == semconv.GEN_AI_TOOL_TYPE
    assert otel.TOOL_ARGUMENTS == semconv.GEN_AI_TOOL_CALL_ARGUMENTS
    assert otel.TOOL_RESULT == semconv.GEN_AI_TOOL_CALL_RESULT
    assert otel.ERROR_TYPE == error_attributes.ERROR_TYPE
    assert otel.SERVER_ADDRESS == server_attributes.SERVER_ADDRESS
    assert otel.SERVER_PORT == server_attributes.SERVER_PORT
    # The deprecated name is never written.
    assert semconv.GEN_AI_SYSTEM != otel.PROVIDER


def test_provider_and_operation_values_are_well_known() -> None:
    known = {member.value for member in semconv.GenAiProviderNameValues}
    assert set(otel.PROVIDER_NAMES.values()) <= known
    assert set(otel.SERVERS.values()) <= known
    operations = {member.value for member in semconv.GenAiOperationNameValues}
    assert {"chat", "execute_tool", *otel.OPERATIONS.values()} <= operations


# --- the spans of every capture -------------------------------------------------------------


def test_every_gen_ai_name_written_is_a_convention(
    examples: tuple[Store, dict[str, Any]],
) -> None:
    names = semconv_names()
    seen: set[str] = set()
    for _, _, conversation in every(examples):
        for span in exported(otel.spans(conversation)):
            seen.update(span.attributes or {})
    gen_ai = {name for name in seen if name.startswith("gen_ai.")}
    assert gen_ai <= names, gen_ai - names
    assert {otel.PROVIDER, otel.INPUT_MESSAGES, otel.TOOL_CALL_ID} <= gen_ai
    assert semconv.GEN_AI_SYSTEM not in seen
    others = {name for name in seen - gen_ai}
    assert others <= {otel.ERROR_TYPE, otel.SERVER_ADDRESS, otel.SERVER_PORT} | {
        name for name in others if name.startswith("convstore.")
    }


EXPECTED_PROVIDER = {
    "anthropic": "anthropic",
    "openai": "openai",
    "google": "gcp.gemini",
    "openai-chat": "openai",
}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_one_client_span_per_provider_response(
    examples: tuple[Store, dict[str, Any]], provider: str
) -> None:
    checked = 0
    for name, events, conversation in every(examples):
        if not name.startswith(f"{provider}/"):
            continue
        spans = exported(otel.spans(conversation))
        chats = [span for span in spans if span.kind is SpanKind.CLIENT]
        responses = [
            item for item in items(conversation.reading, ResponseItem) if item.origin == "provider"
        ]
        assert [span.attributes[otel.RESPONSE_ID] for span in chats] == [r.id for r in responses]
        started = {e.response_id: e for e in events if isinstance(e, ResponseStarted)}
        ended = {e.response_id: e for e in events if isinstance(e, ResponseEnded)}
        for span, response in zip(chats, responses, strict=True):
            attributes = span.attributes or {}
            operation = "generate_content" if provider == "google" else "chat"
            assert span.name == f"{operation} {response.model}".strip()  # no model: no name
            assert attributes[otel.OPERATION] == operation
            assert attributes[otel.PROVIDER] == EXPECTED_PROVIDER[provider]
            assert attributes.get(otel.RESPONSE_MODEL) == (response.model or None)
            assert attributes.get(otel.REQUEST_MODEL) == (response.model or None)
            assert attributes[otel.CONVERSATION] == str(conversation.id)
            assert span.context.trace_id == conversation.id.int
            # Start and end are the stored events' timestamps.
            start = next(e for e in events if e.originator_version == response.version)
            assert span.start_time == nanoseconds(start)
            assert start is started[response.id] or started[response.id].attempt > 1
            if response.id in ended and response.end_version is not None:
                end = next(e for e in events if e.originator_version == response.end_version)
                assert span.end_time == nanoseconds(end)
            usage = response.usage
            if usage is not None and usage.input_tokens is not None:
                cached = (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0)
                extra = cached if provider == "anthropic" else 0
                assert attributes[otel.INPUT_TOKENS] == usage.input_tokens + extra
            if usage is not None and usage.output_tokens is not None:
                assert attributes[otel.OUTPUT_TOKENS] == usage.output_tokens
            if response.finish_reason is not None:
                finish = otel.FINISH[response.finish_reason]
                assert attributes[otel.FINISH_REASONS] == (finish,)
                assert attributes.get(otel.STOP_REASON) == response.stop_reason
            failed = response.state in ("failed", "abandoned")
            assert (span.status.status_code is StatusCode.ERROR) == failed
            assert (otel.ERROR_TYPE in attributes) == failed
            output = json.loads(str(attributes[otel.OUTPUT_MESSAGES]))
            assert [message["role"] for message in output] == ["assistant"]
            assert output[0]["finish_reason"] == (attributes.get(otel.FINISH_REASONS) or [""])[0]
            checked += 1
    assert checked >= 3


def test_input_messages_carry_the_history_and_tool_answers(
    examples: tuple[Store, dict[str, Any]],
) -> None:
    store, ids = examples
    (conversation,) = ids["anthropic/thinking_tool_roundtrip"][-1:]
    reading = traced(store, conversation)
    chats = [s for s in otel.spans(reading) if s.kind is SpanKind.CLIENT]
    assert len(chats) == 2
    first = json.loads(str((chats[0].attributes or {})[otel.INPUT_MESSAGES]))
    question = items(reading.reading, UserItem)[0].blocks[0]
    assert first == [{"role": "user", "parts": [{"type": "text", "content": question}]}]
    second = json.loads(str((chats[1].attributes or {})[otel.INPUT_MESSAGES]))
    assert [message["role"] for message in second] == ["user", "assistant", "tool"]
    (call,) = items(reading.reading, ToolCallItem)
    requested = [p for p in second[1]["parts"] if p["type"] == "tool_call"]
    assert requested == [
        {"type": "tool_call", "id": call.call_id, "name": call.name, "arguments": call.arguments}
    ]
    assert call.result is not None
    answer = {"type": "tool_call_response", "id": call.call_id, "response": call.result.content}
    assert second[2]["parts"] == [answer]
    assert any(p["type"] == "reasoning" for p in second[1]["parts"])
    # What the first response said is the second's input, not its output.
    output = json.loads(str((chats[0].attributes or {})[otel.OUTPUT_MESSAGES]))
    assert output[0]["parts"] == second[1]["parts"]


def test_a_span_for_each_client_call_and_hosted_activity(
    examples: tuple[Store, dict[str, Any]],
) -> None:
    calls = activities = 0
    for _, events, conversation in every(examples):
        at = {event.originator_version: nanoseconds(event) for event in events}
        spans = exported(otel.spans(conversation))
        chats = {s.attributes[otel.RESPONSE_ID]: s for s in spans if s.kind is SpanKind.CLIENT}
        tools = {
            s.attributes[otel.TOOL_CALL_ID]: s
            for s in spans
            if (s.attributes or {}).get(otel.OPERATION) == "execute_tool"
        }
        for call in items(conversation.reading, ToolCallItem):
            span = tools[call.call_id]
            attributes = span.attributes or {}
            assert (span.name, span.kind) == (f"execute_tool {call.name}", SpanKind.INTERNAL)
            assert attributes[otel.TOOL_NAME] == call.name
            assert attributes[otel.TOOL_TYPE] == "function"
            assert json.loads(str(attributes[otel.TOOL_ARGUMENTS])) == call.arguments
            assert span.start_time == at[call.version]
            if call.result is not None:
                assert span.end_time == at[call.result.version]
                assert attributes[otel.TOOL_RESULT] == call.result.content
            calls += 1
        for activity in items(conversation.reading, ActivityItem):
            span = tools[activity.activity_id]
            attributes = span.attributes or {}
            assert (span.name, span.kind) == (f"execute_tool {activity.name}", SpanKind.INTERNAL)
            assert attributes[otel.TOOL_TYPE] == "extension"
            assert json.loads(str(attributes[otel.TOOL_ARGUMENTS])) == activity.input
            assert span.start_time == at[activity.transitions[0].version]
            assert span.end_time == at[activity.transitions[-1].version]
            parent = chats.get(activity.response_id)
            if parent is not None:  # inside the span of the response that reported it
                assert span.parent is not None
                assert span.parent.span_id == parent.context.span_id
            failed = activity.state in ("failed", "abandoned")
            assert (span.status.status_code is StatusCode.ERROR) == failed
            activities += 1
    assert calls >= 3 and activities >= 10


def test_two_exports_are_identical_and_ids_are_derived(
    examples: tuple[Store, dict[str, Any]],
) -> None:
    store, ids = examples
    for conversations in ids.values():
        for conversation in conversations:
            first = otlp.otlp_json(otel.spans(traced(store, conversation)))
            again = otlp.otlp_json(otel.spans(traced(store, conversation)))
            assert first == again
            data = json.loads(first)
            spans = data["resourceSpans"][0]["scopeSpans"][0]["spans"]
            assert {s["traceId"] for s in spans} == {UUID(str(conversation)).hex}
            span_ids = [s["spanId"] for s in spans]
            assert len(set(span_ids)) == len(span_ids)


def test_no_content_leaves_out_every_message(examples: tuple[Store, dict[str, Any]]) -> None:
    opaque = opaque_values()
    for _, _, conversation in every(examples):
        bare = otlp.otlp_json(otel.spans(conversation, content=False))
        full = otlp.otlp_json(otel.spans(conversation))
        spans = exported(otel.spans(conversation, content=False))
        assert spans and not any(set(s.attributes or {}) & set(CONTENT) for s in spans)
        for user in items(conversation.reading, UserItem):
            for block in user.blocks:
                if len(block) >= 8:
                    assert json.dumps(block)[1:-1] not in bare
        # Same spans, same ids, same times: only the content attributes differ.
        with_content = exported(otel.spans(conversation))
        assert [s.context for s in spans] == [s.context for s in with_content]
        assert [(s.start_time, s.end_time) for s in spans] == [
            (s.start_time, s.end_time) for s in with_content
        ]
        for value in opaque:  # never a signature, encrypted content or raw block
            assert value not in full and value not in bare


# --- OTLP JSON files and the command line ---------------------------------------------------


def parse_otlp_json(line: str) -> ExportTraceServiceRequest:
    """An OTLP JSON line into the protobuf message (OTLP writes ids as hex; protobuf's
    JSON mapping reads base64)."""

    def ids(data: Any) -> Any:
        if isinstance(data, dict):
            return {
                key: base64.b64encode(bytes.fromhex(value)).decode()
                if key in ("traceId", "spanId", "parentSpanId")
                else ids(value)
                for key, value in data.items()
            }
        if isinstance(data, list):
            return [ids(value) for value in data]
        return data

    request = ExportTraceServiceRequest()
    json_format.ParseDict(ids(json.loads(line)), request)
    return request


@pytest.fixture
def small(tmp_path: Path) -> Iterator[tuple[str, list[ConversationId]]]:
    """A store holding one capture of each provider (with tools and hosted work)."""
    url = f"sqlite:///{tmp_path / 'small.db'}"
    captures = {
        "anthropic": "thinking_tool_roundtrip",
        "openai": "hosted_tools",
        "google": "code_execution",
        "openai-chat": "tool_call_stream",
    }
    ids: list[ConversationId] = []
    with open_store(url) as store:
        for provider, folder in captures.items():
            root = ROOT / "examples" / provider / folder
            request = root / "1.request.json"
            response = next(root.glob("1.response.*"))
            argv = ["--db", url, "ingest", "--provider", provider, "--request", str(request)]
            assert cli.main([*argv, str(response), "--json"]) == 0
        ids = [ConversationId(s.id) for s in store.service.list(offset=0, limit=10)]
    yield url, ids


def test_the_file_parses_back_into_the_same_spans(
    small: tuple[str, list[ConversationId]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, ids = small
    capsys.readouterr()
    target = tmp_path / "one.otlp.jsonl"
    argv = ["--db", url, "export", str(ids[0]), "--format", "otel", "-o", str(target), "--json"]
    assert cli.main(argv) == 0
    summary = check_schema("export", capsys.readouterr().out)
    assert summary["format"] == "otel" and summary["files"] == [str(target)]
    (line,) = target.read_text(encoding="utf-8").splitlines()
    with open_store(url) as store:
        expected = encode_spans(otel.spans(traced(store, ids[0])))
    assert parse_otlp_json(line) == expected
    # To stdout, the same line; --all: one line a conversation, in a folder one file each.
    assert cli.main(["--db", url, "export", str(ids[0]), "--format", "otel"]) == 0
    assert capsys.readouterr().out == line + "\n"
    assert cli.main(["--db", url, "export", "--all", "--format", "otel"]) == 0
    lines = capsys.readouterr().out.splitlines()
    traces = [parse_otlp_json(text).resource_spans[0].scope_spans[0].spans for text in lines]
    assert [UUID(bytes=spans[0].trace_id) for spans in traces] == ids
    folder = tmp_path / "all"
    argv = ["--db", url, "export", "--all", "--format", "otel", "-o", str(folder), "--json"]
    assert cli.main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["conversations"] == len(ids)
    files = sorted(folder.iterdir())
    assert all(path.name.endswith(".otlp.jsonl") for path in files)
    assert sorted(summary["files"]) == [str(path) for path in files]
    assert sorted(path.read_text().rstrip("\n") for path in files) == sorted(lines)
    # --no-content: the same spans without messages.
    assert cli.main(["--db", url, "export", str(ids[0]), "--format", "otel", "--no-content"]) == 0
    bare = parse_otlp_json(capsys.readouterr().out)
    keys = {a.key for s in bare.resource_spans[0].scope_spans[0].spans for a in s.attributes}
    assert not keys & set(CONTENT) and otel.PROVIDER in keys


class Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: decodes each protobuf body it is sent."""

    received: ClassVar[list[ExportTraceServiceRequest]] = []
    status: ClassVar[int] = 200

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        assert self.headers["Content-Type"] == "application/x-protobuf"
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        type(self).received.append(request)
        answer = (
            ExportTraceServiceResponse().SerializeToString()
            if self.status == 200
            else b"\x1b]0;pwned\x07 receiver says no"
        )
        self.send_response(self.status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def receiver() -> Iterator[tuple[str, type[Receiver]]]:
    handler = type("TestReceiver", (Receiver,), {"received": [], "status": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_spans_sent_to_an_otlp_receiver(
    small: tuple[str, list[ConversationId]],
    receiver: tuple[str, type[Receiver]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, ids = small
    base, handler = receiver
    capsys.readouterr()
    argv = ["--db", url, "export", "--all", "--format", "otel", "--otlp-endpoint", base, "--json"]
    assert cli.main(argv) == 0
    summary = check_schema("export", capsys.readouterr().out)
    with open_store(url) as store:
        expected = [encode_spans(otel.spans(traced(store, c))) for c in ids]
    assert handler.received == expected  # one request a conversation, decoded as sent
    total = sum(len(r.resource_spans[0].scope_spans[0].spans) for r in expected)
    assert summary == {
        "format": "otel",
        "conversations": len(ids),
        "files": [],
        "chain": {"intact": True, "first_bad_version": None, "broken": []},
        "endpoint": f"{base}/v1/traces",
        "spans": total,
    }
    # One conversation, without content, to the full traces URL.
    handler.received.clear()
    argv = ["--db", url, "export", str(ids[1]), "--format", "otel", "--no-content"]
    assert cli.main([*argv, "--otlp-endpoint", f"{base}/v1/traces"]) == 0
    assert "span(s) sent to" in capsys.readouterr().out
    (request,) = handler.received
    spans = request.resource_spans[0].scope_spans[0].spans
    assert not {a.key for s in spans for a in s.attributes} & set(CONTENT)


def test_a_refusing_receiver_exits_2_and_its_answer_is_not_printed(
    small: tuple[str, list[ConversationId]],
    receiver: tuple[str, type[Receiver]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, ids = small
    base, handler = receiver
    handler.status = 400  # not retried
    capsys.readouterr()
    argv = ["--db", url, "export", str(ids[0]), "--format", "otel", "--otlp-endpoint", base]
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert "did not take the spans" in err and "pwned" not in err + out
    assert len(handler.received) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--format", "otel", "--otlp-endpoint", "ftp://example.invalid"], "not an http"),
        (["--format", "otel", "--otlp-endpoint", "http://u:secret@127.0.0.1:9"], "credentials"),
        (["--format", "md", "--otlp-endpoint", "http://127.0.0.1:9"], "belongs to --format otel"),
        (["--format", "json", "--no-content"], "belongs to --format otel"),
        (["--format", "otel", "--json"], "use it with -o PATH"),
    ],
)
def test_options_that_cannot_be_served_exit_2(
    small: tuple[str, list[ConversationId]],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    url, ids = small
    capsys.readouterr()
    assert cli.main(["--db", url, "export", str(ids[0]), *argv]) == 2
    out, err = capsys.readouterr()
    assert message in err and "secret" not in err + out and "resourceSpans" not in out


def test_a_broken_chain_is_exported_named_and_exits_5(
    tampered: tuple[str, UUID, UUID, int], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url, broken, intact, version = tampered
    code = cli.main(["--db", url, "export", str(broken), "--format", "otel"])
    out, err = capsys.readouterr()
    assert code == EXIT_BROKEN and "does not verify" in err
    assert "coffee" in out  # what is stored is exported
    argv = ["--db", url, "export", "--all", "--format", "otel", "-o", str(tmp_path / "o")]
    assert cli.main([*argv, "--json"]) == EXIT_BROKEN
    summary = json.loads(capsys.readouterr().out)
    assert summary["conversations"] == 2
    assert summary["chain"]["broken"] == [
        {"conversation_id": str(broken), "first_bad_version": version}
    ]
    assert cli.main(["--db", url, "export", str(intact), "--format", "otel"]) == 0
    capsys.readouterr()


_BLOCKED = """
import importlib.abc, sys
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)  # as uninstalled
sys.meta_path.insert(0, Blocked())
from convstore.adapters import cli
sys.exit(cli.main(ARGV))
"""


def test_without_the_otel_extra_it_exits_2_naming_it(
    small: tuple[str, list[ConversationId]],
) -> None:
    url, ids = small
    argv = ["--db", url, "export", str(ids[0]), "--format", "otel"]
    done = subprocess.run(
        [sys.executable, "-c", f"ARGV = {argv!r}\n{_BLOCKED}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "pip install 'convstore[otel]'" in done.stderr and done.stdout == ""


# --- untrusted text -------------------------------------------------------------------------

FIELDS = 34


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hostile_texts, min_size=FIELDS, max_size=FIELDS))
def test_hostile_text_is_exported_as_inert_data(texts: list[str]) -> None:
    """Stored text ends up as JSON string data, escaped so no terminal acts on it, and
    decodes back to exactly what was stored; no payload value ever appears."""
    events = hostile_events(texts)
    conversation = otel.read(events)
    trace = otel.spans(conversation)
    line = otlp.otlp_json(trace)
    assert sanitize(line) == line and "\n" not in line and SECRET not in line
    request = parse_otlp_json(line)
    assert request == encode_spans(trace)  # the JSON line is the protobuf message, whole
    spans = request.resource_spans[0].scope_spans[0].spans
    values = {a.key: a.value.string_value for s in spans for a in s.attributes}
    user = items(portable.fold(events), UserItem)[0]
    chat = next(s for s in spans if s.kind == s.SPAN_KIND_CLIENT)
    messages = json.loads(
        {a.key: a.value.string_value for a in chat.attributes}[otel.INPUT_MESSAGES]
    )
    assert [p["content"] for p in messages[0]["parts"]][: len(user.blocks)] == list(user.blocks)
    assert values  # attributes were written


@pytest.mark.parametrize(
    ("server", "provider", "port"),
    [("api.deepseek.com", "deepseek", None), ("localhost:11434", "openai", 11434)],
)
def test_a_chat_completions_server_names_the_provider(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: str, provider: str, port: int | None
) -> None:
    """The server a Chat Completions capture came from (its payloads' binding) is
    `server.address`; a server the conventions know names the provider, others stay
    `openai`."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    root = ROOT / "examples" / "openai-chat" / "compatible_servers"
    argv = ["--db", url, "ingest", "--provider", "openai-chat", "--server", server]
    assert (
        cli.main([*argv, "--request", str(root / "1.request.json"), str(root / "1.response.sse")])
        == 0
    )
    capsys.readouterr()
    with open_store(url) as store:
        (summary,) = store.service.list(offset=0, limit=2)
        spans = otel.spans(traced(store, ConversationId(summary.id)))
    (chat,) = [span for span in spans if span.kind is SpanKind.CLIENT]
    attributes = chat.attributes or {}
    assert attributes[otel.PROVIDER] == provider
    assert attributes[otel.SERVER_ADDRESS] == server.split(":", maxsplit=1)[0]
    assert attributes.get(otel.SERVER_PORT) == port
