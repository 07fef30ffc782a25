"""The Gemini client against a real HTTP server on 127.0.0.1, and the commands end to end.

Every capture (our examples, and `../shared/wire/gemini` when present) is served in small
chunks and arrives byte for byte; scripted failures (429 `RESOURCE_EXHAUSTED`, 503, a
dropped connection, a 400) behave as documented; the key is sent in `x-goog-api-key` and
appears nowhere else — not in the URL, an error or a log line. Then `convstore ingest
--provider google`, `replay --to google` (with `--dry-run`) and `ask --provider google`
run through `convstore.adapters.cli.main` on a temporary SQLite store.
"""

from __future__ import annotations

import json
import logging
import re
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convstore.adapters import cli
from convstore.adapters.google.client import GeminiClient
from convstore.adapters.google.context import RequestContext, model_from_path
from convstore.adapters.google.decode import decode_stream, detect_and_decode
from convstore.adapters.http.errors import ProviderHTTPError, ProviderUnavailable, StreamInterrupted
from convstore.adapters.http.transport import HTTPStream, RetryPolicy, Timeouts
from convstore.domain.errors import ConfigurationError, ConvstoreError
from convstore.domain.events import Event, ResponseEnded, ResponseStarted
from tests.replay_server import (
    EXAMPLES,
    WIRE,
    Capture,
    ReplayServer,
    Reply,
    captures,
    free_port,
)

KEY = "AIzaSyTEST-0123456789abcdefghijklmnopqrs"
FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.05, jitter=0.0)
QUICK = Timeouts(connect=2, read=5, write=5, pool=2)
MINIMAL = b'{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}'
MODEL = "gemini-2.5-flash"
EXHAUSTED = (
    b'{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).",'
    b'"status":"RESOURCE_EXHAUSTED"}}'
)
UNAVAILABLE = b'{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}'

OURS_DIR = EXAMPLES / "google"
WIRE_DIR = WIRE / "gemini"
OURS = captures(OURS_DIR, "examples")
THEIRS = captures(WIRE_DIR, "wire") if WIRE_DIR.is_dir() else []
_ABSENT = pytest.mark.skip(reason=f"{WIRE_DIR} is absent: no recorded traffic to replay")


def cases(found: list[Capture]) -> list[Any]:
    absent = [] if THEIRS else [pytest.param(None, id="wire", marks=_ABSENT)]
    return [pytest.param(c, id=c.name) for c in found] + absent


ALL = cases(OURS + THEIRS)
SUCCESSES = cases([c for c in OURS + THEIRS if c.status == 200])


def ours(name: str) -> Capture:
    return next(c for c in OURS if c.name == f"examples/{name}")


def folder_of(capture: Capture) -> tuple[Path, str]:
    corpus, folder, n = capture.name.split("/")
    return (OURS_DIR if corpus == "examples" else WIRE_DIR) / folder, n


def model_of(capture: Capture) -> str:
    folder, n = folder_of(capture)
    meta = json.loads((folder / f"{n}.meta.json").read_text())
    return model_from_path(str(meta.get("path", ""))) or MODEL


def shape(capture: Capture) -> str:
    start = capture.body.lstrip()
    return "array" if start[:1] == b"[" else "object" if start[:1] == b"{" else "sse"


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    monkeypatch.setenv("CONVSTORE_CONFIG", "/dev/null")


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    with ReplayServer() as running:
        yield running


@pytest.fixture
def client(server: ReplayServer) -> Iterator[GeminiClient]:
    with GeminiClient(f"{server.url}/v1beta", retry=FAST, timeouts=QUICK) as running:
        yield running


def request_of(capture: Capture) -> bytes:
    return capture.request or MINIMAL


def stream_all(client: GeminiClient, model: str, body: bytes) -> tuple[bytes, HTTPStream]:
    with client.stream_generate_content(model, body) as stream:
        return b"".join(stream), stream


def everything_visible(error: BaseException) -> str:
    """An error's message, repr, attributes and traceback, its chain included."""
    parts = ["".join(traceback.format_exception(error))]
    link: BaseException | None = error
    while link is not None:
        parts += [repr(link), repr(vars(link))]
        link = link.__cause__ or link.__context__
    return "\n".join(parts)


def assert_sent_as_asked(server: ReplayServer, model: str, body: bytes, *, stream: bool) -> None:
    seen = server.requests[-1]
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    assert (seen.method, seen.path) == ("POST", f"/v1beta/models/{model}:{method}")
    assert seen.headers["x-goog-api-key"] == KEY
    assert KEY not in seen.path and "key=" not in seen.path
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["accept"] == ("text/event-stream" if stream else "application/json")
    assert seen.body == body


# --- every capture, replayed -------------------------------------------------------------


@pytest.mark.parametrize("capture", SUCCESSES)
def test_every_capture_arrives_byte_for_byte(
    server: ReplayServer, client: GeminiClient, capture: Capture
) -> None:
    server.enqueue(Reply.of(capture, chunk_size=61))
    model = model_of(capture)
    if shape(capture) == "sse":
        body, stream = stream_all(client, model, request_of(capture))
        assert (stream.status, stream.attempts, stream.interrupted) == (200, 1, None)
    else:
        body = client.generate_content(model, request_of(capture))
    assert body == capture.body
    assert_sent_as_asked(server, model, request_of(capture), stream=shape(capture) == "sse")


@pytest.mark.parametrize("capture", ALL)
def test_streaming_through_the_client_decodes_like_the_file(
    server: ReplayServer, client: GeminiClient, capture: Capture
) -> None:
    context = RequestContext.from_body(capture.request) if capture.request else None
    retried = capture.status == 429 or capture.status >= 500  # answered alike each time
    for _ in range(FAST.max_attempts if retried else 1):
        server.enqueue(Reply.of(capture, chunk_size=37))
    model = model_of(capture)
    via_client: list[Event]
    if capture.status != 200:
        with pytest.raises(ProviderHTTPError) as e:
            client.generate_content(model, request_of(capture))
        assert e.value.status == capture.status
        assert KEY not in everything_visible(e.value)
        via_client = list(detect_and_decode(e.value.body, request=context, status=e.value.status))
    elif shape(capture) == "sse":
        with client.stream_generate_content(model, request_of(capture)) as stream:
            via_client = list(detect_and_decode(stream, request=context))
    else:
        body = client.generate_content(model, request_of(capture))
        via_client = list(detect_and_decode(body, request=context))
    direct = list(detect_and_decode(capture.body, request=context, status=capture.status))
    assert via_client == direct
    assert isinstance(direct[0], ResponseStarted) and isinstance(direct[-1], ResponseEnded)


def test_a_trailing_slash_and_a_tuned_model(server: ReplayServer) -> None:
    capture = ours("code_execution/1")
    server.enqueue(Reply.of(capture), Reply.of(capture))
    with GeminiClient(f"{server.url}/v1beta/", retry=FAST) as client:
        client.generate_content("models/gemini-2.5-pro", request_of(capture))
        client.generate_content("tunedModels/my-model-7", request_of(capture))
    first, second = (r.path for r in server.requests)
    assert first == "/v1beta/models/gemini-2.5-pro:generateContent"
    assert second == "/v1beta/tunedModels/my-model-7:generateContent"


def test_a_model_name_that_cannot_go_in_a_path_is_refused_before_sending(
    server: ReplayServer, client: GeminiClient
) -> None:
    for bad in ("gemini?key=x", "../admin", "gemini 2", ""):
        with pytest.raises(ConfigurationError, match="not a Gemini model name"):
            client.generate_content(bad, MINIMAL)
    assert server.requests == []
    with pytest.raises(ConfigurationError, match="query"):
        GeminiClient(f"{server.url}/v1beta?key={KEY}")


# --- retries -----------------------------------------------------------------------------


def test_a_429_is_retried_then_succeeds(
    server: ReplayServer, client: GeminiClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    capture = ours("thinking_function_roundtrip/1")
    server.enqueue(Reply(status=429, body=EXHAUSTED), Reply.of(capture))
    body, stream = stream_all(client, MODEL, request_of(capture))
    assert body == capture.body
    assert stream.attempts == 2
    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body
    assert all(r.headers["x-goog-api-key"] == KEY for r in server.requests)
    assert "answered HTTP 429; retrying" in caplog.text
    assert KEY not in caplog.text


def test_a_json_429_answering_an_sse_request_is_a_typed_error_and_a_failed_response(
    server: ReplayServer, client: GeminiClient
) -> None:
    """A quota error answering `streamGenerateContent?alt=sse` is a JSON body, not an event
    stream: once the retries run out it is a ProviderHTTPError whose body records a failed
    response with the error's status and message."""
    capture = ours("errors/5")
    assert capture.status == 429
    for _ in range(FAST.max_attempts):
        server.enqueue(Reply.of(capture))
    with pytest.raises(ProviderHTTPError) as e:
        stream_all(client, MODEL, request_of(capture))
    assert (e.value.status, e.value.body, e.value.attempts) == (429, capture.body, 3)
    assert all(r.path.endswith(":streamGenerateContent?alt=sse") for r in server.requests)
    drafts = list(detect_and_decode(e.value.body, status=e.value.status))
    ended = drafts[-1]
    assert isinstance(ended, ResponseEnded) and ended.state == "failed"
    assert ended.error is not None
    assert (ended.error.type, ended.error.status) == ("RESOURCE_EXHAUSTED", 429)
    assert ended.error.message.startswith("Resource has been exhausted")


def test_unavailable_until_the_attempts_run_out(server: ReplayServer) -> None:
    server.enqueue(*(Reply(status=503, body=UNAVAILABLE) for _ in range(3)))
    with GeminiClient(server.url, retry=FAST) as client, pytest.raises(ProviderHTTPError) as e:
        client.generate_content(MODEL, MINIMAL)
    assert (e.value.status, e.value.body, e.value.attempts) == (503, UNAVAILABLE, 3)
    assert "google answered HTTP 503" in str(e.value)
    assert "UNAVAILABLE - The model is overloaded." in str(e.value)
    assert len(server.requests) == 3


def test_no_server_means_unavailable() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1beta"
    with GeminiClient(url, retry=FAST) as client, pytest.raises(ProviderUnavailable) as e:
        client.generate_content(MODEL, MINIMAL)
    assert e.value.attempts == 3
    assert f"{url}/models/{MODEL}:generateContent" in str(e.value)
    assert KEY not in everything_visible(e.value)


# --- broken answers ----------------------------------------------------------------------


def test_a_dropped_stream_is_recorded_abandoned(server: ReplayServer, client: GeminiClient) -> None:
    capture = ours("grounding_search_stream/1")
    half = len(capture.body) // 2
    server.enqueue(Reply.of(capture, cut_after=half, chunk_size=100))
    context = RequestContext.from_body(request_of(capture))
    with client.stream_generate_content(MODEL, request_of(capture)) as stream:
        drafts = list(decode_stream(stream, request=context))
        assert isinstance(stream.interrupted, StreamInterrupted)
        assert stream.interrupted.received == half
    ended = drafts[-1]
    assert isinstance(ended, ResponseEnded) and ended.state == "abandoned"
    assert len(server.requests) == 1


def test_a_400_body_is_returned_as_data_and_records_a_failed_response(
    server: ReplayServer, client: GeminiClient
) -> None:
    capture = ours("errors/1")
    assert capture.status == 400
    server.enqueue(Reply.of(capture))
    with pytest.raises(ProviderHTTPError) as e:
        stream_all(client, MODEL, request_of(capture))
    error = e.value
    assert isinstance(error, ConvstoreError)
    assert (error.status, error.body, error.attempts) == (400, capture.body, 1)
    assert "HTTP 400 Bad Request" in str(error) and "INVALID_ARGUMENT" in str(error)
    drafts = list(detect_and_decode(error.body, status=error.status))
    ended = drafts[-1]
    assert isinstance(ended, ResponseEnded) and ended.state == "failed"
    assert ended.error is not None and ended.error.type == "INVALID_ARGUMENT"
    assert ended.error.status == 400
    assert len(server.requests) == 1


# --- the key -----------------------------------------------------------------------------


def test_the_key_comes_from_the_environment(
    server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture = ours("code_execution/1")
    server.enqueue(Reply.of(capture), Reply.of(capture))
    monkeypatch.setenv("GOOGLE_API_KEY", "the-other-key")
    with GeminiClient(server.url) as client:
        client.generate_content(MODEL, MINIMAL)  # GEMINI_API_KEY first
        assert KEY not in repr(client)
    monkeypatch.delenv("GEMINI_API_KEY")
    with GeminiClient(server.url) as client:
        client.generate_content(MODEL, MINIMAL)  # then GOOGLE_API_KEY
    assert [r.headers["x-goog-api-key"] for r in server.requests] == [KEY, "the-other-key"]
    monkeypatch.delenv("GOOGLE_API_KEY")
    with pytest.raises(ConfigurationError, match="GEMINI_API_KEY or GOOGLE_API_KEY"):
        GeminiClient(server.url)
    with pytest.raises(ConfigurationError, match="GEMINI_API_KEY"):
        GeminiClient(server.url, api_key="  ")


def test_the_key_never_leaves_the_request_header(
    server: ReplayServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever goes wrong, no URL, message, log line, error body or byte holds the key."""
    caplog.set_level(logging.DEBUG)
    echo = b'{"error":{"code":%d,"message":"API key %s not valid","status":"%s"}}'
    capture = ours("grounding_search_stream/1")
    server.enqueue(
        Reply(status=503, body=echo % (503, KEY.encode(), b"UNAVAILABLE")),
        Reply(status=400, body=echo % (400, KEY.encode(), b"INVALID_ARGUMENT")),
        Reply.of(capture, cut_after=700),
        Reply.of(capture, head_delay=0.5),
        Reply.of(capture, head_delay=0.5),
    )
    seen: list[Any] = []
    with GeminiClient(
        server.url,
        api_key=KEY,
        retry=RetryPolicy(max_attempts=2, base_delay=0.001, jitter=0),
        timeouts=Timeouts(connect=2, read=0.2, write=2, pool=2),
    ) as client:
        seen.append(repr(client))
        for _ in range(3):
            try:
                body, stream = stream_all(client, MODEL, MINIMAL)
                seen += [body, dict(stream.headers), stream.interrupted, vars(stream.interrupted)]
            except ConvstoreError as error:
                seen += [everything_visible(error), getattr(error, "body", b"")]
    assert len(server.requests) == 5
    assert all(r.headers["x-goog-api-key"] == KEY for r in server.requests)
    assert all(KEY not in r.path for r in server.requests)
    kinds = [type(item).__name__ for item in seen]
    assert "StreamInterrupted" in kinds
    assert any(isinstance(s, str) and "ProviderHTTPError" in s for s in seen)
    assert any(isinstance(s, str) and "ProviderUnavailable" in s for s in seen)
    assert any(isinstance(s, bytes) and b"API key [redacted] not valid" in s for s in seen)
    assert KEY not in repr(seen)
    assert KEY.encode() not in b"".join(s for s in seen if isinstance(s, bytes))
    assert KEY not in caplog.text


# --- the commands end to end -------------------------------------------------------------


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'convstore.db'}"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def example(folder: str, n: int) -> tuple[Path, Path]:
    base = OURS_DIR / folder
    [response] = base.glob(f"{n}.response.*")
    return base / f"{n}.request.json", response


@pytest.mark.parametrize(
    ("folder", "shape_", "code"),
    [
        ("grounding_search_stream", "sse", 0),
        ("code_execution", "object", 0),
        ("array_stream", "array", 0),
        ("errors", "object", 3),
    ],
)
def test_ingest_detects_sse_json_objects_and_arrays(
    capsys: pytest.CaptureFixture[str], url: str, folder: str, shape_: str, code: int
) -> None:
    request, response = example(folder, 1)
    assert shape(ours(f"{folder}/1")) == shape_
    exit_code, out, err = run(
        capsys,
        "--db",
        url,
        "ingest",
        "--provider",
        "google",
        "--request",
        str(request),
        str(response),
        "--json",
    )
    assert exit_code == code, err
    report = json.loads(out)
    [outcome] = report["responses"]
    assert outcome["ended"] == ("completed" if code == 0 else "failed")
    # Ingesting the same body again stores nothing new.
    again, out, _ = run(
        capsys,
        "--db",
        url,
        "ingest",
        "--provider",
        "google",
        "--conversation",
        report["conversation_id"],
        "--request",
        str(request),
        str(response),
        "--json",
    )
    assert again == 0
    assert json.loads(out)["responses"][0]["already_stored"] is True


def test_a_wire_capture_ingests_with_its_request(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    folder = WIRE_DIR / "llm-gemini_thought_signature_function_call"
    if not folder.is_dir():
        pytest.skip(f"no capture at {folder}")
    code, out, err = run(
        capsys,
        "--db",
        url,
        "ingest",
        "--provider",
        "google",
        "--request",
        str(folder / "0.request.json"),
        str(folder / "0.response.json"),
        "--json",
    )
    assert code == 0, err
    conversation = json.loads(out)["conversation_id"]
    code, out, err = run(
        capsys,
        "--db",
        url,
        "ingest",
        "--provider",
        "google",
        "--conversation",
        conversation,
        "--request",
        str(folder / "1.request.json"),
        str(folder / "1.response.json"),
        "--json",
    )
    assert code == 0, err
    code, out, err = run(capsys, "--db", url, "replay", conversation, "--to", "google")
    assert code == 0, err
    body = json.loads(out)
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user", "model"]
    literal = re.search(
        rb'"thoughtSignature"\s*:\s*("[^"]+")', (folder / "0.response.json").read_bytes()
    )
    assert literal is not None and literal.group(1).decode() in out


def ingest_sequence(capsys: pytest.CaptureFixture[str], url: str, folder: str) -> str:
    """Ingest every exchange of an example folder into one conversation; its id."""
    conversation: str | None = None
    for n in (1, 2, 3):
        request = OURS_DIR / folder / f"{n}.request.json"
        if not request.exists():
            break
        _, response = example(folder, n)
        more = ["--conversation", conversation] if conversation else []
        code, out, err = run(
            capsys,
            "--db",
            url,
            "ingest",
            "--provider",
            "google",
            *more,
            "--request",
            str(request),
            str(response),
            "--json",
        )
        assert code == 0, err
        conversation = json.loads(out)["conversation_id"]
    assert conversation is not None
    return conversation


def test_replay_to_google_prints_the_request_and_dry_run_the_losses(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    conversation = ingest_sequence(capsys, url, "thinking_function_roundtrip")
    code, out, err = run(
        capsys, "--db", url, "replay", conversation, "--to", "google", "--user", "Et demain ?"
    )
    assert code == 0, err
    body = json.loads(out)
    wanted = json.loads((OURS_DIR / "thinking_function_roundtrip" / "2.request.json").read_bytes())
    assert body["contents"][:3] == wanted["contents"]
    assert body["contents"][3]["role"] == "model"
    assert body["contents"][4] == {"role": "user", "parts": [{"text": "Et demain ?"}]}
    assert body["tools"] == wanted["tools"]
    first = (OURS_DIR / "thinking_function_roundtrip" / "1.response.sse").read_bytes()
    for literal in re.findall(rb'"thoughtSignature"\s*:\s*("[^"]+")', first):
        assert literal.decode() in out
    code, out, _ = run(
        capsys, "--db", url, "replay", conversation, "--to", "google", "--dry-run", "--json"
    )
    assert code == 0 and json.loads(out) == []
    # Bound to gemini-3-pro-preview: to another model the signatures are listed as losses.
    code, out, _ = run(
        capsys,
        "--db",
        url,
        "replay",
        conversation,
        "--to",
        "google",
        "--model",
        "gemini-2.5-flash",
        "--dry-run",
        "--json",
    )
    assert code == 0
    losses = json.loads(out)
    assert losses and {loss["kind"] for loss in losses} <= {"payload", "reasoning"}
    code, out, _ = run(
        capsys,
        "--db",
        url,
        "replay",
        conversation,
        "--to",
        "google",
        "--model",
        "gemini-2.5-flash",
        "--dry-run",
    )
    assert code == 0 and "thought signature left out" in out


def test_search_suggestions_are_a_display_loss(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    conversation = ingest_sequence(capsys, url, "grounding_search_stream")
    consent = ("--cfg", "providers.google.hosted_tools.google_search.enable=true")
    code, out, _ = run(
        capsys,
        "--db",
        url,
        "replay",
        conversation,
        "--to",
        "google",
        "--dry-run",
        "--json",
        *consent,
    )
    assert code == 0
    [loss] = json.loads(out)
    assert loss["kind"] == "display" and loss["event"] == "HostedActivity"
    code, out, _ = run(capsys, "--db", url, "replay", conversation, "--to", "google")
    assert code == 0 and "renderedContent" not in out and "searchEntryPoint" not in out


def test_an_anthropic_conversation_replays_to_google(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    folder = EXAMPLES / "anthropic" / "thinking_tool_roundtrip"
    code, out, err = run(
        capsys,
        "--db",
        url,
        "ingest",
        "--provider",
        "anthropic",
        "--request",
        str(folder / "1.request.json"),
        str(folder / "1.response.sse"),
        "--json",
    )
    assert code == 0, err
    conversation = json.loads(out)["conversation_id"]
    code, _, err = run(capsys, "--db", url, "replay", conversation, "--to", "google")
    assert code == 2 and "no model" in err
    model = ["--cfg", "providers.google.model=gemini-2.5-flash"]
    code, out, err = run(
        capsys, "--db", url, "replay", conversation, "--to", "google", *model, "--dry-run", "--json"
    )
    assert code == 0, err
    kinds = {loss["kind"] for loss in json.loads(out)}
    assert {"reasoning", "settings", "payload"} <= kinds
    code, out, err = run(capsys, "--db", url, "replay", conversation, "--to", "google", *model)
    assert code == 0, err
    body = json.loads(out)
    assert [c["role"] for c in body["contents"]] == ["user", "model"]
    assert "signature" not in out
    # A hosted tool the model cannot serve fails before anything is printed.
    code, out, err = run(
        capsys,
        "--db",
        url,
        "replay",
        conversation,
        "--to",
        "google",
        "--cfg",
        "providers.google.model=gemini-1.0-pro",
        "--cfg",
        "providers.google.hosted_tools.google_search.enable=true",
    )
    assert code == 2 and out == "" and "google_search" in err


def test_ask_google_records_the_streamed_answer(
    capsys: pytest.CaptureFixture[str], url: str, server: ReplayServer
) -> None:
    capture = ours("thinking_function_roundtrip/2")
    server.enqueue(
        Reply(status=429, body=EXHAUSTED, headers={"retry-after": "0"}), Reply.of(capture)
    )
    cfg = [
        "--cfg",
        f"providers.google.base_url={server.url}/v1beta",
        "--cfg",
        "providers.google.model=gemini-3-pro-preview",
    ]
    code, out, err = run(
        capsys, "--db", url, "ask", "--provider", "google", "Bonjour ?", *cfg, "--json"
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["response"]["ended"] == "completed"
    seen = server.requests[-1]
    assert seen.path == "/v1beta/models/gemini-3-pro-preview:streamGenerateContent?alt=sse"
    assert seen.headers["x-goog-api-key"] == KEY
    assert json.loads(seen.body)["contents"] == [{"role": "user", "parts": [{"text": "Bonjour ?"}]}]
    assert "model" not in json.loads(seen.body)
    # A 400 is recorded as a failed response (exit 3), the key nowhere in the output.
    server.enqueue(Reply.of(ours("errors/1")))
    code, out, err = run(
        capsys,
        "--db",
        url,
        "ask",
        "--provider",
        "google",
        "--conversation",
        report["conversation_id"],
        "Encore ?",
        *cfg,
        "--json",
    )
    assert code == 3, err
    assert json.loads(out)["response"]["ended"] == "failed"
    assert KEY not in out + err
    sent = json.loads(server.requests[-1].body)["contents"]
    assert [c["role"] for c in sent] == ["user", "model", "user"]
