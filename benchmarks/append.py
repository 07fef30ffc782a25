"""The append contest shared by the SQLite (1) and PostgreSQL (5) figures.

Three contestants take turns, round by round, each writing one response's ten events in
one transaction:

- `save`: `Conversation.record_all` then `repository.save` of an aggregate held in memory
  (what a writer that keeps its conversation loaded pays);
- `append`: `store.service.append`, which loads the conversation, records the drafts and
  saves them, through `open_store`'s repository: its cache holds the conversation's state,
  so the load reads only the events stored after it (what a process appending to its
  conversations again and again pays);
- `raw`: the driver alone inserting the rows convstore wrote for the same drafts (the same
  encoded states) into an equivalent table, at the same batch size and durability.

Then, informative (no target), `fresh` takes turns with a raw insert into a table of its
own: `store.service.append` through a repository without a cache (`cache_size=0`), whose
every load reads the newest snapshot and the 0..99 events after it (what one CLI command
pays for its first load, besides starting Python). It runs apart so its replays, which
churn through memory, leave the caches of the three above as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar
from uuid import UUID

from benchmarks import workload
from benchmarks.common import Figure, Sizes, Timings, interleave
from convstore.domain import Conversation, Event
from convstore.storage import Store
from convstore.storage.mapper import EventMapper

P = TypeVar("P")

SNAPSHOT_EVERY = 100
"""The stores' snapshot interval (open_store's default)."""


@dataclass(frozen=True)
class Row:
    """One stored event as convstore's mapper encoded it."""

    originator_id: UUID
    originator_version: int
    topic: str
    state: bytes


@dataclass(frozen=True)
class AppendWorkload:
    """The drafts of every call, and the rows convstore writes for them."""

    drafts: list[list[Event]]
    """One response's drafts per call, warm-up calls first."""
    started: list[Row]
    """The raw table's first row: the conversation's Started event."""
    rows: list[list[Row]]
    """The encoded rows of each call's drafts, in the same order."""

    @property
    def events_per_call(self) -> float:
        """Mean events per transaction."""
        return sum(map(len, self.rows)) / len(self.rows)

    @property
    def mean_state_bytes(self) -> float:
        """Mean length of an encoded state."""
        states = [len(r.state) for rows in self.rows for r in rows]
        return sum(states) / len(states)


def append_workload(sizes: Sizes, seed: int = 1) -> AppendWorkload:
    """Drafts for `warmup + append_rounds` calls, encoded once by our own mapper."""
    source = workload.responses(seed=seed)
    drafts = [next(source) for _ in range(sizes.warmup + sizes.append_rounds)]
    cid = workload.conversation_id(seed)
    mapper = EventMapper()
    scratch = workload.conversation(cid)
    encoded: list[list[Row]] = []
    for batch in [[], *drafts]:
        scratch.record_all(batch)
        encoded.append(
            [
                Row(cid, s.originator_version, s.topic, s.state)
                for s in map(mapper.to_stored_event, scratch.collect_events())
            ]
        )
    return AppendWorkload(drafts, encoded[0], encoded[1:])


def contest(
    saved: Store,
    *,
    appended: Store,
    fresh: Store,
    insert: Callable[[P], object],
    fresh_insert: Callable[[P], object],
    params: Callable[[Sequence[Row]], P],
    work: AppendWorkload,
    sizes: Sizes,
) -> Timings:
    """Run the three contestants interleaved, then `fresh` against `fresh_raw` (a raw
    insert into a second table); each consumes one call's drafts per call.

    `params` turns rows into the driver's parameters beforehand, so the baseline's timed
    section holds nothing but the driver's work.
    """
    held = Conversation.start("benchmark")
    saved.repository.save(held)
    service_id = appended.service.start("benchmark")
    fresh_id = fresh.service.start("benchmark")
    insert(params(work.started))
    fresh_insert(params(work.started))
    prepared = [params(rows) for rows in work.rows]
    to_save, to_append, to_insert = iter(work.drafts), iter(work.drafts), iter(prepared)
    to_fresh, to_fresh_insert = iter(work.drafts), iter(prepared)

    def save() -> None:
        held.record_all(next(to_save))
        saved.repository.save(held)

    def append() -> None:
        appended.service.append(service_id, next(to_append))

    def append_fresh() -> None:
        fresh.service.append(fresh_id, next(to_fresh))

    main = interleave(
        {"save": save, "append": append, "raw": lambda: insert(next(to_insert))},
        rounds=sizes.append_rounds,
        warmup=sizes.warmup,
    )
    apart = interleave(
        {"fresh": append_fresh, "fresh_raw": lambda: fresh_insert(next(to_fresh_insert))},
        rounds=sizes.append_rounds,
        warmup=sizes.warmup,
    )
    return Timings({**main.rounds, **apart.rounds})


def figures(
    prefix: str,
    backend: str,
    *,
    baseline: str,
    target: float,
    service_target: float | None = None,
    timings: Timings,
    work: AppendWorkload,
    sizes: Sizes,
) -> list[Figure]:
    """The `save`, `append` and `fresh` rows of one backend: `target` for `save`, and for
    `append` unless `service_target` is given; `fresh` is informative."""
    n = work.events_per_call
    extra = {
        "events_per_call": n,
        "mean_state_bytes": work.mean_state_bytes,
        "timings": timings.summary(),
    }
    rounds = (
        f"median of {sizes.append_rounds} interleaved rounds; {n:.0f} events, "
        f"{work.mean_state_bytes:.0f} B per state; snapshot every {SNAPSHOT_EVERY}"
    )
    rows = [
        Figure(
            f"{prefix}a",
            f"append 1 response ({n:.0f} events), {backend}, repository.save",
            "Conversation.record_all + repository.save of a held aggregate",
            baseline,
            "throughput",
            timings.median("save"),
            timings.median("raw"),
            ratio=timings.throughput_ratio("save", "raw"),
            target=(">=", target),
            note=rounds,
            extra=extra,
        ),
        Figure(
            f"{prefix}b",
            f"append 1 response ({n:.0f} events), {backend}, service.append",
            "store.service.append (load + record_all + save)",
            baseline,
            "throughput",
            timings.median("append"),
            timings.median("raw"),
            ratio=timings.throughput_ratio("append", "raw"),
            target=(">=", target if service_target is None else service_target),
            note="each call first loads the conversation: open_store's repository cache "
            "holds its state, so the load reads only the events stored after it",
            extra=extra,
        ),
        Figure(
            f"{prefix}c",
            f"append 1 response ({n:.0f} events), {backend}, service.append, no cache",
            "store.service.append through a repository with cache_size=0",
            baseline,
            "throughput",
            timings.median("fresh"),
            timings.median("fresh_raw"),
            ratio=timings.throughput_ratio("fresh", "fresh_raw"),
            note="informative: each call loads the newest snapshot and the "
            f"0..{SNAPSHOT_EVERY - 1} events after it (a fresh process's first load); "
            "measured apart, against a raw insert into a table of its own",
            extra=extra,
        ),
    ]
    return [f.judge() for f in rows]


def topic_ids(work: AppendWorkload) -> dict[str, int]:
    """Integer ids for the workload's topics, as a recorder with a topics table keeps."""
    topics = sorted({r.topic for rows in [work.started, *work.rows] for r in rows})
    return {topic: i for i, topic in enumerate(topics, start=1)}
