"""The writers' holds: what a writer process keeps for its life, so others can tell it lives.

`domain.writers` states the rule; this module keeps and tests the holds, one per writer
process and store location, keyed by the process's writer id:

- **SQLite** (`FileHolds`): an exclusive `flock` on `<store>.writers/<writer id>.lock`
  (the folder `0700`, the file `0600`, neither followed through a link). The kernel
  releases it when the process dies, in whatever PID namespace or with whatever clock.
  The writer removes its file when it exits; a tester that finds a file unlocked (its
  writer died) removes it. A missing file means its writer is gone, so the folder must go
  where the store goes (like its `-wal` file).
- **PostgreSQL** (`AdvisoryHolds`): a session advisory lock keyed by the writer id, on a
  connection of its own kept open for the life of the process (one per database); the
  server releases it when that session ends. A tester takes the key with
  `pg_try_advisory_xact_lock`, released again at the end of its statement.

A hold is taken only when a process records a response (`hold()`), so reading creates
nothing. A forked child keeps none of its parent's holds and takes its own.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from convstore.domain.writers import Liveness, OwnProcessOnly, WriterStatus, process_writer_id
from convstore.storage.errors import OperationalError
from convstore.storage.url import SQLiteLocation, StoreLocation

if TYPE_CHECKING:
    from psycopg import Connection

APPLICATION: Final = "convstore writer hold"
"""The `application_name` of the sessions that hold and test writers' locks."""
_WRITER_ID: Final = re.compile(r"[0-9a-f]{32}")
"""What `process_writer_id` makes; anything else read from a store is never a path."""


@dataclass
class _LockFile:
    folder: int
    """The lock folder, opened (so the file is removed from the folder it was made in)."""
    file: int
    name: str


@dataclass
class _Held:
    """This process's holds."""

    files: dict[str, _LockFile] = field(default_factory=dict)
    """Lock files, by lock folder."""
    sessions: dict[str, Connection] = field(default_factory=dict)
    """Hold sessions, by PostgreSQL DSN."""
    lock: threading.Lock = field(default_factory=threading.Lock)


_held = _Held()


def liveness_for(location: StoreLocation) -> Liveness:
    """The holds of writers to the store at `location`."""
    if isinstance(location, SQLiteLocation):
        if str(location.path) == ":memory:":
            return OwnProcessOnly()  # no other process can reach it
        return FileHolds(location.path)
    return AdvisoryHolds(location.dsn)


class FileHolds:
    """Writers' holds on an SQLite store: an OS file lock per writer beside the store."""

    def __init__(self, store: Path) -> None:
        self.folder = os.path.abspath(f"{store}.writers")

    def hold(self) -> str:
        """Lock this process's file (made the first time) and return its writer id."""
        writer_id = process_writer_id()
        with _held.lock:
            if self.folder not in _held.files:
                _held.files[self.folder] = self._take(writer_id)
        return writer_id

    def _take(self, writer_id: str) -> _LockFile:
        name = f"{writer_id}.lock"
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(self.folder, 0o700)
            folder = os.open(
                self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            )
        except OSError as error:
            raise self._cannot(error) from None
        try:
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            file = os.open(name, flags, 0o600, dir_fd=folder)
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(file)
                raise
        except OSError as error:
            os.close(folder)
            raise self._cannot(error) from None
        return _LockFile(folder, file, name)

    def _cannot(self, error: OSError) -> OperationalError:
        return OperationalError(
            f"cannot take this writer's lock in {self.folder}: {error.strerror or error}; "
            "a response is recorded only under a lock others can test (check the folder "
            "beside the store: a directory of its owner, not a link)"
        )

    def status(self, writer_id: str) -> WriterStatus:
        """`alive` while the writer's file is locked; `gone` once unlocked or removed."""
        if not _WRITER_ID.fullmatch(writer_id):
            return "unknown"
        try:
            folder = os.open(
                self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            )
        except FileNotFoundError:
            return "gone"  # no writer ever held a lock beside this store
        except OSError:
            return "unknown"
        try:
            return _test(folder, f"{writer_id}.lock")
        finally:
            os.close(folder)


def _test(folder: int, name: str) -> WriterStatus:
    try:
        file = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    except FileNotFoundError:
        return "gone"  # its writer exited and removed it, or a tester did
    except OSError:
        return "unknown"
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return "alive"
    except OSError:
        return "unknown"
    else:
        # Its writer died: the file is ours to remove (ids are never reused), unless the
        # store is read-only or another tester was first.
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=folder)
        return "gone"
    finally:
        os.close(file)


class AdvisoryHolds:
    """Writers' holds on a PostgreSQL store: a session advisory lock per writer."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def hold(self) -> str:
        """Hold this process's lock on its own session (again, if that session was lost)."""
        import psycopg

        writer_id = process_writer_id()
        with _held.lock:
            session = _held.sessions.get(self.dsn)
            if session is not None:
                try:
                    session.execute("SELECT 1")
                    return writer_id
                except psycopg.Error:
                    del _held.sessions[self.dsn]  # the server ended it, and the lock with it
            try:
                _held.sessions[self.dsn] = self._take(advisory_key(writer_id))
            except psycopg.Error as error:
                raise OperationalError(
                    f"cannot take this writer's advisory lock: {error}"
                ) from None
        return writer_id

    def _take(self, key: int) -> Connection:
        """A session holding `key`: a new one, or the session of ours that already holds it
        on this database (another DSN of the same database)."""
        import psycopg

        session = psycopg.connect(self.dsn, autocommit=True, application_name=APPLICATION)
        if _try_lock(session, key):
            return session
        holder = session.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND ((classid::bigint << 32) | objid::bigint) = %s AND objsubid = 1",
            (key,),
        ).fetchone()
        ours = {s.info.backend_pid: s for s in _held.sessions.values() if not s.closed}
        if holder is not None and holder[0] in ours:
            session.close()
            return ours[holder[0]]
        if holder is not None:  # a session of ours this process lost, not yet ended
            session.execute("SELECT pg_terminate_backend(%s, 10000)", (holder[0],))
            if _try_lock(session, key):
                return session
        session.close()
        raise OperationalError("another session holds this writer's advisory lock")

    def status(self, writer_id: str) -> WriterStatus:
        """`alive` while some session holds the writer's key; `gone` once none does."""
        import psycopg

        if not _WRITER_ID.fullmatch(writer_id):
            return "unknown"
        try:
            with psycopg.connect(
                self.dsn, autocommit=True, application_name=APPLICATION
            ) as session:
                # Taken for this one statement's transaction: released at once.
                row = session.execute(
                    "SELECT pg_try_advisory_xact_lock(%s)", (advisory_key(writer_id),)
                ).fetchone()
        except psycopg.Error:
            return "unknown"
        if not row:
            return "unknown"
        return "gone" if row[0] is True else "alive"


def _try_lock(session: Connection, key: int) -> bool:
    row = session.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
    return row is not None and row[0] is True


def advisory_key(writer_id: str) -> int:
    """The advisory lock key of a writer id: its first 64 bits, signed."""
    return int.from_bytes(bytes.fromhex(writer_id[:16]), "big", signed=True)


def _forget_in_child() -> None:
    """A forked child holds none of its parent's locks: forget them without releasing."""
    for held in _held.files.values():
        os.close(held.file)  # the parent's descriptor keeps the lock
        os.close(held.folder)
    _held.files.clear()
    _held.sessions.clear()  # psycopg never ends a session from a process that did not open it
    _held.lock = threading.Lock()  # another of the parent's threads may have held it


def _release_at_exit() -> None:
    for held in _held.files.values():
        with contextlib.suppress(OSError):
            os.unlink(held.name, dir_fd=held.folder)
        os.close(held.file)
        os.close(held.folder)
    _held.files.clear()


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(_release_at_exit)
