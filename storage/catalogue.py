"""The conversation catalogue: one row per conversation, written in the events' transaction.

`0003_catalogue` made the `catalogue` table; every append writes its conversation's row
beside the events (`catalogue_row`, upserted by the backend), so a read-only reader sees
it as current as the events. Its title and labels are the conversation's current ones:
those of its Started, then of each Retitled and Relabelled. It serves `list`, its
filters and short ids without replaying a conversation.

A row's `title` is NULL when no row was given for a conversation's first event (an event
appended by eventsourcing's path or by a newer convstore): the backends still make one,
so every conversation is in the catalogue, and a listing reads such a conversation's
first event as it did before the catalogue (`EventRepository.summaries`).

The filters' SQL is built here for both backends (`where`): `?` or `%s` parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final
from uuid import UUID

import msgspec

from convstore.domain.errors import ConversationNotFound
from convstore.domain.events import Event, Relabelled, ResponseStarted, Retitled, Started
from convstore.domain.service import ConversationFilter

TURN_STARTED: Final = "TurnStarted"
"""The key of `ConversationState.counts` that counts turns."""

_METADATA: Final = frozenset({Retitled, Relabelled})
"""The events after which a row carries the title and labels again."""


class CatalogueRow(msgspec.Struct, frozen=True, kw_only=True):
    """What an append says of its conversation; None fields keep what the row holds."""

    originator_id: UUID
    created_at: datetime | None = None
    """Its Started's time (a new conversation's row only)."""
    last_activity_at: datetime
    provider: str | None = None
    """Of its newest response; None: no response in this append (the row keeps its own)."""
    model: str | None = None
    turns: int
    events: int
    """Its newest version: how many events it holds."""
    title: str | None = None
    labels: tuple[str, ...] | None = None
    forked_from: UUID | None = None


class CatalogueEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One catalogue row as read."""

    originator_id: UUID
    created_at: datetime | None
    last_activity_at: datetime | None
    provider: str | None
    model: str | None
    turns: int
    events: int
    title: str | None
    """None: not catalogued (see the module's docstring)."""
    labels: tuple[str, ...]
    forked_from: UUID | None


def catalogue_row(
    conversation_id: UUID,
    events: Sequence[Event],
    *,
    turns: int,
    metadata: tuple[str, tuple[str, ...]],
    inherited: tuple[str, str] | None = None,
) -> CatalogueRow:
    """The row an append of `events` (one conversation's, in order) writes. `turns`: its
    turns after them (a fork's count its parent's); `metadata`: its (title, labels) after
    them, written when the append starts it or changes them (Retitled, Relabelled);
    `inherited`: a new fork's parent's (provider, model), used when the append holds no
    response of its own."""
    first, newest = events[0], events[-1]
    response = next((e for e in reversed(events) if type(e) is ResponseStarted), None)
    provider, model = (response.provider, response.model) if response else inherited or (None, None)
    if model is not None:
        model = _text(model)
    new = isinstance(first, Started) and first.originator_version == 1
    title, labels = metadata
    changed = new or any(type(e) in _METADATA for e in events)
    return CatalogueRow(
        originator_id=conversation_id,
        created_at=first.timestamp if new else None,
        last_activity_at=newest.timestamp,
        provider=provider,
        model=model,
        turns=turns,
        events=newest.originator_version,
        title=_text(title) if changed else None,
        labels=tuple(map(_text, labels)) if changed else None,
        forked_from=first.forked_from if isinstance(first, Started) and new else None,
    )


def _text(value: str) -> str:
    """A catalogue text as PostgreSQL's text and jsonb can hold it: a NUL (which neither
    can) becomes U+FFFD. The catalogue is derived: the event keeps the text as it came."""
    return value.replace("\x00", "\ufffd")


SQLITE_STAMP: Final = "%Y-%m-%dT%H:%M:%fZ"
"""How SQLite's catalogue writes a time (`strftime`): UTC, milliseconds, sortable as text."""


def sqlite_stamp(moment: datetime) -> str:
    """A time as SQLite's catalogue stores it (see `SQLITE_STAMP`)."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def parse_stamp(text: str | None) -> datetime | None:
    """A time SQLite's catalogue stored."""
    return None if text is None else datetime.fromisoformat(text)


def where(query: ConversationFilter, *, postgres: bool) -> tuple[str, list[Any]]:
    """The filter as a WHERE clause ('' for none) over table `c`, and its parameters."""
    mark = "%s" if postgres else "?"
    clauses: list[str] = []
    params: list[Any] = []
    if query.provider is not None:
        clauses.append(f"c.provider = {mark}")
        params.append(query.provider)
    if query.model is not None:
        clauses.append(f"c.model = {mark}")
        params.append(query.model)
    for bound, operator in ((query.since, ">="), (query.until, "<")):
        if bound is not None:
            clauses.append(f"c.created_at {operator} {mark}")
            params.append(bound if postgres else sqlite_stamp(bound))
    if query.title is not None:
        finds = "strpos" if postgres else "instr"
        clauses.append(f"{finds}(lower(c.title), lower({mark})) > 0")
        params.append(query.title)
    for label in query.labels:
        if postgres:
            clauses.append(f"c.labels ? {mark}")
        else:
            clauses.append(f"EXISTS (SELECT 1 FROM json_each(c.labels) WHERE value = {mark})")
        params.append(label)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


HEX: Final = frozenset("0123456789abcdef")
MIN_PREFIX: Final = 4
"""The shortest prefix a conversation id may be given by, as in git."""


def prefix_range(prefix: str) -> tuple[UUID, UUID] | None:
    """The ids a hex prefix (dashes as in the printed form allowed) spans, lowest and
    highest; None when `prefix` is no such prefix (too short, or not hex)."""
    digits = prefix.strip().lower().replace("-", "")
    if not MIN_PREFIX <= len(digits) <= 32 or not set(digits) <= HEX:
        return None
    return UUID(digits.ljust(32, "0")), UUID(digits.ljust(32, "f"))


def not_a_prefix(text: str) -> ConversationNotFound:
    """The error for an id that is neither a UUID nor a usable prefix."""
    return ConversationNotFound(
        f"{text!r} is not a conversation id (a UUID such as '0b8f6c1e-...', or a unique "
        f"prefix of at least {MIN_PREFIX} hex digits; `convstore list` shows them)"
    )


COLUMNS: Final = (
    "c.id, c.created_at, c.last_activity_at, c.provider, c.model, c.turns, c.events, c.title,"
    " c.labels, c.forked_from"
)
"""What `entry` reads, from the catalogue as `c`."""


def listing(query: ConversationFilter, *, postgres: bool, newest_first: bool) -> tuple[str, str]:
    """The SQL of a page of the catalogue (ends with LIMIT and OFFSET parameters) and of
    its count, over the schema-less table name `{catalogue}`."""
    clause, _ = where(query, postgres=postgres)
    mark = "%s" if postgres else "?"
    order = "DESC" if newest_first else "ASC"
    page = (
        f"SELECT {COLUMNS} FROM {{catalogue}} c{clause} ORDER BY c.position {order}"
        f" LIMIT {mark} OFFSET {mark}"
    )
    return page, f"SELECT count(*) FROM {{catalogue}} c{clause}"


def entry(row: Sequence[Any]) -> CatalogueEntry:
    """A row of `COLUMNS` as read by either backend (SQLite's times and labels as text)."""
    key, created, last, provider, model, turns, events, title, labels, forked = row
    if isinstance(labels, str):
        labels = msgspec.json.decode(labels)
    return CatalogueEntry(
        originator_id=key if isinstance(key, UUID) else UUID(bytes=key),
        created_at=created if not isinstance(created, str) else parse_stamp(created),
        last_activity_at=last if not isinstance(last, str) else parse_stamp(last),
        provider=provider,
        model=model,
        turns=int(turns),
        events=int(events),
        title=title,
        labels=tuple(labels or ()),
        forked_from=forked if not isinstance(forked, str) else UUID(forked),
    )
