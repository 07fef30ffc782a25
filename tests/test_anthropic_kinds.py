"""Anthropic block kinds seen in real traffic, on the project's example captures.

MCP connector declarations and calls, `pause_turn` on a server call whose result opens the
continuation, tool search with tool references, web tools called from code execution
(`caller`), code execution's text editor, and unknown blocks: each decoded to the right
event kind, replayed exactly to Anthropic, and to the other providers per the loss report.
Expectations are read from the captures with plain `json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from convstore.adapters.anthropic.config import AnthropicConfig
from convstore.adapters.anthropic.context import RequestContext
from convstore.adapters.anthropic.decode import decode_message, detect_and_decode
from convstore.adapters.anthropic.encode import encode_request
from convstore.adapters.anthropic.history import history_drafts, recorded_prefix
from convstore.adapters.google.config import GoogleConfig
from convstore.adapters.google.encode import encode_request as encode_google
from convstore.adapters.openai.config import OpenAIConfig
from convstore.adapters.openai.encode import encode_request as encode_openai
from convstore.domain.conversation import Conversation
from convstore.domain.events import (
    Event,
    HostedActivity,
    ResponseEnded,
    ToolCallRequested,
    ToolCallResponded,
    UnknownArtifact,
)
from convstore.domain.vocabulary import CallId
from tests.consenting import anthropic_consent, requests_of

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "anthropic"
DEFAULT = AnthropicConfig()


def folder_of(name: str) -> Path:
    folder = EXAMPLES / name
    if not folder.is_dir():
        pytest.skip(f"no example {name}")
    return folder


def request_of(name: str, n: int) -> bytes:
    return (folder_of(name) / f"{n}.request.json").read_bytes()


def response_of(name: str, n: int) -> bytes:
    [path] = folder_of(name).glob(f"{n}.response.*")
    return path.read_bytes()


def decoded(name: str, n: int, body: bytes | None = None) -> list[Event]:
    context = RequestContext.from_body(request_of(name, n))
    return list(detect_and_decode(body or response_of(name, n), request=context))


def conversation_through(name: str, n: int) -> Conversation:
    """Exchanges 1..n of an example, as `ingest --request` records them."""
    conversation = Conversation.start()
    for i in range(1, n + 1):
        request = request_of(name, i)
        held = recorded_prefix(list(conversation.pending), request)
        for message in history_drafts(request, start=held):
            conversation.record_all(message.drafts)
        conversation.record_all(decoded(name, i))
    return conversation


def activities(events: list[Event]) -> list[tuple[str, str, str, str]]:
    return [
        (e.activity_id, e.name, e.state, e.summary) for e in events if isinstance(e, HostedActivity)
    ]


def blocks_of(name: str, n: int) -> list[dict[str, Any]]:
    """The content blocks of a non-streamed response, or of a request's last message."""
    body = json.loads(response_of(name, n))
    blocks: list[dict[str, Any]] = body["content"]
    return blocks


def wanted_messages(name: str, n: int) -> list[Any]:
    messages: list[Any] = json.loads(request_of(name, n))["messages"]
    return messages


def consent(name: str) -> AnthropicConfig:
    """The configuration of the person who sent an example's requests."""
    return anthropic_consent(*requests_of(folder_of(name)))


def sent(
    events: list[Event], config: AnthropicConfig = DEFAULT, **kwargs: Any
) -> tuple[dict[str, Any], Any]:
    encoded = encode_request(events, config=config, **kwargs)
    body: dict[str, Any] = json.loads(encoded.to_json())
    return body, encoded


# --- MCP connector -----------------------------------------------------------------------------


def test_mcp_servers_and_toolsets_are_hosted_declarations() -> None:
    context = RequestContext.from_body(request_of("mcp_connector", 1))
    assert [(t.name, t.hosted, t.native_type) for t in context.settings.tools] == [
        ("mcp:docs", True, "mcp_toolset")
    ]
    assert context.version_of("mcp:docs/search_docs") == "mcp_toolset"
    legacy = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "mcp_servers": [
            {"type": "url", "url": "https://mcp.example.com/a", "name": "a"},
            {"type": "url", "url": "https://mcp.example.com/b", "name": "b"},
        ],
        "tools": [{"type": "mcp_toolset", "mcp_server_name": "b"}],
        "messages": [],
    }
    tools = RequestContext.from_body(json.dumps(legacy).encode()).settings.tools
    assert [(t.name, t.hosted, t.native_type) for t in tools] == [
        ("mcp:b", True, "mcp_toolset"),
        ("mcp:a", True, "mcp_server"),
    ]
    assert all(not t.description and t.input_schema is None for t in tools)  # no token, no url


def test_mcp_calls_streamed_and_not_are_hosted_activities() -> None:
    first, second, third = (decoded("mcp_connector", n) for n in (1, 2, 3))
    streamed = json.loads(request_of("mcp_connector", 2))["messages"][1]["content"]
    calls = [b for b in streamed if b["type"] == "mcp_tool_use"]
    assert [(a[1], a[2], a[3]) for a in activities(first)] == [
        ("mcp:docs/search_docs", "started", ""),
        ("mcp:docs/search_docs", "completed", "2 blocks"),
        ("mcp:docs/read_page", "started", ""),
        ("mcp:docs/read_page", "failed", "error"),
    ]
    started = [e for e in first if isinstance(e, HostedActivity) and e.state == "started"]
    # Input streamed through deltas and input complete in the start event alike.
    assert [json.loads(e.payload.raw) for e in started if e.payload] == calls
    assert [e.input for e in started] == [c["input"] for c in calls]
    assert all(e.payload and e.payload.version == "mcp_toolset" for e in started)
    assert not any(isinstance(e, ToolCallRequested | UnknownArtifact) for e in first)
    # A pause on an MCP call; the continuation opens with its result, under its name.
    [pending] = [a for a in activities(second)]
    assert pending[1:3] == ("mcp:docs/search_docs", "started")
    assert isinstance(second[-1], ResponseEnded) and second[-1].stop_reason == "pause_turn"
    assert activities(third)[0] == (pending[0], pending[1], "completed", "1 block")
    conversation = conversation_through("mcp_connector", 3)
    assert conversation.pending_activities() == {}


def test_mcp_replays_to_anthropic_with_its_servers_and_beta() -> None:
    conversation = conversation_through("mcp_connector", 2)
    body, encoded = sent(list(conversation.pending), consent("mcp_connector"))
    wanted = json.loads(request_of("mcp_connector", 3))
    assert body["messages"] == wanted["messages"]
    assert (body["mcp_servers"], body["tools"]) == (wanted["mcp_servers"], wanted["tools"])
    assert encoded.betas == ("mcp-client-2025-11-20",) and encoded.losses == []
    # Not enabled: the paused MCP call keeps its server and toolset declared, and says so.
    body, encoded = sent(list(conversation.pending))
    assert (body["mcp_servers"], body["tools"]) == (wanted["mcp_servers"], wanted["tools"])
    assert encoded.kept_declared == ("mcp:docs",)
    assert [(loss.event, loss.kind) for loss in encoded.losses] == [
        ("HostedActivity", "kept_declared")
    ]
    assert "providers.anthropic.hosted_tools.mcp.enable" in encoded.losses[0].reason
    # The connector's first version: servers alone, no toolset.
    legacy = json.loads(request_of("mcp_connector", 1))
    del legacy["tools"]
    request = json.dumps(legacy).encode()
    conversation = Conversation.start()
    for message in history_drafts(request):
        conversation.record_all(message.drafts)
    context = RequestContext.from_body(request)
    conversation.record_all(decode_message(response_of("mcp_connector", 2), request=context))
    body, encoded = sent(list(conversation.pending), consent("mcp_connector"))
    assert "tools" not in body and body["mcp_servers"] == legacy["mcp_servers"]
    assert encoded.betas == ("mcp-client-2025-04-04",) and encoded.losses == []
    body, encoded = sent(list(conversation.pending))  # kept for the paused call
    assert body["mcp_servers"] == legacy["mcp_servers"]
    assert encoded.kept_declared == ("mcp:docs",)
    assert [loss.kind for loss in encoded.losses] == ["kept_declared"]


def test_mcp_servers_are_declared_only_with_consent() -> None:
    conversation = conversation_through("mcp_connector", 3)  # nothing pending
    body, encoded = sent(list(conversation.pending))
    assert "mcp_servers" not in body and "tools" not in body and encoded.betas == ()
    [loss] = encoded.losses
    assert (loss.kind, loss.event) == ("tool_declaration", "ResponseStarted")
    assert "mcp:docs" in loss.reason and "hosted_tools.mcp.enable = true" in loss.reason
    enabled = AnthropicConfig.from_block({"hosted_tools": {"mcp": {"enable": True}}})
    body, encoded = sent(list(conversation.pending), enabled)
    wanted = json.loads(request_of("mcp_connector", 3))
    assert (body["mcp_servers"], body["tools"]) == (wanted["mcp_servers"], wanted["tools"])
    assert encoded.losses == [] and encoded.kept_declared == ()
    # The connector's first version (servers alone): each left out, said once.
    legacy = json.loads(request_of("mcp_connector", 3))
    del legacy["tools"]
    request = json.dumps(legacy).encode()
    alone = Conversation.start()
    for message in history_drafts(request):
        alone.record_all(message.drafts)
    alone.record_all(
        detect_and_decode(
            response_of("mcp_connector", 3), request=RequestContext.from_body(request)
        )
    )
    body, encoded = sent(list(alone.pending))
    assert "mcp_servers" not in body
    assert [loss.kind for loss in encoded.losses] == ["tool_declaration"]
    assert "MCP server" in encoded.losses[0].reason


@pytest.mark.parametrize("target", ["openai", "google"])
def test_mcp_is_never_a_client_function_on_another_provider(target: str) -> None:
    conversation = conversation_through("mcp_connector", 3)
    events = list(conversation.pending)
    if target == "openai":
        encoded: Any = encode_openai(events, config=OpenAIConfig(), model="gpt-5.1")
        declared = [t.get("name") for t in json.loads(encoded.to_json()).get("tools", [])]
    else:
        encoded = encode_google(events, config=GoogleConfig(), model="gemini-2.5-flash")
        tools = json.loads(encoded.to_json()).get("tools", [])
        declared = [d["name"] for t in tools for d in t.get("functionDeclarations", [])]
    raw = encoded.to_json()
    assert declared == [] and b"mcp_tool_use" not in raw and b"mcp_toolset" not in raw
    reasons = [loss.reason for loss in encoded.losses if loss.kind == "tool_declaration"]
    assert len(reasons) == 1 and "mcp:docs" in reasons[0]
    hosted = {e.activity_id for e in events if isinstance(e, HostedActivity)}
    assert len([x for x in encoded.losses if x.kind == "hosted_activity"]) == len(hosted)


# --- pause_turn with a pending server call -----------------------------------------------------


def test_a_pause_on_a_server_call_without_its_result() -> None:
    events = decoded("pause_turn_pending", 1)
    [call] = [e for e in events if isinstance(e, HostedActivity)]
    end = events[-1]
    assert isinstance(end, ResponseEnded)
    assert (end.state, end.finish_reason, end.stop_reason) == ("completed", "pause", "pause_turn")
    assert (call.name, call.state, call.input) == (
        "web_search",
        "started",
        {"query": "Lisbon metro map 2026 revision"},
    )
    assert call.payload is not None and call.payload.version == "web_search_20250305"
    conversation = conversation_through("pause_turn_pending", 1)
    assert list(conversation.pending_activities()) == [call.activity_id]


@pytest.mark.parametrize("n", [1, 2])
def test_each_continuation_replays_the_paused_content_and_opens_with_the_result(n: int) -> None:
    conversation = conversation_through("pause_turn_pending", n)
    body, encoded = sent(list(conversation.pending), consent("pause_turn_pending"))
    wanted = wanted_messages("pause_turn_pending", n + 1)
    assert body["messages"] == wanted and encoded.losses == []
    assert body["messages"][-1]["content"][-1]["type"] == "server_tool_use"  # the pending call
    following = decoded("pause_turn_pending", n + 1)
    pending = [a for a in activities(list(conversation.pending)) if a[2] == "started"][-1]
    first = next(e for e in following if isinstance(e, HostedActivity))
    assert (first.activity_id, first.name, first.state) == (pending[0], pending[1], "completed")


def test_a_pending_server_call_is_a_loss_to_another_provider() -> None:
    events = list(conversation_through("pause_turn_pending", 1).pending)
    encoded = encode_openai(events, config=OpenAIConfig(), model="gpt-5.1")
    [loss] = [x for x in encoded.losses if x.kind == "hosted_activity"]
    assert "web_search" in loss.reason and b"srvtoolu" not in encoded.to_json()


# --- tool search ----------------------------------------------------------------------------------


def test_tool_search_results_and_the_tools_they_found() -> None:
    first, second = decoded("tool_search", 1), decoded("tool_search", 2)
    assert [(a[1], a[2], a[3]) for a in activities(first) + activities(second)] == [
        ("tool_search_tool_regex", "started", ""),
        ("tool_search_tool_regex", "completed", "1 tool"),
        ("tool_search_tool_regex", "started", ""),
        ("tool_search_tool_regex", "failed", "too_many_requests"),
    ]
    [call] = [e for e in first if isinstance(e, ToolCallRequested)]
    assert (call.name, call.arguments) == (
        "get_tide_times",
        {"port": "Brest", "date": "2026-05-14"},
    )
    tools = RequestContext.from_body(request_of("tool_search", 1)).settings.tools
    assert [(t.name, t.hosted) for t in tools] == [
        ("tool_search_tool_regex", True),
        ("get_tide_times", False),
        ("get_weather", False),
    ]
    result = next(e for e in first if isinstance(e, HostedActivity) and e.state == "completed")
    assert result.payload is not None
    assert json.loads(result.payload.raw)["content"]["tool_references"] == [
        {"type": "tool_reference", "tool_name": "get_tide_times"}
    ]


# --- web tools called from code execution ---------------------------------------------------------


def without_bytes(events: list[Event]) -> list[Any]:
    out = []
    for event in events:
        fields = msgspec.structs.asdict(event)
        fields.pop("settings", None)  # the requests differ in `stream` only
        payload = fields.pop("payload", None)
        if payload is not None:
            fields["payload"] = (payload.format, payload.version, json.loads(payload.raw))
        out.append((type(event).__name__, fields))
    return out


def test_web_search_called_from_code_streamed_and_not() -> None:
    streamed, whole = decoded("dynamic_filtering", 1), decoded("dynamic_filtering", 2)
    assert without_bytes(streamed) == without_bytes(whole)
    blocks = blocks_of("dynamic_filtering", 2)
    found = [e for e in streamed if isinstance(e, HostedActivity)]
    assert [(e.name, e.state) for e in found] == [
        ("code_execution", "started"),
        ("web_search", "started"),
        ("web_search", "completed"),
        ("code_execution", "completed"),
    ]
    # The caller stays in the payloads; the code's own execution has the web tool's version.
    assert [json.loads(e.payload.raw) for e in found if e.payload] == blocks[:4]
    assert json.loads(found[1].payload.raw)["caller"]["tool_id"] == found[0].activity_id  # type: ignore[union-attr]
    assert {e.payload.version for e in found if e.payload} == {"web_search_20260209"}
    assert found[3].summary == "exit 0"


def test_code_paused_under_a_dynamic_filtering_web_tool_declares_nothing_more() -> None:
    body = json.loads(response_of("dynamic_filtering", 2))
    paused = {**body, "content": body["content"][:1], "stop_reason": "pause_turn"}
    request = request_of("dynamic_filtering", 2)
    conversation = Conversation.start()
    for message in history_drafts(request):
        conversation.record_all(message.drafts)
    context = RequestContext.from_body(request)
    conversation.record_all(decode_message(json.dumps(paused).encode(), request=context))
    sent_body, encoded = sent(list(conversation.pending))
    assert sent_body["tools"] == json.loads(request)["tools"]  # kept for the paused search
    assert encoded.betas == () and encoded.kept_declared == ("web_search",)
    assert [loss.kind for loss in encoded.losses] == ["kept_declared"]
    assert sent_body["messages"][-1]["content"] == body["content"][:1]


# --- code execution's text editor ---------------------------------------------------------------


def test_text_editor_results_and_errors() -> None:
    events = decoded("text_editor_code_execution", 1)
    assert [(a[1], a[2], a[3]) for a in activities(events)][1::2] == [
        ("text_editor_code_execution", "completed", "created"),
        ("text_editor_code_execution", "completed", "edited"),
        ("text_editor_code_execution", "completed", "viewed 2 lines"),
        ("text_editor_code_execution", "failed", "file_not_found"),
    ]
    started = [e for e in events if isinstance(e, HostedActivity) and e.state == "started"]
    assert [e.input for e in started] == [
        {"command": "create", "path": "/tmp/notes.md"},
        {"command": "str_replace", "path": "/tmp/notes.md"},
        {"command": "view", "path": "/tmp/notes.md"},
        {"command": "view", "path": "/tmp/agenda.md"},
    ]
    assert {e.payload.version for e in started if e.payload} == {"code_execution_20250825"}
    bash = activities(decoded("text_editor_code_execution", 2))
    assert [(a[1], a[2], a[3]) for a in bash] == [
        ("bash_code_execution", "started", ""),
        ("bash_code_execution", "completed", "exit 0"),
    ]


# --- unknown blocks -------------------------------------------------------------------------------


def test_an_unknown_block_is_replayed_byte_identical_in_its_native_position() -> None:
    body = response_of("tool_search", 2)
    listing = (
        b'{"type":"mcp_tool_listing","mcp_server_name":"docs","tools":[{"name":"x",'
        b'"input_schema":{"type":"object"}}]  }'
    )
    start = body.index(b'"content": [') + len(b'"content": [')
    odd = body[:start] + listing + b"," + body[start:]
    request = request_of("tool_search", 2)
    conversation = Conversation.start()
    for message in history_drafts(request):
        conversation.record_all(message.drafts)
    context = RequestContext.from_body(request)
    conversation.record_all(decode_message(odd, request=context))
    for call in conversation.open_calls():
        conversation.record(ToolCallResponded(call_id=CallId(call), content="ok"))
    raw = encode_request(list(conversation.pending), config=DEFAULT).to_json()
    assert listing in raw
    last = json.loads(raw)["messages"][-1]["content"]
    assert [b["type"] for b in last] == ["mcp_tool_listing"] + [
        b["type"] for b in json.loads(body)["content"]
    ]


def test_an_unknown_streamed_block_is_replayed_byte_identical_in_its_native_position() -> None:
    body = response_of("errors", 3)
    starts = [
        json.loads(line[5:])["content_block"]
        for line in body.decode().splitlines()
        if line.startswith("data:") and '"content_block_start"' in line
    ]
    [odd] = [b for b in starts if b["type"] == "quantum_widget"]
    conversation = Conversation.start()
    for message in history_drafts(request_of("errors", 3)):
        conversation.record_all(message.drafts)
    conversation.record_all(decoded("errors", 3))
    raw = encode_request(list(conversation.pending), config=DEFAULT).to_json()
    last = json.loads(raw)["messages"][-1]["content"]
    assert [b["type"] for b in last] == [b["type"] for b in starts]
    assert last[[b["type"] for b in starts].index("quantum_widget")] == odd
    literal = body[body.index(b'{"type":"quantum_widget"') :].split(b"}}", 1)[0] + b"}}"
    assert literal in raw
