"""The command line: `convstore [--db URL] COMMAND [ARGS]`.

Thin by design: each command is one function that calls the library and hands lines to a
`Renderer`, registered in `COMMANDS` by the `command` decorator; every byte written to
stdout and stderr (argparse's usage and errors included) is sanitized on the way.

Exit codes: 0 success; 2 a usage error or a `ConvstoreError` (one line on stderr, no
traceback); 1 anything unexpected (a short line; `CONVSTORE_DEBUG=1` adds the sanitized
traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from convstore.adapters import recording, render, transcript
from convstore.adapters.providers import PROVIDERS
from convstore.adapters.render import Renderer, TextStream
from convstore.domain import (
    AssistantText,
    ConversationId,
    ConversationService,
    ResponseStarted,
    parse_conversation_id,
)
from convstore.domain.errors import ConfigurationError, ConversationNotFound, ConvstoreError

if TYPE_CHECKING:
    from convstore.storage import Store

PROG = "convstore"
ENV_URL = "CONVSTORE_URL"
ENV_DEBUG = "CONVSTORE_DEBUG"


class Session:
    """What a command runs with: the two renderers, and the store opened on first use."""

    def __init__(self, url: str | None, out: Renderer, err: Renderer) -> None:
        self.url = url
        self.out = out
        self.err = err
        self._store: Store | None = None

    @property
    def service(self) -> ConversationService:
        """The application service of the store at `--db` (opened once, on first use)."""
        if self._store is None:
            from convstore.storage import open_store  # here: `--help` needs no database

            self._store = open_store(self.url)
        return self._store.service

    def close(self) -> None:
        """Close the store if a command opened it."""
        if self._store is not None:
            self._store.close()
            self._store = None


Run = Callable[[argparse.Namespace, Session], int]


@dataclass(frozen=True)
class Command:
    """One subcommand: its help line, its arguments, and the function that runs it."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Run


COMMANDS: dict[str, Command] = {}
"""Every subcommand by name, in the order `--help` lists them."""


def command(
    name: str, help: str, arguments: Callable[[argparse.ArgumentParser], None]
) -> Callable[[Run], Run]:
    """Register the decorated function as the subcommand `name`."""

    def register(run: Run) -> Run:
        COMMANDS[name] = Command(name, help, arguments, run)
        return run

    return register


# --- argument types ---------------------------------------------------------------------------


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def _positive(text: str) -> int:
    value = _count(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


# --- commands ---------------------------------------------------------------------------------


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--offset", type=_count, default=0, help="skip N conversations")
    parser.add_argument("--limit", type=_positive, default=50, help="show at most N (50)")
    _json_flag(parser)


@command("list", "list conversations, oldest first", _list_arguments)
def list_conversations(args: argparse.Namespace, session: Session) -> int:
    """One line per conversation: id, created, events, title."""
    summaries = session.service.list(offset=args.offset, limit=args.limit)
    if args.json:
        session.out.json_array(transcript.to_data(summary) for summary in summaries)
    else:
        session.out.lines(transcript.summary_line(summary) for summary in summaries)
    return 0


def _show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the conversation's id (see `convstore list`)")
    _json_flag(parser)


@command("show", "show a conversation's events in order", _show_arguments)
def show(args: argparse.Namespace, session: Session) -> int:
    """The conversation as a readable transcript, or its events as JSON (payload metadata only)."""
    conversation_id = parse_conversation_id(args.id)
    events = session.service.events(conversation_id)
    first = next(events, None)
    if first is None:
        raise ConversationNotFound(f"no conversation {conversation_id}")
    everything = itertools.chain((first,), events)
    if args.json:
        session.out.json_array(transcript.to_data(event) for event in everything)
    else:
        session.out.lines(transcript.transcript(everything))
    return 0


def _provider(text: str) -> str:
    if text not in PROVIDERS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(PROVIDERS)}")
    return text


def _cfg_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cfg",
        action="append",
        default=[],
        metavar="KEY=VALUE|NAME",
        help="a configuration override (providers.anthropic.model=…) or a fragment NAME.toml",
    )


def _ingest_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--provider", type=_provider, required=True, help="the wire format")
    parser.add_argument(
        "--request",
        type=Path,
        metavar="REQ",
        help="the captured request body that produced the first FILE",
    )
    parser.add_argument("--conversation", metavar="ID", help="ingest into this conversation")
    parser.add_argument("--title", help="the title of a new conversation")
    parser.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="response bodies (SSE or JSON), ingested in order",
    )
    _json_flag(parser)


@command("ingest", "record captured response bodies into a conversation", _ingest_arguments)
def ingest(args: argparse.Namespace, session: Session) -> int:
    """Exit 0; 3 when a response ended failed or abandoned; 2 for a file holding no
    response; 4 for a stored response id with different content."""
    conversation = parse_conversation_id(args.conversation) if args.conversation else None
    request = _read(args.request) if args.request is not None else None
    report = recording.ingest(
        session.service,
        args.provider,
        args.files,
        request=request,
        conversation_id=conversation,
        title=args.title,
    )
    if args.json:
        data = {
            "conversation_id": None
            if report.conversation_id is None
            else str(report.conversation_id),
            "responses": [msgspec.to_builtins(outcome) for outcome in report.responses],
        }
        if report.error is not None:
            data["error"] = report.error
        session.out.json(data)
    else:
        if report.conversation_id is not None:
            session.out.line(f"conversation {report.conversation_id}")
        if report.history_messages:
            session.out.line(f"  {report.history_messages} request messages recorded first")
        session.out.lines(transcript.outcome_line(outcome) for outcome in report.responses)
    if report.error is not None:
        session.err.line(f"{PROG}: error: {render.one_line(report.error)}")
    return report.exit_code


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise ConfigurationError(f"cannot read {path}: {error.strerror}") from None


def _replay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the conversation's id")
    parser.add_argument(
        "--to", type=_provider, required=True, dest="provider", help="the provider to continue on"
    )
    parser.add_argument("--user", metavar="TEXT", help="append the next user message")
    parser.add_argument("--model", help="the target model (default: configured or recorded)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print what the request would leave out, not the request",
    )
    _cfg_flag(parser)
    _json_flag(parser)


@command("replay", "print the native request that continues a conversation", _replay_arguments)
def replay(args: argparse.Namespace, session: Session) -> int:
    """The request body as JSON on stdout (never writes to the store); `--dry-run` prints
    the loss report instead."""
    request = recording.replay(
        session.service,
        parse_conversation_id(args.id),
        args.provider,
        cfg=args.cfg,
        model=args.model,
        user=args.user,
    )
    if not args.dry_run:
        session.out.json_text(request.to_json().decode())
    elif args.json:
        session.out.json([msgspec.to_builtins(loss) for loss in request.losses])
    elif not request.losses:
        session.out.line(f"nothing is left out replaying to {args.provider}")
    else:
        session.out.lines(transcript.loss_line(loss) for loss in request.losses)
    return 0


def _ask_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", help="the question")
    parser.add_argument(
        "--provider",
        type=_provider,
        default=None,
        help="default: the conversation's provider, else anthropic",
    )
    parser.add_argument("--conversation", metavar="ID", help="continue this conversation")
    parser.add_argument("--model", help="the model (default: configured or recorded)")
    parser.add_argument("--title", help="the title of a new conversation")
    _cfg_flag(parser)
    _json_flag(parser)


@command("ask", "ask a provider and record its response as it streams", _ask_arguments)
def ask(args: argparse.Namespace, session: Session) -> int:
    """Exit 0, or 3 when the response ended failed or abandoned (what arrived is kept)."""
    conversation = parse_conversation_id(args.conversation) if args.conversation else None
    provider = args.provider or _recorded_provider(session, conversation) or "anthropic"
    report = recording.ask(
        session.service,
        provider,
        args.text,
        conversation_id=conversation,
        cfg=args.cfg,
        model=args.model,
        title=args.title,
    )
    if args.json:
        session.out.json(
            {
                "conversation_id": str(report.conversation_id),
                "response": msgspec.to_builtins(report.response),
                "abandoned_activities": report.abandoned,
            }
        )
    else:
        session.out.line(f"conversation {report.conversation_id}")
        session.out.line(transcript.outcome_line(report.response))
        events = session.service.events(report.conversation_id, after=0)
        answer = [
            e
            for e in events
            if isinstance(e, AssistantText) and e.response_id == report.response.response_id
        ]
        session.out.lines(transcript.transcript(answer))
    return 0 if report.response.ended == "completed" else 3


def _recorded_provider(session: Session, conversation: ConversationId | None) -> str | None:
    if conversation is None:
        return None
    providers = [
        e.provider
        for e in session.service.events(conversation)
        if isinstance(e, ResponseStarted) and e.origin == "provider"
    ]
    return providers[-1] if providers else None


def _repair_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the conversation's id")
    _json_flag(parser)


@command(
    "repair", "close an interrupted response and answer orphaned tool calls", _repair_arguments
)
def repair(args: argparse.Namespace, session: Session) -> int:
    """Append the repairs (never rewrites): the open response ends abandoned, every
    unanswered client tool call gets a synthetic error result."""
    recorded = session.service.repair(parse_conversation_id(args.id))
    if args.json:
        session.out.json_array(transcript.to_data(event) for event in recorded)
    elif not recorded:
        session.out.line("nothing to repair")
    else:
        session.out.lines(transcript.transcript(recorded))
    return 0


# --- the parser and main ----------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage, help and error text go through the renderer."""

    def _print_message(self, message: str, file: TextStream | None = None) -> None:
        if message:
            Renderer(file or sys.stderr).write(message)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, with one subparser per registered command."""
    parser = _Parser(prog=PROG, description="An event-sourced store for LLM conversations.")
    db_help = f"the store: a path, sqlite:///…, postgresql://… (default: ${ENV_URL}, then a file"
    db_help += " in the user data folder)"
    parser.add_argument("--db", metavar="URL", default=None, help=db_help)
    # `--db` is accepted after the command too; SUPPRESS keeps the global value if absent.
    common = _Parser(add_help=False)
    common.add_argument("--db", metavar="URL", default=argparse.SUPPRESS, help=db_help)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for spec in COMMANDS.values():
        sub = subparsers.add_parser(
            spec.name, help=spec.help, description=spec.help, parents=[common]
        )
        spec.arguments(sub)
        sub.set_defaults(run=spec.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    out, err = Renderer(sys.stdout), Renderer(sys.stderr)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # usage errors (2) and --help (0), already printed
        status = exit_.code
        return status if isinstance(status, int) else (0 if status is None else 2)
    session = Session(args.db or os.environ.get(ENV_URL) or None, out, err)
    try:
        code: int = args.run(args, session)
        out.flush()
        return code
    except ConvstoreError as error:
        err.line(f"{PROG}: error: {render.one_line(str(error))}")
        return 2
    except KeyboardInterrupt:
        err.line(f"{PROG}: interrupted")
        return 130
    except BrokenPipeError:
        _silence_stdout()  # the reader went away (`convstore list | head`)
        return 1
    except Exception as error:
        if os.environ.get(ENV_DEBUG):
            err.write(traceback.format_exc())
        detail = render.shorten(str(error), 300)
        err.line(f"{PROG}: internal error: {type(error).__name__}: {detail}")
        return 1
    finally:
        session.close()


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    raise SystemExit(main())
