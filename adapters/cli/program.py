"""The command line's program: the parser built from the registered commands, and `main`,
which runs one command and maps every outcome to the exit codes (see the package).

May import: everything in convstore; nothing imports it but the package's `main`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence

from convstore.adapters.cli import (
    completion,
    conversations,
    forgetting,
    importing,
    index,
    integrity,
    metadata,
    proxying,
    record,
    redacting,
    viewing,
)
from convstore.adapters.cli.registry import (
    COMMANDS,
    ENV_DEBUG,
    ENV_URL,
    PROG,
    Command,
    LogLines,
    Session,
    error_detail,
)
from convstore.adapters.terminal import render
from convstore.adapters.terminal.render import Renderer, TextStream
from convstore.domain.errors import ConversationForgotten, ConvstoreError

COMMAND_MODULES = (
    conversations,
    metadata,
    record,
    importing,
    proxying,
    viewing,
    integrity,
    forgetting,
    redacting,
    index,
    completion,
)
"""The modules whose `@command` functions make the subcommands, in `--help` order."""


class _OutputFailed(Exception):
    """Writing stdout failed (a full disk, `/dev/full`, an I/O error): exit 2, one line."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error.strerror or str(error))


class _Output:
    """stdout as the renderer's stream: a failed write is an `_OutputFailed`, not an
    internal error (a reader that went away stays a BrokenPipeError)."""

    def __init__(self, stream: TextStream) -> None:
        self.stream = stream
        self.encoding: str | None = getattr(stream, "encoding", None)

    def write(self, text: str, /) -> object:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as error:
            raise _OutputFailed(error) from None

    def flush(self) -> None:
        flush = getattr(self.stream, "flush", None)
        try:
            if flush is not None:
                flush()
        except BrokenPipeError:
            raise
        except OSError as error:
            raise _OutputFailed(error) from None

    def isatty(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage, help and error text go through the renderer."""

    def _print_message(self, message: str, file: TextStream | None = None) -> None:
        if message:
            stream = file or sys.stderr
            Renderer(_Output(stream) if stream is sys.stdout else stream).write(message)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, with one subparser per registered command."""
    parser = _Parser(prog=PROG, description="An event-sourced store for LLM conversations.")
    db_help = f"the store: a path, sqlite:///…, postgresql://… (default: ${ENV_URL}, then a file"
    db_help += " in the user data folder)"
    parser.add_argument("--db", metavar="URL", default=None, help=db_help)
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    # `--db` is accepted after the command too; SUPPRESS keeps the global value if absent.
    common = _Parser(add_help=False)
    common.add_argument("--db", metavar="URL", default=argparse.SUPPRESS, help=db_help)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = [module.__name__ for module in COMMAND_MODULES]
    in_order = sorted(  # stable: within a module, the order of definition; others last
        COMMANDS.values(),
        key=lambda spec: (
            modules.index(spec.run.__module__) if spec.run.__module__ in modules else len(modules)
        ),
    )
    for spec in in_order:
        sub = subparsers.add_parser(
            spec.name, help=spec.help, description=spec.help, parents=[common]
        )
        spec.arguments(sub)
        sub.set_defaults(run=spec.run)
    return parser


class _Version(argparse.Action):
    """`--version`: the installed version, looked up only when asked for (reading the
    package metadata costs more than the rest of `--help`)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("convstore")
        except PackageNotFoundError:  # run from a tree that was never installed
            found = "(not installed)"
        parser._print_message(f"{PROG} {found}\n", sys.stdout)
        parser.exit()


class Stopped(KeyboardInterrupt):
    """A signal other than SIGINT stopped the command; it unwinds as Ctrl-C does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, frame: object) -> None:
    raise Stopped(signum)


def main(argv: Sequence[str] | None = None, *, restore_signals: bool = True) -> int:
    """Run the command line; return the exit code.

    On the main thread, SIGINT and SIGTERM stop the command (exit 130, 143) until its
    outcome is decided, and are ignored from then on; the handlers found are put back on
    return unless `restore_signals` is false (the `convstore` program, which then ends)."""
    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _stop)
        return _main(argv)
    except KeyboardInterrupt as stopped:  # before the command ran, or while it ended
        _finished()
        return _stopped(Renderer(sys.stderr), stopped)
    finally:
        if restore_signals:
            signal.signal(signal.SIGINT, previous[0])
            signal.signal(signal.SIGTERM, previous[1])


def _stopped(err: Renderer, stopped: KeyboardInterrupt) -> int:
    signum: int = getattr(stopped, "signum", signal.SIGINT)  # Stopped, live.SignalStop
    err.line(f"{PROG}: {'interrupted' if signum == signal.SIGINT else 'terminated'}")
    return 128 + signum


def _finished() -> None:
    """The command's work is done: a signal now changes neither its outcome nor its exit
    code (closing the store and flushing stdout go on)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _main(argv: Sequence[str] | None) -> int:
    out, err = Renderer(_Output(sys.stdout)), Renderer(sys.stderr)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # usage errors (2) and --help (0), already printed
        status = exit_.code
        return status if isinstance(status, int) else (0 if status is None else 2)
    except _OutputFailed as failed:  # `--help` to a full disk
        return _output_failed(err, failed)
    session = Session(
        args.db or os.environ.get(ENV_URL) or None, out, err, getattr(args, "cfg", ())
    )
    try:
        with LogLines(err):  # every command's log lines reach stderr sanitized
            code: int = args.run(args, session)
        _finished()
        out.flush()
        return code
    except ConversationForgotten as forgotten:  # said, not failed: exit 0
        _finished()
        _say_forgotten(args, out, forgotten)
        out.flush()
        return 0
    except ConvstoreError as error:
        _finished()
        if getattr(args, "json", False) and not out.wrote:  # scripts read the failure too
            out.json({"error": str(error), "error_detail": error_detail(error)})
        err.line(f"{PROG}: error: {render.one_line(str(error))}")
        return 2
    except KeyboardInterrupt as stopped:
        _finished()
        return _stopped(err, stopped)
    except _OutputFailed as failed:
        _finished()
        return _output_failed(err, failed)
    except BrokenPipeError:
        _finished()
        _silence_stdout()  # the reader went away (`convstore list | head`)
        return 1
    except Exception as error:
        _finished()
        if os.environ.get(ENV_DEBUG):
            import traceback

            err.write(traceback.format_exc())
        detail = render.shorten(str(error), 300)
        err.line(f"{PROG}: internal error: {type(error).__name__}: {detail}")
        return 1
    finally:
        _finished()
        session.close()


def _say_forgotten(
    args: argparse.Namespace, out: Renderer, forgotten: ConversationForgotten
) -> None:
    """A reading (or a write) of a forgotten conversation: when, and nothing else."""
    if getattr(args, "json", False) and not out.wrote:
        out.json(
            {
                "conversation_id": str(forgotten.conversation_id),
                "forgotten_on": forgotten.on.isoformat(),
            }
        )
        return
    from convstore.projections.wording import forgotten_line

    out.line(forgotten_line(forgotten.conversation_id, forgotten.on))


def _output_failed(err: Renderer, failed: _OutputFailed) -> int:
    _silence_stdout()  # what is still buffered must not fail again at exit
    err.line(f"{PROG}: error: cannot write the output: {render.one_line(str(failed))}")
    return 2


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


__all__ = ["COMMANDS", "Command", "Session", "build_parser", "main"]
