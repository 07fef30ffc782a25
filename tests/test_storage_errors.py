"""Driver errors map to the PEP 249 storage errors (one table per driver)."""

from __future__ import annotations

import sqlite3

import eventsourcing.persistence as es
import psycopg
import psycopg.errors as pg
import pytest

from convstore.domain.errors import StorageError
from convstore.storage import errors
from convstore.storage.errors import translate, translating

Table = list[tuple[type[Exception], type[StorageError]]]

SQLITE: Table = [
    (sqlite3.IntegrityError, errors.ConstraintFailed),  # no code: not a taken position
    (sqlite3.OperationalError, errors.OperationalError),  # "database is locked"
    (sqlite3.InterfaceError, errors.InterfaceError),
    (sqlite3.DataError, errors.DataError),
    (sqlite3.ProgrammingError, errors.ProgrammingError),
    (sqlite3.InternalError, errors.InternalError),
    (sqlite3.NotSupportedError, errors.ProgrammingError),
    (sqlite3.DatabaseError, errors.OperationalError),  # e.g. "file is not a database"
    (sqlite3.Error, errors.OperationalError),
]

PSYCOPG: Table = [
    (pg.UniqueViolation, errors.IntegrityError),  # no constraint named: the append's own
    (pg.ForeignKeyViolation, errors.ConstraintFailed),
    (pg.NotNullViolation, errors.ConstraintFailed),
    (pg.CheckViolation, errors.ConstraintFailed),
    (psycopg.IntegrityError, errors.ConstraintFailed),
    (pg.LockNotAvailable, errors.OperationalError),  # lock_timeout: a busy database
    (pg.QueryCanceled, errors.OperationalError),
    (pg.DeadlockDetected, errors.OperationalError),
    (pg.SerializationFailure, errors.OperationalError),
    (pg.AdminShutdown, errors.ConnectionLost),  # the server ended the session
    (pg.TooManyConnections, errors.OperationalError),
    (pg.DiskFull, errors.StorageFull),
    (psycopg.OperationalError, errors.OperationalError),  # connection refused or lost
    (psycopg.InterfaceError, errors.InterfaceError),
    (pg.InvalidTextRepresentation, errors.DataError),
    (pg.NumericValueOutOfRange, errors.DataError),
    (pg.ProgramLimitExceeded, errors.OperationalError),
    (pg.UndefinedTable, errors.ProgrammingError),  # tables missing
    (pg.SyntaxError, errors.ProgrammingError),
    (pg.InsufficientPrivilege, errors.ProgrammingError),
    (psycopg.NotSupportedError, errors.ProgrammingError),
    (pg.InternalError_, errors.InternalError),
    (pg.DataCorrupted, errors.InternalError),
    (psycopg.DatabaseError, errors.OperationalError),
    (psycopg.Error, errors.OperationalError),
]

PEP_249 = {
    errors.InterfaceError: es.InterfaceError,
    errors.OperationalError: es.OperationalError,
    errors.StorageFull: es.OperationalError,
    errors.ConnectionLost: es.OperationalError,
    errors.IntegrityError: es.IntegrityError,
    errors.ConstraintFailed: es.IntegrityError,
    errors.DataError: es.DataError,
    errors.ProgrammingError: es.ProgrammingError,
    errors.InternalError: es.InternalError,
}


@pytest.mark.parametrize(
    ("driver_error", "expected"),
    SQLITE + PSYCOPG,
    ids=lambda cls: f"{cls.__module__}.{cls.__name__}",
)
def test_driver_error_maps_to_its_storage_error(
    driver_error: type[Exception], expected: type[StorageError]
) -> None:
    translated = translate(driver_error("boom"))
    assert type(translated) is expected
    assert isinstance(translated, StorageError)  # shown to users without a traceback
    assert isinstance(translated, PEP_249[expected])  # recognised by eventsourcing
    assert "boom" in str(translated)


@pytest.mark.parametrize("driver_error", [sqlite3.OperationalError, pg.UniqueViolation])
def test_translating_keeps_the_cause(driver_error: type[Exception]) -> None:
    original = driver_error("taken")
    with pytest.raises(StorageError) as caught, translating():
        raise original
    assert caught.value.__cause__ is original


def test_translating_leaves_other_errors_alone() -> None:
    with pytest.raises(KeyError), translating():
        raise KeyError("not a driver error")
