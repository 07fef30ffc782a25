"""The provider-neutral HTTP transport against a real server on 127.0.0.1.

Retries (when, how many, how long), timeouts, content codings, the body cap against a
compression bomb, interrupted bodies, the error model, and secret scrubbing.
"""

from __future__ import annotations

import gzip
import logging
import time
import traceback
import tracemalloc
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from convstore.adapters.http.client import api_key_from_env
from convstore.adapters.http.errors import ProviderHTTPError, ProviderUnavailable, StreamInterrupted
from convstore.adapters.http.transport import (
    DEFAULT_MAX_BODY_BYTES,
    MAX_ERROR_BODY_BYTES,
    RetryPolicy,
    Timeouts,
    Transport,
)
from convstore.domain.errors import ConfigurationError, ConvstoreError, DecodeError
from tests.replay_server import ReplayServer, Reply, free_port, gzip_bomb

SECRET = "sk-test-0123456789abcdef-SECRET"
BODY = b"".join(b'event: n\ndata: {"n": %d, "text": "caf\xc3\xa9"}\n\n' % i for i in range(400))
FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.05, jitter=0.0)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    with ReplayServer() as running:
        yield running


class Sleeps:
    """A recording stand-in for time.sleep."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def transport(
    sleeps: Sleeps | None = None,
    *,
    retry: RetryPolicy = FAST,
    timeouts: Timeouts | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> Transport:
    return Transport(
        provider="testprovider",
        retry=retry,
        timeouts=timeouts or Timeouts(connect=2, read=5, write=5, pool=2),
        max_body_bytes=max_body_bytes,
        sleep=sleeps if sleeps is not None else time.sleep,
    )


HEADERS = {"x-api-key": SECRET, "content-type": "application/json"}


def fetch(t: Transport, url: str, **kwargs: object) -> tuple[bytes, StreamInterrupted | None]:
    with t.post_stream(url, headers=HEADERS, body=b"{}") as stream:
        body = b"".join(stream)
        return body, stream.interrupted


def texts_of(error: BaseException) -> str:
    """Everything a person or a log could see of an error, its chain included."""
    seen = "".join(traceback.format_exception(error))
    parts = [seen, repr(error), repr(vars(error))]
    link = error.__cause__ or error.__context__
    while link is not None:
        parts.append(repr(link) + repr(vars(link)))
        link = link.__cause__ or link.__context__
    return "\n".join(parts)


# --- policy ---------------------------------------------------------------------------


def test_backoff_doubles_up_to_the_max_delay_with_bounded_jitter() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0, jitter=0.25)
    for attempt, full in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (10, 3.0)]:
        for _ in range(50):
            assert full * 0.75 <= policy.delay(attempt) <= full
    assert RetryPolicy(base_delay=0.5, jitter=0).delay(2) == 1.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after": "0"}, 0.0),
        ({"retry-after": "3600"}, 10.0),  # capped by max_delay
        ({"retry-after-ms": "nan-ish", "retry-after": "1"}, 1.0),
    ],
)
def test_retry_after_headers_are_honoured_within_the_max_delay(
    headers: dict[str, str], expected: float
) -> None:
    policy = RetryPolicy(base_delay=7.0, max_delay=10.0, jitter=0)
    assert policy.delay(1, headers) == pytest.approx(expected)


def test_retry_after_as_an_http_date_and_garbage() -> None:
    policy = RetryPolicy(base_delay=7.0, max_delay=10.0, jitter=0)
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=4), usegmt=True)
    assert 2.0 <= policy.delay(1, {"retry-after": soon}) <= 4.0
    past = format_datetime(datetime.now(UTC) - timedelta(hours=1), usegmt=True)
    assert policy.delay(1, {"retry-after": past}) == 0.0
    assert policy.delay(1, {"retry-after": "soon, please"}) == 7.0  # unreadable: backoff
    assert policy.delay(1, {"retry-after": "-5"}) == 7.0


@pytest.mark.parametrize(
    ("status", "headers", "retryable"),
    [
        (429, {}, True),
        (408, {}, True),
        (409, {}, True),
        (500, {}, True),
        (503, {}, True),
        (529, {}, True),
        (400, {}, False),
        (401, {}, False),
        (404, {}, False),
        (500, {"x-should-retry": "false"}, False),
        (400, {"x-should-retry": "true"}, True),
        (400, {"x-should-retry": "maybe"}, False),
    ],
)
def test_which_answers_are_retried(status: int, headers: dict[str, str], retryable: bool) -> None:
    assert RetryPolicy().retryable(status, headers) is retryable


def test_policy_settings_are_checked() -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ConfigurationError):
        RetryPolicy(jitter=2)
    with pytest.raises(ConfigurationError):
        Transport(provider="x", max_body_bytes=0)


def test_api_keys_come_from_the_first_set_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "   ")
    monkeypatch.setenv("GOOGLE_API_KEY", " g-key \n")
    assert api_key_from_env("GEMINI_API_KEY", "GOOGLE_API_KEY") == "g-key"
    monkeypatch.delenv("GOOGLE_API_KEY")
    with pytest.raises(ConfigurationError, match="GEMINI_API_KEY or GOOGLE_API_KEY"):
        api_key_from_env("GEMINI_API_KEY", "GOOGLE_API_KEY")


def test_the_bomb_helper_is_valid_gzip() -> None:
    data = b"".join(gzip_bomb(4 * 1024 * 1024))
    assert len(data) < 8 * 1024
    assert gzip.decompress(data) == bytes(4 * 1024 * 1024)


# --- bodies ---------------------------------------------------------------------------


@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
def test_a_body_arrives_whole_whatever_its_framing(server: ReplayServer, framing: str) -> None:
    server.enqueue(Reply(body=BODY, framing=framing, chunk_size=97))  # type: ignore[arg-type]
    with transport() as t:
        assert fetch(t, server.url + "/v1/x") == (BODY, None)
    assert server.requests[0].headers["x-api-key"] == SECRET
    assert server.requests[0].headers["accept-encoding"] == "gzip, deflate"
    assert server.requests[0].body == b"{}"


def _deflate(data: bytes, wbits: int) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize(
    ("coding", "encoded"),
    [
        ("gzip", gzip.compress(BODY)),
        ("x-gzip", gzip.compress(BODY)),
        ("GZip", gzip.compress(BODY[:1000]) + gzip.compress(BODY[1000:])),  # two members
        ("deflate", _deflate(BODY, zlib.MAX_WBITS)),  # zlib-wrapped, as RFC 9110 says
        ("deflate", _deflate(BODY, -zlib.MAX_WBITS)),  # raw, as some servers send it
        ("deflate, gzip", gzip.compress(_deflate(BODY, zlib.MAX_WBITS))),
        ("identity", BODY),
    ],
)
def test_content_codings_are_undone(server: ReplayServer, coding: str, encoded: bytes) -> None:
    size = 101 if coding == "identity" else 7
    server.enqueue(Reply(body=encoded, headers={"content-encoding": coding}, chunk_size=size))
    with transport() as t:
        assert fetch(t, server.url) == (BODY, None)


def test_an_unsupported_coding_is_refused_without_retry(server: ReplayServer) -> None:
    server.enqueue(Reply(body=b"\x0b\x00\x80hello\x03", headers={"content-encoding": "br"}))
    with transport() as t, pytest.raises(DecodeError, match="content-encoding br"):
        fetch(t, server.url)
    assert len(server.requests) == 1


def test_a_corrupt_gzip_body_is_a_decode_error(server: ReplayServer) -> None:
    encoded = bytearray(gzip.compress(BODY))
    encoded[20:40] = b"\xff" * 20
    server.enqueue(Reply(body=bytes(encoded), headers={"content-encoding": "gzip"}))
    with transport() as t, pytest.raises(DecodeError, match="gzip-encoded body is corrupt"):
        fetch(t, server.url)


def test_a_gzip_body_cut_before_its_end_marker_is_interrupted(server: ReplayServer) -> None:
    encoded = gzip.compress(BODY)
    server.enqueue(
        Reply(
            body=encoded[: len(encoded) // 2], framing="close", headers={"content-encoding": "gzip"}
        )
    )
    with transport() as t:
        body, interrupted = fetch(t, server.url)
    assert BODY.startswith(body)
    assert isinstance(interrupted, StreamInterrupted)
    assert "end marker" in str(interrupted)


def test_a_gzip_bomb_stops_at_the_cap_with_bounded_memory(server: ReplayServer) -> None:
    """Scenario 22 (backend-independent: HTTP bodies): a gzip bomb stops at the cap with bounded
    memory."""
    server.enqueue(
        Reply(
            body=lambda: gzip_bomb(1024**3),  # ~1 MB on the wire, 1 GiB decoded
            headers={"content-encoding": "gzip"},
            chunk_size=16 * 1024,
            pause=0,
        )
    )
    received = 0
    with transport() as t, t.post_stream(server.url, headers=HEADERS, body=b"{}") as stream:
        tracemalloc.start()
        try:
            with pytest.raises(DecodeError, match="max_body_bytes") as caught:
                for piece in stream:
                    received += len(piece)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert received == stream.received == DEFAULT_MAX_BODY_BYTES
    assert peak < 4 * 1024 * 1024, f"peak traced memory {peak} bytes"
    assert "compression bomb" in str(caught.value)
    assert len(server.requests) == 1


def test_a_bomb_in_an_error_answer_stops_at_the_error_body_cap(server: ReplayServer) -> None:
    """Scenario 22 (backend-independent): also in an error answer."""
    server.enqueue(
        Reply(status=500, body=lambda: gzip_bomb(1024**3), headers={"content-encoding": "gzip"})
    )
    tracemalloc.start()
    try:
        with transport() as t, pytest.raises(DecodeError, match="max_body_bytes = 1048576"):
            fetch(t, server.url)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_ERROR_BODY_BYTES
    assert len(server.requests) == 1


def test_a_body_past_the_cap_is_stopped_at_the_cap(server: ReplayServer) -> None:
    server.enqueue(Reply(body=BODY))
    with transport(max_body_bytes=1000) as t:
        with t.post_stream(server.url, headers=HEADERS, body=b"") as stream:
            kept = bytearray()
            with pytest.raises(DecodeError, match="max_body_bytes = 1000"):
                for piece in stream:
                    kept += piece
        assert bytes(kept) == BODY[:1000]
        server.enqueue(Reply(body=BODY[:1000]))
        assert fetch(t, server.url) == (BODY[:1000], None)  # exactly at the cap is fine


@pytest.mark.parametrize("framing", ["chunked", "length"])
def test_a_dropped_connection_ends_the_stream_keeping_what_arrived(
    server: ReplayServer, framing: str
) -> None:
    half = len(BODY) // 2
    server.enqueue(Reply(body=BODY, framing=framing, cut_after=half))  # type: ignore[arg-type]
    with transport() as t, t.post_stream(server.url, headers=HEADERS, body=b"") as stream:
        body = b"".join(stream)
        assert body == BODY[:half]
        assert isinstance(stream.interrupted, StreamInterrupted)
        assert stream.interrupted.received == half
        assert f"{half} bytes of body arrived" in str(stream.interrupted)
    assert len(server.requests) == 1  # never retried once the body was handed over


def test_read_raises_when_the_connection_dropped(server: ReplayServer) -> None:
    server.enqueue(Reply(body=BODY, cut_after=100))
    with transport() as t, pytest.raises(StreamInterrupted):
        t.post(server.url, headers=HEADERS, body=b"")


def test_a_stalled_body_ends_with_a_read_timeout(server: ReplayServer) -> None:
    server.enqueue(Reply(body=BODY, stall_after=512, stall_for=1.5))
    with transport(timeouts=Timeouts(connect=2, read=0.3, write=2, pool=2)) as t:
        body, interrupted = fetch(t, server.url)
    assert BODY.startswith(body) and len(body) >= 256
    assert interrupted is not None and "read timeout" in str(interrupted)


def test_a_body_is_read_only_once(server: ReplayServer) -> None:
    server.enqueue(Reply(body=BODY))
    with transport() as t, t.post_stream(server.url, headers=HEADERS, body=b"") as stream:
        assert stream.read() == BODY
        with pytest.raises(RuntimeError):
            stream.read()


# --- retries --------------------------------------------------------------------------


def test_a_503_then_success_is_retried(server: ReplayServer) -> None:
    sleeps = Sleeps()
    server.enqueue(Reply(status=503, body=b"busy"), Reply(body=BODY))
    with transport(sleeps) as t, t.post_stream(server.url, headers=HEADERS, body=b"x") as stream:
        assert stream.read() == BODY
        assert stream.attempts == 2
    assert [r.body for r in server.requests] == [b"x", b"x"]
    assert sleeps.delays == [0.001]


def test_retries_are_bounded_and_the_last_error_body_is_returned(server: ReplayServer) -> None:
    sleeps = Sleeps()
    server.enqueue(*(Reply(status=500, body=b'{"n": %d}' % i) for i in range(5)))
    with transport(sleeps) as t, pytest.raises(ProviderHTTPError) as caught:
        fetch(t, server.url)
    assert len(server.requests) == 3
    assert caught.value.status == 500
    assert caught.value.body == b'{"n": 2}'
    assert caught.value.attempts == 3
    assert "after 3 attempts" in str(caught.value)
    assert sleeps.delays == [0.001, 0.002]  # doubling


def test_a_client_error_is_not_retried(server: ReplayServer) -> None:
    body = b'{"type":"error","error":{"type":"not_found_error","message":"no such model"}}'
    server.enqueue(Reply(status=404, body=body, headers={"request-id": "req_1"}))
    with transport() as t, pytest.raises(ProviderHTTPError) as caught:
        fetch(t, server.url + "/v1/messages?beta=true")
    error = caught.value
    assert (error.status, error.body, error.headers["request-id"]) == (404, body, "req_1")
    assert len(server.requests) == 1
    assert "HTTP 404 Not Found" in str(error)
    assert "not_found_error - no such model" in str(error)
    assert "beta=true" not in str(error)  # no query strings in messages
    assert isinstance(error, ConvstoreError)


def test_x_should_retry_overrides_the_status(server: ReplayServer) -> None:
    server.enqueue(
        Reply(status=500, headers={"x-should-retry": "false"}),
        Reply(status=400, headers={"x-should-retry": "true"}),
        Reply(body=BODY),
    )
    with transport() as t:
        with pytest.raises(ProviderHTTPError):
            fetch(t, server.url)
        assert fetch(t, server.url) == (BODY, None)
    assert len(server.requests) == 3


def test_retry_after_is_waited_for(server: ReplayServer) -> None:
    sleeps = Sleeps()
    server.enqueue(Reply(status=429, headers={"retry-after": "0.04"}), Reply(body=BODY))
    with transport(sleeps) as t:
        fetch(t, server.url)
    assert sleeps.delays == [pytest.approx(0.04)]


def test_an_error_body_cut_short_is_retried(server: ReplayServer) -> None:
    server.enqueue(Reply(status=503, body=b"x" * 2000, cut_after=10), Reply(body=BODY))
    with transport() as t:
        assert fetch(t, server.url) == (BODY, None)


def test_connection_refused_is_retried_then_unavailable(caplog: pytest.LogCaptureFixture) -> None:
    sleeps = Sleeps()
    url = f"http://127.0.0.1:{free_port()}/v1/messages?key={SECRET}"
    caplog.set_level(logging.DEBUG)
    with transport(sleeps) as t, pytest.raises(ProviderUnavailable) as caught:
        fetch(t, url)
    error = caught.value
    assert error.attempts == 3 and len(sleeps.delays) == 2
    assert "testprovider did not answer" in str(error)
    assert "the connection failed" in str(error)
    assert SECRET not in texts_of(error)
    assert SECRET not in caplog.text
    assert "retrying" in caplog.text


def test_a_slow_answer_head_is_a_read_timeout_then_unavailable(server: ReplayServer) -> None:
    server.enqueue(*(Reply(head_delay=1.0, body=BODY) for _ in range(2)))
    with (
        transport(
            retry=RetryPolicy(max_attempts=2, base_delay=0.001, jitter=0),
            timeouts=Timeouts(connect=2, read=0.2, write=2, pool=2),
        ) as t,
        pytest.raises(ProviderUnavailable, match=r"after 2 attempts: nothing received for 0.2s"),
    ):
        fetch(t, server.url)
    assert len(server.requests) == 2


def test_backoff_really_waits(server: ReplayServer) -> None:
    server.enqueue(Reply(status=502), Reply(status=502), Reply(body=BODY))
    policy = RetryPolicy(max_attempts=3, base_delay=0.05, max_delay=1, jitter=0)
    with transport(retry=policy) as t:
        fetch(t, server.url)
    first, second, third = (r.at for r in server.requests)
    assert second - first >= 0.05
    assert third - second >= 0.1


# --- secrets --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"x-api-key": SECRET},
        {"authorization": f"Bearer {SECRET}"},
        {"x-goog-api-key": SECRET},
        {"api-key": SECRET},
    ],
)
def test_keys_are_scrubbed_from_error_bodies_messages_and_logs(
    server: ReplayServer, headers: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario 18 (backend-independent: HTTP errors): keys are scrubbed from error bodies, messages
    and logs."""
    echo = b'{"error":{"type":"authentication_error","message":"bad key %s"}}' % SECRET.encode()
    server.enqueue(Reply(status=503, body=echo), Reply(status=401, body=echo))
    caplog.set_level(logging.DEBUG)
    with (
        transport() as t,
        pytest.raises(ProviderHTTPError) as caught,
        t.post_stream(server.url, headers=headers, body=b"{}"),
    ):
        pass
    error = caught.value
    assert server.requests[0].headers[next(iter(headers))] == headers[next(iter(headers))]
    assert SECRET.encode() not in error.body
    assert b"bad key [redacted]" in error.body
    assert "authentication_error - bad key [redacted]" in str(error)
    assert SECRET not in texts_of(error)
    assert SECRET not in caplog.text
    assert SECRET not in repr(t)


def test_keys_are_scrubbed_from_the_error_answer_headers(server: ReplayServer) -> None:
    server.enqueue(Reply(status=403, headers={"x-echo": f"key={SECRET}"}))
    with transport() as t, pytest.raises(ProviderHTTPError) as caught:
        fetch(t, server.url)
    assert caught.value.headers["x-echo"] == "key=[redacted]"
