"""The Anthropic client against a real HTTP server on 127.0.0.1 replaying recorded answers.

Every capture (our examples, and `../shared/wire/anthropic` when present) is streamed in
small chunks and arrives byte for byte; scripted failures (429, 529 `overloaded_error`,
an `error` event mid-stream, a dropped connection, a gzip bomb, a 400) behave as
documented; the key is sent and never appears anywhere else. When the decoder is
installed, streaming through the client and decoding gives the drafts of the file.
"""

from __future__ import annotations

import logging
import traceback
import tracemalloc
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from convstore.adapters.anthropic.client import API_VERSION, AnthropicClient
from convstore.adapters.http.errors import ProviderHTTPError, ProviderUnavailable, StreamInterrupted
from convstore.adapters.http.transport import HTTPStream, RetryPolicy, Timeouts
from convstore.domain.errors import ConfigurationError, ConvstoreError, DecodeError
from tests.replay_server import (
    EXAMPLES,
    WIRE,
    Capture,
    ReplayServer,
    Reply,
    captures,
    free_port,
    gzip_bomb,
)

KEY = "sk-ant-api03-TEST-0123456789abcdefghijklmnop-KEY"
FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.05, jitter=0.0)
QUICK = Timeouts(connect=2, read=5, write=5, pool=2)
MINIMAL = b'{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[]}'
OVERLOADED = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'

OURS = captures(EXAMPLES / "anthropic", "examples")
WIRE_DIR = WIRE / "anthropic"
THEIRS = captures(WIRE_DIR, "wire") if WIRE_DIR.is_dir() else []
_ABSENT = pytest.mark.skip(reason=f"{WIRE_DIR} is absent: no recorded traffic to replay")


def cases(found: list[Capture]) -> list[Any]:
    """Test parameters: each capture, and a skipped stand-in when the wire corpus is absent."""
    absent = [] if THEIRS else [pytest.param(None, id="wire", marks=_ABSENT)]
    return [pytest.param(c, id=c.name) for c in found] + absent


ALL = cases(OURS + THEIRS)
SUCCESSES = cases([c for c in OURS + THEIRS if c.status == 200])
_FIELDS = msgspec.json.Decoder(dict[str, msgspec.Raw])


def ours(name: str) -> Capture:
    return next(c for c in OURS if c.name == f"examples/{name}")


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    with ReplayServer() as running:
        yield running


@pytest.fixture
def client(server: ReplayServer) -> Iterator[AnthropicClient]:
    with AnthropicClient(server.url, retry=FAST, timeouts=QUICK) as running:
        yield running


def request_of(capture: Capture) -> bytes:
    return capture.request or MINIMAL


def stream_all(client: AnthropicClient, body: bytes) -> tuple[bytes, HTTPStream]:
    with client.stream_message(body) as stream:
        return b"".join(stream), stream


def everything_visible(error: BaseException) -> str:
    """An error's message, repr, attributes and traceback, its chain included."""
    parts = ["".join(traceback.format_exception(error))]
    link: BaseException | None = error
    while link is not None:
        parts += [repr(link), repr(vars(link))]
        link = link.__cause__ or link.__context__
    return "\n".join(parts)


def assert_sent_as_asked(server: ReplayServer, original: bytes, *, stream: bool) -> None:
    """Headers as the API wants them; the body's values byte-identical to the original."""
    seen = server.requests[-1]
    assert (seen.method, seen.path) == ("POST", "/v1/messages")
    assert seen.headers["x-api-key"] == KEY
    assert seen.headers["anthropic-version"] == API_VERSION
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["accept"] == ("text/event-stream" if stream else "application/json")
    sent, before = _FIELDS.decode(seen.body), _FIELDS.decode(original)
    assert {k: bytes(v) for k, v in sent.items() if k != "stream"} == {
        k: bytes(v) for k, v in before.items() if k != "stream"
    }
    if stream:
        assert bytes(sent["stream"]) == b"true"
    else:
        assert "stream" not in sent or bytes(sent["stream"]) != b"true"


# --- every capture, replayed -------------------------------------------------------------


@pytest.mark.parametrize("capture", SUCCESSES)
def test_every_capture_arrives_byte_for_byte(
    server: ReplayServer, client: AnthropicClient, capture: Capture
) -> None:
    server.enqueue(Reply.of(capture, chunk_size=61))
    if capture.streamed:
        body, stream = stream_all(client, request_of(capture))
        assert (stream.status, stream.attempts, stream.interrupted) == (200, 1, None)
        assert stream.headers["content-type"].startswith("text/event-stream")
    else:
        body = client.create_message(request_of(capture))
    assert body == capture.body
    assert_sent_as_asked(server, request_of(capture), stream=capture.streamed)


def test_stream_true_is_inserted_keeping_every_byte(
    server: ReplayServer, client: AnthropicClient
) -> None:
    capture = ours("web_search_citations/1")
    original = request_of(capture).replace(b',"stream":true', b"")
    assert b'"stream"' not in original
    server.enqueue(Reply.of(capture))
    stream_all(client, original)
    assert server.requests[0].body == b'{"stream":true,' + original[1:]


def test_betas_and_a_trailing_slash(server: ReplayServer) -> None:
    capture = ours("web_search_citations/2")
    server.enqueue(Reply.of(capture))
    with AnthropicClient(
        server.url + "/", retry=FAST, betas=["web-fetch-2025-09-10", "code-execution-2025-08-25"]
    ) as client:
        client.create_message(request_of(capture))
    seen = server.requests[0]
    assert seen.path == "/v1/messages"
    assert seen.headers["anthropic-beta"] == "web-fetch-2025-09-10,code-execution-2025-08-25"


# --- retries -----------------------------------------------------------------------------


def test_a_429_is_retried_after_its_retry_after(
    server: ReplayServer, client: AnthropicClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    capture = ours("thinking_tool_roundtrip/1")
    rate_limited = b'{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}'
    server.enqueue(
        Reply(status=429, body=rate_limited, headers={"retry-after": "0"}), Reply.of(capture)
    )
    body, stream = stream_all(client, request_of(capture))
    assert body == capture.body
    assert stream.attempts == 2
    assert len(server.requests) == 2
    assert all(r.headers["x-api-key"] == KEY for r in server.requests)
    assert server.requests[0].body == server.requests[1].body
    assert "answered HTTP 429; retrying in 0.00s (attempt 2 of 3)" in caplog.text
    assert KEY not in caplog.text


def test_a_529_overloaded_answer_is_retried_with_backoff(server: ReplayServer) -> None:
    capture = ours("mixed_batch/2")
    server.enqueue(
        Reply(status=529, body=OVERLOADED), Reply(status=529, body=OVERLOADED), Reply.of(capture)
    )
    policy = RetryPolicy(max_attempts=3, base_delay=0.05, max_delay=1, jitter=0)
    with AnthropicClient(server.url, retry=policy, timeouts=QUICK) as client:
        assert client.create_message(request_of(capture)) == capture.body
    first, second, third = (r.at for r in server.requests)
    assert second - first >= 0.05
    assert third - second >= 0.1


def test_overloaded_until_the_attempts_run_out(server: ReplayServer) -> None:
    server.enqueue(*(Reply(status=529, body=OVERLOADED) for _ in range(3)))
    with AnthropicClient(server.url, retry=FAST) as client, pytest.raises(ProviderHTTPError) as e:
        client.create_message(MINIMAL)
    assert (e.value.status, e.value.body, e.value.attempts) == (529, OVERLOADED, 3)
    assert "anthropic answered HTTP 529 at" in str(e.value)
    assert "(after 3 attempts): overloaded_error - Overloaded" in str(e.value)
    assert len(server.requests) == 3


def test_an_error_event_mid_stream_is_not_retried(
    server: ReplayServer, client: AnthropicClient
) -> None:
    capture = ours("errors/1")
    assert b"event: error" in capture.body
    server.enqueue(Reply.of(capture, chunk_size=23))
    body, stream = stream_all(client, request_of(capture))
    assert body == capture.body  # what came before, then the error event, as sent
    assert stream.interrupted is None
    assert len(server.requests) == 1


def test_no_server_means_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with AnthropicClient(url, retry=FAST) as client, pytest.raises(ProviderUnavailable) as e:
        client.create_message(MINIMAL)
    assert e.value.attempts == 3
    assert str(e.value).startswith(f"anthropic did not answer at {url}/v1/messages after 3")


# --- broken answers ----------------------------------------------------------------------


def test_a_dropped_connection_keeps_what_arrived(
    server: ReplayServer, client: AnthropicClient
) -> None:
    capture = ours("web_search_citations/1")
    half = len(capture.body) // 2
    server.enqueue(Reply.of(capture, cut_after=half, chunk_size=100))
    body, stream = stream_all(client, request_of(capture))
    assert body == capture.body[:half]
    assert isinstance(stream.interrupted, StreamInterrupted)
    assert stream.interrupted.received == half
    assert len(server.requests) == 1


def test_a_dropped_non_streamed_answer_raises(
    server: ReplayServer, client: AnthropicClient
) -> None:
    capture = ours("web_search_citations/2")
    server.enqueue(Reply.of(capture, cut_after=len(capture.body) // 2, framing="length"))
    with pytest.raises(StreamInterrupted, match="the connection ended before the body did"):
        client.create_message(request_of(capture))


def test_a_gzip_bomb_is_stopped_at_the_cap(server: ReplayServer) -> None:
    """Scenario 22 (backend-independent): a gzip-encoded stream stops at max_body_bytes with bounded
    memory."""
    cap = 64 * 1024 * 1024
    server.enqueue(
        Reply(
            body=lambda: gzip_bomb(1024**3),
            content_type="text/event-stream",
            headers={"content-encoding": "gzip"},
            chunk_size=16 * 1024,
            pause=0,
        )
    )
    received = 0
    with AnthropicClient(server.url, retry=FAST, max_body_bytes=cap) as client:
        tracemalloc.start()
        try:
            with (
                pytest.raises(DecodeError, match="max_body_bytes = 67108864"),
                client.stream_message(MINIMAL) as stream,
            ):
                for chunk in stream:
                    received += len(chunk)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert received == cap
    assert peak < 4 * 1024 * 1024, f"peak traced memory {peak} bytes"


def test_an_http_error_body_is_returned_as_data(
    server: ReplayServer, client: AnthropicClient
) -> None:
    capture = ours("errors/2")
    server.enqueue(Reply.of(capture, headers={"request-id": "req_01wYcMknqgMXifHmAQGPF3Ue"}))
    with pytest.raises(ProviderHTTPError) as e:
        client.create_message(request_of(capture))
    error = e.value
    assert isinstance(error, ConvstoreError)
    assert (error.status, error.body, error.attempts) == (400, capture.body, 1)
    assert error.headers["request-id"] == "req_01wYcMknqgMXifHmAQGPF3Ue"
    assert "HTTP 400 Bad Request" in str(error)
    assert "invalid_request_error - max_tokens: must be greater than" in str(error)
    assert len(server.requests) == 1


# --- the key -----------------------------------------------------------------------------


def test_the_key_comes_from_the_environment(
    server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.enqueue(Reply.of(ours("mixed_batch/2")))
    with AnthropicClient(server.url) as client:
        client.create_message(MINIMAL)
        assert KEY not in repr(client)
    assert server.requests[0].headers["x-api-key"] == KEY
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        AnthropicClient(server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "  ")
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        AnthropicClient(server.url)
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        AnthropicClient(server.url, api_key="")


def test_the_key_never_leaves_the_request_headers(
    server: ReplayServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever goes wrong, no message, log line, error body or returned byte holds the key."""
    caplog.set_level(logging.DEBUG)
    echo = b'{"type":"error","error":{"type":"authentication_error","message":"bad %s"}}'
    capture = ours("web_search_citations/1")
    server.enqueue(
        Reply(status=503, body=echo % KEY.encode()),
        Reply(status=401, body=echo % KEY.encode()),
        Reply.of(capture, cut_after=1000),
        Reply.of(capture, head_delay=0.5),
        Reply.of(capture, head_delay=0.5),
        Reply(status=400, body=ours("errors/2").body),
    )
    seen: list[Any] = []
    with AnthropicClient(
        server.url,
        api_key=KEY,
        retry=RetryPolicy(max_attempts=2, base_delay=0.001, jitter=0),
        timeouts=Timeouts(connect=2, read=0.2, write=2, pool=2),
    ) as client:
        seen.append(repr(client))
        for _ in range(4):
            try:
                body, stream = stream_all(client, MINIMAL)
                seen += [body, dict(stream.headers), stream.interrupted, vars(stream.interrupted)]
            except ConvstoreError as error:
                seen += [everything_visible(error), getattr(error, "body", b"")]
    with AnthropicClient(f"http://127.0.0.1:{free_port()}", retry=FAST) as client:
        try:
            client.create_message(MINIMAL)
        except ProviderUnavailable as error:
            seen.append(everything_visible(error))
    assert len(server.requests) == 6
    assert all(r.headers["x-api-key"] == KEY for r in server.requests)
    kinds = [type(item).__name__ for item in seen]
    assert "StreamInterrupted" in kinds
    assert any(isinstance(s, str) and "ProviderHTTPError" in s for s in seen)
    assert any(isinstance(s, str) and "ProviderUnavailable" in s for s in seen)
    assert any(isinstance(s, bytes) and b"bad [redacted]" in s for s in seen)
    assert KEY not in repr(seen)
    assert KEY.encode() not in b"".join(s for s in seen if isinstance(s, bytes))
    assert KEY not in caplog.text


# --- through the decoder -----------------------------------------------------------------


@pytest.mark.parametrize("capture", ALL)
def test_streaming_through_the_client_decodes_like_the_file(
    server: ReplayServer, client: AnthropicClient, capture: Capture
) -> None:
    decode = pytest.importorskip("convstore.adapters.anthropic.decode")
    from convstore.adapters.anthropic.context import RequestContext

    context = RequestContext.from_body(capture.request) if capture.request else None
    server.enqueue(Reply.of(capture, chunk_size=37))
    if capture.status != 200:
        with pytest.raises(ProviderHTTPError) as e:
            client.create_message(request_of(capture))
        via_client = decode.decode_message(e.value.body, request=context, status=e.value.status)
        direct = decode.decode_message(capture.body, request=context, status=capture.status)
    elif capture.streamed:
        with client.stream_message(request_of(capture)) as stream:
            via_client = list(decode.decode_stream(stream, request=context))
        direct = list(decode.decode_stream([capture.body], request=context))
    else:
        body = client.create_message(request_of(capture))
        via_client = decode.decode_message(body, request=context)
        direct = decode.decode_message(capture.body, request=context)
    assert via_client == direct
    assert len(direct) >= 2


def test_a_dropped_stream_decodes_to_an_abandoned_response(
    server: ReplayServer, client: AnthropicClient
) -> None:
    decode = pytest.importorskip("convstore.adapters.anthropic.decode")
    capture = ours("web_search_citations/1")
    half = len(capture.body) // 2
    server.enqueue(Reply.of(capture, cut_after=half))
    with client.stream_message(request_of(capture)) as stream:
        drafts = list(decode.decode_stream(stream))
        assert stream.interrupted is not None
    assert drafts == list(decode.decode_stream([capture.body[:half]]))
    assert type(drafts[-1]).__name__ == "ResponseEnded"
    assert drafts[-1].state == "abandoned"


def test_an_error_event_mid_stream_decodes_to_a_failed_response(
    server: ReplayServer, client: AnthropicClient
) -> None:
    decode = pytest.importorskip("convstore.adapters.anthropic.decode")
    server.enqueue(Reply.of(ours("errors/1")))
    with client.stream_message(MINIMAL) as stream:
        drafts = list(decode.decode_stream(stream))
    assert drafts[-1].state == "failed"
