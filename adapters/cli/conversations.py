"""Reading conversations: `list`, `show`, `export`."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from convstore.adapters.cli.integrity import EXIT_BROKEN, chain_warning
from convstore.adapters.cli.registry import (
    PROG,
    Progress,
    Session,
    all_ids,
    command,
    json_flag,
    path,
    positive_number,
    resolve_id,
    whole_number,
)
from convstore.adapters.terminal import render
from convstore.domain.errors import ConfigurationError, IntegrityError

if TYPE_CHECKING:
    from pathlib import Path

    from convstore.domain import ConversationId, ConversationSummary
    from convstore.projections.chain import ChainStatus
    from convstore.projections.export import Exportable
    from convstore.projections.portable import PortableConversation


LIST_HEADER = f"{'ID':<8}  {'STARTED':<23}  {'PROVIDER/MODEL':<28}  {'TURNS':>5}  TITLE"
"""The listing's header, its columns as wide as `values.summary_line`'s."""


def _moment(text: str) -> datetime:
    """`--since`: an ISO 8601 date or time (`values.moment`)."""
    from convstore.adapters.terminal import values

    try:
        return values.moment(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _until(text: str) -> datetime:
    """`--until`: a date reaches to the end of that day (`values.until`)."""
    from convstore.adapters.terminal import values

    try:
        return values.until(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--offset", type=whole_number, default=0, help="skip N conversations")
    parser.add_argument("--limit", type=positive_number, default=50, help="show at most N (50)")
    parser.add_argument("--oldest", action="store_true", help="oldest first (default: newest)")
    parser.add_argument("--provider", help="only those whose newest response is this provider's")
    parser.add_argument("--model", help="only those whose newest response is this model's")
    parser.add_argument(
        "--since", type=_moment, metavar="WHEN", help="started at or after (ISO 8601, UTC)"
    )
    parser.add_argument(
        "--until", type=_until, metavar="WHEN", help="started before (a date: up to its end)"
    )
    parser.add_argument("--title", metavar="TEXT", help="titles holding TEXT, in any case")
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="L",
        help="with label L (repeatable: all of them)",
    )
    json_flag(parser)


@command("list", "list conversations, newest first", _list_arguments)
def list_conversations(args: argparse.Namespace, session: Session) -> int:
    """A header, one line per conversation (short id, started, provider/model, turns,
    title), then how many of how many are shown; with `--json`, every field."""
    from convstore.adapters.terminal import values
    from convstore.domain import ConversationFilter

    where = ConversationFilter(
        provider=args.provider,
        model=args.model,
        since=args.since,
        until=args.until,
        title=args.title,
        labels=tuple(args.label),
    )
    service = session.reader.service
    summaries = service.list(
        offset=args.offset, limit=args.limit, newest_first=not args.oldest, where=where
    )
    if args.json:
        session.out.json_array(_summary_data(summary) for summary in summaries)
        return 0
    total = service.count(where)
    if summaries:
        session.out.line(LIST_HEADER)
        session.out.lines(values.summary_line(summary) for summary in summaries)
    start = f" (from {args.offset + 1:,})" if args.offset and summaries else ""
    session.out.line(f"{len(summaries):,} of {total:,} shown{start}")
    return 0


def _summary_data(summary: ConversationSummary) -> dict[str, Any]:
    """A listed conversation as JSON: today's keys, and `conversation_id`, `created_at`."""
    from convstore.adapters.terminal import values

    data: dict[str, Any] = values.to_data(summary)
    data["conversation_id"] = data["id"]
    data["created_at"] = _iso(summary.created_on)
    last = summary.last_activity_at
    data["last_activity_at"] = None if last is None else _iso(last)
    return data


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the conversation's id (see `convstore list`)")
    json_flag(parser)
    parser.add_argument(
        "--chain",
        action="store_true",
        help="with --json: an object {chain, events}, the chain's status beside the events",
    )


@command("show", "show a conversation's events in order", _show_arguments)
def show(args: argparse.Namespace, session: Session) -> int:
    """The conversation as a readable transcript, or its events as JSON (payload metadata
    only, redacted text marked; with `--chain`, `{"chain": …, "events": […]}`). Its
    stored chain is verified as it is read: when it does not hold, a warning on stderr,
    what is stored is shown all the same, and the exit is 5."""
    from convstore.adapters.terminal import transcript, values
    from convstore.adapters.wire.providers import read_payload
    from convstore.domain.redaction import overlay
    from convstore.projections import chain, portable, presentation

    if args.chain and not args.json:
        raise ConfigurationError("--chain shapes the --json output: use it with --json")
    conversation_id = resolve_id(session.reader, args.id)
    store = session.reader
    try:
        everything = store.service.history(conversation_id)  # a fork's parent's first
    except IntegrityError as error:
        return _unreadable(session, conversation_id, error)
    status = chain.chain_status(store, conversation_id)
    listed = overlay(everything, keep=True) if args.json else everything
    if args.json and args.chain:
        session.out.write(f'{{"chain": {render.to_json(chain.to_data(status))}, "events": ')
        session.out.json_array(values.to_data(event) for event in listed)
        session.out.line("}")
    elif args.json:
        session.out.json_array(values.to_data(event) for event in listed)
    else:
        reading = portable.fold(everything, read_payload)
        session.out.lines(transcript.transcript_lines(presentation.present(reading, status)))
    if status.intact:
        return 0
    session.err.line(chain_warning(status, conversation_id))
    return EXIT_BROKEN


def _unreadable(session: Session, conversation_id: ConversationId, error: Exception) -> int:
    """Stored events that cannot be read at all: nothing to show; say why, exit 5."""
    from convstore.projections.chain import chain_status

    status = chain_status(session.reader, conversation_id)
    if not status.intact:
        session.err.line(chain_warning(status, conversation_id))
    session.err.line(
        f"{PROG}: conversation {conversation_id} cannot be read: "
        f"{render.one_line(str(error))} (see `{PROG} verify`)"
    )
    return EXIT_BROKEN


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("id", nargs="?", help="the conversation's id")
    which.add_argument("--all", action="store_true", help="every conversation, oldest first")
    parser.add_argument(
        "--format",
        required=True,
        choices=("json", "jsonl", "md", "otel", "pydantic-ai"),
        help="the export format (otel: OpenTelemetry spans as OTLP JSON, the `otel` extra;"
        " pydantic-ai: a message history an agent continues from)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="a file (or a folder; PATH/ makes it) for one conversation; the folder for --all"
        " (default: stdout)",
    )
    where.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="--format otel: send the spans to this OTLP/HTTP receiver instead (a bare"
        " http://host:port gets /v1/traces; headers from OTEL_EXPORTER_OTLP_HEADERS)",
    )
    parser.add_argument(
        "--no-content",
        action="store_true",
        help="--format otel: leave out the messages, tool arguments and results",
    )
    parser.add_argument(
        "--progress", action="store_true", help="count on stderr even when it is no terminal"
    )
    json_flag(parser)


@command(
    "export",
    "export conversations as JSON, JSONL, Markdown, OTel spans or pydantic-ai histories",
    _export_arguments,
)
def export_command(args: argparse.Namespace, session: Session) -> int:
    """Without `-o`, the export itself on stdout (inert); with it, files written only inside
    the chosen folder (one per conversation for --all), and `--json` prints a summary
    (with `chain`). `--format otel --otlp-endpoint URL` sends each conversation's spans to
    that receiver instead. Each conversation's stored chain is verified as it is read: one
    that does not hold is still exported (the Markdown says so at the top), named on stderr,
    and the exit is 5. `--all` passes over a conversation whose stored events cannot be
    read, naming it on stderr, exports the others and exits 5 (as `audit --all` does)."""
    sending = args.otlp_endpoint is not None
    if args.json and args.output is None and not sending:
        raise ConfigurationError(
            "--json summarizes the files written: use it with -o PATH (or --otlp-endpoint)"
        )
    if args.format != "otel" and (sending or args.no_content):
        option = "--otlp-endpoint" if sending else "--no-content"
        raise ConfigurationError(f"{option} belongs to --format otel")
    kind = _kind(args, session)
    folder = args.output is not None and args.output.endswith(("/", os.sep))
    args.output = path(args.output) if args.output is not None else None
    try:
        return _exported(args, session, kind, folder)
    finally:
        if kind.close is not None:
            kind.close()


def _exported(args: argparse.Namespace, session: Session, kind: _Kind, folder: bool) -> int:
    """`export_command` once its format is known: the exit status."""
    from convstore.projections import export

    sending = kind.send is not None
    run = _Export(args, session, kind)
    if args.id is not None:
        conversation_id = resolve_id(session.reader, args.id)
        try:
            document = kind.load(conversation_id)
        except IntegrityError as error:
            return _unreadable(session, conversation_id, error)
        status = run.checked(document)
        if kind.send is not None:
            run.sent(document)
            files: list[Path] = []
        elif args.output is None:
            for chunk in kind.render(document, status):
                session.out.write(chunk)
            return run.code
        else:
            if folder and not args.output.exists():
                _make_folder(args.output)
            chunks = kind.render(document, status)
            files = [export.write_document(args.output, document, kind.extension, chunks)]
    else:
        written = run.all()
        if written is None:
            return run.code
        files = written
    if args.json:
        data: dict[str, Any] = {
            "format": args.format,
            "conversations": run.spans.count if sending else len(files),
            "files": [str(f) for f in files],
            "chain": run.summary(),
        }
        if sending:
            data.update(endpoint=kind.endpoint, spans=run.spans.total)
        session.out.json(data)
    elif sending:
        session.out.line(
            f"{run.spans.count} conversation(s), {run.spans.total} span(s) sent to "
            f"{render.one_line(kind.endpoint)}"
        )
    else:
        session.out.line(f"{len(files)} conversation(s) exported to {args.output}")
    return run.code


def _make_folder(path: Path) -> None:
    """`-o NEW/` names a folder: made (not its parents), as `--all` makes its own."""
    try:
        path.mkdir(mode=0o700)
    except OSError as error:
        raise ConfigurationError(f"cannot make the folder {path}: {error.strerror}") from None


class _Kind(NamedTuple):
    """How one export format reads a conversation and renders it."""

    load: Callable[[ConversationId], Exportable]
    """The conversation's document (raises IntegrityError for unreadable stored events)."""
    render: Callable[[Any, ChainStatus | None], Iterable[str]]
    """A document (of `load`) as text chunks, given its chain status."""
    extension: str
    """Its files' extension."""
    separator: str = ""
    """Between two documents on stdout."""
    array: bool = False
    """On stdout, the documents of --all are one JSON array."""
    send: Callable[[Any], int] | None = None
    """For --otlp-endpoint: send a document's spans, return how many were sent."""
    endpoint: str = ""
    """Where `send` sends."""
    close: Callable[[], None] | None = None
    """Releases what `send` holds (the exporter's connections)."""


def _kind(args: argparse.Namespace, session: Session) -> _Kind:
    """The export format's reading and rendering; for otel, ConfigurationError (exit 2)
    without the `otel` extra, or with an endpoint that is no http(s) URL."""
    from convstore.adapters.wire.providers import read_payload
    from convstore.projections import export, portable

    service = session.reader.service
    if args.format != "otel":
        format = args.format

        def load(conversation_id: ConversationId) -> Exportable:
            return portable.load(service, conversation_id, read_payload)

        def native(conversation: PortableConversation) -> str:
            """A format its adapter builds from the stored events (pydantic-ai)."""
            from convstore.adapters.importing.pydantic_ai.export import history_json
            from convstore.domain import ConversationId

            events = service.history(ConversationId(conversation.id))
            return history_json(conversation.id, events)

        return _Kind(
            load=load,
            render=lambda document, status: export.render(document, format, status, native),
            extension=format,
            separator={"md": export.MD_SEPARATOR, "json": ","}.get(format, ""),
            array=format == "json",
        )
    try:
        from convstore.projections import otel, otlp
    except ModuleNotFoundError as error:  # the base install has no OpenTelemetry SDK
        raise ConfigurationError(
            f"--format otel needs the `otel` extra ({error.name} is not installed): "
            "pip install 'convstore[otel]'"
        ) from None
    content = not args.no_content

    def read(conversation_id: ConversationId) -> Exportable:
        return otel.read(service.history(conversation_id), read_payload)

    send = close = None
    endpoint = ""
    if args.otlp_endpoint is not None:
        endpoint = otlp.traces_url(args.otlp_endpoint)
        exporter = otlp.http_exporter(endpoint)

        def send(document: Any) -> int:
            trace = otel.spans(document, content=content)
            if not otlp.send(trace, exporter):
                raise ConfigurationError(
                    f"the OTLP receiver at {render.one_line(endpoint)} did not take the spans"
                    f" of conversation {document.id} (unreachable, or it refused them)"
                )
            return len(trace)

        close = exporter.shutdown

    return _Kind(
        load=read,
        render=lambda document, status: otlp.render(document, content=content),
        extension=otlp.EXTENSION,
        send=send,
        endpoint=endpoint,
        close=close,
    )


class _Sent:
    """What --otlp-endpoint sent: conversations and spans."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0


class _Export:
    """One export's state: the conversations that could not be read, the broken chains."""

    def __init__(self, args: argparse.Namespace, session: Session, kind: _Kind) -> None:
        self.args = args
        self.session = session
        self.kind = kind
        self.unreadable = 0
        self.broken: dict[str, ChainStatus] = {}
        self.spans = _Sent()

    @property
    def code(self) -> int:
        """The exit status so far."""
        return EXIT_BROKEN if self.unreadable or self.broken else 0

    def checked(self, conversation: Exportable) -> ChainStatus:
        """The conversation's chain status, a broken one named on stderr."""
        from convstore.projections.chain import chain_status

        status = chain_status(self.session.reader, conversation.id)
        if not status.intact:
            self.broken[str(conversation.id)] = status
            self.session.err.line(chain_warning(status, conversation.id))
        return status

    def sent(self, document: Exportable) -> None:
        """Send the document's spans to the OTLP receiver (--otlp-endpoint)."""
        assert self.kind.send is not None  # only called when sending
        self.spans.total += self.kind.send(document)
        self.spans.count += 1

    def all(self) -> list[Path] | None:
        """Every conversation, to stdout (None), into the folder (the files written), or to
        the OTLP receiver (no files)."""
        from convstore.projections import export

        args, session, kind = self.args, self.session, self.kind
        ids = list(all_ids(session.reader))
        progress = Progress(session.err, "export")
        forced, shown = args.progress and not progress.enabled, 0.0

        def count(done: int) -> None:
            nonlocal shown
            progress("conversations", done, len(ids))
            if forced and (done == len(ids) or time.monotonic() - shown >= 1):
                shown = time.monotonic()
                session.err.line(f"export: conversations {done}/{len(ids)}")

        def readable() -> Iterator[Exportable]:
            for conversation in ids:
                try:
                    yield kind.load(conversation)
                except IntegrityError as error:
                    self.unreadable += 1
                    progress.clear()
                    session.err.line(
                        f"{PROG}: conversation {conversation} cannot be read, not exported: "
                        f"{render.one_line(str(error))} (see `{PROG} verify`)"
                    )

        def status_of(conversation: Exportable) -> ChainStatus:
            progress.clear()
            return self.checked(conversation)

        try:
            if kind.send is not None:
                for done, document in enumerate(readable(), 1):
                    status_of(document)
                    self.sent(document)
                    count(done)
                return []
            if args.output is not None:
                return export.write_documents(
                    readable(),
                    args.output,
                    kind.extension,
                    kind.render,
                    progress=count,
                    chain=status_of,
                )
            if kind.array:  # one JSON document, streamed one element a line
                session.out.write("[\n")
            for done, conversation in enumerate(readable(), 1):
                status = status_of(conversation)
                if done > 1:
                    session.out.write(kind.separator)
                for chunk in kind.render(conversation, status):
                    session.out.write(chunk)
                count(done)
            if kind.array:
                session.out.write("]\n")
            return None
        finally:
            progress.clear()

    def summary(self) -> dict[str, Any]:
        """`chain` of the `--json` summary: whether every exported chain holds, the first
        bad version (of the one conversation; null with --all), each broken conversation."""
        one, broken = self.args.id is not None, self.broken
        first = next(iter(broken.values())).first_bad_version if one and broken else None
        return {
            "intact": not broken,
            "first_bad_version": first,
            "broken": [
                {"conversation_id": key, "first_bad_version": status.first_bad_version}
                for key, status in broken.items()
            ],
        }
