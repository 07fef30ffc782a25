"""The OpenAI client against a real HTTP server on 127.0.0.1, and the commands end to end.

Every capture (our examples, and `../shared/wire/openai` when present) is streamed in small
chunks and arrives byte for byte; scripted failures (429, a dropped connection, an HTTP
400 error body) behave as documented; the key is sent as a bearer token and never appears
anywhere else. Then `convstore ingest --provider openai`, `replay --to openai` and `ask
--provider openai` run through `cli.main` on a temporary SQLite store.
"""

from __future__ import annotations

import json
import logging
import re
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from convstore.adapters import cli
from convstore.adapters.http.errors import ProviderHTTPError, ProviderUnavailable, StreamInterrupted
from convstore.adapters.http.transport import HTTPStream, RetryPolicy, Timeouts
from convstore.adapters.openai.client import OpenAIClient
from convstore.adapters.openai.context import RequestContext
from convstore.adapters.openai.decode import detect_and_decode
from convstore.adapters.wire.providers import adapter
from convstore.domain.conversation import parse_conversation_id
from convstore.domain.errors import ConfigurationError, ConvstoreError
from convstore.domain.events import Event, ResponseEnded
from convstore.storage import open_store
from tests.replay_server import EXAMPLES, WIRE, Capture, ReplayServer, Reply, captures, free_port

KEY = "sk-proj-TEST-0123456789abcdefghijklmnopqrstuv-KEY"
FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.05, jitter=0.0)
QUICK = Timeouts(connect=2, read=5, write=5, pool=2)
MINIMAL = b'{"model":"gpt-5.1","input":"Bonjour"}'
OURS_DIR = EXAMPLES / "openai"
WIRE_DIR = WIRE / "openai"
_FIELDS = msgspec.json.Decoder(dict[str, msgspec.Raw])


def responses_captures(root: Path, corpus: str) -> list[Capture]:
    """The `POST /v1/responses` exchanges (setup calls such as file uploads are left out)."""
    if not root.is_dir():
        return []
    found = []
    for capture in captures(root, corpus):
        _, folder, n = capture.name.split("/")
        meta = json.loads((root / folder / f"{n}.meta.json").read_text())
        if meta.get("path", "/v1/responses") == "/v1/responses":
            found.append(capture)
    return found


OURS = responses_captures(OURS_DIR, "examples")
THEIRS = responses_captures(WIRE_DIR, "wire")
_ABSENT = pytest.mark.skip(reason=f"{WIRE_DIR} is absent: no recorded traffic to replay")


def cases(found: list[Capture]) -> list[Any]:
    absent = [] if THEIRS else [pytest.param(None, id="wire", marks=_ABSENT)]
    return [pytest.param(c, id=c.name) for c in found] + absent


ALL = cases(OURS + THEIRS)
SUCCESSES = cases([c for c in OURS + THEIRS if c.status == 200])


def ours(name: str) -> Capture:
    return next(c for c in OURS if c.name == f"examples/{name}")


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    with ReplayServer() as running:
        yield running


@pytest.fixture
def client(server: ReplayServer) -> Iterator[OpenAIClient]:
    with OpenAIClient(server.url + "/v1", retry=FAST, timeouts=QUICK) as running:
        yield running


def request_of(capture: Capture) -> bytes:
    return capture.request or MINIMAL


def stream_all(client: OpenAIClient, body: bytes) -> tuple[bytes, HTTPStream]:
    with client.stream_response(body) as stream:
        return b"".join(stream), stream


def everything_visible(error: BaseException) -> str:
    parts = ["".join(traceback.format_exception(error))]
    link: BaseException | None = error
    while link is not None:
        parts += [repr(link), repr(vars(link))]
        link = link.__cause__ or link.__context__
    return "\n".join(parts)


def assert_sent_as_asked(server: ReplayServer, original: bytes, *, stream: bool) -> None:
    seen = server.requests[-1]
    assert (seen.method, seen.path) == ("POST", "/v1/responses")
    assert seen.headers["authorization"] == f"Bearer {KEY}"
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


def decode(body: bytes | Any, capture: Capture, status: int | None = None) -> list[Event]:
    context = RequestContext.from_body(capture.request) if capture.request else None
    return list(detect_and_decode(body, request=context, status=status))


# --- every capture, replayed -------------------------------------------------------------


@pytest.mark.parametrize("capture", SUCCESSES)
def test_every_capture_arrives_byte_for_byte(
    server: ReplayServer, client: OpenAIClient, capture: Capture
) -> None:
    server.enqueue(Reply.of(capture, chunk_size=61))
    if capture.streamed:
        body, stream = stream_all(client, request_of(capture))
        assert (stream.status, stream.attempts, stream.interrupted) == (200, 1, None)
        assert stream.headers["content-type"].startswith("text/event-stream")
    else:
        body = client.create_response(request_of(capture))
    assert body == capture.body
    assert_sent_as_asked(server, request_of(capture), stream=capture.streamed)


@pytest.mark.parametrize("capture", ALL)
def test_streaming_through_the_client_decodes_like_the_file(
    server: ReplayServer, client: OpenAIClient, capture: Capture
) -> None:
    server.enqueue(Reply.of(capture, chunk_size=37))
    if capture.status != 200:
        once = RetryPolicy(max_attempts=1)
        with (
            OpenAIClient(server.url + "/v1", retry=once) as direct_client,
            pytest.raises(ProviderHTTPError) as e,
        ):
            direct_client.create_response(request_of(capture))
        via_client = decode(e.value.body, capture, e.value.status)
        direct = decode(capture.body, capture, capture.status)
    elif capture.streamed:
        with client.stream_response(request_of(capture)) as stream:
            via_client = decode(stream, capture)
        direct = decode(capture.body, capture)
    else:
        via_client = decode(client.create_response(request_of(capture)), capture)
        direct = decode(capture.body, capture)
    assert via_client == direct
    assert len(direct) >= 2


def test_stream_true_is_inserted_keeping_every_byte(
    server: ReplayServer, client: OpenAIClient
) -> None:
    capture = ours("web_search_citations/1")
    original = request_of(capture).replace(b',"stream":true', b"")
    assert b'"stream"' not in original
    server.enqueue(Reply.of(capture))
    stream_all(client, original)
    assert server.requests[0].body == b'{"stream":true,' + original[1:]


def test_a_trailing_slash_and_the_default_url(server: ReplayServer) -> None:
    server.enqueue(Reply.of(ours("errors/4")))
    with OpenAIClient(server.url + "/v1/", retry=FAST) as client:
        stream_all(client, MINIMAL)
    assert server.requests[0].path == "/v1/responses"
    assert OpenAIClient().base_url == "https://api.openai.com/v1"


# --- retries and failures ----------------------------------------------------------------


def test_a_429_is_retried_after_its_retry_after(
    server: ReplayServer, client: OpenAIClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    capture = ours("reasoning_function_roundtrip/1")
    limited = ours("errors/3")
    assert limited.status == 429
    server.enqueue(
        Reply(status=429, body=limited.body, headers={"retry-after-ms": "1"}), Reply.of(capture)
    )
    body, stream = stream_all(client, request_of(capture))
    assert body == capture.body
    assert stream.attempts == 2
    assert server.requests[0].body == server.requests[1].body
    assert KEY not in caplog.text


def test_a_dropped_stream_decodes_to_an_abandoned_response(
    server: ReplayServer, client: OpenAIClient
) -> None:
    capture = ours("web_search_citations/1")
    half = len(capture.body) // 2
    server.enqueue(Reply.of(capture, cut_after=half, chunk_size=100))
    with client.stream_response(request_of(capture)) as stream:
        drafts = decode(stream, capture)
        assert isinstance(stream.interrupted, StreamInterrupted)
        assert stream.interrupted.received == half
    ended = drafts[-1]
    assert isinstance(ended, ResponseEnded) and ended.state == "abandoned"
    assert len(server.requests) == 1  # never retried once the body began


def test_an_http_400_error_body_is_recorded_as_a_failed_response(
    server: ReplayServer, client: OpenAIClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    body = (
        b'{"error":{"message":"Tool choice \'web_search\' not found in \'tools\' parameter.",'
        b'"type":"invalid_request_error","param":"tool_choice","code":null}}'
    )
    server.enqueue(Reply(status=400, body=body))
    with pytest.raises(ProviderHTTPError) as e:
        stream_all(client, MINIMAL)
    error = e.value
    assert isinstance(error, ConvstoreError)
    assert (error.status, error.body, error.attempts) == (400, body, 1)
    drafts = list(adapter("openai").decode(error.body, MINIMAL, error.status))
    ended = drafts[-1]
    assert isinstance(ended, ResponseEnded) and ended.state == "failed"
    assert ended.error is not None
    assert (ended.error.type, ended.error.status) == ("invalid_request_error", 400)
    assert KEY not in everything_visible(error) and KEY not in caplog.text


def test_no_server_means_unavailable() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with OpenAIClient(url, retry=FAST) as client, pytest.raises(ProviderUnavailable) as e:
        client.create_response(MINIMAL)
    assert e.value.attempts == 3
    assert KEY not in everything_visible(e.value)


# --- the key -----------------------------------------------------------------------------


def test_the_key_comes_from_the_environment(
    server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.enqueue(Reply.of(ours("errors/4")))
    with OpenAIClient(server.url + "/v1") as client:
        stream_all(client, MINIMAL)
        assert KEY not in repr(client)
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIClient(server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "  ")
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIClient(server.url)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIClient(server.url, api_key="")


def test_the_key_never_leaves_the_request_headers(
    server: ReplayServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    echo = b'{"error":{"type":"invalid_request_error","message":"bad key %s"}}'
    capture = ours("web_search_citations/1")
    server.enqueue(
        Reply(status=503, body=echo % KEY.encode()),
        Reply(status=401, body=echo % KEY.encode()),
        Reply.of(capture, cut_after=1000),
    )
    seen: list[Any] = []
    with OpenAIClient(
        server.url + "/v1", retry=RetryPolicy(max_attempts=2, base_delay=0.001, jitter=0)
    ) as client:
        for _ in range(2):
            try:
                body, stream = stream_all(client, MINIMAL)
                seen += [body, dict(stream.headers), stream.interrupted, vars(stream.interrupted)]
            except ConvstoreError as error:
                seen += [everything_visible(error), getattr(error, "body", b"")]
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in server.requests)
    assert any(isinstance(s, bytes) and b"bad key [redacted]" in s for s in seen)
    assert KEY not in repr(seen) and KEY not in caplog.text


def test_the_adapter_sends_to_the_configured_url(server: ReplayServer) -> None:
    capture = ours("errors/4")
    server.enqueue(Reply.of(capture))
    openai = adapter("openai")
    config = {"providers": {"openai": {"base_url": server.url + "/v1", "model": "gpt-5.1"}}}
    request = openai.need_encode()([], config, None, "Bonjour")
    with openai.need_send()(request, config) as stream:
        received = b"".join(stream)
    assert received == capture.body
    sent = json.loads(server.requests[0].body)
    assert sent["stream"] is True and sent["store"] is False
    assert sent["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "Bonjour"}]}
    ]


# --- the command line end to end ---------------------------------------------------------

OPAQUE = re.compile(rb'"(encrypted_content|id|call_id)"\s*:\s*("(?:[^"\\]|\\.)*")')


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'convstore.db'}"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code, out, err = run(capsys, *argv)
    assert out, err
    return code, json.loads(out)


def item_literals(response: Path) -> list[bytes]:
    raw = response.read_bytes()
    lines = (
        [line[5:] for line in raw.splitlines() if b'"response.output_item.done"' in line]
        if response.suffix == ".sse"
        else [raw]
    )
    return [
        m.group(2)
        for line in lines
        for m in OPAQUE.finditer(line)
        if not m.group(2).startswith(b'"resp_')
    ]


def test_ingest_then_replay_to_openai(capsys: pytest.CaptureFixture[str], url: str) -> None:
    folder = OURS_DIR / "reasoning_function_roundtrip"
    code, first = run_json(
        capsys,
        "--db",
        url,
        "ingest",
        "--provider",
        "openai",
        "--request",
        str(folder / "1.request.json"),
        str(folder / "1.response.sse"),
        "--json",
    )
    assert code == 0
    conversation = first["conversation_id"]
    [response] = first["responses"]
    assert set(response) >= {"response_id", "ended", "events", "already_stored"}
    assert response["ended"] == "completed" and response["already_stored"] is False
    assert response["response_id"].startswith("resp_")
    code, second = run_json(
        capsys,
        "ingest",
        "--db",
        url,
        "--provider",
        "openai",
        "--conversation",
        conversation,
        "--request",
        str(folder / "2.request.json"),
        str(folder / "2.response.json"),
        "--json",
    )
    assert code == 0 and second["conversation_id"] == conversation
    assert second["responses"][0]["ended"] == "completed"
    with open_store(url) as store:
        events = list(store.service.events(parse_conversation_id(conversation)))
    kinds = [type(e).__name__ for e in events]
    assert kinds.count("ToolCallResponded") == 1  # the request's function_call_output
    assert kinds.count("ResponseStarted") == 2  # both from the provider: none from history

    # Ingesting a response again reports it stored (and records no history twice).
    code, again = run_json(
        capsys,
        "ingest",
        "--db",
        url,
        "--provider",
        "openai",
        "--conversation",
        conversation,
        "--request",
        str(folder / "2.request.json"),
        str(folder / "2.response.json"),
        "--json",
    )
    assert code == 0 and again["responses"][0]["already_stored"] is True

    code, out, _ = run(capsys, "replay", conversation, "--db", url, "--to", "openai")
    assert code == 0
    raw = out.strip().encode()
    body = json.loads(raw)
    assert body["model"] == "gpt-5.1" and body["store"] is False
    assert body["include"] == ["reasoning.encrypted_content"]
    assert [i.get("type", "message") for i in body["input"]] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "reasoning",
        "message",
    ]
    for response_file in (folder / "1.response.sse", folder / "2.response.json"):
        for literal in item_literals(response_file):
            assert literal in raw
    code, losses = run_json(
        capsys, "replay", conversation, "--db", url, "--to", "openai", "--dry-run", "--json"
    )
    assert (code, losses) == (0, [])
    code, out, _ = run(capsys, "replay", conversation, "--db", url, "--to", "openai", "--dry-run")
    assert code == 0 and "nothing is left out replaying to openai" in out
    # Another model: the reasoning items are left out, and the report says why.
    code, losses = run_json(
        capsys,
        "replay",
        conversation,
        "--db",
        url,
        "--to",
        "openai",
        "--model",
        "gpt-4.1",
        "--dry-run",
        "--json",
    )
    assert code == 0
    assert {loss["kind"] for loss in losses} >= {"reasoning", "payload", "settings"}
    assert all(set(loss) == {"version", "event", "kind", "reason"} for loss in losses)


def test_an_anthropic_conversation_replays_to_openai(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    folder = EXAMPLES / "anthropic" / "thinking_tool_roundtrip"
    code, report = run_json(
        capsys,
        "ingest",
        "--db",
        url,
        "--provider",
        "anthropic",
        "--request",
        str(folder / "1.request.json"),
        str(next(folder.glob("1.response.*"))),
        "--json",
    )
    assert code == 0
    conversation = report["conversation_id"]
    code, out, err = run(capsys, "replay", conversation, "--db", url, "--to", "openai")
    assert code == 2 and "no model" in err
    code, out, _ = run(
        capsys, "replay", conversation, "--db", url, "--to", "openai", "--model", "gpt-5.1"
    )
    assert code == 0
    body = json.loads(out)
    assert body["model"] == "gpt-5.1"
    assert [i.get("type", "message") for i in body["input"]][-1] == "function_call"
    code, losses = run_json(
        capsys,
        "replay",
        conversation,
        "--db",
        url,
        "--to",
        "openai",
        "--cfg",
        "providers.openai.model=gpt-5.1",
        "--dry-run",
        "--json",
    )
    assert code == 0
    # (its tool call has no result yet: listed, as the provider refuses the request)
    kinds = {loss["kind"] for loss in losses}
    assert kinds == {"settings", "reasoning", "payload", "unanswered_call"}
    code, out, _ = run(
        capsys,
        "replay",
        conversation,
        "--db",
        url,
        "--to",
        "openai",
        "--model",
        "gpt-5.1",
        "--dry-run",
    )
    assert code == 0 and "reasoning" in out


def test_ingest_a_failed_stream_exits_3(capsys: pytest.CaptureFixture[str], url: str) -> None:
    folder = OURS_DIR / "errors"
    code, report = run_json(
        capsys,
        "--db",
        url,
        "ingest",
        "--provider",
        "openai",
        "--request",
        str(folder / "1.request.json"),
        str(folder / "1.response.sse"),
        "--json",
    )
    assert code == 3
    assert report["responses"][0]["ended"] == "failed"


def test_ask_records_the_streamed_answer_and_an_http_error(
    capsys: pytest.CaptureFixture[str], url: str, server: ReplayServer
) -> None:
    server.enqueue(
        Reply.of(ours("errors/4")),
        Reply(status=400, body=b'{"error":{"type":"invalid_request_error","message":"no"}}'),
    )
    cfg = [
        "--cfg",
        f"providers.openai.base_url={server.url}/v1",
        "--cfg",
        "providers.openai.model=gpt-5.1",
    ]
    code, report = run_json(
        capsys,
        "--db",
        url,
        "ask",
        "Montre-moi un hologramme",
        "--provider",
        "openai",
        *cfg,
        "--json",
    )
    assert code == 0 and report["response"]["ended"] == "completed"
    conversation = report["conversation_id"]
    sent = json.loads(server.requests[0].body)
    assert sent["stream"] is True and sent["model"] == "gpt-5.1" and sent["store"] is False
    assert sent["input"][-1]["content"][0]["text"] == "Montre-moi un hologramme"
    code, out, err = run(
        capsys,
        "--db",
        url,
        "ask",
        "Et encore ?",
        "--conversation",
        conversation,
        "--provider",
        "openai",
        *cfg,
        "--json",
    )
    assert code == 3, err
    assert json.loads(out)["response"]["ended"] == "failed"
    follow = json.loads(server.requests[1].body)
    # The first answer's message item is replayed before the new question.
    assert [i.get("type", "message") for i in follow["input"]][-2:] == ["message", "message"]
    assert KEY not in out and KEY not in err
