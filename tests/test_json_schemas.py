"""Every command's `--json` output against its schema (`adapters/cli/schemas/`).

The schemas are a contract scripts rely on: each registered command has one, each is a
valid JSON Schema (draft 2020-12), and each command's output on a store built from the
example captures of every provider validates against it, on both backends.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from convstore.adapters import cli
from convstore.adapters.cli.program import COMMANDS
from convstore.domain import (
    CallId,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    ToolCallRequested,
    UserMessage,
)
from convstore.storage import open_store
from tests.replay_server import ReplayServer, Reply

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "adapters" / "cli" / "schemas"
EXAMPLES = ROOT / "examples"
KEY = "sk-ant-test-schemas"

CAPTURES = {
    "anthropic": ("web_search_citations", "1.response.sse"),
    "openai": ("web_search_citations", "1.response.sse"),
    "google": ("grounding_search_stream", "1.response.sse"),
}
"""One example exchange per provider: (folder, response file)."""
MODELS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-5.1", "google": "gemini-2.5-flash"}
"""A model per replay target (a dry run needs one: what is left out depends on it)."""


def _schema(command: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMAS / f"{command}.schema.json").read_text())
    return schema


def _check(command: str, output: str) -> Any:
    data = json.loads(output)
    jsonschema.Draft202012Validator(
        _schema(command), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    ).validate(data)
    return data


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert code in (0, 3), err
    return code, out


@pytest.fixture
def recorded(
    store_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, dict[str, str]]]:
    """A store holding one example exchange per provider; the conversation of each."""
    for name in ("CONVSTORE_CONFIG", "CONVSTORE_URL"):
        monkeypatch.delenv(name, raising=False)
    conversations = {}
    for provider, (folder, response) in CAPTURES.items():
        capture = EXAMPLES / provider / folder
        request = next(capture.glob("1.request.json"))
        _, out = _run(
            capsys,
            "--db",
            store_url,
            "ingest",
            "--provider",
            provider,
            "--request",
            str(request),
            str(capture / response),
            "--json",
        )
        conversations[provider] = _check("ingest", out)["conversation_id"]
    yield store_url, conversations


WITHOUT_JSON = {"completion", "proxy", "serve"}
"""Commands that print no JSON (a shell script; a server, which prints its address)."""
WITH_JSON = sorted(set(COMMANDS) - WITHOUT_JSON)


def test_every_command_has_a_valid_schema() -> None:
    schemas = sorted(path.name.removesuffix(".schema.json") for path in SCHEMAS.iterdir())
    assert schemas == WITH_JSON
    for command in WITH_JSON:
        jsonschema.Draft202012Validator.check_schema(_schema(command))


def test_every_reading_command_matches_its_schema(
    recorded: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url, conversations = recorded
    db = ("--db", url)
    listed = _check("list", _run(capsys, *db, "list", "--json")[1])
    assert {c["id"] for c in listed} == set(conversations.values())
    for provider, conversation in conversations.items():
        events = _check("show", _run(capsys, *db, "show", conversation, "--json")[1])
        assert all(e["conversation_id"] == e["originator_id"] == conversation for e in events)
        assert events[0]["type"] == "Started"
        assert any("payload" in event for event in events), provider
        both = _check("show", _run(capsys, *db, "show", conversation, "--json", "--chain")[1])
        assert both["events"] == events and both["chain"]["intact"], provider
        assert both["chain"]["head"] == events[-1]["hash"]
        request = _check("replay", _run(capsys, *db, "replay", conversation, "--to", provider)[1])
        assert isinstance(request, dict)
        for target in CAPTURES:
            replay = ("replay", conversation, "--to", target, "--model", MODELS[target])
            dry = _run(capsys, *db, *replay, "--dry-run", "--json")
            assert isinstance(_check("replay", dry[1]), list)
        report = _check("audit", _run(capsys, *db, "audit", conversation, "--json")[1])
        assert report["conversation_id"] == conversation
        assert report["chain"]["intact"] and report["chain"]["first_bad_version"] is None
        assert _check("repair", _run(capsys, *db, "repair", conversation, "--json")[1]) == []
    assert len(_check("audit", _run(capsys, *db, "audit", "--all", "--json")[1])) == 3
    assert _check("verify", _run(capsys, *db, "verify", "--all", "--json")[1])["intact"]
    heads = tmp_path / "heads.json"
    anchored = _run(capsys, *db, "anchor", "-o", str(heads), "--json")[1]
    assert _check("anchor", anchored)["conversations"] == 3
    out = tmp_path / "out"
    exported = _run(capsys, *db, "export", "--all", "--format", "md", "-o", str(out), "--json")
    summary = _check("export", exported[1])
    assert len(summary["files"]) == 3
    assert summary["chain"] == {"intact": True, "first_bad_version": None, "broken": []}
    assert _check("search", _run(capsys, *db, "search", "matcha", "--json")[1])
    assert _check("reindex", _run(capsys, *db, "reindex", "--json")[1])["events"] > 0
    assert _check("project", _run(capsys, *db, "project", "--json")[1])["events"] == 0
    assert _check("migrate", _run(capsys, *db, "migrate", "--json")[1])["applied"] == []
    forked = _run(capsys, *db, "fork", conversations["anthropic"], "--at", "1", "--json")
    assert _check("fork", forked[1])["forked_at"] == 1
    target = conversations["openai"]
    titled = _run(capsys, *db, "title", target[:8], "Genmaicha notes", "--json")
    assert _check("title", titled[1]) == {
        "conversation_id": target,
        "title": "Genmaicha notes",
        "changed": True,
    }
    labelled = _run(capsys, *db, "label", target, "--add", "tea", "--remove", "none", "--json")
    assert _check("label", labelled[1])["labels"] == ["tea"]
    again = _run(capsys, *db, "label", target, "--add", "tea", "--json")
    assert _check("label", again[1])["changed"] is False
    hits = _check("search", _run(capsys, *db, "search", "genmaicha", "--json")[1])
    assert [(h["conversation_id"], h["kind"]) for h in hits] == [(target, "title")]
    events = _check("show", _run(capsys, *db, "show", target, "--json")[1])
    assert [e["type"] for e in events[-2:]] == ["Retitled", "Relabelled"]


def test_redact_and_the_redacted_log_match_their_schemas(
    recorded: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, conversations = recorded
    db = ("--db", url)
    target = conversations["anthropic"]
    events = _check("show", _run(capsys, *db, "show", target, "--json")[1])
    said = next(e["originator_version"] for e in events if e["type"] == "UserMessage")
    redact = ("redact", target, "--event", str(said), "--reason", "pasted a key", "--json")
    redacted = _check("redact", _run(capsys, *db, *redact, "--span", "0:2")[1])
    assert (redacted["event_version"], redacted["span"]) == (said, [0, 2])
    assert redacted["version"] == events[-1]["originator_version"] + 1
    both = _check("show", _run(capsys, *db, "show", target, "--json", "--chain")[1])
    assert both["chain"]["intact"] and both["events"][-1]["type"] == "Redacted"
    [message] = [e for e in both["events"] if e["originator_version"] == said]
    assert message["blocks"][0].startswith("[redacted]")


def test_ask_matches_its_schema(
    store_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.delenv("CONVSTORE_CONFIG", raising=False)
    response = EXAMPLES / "anthropic" / "thinking_tool_roundtrip" / "1.response.sse"
    with ReplayServer() as server:
        server.enqueue(Reply(body=response.read_bytes(), content_type="text/event-stream"))
        _, out = _run(
            capsys,
            *("--db", store_url, "ask", "What is the weather in Kyoto?", "--json"),
            *("--model", MODELS["anthropic"]),
            *("--cfg", f"providers.anthropic.base_url={server.url}"),
        )
    assert _check("ask", out)["response"]["ended"] == "completed"


def test_answer_and_the_calls_a_dry_run_lists_match_their_schemas(
    store_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CONVSTORE_CONFIG", "CONVSTORE_URL"):
        monkeypatch.delenv(name, raising=False)
    capture = EXAMPLES / "anthropic" / "mixed_batch"  # a pending search and a client call
    db = ("--db", store_url)
    ingest = ("ingest", "--provider", "anthropic", "--request", str(capture / "1.request.json"))
    ingested = _check(
        "ingest", _run(capsys, *db, *ingest, str(capture / "1.response.sse"), "--json")[1]
    )
    conversation = ingested["conversation_id"]
    dry = _run(capsys, *db, "replay", conversation, "--to", "anthropic", "--dry-run", "--json")
    items = _check("replay", dry[1])
    [call] = [item for item in items if item["kind"] == "unanswered_call"]
    assert "kept_declared" in {item["kind"] for item in items}
    answered = _run(capsys, *db, "answer", conversation, call["call_id"], "--text", "ok", "--json")
    data = _check("answer", answered[1])
    assert (data["call_id"], data["unanswered"]) == (call["call_id"], [])
    # Two calls: the one left is listed.
    with open_store(store_url) as store:
        service = store.service
        two = service.start("two calls")
        rid = ResponseId("msg_two")
        service.add_user_input(two, [UserMessage(blocks=("two orders",))])
        service.ingest(
            two,
            iter(
                [
                    ResponseStarted(response_id=rid, provider="anthropic", model="claude-test"),
                    ToolCallRequested(response_id=rid, call_id=CallId("call_a"), name="lookup"),
                    ToolCallRequested(response_id=rid, call_id=CallId("call_b"), name="lookup"),
                    ResponseEnded(response_id=rid, state="completed", finish_reason="tool_use"),
                ]
            ),
        )
    answered = _run(capsys, *db, "answer", str(two), "call_a", "--error", "down", "--json")
    data = _check("answer", answered[1])
    assert data["is_error"] and [c["call_id"] for c in data["unanswered"]] == ["call_b"]


MISSING = "0" * 32
FAILING: dict[str, list[str]] = {
    "audit": [MISSING],
    "verify": [MISSING],
    "anchor": ["-o", "/nonexistent/folder/anchors.json"],
    "migrate": [],
    "list": [],
    "show": [MISSING],
    "export": [MISSING, "--format", "md", "-o", "/nonexistent/folder/x.md"],
    "search": ["matcha"],
    "reindex": [],
    "project": [],
    "ingest": ["--provider", "anthropic", "/nonexistent/capture.sse"],
    "import": ["openai-conversation", "/nonexistent/items.json"],
    "replay": [MISSING, "--to", "anthropic"],
    "ask": ["Where?", "--model", "claude-sonnet-4-5", "--cfg", "ask.colour=1"],
    "fork": [MISSING, "--at", "1"],
    "title": [MISSING, "a title"],
    "label": [MISSING, "--add", "tea"],
    "repair": [MISSING],
    "forget": [MISSING],
    "redact": [MISSING, "--event", "2", "--reason", "a key"],
    "answer": [MISSING, "call_1", "--text", "ok"],
}
"""A failing run of every command (on a store that does not exist, or a wrong id)."""


def test_every_command_failure_matches_its_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--json` on failure: one document with `error` and `error_detail`, exit 2."""
    assert sorted(FAILING) == WITH_JSON
    url = f"sqlite:///{tmp_path / 'no folder' / 'missing.db'}"  # not even a writer makes it
    for command, args in FAILING.items():
        code = cli.main(["--db", url, command, *args, "--json"])
        out, err = capsys.readouterr()
        assert code == 2, (command, err)
        data = _check(command, out)
        assert err == f"convstore: error: {data['error']}\n", command
        assert data["error_detail"]["message"] in data["error"], command


def test_a_batch_ingest_matches_its_schema(
    store_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder of capture folders (one item per capture), a capture that fails among them,
    and a batch refused before its first write."""
    for name in ("CONVSTORE_CONFIG", "CONVSTORE_URL"):
        monkeypatch.delenv(name, raising=False)
    db = ("--db", store_url)
    for provider in CAPTURES:
        _, out = _run(
            capsys, *db, "ingest", "--provider", provider, str(EXAMPLES / provider), "--json"
        )
        data = _check("ingest", out)
        assert len(data["captures"]) == data["summary"]["captures"] > 1
    bad = EXAMPLES / "anthropic" / "errors" / "2.request.json"  # a body, not a response
    good = EXAMPLES / "anthropic" / "pause_turn" / "1.response.sse"
    argv = [*db, "ingest", "--provider", "anthropic", str(good), str(bad), "--json"]
    assert cli.main(argv) == 2
    data = _check("ingest", capsys.readouterr().out)
    assert [("error" in item) for item in data["captures"]] == [False, True]
    refused = [*db, "ingest", "--provider", "anthropic", "--request", str(bad), str(good)]
    assert cli.main([*refused, str(good), "--json"]) == 2
    data = _check("ingest", capsys.readouterr().out)
    assert set(data) == {"error", "error_detail"}
    assert data["error_detail"]["type"] == "ConfigurationError"
