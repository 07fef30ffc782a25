"""The Anthropic encoder: decode → store → encode round trips, ordering, losses, settings.

Expectations are read from the captures with plain `json` and regular expressions on the
raw bytes (independent of the adapter): the next request of each captured exchange is
what the encoder must rebuild, and every opaque value (signature, encrypted_content,
encrypted_index, redacted data) must come back byte for byte.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore.adapters.anthropic.config import AnthropicConfig
from convstore.adapters.anthropic.context import RequestContext
from convstore.adapters.anthropic.decode import decode_message, detect_and_decode
from convstore.adapters.anthropic.encode import (
    EncodedRequest,
    encode_request,
    encode_request_bytes,
)
from convstore.adapters.anthropic.history import (
    HistoryMismatch,
    history_drafts,
    recorded_prefix,
    request_model,
    request_settings,
)
from convstore.adapters.anthropic.settings import SAMPLING, scope_tool_choice
from convstore.adapters.wire.encoding import context_envelope
from convstore.adapters.wire.providers import DeclaredTool, Loss
from convstore.domain.conversation import Conversation
from convstore.domain.errors import ConfigurationError, DecodeError
from convstore.domain.events import (
    AssistantText,
    ContextInjected,
    Event,
    HostedActivity,
    Reasoning,
    ResponseEnded,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.vocabulary import (
    ActivityId,
    Attribution,
    CallId,
    ProviderPayload,
    RequestSettings,
    ResponseId,
    Source,
    TextRange,
    ToolDeclaration,
)
from tests.consenting import anthropic_consent, requests_of

WIRE = Path(__file__).resolve().parents[2] / "shared" / "wire" / "anthropic"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "anthropic"
DEFAULT = AnthropicConfig()

OPAQUE = re.compile(
    rb'"(signature|encrypted_content|encrypted_index|data)"\s*:\s*("(?:[^"\\]|\\.)*")'
)
"""An opaque field and its JSON string literal, exactly as spelled in the bytes."""


# --- helpers -------------------------------------------------------------------------------------


def opaque_literals(raw: bytes) -> list[bytes]:
    """Every opaque value's JSON string literal in `raw` (empty signatures left out)."""
    return [m.group(2) for m in OPAQUE.finditer(raw) if m.group(2) != b'""']


def events_of(conversation: Conversation) -> list[Event]:
    return list(conversation.pending)


def record_history(conversation: Conversation, request: bytes) -> int:
    """Record what the request holds that the conversation does not; return the prefix."""
    held = recorded_prefix(events_of(conversation), request)
    for message in history_drafts(request, start=held):
        conversation.record_all(message.drafts)
    return held


def record_response(conversation: Conversation, response: Path, request: bytes | None) -> None:
    context = RequestContext.from_body(request) if request is not None else None
    conversation.record_all(list(detect_and_decode(response.read_bytes(), request=context)))


def response_file(folder: Path, n: int | str) -> Path:
    [path] = folder.glob(f"{n}.response.*")
    return path


def normalized(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """Messages with string content spelled as one text block (the same to the API)."""
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        out.append({"role": message["role"], "content": content})
    return out


def body_of(encoded: EncodedRequest) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(encoded.to_json())
    return parsed


def types(message: dict[str, Any]) -> list[str]:
    return [block["type"] for block in message["content"]]


def continuations(root: Path) -> list[Any]:
    """(folder, N) for each example exchange N whose request N+1 continues it."""
    cases = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        n = 1
        while (folder / f"{n + 1}.request.json").exists():
            this = json.loads((folder / f"{n}.request.json").read_bytes())["messages"]
            after = json.loads((folder / f"{n + 1}.request.json").read_bytes())["messages"]
            if len(after) > len(this):
                cases.append(pytest.param(folder, n, id=f"{folder.name}/{n}"))
            n += 1
    return cases or [pytest.param(None, 0, marks=pytest.mark.skip(reason="no examples"))]


def wire_cases() -> list[Any]:
    if not WIRE.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no captures at {WIRE}"))]
    return [pytest.param(folder, id=folder.name) for folder in sorted(WIRE.iterdir())]


def conversation_through(folder: Path, n: int) -> Conversation:
    """A conversation holding exchanges 1..n of an example folder, as `ingest` records."""
    conversation = Conversation.start()
    for i in range(1, n + 1):
        request = (folder / f"{i}.request.json").read_bytes()
        record_history(conversation, request)
        record_response(conversation, response_file(folder, i), request)
    return conversation


def example(name: str) -> Path:
    folder = EXAMPLES / name
    if not folder.is_dir():
        pytest.skip(f"no example {name}")
    return folder


# --- decode → store → encode against the next captured request -----------------------------------


@pytest.mark.parametrize(("folder", "n"), continuations(EXAMPLES))
def test_encoding_rebuilds_the_next_captured_request(folder: Path, n: int) -> None:
    conversation = conversation_through(folder, n)
    following = (folder / f"{n + 1}.request.json").read_bytes()
    held = record_history(conversation, following)
    wanted = json.loads(following)
    # Every assistant message of the next request is rebuilt from the stored response,
    # not copied from the request: the history added only what came after it.
    last_assistant = max(i for i, m in enumerate(wanted["messages"]) if m["role"] == "assistant")
    assert held > last_assistant

    encoded = encode_request(events_of(conversation), config=anthropic_consent(following))
    raw = encoded.to_json()
    body = json.loads(raw)
    assert normalized(body["messages"]) == normalized(wanted["messages"])
    for key in ("model", "max_tokens", "tools", "thinking", "system", "tool_choice"):
        assert body.get(key) == wanted.get(key), key
    assert "stream" not in body
    assert encoded.losses == []
    for literal in opaque_literals(following):
        assert literal in raw


@pytest.mark.parametrize(
    "folder",
    [pytest.param(p, id=p.name) for p in sorted(EXAMPLES.iterdir())] if EXAMPLES.is_dir() else [],
)
def test_every_opaque_value_of_every_example_response_comes_back(folder: Path) -> None:
    n = 1
    while (folder / f"{n + 1}.request.json").exists():
        n += 1
    conversation = Conversation.start()
    literals: list[bytes] = []
    for i in range(1, n + 1):
        request = (folder / f"{i}.request.json").read_bytes()
        try:
            record_history(conversation, request)
        except HistoryMismatch:  # a re-sent request (the same question, asked again)
            conversation = Conversation.start()
            literals = []
            record_history(conversation, request)
        record_response(conversation, response_file(folder, i), request)
        literals += opaque_literals(response_file(folder, i).read_bytes())
    ended = [e for e in events_of(conversation) if isinstance(e, ResponseEnded)]
    if ended[-1].state != "completed":
        pytest.skip("an interrupted response: its blocks are left out (tested below)")
    raw = encode_request_bytes(events_of(conversation), config=DEFAULT)
    for literal in literals:
        assert literal in raw


@pytest.mark.parametrize("folder", wire_cases())
def test_recorded_traffic_round_trips(folder: Path) -> None:
    request_path = folder / "0.request.json"
    request = request_path.read_bytes() if request_path.exists() else None
    conversation = Conversation.start()
    if request is not None:
        record_history(conversation, request)
    response = response_file(folder, 0)
    record_response(conversation, response, request)
    config = DEFAULT if request is None else anthropic_consent(request)
    encoded = encode_request(events_of(conversation), config=config)
    raw = encoded.to_json()
    body = json.loads(raw)
    sampling = set(json.loads(request or b"{}")) & SAMPLING  # the API refuses them now
    assert sorted(loss.reason.split(":")[0] for loss in encoded.losses) == sorted(sampling)
    assert all(loss.kind == "settings" for loss in encoded.losses)
    if request is not None:
        sent = json.loads(request)["messages"]
        assert normalized(body["messages"][: len(sent)]) == normalized(sent)
        assert body["model"] == json.loads(request)["model"]
    # The response's blocks, in order, as the assistant's last message.
    received = _content_types(response)
    assert types(body["messages"][-1]) == [t for t in received if t != "empty_text"]
    for literal in opaque_literals(response.read_bytes()):
        assert literal in raw


def _content_types(response: Path) -> list[str]:
    raw = response.read_bytes()
    if response.suffix == ".json":
        blocks = json.loads(raw)["content"]
    else:
        blocks = []
        texts: dict[int, str] = {}
        for line in raw.splitlines():
            if not line.startswith(b"data:"):
                continue
            data = json.loads(line[5:])
            if data.get("type") == "content_block_start":
                blocks.append(data["content_block"])
                texts[data["index"]] = data["content_block"].get("text", "")
            elif data.get("type") == "content_block_delta" and "text" in data["delta"]:
                texts[data["index"]] = texts.get(data["index"], "") + data["delta"]["text"]
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                block["text"] = texts.get(index, "")
    return ["empty_text" if b["type"] == "text" and not b["text"] else b["type"] for b in blocks]


# --- history (ingest --request) ------------------------------------------------------------------


def request_files() -> list[Any]:
    files = sorted(EXAMPLES.glob("*/*.request.json")) if EXAMPLES.is_dir() else []
    files += sorted(WIRE.glob("*/*.request.json")) if WIRE.is_dir() else []
    return [pytest.param(p, id=f"{p.parent.name}/{p.name}") for p in files]


@pytest.mark.parametrize("path", request_files())
def test_a_request_history_records_and_replays_unchanged(path: Path) -> None:
    request = path.read_bytes()
    conversation = Conversation.start()
    assert record_history(conversation, request) == 0
    encoded = encode_request(events_of(conversation), config=DEFAULT, model=request_model(request))
    raw = encoded.to_json()
    assert normalized(json.loads(raw)["messages"]) == normalized(json.loads(request)["messages"])
    for literal in opaque_literals(request):
        assert literal in raw
    assert recorded_prefix(events_of(conversation), request) == len(json.loads(request)["messages"])


def test_history_drafts_by_position() -> None:
    request = (example("mixed_batch") / "2.request.json").read_bytes()
    messages = history_drafts(request)
    assert [(m.index, m.role) for m in messages] == [(0, "user"), (1, "assistant"), (2, "user")]
    assert [type(d).__name__ for d in messages[0].drafts] == ["UserMessage"]
    started, *blocks, ended = messages[1].drafts
    assert isinstance(started, ResponseStarted) and started.origin == "request"
    assert re.fullmatch(r"request:[0-9a-f]{16}:1", started.response_id)
    assert isinstance(ended, ResponseEnded) and ended.state == "completed"
    assert ended.finish_reason == "other"
    assert [type(d).__name__ for d in blocks] == [
        "AssistantText",
        "HostedActivity",
        "ToolCallRequested",
    ]
    [result] = messages[2].drafts
    assert isinstance(result, ToolCallResponded)
    assert result.call_id == "toolu_01hPUkq1FX5Nc6k2zMB4qoWT"
    assert '"status": "in_transit"' in result.content
    # Deterministic: the same request gives the same ids.
    assert history_drafts(request) == messages
    assert history_drafts(request, start=2) == messages[2:]
    # The pending search is a started activity of a completed response: replay keeps it.
    conversation = Conversation.start()
    for message in messages:
        conversation.record_all(message.drafts)
    assert list(conversation.pending_activities()) == ["srvtoolu_01CKi5AJA9rObe3ptT2w8dmr"]


def test_request_settings() -> None:
    request = (example("mixed_batch") / "1.request.json").read_bytes()
    settings_ = request_settings(request)
    assert request_model(request) == "claude-sonnet-4-5"
    assert settings_.max_tokens == 2048
    assert [(t.name, t.hosted, t.native_type) for t in settings_.tools] == [
        ("web_search", True, "web_search_20250305"),
        ("lookup_order", False, ""),
    ]
    assert settings_.native is not None
    native = json.loads(settings_.native.raw)
    assert "messages" not in native and native["model"] == "claude-sonnet-4-5"
    body = {
        "model": "m",
        "max_tokens": 5,
        "system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        "tool_choice": {"type": "tool", "name": "x"},
        "messages": [],
    }
    read = request_settings(json.dumps(body).encode())
    assert (read.system, read.tool_choice) == ("a\nb", "x")


def test_a_conversation_must_be_a_prefix_of_the_request() -> None:
    request = (example("thinking_tool_roundtrip") / "2.request.json").read_bytes()
    other = Conversation.start()
    other.record(UserMessage(blocks=("Something else entirely",)))
    with pytest.raises(HistoryMismatch, match=r"messages\[0\]"):
        recorded_prefix(events_of(other), request)
    longer = Conversation.start()
    record_history(longer, request)
    longer.record(UserMessage(blocks=("and one more",)))
    with pytest.raises(HistoryMismatch, match="more than"):
        recorded_prefix(events_of(longer), request)
    # A conversation ending inside one of the request's messages.
    two_texts = json.dumps(
        {
            "model": "claude-sonnet-4-5",
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                }
            ],
        }
    ).encode()
    partial = Conversation.start()
    partial.record(UserMessage(blocks=("a",)))
    with pytest.raises(HistoryMismatch, match="inside"):
        recorded_prefix(events_of(partial), two_texts)
    assert recorded_prefix([], request) == 0
    assert issubclass(HistoryMismatch, DecodeError)
    with pytest.raises(DecodeError):
        history_drafts(b"not json")


def test_user_side_blocks_other_than_text_are_kept_and_replayed() -> None:
    image = (
        b'{"type":"image",'
        b'"source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}'
    )
    request = (
        b'{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":['
        + image
        + b',{"type":"text","text":"What is this?"}]}]}'
    )
    [message] = history_drafts(request)
    unknown, text = message.drafts
    assert isinstance(unknown, UnknownArtifact) and unknown.payload.raw == image
    assert isinstance(text, UserMessage) and text.blocks == ("What is this?",)
    conversation = Conversation.start()
    conversation.record_all(message.drafts)
    raw = encode_request_bytes(events_of(conversation), config=DEFAULT, model="claude-sonnet-4-5")
    assert image in raw


# --- ordering: mixed batches and pause_turn ------------------------------------------------------


def test_a_mixed_batch_replays_the_pending_search_then_the_client_results() -> None:
    folder = example("mixed_batch")
    conversation = conversation_through(folder, 1)
    conversation.record(
        ToolCallResponded(call_id=CallId("toolu_01hPUkq1FX5Nc6k2zMB4qoWT"), content="in transit")
    )
    # The configuration no longer enables web search: the pending activity keeps it declared.
    disabled = AnthropicConfig.from_block({"hosted_tools": {"web_search": {"enable": False}}})
    body = body_of(encode_request(events_of(conversation), config=disabled))
    assistant, results = body["messages"][-2:]
    assert types(assistant) == ["text", "server_tool_use", "tool_use"]
    assert (results["role"], types(results)) == ("user", ["tool_result"])
    assert results["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_01hPUkq1FX5Nc6k2zMB4qoWT",
        "content": "in transit",
    }
    assert [t["name"] for t in body["tools"]] == ["web_search", "lookup_order"]
    for config in (disabled, DEFAULT):  # kept, and said so
        encoded = encode_request(events_of(conversation), config=config)
        assert encoded.kept_declared == ("web_search",)
        [kept] = [loss for loss in encoded.losses if loss.kind == "kept_declared"]
        assert kept.event == "HostedActivity" and "srvtoolu_" in kept.reason
    # Enabled with other knobs: the pending activity keeps the declaration it began under.
    enabled = AnthropicConfig.from_block({"hosted_tools": {"web_search": {"enable": True}}})
    body = body_of(encode_request(events_of(conversation), config=enabled))
    assert body["tools"][0] == {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    # A user message typed before the results still comes after them.
    conversation.record(UserMessage(blocks=("thanks",)))
    body = body_of(encode_request(events_of(conversation), config=DEFAULT))
    assert types(body["messages"][-1]) == ["tool_result", "text"]


def test_without_a_pending_activity_a_disabled_hosted_tool_is_not_declared() -> None:
    conversation = conversation_through(example("pause_turn"), 2)  # both searches completed
    disabled = AnthropicConfig.from_block({"hosted_tools": {"web_search": {"enable": False}}})
    for config in (disabled, DEFAULT):  # the recording declared it: that is no consent
        encoded = encode_request(events_of(conversation), config=config)
        assert "tools" not in body_of(encoded)
        assert b"web_search_2" not in encoded.to_json().split(b'"messages"')[0]
        [loss] = encoded.losses
        assert (loss.event, loss.kind) == ("ResponseStarted", "tool_declaration")
        assert "providers.anthropic.hosted_tools.web_search.enable = true" in loss.reason
        assert encoded.kept_declared == ()
    enabled = AnthropicConfig.from_block({"hosted_tools": {"web_search": {"enable": True}}})
    kept = encode_request(events_of(conversation), config=enabled)
    assert body_of(kept)["tools"] == [{"type": "web_search_20250305", "name": "web_search"}]
    assert kept.losses == []


def test_pause_turn_resends_the_paused_content_unchanged() -> None:
    folder = example("pause_turn")
    conversation = conversation_through(folder, 1)
    body = body_of(encode_request(events_of(conversation), config=DEFAULT))
    wanted = json.loads((folder / "2.request.json").read_bytes())["messages"]
    assert body["messages"] == wanted
    assert body["messages"][-1]["role"] == "assistant"
    # --user appends the next user message.
    body = body_of(encode_request(events_of(conversation), config=DEFAULT, user="go on"))
    assert body["messages"][-1] == {"role": "user", "content": [{"type": "text", "text": "go on"}]}
    # The continuation joins the paused content in one assistant message.
    record_response(
        conversation, response_file(folder, 2), (folder / "2.request.json").read_bytes()
    )
    body = body_of(encode_request(events_of(conversation), config=DEFAULT))
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
    assert body["messages"][1]["content"][: len(wanted[1]["content"])] == wanted[1]["content"]
    assert types(body["messages"][1]).count("server_tool_use") == 2


def test_an_interrupted_activity_is_left_out_with_a_loss() -> None:
    folder = example("mixed_batch")
    stream = response_file(folder, 1).read_bytes()
    cut = stream.index(b'"index":2')  # after the search call, before the client call
    request = (folder / "1.request.json").read_bytes()
    conversation = Conversation.start()
    record_history(conversation, request)
    conversation.record_all(
        list(detect_and_decode(stream[:cut], request=RequestContext.from_body(request)))
    )
    assert conversation.pending_activities()  # the record keeps it started
    encoded = encode_request(events_of(conversation), config=anthropic_consent(request))
    assert b"server_tool_use" not in encoded.to_json()
    assert [(loss.event, loss.kind) for loss in encoded.losses] == [
        ("HostedActivity", "hosted_activity")
    ]
    assert "interrupted" in encoded.losses[0].reason


def test_an_abandoned_activity_emits_neither_block() -> None:
    conversation = conversation_through(example("mixed_batch"), 1)
    [pending] = conversation.pending_activities()
    conversation.record(HostedActivity(activity_id=pending, name="web_search", state="abandoned"))
    encoded = encode_request(
        events_of(conversation), config=anthropic_consent(*requests_of(example("mixed_batch")))
    )
    raw = encoded.to_json()
    assert b"server_tool_use" not in raw and b"tool_use" in raw
    assert [loss.kind for loss in encoded.losses] == ["hosted_activity"]
    assert "abandoned" in encoded.losses[0].reason


def test_an_activity_without_payload_emits_neither_block() -> None:
    conversation = Conversation.start()
    conversation.record(UserMessage(blocks=("q",)))
    rid = ResponseId("msg_1")
    conversation.record_all(
        [
            ResponseStarted(response_id=rid, provider="anthropic", model="claude-sonnet-4-5"),
            HostedActivity(
                activity_id=ActivityId("srvtoolu_1"),
                name="web_search",
                state="started",
                response_id=rid,
            ),
            HostedActivity(
                activity_id=ActivityId("srvtoolu_1"),
                name="web_search",
                state="completed",
                response_id=rid,
            ),
            AssistantText(response_id=rid, text="answer"),
            ResponseEnded(response_id=rid, state="completed", finish_reason="stop"),
        ]
    )
    encoded = encode_request(events_of(conversation), config=DEFAULT)
    assert types(body_of(encoded)["messages"][-1]) == ["text"]
    assert [loss.kind for loss in encoded.losses] == ["hosted_activity"]


# --- binding -------------------------------------------------------------------------------------


def test_a_signature_bound_to_another_model_is_left_out() -> None:
    folder = example("thinking_tool_roundtrip")
    conversation = conversation_through(folder, 2)
    signature = opaque_literals((folder / "2.request.json").read_bytes())[0]
    same = encode_request(events_of(conversation), config=DEFAULT)
    assert signature in same.to_json() and same.losses == []
    other = encode_request(events_of(conversation), config=DEFAULT, model="claude-opus-4-1")
    raw = other.to_json()
    assert signature not in raw
    assert b'"redacted_thinking"' not in raw and b'"tool_use"' in raw
    assert {(loss.event, loss.kind) for loss in other.losses} == {("Reasoning", "reasoning")}
    assert all("claude-sonnet-4-5-20250929" in loss.reason for loss in other.losses)
    configured = AnthropicConfig.from_block({"model": "claude-opus-4-1"})
    assert encode_request(events_of(conversation), config=configured).losses == other.losses


def test_search_results_and_their_citations_follow_the_binding() -> None:
    folder = example("pause_turn")
    conversation = conversation_through(folder, 2)
    config = anthropic_consent(*requests_of(folder))
    other = encode_request(events_of(conversation), config=config, model="claude-opus-4-1")
    raw = other.to_json()
    assert b"encrypted_content" not in raw and b"encrypted_index" not in raw
    assert b"server_tool_use" not in raw
    kinds = {loss.kind for loss in other.losses}
    assert kinds == {"hosted_activity", "citations"}


# --- other providers -----------------------------------------------------------------------------

OPENAI_SECRET = "gAAAAB-openai-encrypted-reasoning"


def openai_conversation() -> Conversation:
    conversation = Conversation.start()
    conversation.record(UserMessage(blocks=("Where is order 7?",)))
    rid = ResponseId("resp_1")

    def payload(fmt: str, value: dict[str, Any]) -> ProviderPayload:
        return ProviderPayload.of("openai", fmt, msgspec.json.encode(value))

    settings_ = RequestSettings(
        system="Be brief.",
        tools=(
            ToolDeclaration(
                name="lookup",
                description="Look an order up",
                input_schema={"type": "object", "properties": {"id": {"type": "string"}}},
            ),
            ToolDeclaration(name="web_search", hosted=True, native_type="web_search"),
        ),
        tool_choice="auto",
        max_tokens=1000,
        native=payload("request", {"model": "gpt-5", "max_output_tokens": 1000}),
    )
    conversation.record_all(
        [
            ResponseStarted(response_id=rid, provider="openai", model="gpt-5", settings=settings_),
            Reasoning(
                response_id=rid,
                text="thinking",
                payload=payload(
                    "output_item", {"type": "reasoning", "encrypted_content": OPENAI_SECRET}
                ),
            ),
            HostedActivity(
                activity_id=ActivityId("ws_1"),
                name="web_search",
                state="started",
                response_id=rid,
                input={"query": "order 7"},
                payload=payload("output_item", {"type": "web_search_call", "id": "ws_1"}),
            ),
            HostedActivity(
                activity_id=ActivityId("ws_1"),
                name="web_search",
                state="completed",
                response_id=rid,
                payload=payload("output_item", {"type": "web_search_call", "id": "ws_1"}),
            ),
            AssistantText(
                response_id=rid,
                text="Let me look.",
                attributions=(
                    Attribution(
                        source=Source(kind="web", url="https://example.com/o7"),
                        range=TextRange(0, 3),
                        replay=payload("annotation", {"type": "url_citation"}),
                    ),
                ),
            ),
            ToolCallRequested(
                response_id=rid,
                call_id=CallId("call:7/a"),
                name="lookup",
                arguments={"id": "7"},
                payload=payload("output_item", {"type": "function_call", "id": "fc_1"}),
            ),
            UnknownArtifact(response_id=rid, payload=payload("output_item", {"type": "future"})),
            ResponseEnded(response_id=rid, state="completed", finish_reason="tool_use"),
        ]
    )
    conversation.record(ToolCallResponded(call_id=CallId("call:7/a"), content="shipped"))
    return conversation


def test_another_providers_conversation_gives_portable_content_and_a_loss_report() -> None:
    conversation = openai_conversation()
    with pytest.raises(ConfigurationError, match="no model"):
        encode_request(events_of(conversation), config=DEFAULT)
    encoded = encode_request(events_of(conversation), config=DEFAULT, model="claude-sonnet-4-5")
    raw = encoded.to_json()
    body = json.loads(raw)
    assert OPENAI_SECRET.encode() not in raw and b"fc_1" not in raw and b"ws_1" not in raw
    assert body["model"] == "claude-sonnet-4-5"
    assert (body["system"], body["max_tokens"]) == ("Be brief.", 1000)
    assert body["tools"] == [
        {
            "name": "lookup",
            "description": "Look an order up",
            "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}},
        }
    ]
    assert body["tool_choice"] == {"type": "auto"}
    user, assistant, results = body["messages"]
    assert user == {"role": "user", "content": [{"type": "text", "text": "Where is order 7?"}]}
    [text, call] = assistant["content"]
    assert text == {"type": "text", "text": "Let me look."}
    assert call["type"] == "tool_use" and call["input"] == {"id": "7"}
    assert re.fullmatch(r"[A-Za-z0-9_-]+", call["id"])
    assert results["content"] == [
        {"type": "tool_result", "tool_use_id": call["id"], "content": "shipped"}
    ]
    assert sorted((loss.event, loss.kind) for loss in encoded.losses) == [
        ("AssistantText", "citations"),
        ("HostedActivity", "hosted_activity"),
        ("Reasoning", "reasoning"),
        ("ResponseStarted", "settings"),
        ("ResponseStarted", "tool_declaration"),
        ("ToolCallRequested", "payload"),
        ("UnknownArtifact", "unknown_artifact"),
    ]
    assert all(loss.version > 0 for loss in encoded.losses)


# --- settings, tool_choice, validation -----------------------------------------------------------


def test_context_is_a_tagged_user_envelope_never_a_system_prompt() -> None:
    conversation = conversation_through(example("thinking_tool_roundtrip"), 2)
    conversation.record(ContextInjected(source="steering", text="Answer in French."))
    conversation.record(ContextInjected(source='odd"source', text="x"))
    body = body_of(encode_request(events_of(conversation), config=DEFAULT))
    assert "system" not in body
    assert {m["role"] for m in body["messages"]} == {"user", "assistant"}
    assert body["messages"][-1]["content"] == [
        {"type": "text", "text": '<context source="steering">Answer in French.</context>'},
        {"type": "text", "text": '<context source="odd&quot;source">x</context>'},
    ]
    assert context_envelope("context", "t") == '<context source="context">t</context>'
    # With a system prompt recorded, the context still goes to a user message.
    with_system = Conversation.start()
    request = json.dumps(
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 10,
            "system": "You are terse.",
            "messages": [{"role": "user", "content": "hi"}],
        }
    ).encode()
    record_history(with_system, request)
    with_system.record_all(
        list(
            decode_message(
                json.dumps(
                    {
                        "id": "msg_x",
                        "type": "message",
                        "role": "assistant",
                        "model": "claude-sonnet-4-5-20250929",
                        "content": [{"type": "text", "text": "Hello."}],
                        "stop_reason": "end_turn",
                        "usage": {"input_tokens": 1, "output_tokens": 1},
                    }
                ).encode(),
                request=RequestContext.from_body(request),
            )
        )
    )
    with_system.record(ContextInjected(source="steering", text="Be kind."))
    body = body_of(encode_request(events_of(with_system), config=DEFAULT))
    assert body["system"] == "You are terse."
    assert "Be kind." in body["messages"][-1]["content"][0]["text"]


def with_tool_choice(
    choice: dict[str, Any], *, extra_tools: Sequence[dict[str, Any]] = ()
) -> Conversation:
    """The mixed batch's first exchange, asked with `choice` (and more client tools)."""
    folder = example("mixed_batch")
    request = json.loads((folder / "1.request.json").read_bytes())
    request["tool_choice"] = choice
    request["tools"] += list(extra_tools)
    body = json.dumps(request).encode()
    conversation = Conversation.start()
    record_history(conversation, body)
    record_response(conversation, response_file(folder, 1), body)
    return conversation


def test_tool_choice_is_never_broadened_to_hosted_tools() -> None:
    consent = anthropic_consent(*requests_of(example("mixed_batch")))
    narrowed = encode_request(events_of(with_tool_choice({"type": "any"})), config=consent)
    assert body_of(narrowed)["tool_choice"] == {"type": "tool", "name": "lookup_order"}
    assert [loss.kind for loss in narrowed.losses] == ["tool_choice"]
    other = {"name": "cancel_order", "input_schema": {"type": "object"}}
    auto = encode_request(
        events_of(
            with_tool_choice(
                {"type": "any", "disable_parallel_tool_use": True}, extra_tools=[other]
            )
        ),
        config=consent,
    )
    assert body_of(auto)["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert [loss.kind for loss in auto.losses] == ["tool_choice"]
    forced = encode_request(
        events_of(with_tool_choice({"type": "tool", "name": "web_search"})), config=consent
    )
    assert "tool_choice" not in body_of(forced)
    assert "unsupported" in forced.losses[0].reason
    # No hosted tool declared: the recorded choice goes out as recorded.
    disabled = AnthropicConfig.from_block({"hosted_tools": {"web_search": {"enable": False}}})
    conversation = with_tool_choice({"type": "any"})
    [pending] = conversation.pending_activities()
    conversation.record(HostedActivity(activity_id=pending, name="web_search", state="abandoned"))
    kept = encode_request(events_of(conversation), config=disabled)
    assert body_of(kept)["tool_choice"] == {"type": "any"}
    assert b'"tool_choice":{"type": "any"}' in kept.to_json()  # the recorded bytes


def test_scope_tool_choice_rules() -> None:
    client = DeclaredTool("lookup", "", {}, False)
    hosted = DeclaredTool("web_search", "web_search_20250305", {}, True)
    assert scope_tool_choice({"type": "auto"}, [client, hosted]) == ({"type": "auto"}, None)
    assert scope_tool_choice({"type": "any"}, [client])[1] is None
    assert scope_tool_choice({"type": "any"}, [hosted])[0] is None
    assert scope_tool_choice({"type": "tool", "name": "nope"}, [client])[0] is None
    assert scope_tool_choice({"type": "any"}, [])[0] is None


def test_configuration_overrides_the_recorded_settings() -> None:
    conversation = conversation_through(example("thinking_tool_roundtrip"), 1)
    config = AnthropicConfig.from_block(
        {
            "model": "claude-sonnet-4-5-20250929",
            "max_tokens": 9000,
            "hosted_tools": {
                "web_search": {"enable": True, "max_uses": 2, "allowed_domains": ["example.com"]},
                "web_fetch": {"enable": True, "citations": {"enabled": True}},
                "code_execution": {"enable": True},
            },
        }
    )
    encoded = encode_request(events_of(conversation), config=config)
    body = body_of(encoded)
    assert (body["model"], body["max_tokens"]) == ("claude-sonnet-4-5-20250929", 9000)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["tools"][1:] == [
        {
            "type": "web_search_20250305",
            "name": "web_search",
            "max_uses": 2,
            "allowed_domains": ["example.com"],
        },
        {"type": "web_fetch_20250910", "name": "web_fetch", "citations": {"enabled": True}},
        {"type": "code_execution_20250825", "name": "code_execution"},
    ]
    assert encoded.betas == ("web-fetch-2025-09-10", "code-execution-2025-08-25")
    assert encoded.losses == []  # the snapshot matches the alias the signature is bound to


@pytest.mark.parametrize(
    ("block", "model", "match"),
    [
        (
            {"hosted_tools": {"web_search": {"enable": True}}},
            "claude-3-haiku-20240307",
            "not available",
        ),
        (
            {"hosted_tools": {"web_fetch": {"enable": True}}},
            "claude-3-5-sonnet-latest",
            "not available",
        ),
        ({"hosted_tools": {"web_search": {"enable": True}}}, "gpt-5", "cannot tell"),
        (
            {
                "base_url": "https://bedrock-runtime.us-east-1.amazonaws.com",
                "hosted_tools": {"web_search": {"enable": True}},
            },
            "claude-sonnet-4-5",
            "Amazon Bedrock",
        ),
    ],
)
def test_a_hosted_tool_the_model_or_endpoint_cannot_serve_fails_before_any_request(
    block: dict[str, Any], model: str, match: str
) -> None:
    conversation = conversation_through(example("thinking_tool_roundtrip"), 1)
    config = AnthropicConfig.from_block(block)
    with pytest.raises(ConfigurationError, match=match):
        encode_request(events_of(conversation), config=config, model=model)


def test_pending_work_bound_to_another_model_keeps_no_tool_declared() -> None:
    conversation = conversation_through(example("mixed_batch"), 1)  # a search is pending
    encoded = encode_request(events_of(conversation), config=DEFAULT, model="claude-opus-4-1")
    assert "tools" in body_of(encoded)  # the client tool
    assert [t["name"] for t in body_of(encoded)["tools"]] == ["lookup_order"]
    assert encoded.kept_declared == ()
    assert {loss.kind for loss in encoded.losses} >= {"hosted_activity", "tool_declaration"}


def test_the_container_of_a_paused_code_execution_is_kept() -> None:
    conversation = Conversation.start()
    conversation.record(UserMessage(blocks=("run it",)))
    rid = ResponseId("msg_c")
    fields = ProviderPayload.of(
        "anthropic", "message_fields", b'{"container":{"id":"container_1","expires_at":"x"}}'
    )
    conversation.record_all(
        [
            ResponseStarted(response_id=rid, provider="anthropic", model="claude-sonnet-4-5"),
            AssistantText(response_id=rid, text="Working"),
            UnknownArtifact(response_id=rid, payload=fields),
            ResponseEnded(response_id=rid, state="completed", stop_reason="pause_turn"),
        ]
    )
    assert (
        body_of(encode_request(events_of(conversation), config=DEFAULT))["container"]
        == "container_1"
    )


# --- reading only --------------------------------------------------------------------------------


def test_encoding_never_writes() -> None:
    conversation = conversation_through(example("mixed_batch"), 1)
    before = (conversation.version, events_of(conversation), conversation.snapshot_state())
    events = tuple(events_of(conversation))
    encode_request(events, config=DEFAULT, user="next")
    encode_request(events, config=DEFAULT, model="claude-opus-4-1")
    assert (conversation.version, events_of(conversation), conversation.snapshot_state()) == before


def test_loss_is_a_small_struct() -> None:
    loss = Loss(version=3, event="Reasoning", kind="reasoning", reason="r")
    assert msgspec.json.decode(msgspec.json.encode(loss), type=Loss) == loss


# --- property: decode → encode for random text and citations -------------------------------------

B64 = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=",
    min_size=4,
    max_size=80,
)
TEXT = st.text(min_size=1, max_size=60)

citation = st.fixed_dictionaries(
    {
        "type": st.just("web_search_result_location"),
        "cited_text": st.text(max_size=40),
        "url": st.from_regex(r"https://example\.(com|org)/[a-z0-9]{1,10}", fullmatch=True),
        "title": st.text(max_size=20),
        "encrypted_index": B64,
    }
)
blocks = st.lists(
    st.fixed_dictionaries(
        {"type": st.just("text"), "text": TEXT},
        optional={"citations": st.lists(citation, min_size=1, max_size=3)},
    ),
    min_size=1,
    max_size=4,
)


def _message(content: list[dict[str, Any]]) -> bytes:
    return json.dumps(
        {
            "id": "msg_prop",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": content,
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
        ensure_ascii=False,
    ).encode()


def _stream(content: list[dict[str, Any]], cuts: int) -> Iterator[bytes]:
    def event(data: dict[str, Any]) -> bytes:
        return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()

    start = json.loads(_message([]))
    yield event({"type": "message_start", "message": start})
    for index, block in enumerate(content):
        opened: dict[str, Any] = {"type": "text", "text": ""}
        if "citations" in block:
            opened["citations"] = []
        yield event({"type": "content_block_start", "index": index, "content_block": opened})
        text = block["text"]
        step = max(1, len(text) // max(1, cuts))
        for at in range(0, len(text), step):
            piece = {"type": "text_delta", "text": text[at : at + step]}
            yield event({"type": "content_block_delta", "index": index, "delta": piece})
        for item in block.get("citations", []):
            delta = {"type": "citations_delta", "citation": item}
            yield event({"type": "content_block_delta", "index": index, "delta": delta})
        yield event({"type": "content_block_stop", "index": index})
    yield event({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}})
    yield event({"type": "message_stop"})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=blocks, streamed=st.booleans(), cuts=st.integers(1, 4))
def test_text_and_citations_round_trip(
    content: list[dict[str, Any]], streamed: bool, cuts: int
) -> None:
    request = (
        b'{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"q"}]}'
    )
    conversation = Conversation.start()
    record_history(conversation, request)
    context = RequestContext.from_body(request)
    body = b"".join(_stream(content, cuts)) if streamed else _message(content)
    conversation.record_all(list(detect_and_decode(body, request=context)))
    raw = encode_request_bytes(events_of(conversation), config=DEFAULT)
    [assistant] = json.loads(raw)["messages"][1:]
    assert assistant == {"role": "assistant", "content": content}
    for block in content:
        for item in block.get("citations", []):
            if streamed:  # each citation arrived whole in its delta: kept byte for byte
                assert json.dumps(item).encode() in raw
            assert json.dumps(item["encrypted_index"]).encode() in raw
