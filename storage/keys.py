"""Data keys, kept apart from the events: one AES-256 key per conversation.

A `KeyStore` holds each conversation's data key, wrapped by a `KeyWrapper` (the identity
by default; a KMS wraps them with its own key, so a backup of the events and the key
store together still holds no usable key). Keys never live beside the events: beside an
SQLite store they are an SQLite file of their own (`STORE.keys`), and for a PostgreSQL
store a database of its own on the same server (`DB_keys`, same schema name), since a
table in the events' database would land in the same dump.

Destroying a key (`destroy`) is what `forget` rests on: the row is deleted with SQLite's
`secure_delete` (the page is zeroed, the file uses a rollback journal, never a WAL, so no
frame keeps it) or, on PostgreSQL, deleted and the table vacuumed.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID

from convstore.storage.errors import StoreNotFound, translating

KEY_BYTES = 32
"""AES-256."""


class KeyWrapper(Protocol):
    """Wraps data keys before they are stored (a KMS's encrypt and decrypt)."""

    def wrap(self, key: bytes, conversation_id: UUID) -> bytes:
        """The stored form of `key`."""
        ...

    def unwrap(self, wrapped: bytes, conversation_id: UUID) -> bytes:
        """The key a stored form holds."""
        ...


class Unwrapped:
    """The default wrapper: keys are stored as they are (the key store is the secret)."""

    def wrap(self, key: bytes, conversation_id: UUID) -> bytes:
        """`key` itself."""
        return key

    def unwrap(self, wrapped: bytes, conversation_id: UUID) -> bytes:
        """`wrapped` itself."""
        return wrapped


class KeyStore(ABC):
    """Each conversation's data key: made once, read, destroyed."""

    def __init__(self, wrapper: KeyWrapper | None = None) -> None:
        self.wrapper: KeyWrapper = wrapper or Unwrapped()

    def key(self, conversation_id: UUID, *, create: bool) -> bytes | None:
        """The conversation's key; with `create`, one is made when it has none (a new
        conversation). None when it has none (never made, or destroyed)."""
        wrapped = self._select(conversation_id)
        if wrapped is None and create:
            self._insert(conversation_id, self.wrapper.wrap(_new_key(), conversation_id))
            wrapped = self._select(conversation_id)  # another writer's, if it was first
        return None if wrapped is None else self.wrapper.unwrap(wrapped, conversation_id)

    @abstractmethod
    def _select(self, conversation_id: UUID) -> bytes | None: ...

    @abstractmethod
    def _insert(self, conversation_id: UUID, wrapped: bytes) -> None:
        """Insert unless the conversation has a key already."""

    @abstractmethod
    def destroy(self, conversation_id: UUID) -> None:
        """Delete the conversation's key for good (idempotent), leaving no copy behind."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""


def _new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def keys_path(store_path: str) -> str:
    """The key file beside an SQLite store."""
    return store_path if store_path == ":memory:" else store_path + ".keys"


class SQLiteKeyStore(KeyStore):
    """Keys in an SQLite file of their own, beside the store's."""

    def __init__(
        self, path: str, *, read_only: bool = False, wrapper: KeyWrapper | None = None
    ) -> None:
        super().__init__(wrapper)
        self.path = path
        if read_only and path != ":memory:" and not Path(path).is_file():
            raise StoreNotFound(
                f"the store is encrypted but its key file {path} is missing: its content "
                "cannot be read (restore the key file beside the store)"
            )
        uri = f"file:{path}?mode=ro" if read_only and path != ":memory:" else path
        with translating():
            if not read_only and path != ":memory:" and not Path(path).exists():
                Path(path).touch(mode=0o600)
            self._db = sqlite3.connect(
                uri,
                uri=uri != path,
                isolation_level=None,
                check_same_thread=False,
                timeout=30,
            )
            self._db.execute("PRAGMA secure_delete=ON")
            if not read_only:
                self._db.execute("PRAGMA journal_mode=DELETE")
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS data_keys ("
                    " conversation_id BLOB PRIMARY KEY, wrapped BLOB NOT NULL) WITHOUT ROWID"
                )
        self._guard = threading.Lock()

    def _select(self, conversation_id: UUID) -> bytes | None:
        with translating(), self._guard:
            row = self._db.execute(
                "SELECT wrapped FROM data_keys WHERE conversation_id = ?",
                (conversation_id.bytes,),
            ).fetchone()
        return None if row is None else bytes(row[0])

    def _insert(self, conversation_id: UUID, wrapped: bytes) -> None:
        with translating(), self._guard:
            self._db.execute(
                "INSERT OR IGNORE INTO data_keys VALUES (?, ?)", (conversation_id.bytes, wrapped)
            )

    def destroy(self, conversation_id: UUID) -> None:
        """Delete the key; secure_delete zeroes its bytes in the page (no WAL holds them)."""
        with translating(), self._guard:
            self._db.execute(
                "DELETE FROM data_keys WHERE conversation_id = ?", (conversation_id.bytes,)
            )
            self._db.execute("VACUUM")  # no free page keeps an old copy either

    def close(self) -> None:
        """Close the file."""
        self._db.close()


def keys_dsn(dsn: str) -> str:
    """The key database's URI for a store's: the same server, database `DB_keys`."""
    parts = urlsplit(dsn)
    name = parts.path.lstrip("/") or "postgres"
    return urlunsplit(parts._replace(path=f"/{name}_keys"))


class PostgresKeyStore(KeyStore):
    """Keys in a PostgreSQL database of their own (`DB_keys`), in the store's schema name."""

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "public",
        read_only: bool = False,
        wrapper: KeyWrapper | None = None,
    ) -> None:
        import psycopg
        from psycopg import sql

        super().__init__(wrapper)
        self._sql = sql
        self.schema = schema
        self.dsn = keys_dsn(dsn)
        with translating():
            if not read_only:
                _create_database(psycopg, dsn, self.dsn)
            self._db: Any = psycopg.connect(self.dsn, autocommit=True)
            if not read_only:
                self._db.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
                )
                self._db.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {}.data_keys ("
                        " conversation_id uuid PRIMARY KEY, wrapped bytea NOT NULL)"
                    ).format(sql.Identifier(schema))
                )
        self._table = sql.SQL("{}.data_keys").format(sql.Identifier(schema))
        self._guard = threading.Lock()

    def _select(self, conversation_id: UUID) -> bytes | None:
        query = self._sql.SQL("SELECT wrapped FROM {} WHERE conversation_id = %s")
        with translating(), self._guard:
            row = self._db.execute(query.format(self._table), (conversation_id,)).fetchone()
        return None if row is None else bytes(row[0])

    def _insert(self, conversation_id: UUID, wrapped: bytes) -> None:
        query = self._sql.SQL("INSERT INTO {} VALUES (%s, %s) ON CONFLICT DO NOTHING")
        with translating(), self._guard:
            self._db.execute(query.format(self._table), (conversation_id, wrapped))

    def destroy(self, conversation_id: UUID) -> None:
        """Delete the key and vacuum the table, so no dead row version keeps it."""
        delete = self._sql.SQL("DELETE FROM {} WHERE conversation_id = %s")
        with translating(), self._guard:
            self._db.execute(delete.format(self._table), (conversation_id,))
            self._db.execute(self._sql.SQL("VACUUM {}").format(self._table))

    def close(self) -> None:
        """Close the connection."""
        self._db.close()


def _create_database(psycopg: Any, dsn: str, keys: str) -> None:
    """Create the key database when the server lacks it (a writer's first open)."""
    name = urlsplit(keys).path.lstrip("/")
    with psycopg.connect(dsn, autocommit=True) as admin:
        found = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if found is None:
            try:
                admin.execute(
                    psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name))
                )
            except psycopg.errors.DuplicateDatabase:
                pass  # another writer made it first
            except psycopg.errors.UniqueViolation:
                pass
