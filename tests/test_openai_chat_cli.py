"""The command line with provider `openai-chat`: `ingest --server`, `replay --to
openai-chat`, and `ask` against a real HTTP server on 127.0.0.1 replaying the examples."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convstore.adapters import cli
from convstore.domain import AssistantText, ResponseStarted, ToolCallRequested
from convstore.storage import open_store
from tests.replay_server import ReplayServer, Reply

EXAMPLES = Path(__file__).parents[1] / "examples" / "openai-chat"
KEY = "sk-chat-CLI-0123456789abcdef-KEY"
OPENAI_KEY = "sk-proj-OPENAI-must-never-leave-0123456789"


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'convstore.db'}"


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def stored(url: str, conversation: str) -> list[Any]:
    with open_store(url) as store:
        [found] = store.service.matching(conversation, limit=2)
        return list(store.service.events(found))


def example(name: str) -> Path:
    return EXAMPLES / name


def test_ingest_binds_the_payloads_to_the_server_named(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    capture = ["--request", example("tool_call_stream/1.request.json")]
    code, out, err = run(
        capsys, "--db", url, "ingest", "--provider", "openai-chat",
        "--server", "http://LocalHost:11434/v1", *capture,
        example("tool_call_stream/1.response.sse"), "--json",
    )  # fmt: skip
    assert (code, err) == (0, "")
    events = stored(url, json.loads(out)["conversation_id"])
    bindings = {e.payload.binding["server"] for e in events if isinstance(e, ToolCallRequested)}
    assert bindings == {"localhost:11434"}
    assert all(not isinstance(e, ResponseStarted) or e.provider == "openai-chat" for e in events)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--provider", "openai", "--server", "api.openai.com"], "applies to provider openai-chat"),
        (["--provider", "openai-chat", "--server", "not a host"], "names no server"),
    ],
)
def test_a_server_that_cannot_apply_is_refused_before_anything_is_written(
    capsys: pytest.CaptureFixture[str], url: str, args: list[str], message: str
) -> None:
    code, _, err = run(
        capsys, "--db", url, "ingest", *args, example("errors/3.response.json")
    )  # fmt: skip
    assert code == 2 and message in err
    code, out, _ = run(capsys, "--db", url, "list", "--json")
    assert code in (0, 2) and (code == 2 or json.loads(out) == [])


def test_replay_to_the_same_server_leaves_nothing_out_and_to_another_lists_the_losses(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    base = ["--db", url, "ingest", "--provider", "openai-chat", "--server", "localhost:11434"]
    code, out, _ = run(
        capsys, *base, "--request", example("tool_call_stream/1.request.json"),
        example("tool_call_stream/1.response.sse"), "--json",
    )  # fmt: skip
    conversation = json.loads(out)["conversation_id"]
    local = ("--cfg", "providers.openai-chat.base_url=http://localhost:11434/v1")
    replay = ("--db", url, "replay", conversation, "--to", "openai-chat")
    code, out, _ = run(capsys, *replay, *local, "--dry-run", "--json")
    # the two calls have no result yet: the dry run says so, and nothing else
    assert code == 0 and {loss["kind"] for loss in json.loads(out)} == {"unanswered_call"}
    code, out, _ = run(capsys, *replay, "--dry-run", "--json")
    kinds = {loss["kind"] for loss in json.loads(out)}
    assert code == 0 and kinds == {"payload", "settings", "unanswered_call"}
    code, out, _ = run(capsys, *replay, *local, "--user", "Thanks")
    sent = json.loads(out)
    assert sent["messages"][-1] == {"role": "user", "content": "Thanks"}
    assert "convstore_server" not in sent


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ReplayServer]:
    monkeypatch.setenv("OPENAI_CHAT_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    with ReplayServer() as replay:
        yield replay


def test_ask_records_the_stream_bound_to_its_server_and_sends_no_openai_key(
    capsys: pytest.CaptureFixture[str], url: str, server: ReplayServer, tmp_path: Path
) -> None:
    body = example("compatible_servers/1.response.sse").read_bytes()
    server.enqueue(Reply(body=body, content_type="text/event-stream"))
    base = f"providers.openai-chat.base_url={server.url}/v1"
    code, out, err = run(
        capsys, "--db", url, "ask", "--provider", "openai-chat", "--model", "deepseek-reasoner",
        "--cfg", base, "Which is larger, 9.11 or 9.8?", "--json",
    )  # fmt: skip
    assert (code, err) == (0, "")
    [received] = server.requests
    assert (received.method, received.path) == ("POST", "/v1/chat/completions")
    assert received.headers["authorization"] == f"Bearer {KEY}"  # never the OpenAI key
    sent = json.loads(received.body)
    assert sent == {
        "stream": True,
        "model": "deepseek-reasoner",
        "messages": [{"role": "user", "content": "Which is larger, 9.11 or 9.8?"}],
    }
    events = stored(url, json.loads(out)["conversation_id"])
    [text] = [e for e in events if isinstance(e, AssistantText)]
    host = server.url.removeprefix("http://")
    assert text.payload.binding == {"model": "deepseek-reasoner", "server": host}
    [started] = [e for e in events if isinstance(e, ResponseStarted)]
    assert b"convstore_server" not in started.settings.native.raw
    database = b"".join(f.read_bytes() for f in tmp_path.glob("convstore.db*") if f.is_file())
    assert KEY.encode() not in database and OPENAI_KEY.encode() not in database


def test_ask_without_a_chat_key_names_the_variable(
    capsys: pytest.CaptureFixture[str], url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_CHAT_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)  # not for another server
    code, _, err = run(
        capsys, "--db", url, "ask", "--provider", "openai-chat", "--model", "llama3.2",
        "--cfg", "providers.openai-chat.base_url=http://127.0.0.1:9/v1", "Hi",
    )  # fmt: skip
    assert code == 2 and "OPENAI_CHAT_API_KEY" in err and OPENAI_KEY not in err
