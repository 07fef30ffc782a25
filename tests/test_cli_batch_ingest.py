"""Batch `ingest` through the command line: capture folders, folders of them, loose files.

Each runs `cli.main` on a fresh SQLite store and is judged by its exit status, its
`--json` output (validated against `ingest.schema.json`) and what the store holds: one
conversation per capture with every request's user messages recorded, nothing duplicated
on a second run, `--request` by position, `-` from standard input, a progress line on a
terminal only, and refusals (exit 2) that write nothing and name the file at fault.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from convstore.adapters import cli
from convstore.domain import ResponseStarted, UserMessage, parse_conversation_id
from convstore.storage import open_store
from tests.terminal import Terminal

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SCHEMA = json.loads((ROOT / "adapters" / "cli" / "schemas" / "ingest.schema.json").read_text())
MESSAGES = {
    "anthropic": "messages",
    "openai": "input",
    "google": "contents",
    "openai-chat": "messages",
}
"""Where each provider's request holds its conversation."""
FAILURE = {"error", "error_detail"}
"""A refused batch's `--json`: nothing was written."""


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("CONVSTORE_URL", "CONVSTORE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def database(tmp_path: Path) -> Path:
    return tmp_path / "convstore.db"


def ingest(
    capsys: pytest.CaptureFixture[str], database: Path, provider: str, *args: str | Path
) -> tuple[int, dict[str, Any], str]:
    """`convstore ingest --provider PROVIDER ARGS --json`, its output checked against the
    schema: (exit status, output, stderr)."""
    argv = ["--db", f"sqlite:///{database}", "ingest", "--provider", provider, *map(str, args)]
    code = cli.main([*argv, "--json"])
    out, err = capsys.readouterr()
    data: dict[str, Any] = json.loads(out)
    jsonschema.Draft202012Validator(
        SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    ).validate(data)
    return code, data, err


def counts(database: Path) -> dict[str, int]:
    """Every conversation and its event count."""
    with open_store(f"sqlite:///{database}") as store:
        return {str(s.id): s.events for s in store.service.list(limit=100_000)}


def user_texts(database: Path, conversation: str) -> list[str]:
    with open_store(f"sqlite:///{database}") as store:
        events = store.service.events(parse_conversation_id(conversation))
        return [b for e in events if isinstance(e, UserMessage) for b in e.blocks]


def response_ids(database: Path, conversation: str) -> list[str]:
    with open_store(f"sqlite:///{database}") as store:
        events = store.service.events(parse_conversation_id(conversation))
        started = [e for e in events if isinstance(e, ResponseStarted)]
        return [e.response_id for e in started if e.origin == "provider"]


def request_user_texts(provider: str, request: Path) -> set[str]:
    """The text of every user message a request carries."""
    held = json.loads(request.read_bytes()).get(MESSAGES[provider])
    if isinstance(held, str):
        return {held}
    texts: set[str] = set()
    for message in held or []:
        if message.get("role") != "user":
            continue
        parts = message.get("content", message.get("parts", []))
        if isinstance(parts, str):
            texts.add(parts)
            continue
        texts |= {p["text"] for p in parts if p.get("type", "text") in TEXT and "text" in p}
    return texts


TEXT = {"text", "input_text"}


def capture_folders(provider: str) -> list[Path]:
    return sorted(p for p in (EXAMPLES / provider).iterdir() if p.is_dir())


# --- a folder of capture folders --------------------------------------------------------------


@pytest.mark.parametrize("provider", list(MESSAGES))
def test_a_folder_of_capture_folders_gives_one_conversation_each_and_twice_nothing_more(
    capsys: pytest.CaptureFixture[str], database: Path, provider: str
) -> None:
    code, data, _ = ingest(capsys, database, provider, EXAMPLES / provider)
    assert code in (0, 3)  # the examples hold failed responses: the worst is 3
    folders = capture_folders(provider)
    assert [item["path"] for item in data["captures"]] == [str(f) for f in folders]
    ids = [item["conversation_id"] for item in data["captures"]]
    assert len(set(ids)) == len(folders) and set(counts(database)) == set(ids)
    assert all("error" not in item for item in data["captures"])
    for folder, item in zip(folders, data["captures"], strict=True):
        recorded = set(user_texts(database, item["conversation_id"]))
        for request in folder.glob("*.request.json"):
            missing = request_user_texts(provider, request) - recorded
            assert not missing, f"{request}: {missing}"
        stored = response_ids(database, item["conversation_id"])
        assert [r["response_id"] for r in item["responses"] if not r["already_stored"]] == stored
    summary = data["summary"]
    assert (summary["captures"], summary["conversations"], summary["failed"]) == (
        len(folders),
        len(folders),
        0,
    )
    outcomes = [r for item in data["captures"] for r in item["responses"]]
    assert summary["recorded"] == sum(not r["already_stored"] for r in outcomes) > 0
    before = counts(database)
    code, again, err = ingest(capsys, database, provider, EXAMPLES / provider)
    assert (code, err) == (0, "")
    assert counts(database) == before  # nothing duplicated
    assert [item["conversation_id"] for item in again["captures"]] == ids
    assert again["summary"]["recorded"] == 0
    assert again["summary"]["already_stored"] == len(outcomes)


def test_several_folders_and_a_summary_line(
    capsys: pytest.CaptureFixture[str], database: Path
) -> None:
    names = ("mcp_connector", "pause_turn", "thinking_tool_roundtrip")
    folders = [EXAMPLES / "anthropic" / name for name in names]
    argv = [
        "--db",
        f"sqlite:///{database}",
        "ingest",
        "--provider",
        "anthropic",
        *map(str, folders),
    ]
    assert cli.main(argv) in (0, 3)
    out, _ = capsys.readouterr()
    responses = sum(len(list(f.glob("*.response.*"))) for f in folders)
    assert out.splitlines()[-1] == (
        f"3 captures: 3 conversations, {responses} responses recorded, 0 already stored, 0 failed"
    )
    assert len(counts(database)) == 3


def test_calls_that_are_not_model_calls_are_skipped(
    capsys: pytest.CaptureFixture[str], database: Path, tmp_path: Path
) -> None:
    source = EXAMPLES / "anthropic" / "thinking_tool_roundtrip"
    capture = tmp_path / "with_upload"
    capture.mkdir()
    (capture / "1.meta.json").write_text(json.dumps({"path": "/v1/files", "status": 200}))
    (capture / "1.request.json").write_text("not a model request")
    (capture / "1.response.json").write_text(json.dumps({"id": "file_1", "type": "file"}))
    for name in ("meta.json", "request.json", "response.sse"):
        shutil.copy(source / f"1.{name}", capture / f"2.{name}")
    code, data, err = ingest(capsys, database, "anthropic", capture)
    assert (code, err) == (0, "")
    assert [r["ended"] for r in data["responses"]] == ["completed"]


# --- loose files and --request ----------------------------------------------------------------


def exchange(folder: str, number: int = 1) -> tuple[Path, Path]:
    [response] = (EXAMPLES / "anthropic" / folder).glob(f"{number}.response.*")
    return response.parent / f"{number}.request.json", response


def test_loose_files_are_each_their_own_conversation_with_their_request_by_position(
    capsys: pytest.CaptureFixture[str], database: Path
) -> None:
    (first_request, first), (second_request, second) = (
        exchange("thinking_tool_roundtrip"),
        exchange("pause_turn"),
    )
    args = ("--request", first_request, "--request", second_request, first, second)
    code, data, err = ingest(capsys, database, "anthropic", *args)
    assert (code, err) == (0, "")
    one, two = data["captures"]
    assert (one["path"], two["path"]) == (str(first), str(second))
    assert one["conversation_id"] != two["conversation_id"]
    for item, request in ((one, first_request), (two, second_request)):
        texts = request_user_texts("anthropic", request)
        assert texts and set(user_texts(database, item["conversation_id"])) == texts
    assert "conversation_id" not in data  # one capture's keys only for a single capture


def test_conversation_takes_every_loose_file(
    capsys: pytest.CaptureFixture[str], database: Path
) -> None:
    request, response = exchange("thinking_tool_roundtrip")
    code, data, _ = ingest(capsys, database, "anthropic", "--request", request, response)
    conversation = data["conversation_id"]
    request, response = exchange("thinking_tool_roundtrip", 2)
    other = exchange("web_search_citations")[1]
    code, data, err = ingest(
        capsys, database, "anthropic", "--conversation", conversation, response, other
    )
    assert (code, err) == (0, "")
    [item] = data["captures"]
    assert item["conversation_id"] == conversation and len(item["responses"]) == 2
    assert list(counts(database)) == [conversation]


def test_a_request_count_that_does_not_match_writes_nothing(
    capsys: pytest.CaptureFixture[str], database: Path
) -> None:
    request, response = exchange("thinking_tool_roundtrip")
    other = exchange("pause_turn")[1]
    code, data, err = ingest(capsys, database, "anthropic", "--request", request, response, other)
    assert code == 2
    assert "1 --request for 2 response files" in err
    assert (set(data), data["error_detail"]["type"]) == (FAILURE, "ConfigurationError")
    assert not database.exists()  # the store is not even created


def test_a_missing_file_among_good_ones_writes_nothing(
    capsys: pytest.CaptureFixture[str], database: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.sse"
    code, data, err = ingest(
        capsys, database, "anthropic", EXAMPLES / "anthropic" / "pause_turn", missing
    )
    assert code == 2 and str(missing) in err and set(data) == FAILURE
    assert not database.exists()
    code, data, err = ingest(capsys, database, "anthropic", tmp_path)  # no capture in it
    assert code == 2 and "holds no capture" in err
    assert not database.exists()


# --- standard input ---------------------------------------------------------------------------


def stdin(monkeypatch: pytest.MonkeyPatch, body: bytes) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(body)))


def test_a_response_from_standard_input(
    capsys: pytest.CaptureFixture[str], database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    request, response = exchange("thinking_tool_roundtrip")
    stdin(monkeypatch, response.read_bytes())
    code, data, err = ingest(capsys, database, "anthropic", "--request", request, "-")
    assert (code, err) == (0, "")
    assert data["captures"][0]["path"] == "-"
    assert set(user_texts(database, data["conversation_id"])) == request_user_texts(
        "anthropic", request
    )


def test_a_request_from_standard_input(
    capsys: pytest.CaptureFixture[str], database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    request, response = exchange("pause_turn")
    stdin(monkeypatch, request.read_bytes())
    code, data, err = ingest(capsys, database, "anthropic", "--request", "-", response)
    assert (code, err) == (0, "")
    assert set(user_texts(database, data["conversation_id"])) == request_user_texts(
        "anthropic", request
    )


def test_standard_input_is_read_once(
    capsys: pytest.CaptureFixture[str], database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin(monkeypatch, b"")
    code, _, err = ingest(capsys, database, "anthropic", "--request", "-", "-")
    assert code == 2 and "only once" in err
    assert not database.exists()


# --- a terminal -------------------------------------------------------------------------------


def test_the_progress_line_shows_on_a_terminal_only(
    capsys: pytest.CaptureFixture[str], database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folders = [str(f) for f in capture_folders("google")[:2]]
    argv = ["--db", f"sqlite:///{database}", "ingest", "--provider", "google", *folders]
    assert cli.main(argv) == 0
    assert capsys.readouterr().err == ""  # not a terminal: no progress
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert cli.main(argv) == 0
    assert "ingest: captures 2/2" in terminal.text
    assert terminal.text.endswith("\r")  # cleared before the summary
    assert "\x1b" not in terminal.text
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == (
        "2 captures: 2 conversations, 0 responses recorded, 2 already stored, 0 failed"
    )


# --- requests of another provider's shape -----------------------------------------------------

SHAPES = [
    ("anthropic", EXAMPLES / "openai" / "web_search_citations" / "1.request.json"),
    ("openai", EXAMPLES / "anthropic" / "web_search_citations" / "1.request.json"),
    ("google", EXAMPLES / "openai" / "web_search_citations" / "1.request.json"),
    ("anthropic", EXAMPLES / "google" / "grounding_search_stream" / "1.request.json"),
]


@pytest.mark.parametrize(("provider", "request_file"), SHAPES)
def test_a_request_of_another_providers_shape_is_refused_naming_it(
    capsys: pytest.CaptureFixture[str], database: Path, provider: str, request_file: Path
) -> None:
    folder = {"google": "grounding_search_stream"}.get(provider, "web_search_citations")
    [response] = (EXAMPLES / provider / folder).glob("1.response.*")
    code, data, err = ingest(capsys, database, provider, "--request", request_file, response)
    assert code == 2
    assert f"--request {request_file}: " in err and "request body" in err
    assert set(data) == FAILURE and data["error_detail"]["type"] == "DecodeError"
    assert not database.exists()


def test_a_folder_of_another_provider_is_refused_naming_its_request(
    capsys: pytest.CaptureFixture[str], database: Path
) -> None:
    code, data, err = ingest(capsys, database, "anthropic", EXAMPLES / "openai")
    assert code == 2 and ".request.json: not an Anthropic request body" in err
    assert set(data) == FAILURE
    assert not database.exists()


# --- a signal ---------------------------------------------------------------------------------


def test_a_signal_stops_the_batch_after_what_was_read(tmp_path: Path, database: Path) -> None:
    """The folder before the stream still arriving (a FIFO) is recorded; SIGTERM while the
    stream is read stops the batch: exit 143, the later capture never started."""
    fifo = tmp_path / "response.sse"
    os.mkfifo(fifo)
    first = EXAMPLES / "anthropic" / "pause_turn"
    later = EXAMPLES / "anthropic" / "mixed_batch"
    argv = ["--db", f"sqlite:///{database}", "ingest", "--provider", "anthropic"]
    child = subprocess.Popen(
        [sys.executable, "-m", "convstore.adapters.cli", *argv, first, fifo, later, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with open(fifo, "w") as writer:
        writer.write("event: ping\ndata: {}\n\n")
        writer.flush()
        time.sleep(1.0)  # the child is reading the stream
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=60)
    assert child.returncode == 143, err
    assert err.endswith("convstore: terminated; what arrived is recorded\n")
    data = json.loads(out)
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    assert data["interrupted"] == "SIGTERM"
    assert [item["path"] for item in data["captures"]] == [str(first), str(fifo)]
    assert data["summary"]["captures"] == 3
    assert list(counts(database)) == [data["captures"][0]["conversation_id"]]
