"""The command line: `convstore [--db URL] COMMAND [ARGS]`.

Thin by design: each command is one function that calls the library and hands lines to a
`Renderer`, registered in `COMMANDS` by the `command` decorator; every byte written to
stdout and stderr (argparse's usage and errors included) is sanitized on the way.

Exit codes: 0 success; 2 a usage error or a `ConvstoreError` (one line on stderr, no
traceback); 1 anything unexpected (a short line; `CONVSTORE_DEBUG=1` adds the sanitized
traceback); 5 `verify` found a changed, removed or reordered event (`audit`: stored events
that cannot be read); 130 interrupted.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from convstore.adapters import recording, render, transcript
from convstore.adapters.config import load_config, lookup
from convstore.adapters.providers import PROVIDERS
from convstore.adapters.render import Renderer, TextStream
from convstore.domain import (
    AssistantText,
    ConversationId,
    ConversationService,
    ConversationSummary,
    ResponseStarted,
    parse_conversation_id,
)
from convstore.domain.errors import (
    ConfigurationError,
    ConversationNotFound,
    ConvstoreError,
    IntegrityError,
)

if TYPE_CHECKING:
    from convstore.storage import Store

PROG = "convstore"
ENV_URL = "CONVSTORE_URL"
ENV_DEBUG = "CONVSTORE_DEBUG"
MAX_EVENT_BYTES = "limits.max_event_bytes"
"""The configuration key of the largest event a store accepts (DESIGN.md)."""


class Session:
    """What a command runs with: the two renderers, and the store opened on first use."""

    def __init__(
        self, url: str | None, out: Renderer, err: Renderer, cfg: Sequence[str] = ()
    ) -> None:
        self.url = url
        self.out = out
        self.err = err
        self.cfg = cfg
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        """The store at `--db` (opened once, on first use), with the configured limits."""
        if self._store is None:
            from convstore.storage import open_store  # here: `--help` needs no database
            from convstore.storage.mapper import DEFAULT_MAX_EVENT_BYTES

            limit = lookup(load_config(list(self.cfg)), MAX_EVENT_BYTES, DEFAULT_MAX_EVENT_BYTES)
            if type(limit) is not int or limit < 1:
                raise ConfigurationError(
                    f"{MAX_EVENT_BYTES} must be a positive number of bytes, not {limit!r}"
                )
            self._store = open_store(self.url, max_event_bytes=limit)
        return self._store

    @property
    def service(self) -> ConversationService:
        """The application service of the store at `--db`."""
        return self.store.service

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
    _cfg_flag(parser)
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
            count = report.history_messages
            session.out.line(f"  {count} request message{'s' if count != 1 else ''} recorded first")
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


# --- audit, verify, anchor --------------------------------------------------------------------

EXIT_BROKEN = 5
"""`verify` found a changed, removed or reordered event (or `audit` met stored events that
cannot be read): a distinct code, so scripts can tell tampering from usage errors (2),
interrupted responses (3) and conflicts (4)."""


class _Progress:
    """`what: phase done/total` on one stderr line, only when stderr is a terminal.

    The line is redrawn in place: the carriage returns are written here, around text that
    went through the sanitizer.
    """

    def __init__(self, err: Renderer, what: str) -> None:
        self.stream = err.stream
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self.what = what
        self.width = 0
        self.shown_at = 0.0

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or (done < total and now - self.shown_at < 0.1):
            return
        self.shown_at = now
        text = render.one_line(f"{self.what}: {phase} {done}/{total}")
        self.stream.write("\r" + text.ljust(self.width))
        self.width = max(self.width, len(text))

    def clear(self) -> None:
        """Remove the progress line."""
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.width = 0


def _audit_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("id", nargs="?", help="the conversation's id")
    which.add_argument("--all", action="store_true", help="every conversation, oldest first")
    _json_flag(parser)


@command(
    "audit", "report hosted work, spend, tool calls, payloads and chain heads", _audit_arguments
)
def audit_command(args: argparse.Namespace, session: Session) -> int:
    """Per conversation and turn: hosted activity lifecycles, orphaned tool calls, hosted
    counts beside the provider's counters, responses, the payload inventory (metadata only)
    and the chain head. Exit 0; 5 when stored events cannot be read (run `verify`)."""
    from convstore.projections import audit

    service = session.service
    if args.id is not None:
        ids = [parse_conversation_id(args.id)]
    else:
        ids = [s.id for s in _all_summaries(service)]
    progress = _Progress(session.err, "audit") if args.all else None
    unreadable = 0

    def reports() -> Iterator[audit.ConversationAudit]:
        nonlocal unreadable
        for position, conversation in enumerate(ids, 1):
            try:
                yield audit.audit(service.events(conversation))
            except IntegrityError as error:
                unreadable += 1
                if progress is not None:
                    progress.clear()
                session.err.line(
                    f"{PROG}: conversation {conversation} cannot be read: "
                    f"{render.one_line(str(error))} (see `{PROG} verify`)"
                )
            if progress is not None:
                progress("conversations", position, len(ids))

    try:
        if args.json and args.id is not None:
            for report in reports():
                session.out.json(audit.to_data(report))
        elif args.json:
            session.out.json_array(audit.to_data(report) for report in reports())
        else:
            for position, report in enumerate(reports()):
                if progress is not None:
                    progress.clear()
                if position:
                    session.out.line()
                session.out.lines(audit.audit_lines(report))
    finally:
        if progress is not None:
            progress.clear()
    return EXIT_BROKEN if unreadable else 0


def _all_summaries(service: ConversationService) -> Iterator[ConversationSummary]:
    offset = 0
    while page := service.list(offset=offset, limit=500):
        yield from page
        offset += len(page)


def _verify_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("id", nargs="?", help="one conversation's id (default: all)")
    which.add_argument("--all", action="store_true", help="every conversation (the default)")
    parser.add_argument(
        "--anchor",
        type=Path,
        metavar="FILE",
        help="also compare with the chain heads `convstore anchor` exported earlier",
    )
    _json_flag(parser)


@command(
    "verify",
    "check the stored hash chains for changed, removed or moved events (exit 5 if any)",
    _verify_arguments,
)
def verify_command(args: argparse.Namespace, session: Session) -> int:
    """Walk each conversation's chain in the stored bytes; list every break by conversation
    and version. Exit 0 when intact, 5 when anything is broken."""
    from convstore.projections import verify

    anchors = None
    if args.anchor is not None:
        anchors = verify.parse_anchors(_read(args.anchor), source=str(args.anchor))
    conversation = parse_conversation_id(args.id) if args.id is not None else None
    progress = _Progress(session.err, "verify") if conversation is None else None
    try:
        report = verify.verify(session.store, conversation, anchors=anchors, progress=progress)
    finally:
        if progress is not None:
            progress.clear()
    if args.json:
        session.out.json(verify.to_data(report))
    else:
        session.out.lines(verify.verify_lines(report))
    return 0 if report.intact else EXIT_BROKEN


def _anchor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="write the anchor file here"
    )
    _json_flag(parser)


@command(
    "anchor", "export every conversation's chain head, for `verify --anchor`", _anchor_arguments
)
def anchor_command(args: argparse.Namespace, session: Session) -> int:
    """Without `-o`, stdout is the anchor file itself (JSON); with it, the file is written
    (replaced atomically) and a summary printed. Keep it where the store's writers cannot
    change it."""
    from convstore.projections import verify

    progress = _Progress(session.err, "anchor")
    try:
        anchors = verify.export_anchors(session.store, progress=progress)
    finally:
        progress.clear()
    data = verify.dump_anchors(anchors)
    if args.output is None:
        session.out.write(data.decode("ascii"))
        return 0
    _write_atomically(args.output, data)
    if args.json:
        session.out.json({"file": str(args.output), "conversations": len(anchors)})
    else:
        session.out.line(f"{len(anchors)} chain heads written to {args.output}")
    return 0


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise ConfigurationError(f"cannot write {path}: {error.strerror}") from None


# --- export -----------------------------------------------------------------------------------


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("id", nargs="?", help="the conversation's id")
    which.add_argument("--all", action="store_true", help="every conversation, oldest first")
    parser.add_argument(
        "--format", required=True, choices=("json", "jsonl", "md"), help="the export format"
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="PATH",
        help="a file (or a folder) for one conversation; the folder for --all (default: stdout)",
    )
    parser.add_argument(
        "--progress", action="store_true", help="count on stderr even when it is no terminal"
    )
    _json_flag(parser)


@command("export", "export conversations as JSON, JSONL or Markdown", _export_arguments)
def export_command(args: argparse.Namespace, session: Session) -> int:
    """Without `-o`, the export itself on stdout (inert); with it, files written only inside
    the chosen folder (one per conversation for --all), and `--json` prints a summary."""
    from convstore.projections import export, portable

    if args.json and args.output is None:
        raise ConfigurationError("--json summarizes the files written: use it with -o PATH")
    service = session.service
    if args.id is not None:
        conversation = portable.load(service, parse_conversation_id(args.id))
        if args.output is None:
            for chunk in export.render(conversation, args.format):
                session.out.write(chunk)
            return 0
        files = [export.write_one(args.output, conversation, args.format)]
    else:
        ids = [summary.id for summary in _all_summaries(service)]
        progress = _Progress(session.err, "export")
        forced, shown = args.progress and not progress.enabled, 0.0

        def count(done: int) -> None:
            nonlocal shown
            progress("conversations", done, len(ids))
            if forced and (done == len(ids) or time.monotonic() - shown >= 1):
                shown = time.monotonic()
                session.err.line(f"export: conversations {done}/{len(ids)}")

        loaded = (portable.load(service, conversation) for conversation in ids)
        try:
            if args.output is None:
                for done, conversation in enumerate(loaded, 1):
                    progress.clear()
                    if done > 1 and args.format == "md":
                        session.out.write(export.MD_SEPARATOR)
                    for chunk in export.render(conversation, args.format):
                        session.out.write(chunk)
                    count(done)
                return 0
            files = export.write_all(loaded, args.output, args.format, progress=count)
        finally:
            progress.clear()
    if args.json:
        data = {
            "format": args.format,
            "conversations": len(files),
            "files": [str(f) for f in files],
        }
        session.out.json(data)
    else:
        session.out.line(f"{len(files)} conversation(s) exported to {args.output}")
    return 0


# --- search, reindex, project -----------------------------------------------------------------


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0.01 <= value <= 3600:  # NaN fails too
        raise argparse.ArgumentTypeError("must be between 0.01 and 3600 seconds")
    return value


class _LogLines:
    """Routes `convstore.*` log records (gaps, retries) to stderr through the sanitizer."""

    def __init__(self, err: Renderer) -> None:
        import logging

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                err.line(f"{PROG}: {render.one_line(record.getMessage())}")

        self.logger = logging.getLogger("convstore")
        self.handler = Handler(logging.INFO)
        self.saved = self.logger.level

    def __enter__(self) -> None:
        self.logger.addHandler(self.handler)
        if self.logger.level == 0 or self.logger.level > self.handler.level:
            self.logger.setLevel(self.handler.level)

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.saved)


def _projection_report(session: Session, report: object, as_json: bool) -> None:
    from convstore.projections.follower import Report

    assert isinstance(report, Report)
    if as_json:
        session.out.json(msgspec.to_builtins(report))
    else:
        extra = "".join(
            f", {count} {what}"
            for count, what in (
                (report.gaps, "missing ids passed over"),
                (report.conflicts, "batches done by another worker"),
                (report.undecodable, "undecodable events passed over"),
            )
            if count
        )
        session.out.line(
            f"{report.name}: {report.events} events, {report.rows} rows, "
            f"position {report.position if report.position is not None else '-'}{extra}"
        )
    session.out.flush()


def _search_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "query", help='words (all of them), "a phrase", -word, a OR b, prefix*, NEAR(a b, N)'
    )
    parser.add_argument("--limit", type=_positive, default=20, help="show at most N hits (20)")
    parser.add_argument(
        "--no-catch-up",
        dest="catch_up",
        action="store_false",
        help="search the index as it stands, without indexing newer events first",
    )
    _json_flag(parser)


@command("search", "full-text search over every conversation", _search_arguments)
def search_command(args: argparse.Namespace, session: Session) -> int:
    """Brings the index up to the log's head (unless `--no-catch-up`: then says how far
    behind it is), then prints the best hits: conversation, turn, version, kind, and a
    snippet with the matches in [ ]."""
    from convstore.projections import search

    search.parse_query(args.query)  # a query with nothing to search for fails before indexing
    keeper = search.follower(session.store)
    if args.catch_up:
        progress = _Progress(session.err, "indexing")
        try:
            with _LogLines(session.err):
                keeper.catch_up(progress=lambda done, left: progress("events", done, done + left))
        finally:
            progress.clear()
    elif lag := keeper.lag():
        session.err.line(f"the index is {lag} events behind the log (`convstore project`)")
    hits = search.search(session.store, args.query, args.limit, catch_up=False)
    if args.json:
        session.out.json_array(msgspec.to_builtins(hit) for hit in hits)
        return 0
    for hit in hits:
        session.out.line(f"{hit.conversation_id}  {hit.turn_id or '-'}  v{hit.version}  {hit.kind}")
        session.out.line(f"    {render.one_line(hit.snippet)}")
    if not hits:
        session.err.line("no matches")
    return 0


@command("reindex", "rebuild the search index from the event log", _json_flag)
def reindex_command(args: argparse.Namespace, session: Session) -> int:
    """Drops the index (rows and position, in one transaction) and rebuilds it, with
    progress on stderr when it is a terminal."""
    from convstore.projections import search

    progress = _Progress(session.err, "reindex")
    try:
        with _LogLines(session.err):
            report = search.follower(session.store).rebuild(
                progress=lambda done, left: progress("events", done, done + left)
            )
    finally:
        progress.clear()
    _projection_report(session, report, args.json)
    return 0


def _project_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--follow",
        action="store_true",
        help="keep following the log until interrupted (a long-lived worker)",
    )
    parser.add_argument(
        "--interval",
        type=_seconds,
        default=1.0,
        metavar="S",
        help="seconds between polls of the log (SQLite) or retries (1)",
    )
    _json_flag(parser)


@command("project", "bring the search index up to the log's head, or follow it", _project_arguments)
def project_command(args: argparse.Namespace, session: Session) -> int:
    """Once: catch up and report. `--follow`: keep the index current (PostgreSQL: woken by
    LISTEN/NOTIFY; SQLite: polling), one report line per batch, until SIGINT or SIGTERM
    (then exit 0 after the batch in hand)."""
    import signal
    import threading

    from convstore.projections import search

    follower = search.follower(session.store)
    if not args.follow:
        progress = _Progress(session.err, "project")
        try:
            with _LogLines(session.err):
                report = follower.catch_up(
                    progress=lambda done, left: progress("events", done, done + left)
                )
        finally:
            progress.clear()
        _projection_report(session, report, args.json)
        return 0
    stop = threading.Event()
    handlers = {}
    for number in (signal.SIGINT, signal.SIGTERM):
        try:
            handlers[number] = signal.signal(number, lambda *_: stop.set())
        except ValueError:  # not the main thread: interrupt it some other way
            break
    try:
        with _LogLines(session.err):
            follower.follow(
                stop,
                interval=args.interval,
                on_batch=lambda report: _projection_report(session, report, args.json),
            )
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
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
    session = Session(
        args.db or os.environ.get(ENV_URL) or None, out, err, getattr(args, "cfg", ())
    )
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
