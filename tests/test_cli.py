"""The command line end to end: `main([...])` in process and a fresh `python -m` process."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convstore.adapters import cli
from convstore.adapters.cli import demo, program, registry
from convstore.domain import (
    ActivityId,
    AssistantText,
    Attribution,
    CallId,
    ConversationId,
    Event,
    HostedActivity,
    ProviderPayload,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    Source,
    ToolCallRequested,
    ToolCallResponded,
    TurnEnded,
    TurnId,
    TurnStarted,
    UserMessage,
)
from convstore.storage import open_store
from tests import sample_conversation as sample

# What the hostile conversation injects; none of it may reach a terminal.
INJECTED = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
OSC_TITLE = "\x1b]0;pwned\x07"
HYPERLINK = "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"
CLEAR = "\x1b[2J\x1b[H"
HOSTILE_TITLE = f"Report {OSC_TITLE}{HYPERLINK}"
HOSTILE_TEXTS = {
    "user": f"hello {CLEAR}world\rOVERWRITTEN \u202eevil\u202c \x9b31m",
    "assistant": f"answer \x07\x1b[31mred\x1b[0m \u2066iso\u2069 {HYPERLINK}",
    "tool": "result\x08\x08\x08 \x1bP1;2|secret\x1b\\ \x85 done",
    "query": f"query {OSC_TITLE}",
    "source_title": f"Title {CLEAR}",
    "url": f"https://example.org/{OSC_TITLE}",
}
R1 = ResponseId("msg_hostile")


@pytest.fixture
def url(tmp_path: Path) -> str:
    """An empty store (a writer made it: read commands create none)."""
    location = f"sqlite:///{tmp_path / 'convstore.db'}"
    open_store(location).close()
    return location


@pytest.fixture
def sample_id(url: str) -> Iterator[ConversationId]:
    with open_store(url) as store:
        yield sample.build(store.service)


def hostile_drafts() -> list[Event]:
    source = Source(kind="web", url=HOSTILE_TEXTS["url"], title=HOSTILE_TEXTS["source_title"])
    payload = ProviderPayload.of("anthropic", "content_block", b'{"x":"\\u001b]0;t\\u0007"}')
    return [
        TurnStarted(turn_id=TurnId(f"t{CLEAR}")),
        UserMessage(blocks=(HOSTILE_TEXTS["user"],)),
        ResponseStarted(response_id=R1, provider="anthropic", model=f"m{OSC_TITLE}"),
        HostedActivity(
            activity_id=ActivityId("a1"),
            name=f"web_search{CLEAR}",
            state="started",
            response_id=R1,
            input={"query": HOSTILE_TEXTS["query"]},
            payload=payload,
        ),
        AssistantText(
            response_id=R1,
            text=HOSTILE_TEXTS["assistant"],
            attributions=(Attribution(source=source, excerpt=f"quote {HYPERLINK}"),),
        ),
        ToolCallRequested(
            response_id=R1, call_id=CallId("c1"), name=f"f{OSC_TITLE}", arguments={"k": CLEAR}
        ),
        ResponseEnded(response_id=R1, state="completed", finish_reason="tool_use"),
        ToolCallResponded(call_id=CallId("c1"), content=HOSTILE_TEXTS["tool"]),
        TurnEnded(turn_id=TurnId(f"t{CLEAR}")),
    ]


@pytest.fixture
def hostile(url: str) -> Iterator[tuple[ConversationId, list[Event]]]:
    with open_store(url) as store:
        conversation = store.service.start(HOSTILE_TITLE, [f"label{OSC_TITLE}"])
        recorded = store.service.append(conversation, hostile_drafts())
        yield conversation, recorded


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_process(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "convstore.adapters.cli", *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def payload_values(data: Any) -> list[Any]:
    """Every `value` key anywhere in decoded JSON (payload values must never appear)."""
    if isinstance(data, dict):
        found = [data["value"]] if "value" in data else []
        return found + [v for item in data.values() for v in payload_values(item)]
    if isinstance(data, list):
        return [v for item in data for v in payload_values(item)]
    return []


# --- list -------------------------------------------------------------------------------------


def test_list_prints_one_line_per_conversation(
    capsys: pytest.CaptureFixture[str], url: str, sample_id: ConversationId
) -> None:
    with open_store(url) as store:
        second = store.service.start("Second\nconversation")
    code, out, err = run(capsys, "--db", url, "list")
    assert (code, err) == (0, "")
    header, *lines, closing = out.splitlines()
    assert header.split() == ["ID", "STARTED", "PROVIDER/MODEL", "TURNS", "TITLE"]
    assert len(lines) == 2 and closing == "2 of 2 shown"  # newest first
    assert lines[1].startswith(str(sample_id)[:8] + "  ")
    assert lines[1].endswith("  anthropic/claude-sonnet-4-5       1  Matcha in Uji")
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", lines[1])
    assert lines[0].startswith(str(second)[:8]) and lines[0].endswith("  0  Second conversation")


def test_list_pages_with_offset_and_limit(capsys: pytest.CaptureFixture[str], url: str) -> None:
    with open_store(url) as store:
        ids = [store.service.start(f"c{n}") for n in range(5)]
    code, out, _ = run(capsys, "--db", url, "list", "--offset", "1", "--limit", "2")
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[1:-1]] == [str(i)[:8] for i in ids[3:1:-1]]
    assert lines[-1] == "2 of 5 shown (from 2)"
    code, out, _ = run(capsys, "--db", url, "list", "--oldest", "--offset", "1", "--limit", "2")
    assert [line.split()[0] for line in out.splitlines()[1:-1]] == [str(i)[:8] for i in ids[1:3]]


def test_list_json_shape(
    capsys: pytest.CaptureFixture[str], url: str, sample_id: ConversationId
) -> None:
    code, out, _ = run(capsys, "list", "--json", "--db", url)  # --db after the command too
    assert code == 0
    [summary] = json.loads(out)
    assert summary == {
        "id": str(sample_id),
        "title": "Matcha in Uji",
        "labels": ["demo", "web-search"],
        "created_on": summary["created_on"],
        "events": 15,
        "conversation_id": str(sample_id),
        "created_at": summary["created_at"],
        "last_activity_at": summary["last_activity_at"],
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "turns": 1,
        "forked_from": None,
    }
    assert summary["created_on"].endswith("+00:00") and summary["created_at"].endswith("Z")
    assert summary["last_activity_at"] >= summary["created_at"]


def test_db_defaults_to_the_environment(
    capsys: pytest.CaptureFixture[str],
    url: str,
    sample_id: ConversationId,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONVSTORE_URL", url)
    code, out, _ = run(capsys, "list")
    assert code == 0 and out.splitlines()[1].startswith(str(sample_id)[:8])


def test_empty_store_lists_nothing(capsys: pytest.CaptureFixture[str], url: str) -> None:
    assert run(capsys, "--db", url, "migrate")[0] == 0  # a writer makes the store
    assert run(capsys, "--db", url, "list") == (0, "0 of 0 shown\n", "")
    assert run(capsys, "--db", url, "list", "--json") == (0, "[\n]\n", "")


@pytest.mark.parametrize(
    "argv",
    [
        ["list"],
        ["show", "00000000-0000-4000-8000-000000000000"],
        ["export", "--all", "--format", "json"],
        ["search", "--no-catch-up", "umbrella"],
        ["verify", "--all"],
        ["audit", "--all"],
        ["replay", "00000000-0000-4000-8000-000000000000", "--to", "anthropic"],
    ],
)
def test_reading_a_missing_store_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    """Scenario 32: a read command given a store that does not exist exits 2 and creates
    nothing; `verify` of a missing store never says intact."""
    for missing in (tmp_path / "none.db", tmp_path / "no" / "folder.db"):
        code, out, err = run(capsys, "--db", str(missing), *argv)
        assert (code, out) == (2, "")
        assert "no convstore store" in err and "intact" not in err
    assert list(tmp_path.iterdir()) == []


# --- show -------------------------------------------------------------------------------------


def test_show_renders_the_transcript(
    capsys: pytest.CaptureFixture[str], url: str, sample_id: ConversationId
) -> None:
    code, out, err = run(capsys, "--db", url, "show", str(sample_id))
    assert (code, err) == (0, "")
    for expected in [
        f"conversation {sample_id} — Matcha in Uji",
        "turn turn-1 (user)",
        f"  user: {sample.QUESTION}",
        "reasoning: The user wants cafés in Uji",
        f'    ⚒ web search: "{sample.QUERY}" → 3 results\n',
        f"[1] {sample.TITLE} — {sample.URL}",
        'tool call get_weather (toolu_01DemoGetWeather): {"location":"Uji, Kyoto"}',
        "      tool result: Tomorrow: 14 °C, light rain (70 %)",
        "response ended: completed · stop (provider: end_turn)",
        "turn turn-1 ended: completed · 1 search · tokens in 20286, out 404",
        "chain: intact · head ",
    ]:
        assert expected in out
    assert out.count("⚒") == 1  # one line per activity, its outcome on it
    for opaque in ("signature", "encrypted_content", "encrypted_index", sample.opaque("index")):
        assert opaque not in out


def test_show_json_lists_events_without_payload_values(
    capsys: pytest.CaptureFixture[str], url: str, sample_id: ConversationId
) -> None:
    code, out, _ = run(capsys, "--db", url, "show", str(sample_id), "--json")
    assert code == 0
    events = json.loads(out)
    assert [e["type"] for e in events] == [
        "Started",
        "TurnStarted",
        "UserMessage",
        "ResponseStarted",
        "Reasoning",
        "HostedActivity",
        "HostedActivity",
        "AssistantText",
        "ToolCallRequested",
        "ResponseEnded",
        "ToolCallResponded",
        "ResponseStarted",
        "AssistantText",
        "ResponseEnded",
        "TurnEnded",
    ]
    assert [e["originator_version"] for e in events] == list(range(1, 16))
    assert all(e["originator_id"] == str(sample_id) and e["hash"] for e in events)
    assert payload_values(events) == []
    with open_store(url) as store:
        stored = list(store.service.events(sample_id))
    reasoning = stored[4].payload  # type: ignore[attr-defined]
    assert events[4]["payload"] == {
        "provider": "anthropic",
        "format": "content_block",
        "version": "",
        "size": len(reasoning.raw),
    }
    replay = events[7]["attributions"][0]["replay"]
    assert set(replay) == {"provider", "format", "version", "size"}
    assert sample.opaque("signature") not in out


# --- hostile content --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [["show", "{id}"], ["show", "{id}", "--json"], ["list"], ["list", "--json"]],
    ids=["show", "show-json", "list", "list-json"],
)
def test_hostile_content_never_reaches_the_terminal(
    capsys: pytest.CaptureFixture[str],
    url: str,
    hostile: tuple[ConversationId, list[Event]],
    argv: list[str],
) -> None:
    """Scenario 16 (SQLite; both backends: test_reliability_terminal.py): show and list are inert,
    the stored bytes unchanged."""
    conversation, recorded = hostile
    code, out, err = run(capsys, "--db", url, *(a.format(id=conversation) for a in argv))
    assert code == 0 and err == ""
    assert INJECTED.findall(out) == []
    assert "pwned" in out or "json" not in argv  # the text is shown, made inert
    # The stored bytes are unchanged: every hostile text reads back exactly as written.
    with open_store(url) as store:
        stored = list(store.service.events(conversation))
    assert stored[1:] == recorded
    assert stored[0].title == HOSTILE_TITLE  # type: ignore[attr-defined]
    assert stored[2].blocks == (HOSTILE_TEXTS["user"],)  # type: ignore[attr-defined]
    assert stored[5].text == HOSTILE_TEXTS["assistant"]  # type: ignore[attr-defined]
    assert stored[8].content == HOSTILE_TEXTS["tool"]  # type: ignore[attr-defined]


def test_hostile_json_round_trips_to_the_stored_text(
    capsys: pytest.CaptureFixture[str], url: str, hostile: tuple[ConversationId, list[Event]]
) -> None:
    conversation, _ = hostile
    _, out, _ = run(capsys, "--db", url, "show", str(conversation), "--json")
    events = json.loads(out)
    assert events[0]["title"] == HOSTILE_TITLE
    assert events[5]["text"] == HOSTILE_TEXTS["assistant"]
    assert events[5]["attributions"][0]["source"]["url"] == HOSTILE_TEXTS["url"]


def test_hostile_show_in_a_fresh_process(
    url: str, hostile: tuple[ConversationId, list[Event]]
) -> None:
    """Scenario 16: the same in a fresh process."""
    conversation, _ = hostile
    done = run_process("--db", url, "show", str(conversation))
    assert done.returncode == 0, done.stderr
    assert INJECTED.findall(done.stdout + done.stderr) == []
    assert "hello ␛␛world␍OVERWRITTEN \ufffdevil\ufffd ␛" in done.stdout


# --- errors -----------------------------------------------------------------------------------


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_unknown_id_exits_2_with_one_line(capsys: pytest.CaptureFixture[str], url: str) -> None:
    unknown = "00000000-0000-4000-8000-000000000000"
    code, out, err = run(capsys, "--db", url, "show", unknown)
    assert (code, out) == (2, "")
    line = one_error_line(err)
    assert line.startswith("convstore: error: ") and unknown in line


@pytest.mark.parametrize("bad", ["not-a-uuid", f"x{OSC_TITLE}\u202e\n2nd line"])
def test_malformed_id_exits_2_with_one_sanitized_line(
    capsys: pytest.CaptureFixture[str], url: str, bad: str
) -> None:
    code, out, err = run(capsys, "--db", url, "show", bad)
    assert (code, out) == (2, "")
    assert one_error_line(err).startswith("convstore: error: ")
    assert INJECTED.findall(err) == []


@pytest.mark.parametrize(
    "argv",
    [[], ["bogus\x1b]0;t\x07"], ["list", "--limit", "0"], ["list", "--offset", "-1"], ["show"]],
)
def test_usage_errors_exit_2_sanitized(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.startswith("usage: convstore")
    assert INJECTED.findall(err) == []


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "list" in out and "show" in out


def test_unexpected_errors_exit_1_with_a_short_sanitized_line(
    capsys: pytest.CaptureFixture[str], url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(args: Any, session: registry.Session) -> int:
        raise RuntimeError(f"boom {OSC_TITLE}\nsecond line")

    command = registry.Command("list", "", lambda p: None, broken)
    monkeypatch.setitem(program.COMMANDS, "list", command)
    code, out, err = run(capsys, "--db", url, "list")
    assert (code, out) == (1, "")
    line = one_error_line(err)
    assert line == "convstore: internal error: RuntimeError: boom ␛ second line"


def test_errors_in_a_fresh_process(url: str) -> None:
    """Scenario 16: error messages naming hostile input are inert."""
    done = run_process("--db", url, "show", "00000000-0000-4000-8000-000000000000")
    assert done.returncode == 2
    assert done.stdout == ""
    assert one_error_line(done.stderr).startswith("convstore: error: ")
    done = run_process("--db", url, "show", f"\x1b]0;{OSC_TITLE}")
    assert done.returncode == 2
    assert INJECTED.findall(done.stderr) == []


# --- the demo ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, Path]:
    """`make demo` once: (exit status, what it printed, its folder)."""
    folder = tmp_path_factory.mktemp("demo")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = demo.main([str(folder)])
    return code, printed.getvalue(), folder


def test_demo_runs_the_main_job_through_the_command_line(
    demo_run: tuple[int, str, Path],
) -> None:
    _, out, folder = demo_run
    assert (folder / "convstore.db").exists()
    assert "Traceback" not in out
    assert INJECTED.findall(out) == []
    commands = [line for line in out.splitlines() if line.startswith("$ convstore ")]
    ingested = [c for c in commands if c.startswith("$ convstore ingest --provider anthropic")]
    sequences = [f for f in (demo.EXAMPLES / "anthropic").iterdir() if f.name != "errors"]
    exchanges = sum(len(list(f.glob("*.response.*"))) for f in sequences)
    assert len(ingested) == exchanges + 1  # and one error capture
    assert any("--conversation" in c for c in ingested)
    # The cut stream exits 3 and what arrived is shown.
    assert "  [exit status 3]" in out
    assert "      assistant: Vague après vague —" in out
    # The web search conversation: the activity line and its sources.
    assert '  ⚒ web search: "Uji matcha cafés 宇治抹茶" → 3 results' in out
    assert "[2] The best matcha cafés in Uji — a local's list — https://www.example.org/" in out
    # The replayed request: pretty JSON, cut short, its size given.
    assert '    "model": "claude-sonnet-4-5",' in out
    assert re.search(r"… \d+ more lines; the request is \d+ bytes of JSON", out)
    for other in demo.available():
        if other != "anthropic":
            assert f"--to {other} --model" in out
            assert "reasoning left out" in out


def test_demo_ends_every_step_as_expected(demo_run: tuple[int, str, Path]) -> None:
    code, out, _ = demo_run
    assert "!!" not in out
    assert re.search(r"already stored in conversation [0-9a-f-]{36}, nothing written", out)
    assert code == 0


# --- signals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signum", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_a_command_stopped_by_a_signal_exits_128_plus_its_number(
    tmp_path: Path, signum: int, code: int, word: str
) -> None:
    """`ingest` of a stream still arriving (a FIFO), stopped: one line, exit 128 + N, and
    the store stays readable."""
    fifo = tmp_path / "response.sse"
    os.mkfifo(fifo)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    argv = ["--db", url, "ingest", "--provider", "anthropic", str(fifo)]
    child = subprocess.Popen(
        [sys.executable, "-m", "convstore.adapters.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with open(fifo, "w") as writer:
        writer.write("event: ping\ndata: {}\n\n")
        writer.flush()
        time.sleep(0.5)  # the child is reading the stream
        child.send_signal(signum)
        _, err = child.communicate(timeout=30)
    assert child.returncode == code
    assert err == f"convstore: {word}\n"
    assert run_process("--db", url, "verify", "--all").returncode == 0


def test_version_and_the_provider_choices(capsys: pytest.CaptureFixture[str]) -> None:
    """`--version`; `--help` lists the providers; `gemini` is accepted for `google`."""
    from importlib.metadata import version

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"convstore {version('convstore')}\n"
    assert cli.main(["ingest", "--help"]) == 0
    assert "--provider {anthropic,openai,google,openai-chat}" in capsys.readouterr().out
    assert cli.main(["replay", "0" * 32, "--to", "gpt", "--dry-run"]) == 2
    assert "'gpt' is not one of anthropic, openai, google, openai-chat (gemini for google)" in (
        capsys.readouterr().err
    )
    parsed = program.build_parser().parse_args(["replay", "0" * 32, "--to", "gemini"])
    assert parsed.provider == "google"


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_shell_completion_completes_commands_options_and_choices(shell: str) -> None:
    """`convstore completion bash|zsh`, sourced in bash (zsh runs it through
    bashcompinit): commands, a command's options, and an option's choices."""
    script = run_process("completion", shell)
    assert script.returncode == 0
    if shell == "zsh":
        assert script.stdout.startswith("autoload -U +X bashcompinit && bashcompinit\n")
        body = script.stdout.split("\n", 1)[1]
    else:
        body = script.stdout
    probe = body + textwrap.dedent(
        """
        t() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _convstore_complete
              echo "${COMPREPLY[*]}"; }
        t convstore ing
        t convstore --db x.db ingest --prov
        t convstore ingest --provider ""
        t convstore export ID --format ""
        t convstore ingest --request ""
        """
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "ingest",
        "--provider",
        "anthropic openai google openai-chat",
        "json jsonl md otel pydantic-ai",
        "",  # a file name: left to the shell's default completion
    ]
