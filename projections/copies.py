"""The copies of responses a reading passes over, for the audit.

- **superseded**: an attempt cut short that a later attempt of the same response completed
  (scenario 26; `domain.attempts.superseded`). The log keeps it; every reading uses the
  later one.
- **duplicates**: a provider response this conversation holds although the store's index
  places it in another conversation (scenario 27). Stores written before the index
  (`0002_responses`) may hold such copies: the migration indexed the first one in the log
  and left the others as they were.

Only ids, versions and states: never content.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeAlias
from uuid import UUID

import msgspec

from convstore.domain.attempts import Superseded
from convstore.domain.events import Event, ResponseStarted

__all__ = ["DuplicateCopy", "Placed", "copy_lines", "duplicates"]

Placed: TypeAlias = Callable[[ResponseStarted], tuple[UUID, int] | None]
"""Where the store's index places an attempt of a provider response: its (conversation,
version), or None when it indexes none (the repository's `placed`)."""


class DuplicateCopy(msgspec.Struct, frozen=True, kw_only=True):
    """A copy of a provider response whose indexed copy is in another conversation."""

    response_id: str
    attempt: int
    version: int
    """Its ResponseStarted's version here."""
    stored_in: str
    """The conversation the store's index places it in."""
    stored_at: int


def duplicates(events: Iterable[Event], placed: Placed) -> list[DuplicateCopy]:
    """The provider responses of `events` the store's index places elsewhere."""
    found: list[DuplicateCopy] = []
    for event in events:
        if not isinstance(event, ResponseStarted):
            continue
        where = placed(event)
        if where is None or where == (event.originator_id, event.originator_version):
            continue
        found.append(
            DuplicateCopy(
                response_id=event.response_id,
                attempt=event.attempt,
                version=event.originator_version,
                stored_in=str(where[0]),
                stored_at=where[1],
            )
        )
    return found


def copy_lines(
    passed: list[Superseded], duplicated: list[DuplicateCopy], one: Callable[[str], str]
) -> Iterator[str]:
    """Readable lines (`one` makes an untrusted string one line)."""
    for copy in passed:
        yield (
            f"  superseded: response {one(copy.response_id)} attempt {copy.attempt}"
            f" (v{copy.first_version} to v{copy.last_version}, {copy.state}); read from attempt"
            f" {copy.read_attempt}"
        )
    for dup in duplicated:
        yield (
            f"  duplicate: response {one(dup.response_id)} at v{dup.version} is stored in"
            f" conversation {dup.stored_in} (v{dup.stored_at}), the copy the store indexes"
        )
