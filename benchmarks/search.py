"""Figures 6 (SQLite) and 7 (PostgreSQL): the search projection.

- `a` catch-up: a follower indexing the whole log (reading, decoding, extracting, writing
  the index rows and one tracking record per 1,000 events), against the driver inserting
  the very rows it wrote into the same index tables (rows table and FTS5 table; the rows
  table with its tsvector and GIN index on PostgreSQL), in the same transactions, at the
  same durability. The log is `LOG_EVENTS` events of the benchmark workload's turns.
- `b` (SQLite) reading + decoding the whole log: `select_log` pages and the store's
  mapper decoding every event into typed domain events, against raw sqlite3 paging the
  same rows (`id > ? ORDER BY id LIMIT 1000`) with `orjson.loads` of each state.
- `c`, `d`, `e` growth: ranked search (top 20, snippets included, in process) p95 over
  queries whose every term matches 80 items (one word, two words), at the large size
  against 10,000 indexed items; `e` reports common-term queries (no target). The large
  size is 1,000,000 items with `--full`, else 100,000 (30,000 with `--quick`): the
  figure's title says which. Items are filled straight into the index tables through
  the projection's own insert (the catch-up figure measures getting them there).
- `f` appending responses (ten events each, `repository.save`) to a store while a
  `convstore project --follow` worker process keeps its index, against appending to a
  store without one, round by round (the two stores on the same disk).
- `g` follower lag under steady ingest at half the maximum append rate (`f`'s rate
  without a follower): the mean lag of the last quarter of the run over that of the
  second quarter, each plus the expected lag of one poll interval; a lag that stays
  bounded gives about 1, one that grows without bound about 2.3.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from benchmarks import workload
from benchmarks.common import Figure, Sizes, skipped, timed
from convstore.projections import search as search_module
from convstore.projections.follower import Follower
from convstore.projections.search import SearchIndex
from convstore.storage import Store, open_store
from convstore.storage.mapper import EventMapper
from convstore.storage.sqlite import SQLiteRecorder

DSN = os.environ.get("CONVSTORE_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
BATCH = 1000
SMALL_ITEMS = 10_000
POLL = 0.05
"""The follower worker's poll interval (SQLite) / retry interval (PostgreSQL), seconds."""


@dataclass(frozen=True)
class Plan:
    """How big this run is."""

    log_events: int
    large_items: int
    queries: int
    common_queries: int
    catch_up_rounds: int
    read_rounds: int
    append_rounds: int
    responses_per_round: int
    lag_seconds: float

    @classmethod
    def of(cls, sizes: Sizes) -> Plan:
        if sizes.quick:
            return cls(10_000, 30_000, 60, 6, 2, 3, 6, 10, 3.0)
        large = 1_000_000 if sizes.full else 100_000
        return cls(100_000, large, 200, 12, 3, 5, 16, 20, 10.0)


# --- the stores -----------------------------------------------------------------------------------


class Backend:
    """Where one family's stores live: SQLite files in the folder, or PostgreSQL schemas."""

    def __init__(self, kind: str, folder: Path) -> None:
        self.kind = kind
        self.folder = folder
        self.prefix = "6" if kind == "sqlite" else "7"
        self.schemas: list[str] = []

    @property
    def title(self) -> str:
        return "SQLite" if self.kind == "sqlite" else "PostgreSQL"

    def url(self, name: str) -> str:
        if self.kind == "sqlite":
            path = self.folder / f"search-{name}.db"
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            return f"sqlite:///{path}"
        schema = f"convstore_bench_search_{name}_{os.getpid()}"
        self._drop(schema)
        self.schemas.append(schema)
        return f"{DSN}{'&' if '?' in DSN else '?'}schema={schema}"

    def _drop(self, schema: str) -> None:
        import psycopg

        with psycopg.connect(DSN, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    def close(self) -> None:
        for schema in self.schemas:
            self._drop(schema)


def build_log(url: str, events: int) -> Store:
    """A store holding about `events` events: conversations of ten workload turns each."""
    store = open_store(url)
    turns = workload.turns(seed=7)
    total, n = 0, 0
    while total < events:
        conversation = workload.conversation(workload.conversation_id(1000 + n))
        n += 1
        for _ in range(10):
            conversation.record_all(next(turns))
        total += conversation.version
        store.repository.save(conversation)
    return store


def _reset(follower: Follower) -> None:
    follower.setup()
    with follower.recorder.view_transaction(follower.name, reset=True) as cursor:
        follower.projection.reset(cursor)


# --- a: catch-up ----------------------------------------------------------------------------------


class RawIndex:
    """The baseline: the driver inserting given index rows into the same tables."""

    def __init__(self, backend: Backend, url: str) -> None:
        self.backend = backend
        self.store = open_store(url)  # an empty store: only for its tables and connection
        self.index = SearchIndex(self.store.recorder)
        Follower(self.store.recorder, self.index).setup()
        self.batches: list[Any] = []

    def load(self, rows: Sequence[search_module.Row]) -> None:
        """Group the rows into the follower's transactions and into driver parameters."""
        batches: dict[int, list[search_module.Row]] = {}
        for row in rows:
            batches.setdefault((row[0] // search_module.PIECES - 1) // BATCH, []).append(row)
        for batch in batches.values():
            if self.backend.kind == "sqlite":
                self.batches.append(
                    (
                        [(i, c.bytes, v, t, k, b) for i, c, v, t, k, b in batch],
                        [(r[0], search_module.normalized(r[5])) for r in batch],
                    )
                )
            else:
                columns = [list(column) for column in zip(*batch, strict=True)]
                columns.append([search_module.normalized(r[5]) for r in batch])
                self.batches.append(tuple(columns))

    def clear(self) -> None:
        with self.store.recorder.view_transaction("raw", reset=True) as cursor:
            self.index.reset(cursor)

    def insert_all(self) -> None:
        recorder = self.store.recorder
        if isinstance(recorder, SQLiteRecorder):
            connection = sqlite3.connect(recorder.path, isolation_level=None)
            connection.execute("PRAGMA synchronous=FULL")
            try:
                for rows, fts in self.batches:
                    connection.execute("BEGIN IMMEDIATE")
                    connection.executemany(
                        "INSERT INTO search_rows VALUES (?, ?, ?, ?, ?, ?)", rows
                    )
                    connection.executemany(
                        "INSERT INTO search_fts (rowid, body) VALUES (?, ?)", fts
                    )
                    connection.execute("COMMIT")
            finally:
                connection.close()
        else:
            import psycopg
            from psycopg import sql

            from convstore.storage.postgres import PostgresRecorder

            assert isinstance(recorder, PostgresRecorder)
            with psycopg.connect(recorder.dsn, autocommit=True) as server:
                server.execute(
                    sql.SQL("SET search_path TO {}").format(sql.Identifier(recorder.schema))
                )
                for columns in self.batches:
                    with server.transaction():
                        server.execute(search_module._POSTGRES_INSERT, columns)

    def close(self) -> None:
        self.store.close()


def _index_rows(store: Store) -> list[search_module.Row]:
    from uuid import UUID

    with store.recorder.view_reader() as cursor:
        rows = cursor.execute(
            "SELECT id, conversation_id, version, turn_id, kind, body FROM search_rows ORDER BY id"
        ).fetchall()
    return [
        (i, c if isinstance(c, UUID) else UUID(bytes=c), v, t, k, b) for i, c, v, t, k, b in rows
    ]


def catch_up_figure(backend: Backend, store: Store, plan: Plan) -> Figure:
    follower = search_module.follower(store, batch_size=BATCH)
    report = follower.rebuild()  # warm-up, and the rows the baseline inserts
    raw = RawIndex(backend, backend.url("raw"))
    try:
        raw.load(_index_rows(store))
        ours: list[float] = []
        theirs: list[float] = []
        for i in range(plan.catch_up_rounds):
            for name in ("ours", "raw") if i % 2 == 0 else ("raw", "ours"):
                if name == "ours":
                    _reset(follower)
                    ours.append(timed(follower.catch_up))
                else:
                    raw.clear()
                    theirs.append(timed(raw.insert_all))
    finally:
        raw.close()
    ratio = statistics.median(b / s for s, b in zip(ours, theirs, strict=True))
    return Figure(
        f"{backend.prefix}a",
        f"search catch-up over {report.events:,} events, {backend.title}",
        f"Follower.catch_up of the search index ({report.rows:,} rows, {BATCH} events per "
        "transaction: select_log, decode, extract, insert, tracking record)",
        "the driver inserting the same rows into the same index tables in the same "
        "transactions (same durability)",
        "throughput",
        statistics.median(ours),
        statistics.median(theirs),
        ratio=ratio,
        target=(">=", 0.5),
        note=f"median of {plan.catch_up_rounds} alternating rounds; "
        f"{report.events / statistics.median(ours):,.0f} events/s",
    ).judge()


# --- b: reading and decoding the log --------------------------------------------------------------


def read_figure(backend: Backend, store: Store, plan: Plan) -> Figure:
    recorder = store.recorder
    assert isinstance(recorder, SQLiteRecorder)
    decode = EventMapper.decode
    raw = sqlite3.connect(recorder.path)

    def ours() -> int:
        count, position = 0, 0
        while page := recorder.select_log(position, BATCH):
            for _, state in page:
                decode(state)
            count += len(page)
            position = page[-1][0]
        return count

    def theirs() -> int:
        count, position = 0, 0
        loads = orjson.loads
        while page := raw.execute(
            "SELECT id, originator_id, originator_version, topic, state FROM events"
            " WHERE id > ? ORDER BY id LIMIT ?",
            (position, BATCH),
        ).fetchall():
            for row in page:
                loads(row[4])
            count += len(page)
            position = page[-1][0]
        return count

    def light() -> None:
        position = 0
        read = search_module.read_event
        while page := recorder.select_log(position, BATCH):
            for _, state in page:
                read(state)
            position = page[-1][0]

    try:
        assert ours() == theirs()
        rounds: dict[str, list[float]] = {"ours": [], "raw": [], "light": []}
        for i in range(plan.read_rounds):
            order = ["ours", "raw", "light"]
            for name in order[i % 3 :] + order[: i % 3]:
                call = {"ours": ours, "raw": theirs, "light": light}[name]
                rounds[name].append(timed(call))
    finally:
        raw.close()
    ratio = statistics.median(b / s for s, b in zip(rounds["ours"], rounds["raw"], strict=True))
    events = recorder.max_notification_id() or 0
    return Figure(
        f"{backend.prefix}b",
        f"read + decode the whole log ({events:,} events), {backend.title}",
        "select_log pages of 1,000 + EventMapper.decode into typed events",
        "raw sqlite3 paging the same rows (id > ? LIMIT 1000) + orjson.loads of each state",
        "throughput",
        statistics.median(rounds["ours"]),
        statistics.median(rounds["raw"]),
        ratio=ratio,
        target=(">=", 0.6),
        note=f"median of {plan.read_rounds} rounds; the search projection's own partial "
        f"decode (search.read_event) takes {statistics.median(rounds['light']):.3g} s",
    ).judge()


# --- c, d, e: growth ------------------------------------------------------------------------------


ITEMS_PER_RARE_WORD = 80
"""Items each rare word of a growth query is in (when the items number 40 per word)."""


def rare_word(n: int) -> str:
    """A word no workload text contains."""
    letters = "bcdfghjklmnpqrstvwxz"
    word = ""
    while True:
        n, digit = divmod(n, len(letters))
        word += letters[digit]
        if n == 0:
            return "qz" + word


def rare_words(i: int, pool: int) -> tuple[str, str]:
    """The two rare words of item `i` when items are planted from a `pool` of words.

    Over `40 * pool` consecutive items, each word is the first word of 40 items and the
    second of 40 more: every word is in `ITEMS_PER_RARE_WORD` items.
    """
    step = 7 if pool % 7 else 11
    return rare_word(i % pool), rare_word((i * step + 3) % pool)


def rare_pool(items: int) -> int:
    """How many rare words `items` items hold (see `rare_words`)."""
    return max(items // (ITEMS_PER_RARE_WORD // 2), 1)


def fill_index(url: str, items: int) -> tuple[Store, SearchIndex, list[str], list[str]]:
    """An index of `items` rows; each rare word is in exactly 80 of them."""
    from uuid import UUID

    store = open_store(url)
    index = SearchIndex(store.recorder)
    Follower(store.recorder, index).setup()
    pool = rare_pool(items)
    rng = random.Random(items)
    conversations = [UUID(int=rng.getrandbits(128)) for _ in range(max(items // 200, 1))]
    one_word: list[str] = []
    two_words: list[str] = []
    for start in range(0, items, 10_000):
        rows: list[search_module.Row] = []
        for i in range(start, min(start + 10_000, items)):
            first, second = rare_words(i, pool)
            text = f"{workload.paragraph(rng, rng.randint(1, 3))} {first} {second}"
            rows.append(
                (
                    (i + 1) * search_module.PIECES,
                    conversations[i % len(conversations)],
                    i % 97 + 1,
                    None,
                    "text",
                    text,
                )
            )
            if i % (items // 500 or 1) == 0:
                one_word.append(first)
                two_words.append(f"{first} {second}")
        with store.recorder.view_transaction("fill") as cursor:
            index.dialect.insert(cursor, rows)
    return store, index, one_word, two_words


def p95(values: list[float]) -> float:
    """The 95th percentile (nearest rank) of latencies."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def growth_figures(backend: Backend, plan: Plan) -> list[Figure]:
    small_store, small, small_one, small_two = fill_index(backend.url("small"), SMALL_ITEMS)
    large_store, large, large_one, large_two = fill_index(backend.url("large"), plan.large_items)
    try:
        rng = random.Random(5)
        latencies: dict[tuple[str, str], list[float]] = {}
        common = ["matcha", "tea garden", "the", "weather forecast rain"]
        kinds = {
            "one word": (small_one, large_one, plan.queries),
            "two words": (small_two, large_two, plan.queries),
            "common": (common, common, plan.common_queries),
        }
        for kind, (small_queries, large_queries, count) in kinds.items():
            for size, index, queries in (
                ("small", small, small_queries),
                ("large", large, large_queries),
            ):
                index.search(queries[0], 20)  # warm the statement and the pages
                latencies[(kind, size)] = []
            for i in range(count):
                pairs = [("small", small, small_queries), ("large", large, large_queries)]
                if i % 2:
                    pairs.reverse()
                for size, index, queries in pairs:
                    query = rng.choice(queries)
                    started = time.perf_counter()
                    hits = index.search(query, 20)
                    latencies[(kind, size)].append(time.perf_counter() - started)
                    assert hits or kind == "common", f"{query!r} found nothing"
    finally:
        small_store.close()
        large_store.close()
    figures = []
    for letter, kind in (("c", "one word"), ("d", "two words"), ("e", "common")):
        big, base = p95(latencies[(kind, "large")]), p95(latencies[(kind, "small")])
        figures.append(
            Figure(
                f"{backend.prefix}{letter}",
                f"search p95, {kind}, {plan.large_items:,} vs {SMALL_ITEMS:,} items, "
                f"{backend.title}",
                f"SearchIndex.search(top 20, snippets) p95 at {plan.large_items:,} items",
                f"the same at {SMALL_ITEMS:,} items",
                "time",
                big,
                base,
                ratio=big / base,
                target=None if kind == "common" else ("<=", 3.0),
                note=(
                    f"{len(latencies[(kind, 'large')])} queries per size, alternating; "
                    + (
                        "each rare term is in exactly 80 items"
                        if kind != "common"
                        else f"common terms {common} (informative)"
                    )
                    + ("" if plan.large_items >= 1_000_000 else "; run with --full for 1,000,000")
                ),
            ).judge()
        )
    return figures


# --- f, g: appending beside a following worker ----------------------------------------------------


@contextlib.contextmanager
def worker(url: str) -> Iterator[subprocess.Popen[bytes]]:
    """`convstore project --follow` on `url`, in its own process."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "convstore.adapters.cli",
            "--db",
            url,
            "project",
            "--follow",
            "--interval",
            str(POLL),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Appender:
    """Appends workload responses to one conversation held in memory."""

    def __init__(self, store: Store, seed: int) -> None:
        self.store = store
        self.source = workload.responses(seed=seed)
        self.conversation = workload.conversation(workload.conversation_id(seed))
        store.repository.save(self.conversation)

    def append(self, responses: int) -> None:
        for _ in range(responses):
            self.conversation.record_all(next(self.source))
            self.store.repository.save(self.conversation)


def _wait_caught_up(follower: Follower, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while follower.lag() or follower.position() is None:
        if process.poll() is not None:
            error = process.stderr.read().decode() if process.stderr else ""
            raise RuntimeError(f"the follower worker exited: {error[-500:]}")
        if time.monotonic() > deadline:
            raise RuntimeError("the follower worker did not catch up in 2 minutes")
        time.sleep(0.02)


def follower_figures(backend: Backend, plan: Plan) -> list[Figure]:
    followed_url, alone_url = backend.url("followed"), backend.url("alone")
    followed, alone = open_store(followed_url), open_store(alone_url)
    try:
        with worker(followed_url) as process:
            a, b = Appender(followed, 11), Appender(alone, 12)
            watcher = search_module.follower(followed)
            a.append(2)
            b.append(2)
            _wait_caught_up(watcher, process)
            k = plan.responses_per_round
            times: dict[str, list[float]] = {"with": [], "without": []}
            for i in range(plan.append_rounds):
                for name in ("with", "without") if i % 2 == 0 else ("without", "with"):
                    appender = a if name == "with" else b
                    times[name].append(timed(partial(appender.append, k)))
            ratio = statistics.median(
                w / f for f, w in zip(times["with"], times["without"], strict=True)
            )
            max_rate = 10 * k / statistics.median(times["without"])  # events per second
            _wait_caught_up(watcher, process)
            lag_figure = _lag_figure(
                backend,
                plan=plan,
                appender=a,
                watcher=watcher,
                max_rate=max_rate,
                process=process,
            )
    finally:
        followed.close()
        alone.close()
    append_figure = Figure(
        f"{backend.prefix}f",
        f"append rate with a follower worker running, {backend.title}",
        "repository.save of one response (10 events) per call, with `convstore project "
        "--follow` indexing the same store in another process",
        "the same appends to a store nobody follows",
        "throughput",
        statistics.median(times["with"]) / (10 * k),
        statistics.median(times["without"]) / (10 * k),
        ratio=ratio,
        target=(">=", 0.8),
        note=f"median of {plan.append_rounds} paired rounds of {k} responses; "
        f"{max_rate:,.0f} events/s without a follower; values are seconds per event",
    ).judge()
    return [append_figure, lag_figure]


def _lag_figure(
    backend: Backend,
    *,
    plan: Plan,
    appender: Appender,
    watcher: Follower,
    max_rate: float,
    process: subprocess.Popen[bytes],
) -> Figure:
    rate = max_rate / 2 / 10  # responses per second: half the maximum
    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            samples.append((time.monotonic(), watcher.lag()))

    sampler = threading.Thread(target=sample)
    started = time.monotonic()
    sampler.start()
    try:
        n = 0
        while (now := time.monotonic()) - started < plan.lag_seconds:
            due = started + n / rate
            if now < due:
                time.sleep(due - now)
            appender.append(1)
            n += 1
    finally:
        stop.set()
        sampler.join()
    if process.poll() is not None:
        raise RuntimeError("the follower worker exited during the lag run")
    span = plan.lag_seconds

    def mean_lag(first: float, last: float) -> float:
        values = [lag for t, lag in samples if first <= (t - started) / span < last]
        return statistics.fmean(values) if values else 0.0

    quantum = max_rate / 2 * POLL
    early, late = mean_lag(0.25, 0.5), mean_lag(0.75, 1.0)
    worst = max((lag for _, lag in samples), default=0)
    return Figure(
        f"{backend.prefix}g",
        f"follower lag at half the max append rate, {backend.title}",
        "mean lag (events) over the last quarter of the run",
        "mean lag over the second quarter",
        "time",
        late,
        early,
        unit="events",
        ratio=(late + quantum) / (early + quantum),
        target=("<=", 2.0),
        note=f"{span:g} s of ingest at {rate * 10:,.0f} events/s ({n} responses); "
        f"worst lag {worst} events; each mean plus one poll interval of ingest "
        f"({quantum:.0f} events): ~1 when bounded, ~2.3 when growing",
    ).judge()


# --- the family -----------------------------------------------------------------------------------


def _postgres_problem() -> str | None:
    try:
        import psycopg
    except ImportError as error:
        return f"psycopg is not installed ({error})"
    try:
        psycopg.connect(DSN, connect_timeout=3).close()
    except psycopg.Error as error:
        return f"the PostgreSQL server at {DSN} does not answer: {' '.join(str(error).split())}"
    return None


def search_figures(sizes: Sizes, folder: Path) -> list[Figure]:
    """Figures 6 (SQLite) and 7 (PostgreSQL, skipped when the server does not answer)."""
    plan = Plan.of(sizes)
    figures: list[Figure] = []
    for kind in ("sqlite", "postgres"):
        backend = Backend(kind, folder)
        if kind == "postgres" and (why := _postgres_problem()) is not None:
            figures.append(
                skipped(
                    "7",
                    "search figures, PostgreSQL",
                    subject="search projection",
                    baseline="-",
                    kind="throughput",
                    why=why,
                )
            )
            continue
        try:
            store = build_log(backend.url("log"), plan.log_events)
            try:
                figures.append(catch_up_figure(backend, store, plan))
                if kind == "sqlite":
                    figures.append(read_figure(backend, store, plan))
            finally:
                store.close()
            figures.extend(growth_figures(backend, plan))
            figures.extend(follower_figures(backend, plan))
        finally:
            backend.close()
    return figures
