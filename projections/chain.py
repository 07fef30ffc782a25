"""The chain status of what a reader shows: does the stored hash chain behind it hold?

`show`, `export` and `audit` check it as they read (`chain_status`), with the verifier of
`projections.verify` (`check_states`: the domain's hash check on the stored bytes, and the
rows' envelopes), so a tampered conversation is never shown as if it were fine. A fork's
reading folds its parent up to the fork point, then its own events: its status covers
its own chain and its ancestors' (the breaks at or before each fork point: a change after
it touches nothing the reading shows); `lineage=False` checks the conversation's own
events only, as `audit` and `verify` read them.

`first_bad_version` is in the reading's numbering (a fork's own version v reads as
`forked_at + v - 1`, as `show --json` numbers it); each problem names the conversation and
the stored version `verify` reports. Reading is never writing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

import msgspec

from convstore.domain.errors import IntegrityError
from convstore.domain.events import Started
from convstore.domain.sealing import strip
from convstore.projections.verify import check_states, decode

if TYPE_CHECKING:
    from convstore.storage import Store


class ChainProblem(msgspec.Struct, frozen=True, kw_only=True):
    """One place where the stored chain does not hold."""

    conversation_id: str
    """The conversation whose chain breaks (the one read, or an ancestor of a fork)."""
    version: int | None
    """The stored version concerned, as `verify` reports it (None: the whole conversation)."""
    problem: str
    """What is wrong, in words."""


class ChainStatus(msgspec.Struct, frozen=True, kw_only=True):
    """Whether the chain behind a reading holds, and its head."""

    intact: bool
    """True when every event the reading folds is stored as written."""
    head: str
    """The hash the conversation's newest stored event claims ("" when none is readable)."""
    version: int
    """The conversation's newest stored version (its own numbering)."""
    first_bad_version: int | None = None
    """The first version of the reading that does not hold; None when intact."""
    problems: list[ChainProblem] = []
    """Every break found, by conversation and version."""


def _fork_point(states: list[tuple[int, bytes]]) -> tuple[UUID, int] | None:
    """(parent, version) a conversation was forked from, read from its first event."""
    if not states or states[0][0] != 1:
        return None
    try:
        first = decode(strip(states[0][1]))  # its fork fields are clear when sealed
    except IntegrityError:  # the check reports it
        return None
    if isinstance(first, Started) and first.forked_from is not None:
        return first.forked_from, first.forked_at
    return None


def _breaks(
    store: Store, conversation_id: UUID, lineage: bool, depth: int = 0
) -> tuple[list[tuple[int, ChainProblem]], str, int]:
    """(reading version, problem) of every break behind the reading, the head and the
    newest stored version."""
    states = store.recorder.select_states(conversation_id)
    check = check_states(conversation_id, states)
    fork = _fork_point(states) if lineage else None
    at = fork[1] if fork is not None else 1

    def reading(version: int | None) -> int:
        if version is None or version <= 1:
            return 1
        return version if fork is None else at + version - 1

    key = str(conversation_id)
    found = [
        (
            reading(b.version),
            ChainProblem(conversation_id=key, version=b.version, problem=b.problem),
        )
        for b in check.breaks
    ]
    if fork is not None and depth < 64:  # a fork of a fork of …: bounded, as the store is
        parent, at = fork
        behind, _, newest = _breaks(store, parent, lineage, depth + 1)
        found.extend((version, p) for version, p in behind if version <= at)
        if newest == 0:
            missing = f"the conversation it is forked from, {parent}, holds no events"
            found.append(
                (1, ChainProblem(conversation_id=str(parent), version=None, problem=missing))
            )
    return found, check.head, check.version


def chain_status(store: Store, conversation_id: UUID, *, lineage: bool = True) -> ChainStatus:
    """The chain status of the reading of one conversation (with `lineage`, a fork's
    ancestors up to each fork point too)."""
    found, head, version = _breaks(store, conversation_id, lineage)
    found.sort(key=lambda pair: pair[0])
    return ChainStatus(
        intact=not found,
        head=head,
        version=version,
        first_bad_version=found[0][0] if found else None,
        problems=[problem for _, problem in found],
    )


def to_data(status: ChainStatus) -> dict[str, Any]:
    """The status as plain JSON data (`chain` in `--json` outputs)."""
    data: dict[str, Any] = msgspec.to_builtins(status)
    return data
