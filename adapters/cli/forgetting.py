"""`convstore forget`: crypto-shred conversations of an encrypted store (issue 19).

Module-level imports are the standard library's and the registry's only: `--help` loads
this module, and nothing third-party (the domain is imported when a command runs).
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from convstore.adapters.cli.registry import Session, command, json_flag, resolve_id

if TYPE_CHECKING:
    from convstore.domain.vocabulary import ConversationId
    from convstore.storage import Store

_SPAN = re.compile(r"([1-9][0-9]{0,5})([hdw])")
_UNIT = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}
PAGE = 500
"""Conversations listed per page while selecting by age or label."""


def age(text: str) -> timedelta:
    """`90d`, `12h`, `2w`: a retention age (argparse type)."""
    found = _SPAN.fullmatch(text.strip())
    if found is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age: write a whole number and h, d or w (e.g. 90d)"
        )
    return int(found.group(1)) * _UNIT[found.group(2)]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ids", nargs="*", metavar="ID", help="a conversation's id (or prefix)")
    parser.add_argument(
        "--older-than",
        type=age,
        metavar="AGE",
        help="conversations whose last event is older than AGE (e.g. 90d, 12h, 2w)",
    )
    parser.add_argument("--label", metavar="L", help="conversations labelled L")
    parser.add_argument("--all", action="store_true", help="every conversation of the store")
    parser.add_argument("--dry-run", action="store_true", help="list what would go; forget none")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument(
        "--reason", default="", metavar="TEXT", help="why (recorded in clear, never content)"
    )
    json_flag(parser)


@command("forget", "forget conversations: destroy their keys (encrypted stores)", _arguments)
def forget(args: argparse.Namespace, session: Session) -> int:
    """Append each conversation's Forgotten event, then destroy its key and clean up.
    Exit 2, nothing written: a plain store (it names `convstore migrate --encrypt`), no
    selection, IDs beside a retention form, a retention form or `--all` without `--yes`
    off a terminal or unconfirmed on one."""
    from convstore.domain.errors import ConfigurationError
    from convstore.storage import forgetting

    retention = args.all or args.older_than is not None or args.label is not None
    if args.ids and retention:
        raise ConfigurationError("give conversation ids, or --all/--older-than/--label: not both")
    if not args.ids and not retention:
        raise ConfigurationError("name the conversations: ID..., --all, --older-than or --label")
    if "\n" in args.reason or len(args.reason) > 500:
        raise ConfigurationError("--reason is one line of at most 500 characters")
    store = session.reader if args.dry_run else session.store
    forgetting.require_encrypted(store)
    chosen = _selected(store, args) if retention else [resolve_id(store, i) for i in args.ids]
    if not args.dry_run and retention and chosen and not args.yes:
        _confirm(session, len(chosen))
    chosen = list(dict.fromkeys(chosen))  # an id given twice is forgotten once
    when = {} if args.dry_run else forgetting.forget_all(store, chosen, reason=args.reason)
    done: list[dict[str, Any]] = [
        {
            "conversation_id": str(conversation_id),
            "forgotten_on": None if args.dry_run else when[conversation_id].isoformat(),
        }
        for conversation_id in chosen
    ]
    if args.json:
        session.out.json({"dry_run": args.dry_run, "count": len(done), "conversations": done})
        return 0
    verb = "would forget" if args.dry_run else "forgot"
    for item in done:
        session.out.line(f"{verb} {item['conversation_id']}")
    plural = "" if len(done) == 1 else "s"
    session.out.line(f"{verb} {len(done)} conversation{plural}")
    return 0


def _selected(store: Store, args: argparse.Namespace) -> list[ConversationId]:
    """The conversations a retention form selects (all of its conditions)."""
    from convstore.domain.service import ConversationFilter

    where = ConversationFilter(labels=(args.label,) if args.label is not None else ())
    cutoff = None if args.older_than is None else datetime.now(UTC) - args.older_than
    chosen: list[ConversationId] = []
    offset = 0
    while page := store.service.list(offset=offset, limit=PAGE, where=where):
        offset += len(page)
        for summary in page:
            last = summary.last_activity_at or summary.created_on
            if cutoff is None or last < cutoff:
                chosen.append(summary.id)
    return chosen


def _confirm(session: Session, count: int) -> None:
    from convstore.domain.errors import ConfigurationError

    if not sys.stdin.isatty():
        raise ConfigurationError(
            f"this would forget {count} conversations for good: confirm with --yes "
            "(or see them with --dry-run)"
        )
    session.err.line(f"forget {count} conversations for good? Their content cannot come back.")
    answer = input("type 'forget' to go on: ")
    if answer.strip() != "forget":
        raise ConfigurationError("not confirmed: nothing was forgotten")
