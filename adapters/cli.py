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
from typing import TYPE_CHECKING

from convstore.adapters import render
from convstore.adapters.render import Renderer, TextStream
from convstore.domain import ConversationService, parse_conversation_id
from convstore.domain.errors import ConversationNotFound, ConvstoreError

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
        session.out.json_array(render.to_data(summary) for summary in summaries)
    else:
        session.out.lines(render.summary_line(summary) for summary in summaries)
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
        session.out.json_array(render.to_data(event) for event in everything)
    else:
        session.out.lines(render.transcript(everything))
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
