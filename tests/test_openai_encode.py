"""The OpenAI encoder and request history: decode → store → encode round trips, bindings,
portable replay of other providers' conversations, losses, settings, tool_choice, config.

Expectations are read from the captures with plain `json` and regular expressions on the
raw bytes (independent of the adapter): the next request of each captured exchange is what
the encoder must rebuild, and every opaque value (encrypted_content, item ids, call ids)
must come back byte for byte.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from convstore.adapters.anthropic import context as anthropic_context
from convstore.adapters.anthropic import decode as anthropic_decode
from convstore.adapters.anthropic import history as anthropic_history
from convstore.adapters.google import decode as google_decode
from convstore.adapters.openai.config import (
    HOSTED_TOOL_SUPPORT,
    OpenAIConfig,
    hosted_tool_declarations,
    model_family,
    validate_hosted_tools,
)
from convstore.adapters.openai.context import RequestContext
from convstore.adapters.openai.decode import detect_and_decode
from convstore.adapters.openai.encode import EncodedRequest, encode_request, encode_request_bytes
from convstore.adapters.openai.history import (
    HistoryMismatch,
    history,
    history_drafts,
    item_key,
    recorded_prefix,
    request_model,
)
from convstore.adapters.openai.inputs import call_id_for
from convstore.adapters.openai.settings import scope_tool_choice
from convstore.adapters.wire.encoding import context_envelope
from convstore.adapters.wire.providers import DeclaredTool, Loss, adapter, iter_losses
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
from tests.consenting import openai_consent
from tests.recorded import Recorded, recorded_conversations
from tests.sdk_requests import assert_valid_openai_request, verbatim_paths

SHARED = Path(__file__).resolve().parents[2] / "shared" / "wire"
WIRE = SHARED / "openai"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
OURS = EXAMPLES / "openai"
DEFAULT = OpenAIConfig()
STORED = OpenAIConfig(store=True)
RESPONSES_PATH = "/v1/responses"

OPAQUE = re.compile(rb'"(encrypted_content|id|call_id)"\s*:\s*("(?:[^"\\]|\\.)*")')
"""An opaque field and its JSON string literal, exactly as spelled in the bytes."""

HOSTED_TYPES = {
    "web_search_call",
    "file_search_call",
    "code_interpreter_call",
    "image_generation_call",
    "mcp_call",
    "mcp_list_tools",
}
OPTIONAL_TYPES = {"reasoning", *HOSTED_TYPES}


# --- captures ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exchange:
    """One recorded `POST /v1/responses` exchange."""

    folder: Path
    n: int

    @property
    def meta(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.folder / f"{self.n}.meta.json").read_text())
        return data

    @property
    def request(self) -> bytes | None:
        path = self.folder / f"{self.n}.request.json"
        return path.read_bytes() if path.exists() else None

    @property
    def response(self) -> Path:
        [path] = self.folder.glob(f"{self.n}.response.*")
        return path

    def decode(self) -> list[Event]:
        request = self.request
        context = RequestContext.from_body(request) if request is not None else None
        status = int(self.meta.get("status", 200))
        return list(detect_and_decode(self.response.read_bytes(), request=context, status=status))


def exchanges(folder: Path) -> list[Exchange]:
    found = [
        Exchange(folder, int(p.name.split(".")[0]))
        for p in folder.glob("*.meta.json")
        if (folder / p.name.replace("meta.json", "response.json")).exists()
        or (folder / p.name.replace("meta.json", "response.sse")).exists()
    ]
    found = [x for x in found if x.meta.get("path", RESPONSES_PATH) == RESPONSES_PATH]
    return sorted(found, key=lambda x: x.n)


def folders() -> list[Path]:
    roots = [OURS, WIRE]
    return [f for root in roots if root.is_dir() for f in sorted(root.iterdir()) if f.is_dir()]


def events_of(conversation: Conversation) -> list[Event]:
    return list(conversation.pending)


def record_history(conversation: Conversation, request: bytes) -> list[str]:
    """Record what the request holds that the conversation does not; the roles added."""
    added = history(events_of(conversation), request)
    for message in added:
        conversation.record_all(message.drafts)
    return [m.role for m in added]


def answer_open_calls(conversation: Conversation) -> None:
    for call in conversation.open_calls():
        conversation.record(ToolCallResponded(call_id=CallId(call), content="ok"))


def conversation_through(exchanges_: Sequence[Exchange]) -> Conversation:
    conversation = Conversation.start()
    for exchange in exchanges_:
        if exchange.request is not None:
            record_history(conversation, exchange.request)
        conversation.record_all(exchange.decode())
    return conversation


def input_of(request: bytes) -> list[Any]:
    value = json.loads(request).get("input", [])
    return [{"role": "user", "content": value}] if isinstance(value, str) else list(value)


def is_empty_assistant(item: dict[str, Any]) -> bool:
    content = item.get("content")
    return item.get("role") == "assistant" and "id" not in item and content in ("", [], None)


def kind(item: dict[str, Any]) -> str:
    return "message" if "role" in item else str(item.get("type"))


def norm(item: dict[str, Any]) -> dict[str, Any]:
    """An input item as the API reads it: string content as one text part, parts reduced to
    their type and text, `status` dropped (it is output-only)."""
    if "role" in item:
        content = item["content"]
        part_type = (
            "input_text" if item["role"] in ("user", "system", "developer") else "output_text"
        )
        if isinstance(content, str):
            content = [{"type": part_type, "text": content}]
        out: dict[str, Any] = {
            "role": item["role"],
            "content": [{k: v for k, v in p.items() if k in ("type", "text")} for p in content],
        }
        if "id" in item:
            out["id"] = item["id"]
        return out
    return {k: v for k, v in item.items() if k != "status"}


def comparable(ours: list[Any], wanted: list[Any]) -> tuple[list[Any], list[Any]]:
    """Both inputs normalized; reasoning and hosted items the wanted request leaves out are
    dropped from ours, and ids only compared where the wanted request has them."""
    wanted_n = [norm(i) for i in wanted if not is_empty_assistant(i)]
    wanted_ids = {i.get("id") for i in wanted_n}
    ours_n = [norm(i) for i in ours if kind(i) not in OPTIONAL_TYPES or i.get("id") in wanted_ids]
    for mine, theirs in zip(ours_n, wanted_n, strict=False):
        if "id" not in theirs:
            mine.pop("id", None)
    return ours_n, wanted_n


def opaque_literals(raw: bytes) -> list[bytes]:
    return [
        m.group(2)
        for m in OPAQUE.finditer(raw)
        if m.group(2) not in (b'""', b"null") and not m.group(2).startswith(b'"resp_')
    ]


def item_literals(response: Path) -> list[bytes]:
    """The opaque literals of a response's output items, as the wire spelled them: from each
    `output_item.done` event of a stream, from the output of a JSON body."""
    raw = response.read_bytes()
    if response.suffix == ".json":
        return opaque_literals(raw)
    found = []
    for line in raw.splitlines():
        if line.startswith(b"data:") and b'"response.output_item.done"' in line:
            found += opaque_literals(line[5:])
    return found


def body_of(encoded: EncodedRequest) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(encoded.to_json())
    return parsed


# --- decode → store → encode against the next captured request ----------------------------------


def continuations() -> list[Any]:
    cases = []
    for folder in folders():
        found = exchanges(folder)
        for before, after in itertools.pairwise(found):
            if before.request is None or after.request is None:
                continue
            if json.loads(after.request).get("previous_response_id"):
                continue
            if len(input_of(after.request)) > len(input_of(before.request)):
                cases.append(pytest.param(found, before.n, id=f"{folder.name}/{before.n}"))
    return cases or [pytest.param(None, 0, marks=pytest.mark.skip(reason="no continuations"))]


@pytest.mark.parametrize(("found", "n"), continuations())
def test_encoding_rebuilds_the_next_captured_request(found: list[Exchange], n: int) -> None:
    through = [x for x in found if x.n <= n]
    following = next(x for x in found if x.n > n)
    conversation = conversation_through(through)
    assert following.request is not None
    # Only what the client added after the response is recorded from the request: every
    # assistant item of it is rebuilt from the stored response.
    assert set(record_history(conversation, following.request)) <= {"user"}

    encoded = encode_request(events_of(conversation), config=openai_consent(following.request))
    raw = encoded.to_json()
    body = json.loads(raw)
    wanted = json.loads(following.request)
    ours_n, wanted_n = comparable(body["input"], input_of(following.request))
    assert ours_n == wanted_n
    for key in ("model", "instructions", "tools", "tool_choice", "reasoning", "include"):
        assert body.get(key) == wanted.get(key), key
    assert body["store"] is wanted.get("store", True)  # OpenAI's default: stored
    assert "stream" not in body
    assert encoded.losses == []
    for literal in opaque_literals(following.request):
        assert literal in raw


def test_the_reasoning_round_trip_is_byte_identical() -> None:
    """Example reasoning_function_roundtrip: input[1] and input[2] of the second request
    are the stored reasoning and function_call items, every opaque byte as received."""
    folder = OURS / "reasoning_function_roundtrip"
    first, second = exchanges(folder)
    conversation = conversation_through([first])
    assert second.request is not None
    record_history(conversation, second.request)
    raw = encode_request_bytes(events_of(conversation), config=DEFAULT)
    wanted = re.search(rb'"encrypted_content":("[^"]*")', second.request)
    assert wanted is not None and wanted.group(1) in raw
    # The streamed item's added copy carried another encrypted_content: never that one.
    added = [
        json.loads(line[5:])
        for line in first.response.read_bytes().splitlines()
        if line.startswith(b"data:") and b'"response.output_item.added"' in line
    ]
    stale = added[0]["item"]["encrypted_content"]
    assert stale.encode() not in raw
    body = json.loads(raw)
    assert [kind(i) for i in body["input"]] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert body["include"] == ["reasoning.encrypted_content"]


def literal_groups(folder: Path) -> Iterator[tuple[Conversation, list[bytes], bool]]:
    """Conversations of a folder's exchanges (a request that does not continue the previous
    ones starts a new one), with the literals of their completed responses, and whether
    every response completed."""
    conversation, literals, whole = Conversation.start(), [], True
    for exchange in exchanges(folder):
        if exchange.request is not None:
            try:
                record_history(conversation, exchange.request)
            except HistoryMismatch:  # the same question asked again
                yield conversation, literals, whole
                conversation, literals, whole = Conversation.start(), [], True
                record_history(conversation, exchange.request)
        drafts = exchange.decode()
        conversation.record_all(drafts)
        ended = [d for d in drafts if isinstance(d, ResponseEnded)]
        if ended and ended[-1].state == "completed":
            literals += item_literals(exchange.response)
        else:
            whole = False
        if exchange.request is None:
            answer_open_calls(conversation)  # no request follows: answer as a client would
    yield conversation, literals, whole


@pytest.mark.parametrize("folder", [pytest.param(f, id=f.name) for f in folders()])
def test_every_opaque_value_of_every_completed_response_comes_back(folder: Path) -> None:
    for conversation, literals, whole in literal_groups(folder):
        events = events_of(conversation)
        models = [e.model for e in events if isinstance(e, ResponseStarted) and e.model]
        config = openai_consent(*(x.request for x in exchanges(folder)), store=True)
        encoded = encode_request(events, config=config, model=None if models else "gpt-5.1")
        raw = encoded.to_json()
        for literal in literals:
            assert literal in raw
        if whole:  # at most tool_choice narrowed (hosted_tools/2: `required` with hosted)
            assert [loss.kind for loss in encoded.losses if loss.kind != "tool_choice"] == []


def test_a_stored_conversation_replays_its_reasoning_and_store_false_goes_portable() -> None:
    """Example refusal_incomplete/2: the request leaves `store` out (OpenAI's default,
    true: its response reports `"store": true`) and the reasoning item has no
    encrypted_content. Replayed as recorded, with store=true, its ids resolve on OpenAI's
    side: everything is replayed. With store=false OpenAI could not resolve them."""
    exchange = Exchange(OURS / "refusal_incomplete", 2)
    assert exchange.request is not None and b'"store"' not in exchange.request
    conversation = conversation_through([exchange])
    recorded = encode_request(events_of(conversation), config=DEFAULT)
    assert body_of(recorded)["store"] is True
    assert recorded.losses == [] and b'"rs_' in recorded.to_json()
    assert "include" not in body_of(recorded)
    assert_valid_openai_request(body_of(recorded))
    encoded = encode_request(events_of(conversation), config=OpenAIConfig(store=False))
    raw = encoded.to_json()
    body = json.loads(raw)
    assert body["store"] is False
    assert b'"rs_' not in raw and b'"msg_' not in raw
    assert [(loss.event, loss.kind) for loss in encoded.losses] == [
        ("Reasoning", "reasoning"),
        ("AssistantText", "payload"),
    ]
    assert "encrypted_content and the request is sent with store=false" in encoded.losses[0].reason
    assert body["input"][-1]["role"] == "assistant"
    assert isinstance(body["input"][-1]["content"], str)
    assert_valid_openai_request(body)


def test_a_message_item_is_sent_once_for_all_its_texts() -> None:
    item = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "Un.", "annotations": []},
            {"type": "output_text", "text": "Deux.", "annotations": []},
        ],
    }
    body = {"id": "resp_x", "object": "response", "model": "gpt-5.1", "status": "completed"}
    raw = json.dumps({**body, "output": [item, {**item, "id": "msg_2"}]}).encode()
    conversation = Conversation.start()
    conversation.record_all(list(detect_and_decode(raw)))
    texts = [e for e in events_of(conversation) if isinstance(e, AssistantText)]
    assert len(texts) == 4
    sent = body_of(encode_request(events_of(conversation), config=DEFAULT))["input"]
    assert [i["id"] for i in sent] == ["msg_1", "msg_2"]


# --- history (ingest --request) ------------------------------------------------------------------


def request_files() -> list[Any]:
    found = [
        (x.folder / f"{x.n}.request.json")
        for folder in folders()
        for x in exchanges(folder)
        if x.request is not None
    ]
    return [pytest.param(p, id=f"{p.parent.name}/{p.name}") for p in found]


@pytest.mark.parametrize("path", request_files())
def test_a_request_history_records_and_replays_unchanged(path: Path) -> None:
    request = path.read_bytes()
    conversation = Conversation.start()
    record_history(conversation, request)
    encoded = encode_request(events_of(conversation), config=DEFAULT, model=request_model(request))
    raw = encoded.to_json()
    ours, wanted = comparable(body_of(encoded)["input"], input_of(request))
    assert ours == wanted
    for literal in opaque_literals(json.dumps(json.loads(request)["input"]).encode()):
        assert literal in raw or literal.decode("unicode_escape").encode() in raw
    assert encoded.losses == []
    assert recorded_prefix(events_of(conversation), request) == len(input_of(request))


def test_history_drafts_by_position() -> None:
    request = (OURS / "reasoning_function_roundtrip" / "2.request.json").read_bytes()
    messages = history_drafts(request)
    assert [(m.index, m.role) for m in messages] == [(0, "user"), (1, "assistant"), (3, "user")]
    assert [type(d).__name__ for d in messages[0].drafts] == ["UserMessage"]
    started, *items, ended = messages[1].drafts
    assert isinstance(started, ResponseStarted) and started.origin == "request"
    assert re.fullmatch(r"request:[0-9a-f]{16}:1", started.response_id)
    assert started.model == "gpt-5.1"
    assert isinstance(ended, ResponseEnded) and ended.state == "completed"
    assert [type(d).__name__ for d in items] == ["Reasoning", "ToolCallRequested"]
    reasoning, call = items
    assert isinstance(reasoning, Reasoning) and reasoning.payload is not None
    assert reasoning.payload.binding == {"model": "gpt-5.1"}
    assert b'"encrypted_content":"gAAAAABYKUzE' in reasoning.payload.raw
    assert isinstance(call, ToolCallRequested) and call.call_id == "call_Iy13iJYJjdYJBVIHqbwg3Mpf"
    [result] = messages[2].drafts
    assert isinstance(result, ToolCallResponded) and result.payload is not None
    assert result.payload.format == "input_item"
    assert result.content.startswith('{"forecast"')
    # Ids are deterministic: the same body gives the same drafts.
    assert history_drafts(request) == messages


def test_history_reads_every_user_side_item() -> None:
    request = json.dumps(
        {
            "model": "gpt-5.1",
            "input": [
                {"role": "developer", "content": "Sois bref."},
                {"role": "user", "content": [{"type": "input_text", "text": "Bonjour"}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Et ça ?"},
                        {"type": "input_image", "image_url": "https://example.com/a.png"},
                    ],
                },
                {"role": "assistant", "content": "Une image."},
                {"type": "function_call_output", "call_id": "nobody", "output": "x"},
                {"type": "item_reference", "id": "msg_old"},
            ],
        }
    ).encode()
    messages = history_drafts(request)
    kinds = [(m.role, [type(d).__name__ for d in m.drafts]) for m in messages]
    assert kinds == [
        ("user", ["UnknownArtifact"]),
        ("user", ["UserMessage"]),
        ("user", ["UnknownArtifact"]),
        ("assistant", ["ResponseStarted", "AssistantText", "ResponseEnded"]),
        ("user", ["UnknownArtifact"]),
        ("user", ["UnknownArtifact"]),
    ]
    conversation = Conversation.start()
    record_history(conversation, request)
    ours, wanted = comparable(
        body_of(encode_request(events_of(conversation), config=DEFAULT))["input"],
        input_of(request),
    )
    assert ours == wanted
    # The short-form assistant message is replayed as captured.
    raw = encode_request_bytes(events_of(conversation), config=DEFAULT)
    assert b'{"role": "assistant", "content": "Une image."}' in raw


def test_a_conversation_must_be_a_prefix_of_the_request() -> None:
    folder = OURS / "reasoning_function_roundtrip"
    first, second = exchanges(folder)
    conversation = conversation_through([first])
    assert second.request is not None
    assert recorded_prefix(events_of(conversation), second.request) == 3
    other = json.loads(second.request)
    other["input"][0]["content"] = "Une autre question"
    with pytest.raises(HistoryMismatch, match=r"input\[0\]") as caught:
        history(events_of(conversation), json.dumps(other).encode())
    assert isinstance(caught.value, DecodeError)
    shorter = json.dumps({"model": "gpt-5.1", "input": input_of(second.request)[:1]}).encode()
    with pytest.raises(HistoryMismatch, match="holds more"):
        recorded_prefix(events_of(conversation), shorter)
    with pytest.raises(DecodeError, match="not an OpenAI"):
        history([], b"[1, 2]")
    with pytest.raises(DecodeError, match=r"input\[0\] is not an object"):
        history([], b'{"input": [1]}')


def test_a_client_may_leave_out_hosted_items_and_empty_assistant_messages() -> None:
    """pydantic-ai style: hosted calls and reasoning left out, an empty assistant message."""
    exchange = Exchange(OURS / "file_search_citation", 1)
    conversation = conversation_through([exchange])
    texts = [e.text for e in events_of(conversation) if isinstance(e, AssistantText)]
    request = json.dumps(
        {
            "model": "gpt-4.1",
            "input": [
                input_of(exchange.request or b"{}")[0],
                {"role": "assistant", "content": ""},
                {"role": "assistant", "content": "".join(texts)},
                {"role": "user", "content": "Merci !"},
            ],
        }
    ).encode()
    assert recorded_prefix(events_of(conversation), request) == 3
    [added] = history(events_of(conversation), request)
    assert added.index == 3 and isinstance(added.drafts[0], UserMessage)


def test_previous_response_id_requests(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="convstore.adapters.openai")
    only = b'{"model":"gpt-5.1","previous_response_id":"resp_1"}'
    assert history([], only) == []
    assert "holds no input" in caplog.text
    folder = OURS / "reasoning_function_roundtrip"
    first = exchanges(folder)[0]
    conversation = conversation_through([first])
    started = next(e for e in events_of(conversation) if isinstance(e, ResponseStarted))
    call = next(e for e in events_of(conversation) if isinstance(e, ToolCallRequested))
    follow = json.dumps(
        {
            "model": "gpt-5.1",
            "previous_response_id": started.response_id,
            "input": [{"type": "function_call_output", "call_id": call.call_id, "output": "22"}],
        }
    ).encode()
    [added] = history(events_of(conversation), follow)
    assert isinstance(added.drafts[0], ToolCallResponded)


def test_item_keys() -> None:
    assert item_key({"role": "user", "content": "a"}) == item_key(
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]}
    )
    assert item_key({"type": "function_call", "call_id": "c", "id": "fc_1"}) == item_key(
        {"type": "custom_tool_call", "call_id": "c"}
    )
    assert item_key({"type": "reasoning", "id": "rs_1"}) != item_key(
        {"type": "reasoning", "id": "rs_2"}
    )


def roundtrip_conversation() -> Conversation:
    folder = OURS / "reasoning_function_roundtrip"
    first, second = exchanges(folder)
    conversation = conversation_through([first])
    assert second.request is not None
    record_history(conversation, second.request)
    conversation.record_all(second.decode())
    return conversation


def test_a_payload_bound_to_another_model_is_sent_in_portable_form() -> None:
    conversation = roundtrip_conversation()
    snapshot = encode_request(events_of(conversation), config=DEFAULT, model="gpt-5.1-2025-11-13")
    assert snapshot.losses == []
    encoded = encode_request(events_of(conversation), config=DEFAULT, model="gpt-4.1")
    raw = encoded.to_json()
    assert b'"encrypted_content"' not in raw and b'"rs_' not in raw and b'"msg_' not in raw
    assert b"fc_7e7922cfbed5fa2330cd0bbcbc00b7a6baf4ec38fa949307" not in raw
    body = json.loads(raw)
    assert [kind(i) for i in body["input"]] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    call = body["input"][1]
    assert re.fullmatch(r"fc_[0-9a-f]{40}", call["id"])
    assert call["call_id"] == "call_Iy13iJYJjdYJBVIHqbwg3Mpf"
    assert json.loads(call["arguments"]) == {"city": "Zürich, Suisse", "unit": "celsius"}
    assert body["input"][3]["role"] == "assistant"
    assert isinstance(body["input"][3]["content"], str)
    assert_valid_openai_request(body)
    # gpt-4.1 does not reason: the recorded reasoning settings are left out too.
    assert "include" not in body and "reasoning" not in body
    kinds = sorted((loss.event, loss.kind) for loss in encoded.losses)
    assert kinds == [
        ("AssistantText", "payload"),
        ("Reasoning", "reasoning"),
        ("Reasoning", "reasoning"),
        ("ResponseStarted", "settings"),
        ("ToolCallRequested", "payload"),
    ]
    assert all(
        "bound to model" in loss.reason for loss in encoded.losses if loss.kind != "settings"
    )
    # Another reasoning model: the settings stay, the reasoning items still go.
    other = body_of(encode_request(events_of(conversation), config=DEFAULT, model="o4-mini"))
    assert other["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert other["include"] == ["reasoning.encrypted_content"]
    # Deterministic: the same conversation gives the same request.
    assert encode_request_bytes(events_of(conversation), config=DEFAULT, model="gpt-4.1") == raw


def test_an_interrupted_response_is_never_replayed_natively() -> None:
    """errors/1: the stream is cut by an error event mid-text (a `partial` message)."""
    conversation = conversation_through([Exchange(OURS / "errors", 1)])
    encoded = encode_request(events_of(conversation), config=STORED)
    body = body_of(encoded)
    [_, item] = body["input"]
    assert item["role"] == "assistant" and isinstance(item["content"], str)
    assert "id" not in item
    assert [(loss.event, loss.kind) for loss in encoded.losses] == [("AssistantText", "payload")]
    assert "ended failed" in encoded.losses[0].reason


# --- other providers' conversations --------------------------------------------------------------

FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_responses_request(body: dict[str, Any]) -> None:
    """The Responses API's required structure, checked item by item."""
    assert isinstance(body["model"], str) and body["model"]
    assert isinstance(body["input"], list) and body["input"]
    assert isinstance(body["store"], bool)
    assert "stream" not in body and "previous_response_id" not in body
    calls: set[str] = set()
    for item in body["input"]:
        assert isinstance(item, dict)
        if item.get("role") == "assistant":  # no item id to send: plain-string content
            assert set(item) == {"role", "content"}
            assert isinstance(item["content"], str) and item["content"]
        elif "role" in item:
            assert set(item) == {"role", "content"} and item["role"] == "user"
            assert isinstance(item["content"], list) and item["content"]
            for part in item["content"]:
                assert part["type"] == "input_text" and isinstance(part["text"], str)
        elif item["type"] == "function_call":
            assert set(item) == {"type", "id", "call_id", "name", "arguments"}
            assert item["id"].startswith("fc_")
            assert FUNCTION_NAME.fullmatch(item["name"])
            assert isinstance(json.loads(item["arguments"]), dict)
            calls.add(item["call_id"])
        elif item["type"] == "function_call_output":
            assert set(item) == {"type", "call_id", "output"}
            assert item["call_id"] in calls  # after its call
            assert isinstance(item["output"], str)
        else:
            raise AssertionError(f"unexpected item {item['type']}")
    for tool in body.get("tools", []):
        assert tool["type"] == "function" and FUNCTION_NAME.fullmatch(tool["name"])
        assert tool["strict"] is False and tool["parameters"]["type"] == "object"
    choice = body.get("tool_choice")
    assert choice is None or choice in ("auto", "none", "required") or isinstance(choice, dict)
    assert_valid_openai_request(body)


def expected_losses(events: Sequence[Event]) -> list[tuple[int, str]]:
    """What a portable replay must list, read from the events with the rules of the
    encoder's documentation: one entry per thing left out."""
    out: list[tuple[int, str]] = []
    seen_activities: set[str] = set()
    for event in events:
        version = event.originator_version
        if isinstance(event, Reasoning):
            out.append((version, "reasoning"))
        elif isinstance(event, HostedActivity):
            if event.activity_id not in seen_activities:
                seen_activities.add(event.activity_id)
                out.append((version, "hosted_activity"))
        elif isinstance(event, UnknownArtifact):
            out.append((version, "unknown_artifact"))
        elif isinstance(event, AssistantText):
            if event.payload is not None:
                out.append((version, "payload"))
            if event.attributions:  # plain-string content carries no annotations
                out.append((version, "citations"))
        elif isinstance(event, ToolCallRequested | ToolCallResponded):
            if event.payload is not None:
                out.append((version, "payload"))
            if isinstance(event, ToolCallResponded) and event.is_error:
                out.append((version, "tool_result"))
    newest = [e for e in events if isinstance(e, ResponseStarted) and e.settings.native]
    if newest:
        settings = newest[-1]
        out.append((settings.originator_version, "settings"))
        out += [
            (settings.originator_version, "tool_declaration")
            for tool in settings.settings.tools
            if tool.hosted
        ]
    return sorted(out)


def anthropic_conversation(name: str, n: int) -> Conversation:
    folder = EXAMPLES / "anthropic" / name
    conversation = Conversation.start()
    for i in range(1, n + 1):
        request = (folder / f"{i}.request.json").read_bytes()
        held = anthropic_history.recorded_prefix(events_of(conversation), request)
        for message in anthropic_history.history_drafts(request, start=held):
            conversation.record_all(message.drafts)
        [response] = folder.glob(f"{i}.response.*")
        context = anthropic_context.RequestContext.from_body(request)
        decoded = anthropic_decode.detect_and_decode(response.read_bytes(), request=context)
        conversation.record_all(list(decoded))
    answer_open_calls(conversation)
    return conversation


def google_conversation(name: str) -> Conversation:
    folder = EXAMPLES / "google" / name
    conversation = Conversation.start()
    request = (folder / "1.request.json").read_bytes()
    meta = json.loads((folder / "1.meta.json").read_text())
    first = json.loads(request)["contents"][0]["parts"][0]["text"]
    conversation.record(UserMessage(blocks=(first,)))
    context = google_decode.context_for(request, path=meta.get("path", ""))
    [response] = folder.glob("1.response.*")
    decoded = google_decode.detect_and_decode(response.read_bytes(), request=context)
    conversation.record_all(list(decoded))
    answer_open_calls(conversation)
    return conversation


FOREIGN = [
    pytest.param(
        lambda: anthropic_conversation("thinking_tool_roundtrip", 2), id="anthropic-think"
    ),
    pytest.param(lambda: anthropic_conversation("web_search_citations", 1), id="anthropic-search"),
    pytest.param(lambda: anthropic_conversation("mixed_batch", 1), id="anthropic-mixed"),
    pytest.param(lambda: anthropic_conversation("pause_turn", 1), id="anthropic-pause"),
    pytest.param(lambda: google_conversation("thinking_function_roundtrip"), id="google-think"),
    pytest.param(lambda: google_conversation("grounding_search_stream"), id="google-grounding"),
    pytest.param(lambda: google_conversation("code_execution"), id="google-code"),
    pytest.param(lambda: google_conversation("array_stream"), id="google-array"),
]


@pytest.mark.parametrize("build", FOREIGN)
def test_another_providers_conversation_replays_portably(build: Any) -> None:
    conversation: Conversation = build()
    events = events_of(conversation)
    with pytest.raises(ConfigurationError, match="no model"):
        encode_request(events, config=DEFAULT)
    encoded = encode_request(events, config=DEFAULT, model="gpt-5.1")
    raw = encoded.to_json()
    body = json.loads(raw)
    check_responses_request(body)
    assert body["model"] == "gpt-5.1"
    assert sorted((loss.version, loss.kind) for loss in encoded.losses) == expected_losses(events)
    assert all(loss.version > 0 for loss in encoded.losses)
    # No payload of another provider reaches the request.
    for event in events:
        payload = getattr(event, "payload", None)
        if isinstance(payload, ProviderPayload):
            for literal in re.findall(
                rb'"(?:signature|thoughtSignature|encrypted_\w+)":("[^"]+")', payload.raw
            ):
                assert literal not in raw
    # Every user text, assistant text and tool call reaches it.
    texts = [t for e in events if isinstance(e, UserMessage) for t in e.blocks]
    sent = [p["text"] for i in body["input"] if i.get("role") == "user" for p in i["content"]]
    assert sent == texts
    answers = [i["content"] for i in body["input"] if i.get("role") == "assistant"]
    assert "".join(answers) == "".join(e.text for e in events if isinstance(e, AssistantText))
    calls = [e.call_id for e in events if isinstance(e, ToolCallRequested)]
    assert [i["call_id"] for i in body["input"] if i.get("type") == "function_call"] == calls


def test_foreign_text_goes_as_plain_string_content_its_citations_listed() -> None:
    """Gemini grounded text: OpenAI has no item of it, so no output message (whose `id`
    would have to be invented); its citations are listed, one loss per cited text."""
    conversation = google_conversation("grounding_search_stream")
    texts = [e for e in events_of(conversation) if isinstance(e, AssistantText)]
    encoded = encode_request(events_of(conversation), config=DEFAULT, model="gpt-5.1")
    body = body_of(encoded)
    [answer] = [i for i in body["input"] if i.get("role") == "assistant"]
    assert answer == {"role": "assistant", "content": "".join(t.text for t in texts)}
    cited = [t for t in texts if t.attributions]
    assert cited
    losses = [loss for loss in encoded.losses if loss.kind == "citations"]
    assert [loss.version for loss in losses] == [t.originator_version for t in cited]
    for loss, text in zip(losses, cited, strict=True):
        assert loss.reason.startswith(f"{len(text.attributions)} citation(s) left out")
    assert_valid_openai_request(body)


def foreign_events() -> list[Event]:
    """A small Anthropic conversation built by hand: every kind of event."""
    conversation = Conversation.start()
    conversation.record(UserMessage(blocks=("Où en est la commande 7 ?",)))
    rid = ResponseId("msg_1")

    def payload(value: dict[str, Any]) -> ProviderPayload:
        return ProviderPayload.of("anthropic", "content_block", msgspec.json.encode(value))

    settings = RequestSettings(
        system="Sois bref.",
        tools=(
            ToolDeclaration(name="lookup.order", description="Cherche", input_schema=None),
            ToolDeclaration(name="web_search", hosted=True, native_type="web_search_20250305"),
        ),
        tool_choice="any",
        max_tokens=512,
    )
    conversation.record_all(
        [
            ResponseStarted(
                response_id=rid, provider="anthropic", model="claude", settings=settings
            ),
            AssistantText(
                response_id=rid,
                text="Je regarde.",
                attributions=(
                    Attribution(source=Source(kind="document", title="doc"), range=TextRange(0, 2)),
                ),
            ),
            ToolCallRequested(
                response_id=rid,
                call_id=CallId("toolu_1"),
                name="lookup.order",
                arguments={"id": "7"},
                payload=payload({"type": "tool_use", "id": "toolu_1"}),
            ),
            ResponseEnded(response_id=rid, state="completed", finish_reason="tool_use"),
        ]
    )
    conversation.record(ToolCallResponded(call_id=CallId("toolu_1"), content="404", is_error=True))
    conversation.record(ContextInjected(source="steering", text="Réponds en français."))
    return events_of(conversation)


def test_long_foreign_call_ids_are_shortened_alike() -> None:
    long_id = "gemini:" + "x" * 80
    short = call_id_for(long_id)
    assert (
        len(short) == 64 and short == call_id_for(long_id) and short != call_id_for(long_id + "y")
    )
    assert call_id_for("call_1") == "call_1"
    conversation = Conversation.start()
    rid = ResponseId("g1")
    conversation.record_all(
        [
            ResponseStarted(response_id=rid, provider="google", model="gemini-2.5-flash"),
            ToolCallRequested(response_id=rid, call_id=CallId(long_id), name="f"),
            ResponseEnded(response_id=rid, state="completed", finish_reason="tool_use"),
        ]
    )
    conversation.record(ToolCallResponded(call_id=CallId(long_id), content="ok"))
    body = body_of(encode_request(events_of(conversation), config=DEFAULT, model="gpt-5.1"))
    check_responses_request(body)
    assert [i["call_id"] for i in body["input"]] == [short, short]


def test_portable_settings_tools_and_names() -> None:
    events = foreign_events()
    encoded = encode_request(events, config=DEFAULT, model="gpt-5.1", user="Et alors ?")
    body = body_of(encoded)
    check_responses_request(body)
    assert body["instructions"] == "Sois bref."
    assert body["max_output_tokens"] == 512
    [tool] = body["tools"]
    assert re.fullmatch(r"lookup_order_[0-9a-f]{8}", tool["name"])
    assert tool["parameters"] == {"type": "object", "properties": {}}
    assert body["tool_choice"] == "required"  # `any`: no hosted tool is declared
    call = next(i for i in body["input"] if i.get("type") == "function_call")
    assert call["name"] == tool["name"]
    assert body["input"][-2]["content"][0]["text"] == (
        '<context source="steering">Réponds en français.</context>'
    )
    assert body["input"][-1] == {
        "role": "user",
        "content": [{"type": "input_text", "text": "Et alors ?"}],
    }
    kinds = sorted((loss.event, loss.kind) for loss in encoded.losses)
    assert kinds == [
        ("AssistantText", "citations"),
        ("ResponseStarted", "tool_declaration"),
        ("ToolCallRequested", "payload"),
        ("ToolCallResponded", "tool_result"),
    ]
    lines = list(iter_losses(encoded.losses))
    assert len(lines) == 4 and lines[0].startswith("event ")


def test_context_is_a_tagged_user_envelope_never_a_system_prompt() -> None:
    conversation = roundtrip_conversation()
    conversation.record(ContextInjected(source="steering", text="En français."))
    conversation.record(ContextInjected(source='odd"source', text="x"))
    body = body_of(encode_request(events_of(conversation), config=DEFAULT))
    roles = {i.get("role") for i in body["input"] if "role" in i}
    assert roles == {"user", "assistant"}
    assert body["input"][-2:] == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": context_envelope("steering", "En français.")}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": '<context source="odd&quot;source">x</context>'}
            ],
        },
    ]
    assert body.get("instructions") is None


# --- settings, hosted tools, tool_choice ---------------------------------------------------------


def openai_events(
    native: dict[str, Any],
    *,
    pending: bool = False,
    ended: str = "completed",
) -> list[Event]:
    """An OpenAI conversation recorded with `native` settings; with `pending`, a web search
    started and never finished in the response."""
    conversation = Conversation.start()
    conversation.record(UserMessage(blocks=("Quoi de neuf ?",)))
    context = RequestContext.from_body(json.dumps({**native, "input": "x"}).encode())
    rid = ResponseId("resp_1")
    drafts: list[Event] = [
        ResponseStarted(
            response_id=rid, provider="openai", model="gpt-5.1", settings=context.settings
        )
    ]
    if pending:
        item = {"id": "ws_1", "type": "web_search_call", "status": "in_progress"}
        drafts.append(
            HostedActivity(
                activity_id=ActivityId("ws_1"),
                name="web_search",
                state="started",
                response_id=rid,
                payload=ProviderPayload.of(
                    "openai",
                    "output_item",
                    json.dumps(item).encode(),
                    version="web_search_preview",
                    binding={"model": "gpt-5.1"},
                ),
            )
        )
    drafts.append(ResponseEnded(response_id=rid, state=ended))  # type: ignore[arg-type]
    conversation.record_all(drafts)
    return events_of(conversation)


FUNCTION = {"type": "function", "name": "lookup", "parameters": {"type": "object"}, "strict": True}


def test_configuration_overrides_the_recorded_settings() -> None:
    native = {
        "model": "gpt-5.1",
        "instructions": "Sois bref.",
        "tools": [FUNCTION, {"type": "web_search", "search_context_size": "low"}],
        "max_output_tokens": 100,
        "store": True,
        "stream": True,
        "previous_response_id": "resp_0",
        "reasoning": {"effort": "low"},
        "text": {"verbosity": "low"},
    }
    events = openai_events(native)
    unconsented = encode_request(events, config=DEFAULT)
    body = body_of(unconsented)
    assert body["model"] == "gpt-5.1" and body["max_output_tokens"] == 100
    assert body["store"] is True  # recorded; config.store absent
    assert body["instructions"] == "Sois bref." and body["text"] == {"verbosity": "low"}
    assert "stream" not in body and "previous_response_id" not in body
    assert body["tools"] == [FUNCTION]  # the recorded web search is no consent
    [loss] = unconsented.losses
    assert loss.kind == "tool_declaration"
    assert "providers.openai.hosted_tools.web_search.enable = true" in loss.reason
    consented = encode_request(events, config=openai_consent(msgspec.json.encode(native)))
    assert body_of(consented)["tools"] == native["tools"] and consented.losses == []
    config = OpenAIConfig.from_config(
        {
            "providers": {
                "openai": {
                    "model": "gpt-4.1",
                    "max_output_tokens": 2000,
                    "store": False,
                    "hosted_tools": {
                        "web_search": {
                            "enable": True,
                            "search_context_size": "high",
                            "allowed_domains": ["example.org"],
                            "user_location": {"city": "Lyon", "country": "FR"},
                        },
                        "code_interpreter": {"enable": True},
                    },
                }
            }
        }
    )
    body = body_of(encode_request(events, config=config, model="gpt-5.1-2025-11-13"))
    assert body["model"] == "gpt-5.1-2025-11-13"
    assert (body["max_output_tokens"], body["store"]) == (2000, False)
    assert body["tools"] == [
        FUNCTION,
        {
            "type": "web_search",
            "search_context_size": "high",
            "user_location": {"type": "approximate", "city": "Lyon", "country": "FR"},
            "filters": {"allowed_domains": ["example.org"]},
        },
        {"type": "code_interpreter", "container": {"type": "auto"}},
    ]
    disabled = OpenAIConfig.from_block({"hosted_tools": {"web_search": {"enable": False}}})
    assert body_of(encode_request(events, config=disabled))["tools"] == [FUNCTION]


def test_a_pending_activity_keeps_its_tool_declared() -> None:
    native = {"model": "gpt-5.1", "tools": [{"type": "web_search_preview"}]}
    disabled = OpenAIConfig.from_block({"hosted_tools": {"web_search": {"enable": False}}})
    pending = openai_events(native, pending=True)
    for config in (disabled, DEFAULT):
        encoded = encode_request(pending, config=config)
        body = body_of(encoded)
        assert body["tools"] == [{"type": "web_search_preview"}]
        assert body["input"][-1] == {
            "id": "ws_1",
            "type": "web_search_call",
            "status": "in_progress",
        }
        [loss] = encoded.losses  # said so
        assert (loss.event, loss.kind) == ("HostedActivity", "kept_declared")
        assert "ws_1" in loss.reason and encoded.kept_declared == ("web_search",)
    # Enabled: kept as it began (the preview type), and nothing to say.
    enabled = OpenAIConfig.from_block({"hosted_tools": {"web_search": {"enable": True}}})
    encoded = encode_request(pending, config=enabled)
    assert body_of(encoded)["tools"] == [{"type": "web_search_preview"}]
    assert encoded.losses == [] and encoded.kept_declared == ()
    # Declared again from its payload's version when the recorded tools lost it.
    bare = openai_events({"model": "gpt-5.1"}, pending=True)
    assert body_of(encode_request(bare, config=disabled))["tools"] == [
        {"type": "web_search_preview"}
    ]
    # Interrupted (the response did not complete): left out, and no longer declared.
    interrupted = openai_events(native, pending=True, ended="abandoned")
    encoded = encode_request(interrupted, config=disabled)
    assert "tools" not in body_of(encoded)
    assert [(loss.event, loss.kind) for loss in encoded.losses] == [
        ("HostedActivity", "hosted_activity"),
        ("ResponseStarted", "tool_declaration"),
    ]


def with_choice(choice: Any, tools: list[Any], config: OpenAIConfig = DEFAULT) -> EncodedRequest:
    native = {"model": "gpt-5.1", "tools": tools, "tool_choice": choice}
    return encode_request(openai_events(native), config=config)


def test_tool_choice_is_never_broadened_to_hosted_tools() -> None:
    search = {"type": "web_search"}
    consent = OpenAIConfig.from_block({"hosted_tools": {"web_search": {"enable": True}}})
    encoded = with_choice("required", [FUNCTION, search], consent)
    assert body_of(encoded)["tool_choice"] == {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "lookup"}],
    }
    [loss] = encoded.losses
    assert loss.kind == "tool_choice" and "narrowed" in loss.reason
    # No hosted tool declared: kept as recorded, byte for byte.
    kept = with_choice(
        "required",
        [FUNCTION, search],
        OpenAIConfig.from_block({"hosted_tools": {"web_search": {"enable": False}}}),
    )
    assert body_of(kept)["tool_choice"] == "required"
    assert [loss.kind for loss in kept.losses] == ["tool_declaration"]
    only_hosted = with_choice("required", [search], consent)
    assert "tool_choice" not in body_of(only_hosted)
    assert only_hosted.losses[0].kind == "tool_choice"
    # Forcing a hosted tool: kept while declared, left out once disabled (OpenAI: 400).
    forced = with_choice({"type": "web_search"}, [FUNCTION, search], consent)
    assert body_of(forced)["tool_choice"] == {"type": "web_search"}
    gone = with_choice(
        {"type": "web_search"},
        [FUNCTION, search],
        OpenAIConfig.from_block({"hosted_tools": {"web_search": {"enable": False}}}),
    )
    assert "tool_choice" not in body_of(gone) and "not declared" in gone.losses[0].reason
    # Portable `any` with a hosted tool enabled by the configuration.
    enabled = OpenAIConfig.from_block({"hosted_tools": {"web_search": {"enable": True}}})
    encoded = encode_request(foreign_events(), config=enabled, model="gpt-5.1")
    choice = body_of(encoded)["tool_choice"]
    assert choice["type"] == "allowed_tools" and choice["mode"] == "required"
    assert [t["type"] for t in choice["tools"]] == ["function"]


def test_scope_tool_choice_rules() -> None:
    function = DeclaredTool("lookup", "function", FUNCTION, False)
    computer = DeclaredTool("computer", "computer_use_preview", {}, False)
    search = DeclaredTool("web_search", "web_search_preview", {}, True)
    mcp = DeclaredTool("mcp:docs", "mcp", {}, True)
    tools = [function, computer, search, mcp]
    assert scope_tool_choice("auto", tools) == ("auto", None)
    assert scope_tool_choice("none", []) == (None, None)
    assert scope_tool_choice("required", [])[0] is None
    assert scope_tool_choice({"type": "function", "name": "lookup"}, tools)[1] is None
    assert scope_tool_choice({"type": "function", "name": "other"}, tools)[0] is None
    assert scope_tool_choice({"type": "web_search_preview"}, tools)[1] is None
    assert scope_tool_choice({"type": "web_search"}, tools)[1] is None  # the same capability
    assert scope_tool_choice({"type": "file_search"}, tools)[0] is None
    assert scope_tool_choice({"type": "mcp", "server_label": "docs"}, tools)[1] is None
    narrowed, why = scope_tool_choice("required", tools)
    assert narrowed["tools"] == [
        {"type": "function", "name": "lookup"},
        {"type": "computer_use_preview"},
    ]
    assert why is not None
    allowed = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "lookup"}, {"type": "web_search_preview"}],
    }
    scoped, why = scope_tool_choice(allowed, tools)
    assert scoped["tools"] == [{"type": "function", "name": "lookup"}] and why is not None
    auto = {**allowed, "mode": "auto"}
    assert scope_tool_choice(auto, tools) == (auto, None)
    assert scope_tool_choice(42, tools)[0] is None


# --- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"modle": "x"}, r"providers\.openai: unknown key 'modle'"),
        ({"hosted_tools": {"web_search": {"enabled": True}}}, r"web_search: unknown key 'enabled'"),
        (
            {"hosted_tools": {"web_search": {"user_location": {"town": "Lyon"}}}},
            r"user_location: unknown key 'town'",
        ),
        ({"hosted_tools": {"file_search": {"enable": True}}}, "vector_store_ids is required"),
        (
            {"hosted_tools": {"file_search": {"enable": True, "vector_store_ids": []}}},
            "vector_store_ids is required",
        ),
        (
            {"hosted_tools": {"web_search": {"allowed_domains": ["https://example.org"]}}},
            "allowed_domains",
        ),
        ({"hosted_tools": {"web_search": {"search_context_size": "huge"}}}, "search_context_size"),
        ({"hosted_tools": {"file_search": {"max_num_results": 0}}}, "max_num_results"),
        ({"base_url": "ftp://example.org"}, "base_url"),
        ({"store": "no"}, "store"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
    ],
)
def test_configuration_errors_name_the_key(block: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        OpenAIConfig.from_block(block)


def test_configuration_defaults_and_declarations() -> None:
    config = OpenAIConfig.from_config({})
    assert config.base_url == "https://api.openai.com/v1" and config.store is None
    assert config.hosted_tools.enabled() == []
    assert hosted_tool_declarations(config) == {}
    with pytest.raises(ConfigurationError, match=r"providers\.openai must be a table"):
        OpenAIConfig.from_config({"providers": {"openai": 1}})
    full = OpenAIConfig.from_block(
        {
            "hosted_tools": {
                "file_search": {"enable": True, "vector_store_ids": ["vs_1"], "max_num_results": 4},
                "code_interpreter": {"enable": True, "container": "cntr_1"},
            }
        }
    )
    assert full.hosted_tools.enabled() == ["file_search", "code_interpreter"]
    assert hosted_tool_declarations(full) == {
        "file_search": {"type": "file_search", "vector_store_ids": ["vs_1"], "max_num_results": 4},
        "code_interpreter": {"type": "code_interpreter", "container": "cntr_1"},
    }


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("gpt-5.1", "gpt-5"),
        ("gpt-5.1-2025-11-13", "gpt-5"),
        ("gpt-5-mini", "gpt-5"),
        ("gpt-5.1-codex-max", "gpt-5"),
        ("gpt-4.1", "gpt-4.1"),
        ("gpt-4.1-mini-2025-04-14", "gpt-4.1"),
        ("gpt-4.1-nano", "gpt-4.1-nano"),
        ("gpt-4o", "gpt-4o"),
        ("gpt-4o-mini", "gpt-4o"),
        ("chatgpt-4o-latest", "gpt-4o"),
        ("gpt-4o-search-preview", "special"),
        ("gpt-5-search-api", "special"),
        ("gpt-4o-realtime-preview", "special"),
        ("gpt-4", "gpt-4"),
        ("gpt-4-0613", "gpt-4"),
        ("gpt-4-turbo", "gpt-4"),
        ("gpt-3.5-turbo", "gpt-3.5"),
        ("o1", "o1"),
        ("o1-mini", "o1-mini"),
        ("o3-mini", "o3-mini"),
        ("o3", "o3"),
        ("o3-pro", "o3"),
        ("o4-mini", "o4-mini"),
        ("ft:gpt-4o-mini-2024-07-18:org::abc", "gpt-4o"),
        ("llama-3", None),
    ],
)
def test_model_family(model: str, family: str | None) -> None:
    assert model_family(model) == family
    assert family is None or family in HOSTED_TOOL_SUPPORT


@pytest.mark.parametrize(
    ("model", "tool", "message"),
    [
        ("gpt-3.5-turbo", "web_search", "not available"),
        ("gpt-4", "file_search", "not available"),
        ("gpt-4.1-nano", "web_search", "not available"),
        ("o1-mini", "code_interpreter", "not available"),
        ("gpt-4o-search-preview", "web_search", "not available"),
        ("llama-3", "web_search", "cannot tell"),
    ],
)
def test_a_hosted_tool_the_model_cannot_serve_fails_before_any_request(
    model: str, tool: str, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        validate_hosted_tools(DEFAULT, model, [tool])
    validate_hosted_tools(DEFAULT, "gpt-5.1", [tool])
    validate_hosted_tools(DEFAULT, model, ["mcp:docs", "image_generation"])  # not in the table


def test_hosted_tool_validation_by_endpoint_and_reasoning_effort() -> None:
    with pytest.raises(ConfigurationError, match="minimal"):
        validate_hosted_tools(DEFAULT, "gpt-5", ["web_search"], reasoning_effort="minimal")
    validate_hosted_tools(DEFAULT, "gpt-5", ["file_search"], reasoning_effort="minimal")
    proxy = OpenAIConfig.from_block({"base_url": "https://gateway.example.com/v1"})
    with pytest.raises(ConfigurationError, match="not the first-party OpenAI API"):
        validate_hosted_tools(proxy, "gpt-5.1", ["web_search"])
    forwarded = OpenAIConfig.from_block(
        {"base_url": "https://gateway.example.com/v1", "endpoint_serves_hosted_tools": True}
    )
    validate_hosted_tools(forwarded, "gpt-5.1", ["web_search"])
    validate_hosted_tools(
        OpenAIConfig.from_block({"base_url": "http://127.0.0.1:9/v1"}), "gpt-5.1", ["web_search"]
    )
    validate_hosted_tools(proxy, "gpt-5.1", [])  # nothing hosted: nothing to check


def test_an_enabled_tool_the_model_cannot_serve_fails_encoding() -> None:
    events = openai_events({"model": "gpt-5.1", "tools": [FUNCTION]})
    enabled = OpenAIConfig.from_block({"hosted_tools": {"web_search": {"enable": True}}})
    with pytest.raises(ConfigurationError, match=r"gpt-3\.5-turbo"):
        encode_request(events, config=enabled, model="gpt-3.5-turbo")
    # A recorded hosted tool is not declared without consent: nothing to check.
    recorded = openai_events({"model": "gpt-5.1", "tools": [{"type": "code_interpreter"}]})
    assert "tools" not in body_of(encode_request(recorded, config=DEFAULT, model="gpt-4"))
    minimal = openai_events(
        {"model": "gpt-5", "reasoning": {"effort": "minimal"}, "tools": [{"type": "web_search"}]}
    )
    with pytest.raises(ConfigurationError, match="minimal"):
        encode_request(minimal, config=enabled)


# --- the registry --------------------------------------------------------------------------------


def test_the_registry_offers_every_operation() -> None:
    openai = adapter("openai")
    assert openai.name == "openai"
    conversation = roundtrip_conversation()
    before = events_of(conversation)
    encoded = openai.need_encode()(before, {}, None, "Merci")
    assert isinstance(encoded.losses, list) and encoded.to_json().startswith(b"{")
    assert events_of(conversation) == before  # encoding never writes
    request = (OURS / "reasoning_function_roundtrip" / "2.request.json").read_bytes()
    assert [m.role for m in openai.need_history()([], request)] == ["user", "assistant", "user"]
    assert openai.need_send() is not None
    with pytest.raises(ConfigurationError, match="unknown key"):
        openai.need_encode()(before, {"providers": {"openai": {"nope": 1}}}, None, None)


def test_loss_is_the_shared_struct() -> None:
    encoded = encode_request(foreign_events(), config=DEFAULT, model="gpt-5.1")
    assert all(type(loss) is Loss for loss in encoded.losses)
    assert (
        msgspec.json.decode(msgspec.json.encode(encoded.losses[0]), type=Loss) == encoded.losses[0]
    )


def test_settings_come_from_the_newest_openai_request_even_after_a_switch() -> None:
    native = {"model": "gpt-5.1", "instructions": "Sois bref.", "tools": [FUNCTION]}
    conversation = Conversation.start()
    for event in openai_events(native)[1:]:
        conversation.record(msgspec.structs.replace(event, originator_version=0, hash=""))
    for event in foreign_events()[1:]:
        conversation.record(msgspec.structs.replace(event, originator_version=0, hash=""))
    encoded = encode_request(events_of(conversation), config=DEFAULT)
    body = body_of(encoded)
    assert (body["model"], body["instructions"], body["tools"]) == (
        "gpt-5.1",
        "Sois bref.",
        [FUNCTION],
    )
    assert "settings" not in {loss.kind for loss in encoded.losses}


# --- the openai SDK's request types as the oracle -------------------------------------------------

TARGET_MODEL = "gpt-5.1"


@pytest.mark.parametrize("recorded", recorded_conversations(), ids=str)
def test_every_rebuilt_request_validates_against_the_sdk(recorded: Recorded) -> None:
    """Every conversation the captures build (each provider's examples and `../shared/wire`),
    replayed to OpenAI through the adapter's entry point: the request is one the `openai`
    SDK's `ResponseCreateParams` accepts unchanged. Only unknown items replayed
    byte-identical to OpenAI are exempt."""
    encode = adapter("openai").need_encode()
    same = recorded.provider == "openai"
    for model in [None, TARGET_MODEL] if same else [TARGET_MODEL]:
        body = json.loads(encode(list(recorded.events), {}, model, "Et ensuite ?").to_json())
        exempt = verbatim_paths(body, recorded.unknown_payloads()) if same else []
        assert all(path[0] == "input" and len(path) == 2 for path in exempt)
        assert_valid_openai_request(body, exempt=exempt)


def test_a_captured_assistant_message_of_parts_without_an_id_goes_as_a_string() -> None:
    """Some clients send an earlier answer as `output_text` parts without the item's
    `type`, `id` and `status`; it is sent back as plain-string content, never as captured
    (the SDK's types refuse it), and its annotation is listed."""
    annotation = {
        "type": "url_citation",
        "url": "https://example.com/a",
        "title": "A",
        "start_index": 0,
        "end_index": 4,
    }
    parts = [
        {"type": "output_text", "text": "Lyon", "annotations": [annotation]},
        {"type": "output_text", "text": " est belle.", "annotations": []},
    ]
    request = json.dumps(
        {
            "model": "gpt-5.1",
            "input": [
                {"role": "user", "content": "Une ville ?"},
                {"role": "assistant", "content": parts},
                {"role": "user", "content": "Pourquoi ?"},
            ],
        }
    ).encode()
    conversation = Conversation.start()
    record_history(conversation, request)
    encoded = encode_request(events_of(conversation), config=DEFAULT)
    body = body_of(encoded)
    assert body["input"][1] == {"role": "assistant", "content": "Lyon est belle."}
    assert_valid_openai_request(body)
    assert sorted(loss.kind for loss in encoded.losses) == ["citations", "payload", "payload"]
    payloads = [loss.reason for loss in encoded.losses if loss.kind == "payload"]
    assert all("without its item id" in reason for reason in payloads)


@pytest.mark.parametrize(
    ("name", "annotation"),
    [("file_search_citation", "file_citation"), ("hosted_tools", "container_file_citation")],
)
def test_same_provider_replay_keeps_every_annotation_kind(name: str, annotation: str) -> None:
    """A message item replayed to OpenAI is its stored item: `file_citation` and
    `container_file_citation` annotations go back with it, and no citation is lost."""
    conversation = conversation_through(exchanges(OURS / name)[:1])
    encoded = encode_request(events_of(conversation), config=DEFAULT)
    body = body_of(encoded)
    [message] = [i for i in body["input"] if i.get("type") == "message"]
    kinds = {a["type"] for part in message["content"] for a in part.get("annotations", [])}
    assert annotation in kinds
    assert [loss for loss in encoded.losses if loss.kind == "citations"] == []
    assert_valid_openai_request(body)
