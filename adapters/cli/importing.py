"""`convstore import FORMAT PATH`: record the histories other tools hold."""

from __future__ import annotations

import argparse
import signal

from convstore.adapters.cli.registry import PROG, Progress, Session, command, json_flag, path
from convstore.adapters.importing.formats import FORMATS
from convstore.adapters.terminal import render


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("format", choices=FORMATS, help="what PATH holds")
    parser.add_argument("source", type=path, metavar="PATH", help="the file or folder to import")
    json_flag(parser)


@command("import", "record the histories other tools hold (llm, pydantic-ai, …)", _arguments)
def import_command(args: argparse.Namespace, session: Session) -> int:
    """Exit 0; 2 when the source is refused before the first write (missing, of another
    format, unreadable: nothing written) or a conversation of it could not be recorded
    (the others go on; running it again resumes); 130 or 143 when a signal stopped it
    after the conversation being recorded. Idempotent: what an earlier import recorded is
    counted `already_stored`, never recorded twice."""
    from convstore.adapters.importing.formats import importer
    from convstore.adapters.importing.record import record_all
    from convstore.adapters.recording.live import Interrupts

    reader = importer(args.format)
    total = reader.plan(args.source)  # a refusal: the program prints it, nothing written
    progress = Progress(session.err, "import")
    with Interrupts() as interrupts:
        try:
            report = record_all(
                session.service,
                args.format,
                reader.read(args.source),
                progress=lambda done: progress("conversations", done, total),
                stopped=lambda: interrupts.signum,
            )
        finally:
            progress.clear()
    summary = report.summary()
    if args.json:
        session.out.json(summary)
    else:
        for item in report.conversations:
            where = item.conversation_id or "not recorded"
            session.out.line(
                f"{item.source_id} → {where}: {item.responses} response(s) recorded, "
                f"{item.already_stored} already stored, {len(item.losses)} loss(es)"
            )
            for loss in item.losses:
                session.out.line(f"  lost: {loss.event}: {loss.kind}: {loss.reason}")
        session.out.line(
            f"{summary['conversations']} conversation(s): {summary['responses']} response(s)"
            f" recorded, {summary['already_stored']} already stored, {summary['failed']} failed"
        )
    for item in report.failed:
        session.err.line(
            f"{PROG}: error: {render.one_line(item.source_id)}: {render.one_line(item.error or '')}"
        )
    if report.interrupted is not None:
        stopped = "interrupted" if report.interrupted == signal.SIGINT else "terminated"
        session.err.line(f"{PROG}: {stopped}; run it again to import the rest")
        return 128 + report.interrupted
    return 2 if report.failed else 0
