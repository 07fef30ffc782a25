"""Reading conversations: `list`, `show`, `export`."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from pathlib import Path

from convstore.adapters.cli.integrity import EXIT_BROKEN
from convstore.adapters.cli.registry import (
    PROG,
    Progress,
    Session,
    all_ids,
    command,
    json_flag,
    positive_number,
    whole_number,
)
from convstore.adapters.terminal import render, transcript
from convstore.domain import parse_conversation_id
from convstore.domain.errors import ConfigurationError, IntegrityError


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--offset", type=whole_number, default=0, help="skip N conversations")
    parser.add_argument("--limit", type=positive_number, default=50, help="show at most N (50)")
    json_flag(parser)


@command("list", "list conversations, oldest first", _list_arguments)
def list_conversations(args: argparse.Namespace, session: Session) -> int:
    """One line per conversation: id, created, events, title."""
    summaries = session.reader.service.list(offset=args.offset, limit=args.limit)
    if args.json:
        session.out.json_array(transcript.to_data(summary) for summary in summaries)
    else:
        session.out.lines(transcript.summary_line(summary) for summary in summaries)
    return 0


def _show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the conversation's id (see `convstore list`)")
    json_flag(parser)


@command("show", "show a conversation's events in order", _show_arguments)
def show(args: argparse.Namespace, session: Session) -> int:
    """The conversation as a readable transcript, or its events as JSON (payload metadata only)."""
    conversation_id = parse_conversation_id(args.id)
    everything = session.reader.service.history(conversation_id)  # a fork's parent's first
    if args.json:
        session.out.json_array(transcript.to_data(event) for event in everything)
    else:
        session.out.lines(transcript.transcript(everything))
    return 0


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
    json_flag(parser)


@command("export", "export conversations as JSON, JSONL or Markdown", _export_arguments)
def export_command(args: argparse.Namespace, session: Session) -> int:
    """Without `-o`, the export itself on stdout (inert); with it, files written only inside
    the chosen folder (one per conversation for --all), and `--json` prints a summary.
    `--all` passes over a conversation whose stored events cannot be read, naming it on
    stderr, exports the others and exits 5 (as `audit --all` does)."""
    from convstore.adapters.wire.providers import read_payload
    from convstore.projections import export, portable

    if args.json and args.output is None:
        raise ConfigurationError("--json summarizes the files written: use it with -o PATH")
    service = session.reader.service
    unreadable = 0
    if args.id is not None:
        conversation = portable.load(service, parse_conversation_id(args.id), read_payload)
        if args.output is None:
            for chunk in export.render(conversation, args.format):
                session.out.write(chunk)
            return 0
        files = [export.write_one(args.output, conversation, args.format)]
    else:
        ids = list(all_ids(session.reader))
        progress = Progress(session.err, "export")
        forced, shown = args.progress and not progress.enabled, 0.0

        def count(done: int) -> None:
            nonlocal shown
            progress("conversations", done, len(ids))
            if forced and (done == len(ids) or time.monotonic() - shown >= 1):
                shown = time.monotonic()
                session.err.line(f"export: conversations {done}/{len(ids)}")

        def readable() -> Iterator[portable.PortableConversation]:
            nonlocal unreadable
            for conversation in ids:
                try:
                    yield portable.load(service, conversation, read_payload)
                except IntegrityError as error:
                    unreadable += 1
                    progress.clear()
                    session.err.line(
                        f"{PROG}: conversation {conversation} cannot be read, not exported: "
                        f"{render.one_line(str(error))} (see `{PROG} verify`)"
                    )

        loaded = readable()
        try:
            if args.output is None:
                for done, conversation in enumerate(loaded, 1):
                    progress.clear()
                    if done > 1 and args.format == "md":
                        session.out.write(export.MD_SEPARATOR)
                    for chunk in export.render(conversation, args.format):
                        session.out.write(chunk)
                    count(done)
                return EXIT_BROKEN if unreadable else 0
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
    return EXIT_BROKEN if unreadable else 0
