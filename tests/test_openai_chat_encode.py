"""Chat Completions replay (`adapters.openai_chat.encode`): every conversation the
captures build, of every provider, rebuilt as a Chat Completions request that the `openai`
SDK's request types accept; exact for the same server and model, portable otherwise, with
the loss report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convstore.adapters.openai_chat.config import ChatConfig
from convstore.adapters.openai_chat.encode import encode_request
from convstore.adapters.wire.providers import adapter, serving
from convstore.domain.errors import DecodeError
from convstore.domain.events import Event, ToolCallRequested
from convstore.storage import open_store
from tests.recorded import Recorded, recorded_conversations
from tests.sdk_requests import assert_valid_chat_request, verbatim_paths

EXAMPLES = Path(__file__).parents[1] / "examples" / "openai-chat"
RECORDED = recorded_conversations()
LOCAL = ChatConfig(base_url="http://localhost:11434/v1")


@pytest.mark.parametrize("recorded", RECORDED, ids=str)
def test_every_rebuilt_request_validates_against_the_sdk(recorded: Recorded) -> None:
    encode = adapter("openai-chat").need_encode()
    same = recorded.provider == "openai-chat"
    for named in [None, "gpt-4.1"] if same else ["gpt-4.1"]:
        request = encode(list(recorded.events), {}, named, "And then?")
        body = json.loads(request.to_json())
        exempt = verbatim_paths(body, recorded.unknown_payloads()) if same else []
        assert_valid_chat_request(body, exempt=exempt)
        assert body["messages"][-1] == {"role": "user", "content": "And then?"}


def conversation(folder: str, *numbers: int, server: str = "") -> list[Event]:
    """The capture's exchanges ingested into one conversation (with their requests)."""
    decode = adapter("openai-chat").decode
    with open_store("sqlite:///:memory:") as store, serving(server):
        service = store.service
        conversation_id = service.start(folder)
        for number in numbers:
            base = EXAMPLES / folder
            request = (base / f"{number}.request.json").read_bytes()
            body = next(base.glob(f"{number}.response.*")).read_bytes()
            history = adapter("openai-chat").need_history()(
                list(service.events(conversation_id)), request
            )
            service.ingest_exchange(
                conversation_id,
                [(m.role, m.drafts) for m in history],
                decode(body, request, None),
                at_version=list(service.events(conversation_id))[-1].originator_version,
                title=folder,
            )
        return list(service.events(conversation_id))


def test_the_same_server_gets_the_tool_calls_byte_for_byte() -> None:
    events = conversation("tool_call_stream", 1, server="localhost:11434")
    request = encode_request(events, config=LOCAL, user="Thanks")
    calls = [e.payload.raw for e in events if isinstance(e, ToolCallRequested) and e.payload]
    wire = request.to_json()
    assert calls and all(raw in wire for raw in calls)
    assert request.losses == []
    body = json.loads(wire)
    assert body["tools"][0]["function"]["name"] == "get_weather"
    assert body["messages"][0] == {"role": "system", "content": "You are a terse assistant."}


def test_another_server_gets_portable_calls_and_the_loss_report() -> None:
    events = conversation("tool_call_stream", 1, server="localhost:11434")
    request = encode_request(events, config=ChatConfig(), user="Thanks")
    kinds = sorted({loss.kind for loss in request.losses})
    assert kinds == ["payload", "settings"]
    [assistant] = [m for m in json.loads(request.to_json())["messages"] if m["role"] == "assistant"]
    arguments = [json.loads(c["function"]["arguments"]) for c in assistant["tool_calls"]]
    assert arguments == [{"city": "Zürich", "unit": "c"}, {"city": "Kraków", "unit": "c"}]


def test_reasoning_is_never_sent_back_but_reasoning_details_go_to_their_server() -> None:
    deepseek = conversation("compatible_servers", 1, server="api.deepseek.com")
    request = encode_request(deepseek, config=ChatConfig(base_url="https://api.deepseek.com"))
    assert b"reasoning_content" not in request.to_json()
    assert [loss.kind for loss in request.losses] == ["reasoning"]
    router = conversation("compatible_servers", 2, server="openrouter.ai")
    config = ChatConfig(base_url="https://openrouter.ai/api/v1")
    [assistant] = [
        m
        for m in json.loads(encode_request(router, config=config).to_json())["messages"]
        if m["role"] == "assistant"
    ]
    [detail] = assistant["reasoning_details"]
    assert detail["signature"].startswith("EqQB")


def test_a_refusal_is_replayed_as_a_refusal() -> None:
    events = conversation("citations_refusal", 3)
    body: Any = msgspec.json.decode(encode_request(events, config=ChatConfig()).to_json())
    [assistant] = [m for m in body["messages"] if m["role"] == "assistant"]
    assert assistant == {
        "role": "assistant",
        "content": None,
        "refusal": "I'm sorry, I can't help with that.",
    }


def test_citations_are_a_loss() -> None:
    events = conversation("citations_refusal", 1)
    losses = encode_request(events, config=ChatConfig()).losses
    assert "citations" in {loss.kind for loss in losses}


# --- decode → record → encode, as properties ---------------------------------------------------

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
_ARGUMENTS = st.dictionaries(
    st.text(max_size=6), st.integers() | st.text(max_size=6) | st.booleans(), max_size=3
)


@st.composite
def answers(draw: st.DrawFn) -> dict[str, Any]:
    """A whole `chat.completion` with text and/or tool calls (arguments spelled freely)."""
    calls = [
        {
            "id": f"call_{n}",
            "type": "function",
            "function": {
                "name": draw(st.sampled_from(["f", "get_weather", "lookup"])),
                "arguments": json.dumps(
                    arguments,
                    ensure_ascii=draw(st.booleans()),
                    indent=draw(st.sampled_from([None, 1])),
                ),
            },
        }
        for n, arguments in enumerate(draw(st.lists(_ARGUMENTS, max_size=3)))
    ]
    text = draw(st.none() | _TEXT) if calls else draw(_TEXT)
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    finish = "tool_calls" if calls else "stop"
    return {
        "id": "chatcmpl-prop",
        "object": "chat.completion",
        "model": "m-1",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }


def _recorded(body: bytes, server: str) -> list[Event]:
    decode = adapter("openai-chat").decode
    with open_store("sqlite:///:memory:") as store, serving(server):
        conversation_id = store.service.start("property")
        store.service.ingest(conversation_id, decode(body, b'{"model":"m","messages":[]}', None))
        return list(store.service.events(conversation_id))


@settings(max_examples=40, deadline=None)
@given(answer=answers())
def test_a_recorded_answer_replays_to_its_server_as_it_came(answer: dict[str, Any]) -> None:
    body = json.dumps(answer, ensure_ascii=False).encode()
    events = _recorded(body, "localhost:8000")
    request = encode_request(
        events, config=ChatConfig(base_url="http://localhost:8000/v1"), user="next"
    )
    assert request.losses == []
    [assistant] = [m for m in json.loads(request.to_json())["messages"] if m["role"] == "assistant"]
    message = answer["choices"][0]["message"]
    assert assistant.get("content") == message["content"]
    assert assistant.get("tool_calls") == message.get("tool_calls")  # arguments as sent


@settings(max_examples=40, deadline=None)
@given(answer=answers())
def test_a_recorded_answer_replays_portably_to_another_server(answer: dict[str, Any]) -> None:
    events = _recorded(json.dumps(answer).encode(), "localhost:8000")
    request = encode_request(events, config=ChatConfig(), user="next")
    body = json.loads(request.to_json())
    assert_valid_chat_request(body)
    [assistant] = [m for m in body["messages"] if m["role"] == "assistant"]
    calls = answer["choices"][0]["message"].get("tool_calls", [])
    rebuilt = assistant.get("tool_calls", [])
    assert [json.loads(c["function"]["arguments"]) for c in rebuilt] == [
        json.loads(c["function"]["arguments"]) for c in calls
    ]
    kinds = [loss.kind for loss in request.losses]
    assert kinds.count("settings") == 1  # recorded for the other server: portable settings
    assert kinds.count("payload") == len(calls) == len(kinds) - 1


def test_a_request_that_does_not_continue_the_conversation_is_refused(
    tmp_path: Path,
) -> None:
    events = conversation("tool_call_stream", 1)
    other = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Something else"}]})
    with pytest.raises(DecodeError, match="differs from the request"):
        adapter("openai-chat").need_history()(events, other.encode())


def test_a_tool_message_for_no_requested_call_is_kept_as_an_artifact() -> None:
    """Scenario 37 (found by the soak): a `tool` message whose `tool_call_id` names no call
    the conversation or the request holds open is kept as an artifact, not answered (an
    answer to an unknown call used to escape as UnknownToolCall); a second answer to the
    same call likewise; a `role` that is not a string is a DecodeError."""
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "done"},
        {"role": "tool", "tool_call_id": "call_1", "content": "again"},
        {"role": "tool", "tool_call_id": "call_unknown", "content": "stray"},
    ]
    body = json.dumps({"model": "m", "messages": messages}).encode()
    drafts = adapter("openai-chat").need_history()([], body)
    kinds = [[type(d).__name__ for d in m.drafts] for m in drafts]
    assert kinds[2:] == [["ToolCallResponded"], ["UnknownArtifact"], ["UnknownArtifact"]]
    confused = json.dumps({"model": "m", "messages": [{"role": {"x": 1}, "content": "Go"}]})
    with pytest.raises(DecodeError, match=r"messages\[0\] has no role"):
        adapter("openai-chat").need_history()([], confused.encode())


def test_an_image_part_of_a_captured_request_goes_back_with_its_text(tmp_path: Path) -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    request = {
        "model": "gpt-4.1",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}
        ],
    }
    drafts = adapter("openai-chat").need_history()([], json.dumps(request).encode())
    with open_store("sqlite:///:memory:") as store:
        conversation_id = store.service.start("image")
        store.service.ingest_exchange(
            conversation_id,
            [(m.role, m.drafts) for m in drafts],
            decode_events(),
            at_version=1,
            title="image",
        )
        events = list(store.service.events(conversation_id))
    body = json.loads(encode_request(events, config=ChatConfig()).to_json())
    assert body["messages"][0] == {
        "role": "user",
        "content": [{"type": "text", "text": "What is this?"}, image],
    }
    assert_valid_chat_request(body)


def decode_events() -> list[Event]:
    message = {"role": "assistant", "content": "A cat."}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    answer = json.dumps({"id": "c-img", "model": "gpt-4.1", "choices": [choice]}).encode()
    return list(adapter("openai-chat").decode(answer, None, None))


def _recorded_named(name: str) -> Recorded:
    return next(r for r in RECORDED if str(r) == name)


@pytest.mark.parametrize(
    ("name", "kinds"),
    [
        ("examples/anthropic/thinking_tool_roundtrip/2", {"reasoning", "payload"}),
        ("examples/google/thinking_function_roundtrip/2", {"reasoning", "payload"}),
    ],
)
def test_replay_from_anthropic_and_gemini_lists_what_it_leaves_out(
    name: str, kinds: set[str]
) -> None:
    recorded = _recorded_named(name)
    request = adapter("openai-chat").need_encode()(list(recorded.events), {}, "gpt-4.1", None)
    assert kinds <= {loss.kind for loss in request.losses}
    body = json.loads(request.to_json())
    assert_valid_chat_request(body)
    answered = {m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"}
    called = {
        c["id"]
        for m in body["messages"]
        if m["role"] == "assistant"
        for c in m.get("tool_calls", ())
    }
    assert called and called == answered  # every call and its result, by the same id


@pytest.mark.parametrize("target", ["anthropic", "google"])
def test_replay_to_anthropic_and_gemini_lists_the_chat_payloads_left_out(target: str) -> None:
    recorded = _recorded_named("examples/openai-chat/compatible_servers/2")  # OpenRouter
    model = {"anthropic": "claude-sonnet-4-5", "google": "gemini-2.5-flash"}[target]
    request = adapter(target).need_encode()(list(recorded.events), {}, model, "And then?")
    reasons = [loss for loss in request.losses if loss.event == "Reasoning"]
    assert reasons, request.losses  # the signed reasoning_details cannot go to another provider
    text = json.dumps(json.loads(request.to_json()))
    assert "EqQB" not in text  # the signature is never sent elsewhere
