"""Figure 14 (issue 19): encryption on against off, same run, same drafts, SQLite.

- 14a: append throughput: `service.append` of one response's ten events per call into an
  encrypted store against a plain one (goal: ≥ 0.8x);
- 14b: replay time: `repository.load` (no snapshot, no cache) of one conversation of
  `replay_events` events, encrypted against plain (goal: ≤ 1.3x).
"""

from __future__ import annotations

from itertools import chain, islice
from pathlib import Path

from benchmarks import workload
from benchmarks.common import Figure, Sizes, interleave
from convstore.domain import Conversation, Started
from convstore.storage import Store, open_store


def _store(path: Path, *, encrypt: bool, snapshot_every: int = 100) -> Store:
    return open_store(str(path), encrypt=encrypt, snapshot_every=snapshot_every, cache_size=0)


def append_figure(sizes: Sizes, folder: Path) -> Figure:
    """14a: encrypted appends against plain ones."""
    rounds, warmup = sizes.append_rounds, sizes.warmup
    stores = {
        "encrypted": _store(folder / "enc-append-on.db", encrypt=True),
        "plain": _store(folder / "enc-append-off.db", encrypt=False),
    }
    try:
        batches = list(islice(workload.responses(seed=7), rounds + warmup))
        contestants = {}
        for name, store in stores.items():
            cid = store.service.start("benchmark")
            work = iter(batches)
            contestants[name] = lambda service=store.service, cid=cid, work=work: service.append(
                cid, next(work)
            )
        timings = interleave(contestants, rounds=rounds, warmup=warmup)
    finally:
        for store in stores.values():
            store.close()
    return Figure(
        "14a",
        "append one response (10 events), encryption on vs off",
        "service.append into an encrypted SQLite store (AES-256-GCM per conversation)",
        "service.append of the same drafts into a plain SQLite store",
        "throughput",
        timings.median("encrypted"),
        timings.median("plain"),
        ratio=timings.throughput_ratio("encrypted", "plain"),
        target=(">=", 0.8),
        note=f"median of {rounds} interleaved rounds",
        extra={"timings": timings.summary()},
    ).judge()


def replay_figure(sizes: Sizes, folder: Path) -> Figure:
    """14b: loading an encrypted conversation against a plain one."""
    n = sizes.replay_events
    cid = workload.conversation_id(13)
    drafts = list(islice(chain.from_iterable(workload.turns(seed=2)), n - 1))
    stores = {}
    for name, encrypt in (("encrypted", True), ("plain", False)):
        store = _store(folder / f"enc-replay-{name}.db", encrypt=encrypt, snapshot_every=0)
        conversation = Conversation(cid)
        conversation.clock = workload.FixedClock()
        conversation.cipher = None if store.ciphers is None else store.ciphers.cipher(cid)
        conversation.record(Started(title="benchmark", labels=("benchmark",)))
        for start in range(0, len(drafts), 10):
            conversation.record_all(drafts[start : start + 10])
            store.repository.save(conversation)
        stores[name] = store
    try:
        loaded = [store.repository.load(cid) for store in stores.values()]
        assert loaded[0].version == loaded[1].version == n  # the chains differ: ciphertext
        timings = interleave(
            {name: (lambda s=store: s.repository.load(cid)) for name, store in stores.items()},
            rounds=sizes.replay_rounds,
            warmup=2,
        )
    finally:
        for store in stores.values():
            store.close()
    return Figure(
        "14b",
        f"replay {n:,} events, encryption on vs off",
        "repository.load of an encrypted conversation (no snapshot, no cache)",
        "repository.load of the same conversation in a plain store",
        "time",
        timings.median("encrypted"),
        timings.median("plain"),
        ratio=timings.time_ratio("encrypted", "plain"),
        target=("<=", 1.3),
        note=f"median of {sizes.replay_rounds} interleaved rounds",
        extra={"timings": timings.summary()},
    ).judge()


def encryption_figures(sizes: Sizes, folder: Path) -> list[Figure]:
    """Figure 14: the cost of encryption."""
    return [append_figure(sizes, folder), replay_figure(sizes, folder)]
