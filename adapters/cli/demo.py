"""`python -m convstore.adapters.cli.demo DIR`: the main job end to end, through the command line.

Every step is a real `convstore` command, run in a fresh process on an embedded SQLite
store at `DIR/convstore.db` and printed as `$ convstore …` followed by its output:

1. ingest the project's example captures (`examples/PROVIDER/SEQUENCE/`): exchange 1
   with its request into a new conversation, each next exchange N with `N.request.json`
   into the same conversation when that request repeats the previous one's messages
   (a response already stored is reported as such and not written again), else into a
   new one;
2. ingest a stream cut short by a provider error: exit status 3, and what arrived is kept;
3. list the conversations and show the web search one (citations, the activity line),
   search every conversation, audit the web search one, verify every hash chain;
4. replay the thinking + tool round trip: the exact Anthropic request that continues
   it, then, for every other provider with an adapter, what a switch would leave out.

Providers without an adapter in this version are skipped. Exit status 0 when every
command exited as expected, else 1.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from convstore.adapters.terminal.render import Renderer
from convstore.adapters.wire.names import PROVIDERS
from convstore.adapters.wire.providers import adapter
from convstore.domain.errors import ConfigurationError
from convstore.domain.events import ResponseEnded

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CUT = EXAMPLES / "anthropic" / "errors" / "1"
"""A stream cut by an `overloaded_error` event after some text."""
WEB_SEARCH, ROUND_TRIP = "anthropic/web_search_citations", "anthropic/thinking_tool_roundtrip"
NEXT_QUESTION = "Thanks! And the day after tomorrow?"
SWITCH_MODELS = {"openai": "gpt-5.1", "google": "gemini-2.5-flash", "openai-chat": "gpt-4.1"}
"""The model a switch of provider would ask (a request needs one)."""
HEAD_LINES = 20


@dataclass(frozen=True)
class Ref:
    """A conversation id learned from an earlier step's `--json` output."""

    name: str


Arg = str | Path | Ref


@dataclass(frozen=True)
class Step:
    """One command: what it shows, its arguments, the exit status it should end with."""

    note: str
    args: tuple[Arg, ...]
    expect: int = 0
    learn: str | None = None
    """Remember the conversation id of this step's `--json` output under this name."""
    head: int | None = None
    """Pretty-print the JSON output and show only its first lines."""


def _history(request: Path) -> list[object]:
    """A request's messages (`messages`, `contents` or `input`)."""
    body = json.loads(request.read_bytes())
    history = body.get("messages") or body.get("contents") or body.get("input")
    return history if isinstance(history, list) else [history]


def _outcome(provider: str, request: Path, response: Path) -> tuple[str, int]:
    """A capture's response id, and the status `ingest` ends with for it: 3 when the
    response ended failed or abandoned (it is recorded as such), else 0."""
    meta = json.loads(response.with_name(f"{response.name.split('.')[0]}.meta.json").read_text())
    drafts = adapter(provider).decode(response.read_bytes(), request.read_bytes(), meta["status"])
    ended = [e for e in drafts if isinstance(e, ResponseEnded)]
    completed = bool(ended) and all(e.state == "completed" for e in ended)
    return (ended[0].response_id if ended else ""), 0 if completed else 3


def _sequence(provider: str, folder: Path) -> Iterator[Step]:
    """Exchange 1 starts a conversation; a later exchange whose request extends the
    previous request's messages continues it, and so does the same request with the same
    response (stored already); any other is a separate question (the same question asked
    again and answered anew included)."""
    name = f"{provider}/{folder.name}"
    responses = sorted(folder.glob("*.response.*"), key=lambda p: int(p.name.split(".")[0]))
    previous: list[object] = []
    answered = ""
    for number, response in enumerate(responses, start=1):
        request = folder / f"{number}.request.json"
        ingest = ("ingest", "--provider", provider, "--request", request, response)
        history = _history(request)
        response_id, status = _outcome(provider, request, response)
        again = history == previous and response_id == answered
        if number == 1:
            title = f"{name}, exchange 1: a new conversation"
            yield Step(title, (*ingest, "--json"), expect=status, learn=name)
        elif again or (len(history) > len(previous) and history[: len(previous)] == previous):
            continued = (*ingest, "--conversation", Ref(name))
            yield Step(f"{name}, exchange {number}", continued, expect=status)
        else:
            title = f"{name}, exchange {number}: a separate question, a new conversation"
            yield Step(title, ingest, expect=status)
        previous, answered = history, response_id


def steps(providers: Sequence[str]) -> Iterator[Step]:
    """The demo's commands, in order."""
    for provider in providers:
        for folder in sorted(p for p in (EXAMPLES / provider).iterdir() if p.is_dir()):
            if folder.name != "errors":
                yield from _sequence(provider, folder)
    cut = (CUT.with_suffix(".request.json"), CUT.with_suffix(".response.sse"))
    yield from [
        Step(
            "a stream cut by a provider error: what arrived is committed, exit status 3",
            ("ingest", "--provider", "anthropic", "--request", *cut, "--json"),
            expect=3,
            learn="errors",
        ),
        Step("what was kept of it", ("show", Ref("errors"))),
        Step("every conversation in the store", ("list",)),
        Step("the web search answer: citations and the search activity", ("show", Ref(WEB_SEARCH))),
        Step(
            "full-text search over every conversation (accents folded)", ("search", "matcha cafe")
        ),
        Step(
            "the audit: activities, spend, tool calls, payloads, chain head",
            ("audit", Ref(WEB_SEARCH)),
        ),
        Step("every hash chain intact", ("verify", "--all")),
        Step(
            "the exact Anthropic request continuing the thinking + tool round trip",
            ("replay", Ref(ROUND_TRIP), "--to", "anthropic", "--user", NEXT_QUESTION),
            head=HEAD_LINES,
        ),
    ]
    for other in providers:
        if other != "anthropic":
            switch = ("--to", other, "--model", SWITCH_MODELS[other], "--dry-run")
            yield Step(
                f"switching it to {other}: what the request would leave out",
                ("replay", Ref(ROUND_TRIP), *switch),
            )


def available() -> list[str]:
    """The providers whose adapter exists in this version."""
    found = []
    for name in PROVIDERS:
        try:
            adapter(name)
        except ConfigurationError:
            continue
        found.append(name)
    return found


def _text(arg: str | Path) -> str:
    """An argument as passed: a path relative to the current folder when it lies inside."""
    if isinstance(arg, Path) and arg.is_relative_to(Path.cwd()):
        return str(arg.relative_to(Path.cwd()))
    return str(arg)


def _shown(text: str) -> str:
    return json.dumps(text, ensure_ascii=False) if " " in text or not text else text


class Demo:
    """Runs steps against one store, remembering the conversation ids they report."""

    def __init__(self, url: str, say: Renderer) -> None:
        self.url, self.say = url, say
        self.ids: dict[str, str] = {}
        self.unexpected = 0

    def run(self, step: Step) -> None:
        """Run one step in a fresh process and show what it printed."""
        missing = [a.name for a in step.args if isinstance(a, Ref) and a.name not in self.ids]
        if missing:
            self.say.line(f"\n# {step.note}: skipped, {missing[0]} was not ingested")
            self.unexpected += 1
            return
        args = [self.ids[a.name] if isinstance(a, Ref) else _text(a) for a in step.args]
        self.say.line(f"\n# {step.note}")
        self.say.line(f"$ convstore {' '.join(map(_shown, args))}")
        done = subprocess.run(
            [sys.executable, "-m", "convstore.adapters.cli", "--db", self.url, *args],
            capture_output=True,
            text=True,
            check=False,
        )
        self.say.lines(f"  {line}".rstrip() for line in self._output(step, done.stdout))
        self.say.lines(f"  {line}".rstrip() for line in done.stderr.splitlines())
        if done.returncode:
            self.say.line(f"  [exit status {done.returncode}]")
        if done.returncode != step.expect:
            self.say.line(f"  !! expected exit status {step.expect}")
            self.unexpected += 1
        if step.learn is not None and done.returncode in (0, 3):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self.ids[step.learn] = json.loads(done.stdout)["conversation_id"]

    def _output(self, step: Step, stdout: str) -> list[str]:
        if step.head is None or not stdout.strip():
            return stdout.splitlines()
        lines = json.dumps(json.loads(stdout), ensure_ascii=False, indent=2).splitlines()
        size = len(stdout.rstrip("\n").encode())
        rest = f"… {len(lines) - step.head} more lines; the request is {size} bytes of JSON"
        return [*lines[: step.head], rest] if len(lines) > step.head else lines


def main(argv: list[str] | None = None) -> int:
    """Run the main job on a fresh store in DIR."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        Renderer(sys.stderr).line("usage: python -m convstore.adapters.cli.demo DIR")
        return 2
    folder = Path(args[0]).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{folder / 'convstore.db'}"
    say = Renderer(sys.stdout)
    providers = available()
    say.line(f"convstore demo: the example captures, through the command line, into {url}")
    say.line(f"(each `$ convstore …` runs `python -m convstore.adapters.cli --db {url} …`)")
    skipped = [name for name in PROVIDERS if name not in providers]
    if skipped:
        say.line(f"(no adapter yet for {', '.join(skipped)}: their examples are skipped)")
    demo = Demo(url, say)
    for step in steps(providers):
        demo.run(step)
    if demo.unexpected:
        say.line(f"\n{demo.unexpected} step(s) did not end as expected (marked !! above)")
        return 1
    say.line(f"\nRead it in a browser: convstore --db {url} serve (the `web` extra:")
    say.line("pip install 'convstore[web]'), then open http://127.0.0.1:8787")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
