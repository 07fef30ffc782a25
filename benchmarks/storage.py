"""The SQLite figures: append (1), replay with and without snapshots (2), bytes and memory (4).

Every baseline is plain `sqlite3` on an equivalent table (the `events` table convstore's
SQLite recorder creates: rowid, 16-byte conversation key, version, topic id, state blob,
unique on (conversation, version), in a file of the same page size), with the same
durability (WAL, `synchronous=FULL`, `BEGIN IMMEDIATE` … `COMMIT` per batch), fed the same
encoded states; the append baseline (1) also writes the rows convstore's lookup tables get
(the response index and the catalogue, in tables made as its migrations make them). The
databases go to `--dir` (default: a temporary folder): appends fsync, so the disk under it
is part of every append figure.

The replay figures (2, 4b) measure reading a conversation back from the store, so their
stores keep no aggregate cache (`cache_size=0`): with one, a load of a conversation the
same store just wrote would copy the state it kept instead of reading anything.
"""

from __future__ import annotations

import gc
import sqlite3
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from itertools import chain, islice
from pathlib import Path

import orjson

from benchmarks import append, reference, workload
from benchmarks.common import Figure, Sizes, interleave
from convstore.domain import Conversation, ConversationId, Event
from convstore.storage import Store, open_store

SNAPSHOT_EVERY = append.SNAPSHOT_EVERY

_RAW_SCHEMA = (
    "CREATE TABLE events ("
    " id INTEGER PRIMARY KEY,"
    " originator_id BLOB NOT NULL,"
    " originator_version INTEGER NOT NULL,"
    " topic INTEGER NOT NULL,"
    " state BLOB NOT NULL,"
    " UNIQUE (originator_id, originator_version))",
    "CREATE INDEX events_first ON events (id) WHERE originator_version = 1",
    # The store's lookup tables, as its migrations make them: the response index and the
    # catalogue of conversations (with its two indexes).
    "CREATE TABLE responses ("
    " provider TEXT NOT NULL, server TEXT NOT NULL, response_id TEXT NOT NULL,"
    " attempt INTEGER NOT NULL, originator_id BLOB NOT NULL, originator_version INTEGER NOT NULL,"
    " PRIMARY KEY (provider, server, response_id, attempt)) WITHOUT ROWID",
    "CREATE TABLE catalogue ("
    " id BLOB PRIMARY KEY, position INTEGER NOT NULL, created_at TEXT, last_activity_at TEXT,"
    " provider TEXT, model TEXT, turns INTEGER NOT NULL, events INTEGER NOT NULL, title TEXT,"
    " labels TEXT, forked_from TEXT) WITHOUT ROWID",
    "CREATE INDEX catalogue_position ON catalogue (position)",
    "CREATE INDEX catalogue_created ON catalogue (created_at)",
)
_RAW_INSERT = (
    "INSERT INTO events (originator_id, originator_version, topic, state) VALUES (?, ?, ?, ?)"
)
_RAW_RESPONSE = "INSERT INTO responses VALUES (?, '', ?, 1, ?, ?)"
_RAW_CATALOGUE_FIRST = (
    "INSERT INTO catalogue (id, position, created_at, last_activity_at, turns, events)"
    " VALUES (?, 1, ?, ?, 0, 1)"
)
_RAW_CATALOGUE = (
    "UPDATE catalogue SET last_activity_at = ?, provider = ?, model = ?, events = ? WHERE id = ?"
)
_RAW_SELECT = (
    "SELECT originator_version, state FROM events WHERE originator_id = ?"
    " AND originator_version > ? ORDER BY originator_version"
)


RawBatch = tuple[
    list[tuple[bytes, int, int, bytes]],
    list[tuple[str, str, bytes, int]],
    tuple[str, tuple[object, ...]],
]
"""One append's rows for the raw baseline: events, response index rows, and the catalogue
statement with its parameters."""


def raw_batch(rows: Sequence[append.Row], topics: dict[str, int]) -> RawBatch:
    """The raw baseline's rows for the events convstore encoded as `rows` (prepared before
    the timed section: the baseline times nothing but the driver)."""
    key = rows[0].originator_id.bytes
    responses = []
    provider = model = None
    stamp = ""
    for row in rows:
        state = orjson.loads(row.state)
        stamp = state["timestamp"]
        if row.topic.endswith(":ResponseStarted"):
            provider, model = state["provider"], state.get("model")
            responses.append((provider, state["response_id"], key, row.originator_version))
    events = [(key, r.originator_version, topics[r.topic], r.state) for r in rows]
    last = rows[-1].originator_version
    catalogue = (
        (_RAW_CATALOGUE_FIRST, (key, stamp, stamp))
        if last == 1
        else (_RAW_CATALOGUE, (stamp, provider, model, last, key))
    )
    return events, responses, catalogue


class RawSQLite:
    """The baseline: plain sqlite3 on an equivalent table, with the same durability."""

    def __init__(self, path: Path, *, page_size: int | None = None) -> None:
        self.connection = sqlite3.connect(path, isolation_level=None)
        if page_size is not None:
            self.connection.execute(f"PRAGMA page_size={int(page_size)}")
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.execute("PRAGMA synchronous=FULL")
        if not self.connection.execute("SELECT 1 FROM sqlite_master").fetchone():
            for statement in _RAW_SCHEMA:
                self.connection.execute(statement)

    def insert(self, batch: RawBatch) -> None:
        """One batch in one transaction: its events, the response index's rows and the
        catalogue's row of its conversation, as convstore writes them."""
        rows, responses, catalogue = batch
        connection = self.connection
        connection.execute("BEGIN IMMEDIATE")
        try:
            connection.executemany(_RAW_INSERT, rows)
            if responses:
                connection.executemany(_RAW_RESPONSE, responses)
            connection.execute(*catalogue)
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    def replay(self, key: bytes) -> list[object]:
        """Read one conversation's rows and `orjson.loads` each state."""
        rows = self.connection.execute(_RAW_SELECT, (key, 0)).fetchall()
        loads = orjson.loads
        return [loads(state) for _, state in rows]

    def close(self) -> None:
        """Close the connection."""
        self.connection.close()


def _page_size(path: Path) -> int:
    """The page size convstore gave a database file, so the baseline's file matches it."""
    connection = sqlite3.connect(path)
    try:
        return int(connection.execute("PRAGMA page_size").fetchone()[0])
    finally:
        connection.close()


# --- figure 1: append ----------------------------------------------------------------------


def append_figures(sizes: Sizes, folder: Path) -> list[Figure]:
    """Figure 1: one response's ten events per transaction, ours against raw sqlite3."""
    work = append.append_workload(sizes)
    topics = append.topic_ids(work)
    saved = open_store(str(folder / "append-save.db"), snapshot_every=append.SNAPSHOT_EVERY)
    appended = open_store(str(folder / "append-service.db"), snapshot_every=append.SNAPSHOT_EVERY)
    fresh = open_store(
        str(folder / "append-fresh.db"), snapshot_every=append.SNAPSHOT_EVERY, cache_size=0
    )
    page_size = _page_size(folder / "append-save.db")
    raw = RawSQLite(folder / "append-raw.db", page_size=page_size)
    raw_apart = RawSQLite(folder / "append-raw-apart.db", page_size=page_size)
    try:
        timings = append.contest(
            saved,
            appended=appended,
            fresh=fresh,
            insert=raw.insert,
            fresh_insert=raw_apart.insert,
            params=lambda rows: raw_batch(rows, topics),
            work=work,
            sizes=sizes,
        )
    finally:
        saved.close()
        appended.close()
        fresh.close()
        raw.close()
        raw_apart.close()
    baseline = (
        f"raw sqlite3: executemany of the same {work.events_per_call:.0f} encoded states into "
        "an equivalent table, with the same response index and catalogue rows, WAL, "
        f"synchronous=FULL, {page_size} B pages, BEGIN IMMEDIATE…COMMIT"
    )
    return append.figures(
        "1",
        "SQLite",
        baseline=baseline,
        target=0.85,
        service_target=0.8,
        timings=timings,
        work=work,
        sizes=sizes,
    )


# --- figure 2 and 4: replay, snapshots, bytes, memory ----------------------------------------


def build(
    path: Path,
    conversation_id: ConversationId,
    events: int,
    snapshot_every: int,
    *,
    batch: int = 10,
) -> Store:
    """A store holding one conversation of exactly `events` events, written `batch` at a time.

    The drafts and the clock are seeded, so two stores built alike hold the same bytes;
    the last batch ends on `events`, so when that is a multiple of `snapshot_every` a
    snapshotting store has just taken a snapshot. It keeps no aggregate cache, so its
    loads read the store.
    """
    store = open_store(str(path), snapshot_every=snapshot_every, cache_size=0)
    conversation = workload.conversation(conversation_id)
    drafts = list(islice(_drafts(), events - 1))
    first = (events - 1) % batch or batch
    conversation.record_all(drafts[:first])
    store.repository.save(conversation)
    for start in range(first, len(drafts), batch):
        conversation.record_all(drafts[start : start + batch])
        store.repository.save(conversation)
    return store


def _drafts() -> Iterator[Event]:
    """The replayed conversation's drafts after its Started event, in order."""
    return chain.from_iterable(workload.turns(seed=2))


def replay_figures(sizes: Sizes, folder: Path) -> list[Figure]:
    """Figures 2 (replay, with and without snapshots) and 4 (bytes per event, memory)."""
    n = sizes.replay_events
    cid = workload.conversation_id(3)
    plain_path, snap_path = folder / "replay-plain.db", folder / "replay-snap.db"
    plain = build(plain_path, cid, n, snapshot_every=0)
    snapped = build(snap_path, cid, n, snapshot_every=SNAPSHOT_EVERY)
    raw = RawSQLite(plain_path)
    key = cid.bytes
    states = [state for _, state in plain.recorder.select_states(cid)]
    mean_state = sum(map(len, states)) / len(states)
    es_get, es_mean = reference.build(folder / "eventsourcing.db", n, mean_state)
    snapshot = snapped.recorder.select_snapshot(cid)
    assert snapshot is not None
    tail = n - snapshot.version

    def load_plain() -> Conversation:
        return plain.repository.load(cid)

    def load_snapped() -> Conversation:
        return snapped.repository.load(cid)

    assert load_plain() == load_snapped(), "the two stores must hold the same conversation"
    timings = interleave(
        {
            "load": load_plain,
            "raw": lambda: raw.replay(key),
            "snap": load_snapped,
            "eventsourcing": es_get,
        },
        rounds=sizes.replay_rounds,
        warmup=2,
    )
    rounds = f"median of {sizes.replay_rounds} interleaved rounds"
    figures = [
        Figure(
            "2a",
            f"replay {n:,} events, no snapshot",
            "repository.load (open_store(..., snapshot_every=0, cache_size=0))",
            "raw sqlite3 SELECT of the same rows + orjson.loads of each state",
            "time",
            timings.median("load"),
            timings.median("raw"),
            ratio=timings.time_ratio("load", "raw"),
            target=("<=", 1.5),
            note=f"{rounds}; {mean_state:.0f} B per state",
            extra={"timings": timings.summary()},
        ),
        Figure(
            "2b",
            f"replay {n:,} events, snapshot every {SNAPSHOT_EVERY}",
            f"repository.load: snapshot at version {snapshot.version:,} + {tail} events after",
            "repository.load without snapshots (2a)",
            "time",
            timings.median("snap"),
            timings.median("load"),
            ratio=timings.time_ratio("snap", "load"),
            target=("<=", 0.02),
            note=f"{rounds}; snapshot state {len(snapshot.state):,} B (msgpack), "
            "loaded right after the last snapshot was taken",
        ),
        Figure(
            "2r",
            f"reference: eventsourcing get, {n:,} events",
            "eventsourcing Application.repository.get (own Aggregate, @event, SQLite)",
            "raw sqlite3 + orjson.loads of convstore's rows (2a)",
            "time",
            timings.median("eventsourcing"),
            timings.median("raw"),
            ratio=timings.time_ratio("eventsourcing", "raw"),
            note=f"informative; its states average {es_mean:.0f} B (sized to match); "
            f"ours (2a) replays at {timings.time_ratio('load', 'eventsourcing'):.2f}x its time",
        ),
        _memory_figure(plain, raw, cid, sum(map(len, states))),
    ]
    snapped.close()
    figures.append(_bytes_figure(snap_path, folder, len(states), mean_state))
    figures.append(_worst_tail_figure(snap_path, cid, sizes, load_plain))
    plain.close()
    raw.close()
    return [f.judge() for f in figures]


def _memory_figure(store: Store, raw: RawSQLite, cid: ConversationId, stored: int) -> Figure:
    key = cid.bytes
    store.repository.load(cid)  # warm: statements, caches

    def peak(call: Callable[[], object]) -> int:
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            result = call()
            peak = tracemalloc.get_traced_memory()[1] - before
            del result
        finally:
            tracemalloc.stop()
        return peak

    ours = peak(lambda: store.repository.load(cid))
    baseline = peak(lambda: raw.replay(key))
    return Figure(
        "4b",
        "replay peak memory / stored bytes",
        "tracemalloc peak above the start, during repository.load (no snapshot)",
        "the conversation's stored states (sum of their compact JSON lengths)",
        "memory",
        float(ours),
        float(stored),
        unit="B",
        ratio=ours / stored,
        target=("<=", 3.0),
        note=f"raw sqlite3 + orjson.loads into a list peaks at {baseline / stored:.2f}x; "
        "memory SQLite allocates itself is not traced",
        extra={"raw_orjson_peak_bytes": baseline},
    )


def file_bytes(path: Path) -> int:
    """An SQLite file's size after a WAL checkpoint and a VACUUM (no slack, no WAL)."""
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.execute("VACUUM")
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    return path.stat().st_size


def _bytes_figure(path: Path, folder: Path, events: int, mean_state: float) -> Figure:
    empty_path = folder / "empty.db"
    open_store(str(empty_path)).close()
    empty = file_bytes(empty_path)
    full = file_bytes(path)
    per_event = (full - empty) / events
    return Figure(
        "4a",
        "stored bytes per event / compact JSON",
        "SQLite file size after checkpoint + VACUUM, minus the empty store, per event",
        "mean compact JSON length of the same events (the stored states)",
        "size",
        per_event,
        mean_state,
        unit="B/event",
        ratio=per_event / mean_state,
        target=("<=", 1.2),
        note=f"{events:,} events, {full - empty:,} B over an empty store of {empty:,} B "
        "(rows, the (conversation, version) index, one snapshot, page slack)",
    )


def _worst_tail_figure(
    path: Path, cid: ConversationId, sizes: Sizes, load_plain: Callable[[], object]
) -> Figure:
    """Informative: the snapshot store with the most events a load can find after one."""
    store = open_store(str(path), snapshot_every=SNAPSHOT_EVERY, cache_size=0)
    conversation = store.repository.load(cid)
    conversation.clock = workload.FixedClock(conversation.modified_on)
    following = islice(_drafts(), conversation.version - 1, None)
    added = 0
    while added < SNAPSHOT_EVERY - 1:
        conversation.record_all(islice(following, min(10, SNAPSHOT_EVERY - 1 - added)))
        added += len(conversation.pending)
        store.repository.save(conversation)
    timings = interleave(
        {"tail": lambda: store.repository.load(cid), "load": load_plain},
        rounds=sizes.replay_rounds,
        warmup=2,
    )
    store.close()
    return Figure(
        "2c",
        f"replay, snapshot + {added} events after it",
        f"repository.load with {added} events after the last snapshot (the worst case)",
        "repository.load without snapshots (2a)",
        "time",
        timings.median("tail"),
        timings.median("load"),
        ratio=timings.time_ratio("tail", "load"),
        note="informative: between snapshots a load replays up to snapshot_every - 1 events",
    )


# --- figure 2g: a fresh process's turn as the conversation grows -----------------------------


def growth_figures(sizes: Sizes, folder: Path) -> list[Figure]:
    """Figure 2g: `service.append` of one turn, loading the conversation from the store each
    time (a fresh process: `cache_size=0`), into a long conversation and a short one.

    A snapshot keeps only the conversation's open items (`domain.settled`), so the load is
    the snapshot plus the tail in both, whatever the length: the ratio should stay near 1.
    Both take the same turns, so their tails after the last snapshot stay equal."""
    short, long = _whole_turns(1_000), _whole_turns(10_000 if sizes.quick else 50_000)
    cid = workload.conversation_id(5)
    stores = {
        n: build(folder / f"growth-{n}.db", cid, n, SNAPSHOT_EVERY, batch=100)
        for n in (short, long)
    }
    snapshots = {n: store.recorder.select_snapshot(cid) for n, store in stores.items()}

    def turn_into(store: Store) -> Callable[[], object]:
        turns = workload.turns(seed=11)
        return lambda: store.service.append(cid, next(turns))

    try:
        timings = interleave(
            {"long": turn_into(stores[long]), "short": turn_into(stores[short])},
            rounds=sizes.append_rounds,
            warmup=sizes.warmup,
        )
    finally:
        for store in stores.values():
            store.close()
    sizes_note = ", ".join(
        f"{len(snapshot.state):,} B at {n:,}" for n, snapshot in snapshots.items() if snapshot
    )
    return [
        Figure(
            "2g",
            f"a fresh process's turn at {long:,} events vs at {short:,}",
            f"service.append of one turn (cache_size=0) into a {long:,}-event conversation",
            f"the same into a {short:,}-event conversation",
            "time",
            timings.median("long"),
            timings.median("short"),
            ratio=timings.time_ratio("long", "short"),
            target=("<=", 1.1),
            note=f"median of {sizes.append_rounds} interleaved rounds; snapshot every "
            f"{SNAPSHOT_EVERY}; snapshot states {sizes_note}",
        ).judge()
    ]


def _whole_turns(events: int) -> int:
    """The length of the shortest conversation of `_drafts` that holds at least `events`
    events and ends between turns (its Started event counted), so a turn can follow."""
    total = 1
    for turn in workload.turns(seed=2):
        total += len(turn)
        if total >= events:
            return total
    raise AssertionError("unreachable: the turns are endless")
