"""Threading through the proxy: a request continuing a stored conversation goes on in it.

The example captures' real request sequences (each request the previous one's messages,
its response and the next question) thread into one conversation, through the proxy and
the transport; so does a three-turn exchange each SDK makes (the third turn built from
what the SDK returned). OpenAI's `previous_response_id` continues the response it names;
the pin header (`X-Convstore-Conversation`) pins a conversation (one `ingest` recorded)
and is not forwarded; a request that edits history is recorded as a
fork of the conversation where it leaves it; two conversations sharing a prefix tie-break
on the opaque values, then on the most recent; and the index's digests are keyed by the
store: the same content digests differently in two stores.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from google import genai
from google.genai import types as genai_types

from convstore.adapters.proxy import recording_transport
from convstore.adapters.recording import jobs
from convstore.domain.events import (
    Event,
    ResponseEnded,
    ResponseStarted,
    Started,
    UserMessage,
)
from convstore.storage import Store, open_store
from tests.proxying import capture, running_proxy
from tests.replay_server import EXAMPLES, Capture, ReplayServer, Reply, captures
from tests.test_proxy import _reply

KEY = "sk-threads-test-key"
DEFAULT_PATHS = {"anthropic": "/v1/messages", "openai": "/v1/responses"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as opened:
        yield opened


def _conversations(store: Store) -> list[list[Event]]:
    return [list(store.service.history(s.id)) for s in store.service.list(limit=1000)]


def _responses(events: list[Event]) -> list[str]:
    return [e.response_id for e in events if isinstance(e, ResponseStarted)]


def _sequence(provider: str, folder: str) -> list[Capture]:
    return [c for c in captures(EXAMPLES / provider, "examples") if f"/{folder}/" in c.name + "/"]


def _post(url: str, found: Capture, provider: str, http: Any = None) -> None:
    path = found.path or DEFAULT_PATHS[provider]
    headers = {"content-type": "application/json", "x-api-key": KEY}
    if http is None:
        httpx.post(url + path, content=found.request, headers=headers, timeout=30)
    else:
        http.post(url + path, content=found.request, headers=headers)


def _claude(url: str, request: bytes | dict[str, Any]) -> None:
    """One Anthropic request sent by the official SDK (streamed if it asks to be)."""
    client = anthropic.Anthropic(api_key=KEY, base_url=url, max_retries=0)
    body = dict(json.loads(request)) if isinstance(request, bytes) else dict(request)
    if body.pop("stream", False):
        with client.messages.stream(**body) as stream:
            stream.get_final_message()
    else:
        client.messages.create(**body)


@pytest.mark.parametrize(
    ("provider", "folder"),
    [
        ("anthropic", "thinking_tool_roundtrip"),
        ("anthropic", "mcp_connector"),
        ("anthropic", "pause_turn_pending"),
        ("openai", "reasoning_function_roundtrip"),
        ("openai-chat", "tool_call_stream"),
        ("google", "thinking_function_roundtrip"),
        ("google", "streamed_call_arguments"),
    ],
)
@pytest.mark.parametrize("via", ["proxy", "transport"])
def test_a_captured_request_sequence_threads_into_one_conversation(
    store: Store, provider: str, folder: str, via: str
) -> None:
    sequence = _sequence(provider, folder)
    assert len(sequence) >= 2
    with ReplayServer() as upstream:
        upstream.enqueue(*(_reply(c) for c in sequence))
        if via == "proxy":
            with running_proxy(store, upstream.url) as proxy:
                for found in sequence:
                    _post(proxy.url, found, provider)
        else:
            with httpx.Client(transport=recording_transport(store)) as http:
                for found in sequence:
                    _post(upstream.url, found, provider, http)
    [events] = _conversations(store)
    assert len(_responses(events)) == len(sequence)


def _anthropic_turns(url: str) -> None:
    client = anthropic.Anthropic(api_key=KEY, base_url=url, max_retries=0)
    first, second = (
        json.loads(c.request or b"") for c in _sequence("anthropic", "thinking_tool_roundtrip")
    )
    first.pop("stream", None)
    with client.messages.stream(**first) as stream:
        stream.get_final_message()
    answer = client.messages.create(**second)
    third = {
        **second,
        "messages": [
            *second["messages"],
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in answer.content],
            },
            {"role": "user", "content": "Thanks! And the day after?"},
        ],
    }
    with client.messages.stream(**third) as stream:
        stream.get_final_message()


def _openai_turns(url: str) -> None:
    client = openai.OpenAI(api_key=KEY, base_url=url + "/v1", max_retries=0)
    first, second = (
        json.loads(c.request or b"") for c in _sequence("openai", "reasoning_function_roundtrip")
    )
    first.pop("stream", None)
    with client.responses.stream(**first) as stream:
        stream.get_final_response()
    answer = client.responses.create(**second)
    third = {
        **second,
        "input": [
            *second["input"],
            *(item.model_dump(exclude_none=True) for item in answer.output),
            {"role": "user", "content": "Merci ! Et après-demain ?"},
        ],
    }
    client.responses.create(**third)


def _chat_turns(url: str) -> None:
    client = openai.OpenAI(api_key=KEY, base_url=url + "/v1", max_retries=0)
    first, second = (
        json.loads(c.request or b"") for c in _sequence("openai-chat", "tool_call_stream")
    )
    list(client.chat.completions.create(**first))
    answer = client.chat.completions.create(**second)
    third = {
        **second,
        "messages": [
            *second["messages"],
            answer.choices[0].message.model_dump(exclude_none=True),
            {"role": "user", "content": "Merci ! Et demain ?"},
        ],
    }
    client.chat.completions.create(**third)


def _google_turns(url: str) -> None:
    client = genai.Client(api_key=KEY, http_options=genai_types.HttpOptions(base_url=url))
    first, second = (
        json.loads(c.request or b"") for c in _sequence("google", "thinking_function_roundtrip")
    )
    model = "gemini-3-pro-preview"
    list(client.models.generate_content_stream(model=model, contents=first["contents"]))
    chunks = list(client.models.generate_content_stream(model=model, contents=second["contents"]))
    parts = [
        part
        for chunk in chunks
        for candidate in chunk.candidates or ()
        if candidate.content is not None
        for part in candidate.content.parts or ()
    ]
    third = [
        *(genai_types.Content.model_validate(content) for content in second["contents"]),
        genai_types.Content(role="model", parts=parts),
        genai_types.Content(role="user", parts=[genai_types.Part(text="Merci ! Et demain ?")]),
    ]
    client.models.generate_content(model=model, contents=third)


TURNS = {
    "anthropic": _anthropic_turns,
    "openai": _openai_turns,
    "google": _google_turns,
    "openai-chat": _chat_turns,
}
"""Each SDK's three turns: a captured sequence's two requests, then one built from the
second answer the SDK returned."""
TURN_CAPTURES = {
    "anthropic": ("thinking_tool_roundtrip/1", "thinking_tool_roundtrip/2", "refusal/1"),
    "openai": ("reasoning_function_roundtrip/1", "reasoning_function_roundtrip/2", "notices/1"),
    "google": ("thinking_function_roundtrip/1", "thinking_function_roundtrip/2", "errors/2"),
    "openai-chat": ("tool_call_stream/1", "tool_call_stream/2", "citations_refusal/1"),
}


@pytest.mark.parametrize("provider", list(TURNS))
def test_a_three_turn_sdk_exchange_threads_into_one_conversation(
    store: Store, provider: str
) -> None:
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(*(_reply(capture(f"{provider}/{n}")) for n in TURN_CAPTURES[provider]))
        TURNS[provider](proxy.url)
    [events] = _conversations(store)
    assert len(_responses(events)) == 3
    assert sum(isinstance(e, UserMessage) for e in events) >= 2


def test_previous_response_id_continues_the_response_it_names(store: Store) -> None:
    first, second = _sequence("openai", "reasoning_function_roundtrip")
    request = json.loads(second.request or b"")
    outputs = [i for i in request["input"] if i.get("type") == "function_call_output"]
    first_id = json.loads(
        next(line for line in first.body.splitlines() if b'"response.completed"' in line)[6:]
    )["response"]["id"]
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(_reply(first), _reply(second))
        _post(proxy.url, first, "openai")
        httpx.post(
            proxy.url + "/v1/responses",
            json={**request, "input": outputs, "previous_response_id": first_id},
            timeout=30,
        )
    [events] = _conversations(store)
    assert len(_responses(events)) == 2


def test_the_pin_header_continues_an_ingested_conversation(store: Store, tmp_path: Path) -> None:
    first, second = _sequence("anthropic", "thinking_tool_roundtrip")
    body = tmp_path / "first.sse"
    body.write_bytes(first.body)
    ingested = jobs.ingest(store.service, "anthropic", [jobs.Exchange(body, request=first.request)])
    assert ingested.conversation_id is not None
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(_reply(second), _reply(second))
        httpx.post(
            proxy.url + "/v1/messages",
            content=second.request,
            headers={"x-convstore-conversation": str(ingested.conversation_id)},
            timeout=30,
        )
        assert "x-convstore-conversation" not in upstream.requests[0].headers
    [events] = _conversations(store)
    assert len(_responses(events)) == 2


def test_a_request_that_edits_history_is_recorded_as_a_fork(store: Store) -> None:
    first, second = _sequence("anthropic", "thinking_tool_roundtrip")
    request = json.loads(second.request or b"")
    edited = {
        **request,
        "messages": [
            *request["messages"][:2],
            {
                "role": "user",
                "content": [{**request["messages"][2]["content"][0], "content": "Sunny."}],
            },
        ],
    }
    other = capture("anthropic/refusal/1")
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(_reply(first), _reply(second), _reply(other))
        _claude(proxy.url, first.request or b"")
        _claude(proxy.url, second.request or b"")
        _claude(proxy.url, edited)
    summaries = store.service.list()
    assert len(summaries) == 2
    parent, fork = summaries
    assert fork.forked_from == parent.id
    forked = store.service.history(fork.id)
    assert len(_responses(forked)) == 2  # the parent's first, then its own
    assert len(_responses(store.service.history(parent.id))) == 2
    own = list(store.service.events(fork.id))
    assert isinstance(own[0], Started) and own[0].forked_from == parent.id


def test_a_tie_goes_to_the_most_recent_conversation(store: Store) -> None:
    first, second = _sequence("anthropic", "thinking_tool_roundtrip")
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(_reply(first))
        _claude(proxy.url, first.request or b"")
    jobs_body = first.body.replace(b"msg_", b"msg_copy_")
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(Reply(**{**_reply(first).__dict__, "body": jobs_body}), _reply(second))
        _claude(proxy.url, first.request or b"")
        _claude(proxy.url, second.request or b"")
    older, newer = (store.service.history(s.id) for s in store.service.list())
    assert len(_responses(older)) == 1
    assert len(_responses(newer)) == 2


def test_the_index_is_keyed_by_the_store(tmp_path: Path) -> None:
    found = capture("anthropic/thinking_tool_roundtrip/1")
    digests = []
    for name in ("a.db", "b.db"):
        with (
            open_store(f"sqlite:///{tmp_path / name}") as opened,
            ReplayServer() as upstream,
            running_proxy(opened, upstream.url) as proxy,
        ):
            upstream.enqueue(_reply(found))
            _post(proxy.url, found, "anthropic")
        with sqlite3.connect(tmp_path / name) as db:
            digests.append(db.execute("SELECT digest FROM prefixes").fetchall())
    assert len(digests[0]) == len(digests[1]) == 1
    assert digests[0] != digests[1]


def test_the_transport_threads_for_an_sdk_too(store: Store) -> None:
    sequence = _sequence("anthropic", "thinking_tool_roundtrip")
    with ReplayServer() as upstream:
        upstream.enqueue(*(_reply(c) for c in sequence))
        with httpx2.Client(transport=recording_transport(store, httpx_module=httpx2)) as http:
            client = anthropic.Anthropic(api_key=KEY, base_url=upstream.url, http_client=http)
            first, second = (json.loads(c.request or b"") for c in sequence)
            first.pop("stream", None)
            with client.messages.stream(**first) as stream:
                stream.get_final_message()
            client.messages.create(**second)
    [events] = _conversations(store)
    assert [type(e) for e in events if isinstance(e, ResponseEnded)] == [ResponseEnded] * 2


def test_a_tie_goes_first_to_the_exact_match_on_opaque_values(store: Store) -> None:
    """Two conversations hold the same text, but only the older one the thinking signature
    the request sends back: the request continues that one, not the most recent."""
    first, second = _sequence("anthropic", "thinking_tool_roundtrip")
    original = _reply(first)
    assert isinstance(original.body, bytes) and b'"signature":"' in original.body
    copy = original.body.replace(b"msg_", b"msg_copy_").replace(
        b'"signature":"', b'"signature":"Other'
    )
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(original, Reply(**{**original.__dict__, "body": copy}), _reply(second))
        _claude(proxy.url, first.request or b"")
        _claude(proxy.url, first.request or b"")
        _claude(proxy.url, second.request or b"")
    older, newer = (store.service.history(s.id) for s in store.service.list())
    assert len(_responses(older)) == 2
    assert len(_responses(newer)) == 1


def test_threading_works_on_both_backends(store_url: str) -> None:
    sequence = _sequence("anthropic", "thinking_tool_roundtrip")
    with open_store(store_url) as opened:
        with ReplayServer() as upstream, running_proxy(opened, upstream.url) as proxy:
            upstream.enqueue(*(_reply(c) for c in sequence))
            for found in sequence:
                _post(proxy.url, found, "anthropic")
        [events] = [list(opened.service.history(s.id)) for s in opened.service.list()]
    assert len(_responses(events)) == 2


def _completed(response_id: str, text: str, previous: str | None) -> Reply:
    """A non-streamed Responses API answer that ends its turn (a plain message)."""
    body = {
        "id": response_id,
        "object": "response",
        "created_at": 1764700000,
        "status": "completed",
        "model": "gpt-5.1",
        "previous_response_id": previous,
        "output": [
            {
                "type": "message",
                "id": f"msg_{response_id}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    }
    return Reply(body=json.dumps(body).encode(), framing="length")


def test_a_previous_response_id_chain_of_ended_turns_stays_one_conversation(
    store: Store,
) -> None:
    """Each answer ends its turn (a TurnEnded follows its ResponseEnded): the next request
    naming it still continues the conversation, never forks it."""
    ids = ["resp_chain_1", "resp_chain_2", "resp_chain_3"]
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(
            *(
                _completed(rid, f"answer {n}", ids[n - 1] if n else None)
                for n, rid in enumerate(ids)
            )
        )
        client = openai.OpenAI(api_key=KEY, base_url=proxy.url + "/v1", max_retries=0)
        previous = None
        for n in range(3):
            extra = {} if previous is None else {"previous_response_id": previous}
            previous = client.responses.create(model="gpt-5.1", input=f"question {n}", **extra).id
    [events] = _conversations(store)
    assert len(_responses(events)) == 3
    assert [e.blocks[0] for e in events if isinstance(e, UserMessage)] == [
        "question 0",
        "question 1",
        "question 2",
    ]
