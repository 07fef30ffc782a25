"""kill -9 (RELIABILITY scenario 8, and the issue's process faults) on SQLite and PostgreSQL.

A writer child (`tests/kill_child.py`) ingests the example captures in a loop the way
`convstore ingest` does and prints each response once its commit has returned. The parent
kills it with SIGKILL, by one of five strategies in turn (`make test` runs the last three once):

- `start`: at a random moment in its first second (on an empty store, the first trial's
  child may be creating the tables; later ones are mostly still starting up);
- `sleep`: at a random moment in the half second after its first acknowledgement;
- `acks`: right after reading its N-th acknowledgement, N random;
- `open`: while a long response is half committed: the parent stops the child (SIGSTOP)
  again and again until the store shows that response open, then kills it;
- `commit`: inside a transaction: stopped again and again until it holds the store's
  write lock (SQLite) or a write lock on a table (PostgreSQL), then killed.

After each kill: SQLite's `PRAGMA integrity_check` is `ok` (PostgreSQL: the store opens);
every acknowledged response is stored exactly once, ended as acknowledged; at most one
response is complete but unacknowledged (its commit returned just before the kill); every
conversation's versions are 1..N; `verify` finds every chain intact; and the next write to
a conversation whose response was left open first closes it `abandoned` (`writer_gone`),
leaving its hosted activity `started` (DESIGN.md: a dead writer's response gets nothing
but its end; activities are not the writer's to close). The next trial's child continues
on the same store.

Beside it: `convstore reindex` (killed inside a transaction, or at random) and `convstore
project --follow` beside a writer (at random) killed mid-catch-up: after a restart the index
equals a rebuild, nothing skipped, nothing twice. And the writer killed, by the same
strategies, while it writes a snapshot every 2 versions (nearly every commit holds one):
snapshot + tail equals a full replay, and each stored snapshot equals the replay up to its
version.

Kills are real SIGKILLs; the library has no fault points, so the narrow windows are found
from outside (SIGSTOP, then a look at the store). Each test prints how its kills fell (run
with `-s` to see it).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import LiteralString
from uuid import UUID

import msgspec
import pytest

from convstore.adapters.recording import jobs
from convstore.adapters.recording.jobs import read_capture
from convstore.adapters.wire.providers import adapter
from convstore.domain import (
    Conversation,
    ConversationId,
    Event,
    ResponseEnded,
    ResponseStarted,
    UserMessage,
)
from convstore.domain.responses import ResponseRecorder
from convstore.domain.state import settle
from convstore.projections import portable, search
from convstore.projections.search import SearchIndex
from convstore.projections.verify import verify, verify_conversation
from convstore.storage import PostgresLocation, SQLiteLocation, Store, open_store, parse_location
from convstore.storage.repository import StoreSettled, decode_snapshot
from tests.test_reliability_resend import _same
from tests.test_search import index_rows

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = ("start", "sleep", "acks", "open", "commit")
QUICK = ("acks", "open", "commit")
"""The strategies of the `make test` versions: one trial each."""
SOAK_TRIALS = 50
WAIT = 60.0
"""Seconds to wait for a child's line or exit before failing (a generous bound, not a timing
assertion: the machine is shared)."""


# --- children ------------------------------------------------------------------------------------


class Child:
    """A child process whose stdout lines a thread collects; it ends by SIGKILL."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log
        with log.open("ab") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, *argv],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, done: Callable[[list[str]], bool]) -> None:
        """Poll the lines read so far until `done(lines)`; fail if the child ends first."""
        self.wait_until(lambda: done(self.lines))

    def wait_until(self, ready: Callable[[], bool]) -> None:
        """Poll `ready()` until it holds; fail if the child ends first."""
        deadline = time.monotonic() + WAIT
        while not ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill(exited_ok=False)
                pytest.fail(f"the child ended or stalled before it got there: {self._stderr()}")
            time.sleep(0.001)

    def kill(self, *, exited_ok: bool = False) -> bool:
        """SIGKILL it, reap it and read its last lines; True when the kill ended it.

        A child that exited by itself first is an error unless `exited_ok` (with status 0).
        """
        with contextlib.suppress(ProcessLookupError):  # reaped already
            os.kill(self.pid, signal.SIGKILL)
        code = self.process.wait(WAIT)
        self._reader.join(WAIT)
        if code == -signal.SIGKILL:
            return True
        if not (exited_ok and code == 0):
            pytest.fail(f"the child exited with {code} before the kill: {self._stderr()}")
        return False

    def _stderr(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def _stopped(pid: int) -> None:
    """Wait until process `pid` is stopped (SIGSTOP is delivered asynchronously)."""
    stat = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        state = stat.read_bytes().rpartition(b")")[2].split()[0]
        if state in (b"T", b"t", b"Z"):
            return
        time.sleep(0.0002)
    pytest.fail(f"process {pid} did not stop")


def kill_when(
    child: Child,
    ready: Callable[[], bool],
    gone: Callable[[], bool] = lambda: False,
    *,
    tries: int = 5000,
) -> bool:
    """Stop the child again and again; kill it at the first stop where `ready()` holds.

    While it is stopped it cannot commit, so what `ready` saw is what the kill leaves. When
    `gone()` says the moment has passed, or after `tries` stops, it is killed where it is.
    True when `ready` held.
    """
    deadline = time.monotonic() + WAIT
    for _ in range(tries):
        if time.monotonic() > deadline:
            break
        os.kill(child.pid, signal.SIGSTOP)
        _stopped(child.pid)
        if ready():
            child.kill()
            return True
        passed = gone()
        os.kill(child.pid, signal.SIGCONT)
        if passed or child.process.poll() is not None:
            break
        time.sleep(0.001)
    child.kill(exited_ok=True)
    return False


_WRITE_LOCKS: LiteralString = (
    "SELECT EXISTS (SELECT 1 FROM pg_locks AS l"
    " JOIN pg_class AS c ON c.oid = l.relation"
    " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
    " WHERE n.nspname = %s AND l.granted AND l.mode IN"
    " ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock'))"
)


@contextlib.contextmanager
def write_probe(url: str) -> Iterator[Callable[[], bool]]:
    """A probe saying whether some connection has a write transaction open on the store.

    SQLite: another connection cannot `BEGIN IMMEDIATE` (every writer of the store takes the
    lock up front). PostgreSQL: a write lock is held on a table of the store's schema. Only a
    child writes meanwhile, so an open write transaction is the child's.
    """
    location = parse_location(url)
    if isinstance(location, SQLiteLocation):
        connection = sqlite3.connect(location.path, timeout=0, isolation_level=None)

        def locked() -> bool:
            try:
                connection.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                return True
            connection.execute("ROLLBACK")
            return False

        try:
            yield locked
        finally:
            connection.close()
        return
    import psycopg

    assert isinstance(location, PostgresLocation)
    with psycopg.connect(location.dsn, autocommit=True) as server:

        def holding() -> bool:
            row = server.execute(_WRITE_LOCKS, (location.schema,)).fetchone()
            return bool(row and row[0])

        yield holding


def writer(url: str, work: Path, seed: int, **options: int) -> Child:
    """A writer child ingesting into `url` (options: snapshot_every, big_every)."""
    work.mkdir(exist_ok=True)
    argv = ["-m", "tests.kill_child", "--db", url, "--work", str(work), "--seed", str(seed)]
    for name, value in options.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    return Child(argv, work / "stderr.txt")


def convstore(url: str, work: Path, *command: str) -> Child:
    """The command line `convstore --db URL COMMAND…` as a child."""
    work.mkdir(exist_ok=True)
    argv = ["-m", "convstore.adapters.cli", "--db", url, *command]
    return Child(argv, work / "stderr.txt")


# --- what the store holds ------------------------------------------------------------------------


@dataclass(frozen=True)
class Ack:
    """A response the child acknowledged: its commit had returned."""

    conversation_id: UUID
    response_id: str
    ended: str


def acks(lines: list[str]) -> list[Ack]:
    """The acknowledgements among a writer child's lines."""
    found = []
    for line in lines:
        parts = line.split()
        if parts[:1] == ["ack"] and len(parts) == 5:
            found.append(Ack(UUID(parts[1]), parts[2], parts[3]))
    return found


def head(url: str) -> int:
    """The store's newest notification id (0 when empty)."""
    with open_store(url) as store:
        return store.recorder.max_notification_id() or 0


def events_after(store: Store, position: int) -> list[Event]:
    """Every event stored after notification `position`, in log order."""
    decode = store.repository.mapper.decode
    found: list[Event] = []
    while batch := store.recorder.select_log(position, 500):
        found.extend(decode(state) for _, state in batch)
        position = batch[-1][0]
    return found


def check_integrity(store: Store) -> None:
    """SQLite: `PRAGMA integrity_check` is ok. PostgreSQL: opening the store was the check."""
    if isinstance(store.location, SQLiteLocation):
        with sqlite3.connect(store.location.path) as connection:
            assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def check_conversations(store: Store, events: list[Event]) -> dict[UUID, list[Event]]:
    """Versions 1..N and an intact chain for every conversation `events` touch (all new)."""
    touched: dict[UUID, list[Event]] = defaultdict(list)
    for event in events:
        touched[event.originator_id].append(event)
    for conversation_id, stored in touched.items():
        versions = [event.originator_version for event in stored]
        assert versions == list(range(1, len(stored) + 1)), conversation_id
        check = verify_conversation(store, conversation_id)
        assert check.intact, check.breaks
    return touched


# --- scenario 8: kill -9 during ingest ------------------------------------------------------------


@dataclass
class Tally:
    """How the kills of a run fell."""

    seed: int
    trials: int = 0
    before_first_write: int = 0
    """Writers killed before their first acknowledgement (starting up, opening the store)."""
    acknowledged: int = 0
    unacknowledged: int = 0
    """Trials that left a complete response the child had not acknowledged yet."""
    left_open: int = 0
    """Trials that left a response open (killed between its transactions)."""
    strategies: Counter[str] = field(default_factory=Counter)
    hits: Counter[str] = field(default_factory=Counter)
    """Per strategy: trials killed in the middle of work."""

    def count(self, strategy: str, mid_work: bool) -> None:
        """Count one trial."""
        self.trials += 1
        self.strategies[strategy] += 1
        self.hits[strategy] += mid_work

    def line(self, what: str) -> str:
        """One line for the test's output."""
        per = ", ".join(f"{s} {self.hits[s]}/{n}" for s, n in sorted(self.strategies.items()))
        line = f"{what} (seed {self.seed}): {self.trials} kills, mid-work by strategy: {per}"
        if self.acknowledged:
            line += (
                f"; {self.before_first_write} before the first write, {self.acknowledged} "
                f"acknowledged responses, {self.unacknowledged} complete but unacknowledged, "
                f"{self.left_open} left open"
            )
        return line


def complete_open_response(
    store: Store, conversation_id: UUID, response_id: str, pid: int, capture: Path
) -> None:
    """The next write closes the dead writer's response `abandoned` (`writer_gone`), and
    ingesting its capture again, without --conversation (scenario 26), records the whole
    copy as attempt 2 in that conversation, read as a clean ingest of the capture reads."""
    service = store.service
    cid = ConversationId(conversation_id)
    conversation = service.get(cid)
    opened = conversation.state.open_response
    assert opened is not None and opened.response_id == response_id
    assert opened.writer is not None and opened.writer.pid == pid
    version = conversation.version
    report = jobs.ingest(service, "anthropic", [capture])
    assert report.conversation_id == cid, report.error
    assert [(r.response_id, r.attempt, r.ended) for r in report.responses] == [
        (response_id, 2, "completed")
    ]
    first = next(service.events(cid, after=version))
    assert isinstance(first, ResponseEnded)
    assert (first.response_id, first.state, first.stop_reason, first.finish_reason) == (
        response_id,
        "abandoned",
        "writer_gone",
        "other",
    )
    assert service.get(cid).state.open_response is None
    clean = Conversation.start("a long response")
    ResponseRecorder(clean, lambda _: None).record(
        adapter("anthropic").decode(read_capture(capture), None, None)
    )
    assert _same(msgspec.to_builtins(portable.load(service, cid))) == _same(
        msgspec.to_builtins(portable.fold(clean.pending))
    )
    assert verify_conversation(store, conversation_id).intact


def check_after_kill(
    url: str, position: int, acknowledged: list[Ack], pid: int, tally: Tally, *, capture: Path
) -> None:
    """Scenario 8's checks on what the writer killed with `pid` left after `position`."""
    with open_store(url) as store:
        check_integrity(store)
        events = events_after(store, position)
        check_conversations(store, events)
        started = Counter(  # the provider's responses (a request's history has its own)
            (e.originator_id, e.response_id)
            for e in events
            if isinstance(e, ResponseStarted) and e.origin == "provider"
        )
        ended = {
            (e.originator_id, e.response_id): e.state
            for e in events
            if isinstance(e, ResponseEnded) and (e.originator_id, e.response_id) in started
        }
        keys = {(ack.conversation_id, ack.response_id) for ack in acknowledged}
        for ack in acknowledged:
            key = (ack.conversation_id, ack.response_id)
            assert started[key] == 1, f"{ack} is stored {started[key]} times"
            assert ended[key] == ack.ended, ack
        unacknowledged = [key for key in ended if key not in keys]
        assert len(unacknowledged) <= 1, unacknowledged  # only the one in flight
        left_open = [key for key in started if key not in ended]
        assert len(left_open) <= 1 and not keys & set(left_open), left_open
        for conversation_id, response_id in left_open:
            complete_open_response(store, conversation_id, response_id, pid, capture)
        tally.acknowledged += len(acknowledged)
        tally.unacknowledged += len(unacknowledged)
        tally.left_open += len(left_open)


def _big(lines: list[str]) -> list[str] | None:
    return next((line.split() for line in lines if line.startswith("big ")), None)


def kill_writer(child: Child, strategy: str, rng: random.Random, url: str) -> bool:
    """Kill the writer by `strategy`; True when it was killed in the middle of its work."""
    if strategy in ("start", "sleep"):
        if strategy == "sleep":
            child.wait_for(bool)
        time.sleep(rng.uniform(0.0, 1.0 if strategy == "start" else 0.5))
        child.kill()
        return bool(acks(child.lines))
    if strategy == "acks":
        wanted = rng.randint(1, 300)
        child.wait_for(lambda lines: len(lines) >= wanted)  # every line is an ack here
        return child.kill()
    if strategy == "commit":
        child.wait_for(bool)
        with write_probe(url) as writing:
            return kill_when(child, writing)
    child.wait_for(lambda lines: _big(lines) is not None)
    big = _big(child.lines)
    assert big is not None
    _, conversation_id, response_id = big
    with open_store(url) as store:
        cid = ConversationId(UUID(conversation_id))
        return kill_when(
            child,
            ready=lambda: store.service.get(cid).state.open_response is not None,
            gone=lambda: any(ack.response_id == response_id for ack in acks(child.lines)),
        )


def kill_during_ingest(
    url: str, work: Path, strategies: tuple[str, ...], trials: int, seed: int
) -> Tally:
    """Scenario 8: `trials` writers killed by each strategy in turn, checked after each."""
    rng = random.Random(seed)
    tally = Tally(seed)
    for trial in range(trials):
        strategy = strategies[trial % len(strategies)]
        position = head(url)
        child = writer(url, work, seed * 1000 + trial, big_every=int(strategy == "open"))
        mid_work = kill_writer(child, strategy, rng, url)
        acknowledged = acks(child.lines)
        tally.count(strategy, mid_work)
        tally.before_first_write += not acknowledged
        check_after_kill(
            url, position, acknowledged, child.pid, tally, capture=work / "big.response.sse"
        )
    with open_store(url) as store:
        report = verify(store)
        assert report.intact, report.breaks
        for check in report.checks:
            conversation = store.service.get(ConversationId(UUID(check.conversation_id)))
            assert conversation.state.open_response is None, "a response was left open"
    return tally


def test_kill_during_ingest(store_url: str, tmp_path: Path) -> None:
    """Scenario 8, three trials (after N acknowledgements, between a long response's
    transactions, inside a transaction): nothing acknowledged is lost or doubled; and
    scenario 26: the long response left open is completed by ingesting its capture again
    (attempt 2, read as a clean ingest reads)."""
    tally = kill_during_ingest(store_url, tmp_path, QUICK, len(QUICK), seed=8)
    print(tally.line("scenario 8"))
    assert tally.trials == len(QUICK)


@pytest.mark.soak
def test_soak_kill_during_ingest(store_url: str, tmp_path: Path) -> None:
    """Scenario 8 at full size: 50 kills; most land in the middle of the work."""
    tally = kill_during_ingest(store_url, tmp_path, STRATEGIES, SOAK_TRIALS, seed=int(time.time()))
    print(tally.line("scenario 8"))
    assert sum(tally.hits.values()) >= tally.trials // 2
    assert tally.left_open >= tally.strategies["open"] // 2


# --- kill -9 during projection catch-up -----------------------------------------------------------


def check_index_after_restart(url: str) -> tuple[int | None, int]:
    """Restart the search follower; the index must equal a rebuild. (position killed, head)."""
    with open_store(url) as store:
        check_integrity(store)
        follower = search.follower(store)
        killed_at = follower.position()
        follower.catch_up()
        newest = store.recorder.max_notification_id() or 0
        assert follower.position() == newest
        index = follower.projection
        assert isinstance(index, SearchIndex)
        rows, dump = index_rows(store), index.dump()
        follower.rebuild()
        assert index_rows(store) == rows  # nothing skipped, nothing twice
        assert index.dump() == dump  # the full-text entries and open turns too
    return killed_at, newest


def reindex_probed(url: str, work: Path) -> bool:
    """`convstore reindex`, killed inside one of its transactions (the reset or a batch)."""
    child = convstore(url, work, "reindex")
    with write_probe(url) as writing:
        return kill_when(child, writing, gone=lambda: bool(child.lines))


def kill_during_projection(url: str, work: Path, trials: int, seed: int, events: int) -> Tally:
    """Search catch-ups killed mid-work: `reindex` inside a transaction, `reindex` at a
    random moment after it began, `project --follow` at random beside a writer; the index
    is checked after each restart."""
    rng = random.Random(seed)
    tally = Tally(seed)
    filler = writer(url, work, seed)
    filler.wait_for(lambda lines: len(lines) * 7 >= events)  # about 7 events a response
    filler.kill()
    for trial in range(trials):
        strategy = ("commit", "random", "follow")[trial % 3]
        if strategy == "follow":
            feeding = writer(url, work, seed * 1000 + trial)
            follower = convstore(url, work, "project", "--follow", "--interval", "0.05")
            follower.wait_for(bool)  # it has indexed a batch
            time.sleep(rng.uniform(0.0, 0.5))
            follower.kill()
            time.sleep(rng.uniform(0.0, 0.2))
            feeding.kill()
            inside = False
        elif strategy == "random":
            child = convstore(url, work, "reindex")
            with write_probe(url) as writing:
                child.wait_until(writing)  # the rebuild has begun
            time.sleep(rng.uniform(0.0, 0.15))  # a rebuild of 10,000 events takes ~0.3 s
            child.kill(exited_ok=True)
            inside = False
        else:
            inside = reindex_probed(url, work)
        killed_at, newest = check_index_after_restart(url)
        tally.count(strategy, inside or (killed_at or 0) < newest)
    return tally


def test_kill_during_projection_catch_up(store_url: str, tmp_path: Path) -> None:
    """Process fault: a search catch-up killed three ways; after a restart the index equals
    a rebuild (the follower's exactly-once commit, scenario 6, under a real kill)."""
    tally = kill_during_projection(store_url, tmp_path, 3, seed=6, events=1500)
    print(tally.line("projection catch-up"))
    assert tally.trials == 3


@pytest.mark.soak
def test_soak_kill_during_projection_catch_up(store_url: str, tmp_path: Path) -> None:
    """Process fault at size: 9 killed catch-ups over a store of about 10,000 events."""
    tally = kill_during_projection(store_url, tmp_path, 9, seed=int(time.time()), events=10_000)
    print(tally.line("projection catch-up"))
    assert sum(tally.hits.values()) >= tally.trials // 2


# --- kill -9 during a snapshot --------------------------------------------------------------------


def check_snapshots(url: str, position: int) -> int:
    """Snapshot + tail equals a full replay for each conversation written after `position`,
    and each stored snapshot equals the replay up to its version. Returns the snapshots."""
    snapshots = 0
    with open_store(url, cache_size=0) as store:
        check_integrity(store)
        touched = check_conversations(store, events_after(store, position))
        for conversation_id, events in touched.items():
            cid = ConversationId(conversation_id)
            replayed = Conversation.replay(cid, events)
            assert store.repository.load(cid) == replayed
            snapshot = store.recorder.select_snapshot(conversation_id)
            if snapshot is None:
                continue
            snapshots += 1
            assert snapshot.version <= replayed.version
            # The snapshot keeps the open items; the store's settled rows answer for the rest.
            full = Conversation.replay(cid, events[: snapshot.version]).state
            kept, items = settle(full, snapshot.version)
            assert decode_snapshot(snapshot.state) == kept
            port = StoreSettled(store.recorder, cid)
            found = port.found(
                responses=list(items.responses),
                calls=list(items.calls),
                activities=list(items.activities),
                upto=snapshot.version,
            )
            assert found == items
        if touched:  # the store continues: a write on the newest conversation, then a load
            cid = ConversationId(next(reversed(touched)))
            store.service.add_user_input(cid, [UserMessage(blocks=("one more",))])
            assert store.repository.load(cid) == Conversation.replay(cid, store.service.events(cid))
    return snapshots


def kill_during_snapshots(
    url: str, work: Path, strategies: tuple[str, ...], trials: int, seed: int
) -> Tally:
    """Writers saving a snapshot every 2 versions (so nearly every commit writes one),
    killed by each strategy in turn."""
    rng = random.Random(seed)
    tally = Tally(seed)
    for trial in range(trials):
        strategy = strategies[trial % len(strategies)]
        position = head(url)
        child = writer(
            url, work, seed * 1000 + trial, snapshot_every=2, big_every=int(strategy == "open")
        )
        tally.count(strategy, kill_writer(child, strategy, rng, url))
        acknowledged = acks(child.lines)
        tally.acknowledged += len(acknowledged)
        tally.before_first_write += not acknowledged
        assert check_snapshots(url, position) or not acknowledged
    return tally


def test_kill_during_snapshot(store_url: str, tmp_path: Path) -> None:
    """Process fault: writers killed while they write snapshots; the store loads the same
    state from its snapshots as from a full replay (scenario 9's snapshot + tail)."""
    tally = kill_during_snapshots(store_url, tmp_path, QUICK, len(QUICK), seed=9)
    print(tally.line("snapshots"))
    assert tally.trials == len(QUICK)


@pytest.mark.soak
def test_soak_kill_during_snapshot(store_url: str, tmp_path: Path) -> None:
    """Process fault at size: 10 writers killed while they write snapshots."""
    tally = kill_during_snapshots(store_url, tmp_path, STRATEGIES, 10, seed=int(time.time()))
    print(tally.line("snapshots"))
    assert sum(tally.hits.values()) >= tally.trials // 2
