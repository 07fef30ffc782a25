"""`convstore redact`: hide a span of an event's text, or all of it, from every portable
reading (issue 19). The stored bytes stay: this hides a secret from readers; erasure is
`convstore forget`.

Module-level imports are the standard library's and the registry's only: `--help` loads
this module, and nothing third-party (the domain is imported when a command runs).
"""

from __future__ import annotations

import argparse
import re

from convstore.adapters.cli.registry import Session, command, json_flag

_SPAN = re.compile(r"([0-9]{1,9}):([0-9]{1,9})")
MAX_REASON = 500
"""The longest `--reason`, in characters."""


def span(text: str) -> tuple[int, int]:
    """`START:END`, a half-open span of code points (argparse type)."""
    found = _SPAN.fullmatch(text.strip())
    if found is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a span: write START:END in code points of the event's text "
            "(e.g. 10:42)"
        )
    return int(found.group(1)), int(found.group(2))


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the conversation's full id (no prefix: this hides text)")
    parser.add_argument(
        "--event", type=int, required=True, metavar="V", help="the version of the event to redact"
    )
    parser.add_argument(
        "--span",
        type=span,
        metavar="START:END",
        help="hide only these code points of its text (default: all of it)",
    )
    parser.add_argument(
        "--reason", required=True, metavar="TEXT", help="why (one line, shown to no reader)"
    )
    json_flag(parser)


@command("redact", "hide an event's text, or a span of it, from every reading", _arguments)
def redact(args: argparse.Namespace, session: Session) -> int:
    """Append a Redacted event. Exit 2, nothing written: a prefix or malformed id, no such
    conversation or event, an event without text, a span outside its text, a reason not
    one line of at most 500 characters, a live writer holding a response open."""
    from uuid import UUID

    from convstore.domain.errors import ConfigurationError
    from convstore.domain.vocabulary import ConversationId

    if "\n" in args.reason or "\r" in args.reason or len(args.reason) > MAX_REASON:
        raise ConfigurationError(f"--reason is one line of at most {MAX_REASON} characters")
    try:
        conversation_id = ConversationId(UUID(args.id.strip()))
    except ValueError:
        raise ConfigurationError(
            "redact takes a conversation's full id, never a prefix (`convstore list --json` "
            "prints them): nothing was written"
        ) from None
    event = session.service.redact(conversation_id, args.event, span=args.span, reason=args.reason)
    if args.json:
        session.out.json(
            {
                "conversation_id": str(conversation_id),
                "version": event.originator_version,
                "event_version": event.event_version,
                "span": None if event.span is None else list(event.span),
                "redacted_on": event.timestamp.isoformat(),
            }
        )
        return 0
    what = (
        "all of its text" if event.span is None else f"code points {event.span[0]}:{event.span[1]}"
    )
    session.out.line(
        f"redacted event {event.event_version} of {conversation_id} ({what}) "
        f"as event {event.originator_version}; the stored bytes are unchanged"
    )
    return 0
