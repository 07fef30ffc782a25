"""`ingest`, `replay`, `repair` and `ask` end to end through the command line.

Each command runs through `cli.main([...])` on a fresh SQLite store (a few also in a
fresh `python -m` process) and is judged by its exit status, its `--json` output and what
the store holds afterwards: exit 0, 3 (what arrived committed), 2 (nothing written for the
bad file), 4 (nothing written); re-ingestion writes nothing; replay never writes; `ask`
talks to a real HTTP server on 127.0.0.1 and never stores the key. Every capture folder
(our examples, and `../shared/wire` when it exists) goes through `ingest` with each
exchange's request, and exits as the capture itself dictates.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convstore.adapters import cli
from convstore.adapters.wire.names import PROVIDERS
from convstore.adapters.wire.providers import adapter
from convstore.domain import (
    AssistantText,
    Event,
    HostedActivity,
    ResponseEnded,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    UserMessage,
    parse_conversation_id,
)
from convstore.domain.errors import ConfigurationError
from convstore.storage import open_store
from tests.replay_server import ReplayServer, Reply

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "anthropic"
WIRE = Path(__file__).resolve().parents[2] / "shared" / "wire"
KEY = "sk-ant-api03-CLI-RECORDING-0123456789abcdef-KEY"
QUESTION = "Should I pack an umbrella for Zürich tomorrow?"
FOLLOW_UP = "Thanks! And the day after tomorrow?"
MODEL = "claude-sonnet-4-5"
SWITCH = {"openai": "gpt-5.1", "google": "gemini-2.5-flash", "openai-chat": "gpt-4.1"}
"""A model for a request to another provider (one is needed to build it)."""
RESPONSE_KEYS = {"response_id", "ended", "events", "already_stored", "attempt"}
BATCH_KEYS = {"captures", "summary"}
"""What `ingest --json` gives beside a single capture's own keys (one item per capture)."""


def available(name: str) -> bool:
    try:
        adapter(name)
    except ConfigurationError:
        return False
    return True


OTHERS = [name for name in PROVIDERS if name != "anthropic" and available(name)]


def example(name: str) -> Path:
    """A file of `examples/anthropic`, e.g. `errors/1.response.sse`."""
    return EXAMPLES / name


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("CONVSTORE_URL", "CONVSTORE_CONFIG", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # no user config file


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'convstore.db'}"


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def ingest(
    capsys: pytest.CaptureFixture[str], url: str, *args: str | Path
) -> tuple[int, dict[str, Any], str]:
    """`convstore ingest --provider anthropic ARGS --json`: (exit status, output, stderr)."""
    code, out, err = run(capsys, "--db", url, "ingest", "--provider", "anthropic", *args, "--json")
    data: dict[str, Any] = json.loads(out)
    return code, data, err


def exchange(folder: str, number: int) -> tuple[Path, Path]:
    """(request, response) of exchange `number` of an example folder."""
    [response] = EXAMPLES.glob(f"{folder}/{number}.response.*")
    return EXAMPLES / folder / f"{number}.request.json", response


def start(capsys: pytest.CaptureFixture[str], url: str, folder: str, upto: int = 1) -> str:
    """Ingest exchanges 1..upto of an example folder (each with its request); the id."""
    request, response = exchange(folder, 1)
    code, data, err = ingest(capsys, url, "--request", request, response)
    assert (code, err) == (0, ""), err
    conversation = str(data["conversation_id"])
    for number in range(2, upto + 1):
        request, response = exchange(folder, number)
        code, data, err = ingest(
            capsys, url, "--conversation", conversation, "--request", request, response
        )
        assert (code, err) == (0, ""), err
    return conversation


def versions(url: str) -> dict[str, int]:
    """Every conversation and its event count (its newest version)."""
    with open_store(url) as store:
        return {str(s.id): s.events for s in store.service.list(limit=100_000)}


def stored(url: str, conversation: str) -> list[Event]:
    with open_store(url) as store:
        return list(store.service.events(parse_conversation_id(conversation)))


def sse_documents(body: bytes) -> list[Any]:
    """The JSON `data` of every SSE event (multi-line data joined)."""
    documents = []
    for event in re.split(r"\r?\n\r?\n", body.decode()):
        lines = [line[5:].removeprefix(" ") for line in event.splitlines() if line[:5] == "data:"]
        data = "\n".join(lines).strip()
        if data and data != "[DONE]":
            documents.append(json.loads(data))
    return documents


def message_id(response: Path) -> str:
    """The message id of an Anthropic capture (SSE or JSON)."""
    body = response.read_bytes()
    if response.suffix == ".sse":
        return str(sse_documents(body)[0]["message"]["id"])
    return str(json.loads(body)["id"])


def deltas(response: Path, kind: str, field: str) -> list[str]:
    """Every `kind` delta's `field` of an Anthropic stream, in order."""
    return [
        d["delta"][field]
        for d in sse_documents(response.read_bytes())
        if d["type"] == "content_block_delta" and d["delta"]["type"] == kind
    ]


# --- ingest: exit 0 and the --json contract ----------------------------------------------------


def test_ingest_json_contract(capsys: pytest.CaptureFixture[str], url: str) -> None:
    request, response = exchange("thinking_tool_roundtrip", 1)
    code, data, err = ingest(capsys, url, "--request", request, response)
    assert (code, err) == (0, "")
    assert set(data) == {"conversation_id", "responses"} | BATCH_KEYS
    [outcome] = data["responses"]
    assert set(outcome) == RESPONSE_KEYS
    assert outcome["response_id"] == message_id(response)
    assert (outcome["ended"], outcome["already_stored"]) == ("completed", False)
    events = stored(url, data["conversation_id"])
    assert versions(url) == {data["conversation_id"]: len(events)}
    # The request's user message is recorded before the response, which the count covers.
    [user] = [e for e in events if isinstance(e, UserMessage)]
    assert user.blocks == (QUESTION,)
    [begin] = [i for i, e in enumerate(events) if isinstance(e, ResponseStarted)]
    assert events.index(user) < begin
    assert 0 < outcome["events"] <= len(events) - begin
    ended = [e for e in events if isinstance(e, ResponseEnded)]
    assert [(e.response_id, e.state, e.finish_reason) for e in ended] == [
        (outcome["response_id"], "completed", "tool_use")
    ]


def run_process(url: str, *argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "convstore.adapters.cli", "--db", url, *map(str, argv)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_ingest_in_a_fresh_process(url: str) -> None:
    request, response = exchange("web_search_citations", 1)
    done = run_process(
        url, "ingest", "--provider", "anthropic", "--request", request, response, "--json"
    )
    assert (done.returncode, done.stderr) == (0, "")
    data = json.loads(done.stdout)
    assert set(data) == {"conversation_id", "responses"} | BATCH_KEYS
    assert [set(r) for r in data["responses"]] == [RESPONSE_KEYS]
    assert data["responses"][0]["response_id"] == message_id(response)
    request, response = exchange("errors", 1)
    args = ("ingest", "--provider", "anthropic", "--request", request, response, "--json")
    done = run_process(url, *args)
    assert done.returncode == 3, done.stderr
    [outcome] = json.loads(done.stdout)["responses"]
    assert (outcome["ended"], outcome["already_stored"]) == ("failed", False)
    assert len(versions(url)) == 2


def test_exchanges_continue_one_conversation(capsys: pytest.CaptureFixture[str], url: str) -> None:
    conversation = start(capsys, url, "thinking_tool_roundtrip", upto=2)
    events = stored(url, conversation)
    [call] = [e for e in events if isinstance(e, ToolCallRequested)]
    [result] = [e for e in events if isinstance(e, ToolCallResponded)]
    assert (result.call_id, result.synthetic) == (call.call_id, False)
    ended = [(e.response_id, e.state) for e in events if isinstance(e, ResponseEnded)]
    assert ended == [
        (message_id(exchange("thinking_tool_roundtrip", n)[1]), "completed") for n in (1, 2)
    ]
    assert events.index(call) < events.index(result)
    # The history 2.request.json carries is the conversation: replay rebuilds it exactly.
    code, out, _ = run(capsys, "--db", url, "replay", conversation, "--to", "anthropic")
    assert code == 0
    sent = json.loads(exchange("thinking_tool_roundtrip", 2)[0].read_bytes())["messages"]
    assert json.loads(out)["messages"][: len(sent)] == sent


def test_reingesting_the_same_file_writes_nothing(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    """Scenario 3 (SQLite through the command line; both backends: test_reliability_ingest.py):
    nothing added, `already stored` reported."""
    conversation = start(capsys, url, "web_search_citations")
    before = versions(url)
    request, response = exchange("web_search_citations", 1)
    again = ("--conversation", conversation, "--request", request, response)
    code, data, err = ingest(capsys, url, *again)
    assert (code, err) == (0, "")
    assert data["responses"] == [
        {
            "response_id": message_id(response),
            "ended": "completed",
            "events": 0,
            "already_stored": True,
            "attempt": 1,
        }
    ]
    code, out, _ = run(capsys, "--db", url, "ingest", "--provider", "anthropic", *again)
    assert code == 0 and "already stored" in out
    assert versions(url) == before


def test_the_same_response_non_streamed_is_already_stored(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    """Scenario 3: the same response in its other form is already stored."""
    conversation = start(capsys, url, "web_search_citations")
    before = versions(url)
    request, response = exchange("web_search_citations", 2)
    code, data, err = ingest(
        capsys, url, "--conversation", conversation, "--request", request, response
    )
    assert (code, err) == (0, "")
    assert [r["already_stored"] for r in data["responses"]] == [True]
    assert versions(url) == before


# --- exit 4: a stored response id with different content ---------------------------------------


def test_a_changed_response_exits_4_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    """Scenario 3: a stored response id with different content is a conflict (exit 4), nothing
    written."""
    conversation = start(capsys, url, "web_search_citations")
    before = versions(url)
    request, response = exchange("web_search_citations", 1)
    body = response.read_bytes()
    changed = body.replace(b'" information about matcha caf"', b'" information about tea caf"')
    assert len(changed) == len(body) - 3  # one text delta changed
    copy = tmp_path / "changed.response.sse"
    copy.write_bytes(changed)
    code, data, err = ingest(
        capsys, url, "--conversation", conversation, "--request", request, copy
    )
    assert code == 4
    assert data["responses"] == []
    assert "different content" in err and "Traceback" not in err
    assert versions(url) == before


# --- exit 3: what arrived is committed --------------------------------------------------------


def test_an_error_event_mid_stream_exits_3_and_keeps_what_arrived(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    """Scenario 14 through the command line (SQLite; both backends: test_reliability_ingest.py)."""
    request, response = exchange("errors", 1)
    code, data, _ = ingest(capsys, url, "--request", request, response)
    assert code == 3
    [outcome] = data["responses"]
    assert (outcome["ended"], outcome["already_stored"]) == ("failed", False)
    events = stored(url, data["conversation_id"])
    [text] = [e for e in events if isinstance(e, AssistantText)]
    assert text.text == "".join(deltas(response, "text_delta", "text"))
    assert text.attributions_complete is False
    [end] = [e for e in events if isinstance(e, ResponseEnded)]
    assert (end.state, end.finish_reason) == ("failed", "error")
    assert end.error is not None and end.error.type == "overloaded_error"


def test_a_stream_cut_short_exits_3_abandoned(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    request, response = exchange("web_search_citations", 1)
    body = response.read_bytes()
    # Cut right after the third block closes: a text, the search call, the search result.
    stops = [m.end() for m in re.finditer(rb"content_block_stop[^\n]*\n\n", body)]
    cut = tmp_path / "cut.response.sse"
    cut.write_bytes(body[: stops[2]])
    code, data, _ = ingest(capsys, url, "--request", request, cut)
    assert code == 3
    assert [r["ended"] for r in data["responses"]] == ["abandoned"]
    events = stored(url, data["conversation_id"])
    begin = next(i for i, e in enumerate(events) if isinstance(e, ResponseStarted))
    content = [type(e).__name__ for e in events[begin + 1 :] if not isinstance(e, ResponseEnded)]
    assert content[:3] == ["AssistantText", "HostedActivity", "HostedActivity"]
    assert [e.state for e in events if isinstance(e, HostedActivity)] == ["started", "completed"]
    [end] = [e for e in events if isinstance(e, ResponseEnded)]
    assert end.state == "abandoned"


def test_the_configured_event_limit_ends_the_response_failed_too_large(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    request, response = exchange("web_search_citations", 1)
    limit = "limits.max_event_bytes=4000"  # the encrypted search results are larger
    code, data, _ = ingest(capsys, url, "--cfg", limit, "--request", request, response)
    assert code == 3
    assert [r["ended"] for r in data["responses"]] == ["failed"]
    events = stored(url, data["conversation_id"])
    [end] = [e for e in events if isinstance(e, ResponseEnded)]
    assert (end.state, end.finish_reason) == ("failed", "error")
    assert end.error is not None and end.error.type == "too_large"
    assert any(isinstance(e, AssistantText) for e in events)  # what came before is kept
    code, _, err = run(
        capsys,
        "--db",
        url,
        "ingest",
        "--provider",
        "anthropic",
        "--cfg",
        "limits.max_event_bytes=0",
        response,
    )
    assert code == 2 and "limits.max_event_bytes must be a positive number" in err


def test_an_http_error_body_exits_3_failed(capsys: pytest.CaptureFixture[str], url: str) -> None:
    request, response = exchange("errors", 2)
    code, data, _ = ingest(capsys, url, "--request", request, response)
    assert code == 3
    assert [r["ended"] for r in data["responses"]] == ["failed"]
    [end] = [e for e in stored(url, data["conversation_id"]) if isinstance(e, ResponseEnded)]
    assert end.error is not None and end.error.type == "invalid_request_error"


# --- exit 2: nothing written for a file that holds no response ---------------------------------

NOT_RESPONSES = {
    "text": b"hello, this is not JSON\n",
    "empty": b"",
    "object": b'{"foo": 1}',
    "request": example("web_search_citations/1.request.json").read_bytes(),
    "cut before message_start": b'event: message_start\ndata: {"type":"message_start"',
}


@pytest.mark.parametrize("content", NOT_RESPONSES.values(), ids=NOT_RESPONSES.keys())
def test_a_file_holding_no_response_exits_2_and_starts_nothing(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path, content: bytes
) -> None:
    bad = tmp_path / "bad.body"
    bad.write_bytes(content)
    code, data, err = ingest(capsys, url, bad)
    assert code == 2
    assert data["conversation_id"] is None and data["responses"] == []
    assert set(data) == {"conversation_id", "responses", "error", "error_detail"} | BATCH_KEYS
    assert data["error_detail"] == {"type": "DecodeError", "message": data["error"]}
    assert err.startswith("convstore: error: ") and str(bad) in err
    assert len(err.splitlines()) == 1
    assert versions(url) == {}  # no conversation left behind


def test_a_bad_later_file_keeps_the_earlier_ones(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    """Loose files are captures of their own: the bad one fails alone (exit 2), the good
    one before it is recorded in its own conversation."""
    bad = tmp_path / "bad.body"
    bad.write_bytes(b"not a response")
    good = exchange("thinking_tool_roundtrip", 1)[1]
    code, data, err = ingest(capsys, url, good, bad)
    assert code == 2
    first, second = data["captures"]
    assert [(r["response_id"], r["ended"]) for r in first["responses"]] == [
        (message_id(good), "completed")
    ]
    assert (second["path"], second["conversation_id"], second["responses"]) == (str(bad), None, [])
    assert second["error_detail"]["type"] == "DecodeError" and str(bad) in err
    events = stored(url, first["conversation_id"])
    assert versions(url) == {first["conversation_id"]: len(events)}
    assert [e.state for e in events if isinstance(e, ResponseEnded)] == ["completed"]
    assert data["summary"] == {
        "captures": 2,
        "conversations": 1,
        "recorded": 1,
        "already_stored": 0,
        "failed": 1,
    }


def test_a_bad_file_into_a_conversation_writes_nothing(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    conversation = start(capsys, url, "thinking_tool_roundtrip")
    before = versions(url)
    bad = tmp_path / "bad.body"
    bad.write_bytes(b"{}")
    code, data, _ = ingest(capsys, url, "--conversation", conversation, bad)
    assert (code, data["conversation_id"], data["responses"]) == (2, conversation, [])
    assert versions(url) == before


def test_a_request_that_does_not_extend_the_conversation_exits_2(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    conversation = start(capsys, url, "thinking_tool_roundtrip")
    before = versions(url)
    request, response = exchange("web_search_citations", 1)
    code, data, err = ingest(
        capsys, url, "--conversation", conversation, "--request", request, response
    )
    assert code == 2
    assert data["responses"] == []
    assert "prefix" in err
    assert versions(url) == before


# --- replay ------------------------------------------------------------------------------------


def test_replay_prints_the_request_and_never_writes(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    conversation = start(capsys, url, "thinking_tool_roundtrip", upto=2)
    before = versions(url)
    code, out, err = run(capsys, "--db", url, "replay", conversation, "--to", "anthropic")
    assert (code, err) == (0, "")
    body = json.loads(out)
    assert body["model"] == MODEL
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user", "assistant"]
    [signature] = deltas(exchange("thinking_tool_roundtrip", 1)[1], "signature_delta", "signature")
    assert body["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "".join(
            deltas(exchange("thinking_tool_roundtrip", 1)[1], "thinking_delta", "thinking")
        ),
        "signature": signature,
    }
    code, out, _ = run(
        capsys, "--db", url, "replay", conversation, "--to", "anthropic", "--user", FOLLOW_UP
    )
    assert code == 0
    with_user = json.loads(out)
    assert with_user["messages"][:-1] == body["messages"]
    assert with_user["messages"][-1] == {
        "role": "user",
        "content": [{"type": "text", "text": FOLLOW_UP}],
    }
    assert versions(url) == before


def test_replay_dry_run(capsys: pytest.CaptureFixture[str], url: str) -> None:
    conversation = start(capsys, url, "web_search_citations")
    before = versions(url)
    dry = ("--db", url, "replay", conversation, "--dry-run")
    search = "providers.anthropic.hosted_tools.web_search"
    consent = ("--cfg", f"{search}.enable=true", "--cfg", f"{search}.max_uses=3")
    assert run(capsys, *dry, *consent, "--to", "anthropic", "--json") == (0, "[]\n", "")
    code, out, _ = run(capsys, *dry, *consent, "--to", "anthropic")
    assert (code, out) == (0, "nothing is left out replaying to anthropic\n")
    # The recorded web search is no consent: without it, the search is not declared.
    code, out, _ = run(capsys, *dry, "--to", "anthropic", "--json")
    [loss] = json.loads(out)
    assert (code, loss["kind"]) == (0, "tool_declaration")
    code, out, _ = run(capsys, *dry, "--to", "anthropic")
    assert code == 0 and "hosted tool web_search is not declared" in out
    assert f"{search}.enable = true" in out
    code, out, _ = run(capsys, "--db", url, "replay", conversation, "--to", "anthropic")
    assert code == 0 and "tools" not in json.loads(out)
    for other in OTHERS:  # a switch leaves the hosted search's payloads out, at least
        code, out, err = run(capsys, *dry, "--to", other, "--model", SWITCH[other], "--json")
        assert (code, err) == (0, "")
        losses = json.loads(out)
        assert isinstance(losses, list) and losses
        assert all(set(loss) == {"version", "event", "kind", "reason"} for loss in losses)
    assert versions(url) == before


def test_replay_of_an_unknown_conversation_is_one_error_line(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    unknown = "00000000-0000-4000-8000-000000000000"
    code, out, err = run(capsys, "--db", url, "replay", unknown, "--to", "anthropic")
    assert (code, out, err.count("no convstore store")) == (2, "", 1)  # none made
    open_store(url).close()
    code, out, err = run(capsys, "--db", url, "replay", unknown, "--to", "anthropic")
    assert (code, out) == (2, "")
    assert err.startswith("convstore: error: ") and unknown in err
    assert len(err.splitlines()) == 1
    assert versions(url) == {}


# --- repair ------------------------------------------------------------------------------------


def test_repair_answers_an_orphaned_tool_call(capsys: pytest.CaptureFixture[str], url: str) -> None:
    conversation = start(capsys, url, "thinking_tool_roundtrip")  # the tool result never came
    old = stored(url, conversation)
    [call] = [e for e in old if isinstance(e, ToolCallRequested)]
    code, out, err = run(capsys, "--db", url, "repair", conversation)
    assert (code, err) == (0, "")
    assert call.call_id in out
    events = stored(url, conversation)
    [answer] = [e for e in events if isinstance(e, ToolCallResponded)]
    assert (answer.call_id, answer.synthetic, answer.is_error) == (call.call_id, True, True)
    assert events[: len(old)] == old and len(events) > len(old)  # appended, never rewritten
    assert run(capsys, "--db", url, "repair", conversation) == (0, "nothing to repair\n", "")
    assert run(capsys, "--db", url, "repair", conversation, "--json") == (0, "[\n]\n", "")


# --- ask against a real HTTP server -----------------------------------------------------------


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ReplayServer]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with ReplayServer() as replay:
        yield replay


def ask(
    capsys: pytest.CaptureFixture[str], url: str, server: ReplayServer, *args: str
) -> tuple[int, str, str]:
    base = f"providers.anthropic.base_url={server.url}"
    return run(capsys, "--db", url, "ask", *args, "--model", MODEL, "--cfg", base)


def streamed(response: Path) -> Reply:
    return Reply(body=response.read_bytes(), content_type="text/event-stream")


def database_bytes(tmp_path: Path) -> bytes:
    files = sorted(f for f in tmp_path.glob("convstore.db*") if f.is_file())  # -wal, -shm too
    assert files
    return b"".join(f.read_bytes() for f in files)


def test_ask_records_the_streamed_response(
    capsys: pytest.CaptureFixture[str], url: str, server: ReplayServer, tmp_path: Path
) -> None:
    """Scenario 18 (also test_reliability_secrets.py, every provider and backend): the key is sent
    and stored nowhere."""
    response = exchange("thinking_tool_roundtrip", 1)[1]
    server.enqueue(streamed(response))
    code, out, err = ask(capsys, url, server, QUESTION, "--json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["response"]["response_id"] == message_id(response)
    assert data["response"]["ended"] == "completed"
    [received] = server.requests
    assert (received.method, received.path) == ("POST", "/v1/messages")
    assert received.headers["x-api-key"] == KEY
    sent = json.loads(received.body)
    assert sent["model"] == MODEL and sent["stream"] is True
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}]
    events = stored(url, data["conversation_id"])
    assert [e.blocks for e in events if isinstance(e, UserMessage)] == [(QUESTION,)]
    [call] = [e for e in events if isinstance(e, ToolCallRequested)]
    assert call.arguments == json.loads(
        "".join(deltas(response, "input_json_delta", "partial_json"))
    )
    # RELIABILITY 18: the key is sent, and stored nowhere.
    assert KEY.encode() not in database_bytes(tmp_path)
    assert KEY not in out + err


def test_ask_continues_a_conversation_with_its_history(
    capsys: pytest.CaptureFixture[str], url: str, server: ReplayServer, tmp_path: Path
) -> None:
    conversation = start(capsys, url, "thinking_tool_roundtrip", upto=2)
    code, out, _ = run(
        capsys, "--db", url, "replay", conversation, "--to", "anthropic", "--user", FOLLOW_UP
    )
    assert code == 0
    expected = json.loads(out)
    server.enqueue(streamed(exchange("web_search_citations", 1)[1]))
    code, out, err = ask(capsys, url, server, FOLLOW_UP, "--conversation", conversation)
    assert (code, err) == (0, "")
    assert out.startswith(f"conversation {conversation}\n")
    assert "Chazen-an" in out  # the answer's text is shown
    [received] = server.requests
    sent = json.loads(received.body)
    assert sent.pop("stream") is True
    assert sent == expected  # the request is the encoded conversation, and the new question
    ended = [e.state for e in stored(url, conversation) if isinstance(e, ResponseEnded)]
    assert ended == ["completed"] * 3
    assert KEY.encode() not in database_bytes(tmp_path)


def test_ask_http_400_records_a_failed_response(
    capsys: pytest.CaptureFixture[str], url: str, server: ReplayServer, tmp_path: Path
) -> None:
    server.enqueue(Reply(status=400, body=example("errors/2.response.json").read_bytes()))
    code, out, err = ask(capsys, url, server, QUESTION, "--json")
    assert code == 3
    assert KEY not in out + err
    data = json.loads(out)
    assert data["response"]["ended"] == "failed"
    [end] = [e for e in stored(url, data["conversation_id"]) if isinstance(e, ResponseEnded)]
    assert end.state == "failed"
    assert end.error is not None and end.error.type == "invalid_request_error"
    assert len(server.requests) == 1  # a 400 is not retried
    assert KEY.encode() not in database_bytes(tmp_path)


# --- every capture: our examples and ../shared/wire ------------------------------------------

WIRE_PROVIDERS = {"anthropic": "anthropic", "openai": "openai", "gemini": "google"}
MODEL_CALLS = (
    "/v1/messages",
    "/v1/responses",
    ":generateContent",
    ":streamGenerateContent",
    "/chat/completions",
)


def sequences() -> list[Any]:
    """Every capture folder: our examples, and the recorded traffic when present."""
    roots = [("examples", EXAMPLES.parent, {name: name for name in PROVIDERS})]
    found = []
    if WIRE.is_dir():
        roots.append(("wire", WIRE, WIRE_PROVIDERS))
    else:
        found.append(pytest.param(None, None, marks=pytest.mark.skip(reason=f"{WIRE} is absent")))
    for corpus, root, providers in roots:
        for name, provider in providers.items():
            for folder in sorted((root / name).glob("*/")):
                marks = []
                if not available(provider):
                    marks = [pytest.mark.skip(reason=f"provider {provider!r} has no adapter yet")]
                param_id = f"{corpus}/{name}/{folder.name}"
                found.append(pytest.param(provider, folder, id=param_id, marks=marks))
    return found


def model_exchanges(folder: Path) -> Iterator[tuple[Path | None, Path, int]]:
    """(request or None, response, HTTP status) of each model call, in order."""
    responses = sorted(folder.glob("*.response.*"), key=lambda p: int(p.name.split(".")[0]))
    for response in responses:
        number = response.name.split(".")[0]
        meta = json.loads((folder / f"{number}.meta.json").read_text())
        if meta.get("path") and not str(meta["path"]).endswith(MODEL_CALLS):
            continue  # file and vector-store set-up: context, not a model response
        request = folder / f"{number}.request.json"
        yield (request if request.exists() else None), response, int(meta.get("status", 200))


def expected_exit(provider: str, response: Path, status: int) -> int:
    """3 when the capture holds an error (HTTP, or mid-stream) or a stream cut short, else 0."""
    if status >= 400:
        return 3
    body = response.read_bytes()
    if body[:2] == b"\x1f\x8b":
        body = gzip.decompress(body)
    streamed_body = response.suffix == ".sse"
    documents = sse_documents(body) if streamed_body else json.loads(body)
    if not isinstance(documents, list):
        documents = [documents]
    types = [d.get("type") for d in documents]
    if provider == "anthropic":
        broken = "error" in types or (streamed_body and "message_stop" not in types)
    elif provider == "openai":
        final = {"response.completed", "response.incomplete", "response.failed"}
        broken = "error" in types or "response.failed" in types
        broken |= streamed_body and not final & set(types)
        broken |= not streamed_body and documents[0].get("status") == "failed"
    elif provider == "openai-chat":
        broken = any("error" in d for d in documents)
        finished = [c for d in documents for c in d.get("choices") or () if c.get("finish_reason")]
        broken |= streamed_body and b"data: [DONE]" not in body and not finished
    else:
        broken = any("error" in d for d in documents)
        last = documents[-1] if documents else {}
        candidates = last.get("candidates") or []
        finished = any(c.get("finishReason") for c in candidates) or "blockReason" in str(last)
        broken |= streamed_body and not finished
    return 3 if broken else 0


def history(request: Path | None) -> list[Any]:
    """A request's messages (`messages`, `contents` or `input`); [] without a request."""
    if request is None:
        return []
    body = json.loads(request.read_bytes())
    found = body.get("messages") or body.get("contents") or body.get("input")
    return found if isinstance(found, list) else [found]


@pytest.mark.parametrize(("provider", "folder"), sequences())
def test_every_capture_ingests_through_the_cli(
    capsys: pytest.CaptureFixture[str], url: str, provider: str, folder: Path
) -> None:
    conversation: str | None = None
    previous: list[Any] = []
    for request, response, status in model_exchanges(folder):
        args: list[str | Path] = ["--provider", provider]
        if request is not None:
            args += ["--request", request]
        # A request that extends the previous one continues its conversation (so does a
        # response recorded without its request); any other is a separate question.
        messages = history(request)
        extends = len(messages) > len(previous) and messages[: len(previous)] == previous
        if conversation is not None and (request is None or extends):
            args += ["--conversation", conversation]
        previous = messages
        code, out, err = run(capsys, "--db", url, "ingest", *args, response, "--json")
        expected = expected_exit(provider, response, status)
        assert code == expected, f"{response.name}: exit {code}, expected {expected}: {err}"
        data = json.loads(out)
        [outcome] = data["responses"]
        assert outcome["ended"] in (("completed",) if expected == 0 else ("failed", "abandoned"))
        conversation = data["conversation_id"]
    assert conversation is not None, "the sequence holds no model call"
    assert all(count == len(stored(url, c)) for c, count in versions(url).items())
