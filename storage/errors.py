"""Storage errors under their PEP 249 names, and the one helper that maps driver errors.

Each class is both convstore's `StorageError` (so the command line shows it without a
traceback) and eventsourcing's PEP 249 class of the same name (so eventsourcing's own
contract tests and callers recognise it).

    StorageError
    ├── InterfaceError      the connection or driver was misused or is closed
    ├── OperationalError    the database is busy, unreachable, full, or went away
    │   ├── StorageFull       the disk (or the size limit) is full
    │   └── ConnectionLost    the server ended the session or went away mid-call
    ├── IntegrityError      a position is taken (a conversation's version, a tracking position)
    │   ├── TrackingConflict  a projection's position moved under a view transaction
    │   └── ResponseTaken     a provider response's key is taken (it is stored elsewhere)
    ├── ConstraintFailed    any other constraint refused a row (tables this version did not make)
    ├── DataError           a value the database cannot store
    ├── ProgrammingError    a bad statement or a missing table
    ├── InternalError       the database reported an internal fault
    ├── SchemaMismatch      the store's migrations do not match this version's
    │   ├── MigrationRequired  a read-only reader met a store it cannot read unmigrated
    │   └── NewerSchema        the store was written by a newer convstore
    └── StoreNotFound       a reader was given a location that holds no store
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import eventsourcing.persistence as es

from convstore.domain.errors import StorageError


class InterfaceError(StorageError, es.InterfaceError):
    """The connection or driver was misused or is closed."""


class OperationalError(StorageError, es.OperationalError):
    """The database is busy, unreachable, full, or went away."""


class StorageFull(OperationalError):
    """The disk, or the database's size limit, is full: nothing of the write was stored."""


class ConnectionLost(OperationalError):
    """The connection to the database broke: the server ended the session or went away."""


class IntegrityError(StorageError, es.IntegrityError):
    """A position is already taken: a conversation's version, or a projection's tracking
    position. The one integrity error that means another writer came first."""


class TrackingConflict(IntegrityError):
    """Another worker advanced the projection since its position was read: re-read it."""


class ResponseTaken(IntegrityError):
    """A provider response's (provider, server, response id, attempt) is already in the
    store's `responses` index: another write stored that response first."""


class ConstraintFailed(StorageError, es.IntegrityError):
    """A constraint other than a position refused a row: a NOT NULL column or a CHECK this
    version does not write, a foreign key, a trigger, another unique index. The store's
    tables are not the ones this convstore made (a newer convstore, or a change by hand);
    nothing was written, and retrying cannot help: never a concurrency conflict."""

    def __init__(self, message: str, *, constraint: str) -> None:
        super().__init__(message)
        self.constraint = constraint
        """What failed, as the database names it: `table.column`, an index or a CHECK."""


class DataError(StorageError, es.DataError):
    """A value the database cannot store."""


class ProgrammingError(StorageError, es.ProgrammingError):
    """A bad statement or a missing table."""


class InternalError(StorageError, es.InternalError):
    """The database reported an internal fault."""


class SchemaMismatch(StorageError):
    """The store's applied migrations do not match this version's: nothing was touched."""


class MigrationRequired(SchemaMismatch):
    """A read-only reader cannot read the store before `convstore migrate` runs."""


class NewerSchema(SchemaMismatch):
    """The store has a migration this version does not know: a newer convstore wrote it."""


class StoreNotFound(StorageError):
    """A reader was given a location that holds no convstore store; nothing was created."""


_BY_NAME: dict[str, type[StorageError]] = {
    "InterfaceError": InterfaceError,
    "OperationalError": OperationalError,
    "DataError": DataError,
    "ProgrammingError": ProgrammingError,
    "InternalError": InternalError,
    "NotSupportedError": ProgrammingError,
    "DatabaseError": OperationalError,
}


_LOST_STATES = frozenset({"57P01", "57P02", "08003", "08006", "08007"})
"""SQLSTATEs of a session the server ended: admin or crash shutdown, connection failure,
no connection, transaction resolution unknown."""


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def storage_full(error: BaseException) -> StorageFull:
    """The error a full disk or size limit becomes, saying what to do."""
    return StorageFull(
        f"the database is full ({_first_line(error)}): nothing of this write was stored; "
        "free disk space and retry"
    )


def connection_lost(error: BaseException) -> ConnectionLost:
    """The error a broken connection becomes, saying what became of the write."""
    return ConnectionLost(
        f"the database connection was lost ({_first_line(error)}): a write under way was "
        "committed whole or not at all; reload and retry"
    )


SQLITE_POSITIONS: Final = frozenset(
    {
        "events.originator_id, events.originator_version",  # a conversation's version
        "tracking.application_name, tracking.notification_id",  # a projection's position
    }
)
SQLITE_RESPONSES: Final = (
    "responses.provider, responses.server, responses.response_id, responses.attempt"
)
"""The columns SQLite names when a provider response's key is taken (`ResponseTaken`)."""
"""The columns SQLite names in a violated unique key that is a position (`IntegrityError`)."""
POSTGRES_POSITIONS: Final = frozenset(
    {"events_originator_id_originator_version_key", "tracking_pkey"}
)
"""PostgreSQL's names of the unique keys that are positions. A unique violation naming no
constraint is the append function's own (`RAISE unique_violation`: a tracking position)."""
POSTGRES_RESPONSES: Final = "responses_pkey"
"""PostgreSQL's name of the provider responses' key (`ResponseTaken`)."""

_SQLITE_UNIQUE = frozenset({sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY})
_UNIQUE_VIOLATION = "23505"


def _integrity(error: BaseException) -> StorageError:
    """A driver's integrity error: `IntegrityError` for a taken position, else
    `ConstraintFailed` naming the constraint (from the error's first line and the driver's
    diagnostics only: the lines after it may quote the row, payloads included)."""
    what = _first_line(error)
    code = getattr(error, "sqlite_errorcode", None)
    diag = getattr(error, "diag", None)  # psycopg
    if code is not None or diag is None:
        constraint = what.partition("constraint failed: ")[2] or what
        if code in _SQLITE_UNIQUE and constraint == SQLITE_RESPONSES:
            return ResponseTaken(f"IntegrityError: {what}")
        if code in _SQLITE_UNIQUE and constraint in SQLITE_POSITIONS:
            return IntegrityError(f"IntegrityError: {what}")
    else:
        name = diag.constraint_name
        if getattr(error, "sqlstate", None) == _UNIQUE_VIOLATION and name == POSTGRES_RESPONSES:
            return ResponseTaken(f"IntegrityError: {what}")
        if getattr(error, "sqlstate", None) == _UNIQUE_VIOLATION and (
            name is None or name in POSTGRES_POSITIONS
        ):
            return IntegrityError(f"IntegrityError: {what}")
        column = f"{diag.table_name}.{diag.column_name}" if diag.column_name else None
        constraint = name or column or what
    return ConstraintFailed(
        f"the store refused the write ({what}): its tables have a column or constraint this"
        " convstore does not make (a newer convstore, or a change by hand, altered them);"
        " nothing was written; open it with the convstore that made it",
        constraint=constraint,
    )


def translate(error: BaseException) -> StorageError:
    """The most specific storage error for a driver's PEP 249 exception (any driver)."""
    state = getattr(error, "sqlstate", None)  # psycopg
    if getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or state == "53100":
        return storage_full(error)
    if state in _LOST_STATES:
        return connection_lost(error)
    code = getattr(error, "sqlite_errorcode", None)
    if state == "25006" or (code is not None and code & 0xFF == sqlite3.SQLITE_READONLY):
        return OperationalError(
            f"the store is open read-only ({_first_line(error)}): nothing was written"
        )
    for cls in type(error).__mro__:
        if cls.__name__ == "IntegrityError":
            return _integrity(error)
        mapped = _BY_NAME.get(cls.__name__)
        if mapped is not None:
            return mapped(f"{cls.__name__}: {error}")
    return OperationalError(f"{type(error).__name__}: {error}")


def driver_errors() -> tuple[type[BaseException], ...]:
    """The driver exception classes that `translating` maps: sqlite3's, and psycopg's once
    it is loaded (a PostgreSQL store loads it; a command on SQLite never pays for it)."""
    psycopg = sys.modules.get("psycopg")
    error = getattr(psycopg, "Error", None)
    if isinstance(error, type) and issubclass(error, BaseException):
        return (sqlite3.Error, error)
    return (sqlite3.Error,)


@contextmanager
def translating() -> Iterator[None]:
    """Re-raise driver errors as storage errors, keeping the cause."""
    try:
        yield
    except Exception as error:
        if isinstance(error, driver_errors()):
            raise translate(error) from error
        raise
