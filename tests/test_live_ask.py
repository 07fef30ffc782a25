"""`ask` as a person watches it: the answer streams, Ctrl-C keeps what arrived, a paused
turn goes on by itself, and a refused `ask` writes nothing.

Each test runs the real command line against a real HTTP server on 127.0.0.1 that
replays the project's example captures (slowly, where the test watches the stream).
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from convstore.adapters import cli
from convstore.adapters.terminal.live import LiveView
from convstore.adapters.terminal.render import Renderer
from convstore.adapters.wire.preview import Piece
from convstore.domain import (
    AssistantText,
    HostedActivity,
    Reasoning,
    ResponseEnded,
    ResponseStarted,
    TurnEnded,
    TurnStarted,
    UserMessage,
    parse_conversation_id,
)
from convstore.domain.events import Event
from convstore.storage import open_store
from tests.replay_server import EXAMPLES, ReplayServer, Reply
from tests.terminal import Terminal

KEY = "sk-ant-api03-LIVE-ASK-0123456789abcdef-KEY"
MODEL = "claude-sonnet-4-5"
QUESTION = "Where can I drink matcha in Uji?"
SEARCH = EXAMPLES / "anthropic" / "web_search_citations" / "1.response.sse"


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'convstore.db'}"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ReplayServer]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with ReplayServer() as replay:
        yield replay


def slowly(path: Path, pause: float = 0.1) -> Reply:
    """The capture streamed in 200-byte chunks, `pause` seconds apart."""
    return Reply(
        body=path.read_bytes(), content_type="text/event-stream", chunk_size=200, pause=pause
    )


def stored(url: str, conversation: str) -> list[Event]:
    with open_store(url, read_only=True) as store:
        return list(store.service.events(parse_conversation_id(conversation)))


def store_bytes(tmp_path: Path) -> tuple[bytes, bytes]:
    """The store's database file and its write-ahead log (none: empty). The `-shm` index
    is left out: a reader maps it, and it holds no data."""
    wal = tmp_path / "convstore.db-wal"
    return (tmp_path / "convstore.db").read_bytes(), wal.read_bytes() if wal.exists() else b""


class Child:
    """`convstore ask` in a process of its own, its output read as it comes."""

    def __init__(self, url: str, server: ReplayServer, *args: str) -> None:
        command = [sys.executable, "-m", "convstore.adapters.cli", "--db", url, "ask"]
        command += [*args, "--model", MODEL]
        command += ["--cfg", f"providers.anthropic.base_url={server.url}"]
        env = {**os.environ, "ANTHROPIC_API_KEY": KEY}
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        self.out = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        while chunk := self.process.stdout.read1(4096):
            self.out += chunk

    def wait_for(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text.encode() not in self.out:
            assert self.process.poll() is None, f"ended before {text!r}: {self.out!r}"
            assert time.monotonic() < deadline, f"no {text!r} in {self.out!r}"
            time.sleep(0.02)

    def finish(self) -> tuple[int, str, str]:
        code = self.process.wait(timeout=60)
        self._reader.join(timeout=10)
        assert self.process.stderr is not None
        return code, self.out.decode(), self.process.stderr.read().decode()


def conversation_of(out: str) -> str:
    first = out.splitlines()[0]
    assert first.startswith("conversation ")
    return first.removeprefix("conversation ")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ask_streams_and_a_signal_keeps_what_arrived(
    url: str, server: ReplayServer, signum: int
) -> None:
    """The answer shows while it streams, and finished blocks are committed meanwhile; a
    signal halfway leaves the finished blocks and the open one stored, the response
    `abandoned` (interrupted), and exits 128 + N. `repair` then finds nothing to close
    and the conversation goes on."""
    server.enqueue(slowly(SEARCH))
    child = Child(url, server, QUESTION)
    child.wait_for('⚒ web search: "Uji matcha cafés 宇治抹茶"')
    child.wait_for("3 results")
    child.wait_for("Uji, a small city")  # text shown before its block closed
    conversation = conversation_of(child.out.decode())
    committed = stored(url, conversation)  # the writer commits while the stream goes on
    assert any(isinstance(e, HostedActivity) for e in committed)
    assert not any(isinstance(e, ResponseEnded) for e in committed)
    child.process.send_signal(signum)
    code, out, err = child.finish()
    assert code == 128 + signum
    assert ("interrupted" if signum == signal.SIGINT else "terminated") in err
    assert "abandoned (interrupted)" in out
    events = stored(url, conversation)
    [end] = [e for e in events if isinstance(e, ResponseEnded)]
    assert (end.state, end.end_reason, end.error) == ("abandoned", "interrupted", None)
    texts = [e for e in events if isinstance(e, AssistantText)]
    assert texts[0].text.startswith("I'll search")
    assert texts[-1].attributions_complete is False  # the open block: a partial commit
    assert any(t.text.startswith("Uji, a small city") for t in texts)
    assert isinstance(events[-1], TurnEnded) and events[-1].state == "abandoned"
    shown = subprocess.run(
        [sys.executable, "-m", "convstore.adapters.cli", "--db", url, "show", conversation],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "response ended: abandoned (interrupted)" in shown
    code = cli.main(["--db", url, "repair", conversation, "--json"])
    assert code == 0
    assert len(stored(url, conversation)) == len(events)  # nothing was left open
    server.enqueue(Reply(body=SEARCH.read_bytes(), content_type="text/event-stream"))
    again = Child(url, server, "And tomorrow?", "--conversation", conversation)
    code, out, err = again.finish()
    assert code == 0, err
    sent = json.loads(server.requests[-1].body)
    assert sent["messages"][0]["content"][0]["text"] == QUESTION
    assert sent["messages"][-1]["content"][-1]["text"] == "And tomorrow?"


def test_ask_quiet_prints_only_the_answer(
    url: str, server: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.enqueue(Reply(body=SEARCH.read_bytes(), content_type="text/event-stream"))
    base = f"providers.anthropic.base_url={server.url}"
    code = cli.main(["--db", url, "ask", QUESTION, "--quiet", "--model", MODEL, "--cfg", base])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out.startswith("I'll search for current information")
    assert "⚒" not in out and "conversation " not in out and "Sources:" not in out
    assert "Enjoy your trip" in out


def test_a_paused_turn_is_continued_by_itself(
    url: str, server: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """`pause_turn`: the paused assistant content is sent back unchanged, and the
    continuation is its own response in the same turn."""
    folder = EXAMPLES / "anthropic" / "pause_turn"
    for number in (1, 2):
        body = (folder / f"{number}.response.sse").read_bytes()
        server.enqueue(Reply(body=body, content_type="text/event-stream"))
    base = f"providers.anthropic.base_url={server.url}"
    code = cli.main(["--db", url, "ask", QUESTION, "--model", MODEL, "--cfg", base, "--json"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert len(data["responses"]) == 2
    assert data["response"] == data["responses"][-1]
    assert [r["ended"] for r in data["responses"]] == ["completed", "completed"]
    first, second = (json.loads(r.body) for r in server.requests)
    assert second["messages"][0] == first["messages"][0]
    paused = second["messages"][1]
    assert paused["role"] == "assistant"
    recorded = json.loads((folder / "2.request.json").read_bytes())["messages"][1]
    assert paused["content"] == recorded["content"]  # as the provider sent it
    events = stored(url, data["conversation_id"])
    assert [type(e) for e in events if isinstance(e, TurnStarted | TurnEnded)] == [
        TurnStarted,
        TurnEnded,
    ]
    starts = [e.response_id for e in events if isinstance(e, ResponseStarted)]
    assert starts == [r["response_id"] for r in data["responses"]]


def test_max_continuations_zero_stops_after_the_pause(
    url: str, server: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    body = (EXAMPLES / "anthropic" / "pause_turn" / "1.response.sse").read_bytes()
    server.enqueue(Reply(body=body, content_type="text/event-stream"))
    base = f"providers.anthropic.base_url={server.url}"
    argv = ["--db", url, "ask", QUESTION, "--model", MODEL, "--cfg", base, "--json"]
    code = cli.main([*argv, "--cfg", "ask.max_continuations=0"])
    out, _ = capsys.readouterr()
    assert code == 0
    assert len(json.loads(out)["responses"]) == 1
    assert len(server.requests) == 1


def test_an_http_error_is_printed_and_recorded(
    url: str, server: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    error = EXAMPLES / "anthropic" / "errors" / "2.response.json"
    server.enqueue(Reply(status=400, body=error.read_bytes()))
    base = f"providers.anthropic.base_url={server.url}"
    code = cli.main(["--db", url, "ask", QUESTION, "--model", MODEL, "--cfg", base, "--json"])
    out, err = capsys.readouterr()
    assert code == 3
    detail = json.loads(error.read_bytes())["error"]
    assert f"anthropic answered HTTP 400 {detail['type']}: {detail['message']}" in err
    data = json.loads(out)
    assert data["error_detail"] == {
        "type": detail["type"],
        "message": detail["message"],
        "status": 400,
    }
    assert data["error"] == f"HTTP 400 {detail['type']}: {detail['message']}"
    assert [e.blocks for e in stored(url, data["conversation_id"]) if isinstance(e, UserMessage)]


def _refusals(server: ReplayServer, conversation: str) -> dict[tuple[str, str], list[str]]:
    """(why, what the error says) → the command's arguments."""
    base = ["--cfg", f"providers.anthropic.base_url={server.url}"]
    model = ["--model", MODEL]
    return {
        ("no model", "no model to send the request to"): ["ask", QUESTION, *base],
        ("unknown configuration key", "unknown configuration key 'ask.colour'"): [
            "ask",
            QUESTION,
            *model,
            *base,
            "--cfg",
            "ask.colour=1",
        ],
        ("unknown top-level key", "unknown configuration key 'colour'"): [
            "ask",
            QUESTION,
            *model,
            *base,
            "--cfg",
            "colour=blue",
        ],
        ("unknown provider block", "providers.x: unknown provider"): [
            "ask",
            QUESTION,
            *model,
            *base,
            "--cfg",
            "providers.x.a=1",
        ],
        ("unknown provider key", "unknown key 'temprature'"): [
            "ask",
            QUESTION,
            *model,
            *base,
            "--cfg",
            "providers.openai.temprature=1",
        ],
        ("unknown hosted tool", "unknown key 'teleport'"): [
            "ask",
            QUESTION,
            *model,
            *base,
            "--cfg",
            "providers.anthropic.hosted_tools.teleport.enable=true",
        ],
        ("hosted tool the model cannot serve", "web_search is not available on model"): [
            "ask",
            QUESTION,
            "--model",
            "claude-3-haiku-20240307",
            *base,
            "--cfg",
            "providers.anthropic.hosted_tools.web_search.enable=true",
        ],
        ("length on a provider without prefill", "--continue-on-length: openai cannot continue"): [
            "ask",
            QUESTION,
            "--provider",
            "openai",
            "--model",
            "gpt-5.1",
            "--continue-on-length",
        ],
        ("empty question", "the question is empty"): ["ask", "  ", *model, *base],
        ("unknown conversation", "no conversation 00000000-0000-0000-0000-000000000000"): [
            "ask",
            QUESTION,
            *model,
            *base,
            "--conversation",
            "0" * 32,
        ],
        ("malformed request", "README.md: not an Anthropic request body"): [
            "ingest",
            "--provider",
            "anthropic",
            "--conversation",
            conversation,
            "--request",
            str(EXAMPLES / "README.md"),
            str(SEARCH),
        ],
    }


def test_each_refused_ask_and_ingest_leaves_the_store_unchanged(
    url: str,
    server: ReplayServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Refused means nothing written: checked before the first write, exit 2."""
    server.enqueue(Reply(body=SEARCH.read_bytes(), content_type="text/event-stream"))
    base = f"providers.anthropic.base_url={server.url}"
    argv = ["--db", url, "ask", QUESTION, "--model", MODEL, "--cfg", base, "--json"]
    assert cli.main(argv) == 0
    conversation = json.loads(capsys.readouterr().out)["conversation_id"]
    before = store_bytes(tmp_path)
    for (why, says), args in _refusals(server, conversation).items():
        code = cli.main(["--db", url, *args])
        _, err = capsys.readouterr()
        assert code == 2, (why, err)
        assert err.startswith("convstore: error: ") and says in err, (why, err)
        assert store_bytes(tmp_path) == before, why
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    code = cli.main(["--db", url, "ask", QUESTION, "--model", MODEL, "--cfg", base, "--json"])
    out, err = capsys.readouterr()
    assert code == 2
    assert "ANTHROPIC_API_KEY" in err
    refused = json.loads(out)
    assert refused["conversation_id"] is None and refused["responses"] == []
    assert refused["error_detail"]["type"] == "ConfigurationError"
    assert store_bytes(tmp_path) == before
    assert len(server.requests) == 1  # none of the refused was sent
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    code = cli.main(["--db", f"sqlite:///{fresh / 'new.db'}", "ask", QUESTION, "--model", MODEL])
    assert code == 2
    assert list(fresh.iterdir()) == []  # a refused ask creates no store


def test_a_signal_during_ingest_records_what_was_read(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A streamed ingest stopped by SIGINT records the capture as far as it was read,
    as a partial commit ended `abandoned` (interrupted), and exits 130."""
    from convstore.adapters.recording import jobs

    whole = SEARCH.read_bytes()
    cut_at = len(whole) // 2

    def read_then_signal(path: Path, *, max_bytes: int | None = None) -> Iterator[bytes]:
        yield whole[:cut_at]
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs before the next read
        yield whole[cut_at:]

    monkeypatch.setattr(jobs, "read_capture", read_then_signal)
    code = cli.main(["--db", url, "ingest", "--provider", "anthropic", str(SEARCH), "--json"])
    out, err = capsys.readouterr()
    assert code == 130
    assert "interrupted; what arrived is recorded" in err
    data = json.loads(out)
    assert data["interrupted"] == "SIGINT"
    events = stored(url, data["conversation_id"])
    [end] = [e for e in events if isinstance(e, ResponseEnded)]
    assert (end.state, end.end_reason) == ("abandoned", "interrupted")
    texts = [e for e in events if isinstance(e, AssistantText)]
    assert texts[0].text.startswith("I'll search") and not texts[-1].attributions_complete
    # The whole capture, ingested again, completes it as the next attempt.
    monkeypatch.undo()
    code = cli.main(["--db", url, "ingest", "--provider", "anthropic", str(SEARCH), "--json"])
    again = json.loads(capsys.readouterr().out)
    assert code == 0
    assert again["responses"][0]["attempt"] == 2


def _stream(message_id: str, text: str, stop_reason: str) -> bytes:
    """A minimal Messages API stream, as the API documents it."""
    events = [
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 12, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": 16},
        },
        {"type": "message_stop"},
    ]
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def test_continue_on_length_sends_the_cut_answer_as_a_prefill(
    url: str, server: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--continue-on-length`: an answer cut at `max_tokens` is sent back as the
    assistant's prefill and continued in the same turn; without it, `ask` stops."""
    cut = _stream("msg_cut_0001", "Uji has grown tea since the", "max_tokens")
    rest = _stream("msg_cut_0002", " 14th century.", "end_turn")
    for body in (cut, rest):
        server.enqueue(Reply(body=body, content_type="text/event-stream"))
    base = f"providers.anthropic.base_url={server.url}"
    argv = ["--db", url, "ask", QUESTION, "--model", MODEL, "--cfg", base]
    assert cli.main([*argv, "--continue-on-length"]) == 0
    out, _ = capsys.readouterr()
    assert out.count("conversation ") == 1
    assert "Uji has grown tea since the\n— tokens in 12, out 16 · max_tokens\n 14th century." in out
    first, second = (json.loads(r.body) for r in server.requests)
    assert second["messages"][:1] == first["messages"]
    assert second["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Uji has grown tea since the"}],
    }
    events = stored(url, conversation_of(out))
    assert [e.turn_id for e in events if isinstance(e, TurnEnded)] == ["turn-1"]
    server.enqueue(Reply(body=cut, content_type="text/event-stream"))
    assert cli.main([*argv, "--conversation", conversation_of(out)]) == 0
    assert len(server.requests) == 3  # no continuation unless asked for


def _view(*, terminal: bool, **options: bool) -> tuple[LiveView, Terminal | io.StringIO]:
    stream: Terminal | io.StringIO = Terminal() if terminal else io.StringIO()
    return LiveView(Renderer(stream), **options), stream


def _shown(stream: Terminal | io.StringIO) -> str:
    return stream.text if isinstance(stream, Terminal) else stream.getvalue()


def test_reasoning_shows_its_first_line_dimmed_on_a_terminal_only() -> None:
    started = ResponseStarted(response_id="r1", provider="anthropic")
    thinking = ["The user asks about Uji.\nI should search", " for cafés.\nThen answer."]
    for terminal in (True, False):
        view, stream = _view(terminal=terminal)
        view.draft(started)
        for piece in thinking:
            view.piece(Piece("reasoning", piece))
        view.draft(Reasoning(response_id="r1", text="".join(thinking)))
        view.piece(Piece("text", "Try Chazen-an."))
        shown = _shown(stream)
        assert "reasoning: The user asks about Uji. …\n" in shown.replace("\x1b[2m", "").replace(
            "\x1b[0m", ""
        )
        assert "I should search" not in shown and "Try Chazen-an." in shown
        assert ("\x1b[2m" in shown) is terminal
    view, stream = _view(terminal=False, show_reasoning=True)
    view.draft(started)
    for piece in thinking:
        view.piece(Piece("reasoning", piece))
    assert "I should search for cafés.\nThen answer." in _shown(stream)


def test_hostile_text_stays_inert_while_it_streams() -> None:
    view, stream = _view(terminal=True)
    view.draft(ResponseStarted(response_id="r1", provider="anthropic"))
    for piece in ("Hello \x1b]0;pwned\x07", "\x1b[31mred", "\u202eevil", "\x1b", "[2J done"):
        view.piece(Piece("text", piece))
    view.draft(
        HostedActivity(
            activity_id="a1",
            name="web_search",
            state="completed",
            input={"query": "\x1b[1mbold"},
            summary="3 results\x07",
        )
    )
    shown = _shown(stream).replace("\x1b[2m", "").replace("\x1b[0m", "")
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert '⚒ web search: "␛bold" → 3 results␇\n' in shown  # its outcome names it


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_program_starts_is_one_line(tmp_path: Path, signum: int) -> None:
    """Ctrl-C while the commands' modules load exits 128 + N with one line, no traceback.

    The child reports each module it loads (`-X importtime`, on stderr): the signal goes
    out once the program's own modules are loading, after `run` took the signals."""
    script = Path(sys.executable).with_name("convstore")
    command = [sys.executable, "-X", "importtime", str(script), "--db", str(tmp_path / "x.db")]
    child = subprocess.Popen([*command, "list"], stderr=subprocess.PIPE)
    assert child.stderr is not None
    lines: list[bytes] = []
    for line in child.stderr:
        lines.append(line)
        if line.rstrip().endswith(b"convstore.adapters.cli.registry"):  # inside program's
            child.send_signal(signum)
            break
    lines += child.stderr.readlines()
    assert child.wait(timeout=30) == 128 + signum
    said = [line for line in lines if not line.startswith(b"import time:")]
    word = b"interrupted" if signum == signal.SIGINT else b"terminated"
    assert said == [b"convstore: " + word + b"\n"]


LIVE_SEARCHES = {
    "anthropic": ("web_search_citations/1.response.sse", "claude-sonnet-4-5", ""),
    "openai": ("web_search_citations/1.response.sse", "gpt-5.1", "/v1"),
    "google": ("grounding_search_stream/1.response.sse", "gemini-2.5-flash", "/v1beta"),
}


@pytest.mark.parametrize("provider", sorted(LIVE_SEARCHES))
def test_each_provider_streams_its_answer_once(
    url: str,
    provider: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pieces shown early and the drafts that close their blocks add up to the answer
    once, for every provider; the hosted search has its line, and the turn its spend."""
    capture, model, path = LIVE_SEARCHES[provider]
    for variable in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(variable, KEY)
    with ReplayServer() as replay:
        body = (EXAMPLES / provider / capture).read_bytes()
        replay.enqueue(Reply(body=body, content_type="text/event-stream", chunk_size=97))
        base = f"providers.{provider}.base_url={replay.url}{path}"
        argv = ["--db", url, "ask", QUESTION, "--provider", provider, "--model", model]
        code = cli.main([*argv, "--cfg", base])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    events = stored(url, conversation_of(out))
    answer = "".join(e.text for e in events if isinstance(e, AssistantText))
    shown = re.sub(r"\[\d+\]", "", out)  # the citation markers, set at each block's end
    for paragraph in filter(None, (p.strip() for p in answer.split("\n"))):
        assert shown.count(paragraph) == 1, paragraph
    assert "⚒ web search: " in out
    assert "— 1 search" in out or "searches" in out
