"""The search index's two SQL dialects behind one interface (`Dialect`): SQLite FTS5 and
PostgreSQL full-text search. Each makes the index's tables, keeps the open turns, the
attempts' turns and the title spans, inserts and deletes rows, searches and dumps; the
tables and the reasons for their layout are described in `projections.search`, which
drives them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, Protocol
from uuid import UUID

import msgspec

from convstore.projections.query import Node, normalized, to_fts5, to_tsquery
from convstore.storage.recorder import ConversationRecorder

Row = tuple[int, UUID, int, str | None, str, str]
"""An index row: (id, conversation, version, turn, kind, body)."""
_encode = msgspec.json.encode


class Dialect(Protocol):
    def setup(self, cursor: Any) -> None: ...
    def reset(self, cursor: Any) -> None: ...
    def turn(self, cursor: Any, conversation: UUID) -> str | None: ...
    def set_turns(self, cursor: Any, turns: dict[UUID, str | None]) -> None: ...
    def insert(self, cursor: Any, rows: list[Row]) -> None: ...
    def attempt_turns(self, cursor: Any) -> dict[UUID, str | None]: ...
    def set_attempt_turns(
        self, cursor: Any, turns: dict[UUID, tuple[str | None] | None]
    ) -> None: ...
    def delete(self, cursor: Any, conversation: UUID, spans: list[tuple[int, int]]) -> None: ...
    def version_turn(
        self, cursor: Any, conversation: UUID, version: int
    ) -> tuple[str | None] | None: ...
    def delete_ids(self, cursor: Any, low: int, high: int) -> None: ...
    def merge(self, cursor: Any) -> None: ...
    def title_span(self, cursor: Any, conversation: UUID) -> tuple[int, int] | None: ...
    def set_titles(self, cursor: Any, titles: dict[UUID, tuple[int, int] | None]) -> None: ...
    def search(self, cursor: Any, node: Node, limit: int) -> list[tuple[Row, float]]: ...
    def dump(self, cursor: Any) -> Iterator[bytes]: ...


_SQLITE_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS search_rows ("
    " id INTEGER PRIMARY KEY, conversation_id BLOB NOT NULL, version INTEGER NOT NULL,"
    " turn_id TEXT, kind TEXT NOT NULL, body TEXT NOT NULL)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS search_fts USING fts5("
    "body, content='',"
    " tokenize=\"unicode61 remove_diacritics 2 categories 'L* N* M* Co Cn'\")",
    "CREATE TABLE IF NOT EXISTS search_turns ("
    " conversation_id BLOB PRIMARY KEY, turn_id TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS search_attempts ("
    " conversation_id BLOB PRIMARY KEY, turn_id TEXT) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS search_titles ("
    " conversation_id BLOB PRIMARY KEY, low INTEGER NOT NULL, high INTEGER NOT NULL)"
    " WITHOUT ROWID",
)
_SQLITE_SEARCH: Final = (
    "SELECT r.id, r.conversation_id, r.version, r.turn_id, r.kind, r.body, m.rank"
    " FROM (SELECT rowid, rank FROM search_fts WHERE search_fts MATCH ?"
    "       ORDER BY rank, rowid LIMIT ?) AS m"
    " JOIN search_rows AS r ON r.id = m.rowid ORDER BY m.rank, r.id"
)


class SQLiteIndex:
    """FTS5, contentless; the rows table holds the text and the pointers."""

    def setup(self, cursor: Any) -> None:
        for statement in _SQLITE_SCHEMA:
            cursor.execute(statement)

    def reset(self, cursor: Any) -> None:
        # Dropping frees the pages at once; deleting a million rows would hold the write
        # lock (and so every writer) far longer.
        for table in (
            "search_rows",
            "search_fts",
            "search_turns",
            "search_attempts",
            "search_titles",
        ):
            cursor.execute(f"DROP TABLE IF EXISTS {table}")
        self.setup(cursor)

    def turn(self, cursor: Any, conversation: UUID) -> str | None:
        row = cursor.execute(
            "SELECT turn_id FROM search_turns WHERE conversation_id = ?", (conversation.bytes,)
        ).fetchone()
        return None if row is None else str(row[0])

    def set_turns(self, cursor: Any, turns: dict[UUID, str | None]) -> None:
        cursor.executemany(
            "DELETE FROM search_turns WHERE conversation_id = ?",
            [(c.bytes,) for c, t in turns.items() if t is None],
        )
        cursor.executemany(
            "INSERT OR REPLACE INTO search_turns VALUES (?, ?)",
            [(c.bytes, t) for c, t in turns.items() if t is not None],
        )

    def attempt_turns(self, cursor: Any) -> dict[UUID, str | None]:
        found = cursor.execute("SELECT conversation_id, turn_id FROM search_attempts")
        return {UUID(bytes=c): t for c, t in found.fetchall()}

    def set_attempt_turns(self, cursor: Any, turns: dict[UUID, tuple[str | None] | None]) -> None:
        cursor.executemany(
            "DELETE FROM search_attempts WHERE conversation_id = ?",
            [(c.bytes,) for c, t in turns.items() if t is None],
        )
        cursor.executemany(
            "INSERT OR REPLACE INTO search_attempts VALUES (?, ?)",
            [(c.bytes, t[0]) for c, t in turns.items() if t is not None],
        )

    def version_turn(
        self, cursor: Any, conversation: UUID, version: int
    ) -> tuple[str | None] | None:
        row = cursor.execute(
            "SELECT turn_id FROM search_rows WHERE conversation_id = ? AND version = ? LIMIT 1",
            (conversation.bytes, version),
        ).fetchone()
        return None if row is None else (row[0],)

    def delete(self, cursor: Any, conversation: UUID, spans: list[tuple[int, int]]) -> None:
        for first, last in spans:
            self._delete(
                cursor,
                " FROM search_rows WHERE conversation_id = ? AND version BETWEEN ? AND ?",
                (conversation.bytes, first, last),
            )

    def delete_ids(self, cursor: Any, low: int, high: int) -> None:
        self._delete(cursor, " FROM search_rows WHERE id BETWEEN ? AND ?", (low, high))

    def merge(self, cursor: Any) -> None:
        # A contentless index keeps deleted terms in its segments until they are merged.
        cursor.execute("INSERT INTO search_fts (search_fts) VALUES ('optimize')")

    def title_span(self, cursor: Any, conversation: UUID) -> tuple[int, int] | None:
        row = cursor.execute(
            "SELECT low, high FROM search_titles WHERE conversation_id = ?", (conversation.bytes,)
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def set_titles(self, cursor: Any, titles: dict[UUID, tuple[int, int] | None]) -> None:
        cursor.executemany(
            "DELETE FROM search_titles WHERE conversation_id = ?",
            [(c.bytes,) for c, span in titles.items() if span is None],
        )
        cursor.executemany(
            "INSERT OR REPLACE INTO search_titles VALUES (?, ?, ?)",
            [(c.bytes, *span) for c, span in titles.items() if span is not None],
        )

    @staticmethod
    def _delete(cursor: Any, where: str, key: tuple[Any, ...]) -> None:
        """Delete the rows `where` selects, and their FTS entries."""
        # A contentless FTS5 table forgets a row when told its rowid and text again.
        cursor.executemany(
            "INSERT INTO search_fts (search_fts, rowid, body) VALUES ('delete', ?, ?)",
            [
                (i, b if b.isascii() else normalized(b))
                for i, b in cursor.execute("SELECT id, body" + where, key).fetchall()
            ],
        )
        cursor.execute("DELETE" + where, key)

    def insert(self, cursor: Any, rows: list[Row]) -> None:
        cursor.executemany(
            "INSERT INTO search_rows VALUES (?, ?, ?, ?, ?, ?)",
            [(i, c.bytes, v, t, k, b) for i, c, v, t, k, b in rows],
        )
        # ASCII text goes as it is: unicode61 splits and folds it exactly like `terms`.
        cursor.executemany(
            "INSERT INTO search_fts (rowid, body) VALUES (?, ?)",
            [(r[0], b if (b := r[5]).isascii() else normalized(b)) for r in rows],
        )

    def search(self, cursor: Any, node: Node, limit: int) -> list[tuple[Row, float]]:
        found = cursor.execute(_SQLITE_SEARCH, (to_fts5(node), limit)).fetchall()
        return [((i, UUID(bytes=c), v, t, k, b), -float(rank)) for i, c, v, t, k, b, rank in found]

    def dump(self, cursor: Any) -> Iterator[bytes]:
        for row in cursor.execute(
            "SELECT id, conversation_id, version, turn_id, kind, body FROM search_rows ORDER BY id"
        ):
            yield _encode([row[0], UUID(bytes=row[1]), *row[2:]])
        cursor.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.search_vocab"
            " USING fts5vocab(main, search_fts, instance)"
        )
        for row in cursor.execute(
            "SELECT term, doc, col, offset FROM temp.search_vocab ORDER BY doc, offset, term"
        ):
            yield _encode(list(row))
        for row in cursor.execute("SELECT conversation_id, turn_id FROM search_turns ORDER BY 1"):
            yield _encode([UUID(bytes=row[0]), row[1]])
        for row in cursor.execute("SELECT * FROM search_titles ORDER BY 1"):
            yield _encode([UUID(bytes=row[0]), *row[1:]])


GIN_PENDING_KB: Final = 1024
"""PostgreSQL: the GIN index's pending list limit (see the module's tables)."""

_POSTGRES_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS search_rows ("
    " id bigint PRIMARY KEY, conversation_id uuid NOT NULL, version bigint NOT NULL,"
    " turn_id text, kind text NOT NULL, body text NOT NULL, terms tsvector NOT NULL)",
    "CREATE INDEX IF NOT EXISTS search_rows_terms ON search_rows USING gin (terms)"
    f" WITH (gin_pending_list_limit = {GIN_PENDING_KB})",
    "CREATE TABLE IF NOT EXISTS search_turns ("
    " conversation_id uuid PRIMARY KEY, turn_id text NOT NULL)",
    "CREATE TABLE IF NOT EXISTS search_attempts (conversation_id uuid PRIMARY KEY, turn_id text)",
    "CREATE TABLE IF NOT EXISTS search_titles ("
    " conversation_id uuid PRIMARY KEY, low bigint NOT NULL, high bigint NOT NULL)",
)
_POSTGRES_INSERT: Final = (
    "INSERT INTO search_rows SELECT i, c, v, t, k, b, to_tsvector('simple', f)"
    " FROM unnest(%s::bigint[], %s::uuid[], %s::bigint[], %s::text[], %s::text[], %s::text[],"
    " %s::text[]) AS u(i, c, v, t, k, b, f)"
)
_POSTGRES_SEARCH: Final = (
    "SELECT id, conversation_id, version, turn_id, kind, body, ts_rank(terms, q) AS score"
    " FROM search_rows, to_tsquery('simple', %s) AS q"
    " WHERE terms @@ q ORDER BY score DESC, id LIMIT %s"
)


class PostgresIndex:
    """A tsvector column (`simple` over normalized words) with a GIN index."""

    def setup(self, cursor: Any) -> None:
        for statement in _POSTGRES_SCHEMA:
            cursor.execute(statement)

    def reset(self, cursor: Any) -> None:
        cursor.execute("TRUNCATE search_rows, search_turns, search_attempts, search_titles")

    def turn(self, cursor: Any, conversation: UUID) -> str | None:
        row = cursor.execute(
            "SELECT turn_id FROM search_turns WHERE conversation_id = %s", (conversation,)
        ).fetchone()
        return None if row is None else str(row[0])

    def set_turns(self, cursor: Any, turns: dict[UUID, str | None]) -> None:
        closed = [c for c, t in turns.items() if t is None]
        if closed:
            cursor.execute(
                "DELETE FROM search_turns WHERE conversation_id = ANY(%s::uuid[])", (closed,)
            )
        opened = [(c, t) for c, t in turns.items() if t is not None]
        if opened:
            cursor.execute(
                "INSERT INTO search_turns SELECT * FROM unnest(%s::uuid[], %s::text[])"
                " ON CONFLICT (conversation_id) DO UPDATE SET turn_id = EXCLUDED.turn_id",
                ([c for c, _ in opened], [t for _, t in opened]),
            )

    def attempt_turns(self, cursor: Any) -> dict[UUID, str | None]:
        found = cursor.execute("SELECT conversation_id, turn_id FROM search_attempts")
        return {c: t for c, t in found.fetchall()}

    def set_attempt_turns(self, cursor: Any, turns: dict[UUID, tuple[str | None] | None]) -> None:
        for conversation, turn in turns.items():
            if turn is None:
                cursor.execute(
                    "DELETE FROM search_attempts WHERE conversation_id = %s", (conversation,)
                )
            else:
                cursor.execute(
                    "INSERT INTO search_attempts VALUES (%s, %s) ON CONFLICT (conversation_id)"
                    " DO UPDATE SET turn_id = EXCLUDED.turn_id",
                    (conversation, turn[0]),
                )

    def version_turn(
        self, cursor: Any, conversation: UUID, version: int
    ) -> tuple[str | None] | None:
        row = cursor.execute(
            "SELECT turn_id FROM search_rows WHERE conversation_id = %s AND version = %s LIMIT 1",
            (conversation, version),
        ).fetchone()
        return None if row is None else (row[0],)

    def delete(self, cursor: Any, conversation: UUID, spans: list[tuple[int, int]]) -> None:
        for first, last in spans:
            cursor.execute(
                "DELETE FROM search_rows WHERE conversation_id = %s AND version BETWEEN %s AND %s",
                (conversation, first, last),
            )

    def delete_ids(self, cursor: Any, low: int, high: int) -> None:
        cursor.execute("DELETE FROM search_rows WHERE id BETWEEN %s AND %s", (low, high))

    def merge(self, cursor: Any) -> None:
        """Nothing to merge: the rows hold the text (VACUUM drops the dead versions)."""

    def title_span(self, cursor: Any, conversation: UUID) -> tuple[int, int] | None:
        row = cursor.execute(
            "SELECT low, high FROM search_titles WHERE conversation_id = %s", (conversation,)
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def set_titles(self, cursor: Any, titles: dict[UUID, tuple[int, int] | None]) -> None:
        gone = [c for c, span in titles.items() if span is None]
        if gone:
            cursor.execute(
                "DELETE FROM search_titles WHERE conversation_id = ANY(%s::uuid[])", (gone,)
            )
        kept = [(c, span) for c, span in titles.items() if span is not None]
        if kept:
            cursor.execute(
                "INSERT INTO search_titles SELECT * FROM unnest(%s::uuid[], %s::bigint[],"
                " %s::bigint[]) ON CONFLICT (conversation_id) DO UPDATE"
                " SET low = EXCLUDED.low, high = EXCLUDED.high",
                ([c for c, _ in kept], [lo for _, (lo, _) in kept], [hi for _, (_, hi) in kept]),
            )

    def insert(self, cursor: Any, rows: list[Row]) -> None:
        cursor.execute(
            _POSTGRES_INSERT,
            (*map(list, zip(*rows, strict=True)), [normalized(r[5]) for r in rows]),
        )

    def search(self, cursor: Any, node: Node, limit: int) -> list[tuple[Row, float]]:
        # Never a prepared statement: planned for each query, with its words known, the
        # GIN index is chosen for a rare word and the table's real size is seen. A
        # prepared one ends on a generic plan made once and kept until something
        # invalidates it (ANALYZE, VACUUM; never when autovacuum is off): one made while
        # the index was small scans the whole table for every query once it is large.
        found = cursor.execute(
            _POSTGRES_SEARCH, (to_tsquery(node), limit), prepare=False
        ).fetchall()
        return [((i, c, v, t, k, b), float(score)) for i, c, v, t, k, b, score in found]

    def dump(self, cursor: Any) -> Iterator[bytes]:
        for row in cursor.execute(
            "SELECT id, conversation_id, version, turn_id, kind, body, terms::text"
            " FROM search_rows ORDER BY id"
        ):
            yield _encode(list(row))
        for row in cursor.execute("SELECT conversation_id, turn_id FROM search_turns ORDER BY 1"):
            yield _encode(list(row))
        for row in cursor.execute("SELECT * FROM search_titles ORDER BY 1"):
            yield _encode(list(row))


def dialect(recorder: ConversationRecorder) -> Dialect:
    from convstore.storage.sqlite import SQLiteRecorder

    if isinstance(recorder, SQLiteRecorder):
        return SQLiteIndex()
    from convstore.storage.postgres import PostgresRecorder

    if isinstance(recorder, PostgresRecorder):
        return PostgresIndex()
    raise TypeError(f"no search index for {type(recorder).__name__}")
