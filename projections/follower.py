"""Following the notification log into a view, exactly once, on either backend.

A `Follower` reads the store's notification log in id order, decodes each batch with the
store's mapper, hands it to a `TrackedProjection`, and commits the view rows and the
tracking record of the batch's last notification in ONE transaction of the events' own
database (`ConversationRecorder.view_transaction`). So:

- a crash anywhere before the commit rolls the view rows back with the tracking record:
  the batch is processed again after a restart, and nothing was applied twice;
- a crash after the commit leaves the tracking record: the batch is never read again;
- a worker that read a stale position (another worker committed meanwhile) gets
  `TrackingConflict` when its transaction begins, writes nothing, re-reads the position
  and carries on; re-processing a tracked position is refused by the tracking key.

Gaps. On PostgreSQL a rolled-back append consumes notification ids (sequences do not roll
back). The recorder takes `LOCK TABLE events IN EXCLUSIVE MODE` before drawing ids, so ids
commit in order: once a higher id is visible, a missing lower one will never appear. The
follower logs the gap (ids only, never content) and moves on: it neither waits for ever nor
skips a later-committed event. SQLite assigns `max(id) + 1` under its write lock, so its
log has no gaps.

Why not eventsourcing's `ProjectionRunner`: it builds its own application (and so its own
recorder) from environment variables rather than taking the store's recorder and mapper,
it needs `subscribe` (the SQLite recorder cannot), and it processes one event per call, so
exactly once would cost a transaction (an fsync on SQLite) per event: a catch-up over
100,000 events would be 100,000 commits. One follower serves both backends instead, with
batches; on PostgreSQL `follow` is woken by the recorder's `subscribe` (LISTEN/NOTIFY),
on SQLite it polls.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from eventsourcing.persistence import Notification, Subscription

from convstore.domain.errors import ConversationForgotten, IntegrityError
from convstore.storage.errors import OperationalError, TrackingConflict
from convstore.storage.mapper import EventMapper
from convstore.storage.recorder import ConversationRecorder

log = logging.getLogger("convstore.projections")

DEFAULT_BATCH = 1000
"""Notifications per transaction: large enough to amortize the commit, small enough that a
SQLite follower holds the write lock for tens of milliseconds at a time."""

DEFAULT_LINGER = 0.05
"""Seconds a following worker woken by a notification waits for more before it writes."""

Positioned = tuple[int, Any]
"""A decoded event with its notification id."""

Stored = tuple[int, bytes]
"""A stored event's notification id and bytes."""

Fault = Callable[[str], None]
"""A test hook called at named points of a batch: `read` (before the transaction),
`written` (inside it, after the view rows: between the view write and the commit),
`committed` (after the commit)."""

Progress = Callable[[int, int], None]
"""Called after each batch with (notifications processed so far, notifications to go)."""


class TrackedProjection(ABC):
    """A view kept by a `Follower`: tables in the store's database, filled batch by batch."""

    name: str
    """The tracking records' application name (one position per projection)."""

    decoder: Callable[[bytes], Any] | None = None
    """How the projection reads a stored event; None: the store's mapper (typed events).
    A projection may read only the fields it needs, with msgspec structs of its own."""

    forgets: bool = False
    """Whether it is given the Forgotten events (and then deletes what it holds of their
    conversations). Every other event of a forgotten conversation is passed over, for
    every projection: nothing of it may be read."""

    @abstractmethod
    def setup(self, cursor: Any) -> None:
        """Create the view's tables if missing (idempotent; runs in a view transaction)."""

    @abstractmethod
    def reset(self, cursor: Any) -> None:
        """Delete every view row (a rebuild starts from here)."""

    @abstractmethod
    def process(self, cursor: Any, events: Sequence[Positioned]) -> int:
        """Apply a batch inside its transaction; return how many view rows it wrote.

        Must keep no state outside the database between batches: the transaction may
        roll back after this returns.
        """


@dataclass
class Report:
    """What one `catch_up` (or `rebuild`) did."""

    name: str
    position: int | None
    """The projection's position afterwards: the newest processed notification id."""
    events: int = 0
    """Notifications processed by this call."""
    rows: int = 0
    """View rows written."""
    batches: int = 0
    gaps: int = 0
    """Notification ids found missing (rolled-back appends), logged and passed over."""
    conflicts: int = 0
    """Batches another worker had processed first (nothing written for them here)."""
    undecodable: int = 0
    """Stored events that could not be decoded, logged and passed over."""

    def add(self, other: Report) -> None:
        """Accumulate another report's counts and take its position."""
        self.position = other.position
        self.events += other.events
        self.rows += other.rows
        self.batches += other.batches
        self.gaps += other.gaps
        self.conflicts += other.conflicts
        self.undecodable += other.undecodable


class Follower:
    """Keeps one projection current from one store's notification log, exactly once."""

    def __init__(
        self,
        recorder: ConversationRecorder,
        projection: TrackedProjection,
        *,
        mapper: EventMapper | None = None,
        batch_size: int = DEFAULT_BATCH,
        linger: float = DEFAULT_LINGER,
        fault: Fault | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if not 0 <= linger <= 10:
            raise ValueError("linger must be between 0 and 10 seconds")
        self.recorder = recorder
        self.projection = projection
        self.name = projection.name
        decode = projection.decoder or (mapper or EventMapper()).decode
        unseal = recorder.unseal
        if projection.decoder is None and unseal is not None:  # an encrypted store's
            typed = decode

            def decode(state: bytes) -> Any:
                return typed(unseal(state))

        self.decode = decode
        self.batch_size = batch_size
        self.linger = linger
        self.fault = fault
        self._ready = False

    # --- positions ----------------------------------------------------------------------------

    def position(self) -> int | None:
        """The newest notification id this projection has processed (None: none yet)."""
        return self.recorder.max_tracking_id(self.name)

    def lag(self) -> int:
        """How many notification ids the projection is behind the log's head."""
        head = self.recorder.max_notification_id() or 0
        return max(head - (self.position() or 0), 0)

    def setup(self) -> None:
        """Create the view's tables (once per follower; idempotent)."""
        if not self._ready:
            with self.recorder.view_transaction(self.name) as cursor:
                self.projection.setup(cursor)
            self._ready = True

    # --- catching up --------------------------------------------------------------------------

    def catch_up(self, *, until: int | None = None, progress: Progress | None = None) -> Report:
        """Process every notification up to `until` (default: the log's head now)."""
        self.setup()
        position = self.position()
        report = Report(self.name, position)
        target = self.recorder.max_notification_id() if until is None else until
        if target is None:
            return report
        start = position or 0
        while (position or 0) < target:
            stored = self.recorder.select_log(position, self.batch_size, target)
            if not stored:
                break  # only gaps were left below the target
            try:
                self._apply(stored, position, report)
                position = stored[-1][0]
            except TrackingConflict:
                report.conflicts += 1  # another worker got there first: take its position
                position = report.position = self.position()
            if progress is not None:
                progress((position or 0) - start, max(target - (position or 0), 0))
        return report

    def rebuild(self, *, progress: Progress | None = None) -> Report:
        """Drop the view's rows and tracking records in one transaction, then catch up."""
        self.setup()
        with self.recorder.view_transaction(self.name, reset=True) as cursor:
            self.projection.reset(cursor)
        return self.catch_up(progress=progress)

    def _apply(self, stored: Sequence[Stored], after: int | None, report: Report) -> None:
        """One batch: decode, then view rows + tracking record in one transaction."""
        events: list[Positioned] = []
        expected = (after or 0) + 1
        decode = self.decode
        for nid, state in stored:
            if nid > expected:
                report.gaps += nid - expected
                log.warning(
                    "%s: notification ids %d..%d are missing (rolled-back appends); "
                    "passing over them",
                    self.name,
                    expected,
                    nid - 1,
                )
            expected = nid + 1
            try:
                events.append((nid, decode(state)))
            except ConversationForgotten:
                continue  # its key is gone: nothing of it may be read
            except (IntegrityError, msgspec.DecodeError, RecursionError):
                report.undecodable += 1
                log.error(
                    "%s: the stored event at notification %d cannot be decoded; "
                    "passing over it (run `convstore verify`)",
                    self.name,
                    nid,
                )
        if self.recorder.unseal is not None:  # an encrypted store may hold forgotten ones
            events = self._without_forgotten(events)
        last = stored[-1][0]
        fault = self.fault
        if fault is not None:
            fault("read")
        with self.recorder.view_transaction(self.name, track=last, after=after) as cursor:
            rows = self.projection.process(cursor, events)
            if fault is not None:
                fault("written")
        report.events += len(stored)
        report.rows += rows
        report.batches += 1
        report.position = last
        if fault is not None:
            fault("committed")

    def _without_forgotten(self, events: list[Positioned]) -> list[Positioned]:
        """The batch without the events of forgotten conversations (their Forgotten
        events kept for a projection that `forgets`)."""
        from convstore.storage.forgetting import forgotten_on

        gone = {
            c
            for c in {event.originator_id for _, event in events}
            if forgotten_on(self.recorder, c) is not None
        }
        if not gone:
            return events
        keep = self.projection.forgets
        return [
            (nid, event)
            for nid, event in events
            if event.originator_id not in gone
            or (keep and getattr(event, "type", type(event).__name__) == "Forgotten")
        ]

    # --- following ----------------------------------------------------------------------------

    def follow(
        self,
        stop: threading.Event,
        *,
        interval: float = 1.0,
        on_batch: Callable[[Report], None] | None = None,
    ) -> None:
        """Keep the view current until `stop` is set: a long-lived worker.

        Woken by the recorder's `subscribe` where it has one (PostgreSQL: LISTEN/NOTIFY),
        else by polling every `interval` seconds. A database that goes away is retried
        every `interval` (logged); `on_batch` gets each catch-up that did some work.
        """
        while not stop.is_set():
            try:
                report = self.catch_up()
                if report.events and on_batch is not None:
                    on_batch(report)
                try:
                    subscription = self.recorder.subscribe(gt=report.position)
                except NotImplementedError:
                    stop.wait(interval)
                    continue
                self._follow_subscription(
                    subscription, stop, interval, on_batch, after=report.position
                )
            except OperationalError as error:
                log.warning("%s: the database failed (%s); retrying", self.name, error)
                stop.wait(interval)

    def _follow_subscription(
        self,
        subscription: Subscription[Any],
        stop: threading.Event,
        interval: float,
        on_batch: Callable[[Report], None] | None,
        *,
        after: int | None,
    ) -> None:
        """Process a subscription's notifications in batches until `stop` or a conflict.

        `after` is the position the subscription started from: its notifications follow
        it, so each batch is applied after it, never after a position read later (another
        worker may have processed some of them meanwhile: that batch is a conflict).
        """
        pending: queue.Queue[Notification | BaseException | None] = queue.Queue(
            maxsize=4 * self.batch_size
        )
        done = threading.Event()

        def read() -> None:
            item: Notification | BaseException | None = None
            try:
                for notification in subscription:
                    while not done.is_set():
                        try:
                            pending.put(notification, timeout=0.1)
                            break
                        except queue.Full:
                            continue
            except BaseException as error:
                item = error
            while not done.is_set():
                try:
                    pending.put(item, timeout=0.1)
                    return
                except queue.Full:
                    continue

        reader = threading.Thread(target=read, name=f"{self.name}-subscription", daemon=True)
        with subscription:
            reader.start()
            try:
                self._consume(pending, stop, interval, on_batch, after)
            finally:
                done.set()
                subscription.stop()
        reader.join()

    def _consume(
        self,
        pending: queue.Queue[Notification | BaseException | None],
        stop: threading.Event,
        interval: float,
        on_batch: Callable[[Report], None] | None,
        position: int | None,
    ) -> None:
        while not stop.is_set():
            try:
                first = pending.get(timeout=min(interval, 0.5))
            except queue.Empty:
                continue
            deadline = time.monotonic() + self.linger
            batch: list[Stored] = []
            end: BaseException | None = None
            item: Notification | BaseException | None = first
            while True:
                if isinstance(item, Notification):
                    batch.append((item.id, item.state))
                elif isinstance(item, BaseException):
                    end = item
                    break
                else:
                    end = OperationalError("the subscription ended")
                    break
                if len(batch) >= self.batch_size:
                    break
                # Linger a moment for more: a wake-up per append would otherwise cost a
                # transaction per append, taking the writers' CPU and round trips.
                remaining = deadline - time.monotonic()
                try:
                    item = pending.get(timeout=remaining) if remaining > 0 else pending.get_nowait()
                except queue.Empty:
                    break
            if batch:
                report = Report(self.name, position)
                try:
                    self._apply(batch, position, report)
                except TrackingConflict:
                    return  # another worker moved on: re-read the position, resubscribe
                position = report.position
                if on_batch is not None:
                    on_batch(report)
            if end is not None:
                raise end
