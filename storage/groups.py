"""Group commit: one thread's appends committed together, each in a savepoint of its own.

Where no person waits on each response (batch ingest; later, imports), one durable commit
per response caps the rate at what the disk's flushes allow. Inside a recorder's
`grouped()`, each append of the thread runs in a savepoint of one shared transaction: it
is applied whole, or undone alone on its error (a conflict in one conversation leaves the
others' appends in place). The transaction commits every `every` appends, once `within`
seconds have passed since it began (checked as each append ends), and when the group
ends. Each append keeps its own boundaries: a response's blocks still go in whole, as
many appends as they did.

Nothing acknowledged is ever lost: an append is acknowledged (the callbacks given to
`after_commit` after it run) only once the commit that holds it returned, with the same
durability as a commit per append (`synchronous=FULL` on SQLite; PostgreSQL's commit).
A crash or a failed commit loses at most the appends not acknowledged yet; the group
then forgets their callbacks and calls `lost`, so caches that saw them are dropped.
"""

from __future__ import annotations

import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

GROUP_EVERY: Final = 64
"""Appends a group commits together at most."""
GROUP_WITHIN: Final = 0.05
"""Seconds a group's transaction stays open at most (checked as each append ends): what a
reader beside it, or another writer waiting for the lock, waits at most."""


class CommitGroup(ABC):
    """One thread's open group: its shared transaction and what waits for its commit."""

    def __init__(self, *, every: int, within: float, lost: Callable[[], None]) -> None:
        self.every = every
        self.within = within
        self.lost = lost
        self._open = False
        self._began = 0.0
        self._writes = 0
        self._acks: list[tuple[Callable[[], None], Callable[[BaseException], None] | None]] = []

    @property
    def open(self) -> bool:
        """Whether the shared transaction is open (appends wait in it for its commit)."""
        return self._open

    @contextmanager
    def append(self) -> Iterator[None]:
        """One append, in a savepoint of the shared transaction (begun if none is open);
        the group commits once it is due."""
        if not self._open:
            self._begin()
            self._open, self._began, self._writes = True, time.monotonic(), 0
        self._savepoint()
        try:
            yield
            self._release()
        except BaseException:
            if self._in_transaction():
                self._undo()
            else:  # the database rolled the whole transaction back (a full disk, an I/O error)
                self._lose(sys.exception())
            raise
        self._writes += 1
        if self._writes >= self.every or time.monotonic() - self._began >= self.within:
            self.commit()

    def after_commit(
        self, callback: Callable[[], None], lost: Callable[[BaseException], None] | None = None
    ) -> None:
        """Run `callback` once what was appended so far is committed (at once if it is),
        or `lost` with the error if the transaction holding it is lost instead."""
        if self._open:
            self._acks.append((callback, lost))
        else:
            callback()

    def commit(self) -> None:
        """Commit the shared transaction, then acknowledge what it held; on a failed
        commit, raise its error with nothing acknowledged."""
        if self._open:
            try:
                self._commit()
            except BaseException as error:
                if self._in_transaction():
                    self._rollback()
                self._lose(error)
                raise
            self._open = False
        acks, self._acks = self._acks, []
        for ack, _ in acks:
            ack()

    def _lose(self, error: BaseException | None) -> None:
        self._open = False
        acks, self._acks = self._acks, []
        self.lost()
        for _, lost in acks:
            if lost is not None:
                lost(error or RuntimeError("the group's transaction was lost"))

    @abstractmethod
    def _begin(self) -> None:
        """Open the shared transaction, taking the write lock."""

    @abstractmethod
    def _in_transaction(self) -> bool:
        """Whether the shared transaction is still open on the connection."""

    @abstractmethod
    def _execute(self, statement: str) -> None:
        """Run one statement on the group's connection (the same SQL on both backends)."""

    def _savepoint(self) -> None:
        self._execute("SAVEPOINT append")

    def _release(self) -> None:
        self._execute("RELEASE SAVEPOINT append")

    def _undo(self) -> None:
        """Roll back to the savepoint and release it: the append is gone, the rest stays."""
        self._execute("ROLLBACK TO SAVEPOINT append")
        self._execute("RELEASE SAVEPOINT append")

    def _commit(self) -> None:
        self._execute("COMMIT")

    def _rollback(self) -> None:
        self._execute("ROLLBACK")
