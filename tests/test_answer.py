"""Client tool calls without a result: listed, answered, and never written beside a live
writer.

`unanswered_calls` lists a conversation's client tool calls without a ToolCallResponded;
`replay --dry-run` lists them (the provider refuses the request until each has a result);
`convstore answer ID CALL_ID (--text | --result-file | --error)` records the result and
refuses (exit 2, the store unchanged) an unknown call, a hosted activity, a call already
answered, a file it cannot read, and any write while a live writer holds a response open
in the conversation (a real second process: `tests/liveness_child.py`). Once that writer
is killed, the answer closes its response first, as every write does.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convstore.adapters import cli
from convstore.domain import (
    CallId,
    Conversation,
    ConversationId,
    Event,
    HostedActivity,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    TurnEnded,
    UserMessage,
    parse_conversation_id,
)
from convstore.domain.calls import UnansweredCall, unanswered_calls
from convstore.domain.errors import ResponseBeingWritten, ResponseStillOpen
from convstore.storage import open_store
from tests.test_reliability_liveness import Writer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "anthropic"
SEARCH = "srvtoolu_01CKi5AJA9rObe3ptT2w8dmr"
"""The web search mixed_batch/1 leaves pending (a hosted activity: it takes no result)."""
LOOKUP = "toolu_01hPUkq1FX5Nc6k2zMB4qoWT"
"""The client call of mixed_batch/1 (`lookup_order`), without a result."""


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("CONVSTORE_URL", "CONVSTORE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # no user config file


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def ingested(capsys: pytest.CaptureFixture[str], url: str, folder: str) -> str:
    """Exchange 1 of an Anthropic example, ingested with its request: the conversation."""
    [response] = (EXAMPLES / folder).glob("1.response.*")
    request = EXAMPLES / folder / "1.request.json"
    code, out, err = run(
        capsys, "--db", url, "ingest", "--provider", "anthropic", "--request", request, response
    )
    assert code == 0, err
    return out.split()[1]


def stored(url: str, conversation: str) -> list[Event]:
    with open_store(url) as store:
        return list(store.service.events(parse_conversation_id(conversation)))


# --- which calls have no result ------------------------------------------------------------------


def test_unanswered_calls_are_the_client_calls_without_a_result() -> None:
    conversation = Conversation.start()
    rid = ResponseId("msg_1")
    conversation.record_all(
        [
            UserMessage(blocks=("two orders",)),
            ResponseStarted(response_id=rid, provider="anthropic", model="claude-sonnet-4-5"),
            ToolCallRequested(response_id=rid, call_id=CallId("call_a"), name="lookup"),
            HostedActivity(activity_id=SEARCH, name="web_search", state="started", response_id=rid),
            ToolCallRequested(response_id=rid, call_id=CallId("call_b"), name="cancel"),
            ResponseEnded(response_id=rid, state="completed", finish_reason="tool_use"),
        ]
    )
    events = list(conversation.pending)
    assert unanswered_calls(events) == [
        UnansweredCall(call_id=CallId("call_a"), name="lookup", version=4, response_id=rid),
        UnansweredCall(call_id=CallId("call_b"), name="cancel", version=6, response_id=rid),
    ]
    conversation.record(ToolCallResponded(call_id=CallId("call_a"), content="shipped"))
    [left] = unanswered_calls(conversation.pending)
    assert left.call_id == "call_b"  # the hosted search is never among them
    conversation.record(ToolCallResponded(call_id=CallId("call_b"), content="", is_error=True))
    assert unanswered_calls(conversation.pending) == []


def test_a_dry_run_lists_each_call_without_a_result(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    conversation = ingested(capsys, sqlite_url, "mixed_batch")
    dry = ("--db", sqlite_url, "replay", conversation, "--to", "anthropic", "--dry-run")
    code, out, err = run(capsys, *dry)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    [unanswered] = [line for line in lines if "no result" in line]
    assert f"client tool call {LOOKUP} (lookup_order)" in unanswered
    assert f"convstore answer {conversation} {LOOKUP} --text" in unanswered
    # The pending search keeps its tool declared (the configuration enables none): said so.
    [kept] = [line for line in lines if "kept declared" in line]
    assert "web_search stays declared" in kept and SEARCH in kept
    assert lines[0] == (
        "nothing is left out replaying to anthropic (but see below: the provider refuses it"
        " as it stands)"
    )
    code, out, _ = run(capsys, *dry, "--json")
    items = json.loads(out)
    [call] = [item for item in items if item["kind"] == "unanswered_call"]
    assert (call["call_id"], call["name"], call["event"]) == (
        LOOKUP,
        "lookup_order",
        "ToolCallRequested",
    )
    version = next(
        e.originator_version
        for e in stored(sqlite_url, conversation)
        if isinstance(e, ToolCallRequested)
    )
    assert call["version"] == version
    assert [item["kind"] for item in items] == ["kept_declared", "unanswered_call"]


# --- convstore answer ----------------------------------------------------------------------------


def test_answer_records_the_result_and_the_next_request_carries_it(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path
) -> None:
    conversation = ingested(capsys, sqlite_url, "mixed_batch")
    before = stored(sqlite_url, conversation)
    result = tmp_path / "result.json"
    result.write_text('{"status": "in transit", "eta": "jeudi"}\n', encoding="utf-8")
    code, out, err = run(
        capsys,
        "--db",
        sqlite_url,
        "answer",
        conversation,
        LOOKUP,
        "--result-file",
        result,
        "--json",
    )
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert (data["conversation_id"], data["call_id"], data["is_error"]) == (
        conversation,
        LOOKUP,
        False,
    )
    assert data["unanswered"] == []
    after = stored(sqlite_url, conversation)
    assert after[: len(before)] == before  # appended, never rewritten
    added = after[len(before) :]
    [answer] = added  # in the turn the call was made in, still open
    assert not any(isinstance(e, TurnEnded) for e in before)
    assert isinstance(answer, ToolCallResponded)
    assert (answer.call_id, answer.content, answer.is_error, answer.synthetic) == (
        LOOKUP,
        result.read_text(encoding="utf-8"),
        False,
        False,
    )
    assert [e["type"] for e in data["events"]] == ["ToolCallResponded"]
    # The next request carries the result after the pending search, and lists no call.
    code, out, _ = run(capsys, "--db", sqlite_url, "replay", conversation, "--to", "anthropic")
    assert code == 0
    last = json.loads(out)["messages"][-1]
    assert last["role"] == "user"
    assert last["content"][0]["tool_use_id"] == LOOKUP
    code, out, _ = run(
        capsys, "--db", sqlite_url, "replay", conversation, "--to", "anthropic", "--dry-run"
    )
    assert code == 0 and "no result" not in out
    # Answered already: refused, nothing written.
    code, out, err = run(capsys, "--db", sqlite_url, "answer", conversation, LOOKUP, "--text", "x")
    assert (code, out) == (2, "") and "already has a result" in err
    assert stored(sqlite_url, conversation) == after


def test_an_error_result_and_a_text_result(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    conversation = ingested(capsys, sqlite_url, "thinking_tool_roundtrip")
    [call] = [e for e in stored(sqlite_url, conversation) if isinstance(e, ToolCallRequested)]
    code, out, err = run(
        capsys, "--db", sqlite_url, "answer", conversation, call.call_id, "--error", "timeout"
    )
    assert (code, err) == (0, "")
    assert f"tool error for {call.call_id}: timeout" in out
    answer = stored(sqlite_url, conversation)[-1]
    assert isinstance(answer, ToolCallResponded)
    assert (answer.content, answer.is_error) == ("timeout", True)
    other = str(with_a_call(sqlite_url, "call_text"))
    code, out, _ = run(capsys, "--db", sqlite_url, "answer", other, "call_text", "--text", "")
    assert code == 0 and "tool result for call_text" in out
    answer = stored(sqlite_url, other)[-1]
    assert isinstance(answer, ToolCallResponded)
    assert (answer.content, answer.is_error) == ("", False)


def refused(
    capsys: pytest.CaptureFixture[str], url: str, conversation: str, *argv: str | Path
) -> str:
    """Run `answer CONVERSATION ARGV`: exit 2, nothing on stdout, the store unchanged;
    stderr."""
    before = stored(url, conversation)
    code, out, err = run(capsys, "--db", url, "answer", conversation, *argv)
    assert (code, out) == (2, ""), err
    assert err.startswith("convstore: ") and err.count("\n") == 1
    assert stored(url, conversation) == before
    return err


def test_answer_refuses_what_it_cannot_record(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path
) -> None:
    conversation = ingested(capsys, sqlite_url, "mixed_batch")
    err = refused(capsys, sqlite_url, conversation, SEARCH, "--text", "results")
    assert "is a hosted activity (web_search)" in err and "takes no result" in err
    err = refused(capsys, sqlite_url, conversation, "toolu_nothing", "--text", "x")
    assert "no client tool call 'toolu_nothing'" in err
    err = refused(capsys, sqlite_url, conversation, LOOKUP, "--result-file", tmp_path / "missing")
    assert "missing" in err and "cannot be read" in err
    err = refused(capsys, sqlite_url, conversation, LOOKUP, "--result-file", tmp_path)
    assert "is a folder" in err
    latin = tmp_path / "latin.txt"
    latin.write_bytes("déjà".encode("latin-1"))
    err = refused(capsys, sqlite_url, conversation, LOOKUP, "--result-file", latin)
    assert "is not UTF-8 text" in err
    truncated = tmp_path / "cut.gz"
    truncated.write_bytes(gzip.compress(b"in transit" * 100)[:-12])
    err = refused(capsys, sqlite_url, conversation, LOOKUP, "--result-file", truncated)
    assert "truncated gzip" in err
    # Bounded like every input: a file past the store's event limit is not read.
    config = tmp_path / "small.toml"
    config.write_text("[limits]\nmax_event_bytes = 1000\n")
    large = tmp_path / "large.txt"
    large.write_text("x" * 5000)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CONVSTORE_CONFIG", str(config))
        err = refused(capsys, sqlite_url, conversation, LOOKUP, "--result-file", large)
    assert "larger than 1000 bytes" in err
    # One result, and exactly one of its forms.
    for argv in ([LOOKUP], [LOOKUP, "--text", "a", "--error", "b"]):
        code, out, err = run(capsys, "--db", sqlite_url, "answer", conversation, *argv)
        assert (code, out) == (2, "") and "usage:" in err
    code, _, _ = run(capsys, "--db", sqlite_url, "answer", conversation, LOOKUP, "--text", "ok")
    assert code == 0


# --- beside a live writer ------------------------------------------------------------------------


def with_a_call(url: str, call: str) -> ConversationId:
    """A stored conversation whose one response made client call `call`, unanswered."""
    with open_store(url) as store:
        service = store.service
        conversation = service.start("a call")
        rid = ResponseId(f"msg_{call}")
        service.add_user_input(conversation, [UserMessage(blocks=("where is my order?",))])
        outcome = service.ingest(
            conversation,
            iter(
                [
                    ResponseStarted(response_id=rid, provider="anthropic", model="claude-test"),
                    ToolCallRequested(response_id=rid, call_id=CallId(call), name="lookup"),
                    ResponseEnded(response_id=rid, state="completed", finish_reason="tool_use"),
                ]
            ),
        )
        assert outcome.ended == "completed"
    return conversation


@pytest.fixture
def live(store_url: str, tmp_path: Path) -> Iterator[tuple[Writer, str, str]]:
    """A conversation with a client call without a result, in which a second process (a
    live writer) holds a response open: (the writer, the conversation, the call id)."""
    conversation = with_a_call(store_url, "call_live")
    writer = Writer([], store_url, ["--conversation", str(conversation)], tmp_path / "child.log")
    try:
        opened, _ = writer.opened()
        assert opened == conversation
        yield writer, str(conversation), "call_live"
    finally:
        writer.stop()


def test_no_write_beside_a_response_a_live_writer_holds_open(
    live: tuple[Writer, str, str], store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    writer, conversation, call = live
    err = refused(capsys, store_url, conversation, call, "--text", "shipped")
    assert "still being written" in err and "holds its lock" in err
    assert f"convstore repair {conversation} --force" in err
    cid = parse_conversation_id(conversation)
    with open_store(store_url) as store:
        service = store.service
        version = service.get(cid).version
        writes: list[Any] = [
            lambda: service.check_writable(cid, "an ask"),
            lambda: service.answer(cid, CallId(call), "shipped", is_error=False),
            lambda: service.add_user_input(cid, [UserMessage(blocks=("hello?",))]),
            lambda: service.append(cid, [UserMessage(blocks=("hello?",))]),
            lambda: service.abandon_activities(cid),
        ]
        for write in writes:
            with pytest.raises(ResponseBeingWritten, match="still being written"):
                write()
        assert issubclass(ResponseBeingWritten, ResponseStillOpen)  # callers' catch holds
        assert service.get(cid).version == version
        assert service.get(cid).state.open_response is not None

    writer.kill()  # SIGKILL: its hold is released

    with open_store(store_url) as store:
        store.service.check_writable(cid)  # nothing raised, nothing written
        assert store.service.get(cid).version == version

    code, out, err = run(capsys, "--db", store_url, "answer", conversation, call, "--json")
    assert code == 2 and "usage:" in err  # (a result form is required)
    code, out, err = run(
        capsys, "--db", store_url, "answer", conversation, call, "--text", "shipped", "--json"
    )
    assert (code, err) == (0, ""), err
    data = json.loads(out)
    # The dead writer's response is closed first, then the result goes in.
    assert [e["type"] for e in data["events"]] == ["ResponseEnded", "ToolCallResponded"]
    *_, ended, answer = [
        e
        for e in stored(store_url, conversation)
        if isinstance(e, ResponseEnded | ToolCallResponded)
    ]
    assert isinstance(ended, ResponseEnded)
    assert (ended.state, ended.stop_reason) == ("abandoned", "writer_gone")
    assert isinstance(answer, ToolCallResponded) and answer.content == "shipped"


def test_answer_runs_in_a_fresh_process(sqlite_url: str, tmp_path: Path) -> None:
    """The command as a person runs it: `python -m convstore.adapters.cli answer …`."""
    cid = with_a_call(sqlite_url, "call_fresh")
    argv = [sys.executable, "-m", "convstore.adapters.cli", "--db", sqlite_url, "answer"]
    done = subprocess.run(
        [*argv, str(cid), "call_fresh", "--text", "ok"], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert "tool result for call_fresh: ok" in done.stdout
