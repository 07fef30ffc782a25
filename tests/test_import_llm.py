"""`convstore import llm PATH`: an `llm` logs.db in both layouts, each written by the real
`llm` package through its own API and migrations: the current one by the `llm` of this
venv at test time (`tests.llm_logs`: its OpenAI-compatible model at a `ReplayServer` on
127.0.0.1, an echo model plugin), the older one by llm 0.31.1
(`tests/fixtures/llm_old/make_logs.py`, committed with the file it wrote)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llm
import pytest
import sqlite_utils
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llm.logs import LogStore

from convstore.adapters import cli
from convstore.adapters.importing.record import conversation_id
from convstore.domain import (
    AssistantText,
    ResponseEnded,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    UnknownArtifact,
    UserMessage,
)
from convstore.storage import open_store
from tests.llm_logs import llm_models, log_reply, write_logs
from tests.replay_server import ReplayServer

OLD = Path(__file__).parent / "fixtures" / "llm_old" / "logs.db"
SUMMARY_KEYS = {
    "format", "conversations", "started", "responses", "already_stored",
    "failed", "losses", "interrupted", "items",
}  # fmt: skip


@pytest.fixture
def configured(tmp_path: Path) -> Iterator[ReplayServer]:
    with ReplayServer() as server, llm_models(tmp_path / "llm-user", server):
        yield server


@pytest.fixture
def logs(tmp_path: Path, configured: ReplayServer) -> tuple[Path, dict[str, llm.Conversation]]:
    path = tmp_path / "logs.db"
    return path, write_logs(path, configured)


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def imported(capsys: pytest.CaptureFixture[str], url: str, path: Path) -> dict[str, Any]:
    code, out, err = run(capsys, "--db", url, "import", "llm", path, "--json")
    assert (code, err) == (0, "")
    summary: dict[str, Any] = json.loads(out)
    return summary


def everything(url: str) -> list[tuple[str, int, str]]:
    with open_store(url) as store:
        return [
            (str(e.originator_id), e.originator_version, e.hash)
            for summary in store.service.list(limit=1000)
            for e in store.service.events(summary.id)
        ]


def events(url: str, source_id: str) -> list[Any]:
    with open_store(url) as store:
        return list(store.service.events(conversation_id("llm", source_id)))


def test_the_current_layout_imports_what_llm_wrote(
    capsys: pytest.CaptureFixture[str],
    sqlite_url: str,
    logs: tuple[Path, dict[str, llm.Conversation]],
    tmp_path: Path,
) -> None:
    path, conversations = logs
    summary = imported(capsys, sqlite_url, path)
    assert set(summary) == SUMMARY_KEYS
    assert (summary["conversations"], summary["responses"], summary["failed"]) == (2, 4, 0)
    # llm itself is the oracle, reading a copy (its LogStore migrates what it opens)
    copy = tmp_path / "oracle.db"
    shutil.copy(path, copy)
    oracle = LogStore(sqlite_utils.Database(copy))
    turns = list(oracle.db.query("select * from turns order by rowid"))
    for thread, conversation in conversations.items():
        got = events(sqlite_url, f"thread:{conversation.id}")
        mine = [t for t in turns if t["thread_id"] == conversation.id]
        started = [e for e in got if isinstance(e, ResponseStarted)]
        assert [e.response_id for e in started] == [f"llm:{t['id']}" for t in mine], thread
        ended = [e for e in got if isinstance(e, ResponseEnded)]
        assert [(e.usage.input_tokens, e.usage.output_tokens) for e in ended if e.usage] == [
            (t["input_tokens"], t["output_tokens"]) for t in mine
        ]
        texts = [e.text for e in got if isinstance(e, AssistantText)]
        expected = [
            part.text
            for t in mine
            for message in oracle.load_chain(t["tip_message_hash"])[
                len(oracle.load_chain(t["parent_message_hash"])) :
            ]
            for part in message.parts
            if isinstance(part, llm.parts.TextPart) and part.text
        ]
        assert texts == expected
    chat = events(sqlite_url, f"thread:{conversations['local-chat'].id}")
    calls = [e for e in chat if isinstance(e, ToolCallRequested)]
    answers = [e for e in chat if isinstance(e, ToolCallResponded)]
    assert [c.call_id for c in calls] == [a.call_id for a in answers]
    assert all(a.is_error for a in answers)  # llm's tool loop recorded the exception
    # the non-streamed answers are Chat Completions JSON: decoded with their payloads
    native = [e for e in chat if isinstance(e, AssistantText) and e.payload is not None]
    assert {e.payload.provider for e in native if e.payload} == {"openai-chat"}
    assert len(native) == 2
    assert any(e.attributions for e in native)
    echo = events(sqlite_url, f"thread:{conversations['echo'].id}")
    [said] = [e for e in echo if isinstance(e, UserMessage)]
    assert said.blocks == ("a fragment of some length\ndescribe this",)
    [attachment] = [e for e in echo if isinstance(e, UnknownArtifact)]
    meta = json.loads(attachment.payload.raw)
    assert (attachment.payload.provider, meta["type"], meta["size"]) == ("llm", "image/png", 16)
    [started] = [e for e in echo if isinstance(e, ResponseStarted)]
    assert (started.provider, started.settings.system) == ("llm", "Be brief.")


def test_the_older_layout_imports_what_llm_0_31_wrote(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    summary = imported(capsys, sqlite_url, OLD)
    assert (summary["conversations"], summary["responses"], summary["failed"]) == (2, 5, 0)
    source = sqlite3.connect(OLD)
    rows = source.execute("select id, conversation_id, response from responses order by rowid")
    by_conversation: dict[str, list[tuple[str, str]]] = {}
    for rid, conversation, text in rows:
        by_conversation.setdefault(conversation, []).append((rid, text))
    for conversation, responses in by_conversation.items():
        got = events(sqlite_url, f"conversation:{conversation}")
        started = [e.response_id for e in got if isinstance(e, ResponseStarted)]
        assert started == [f"llm:{rid}" for rid, _ in responses]
        texts = [e.text for e in got if isinstance(e, AssistantText)]
        assert texts == [text for _, text in responses if text]
    [(chat,)] = source.execute("select conversation_id from responses where model = 'local-chat'"
                               " limit 1")  # fmt: skip
    got = events(sqlite_url, f"conversation:{chat}")
    [call] = [e for e in got if isinstance(e, ToolCallRequested)]
    [answer] = [e for e in got if isinstance(e, ToolCallResponded)]
    [(output,)] = source.execute("select output from tool_results")
    assert (call.call_id, answer.call_id, answer.content) == (
        "call_OLD_weather_1", "call_OLD_weather_1", output,
    )  # fmt: skip
    assert call.payload is not None and call.payload.provider == "openai-chat"
    [(echo,)] = source.execute("select conversation_id from responses where model = 'echo' limit 1")
    echoed = events(sqlite_url, f"conversation:{echo}")
    assert [e.blocks for e in echoed if isinstance(e, UserMessage)] == [
        ("a fragment\ndescribe this",), ("and again",),
    ]  # fmt: skip
    assert {e.settings.system for e in echoed if isinstance(e, ResponseStarted)} == {"Be brief."}


def test_importing_twice_changes_nothing(
    capsys: pytest.CaptureFixture[str],
    sqlite_url: str,
    logs: tuple[Path, dict[str, llm.Conversation]],
) -> None:
    path, _ = logs
    for source in (OLD, path):
        first = imported(capsys, sqlite_url, source)
        before = everything(sqlite_url)
        again = imported(capsys, sqlite_url, source)
        assert (again["responses"], again["started"]) == (0, 0)
        assert again["already_stored"] == first["responses"]
        assert everything(sqlite_url) == before


def test_a_grown_source_records_only_what_is_new(
    capsys: pytest.CaptureFixture[str],
    sqlite_url: str,
    logs: tuple[Path, dict[str, llm.Conversation]],
) -> None:
    path, conversations = logs
    first = imported(capsys, sqlite_url, path)
    before = everything(sqlite_url)
    log_reply(path, conversations["echo"], "one more")
    grown = imported(capsys, sqlite_url, path)
    assert (grown["responses"], grown["already_stored"]) == (1, first["responses"])
    after = everything(sqlite_url)
    assert after[: len(before)] == before or set(before) <= set(after)
    echo = events(sqlite_url, f"thread:{conversations['echo'].id}")
    assert [e.blocks for e in echo if isinstance(e, UserMessage)][-1] == ("one more",)
    assert sum(isinstance(e, ResponseStarted) for e in echo) == 2


def test_what_could_not_be_carried_is_reported(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    code, out, err = run(capsys, "--db", sqlite_url, "import", "llm", OLD)
    assert (code, err) == (0, "")
    assert "lost: UnknownArtifact: attachment:" in out
    assert "its response_json is llm's own summary" in out
    summary = imported(capsys, f"{sqlite_url}-2", OLD)
    kinds = {loss["kind"] for item in summary["items"] for loss in item["losses"]}
    assert kinds == {"attachment", "payload"}
    assert summary["losses"] == sum(len(item["losses"]) for item in summary["items"])


@pytest.mark.parametrize("kind", ["missing", "not sqlite", "another database"])
def test_a_source_that_is_not_an_llm_logs_db_is_refused(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "source.db"
    if kind == "not sqlite":
        path.write_text("just some text, not a database\n" * 10)
    elif kind == "another database":
        sqlite3.connect(path).execute("create table notes (id integer, body text)")
    code, out, _ = run(capsys, "--db", sqlite_url, "import", "llm", path, "--json")
    assert code == 2
    error = json.loads(out)["error_detail"]
    assert error["type"] == "ConfigurationError" and str(path) in error["message"]
    with open_store(sqlite_url) as store:
        assert store.service.count() == 0


def test_an_imported_conversation_exports_searches_audits_and_replays(
    capsys: pytest.CaptureFixture[str],
    sqlite_url: str,
    logs: tuple[Path, dict[str, llm.Conversation]],
) -> None:
    path, conversations = logs
    imported(capsys, sqlite_url, path)
    target = str(conversation_id("llm", f"thread:{conversations['local-chat'].id}"))
    code, out, _ = run(capsys, "--db", sqlite_url, "export", target, "--format", "json")
    assert code == 0 and "glacier du Rhône" in out and "get_weather" in out
    code, out, _ = run(capsys, "--db", sqlite_url, "search", "glacier", "--json")
    assert code == 0 and target in out
    code, out, _ = run(capsys, "--db", sqlite_url, "audit", target, "--json")
    assert code == 0 and "llm:" in out
    for provider in ("openai-chat", "anthropic"):
        code, _, err = run(
            capsys, "--db", sqlite_url, "replay", target, "--to", provider,
            "--model", "claude-sonnet-4-5" if provider == "anthropic" else "gpt-4.1",
            "--user", "And Bern?", "--dry-run",
        )  # fmt: skip
        assert code == 0, err


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=4), max_size=4))
def test_every_turn_lands_once_whatever_the_threads(
    capsys: pytest.CaptureFixture[str],
    tmp_path_factory: pytest.TempPathFactory,
    configured: ReplayServer,
    threads: list[list[str]],
) -> None:
    folder = tmp_path_factory.mktemp("threads")
    path, url = folder / "logs.db", f"sqlite:///{folder / 'store.db'}"
    db = sqlite_utils.Database(path)
    LogStore(db)  # llm's migrations, so an empty file is a logs.db too
    for prompts in threads:
        conversation = llm.get_model("echo").conversation()
        for prompt in prompts:
            response = conversation.prompt(prompt)
            response.text()
            response.log_to_db(db)
    db.close()
    first = imported(capsys, url, path)
    assert (first["conversations"], first["responses"]) == (
        len(threads), sum(len(p) for p in threads),
    )  # fmt: skip
    again = imported(capsys, url, path)
    assert (again["responses"], again["already_stored"]) == (0, first["responses"])
