"""Settled items: the responses, tool calls and hosted activities a conversation has closed.

A conversation's invariants need to know every response, call and activity id it ever
recorded (a response is re-ingested idempotently, a call id is requested once, an
activity's lifecycle never goes back), and those only grow. So that a snapshot stays the
size of what is open, not of the conversation's history, a snapshot's state keeps only
the open items (the open response, calls without a result, activities still `started`)
and lets the settled ones go to the store (`settle`), which answers for them through the
`Settled` port the repository hands the aggregate. The domain imports nothing of ours:
the port is a protocol, and the store's table behind it is written in the same
transaction as the snapshot whose state let them go.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

import msgspec

from convstore.domain.vocabulary import EndState, Lifecycle


class StoredResponse(msgspec.Struct, frozen=True, kw_only=True, array_like=True, gc=False):
    """What re-ingesting a response needs of the copy stored: its newest attempt."""

    attempt: int = 1
    version: int = 0
    """The version of that attempt's ResponseStarted (0: stored in the conversation a fork
    was forked from)."""
    digest: str = ""
    """Its content digest (empty while it is open, or when it was closed for its writer)."""
    ended: EndState | None = None
    """How it ended; None while it is open."""

    @property
    def cut(self) -> bool:
        """Whether it is cut short (ended `abandoned`, or still open): a later copy may
        complete it."""
        return self.ended is None or self.ended == "abandoned"


class ActivityState(msgspec.Struct, frozen=True, kw_only=True, array_like=True, gc=False):
    """What the lifecycle invariant needs of one hosted activity.

    Frozen, like OpenResponse: the appliers replace these, never change them, so copies of
    a state (rollback, the repository's cache) may share them.
    """

    name: str
    state: Lifecycle
    provider: str = ""


class SettledItems(msgspec.Struct, kw_only=True):
    """What a state lets go when it is settled: its closed items, by id."""

    responses: dict[str, StoredResponse] = {}
    calls: dict[str, bool] = {}
    """Call id → True: only answered calls are settled."""
    activities: dict[str, ActivityState] = {}

    def __bool__(self) -> bool:
        return bool(self.responses or self.calls or self.activities)


class Settled(Protocol):
    """The port through which a settled state asks about the items it let go.

    It answers as of version `upto` of the conversation (the state's `settled_at`): for
    each id asked, the newest value settled at or before it; an id the conversation had
    not settled by then is left out of the answer.
    """

    def found(
        self,
        *,
        responses: Collection[str] = (),
        calls: Collection[str] = (),
        activities: Collection[str] = (),
        upto: int,
    ) -> SettledItems:
        """The settled responses, client tool calls and hosted activities among these ids
        (a settled call always has its answer: True)."""
        ...
