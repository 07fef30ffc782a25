"""The recording proxy and the recording transport, with the official SDKs as clients.

Each SDK (anthropic, openai for Responses and Chat Completions, google-genai), streaming
and not, talks to a real local
upstream on 127.0.0.1 (`ReplayServer`) replaying an example capture: directly, through
the proxy (`proxying.running_proxy`: the ASGI app on uvicorn), and through the recording
transport in its own httpx client. What the SDK returns is the same all three ways, the
bytes on the wire are the upstream's (compressed ones untouched), and the store holds the
conversation: the request's messages, then the response as `ingest` records it. HTTP
errors pass through and are recorded `failed`; a client that goes away is recorded
`abandoned` and its upstream request cancelled; no credential reaches the store.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from convstore.adapters.openai_chat.context import server_host
from convstore.adapters.proxy import recording_transport
from convstore.adapters.proxy.routes import DEFAULT_UPSTREAMS, Route, route, upstreams
from convstore.adapters.proxy.server import Limits
from convstore.domain.errors import ConfigurationError
from convstore.domain.events import Event, ResponseEnded, ResponseStarted, UserMessage
from convstore.storage import Store, open_store
from tests.proxying import capture, running_proxy
from tests.replay_server import Capture, ReplayServer, Reply
from tests.sdk_readers import with_event_names

ANTHROPIC_KEY = "sk-ant-proxy-test-9f3a71c0e2"
OPENAI_KEY = "sk-proj-proxy-test-4be81d2f77"
GOOGLE_KEY = "AIzaProxyTest-6c0d93ab51e4"
KEY = {
    "anthropic": ANTHROPIC_KEY,
    "openai": OPENAI_KEY,
    "google": GOOGLE_KEY,
    "openai-chat": OPENAI_KEY,
}
SDKS = tuple(KEY)
"""Each provider an SDK test calls."""

CAPTURES = {
    ("anthropic", True): "anthropic/thinking_tool_roundtrip/1",
    ("anthropic", False): "anthropic/thinking_tool_roundtrip/2",
    ("openai", True): "openai/reasoning_function_roundtrip/1",
    ("openai", False): "openai/reasoning_function_roundtrip/2",
    ("google", True): "google/thinking_function_roundtrip/1",
    ("google", False): "google/errors/2",
    ("openai-chat", True): "openai-chat/tool_call_stream/1",
    ("openai-chat", False): "openai-chat/citations_refusal/1",
}
"""The capture each SDK's call is answered with, streamed and not."""

QUESTION = "What is the weather in Paris?"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as opened:
        yield opened


def _reply(found: Capture, **changes: Any) -> Reply:
    body = with_event_names(found.body) if found.streamed and "anthropic" in found.name else None
    reply = Reply.of(found, **changes)
    return reply if body is None else Reply(**{**reply.__dict__, "body": body})


def _model(found: Capture) -> str:
    return found.path.split("models/", 1)[1].split(":", 1)[0] if "models/" in found.path else "m"


def _call(provider: str, streamed: bool, url: str, http: httpx2.Client | None) -> Any:
    """The SDK's result for one question, as plain data."""
    found = capture(CAPTURES[provider, streamed])
    if provider == "anthropic":
        a = anthropic.Anthropic(
            api_key=ANTHROPIC_KEY, base_url=url, max_retries=0, http_client=http
        )
        request: dict[str, Any] = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": QUESTION}],
        }
        if streamed:
            with a.messages.stream(**request) as stream:
                return stream.get_final_message().model_dump()
        return a.messages.create(**request).model_dump()
    if provider.startswith("openai"):
        o = openai.OpenAI(api_key=OPENAI_KEY, base_url=url + "/v1", max_retries=0, http_client=http)
        if provider == "openai-chat":
            asked = o.chat.completions.create(
                model="gpt-4.1", messages=[{"role": "user", "content": QUESTION}], stream=streamed
            )
            return [c.model_dump() for c in asked] if streamed else asked.model_dump()
        if streamed:
            with o.responses.stream(model="gpt-5", input=QUESTION) as stream:
                return stream.get_final_response().model_dump()
        return o.responses.create(model="gpt-5", input=QUESTION).model_dump()
    options = genai_types.HttpOptions(base_url=url, httpx_client=http)
    g = genai.Client(api_key=GOOGLE_KEY, http_options=options)
    if streamed:
        return [
            chunk.model_dump()
            for chunk in g.models.generate_content_stream(model=_model(found), contents=QUESTION)
        ]
    return g.models.generate_content(model=_model(found), contents=QUESTION).model_dump()


def _without_ids(result: Any) -> Any:
    """A google-genai result without what the SDK makes up per call (none in the others)."""
    if isinstance(result, list):
        return [_without_ids(item) for item in result]
    if isinstance(result, dict):
        return {k: _without_ids(v) for k, v in result.items() if k != "sdk_http_response"}
    return result


def _events(store: Store) -> list[list[Event]]:
    return [list(store.service.events(s.id)) for s in store.service.list(limit=1000)]


def _started(events: list[Event]) -> list[ResponseStarted]:
    return [e for e in events if isinstance(e, ResponseStarted)]


def _ends(events: list[Event]) -> list[ResponseEnded]:
    return [e for e in events if isinstance(e, ResponseEnded)]


def _user_texts(events: list[Event]) -> list[str]:
    return [b for e in events if isinstance(e, UserMessage) for b in e.blocks if isinstance(b, str)]


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("provider", SDKS)
@pytest.mark.parametrize("via", ["proxy", "transport"])
def test_the_sdk_gets_what_it_gets_directly_and_the_store_holds_the_exchange(
    store: Store, provider: str, streamed: bool, via: str
) -> None:
    found = capture(CAPTURES[provider, streamed])
    with ReplayServer() as upstream:
        upstream.enqueue(_reply(found), _reply(found))
        direct = _call(provider, streamed, upstream.url, None)
        if via == "proxy":
            with running_proxy(store, upstream.url) as proxy:
                recorded = _call(provider, streamed, proxy.url, None)
        else:
            with httpx2.Client(transport=recording_transport(store, httpx_module=httpx2)) as http:
                recorded = _call(provider, streamed, upstream.url, http)
        assert upstream.requests[0].body == upstream.requests[1].body
        assert upstream.requests[1].path == upstream.requests[0].path
    assert _without_ids(recorded) == _without_ids(direct)
    [events] = _events(store)
    assert _user_texts(events) == [QUESTION]
    [started] = _started(events)
    [end] = _ends(events)
    assert started.provider == provider
    assert end.state == "completed"
    if provider == "openai-chat":  # its payloads are bound to the upstream's host
        payloads = [e.payload for e in events if getattr(e, "payload", None) is not None]
        bound = {p.binding.get("server") for p in payloads if p.binding}
        assert bound == {server_host(upstream.url)}


@pytest.mark.parametrize("coding", ["identity", "gzip"])
@pytest.mark.parametrize("provider", ["anthropic", "openai", "google"])
def test_the_answer_arrives_byte_for_byte_compressed_or_not(
    store: Store, provider: str, coding: str
) -> None:
    found = capture(CAPTURES[provider, True])
    reply = _reply(found)
    assert isinstance(reply.body, bytes)
    sent = gzip.compress(reply.body) if coding == "gzip" else reply.body
    headers = {"content-encoding": "gzip"} if coding == "gzip" else {}
    path = found.path or "/v1/messages"
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(Reply(**{**reply.__dict__, "body": sent, "headers": headers}))
        with (
            httpx.Client() as http,
            http.stream(
                "POST",
                proxy.url + path,
                content=found.request or b"{}",
                headers={"content-type": "application/json", "x-api-key": ANTHROPIC_KEY},
            ) as response,
        ):
            got = b"".join(response.iter_raw())
            assert response.headers.get("content-encoding", "identity") == coding
    assert got == sent
    [events] = _events(store)
    assert _ends(events)[0].state == "completed"


@pytest.mark.parametrize("status", [429, 500])
@pytest.mark.parametrize("via", ["proxy", "transport"])
def test_an_http_error_passes_through_and_is_recorded_failed(
    store: Store, status: int, via: str
) -> None:
    body = json.dumps(
        {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    ).encode()
    with ReplayServer() as upstream:
        upstream.enqueue(Reply(status=status, body=body, headers={"request-id": "req_1"}))
        with contextlib_proxy(store, upstream.url, via) as (url, http):
            a = anthropic.Anthropic(
                api_key=ANTHROPIC_KEY, base_url=url, max_retries=0, http_client=http
            )
            with pytest.raises(anthropic.APIStatusError) as raised:
                a.messages.create(
                    model="claude-sonnet-4-5",
                    max_tokens=10,
                    messages=[{"role": "user", "content": QUESTION}],
                )
    assert raised.value.status_code == status
    assert raised.value.response.content == body
    assert raised.value.response.headers["request-id"] == "req_1"
    [events] = _events(store)
    [end] = _ends(events)
    assert end.state == "failed"
    assert end.error is not None and end.error.status == status


@pytest.mark.parametrize("status", [429, 500])
@pytest.mark.parametrize("via", ["proxy", "transport"])
def test_a_chat_completions_http_error_passes_through_and_is_recorded_failed(
    store: Store, status: int, via: str
) -> None:
    body = capture("openai-chat/errors/3").body
    with ReplayServer() as upstream:
        upstream.enqueue(Reply(status=status, body=body, headers={"x-request-id": "req_2"}))
        with contextlib_proxy(store, upstream.url, via) as (url, http):
            o = openai.OpenAI(
                api_key=OPENAI_KEY, base_url=url + "/v1", max_retries=0, http_client=http
            )
            with pytest.raises(openai.APIStatusError) as raised:
                o.chat.completions.create(
                    model="gpt-4.1-mini", messages=[{"role": "user", "content": QUESTION}]
                )
    assert raised.value.status_code == status
    assert raised.value.response.content == body
    assert raised.value.request_id == "req_2"
    [events] = _events(store)
    assert _user_texts(events) == [QUESTION]
    [started] = _started(events)
    [end] = _ends(events)
    assert started.provider == "openai-chat"
    assert end.state == "failed"
    assert end.error is not None and end.error.status == status


@contextmanager
def contextlib_proxy(
    store: Store, upstream: str, via: str
) -> Iterator[tuple[str, httpx2.Client | None]]:
    """(base URL, http client) for a client through the proxy or the transport."""
    if via == "proxy":
        with running_proxy(store, upstream) as proxy:
            yield proxy.url, None
    else:
        with httpx2.Client(transport=recording_transport(store, httpx_module=httpx2)) as http:
            yield upstream, http


def _slow_stream(found: Capture, events: int, sent: list[int], done: threading.Event) -> Reply:
    """The capture's first events, then `events` pings 20 ms apart (counted in `sent`;
    `done` once the server stops sending, finished or cut)."""
    head = with_event_names(found.body).split(b"\n\n")
    start = b"\n\n".join(head[:3]) + b"\n\n"

    def pieces() -> Iterator[bytes]:
        try:
            yield start
            for _ in range(events):
                time.sleep(0.02)
                sent[0] += 1
                yield b'event: ping\ndata: {"type": "ping"}\n\n'
        finally:
            done.set()

    return Reply(body=pieces, content_type="text/event-stream", pause=0)


@pytest.mark.parametrize("via", ["proxy", "transport"])
def test_a_client_that_goes_away_is_recorded_abandoned_and_its_upstream_cancelled(
    store: Store, via: str
) -> None:
    found = capture(CAPTURES["anthropic", True])
    sent, done = [0], threading.Event()
    with ReplayServer() as upstream:
        upstream.enqueue(_slow_stream(found, 500, sent, done))
        with contextlib_proxy(store, upstream.url, via) as (url, http):
            a = anthropic.Anthropic(
                api_key=ANTHROPIC_KEY, base_url=url, max_retries=0, http_client=http
            )
            with a.messages.stream(
                model="claude-sonnet-4-5",
                max_tokens=10,
                messages=[{"role": "user", "content": QUESTION}],
            ) as stream:
                for _ in stream:
                    break  # the first event: the client goes away
            assert done.wait(5), "the upstream kept sending after the client left"
    assert sent[0] < 500
    [events] = _events(store)
    [end] = _ends(events)
    assert end.state == "abandoned"
    assert end.end_reason == "disconnected"


def test_no_credential_reaches_the_store(store: Store, tmp_path: Path) -> None:
    with ReplayServer() as upstream:
        for provider in SDKS:
            for streamed in (True, False):
                upstream.enqueue(_reply(capture(CAPTURES[provider, streamed])))
        with running_proxy(store, upstream.url) as proxy:
            for provider in SDKS:
                for streamed in (True, False):
                    _call(provider, streamed, proxy.url, None)
        sent = [r.headers for r in upstream.requests]
    for headers, provider in zip(sent[::2], SDKS, strict=True):  # with the client's key
        key = KEY[provider]
        assert (
            key in (headers.get("x-api-key"), headers.get("x-goog-api-key"))
            or headers.get("authorization") == f"Bearer {key}"
        )
    assert sum(len(_started(events)) for events in _events(store)) == 2 * len(SDKS)
    files = sorted(f for f in tmp_path.glob("store.db*") if f.is_file())
    assert any(f.name.endswith("-wal") for f in files)
    with sqlite3.connect(tmp_path / "store.db") as db:
        dump = "\n".join(db.iterdump())
    for key in set(KEY.values()):
        assert key not in dump
        for file in files:
            assert key.encode() not in file.read_bytes(), file.name


def test_other_paths_pass_through_unrecorded(store: Store) -> None:
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(Reply(body=b'{"input_tokens": 7}'), Reply(body=b'{"data": []}'))
        a = anthropic.Anthropic(api_key=ANTHROPIC_KEY, base_url=proxy.url, max_retries=0)
        counted = a.messages.count_tokens(
            model="claude-sonnet-4-5", messages=[{"role": "user", "content": QUESTION}]
        )
        o = openai.OpenAI(api_key=OPENAI_KEY, base_url=proxy.url + "/v1", max_retries=0)
        models = o.models.list()
        assert [r.path for r in upstream.requests] == ["/v1/messages/count_tokens", "/v1/models"]
    assert counted.input_tokens == 7
    assert list(models) == []
    assert _events(store) == []


def test_a_google_sdk_error_passes_through(store: Store) -> None:
    found = capture("google/errors/1")
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(_reply(found))
        g = genai.Client(
            api_key=GOOGLE_KEY, http_options=genai_types.HttpOptions(base_url=proxy.url)
        )
        with pytest.raises(genai_errors.APIError) as raised:
            g.models.generate_content(model=_model(found), contents=QUESTION)
    assert raised.value.code == found.status
    [events] = _events(store)
    assert _ends(events)[0].state == "failed"


def _long_stream(deltas: int) -> bytes:
    """An Anthropic stream of one text block in `deltas` pieces."""

    def event(kind: str, data: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

    message = {
        "id": "msg_long_overload",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 5, "output_tokens": 1},
    }
    text = {"type": "text_delta", "text": "All work and no play makes Jack a dull boy. "}
    return b"".join(
        [
            event("message_start", {"message": message}),
            event(
                "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
            ),
            *(event("content_block_delta", {"index": 0, "delta": text}) for _ in range(deltas)),
            event("content_block_stop", {"index": 0}),
            event(
                "message_delta",
                {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
            ),
            event("message_stop", {}),
        ]
    )


def test_a_recorder_too_far_behind_never_slows_the_client_and_ends_failed(
    store: Store, tmp_path: Path
) -> None:
    """The writer is held up (another writer holds the store's lock) while the answer
    streams past the cap: the client gets all of it, the recording what arrived before,
    ended `failed` (`recorder_overloaded`)."""
    body = _long_stream(400)
    cap = 8 * 1024
    assert len(body) > 4 * cap
    blocker = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    with (
        ReplayServer() as upstream,
        running_proxy(store, upstream.url, max_body_bytes=cap) as proxy,
    ):
        upstream.enqueue(Reply(body=body, content_type="text/event-stream", pause=0.0005))
        blocker.execute("BEGIN IMMEDIATE")
        try:
            got = httpx.post(
                proxy.url + "/v1/messages",
                json={
                    "model": "m",
                    "max_tokens": 9,
                    "messages": [{"role": "user", "content": "Go"}],
                },
                timeout=30,
            ).content
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
    assert got == body
    [events] = _events(store)
    [end] = _ends(events)
    assert end.state == "failed"
    assert end.error is not None and end.error.type == "recorder_overloaded"


@pytest.mark.parametrize(
    ("path", "provider", "recorded", "model"),
    [
        ("/v1/messages", "anthropic", True, ""),
        ("/v1/messages/count_tokens", "anthropic", False, ""),
        ("/v1/responses", "openai", True, ""),
        ("/v1/responses/compact", "openai", True, ""),
        ("/v1/files", "openai", False, ""),
        ("/v1/chat/completions", "openai-chat", True, ""),
        ("/api/v1/chat/completions", "openai-chat", True, ""),
        ("/chat/completions", "openai-chat", True, ""),
        ("/v1/chat/completions/abc/messages", "openai", False, ""),
        ("/v1beta/models/gemini-2.5-flash:generateContent", "google", True, "gemini-2.5-flash"),
        ("/v1beta/models/gemini-2.5-pro:streamGenerateContent", "google", True, "gemini-2.5-pro"),
        ("/v1beta/models/gemini-2.5-pro:countTokens", "google", False, ""),
        (
            "/v1/projects/p-1/locations/europe-west4/publishers/google/models/"
            "gemini-2.5-pro:streamGenerateContent",
            "google",
            True,
            "gemini-2.5-pro",
        ),
    ],
)
def test_the_model_paths_are_recorded_and_the_others_pass_through(
    path: str, provider: str, recorded: bool, model: str
) -> None:
    found = route(path, {})
    assert found == Route(provider, recorded=recorded, model=model)


def test_a_compatible_server_is_recorded_bound_to_its_host(store: Store) -> None:
    found = capture(CAPTURES["openai-chat", False])
    with ReplayServer() as upstream:
        upstream.enqueue(_reply(found))
        ours = upstreams([f"openai-chat={upstream.url}/api"])
        assert ours["openai"] == DEFAULT_UPSTREAMS["openai"]  # Responses still go to OpenAI
        assert upstreams(["openai=http://x:1"])["openai-chat"] == "http://x:1"  # as before
        with httpx2.Client(transport=recording_transport(store, httpx_module=httpx2)) as http:
            _call("openai-chat", False, ours["openai-chat"], http)  # under its base path
        assert upstream.requests[0].path == "/api/v1/chat/completions"
    [events] = _events(store)
    assert _started(events)[0].provider == "openai-chat"
    payloads = [e.payload for e in events if getattr(e, "payload", None) is not None]
    assert {p.binding.get("server") for p in payloads if p.binding} == {server_host(upstream.url)}


def test_a_path_no_provider_serves_is_refused(store: Store) -> None:
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        answer = httpx.get(proxy.url + "/admin", timeout=10)
        assert upstream.requests == []
    assert answer.status_code == 404


def test_an_upstream_that_cannot_be_reached_is_named_in_a_502(store: Store) -> None:
    """Nothing listens at the upstream: the SDK gets a 502 whose error names the provider,
    the upstream's base URL and what went wrong; nothing is recorded."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{unused.getsockname()[1]}"
    with running_proxy(store, dead) as proxy:
        client = anthropic.Anthropic(api_key=ANTHROPIC_KEY, base_url=proxy.url, max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as raised:
            client.messages.create(
                model="claude-sonnet-4-5",
                max_tokens=64,
                messages=[{"role": "user", "content": QUESTION}],
            )
    assert raised.value.status_code == 502
    error = raised.value.response.json()["error"]
    assert error == f"convstore proxy: the anthropic upstream {dead} is unreachable (ConnectError)"
    assert _events(store) == []


def test_an_upstream_that_does_not_answer_in_time_is_a_504_naming_the_option(
    store: Store,
) -> None:
    """The upstream accepts the connection and never answers: after `--read-timeout` the
    client gets a 504 saying which limit ran out."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        silent_url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with running_proxy(store, silent_url, limits=Limits(read_timeout=0.5)) as proxy:
            answer = httpx.post(
                proxy.url + "/v1/responses",
                json={"model": "gpt-5.1", "input": QUESTION},
                headers={"authorization": f"Bearer {OPENAI_KEY}"},
                timeout=30,
            )
    assert answer.status_code == 504
    assert answer.json()["error"] == (
        f"convstore proxy: the openai upstream {silent_url} did not answer in time "
        "(ReadTimeout; see --read-timeout)"
    )


def test_vertex_gemini_is_recorded_with_its_model(store: Store) -> None:
    found = capture("google/errors/2")
    path = (
        "/v1/projects/p-1/locations/europe-west4/publishers/google/models/"
        "gemini-2.5-flash:generateContent"
    )
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(_reply(found))
        answer = httpx.post(
            proxy.url + path,
            content=found.request,
            headers={"authorization": "Bearer ya29.vertex-token"},
            timeout=30,
        )
        assert upstream.requests[0].path == path
        assert upstream.requests[0].headers["authorization"] == "Bearer ya29.vertex-token"
    assert answer.content == found.body
    [events] = _events(store)
    [started] = _started(events)
    assert started.provider == "google"
    assert started.model.startswith("gemini-2.5-flash")


@pytest.mark.parametrize("via", ["proxy", "transport"])
def test_an_upstream_that_dies_mid_stream_is_recorded_abandoned(store: Store, via: str) -> None:
    reply = _reply(capture(CAPTURES["anthropic", True]))
    assert isinstance(reply.body, bytes)
    cut = len(reply.body) // 2
    with ReplayServer() as upstream:
        upstream.enqueue(Reply(**{**reply.__dict__, "cut_after": cut}))
        with contextlib_proxy(store, upstream.url, via) as (url, http):
            client = http if http is not None else httpx2.Client()
            got = b""
            with (
                pytest.raises((httpx2.HTTPError, httpx2.StreamError)),
                client.stream(
                    "POST",
                    url + "/v1/messages",
                    json={
                        "model": "m",
                        "max_tokens": 9,
                        "messages": [{"role": "user", "content": "Go"}],
                    },
                ) as response,
            ):
                for chunk in response.iter_raw():
                    got += chunk
    assert got == reply.body[:cut]
    [events] = _events(store)
    [end] = _ends(events)
    assert end.state == "abandoned"
    assert end.end_reason == "upstream_lost"


def test_an_upload_on_another_path_streams_through_uncapped(store: Store) -> None:
    upload = bytes(range(256)) * 400  # past the proxy's cap on a model request here
    with (
        ReplayServer() as upstream,
        running_proxy(store, upstream.url, max_body_bytes=10_000) as proxy,
    ):
        upstream.enqueue(Reply(body=b'{"id": "file-1"}'), Reply(body=b"{}"))
        answer = httpx.post(
            proxy.url + "/v1/files",
            content=upload,
            headers={"authorization": f"Bearer {OPENAI_KEY}"},
            timeout=30,
        )
        too_large = httpx.post(proxy.url + "/v1/responses", content=upload, timeout=30)
        assert [r.body for r in upstream.requests] == [upload]
    assert answer.json() == {"id": "file-1"}
    assert too_large.status_code == 413
    assert _events(store) == []


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_transport_of_another_httpx_package_is_a_typed_error(
    store: Store, asynchronous: bool
) -> None:
    """A wrapped transport, or a client, from another httpx package than the recording
    transport's is refused by name, before anything is sent or recorded (it was a bare
    AssertionError inside the wrapped transport)."""
    wrapped = httpx.AsyncHTTPTransport() if asynchronous else httpx.HTTPTransport()
    with pytest.raises(ConfigurationError, match=r"made for the httpx2 package.*httpx\.\w*HTTP"):
        recording_transport(store, wrapped=wrapped, asynchronous=asynchronous, httpx_module=httpx2)
    other = httpx.HTTPTransport() if asynchronous else httpx.AsyncHTTPTransport()
    with pytest.raises(ConfigurationError, match="wrapped transport"):
        recording_transport(store, wrapped=other, asynchronous=asynchronous)
    with ReplayServer() as upstream:
        upstream.enqueue(Reply(body=b"{}"))
        made = recording_transport(store, asynchronous=asynchronous)  # httpx's, by default
        message = r"made for the httpx package, but the client's request is httpx2's"
        if asynchronous:

            async def post() -> None:
                async with httpx2.AsyncClient(transport=made) as http:
                    await http.post(upstream.url + "/v1/messages", content=b"{}")

            with pytest.raises(ConfigurationError, match=message):
                asyncio.run(post())
        else:
            with (
                httpx2.Client(transport=made) as http,
                pytest.raises(ConfigurationError, match=message),
            ):
                http.post(upstream.url + "/v1/messages", content=b"{}")
        assert upstream.requests == []
    assert _events(store) == []
