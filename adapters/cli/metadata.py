"""A conversation's metadata: `title` and `label`, recorded as appended events.

Module-level imports are the standard library's and the registry's only: `--help` loads
this module, and nothing third-party (the domain is imported when a command runs).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from convstore.adapters.cli.registry import Session, command, json_flag, resolve_id

if TYPE_CHECKING:
    from convstore.domain import ConversationId, MetadataOutcome


def _title_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the conversation's id (or a unique prefix of it)")
    parser.add_argument(
        "text", metavar="TEXT", help="the new title, one line (an empty one clears it)"
    )
    json_flag(parser)


@command("title", "give a conversation a title (recorded as an event)", _title_arguments)
def title(args: argparse.Namespace, session: Session) -> int:
    """Record a Retitled, unless the conversation has that title already (then nothing is
    written and `changed` is false). Exit 2, nothing written, for a title with a line
    break or over 500 characters, or while a live writer holds a response open."""
    conversation_id = resolve_id(session.store, args.id)
    outcome = session.service.retitle(conversation_id, args.text)
    _report(session, args, conversation_id, outcome, "title")
    return 0


def _label_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the conversation's id (or a unique prefix of it)")
    parser.add_argument(
        "--add", action="append", default=[], metavar="L", help="put label L on (repeatable)"
    )
    parser.add_argument(
        "--remove", action="append", default=[], metavar="L", help="take label L off (repeatable)"
    )
    json_flag(parser)


@command("label", "put labels on a conversation or take them off", _label_arguments)
def label(args: argparse.Namespace, session: Session) -> int:
    """Record one Relabelled of what changes: a label already on, or one not on to take
    off, changes nothing (with nothing to change, nothing is written and `changed` is
    false). Exit 2, nothing written, without --add or --remove, for a label that is empty
    or holds whitespace or a control character, or one both added and removed."""
    from convstore.domain.errors import ConfigurationError

    if not args.add and not args.remove:
        raise ConfigurationError("give at least one --add L or --remove L")
    conversation_id = resolve_id(session.store, args.id)
    outcome = session.service.relabel(conversation_id, add=args.add, remove=args.remove)
    _report(session, args, conversation_id, outcome, "labels")
    return 0


def _report(
    session: Session,
    args: argparse.Namespace,
    conversation_id: ConversationId,
    outcome: MetadataOutcome,
    what: str,
) -> None:
    """The outcome: JSON (`conversation_id`, the field changed, `changed`), or two lines."""
    from convstore.adapters.terminal import render

    if args.json:
        value = outcome.title if what == "title" else list(outcome.labels)
        session.out.json(
            {"conversation_id": str(conversation_id), what: value, "changed": outcome.changed}
        )
        return
    if what == "title":
        shown = render.one_line(outcome.title) or "(untitled)"
    else:
        shown = ", ".join(render.one_line(name) for name in outcome.labels) or "(none)"
    unchanged = "" if outcome.changed else " (unchanged: nothing was written)"
    session.out.line(f"conversation {conversation_id}")
    session.out.line(f"  {what}: {shown}{unchanged}")
