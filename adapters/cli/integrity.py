"""Checking and upgrading a store: `audit`, `verify`, `anchor`, `migrate`."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import TYPE_CHECKING

from convstore.adapters.cli.registry import (
    PROG,
    Progress,
    Session,
    all_ids,
    command,
    json_flag,
    path,
    read_file,
    resolve_id,
)
from convstore.adapters.terminal import render
from convstore.domain.errors import IntegrityError

if TYPE_CHECKING:
    from convstore.projections.chain import ChainStatus

EXIT_BROKEN = 5
"""`verify` found a changed, removed, reordered or unreadable event, `show`, `export` or
`audit` read a conversation whose stored chain does not hold (they still show what is
stored), or `anchor` met stored events that cannot be read: a distinct code, so scripts
can tell tampering from usage errors (2), interrupted responses (3) and conflicts (4)."""


def chain_warning(status: ChainStatus, conversation_id: object) -> str:
    """The stderr line for a conversation whose stored chain does not hold (unsanitized)."""
    first = status.problems[0].problem if status.problems else "a break"
    more = len(status.problems) - 1
    others = f" (and {more} more)" if more > 0 else ""
    return (
        f"{PROG}: warning: conversation {conversation_id} does not verify: its chain breaks"
        f" at version {status.first_bad_version}: {first}{others}; what is shown is what is"
        f" stored (see `{PROG} verify {conversation_id}`)"
    )


def _audit_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("id", nargs="?", help="the conversation's id")
    which.add_argument("--all", action="store_true", help="every conversation, oldest first")
    json_flag(parser)


@command(
    "audit", "report hosted work, spend, tool calls, payloads and chain heads", _audit_arguments
)
def audit_command(args: argparse.Namespace, session: Session) -> int:
    """Per conversation and turn: hosted activity lifecycles, orphaned tool calls, hosted
    counts beside the provider's counters, responses, the payload inventory (metadata only)
    and the chain head, verified as it is read (`chain`). Exit 0; 5 when a conversation's
    stored chain does not hold (it is still audited, with a warning) or its stored events
    cannot be read (run `verify`)."""
    import msgspec

    from convstore.projections import audit
    from convstore.projections.chain import chain_status

    store = session.reader
    service = store.service
    one = args.id is not None
    ids = [resolve_id(store, args.id)] if one else list(all_ids(store))
    progress = Progress(session.err, "audit") if args.all else None
    broken = 0

    def reports() -> Iterator[audit.ConversationAudit]:
        nonlocal broken
        for position, conversation in enumerate(ids, 1):
            report: audit.ConversationAudit | None = None
            try:
                read = audit.audit(service.events(conversation), store.repository.placed)
            except IntegrityError as error:
                problem = (
                    f"{PROG}: conversation {conversation} cannot be read: "
                    f"{render.one_line(str(error))} (see `{PROG} verify`)"
                )
            else:
                status = chain_status(store, conversation, lineage=False)
                report = msgspec.structs.replace(read, chain=status)
                problem = "" if status.intact else chain_warning(status, conversation)
            if problem:
                broken += 1
                if progress is not None:
                    progress.clear()
                session.err.line(problem)
            if report is not None:
                yield report
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
    return EXIT_BROKEN if broken else 0


def _verify_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("id", nargs="?", help="one conversation's id (default: all)")
    which.add_argument("--all", action="store_true", help="every conversation (the default)")
    parser.add_argument(
        "--anchor",
        type=path,
        metavar="FILE",
        help="also compare with the chain heads `convstore anchor` exported earlier",
    )
    json_flag(parser)


@command(
    "verify",
    "check the stored hash chains for changed, removed, moved or unreadable events (exit 5 if any)",
    _verify_arguments,
)
def verify_command(args: argparse.Namespace, session: Session) -> int:
    """Walk each conversation's chain in the stored bytes; list every break by conversation
    and version, and every event this convstore cannot read (as `audit` does). Exit 0 when
    intact, 5 when anything is broken or unreadable."""
    from convstore.projections import verify

    anchors = None
    if args.anchor is not None:
        anchors = verify.parse_anchors(read_file(args.anchor), source=str(args.anchor))
    conversation = resolve_id(session.reader, args.id) if args.id is not None else None
    progress = Progress(session.err, "verify") if conversation is None else None
    try:
        report = verify.verify(session.reader, conversation, anchors=anchors, progress=progress)
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
        "-o", "--output", type=path, metavar="FILE", help="write the anchor file here"
    )
    json_flag(parser)


@command(
    "anchor", "export every conversation's chain head, for `verify --anchor`", _anchor_arguments
)
def anchor_command(args: argparse.Namespace, session: Session) -> int:
    """Without `-o`, stdout is the anchor file itself (JSON); with it, the file is written
    (replaced atomically, never through a link: `projections.files`) and a summary
    printed. Keep it where the store's writers cannot change it. A conversation whose
    newest event holds no readable hash is written without a head and named on stderr:
    every other one is anchored, and the exit is 5."""
    from convstore.projections import verify
    from convstore.projections.files import write_file

    progress = Progress(session.err, "anchor")
    try:
        anchors = verify.export_anchors(session.reader, progress=progress)
    finally:
        progress.clear()
    data = verify.dump_anchors(anchors).decode("ascii")
    unanchored = verify.unanchored(anchors)
    for conversation, why in unanchored.items():
        session.err.line(
            f"{PROG}: conversation {conversation} is not anchored: {render.one_line(why)}"
            f" (see `{PROG} verify {conversation}`)"
        )
    code = EXIT_BROKEN if unanchored else 0
    if args.output is None:
        session.out.write(data)
        return code
    write_file(args.output, [data])
    heads = len(anchors) - len(unanchored)
    if args.json:
        summary = {"file": str(args.output), "conversations": heads}
        session.out.json({**summary, "unreadable": list(unanchored)})
    else:
        session.out.line(f"{heads} chain heads written to {args.output}")
    return code


def _migrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--encrypt",
        action="store_true",
        help="write an encrypted copy of this plain store to --to (this one is only read)",
    )
    parser.add_argument("--to", metavar="URL", help="the new encrypted store (with --encrypt)")
    json_flag(parser)


@command(
    "migrate", "apply the store migrations this version has and the store lacks", _migrate_arguments
)
def migrate_command(args: argparse.Namespace, session: Session) -> int:
    """Bring the store's tables up to this version, in place: each missing migration in a
    transaction of its own. Any writing command does the same on open; this one says what
    it did, for a store that read-only readers refused. Exit 0; 2 for a newer store.
    `--encrypt --to URL` writes an encrypted copy instead and reports both chain heads of
    each conversation."""
    if args.encrypt or args.to is not None:
        return _encrypt_copy(args, session)
    store = session.store
    applied = store.recorder.migrated
    recorded = store.recorder.applied_migrations()
    if args.json:
        session.out.json(
            {
                "store": str(store.location),
                "applied": list(applied),
                "migrations": [
                    {"position": m.position, "name": m.name, "applied_at": m.applied_at}
                    for m in recorded
                ],
            }
        )
        return 0
    for name in applied:
        session.out.line(f"applied {name}")
    latest = recorded[-1].name if recorded else "none"
    state = "migrated" if applied else "up to date"
    count = len(recorded)
    session.out.line(f"{state}: {count} migration{'' if count == 1 else 's'}, latest {latest}")
    return 0


def _encrypt_copy(args: argparse.Namespace, session: Session) -> int:
    from convstore.domain.errors import ConfigurationError
    from convstore.storage.encrypting import encrypt_copy

    if not (args.encrypt and args.to):
        raise ConfigurationError(
            "an encrypted copy needs both: `convstore migrate --encrypt --to URL`"
        )
    copy = encrypt_copy(session.reader, args.to)
    if args.json:
        session.out.json(
            {
                "store": copy.source,
                "to": copy.target,
                "events": copy.events,
                "conversations": [
                    {
                        "conversation_id": c.conversation_id,
                        "events": c.events,
                        "source_head": c.source_head,
                        "head": c.head,
                    }
                    for c in copy.conversations
                ],
            }
        )
        return 0
    for c in copy.conversations:
        session.out.line(f"{c.conversation_id}: {c.events} events, {c.source_head} -> {c.head}")
    count = len(copy.conversations)
    session.out.line(
        f"copied {count} conversation{'' if count == 1 else 's'} ({copy.events} events), "
        f"encrypted, to {copy.target}"
    )
    return 0
