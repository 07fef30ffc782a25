"""What `logs.db` holds, read into one shape for both layouts: threads of turns, each
turn the messages new to it, the messages it produced and the columns beside them.

The file is opened read-only (`mode=ro`): an import never writes to it, and a file
another process is writing is read as of one transaction per layout.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from convstore.domain.errors import ConfigurationError, DecodeError
from convstore.domain.vocabulary import ToolDeclaration

__all__ = [
    "CURRENT",
    "LEGACY",
    "LlmMessage",
    "LlmThread",
    "LlmTurn",
    "attachment",
    "layouts",
    "reading",
]

CURRENT: Final = "threads"
"""The current layout (llm 0.32 on): `threads`, `turns`, `messages`, `parts`."""
LEGACY: Final = "responses"
"""The older layout: `conversations`, `responses`."""
_TABLES: Final = {CURRENT: ("threads", "turns", "messages", "parts"), LEGACY: ("responses",)}


@dataclass(frozen=True)
class LlmMessage:
    """One message: its role (`system`, `user`, `tool`, `assistant`) and its parts as
    `llm`'s `Part.to_dict` writes them (`{"type": "text", "text": ...}`, `tool_call`,
    `tool_result`, `attachment` (metadata only: `type`, `url`, `path`, `id`, `size`),
    `reasoning`)."""

    role: str
    parts: tuple[dict[str, Any], ...]
    key: str
    """The source's id of the message (its hash; `<response id>:<role>` in the older
    layout)."""


@dataclass(frozen=True)
class LlmTurn:
    """One model call (a `turns` or `responses` row)."""

    id: str
    model: str
    resolved_model: str | None
    inputs: tuple[LlmMessage, ...]
    """The messages before the call that the turns before it in its thread did not carry
    (the system prompt among them, if new)."""
    outputs: tuple[LlmMessage, ...]
    response_json: Any
    """The provider's payload as `llm` kept it, resolved (None when there is none)."""
    unresolved: str = ""
    """Why a stored `response_json` could not be resolved ('' when it could)."""
    system: str | None = None
    tools: tuple[ToolDeclaration, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    input_tokens: int | None = None
    output_tokens: int | None = None
    token_details: dict[str, Any] | None = None
    diverged: bool = False
    """The call's history does not continue the thread's turns before it (a history
    edited or sent by a client): only its messages after the shared part are new."""


@dataclass(frozen=True)
class LlmThread:
    """One conversation: a thread, or a `conversations` row of the older layout."""

    source_id: str
    """`thread:<id>` or `conversation:<id>`: the two layouts' ids are kept apart."""
    name: str
    turns: tuple[LlmTurn, ...]


@contextmanager
def reading(path: Path) -> Iterator[sqlite3.Connection]:
    """`path` opened read-only; ConfigurationError when it is missing or not an SQLite
    file."""
    if not path.is_file():
        raise ConfigurationError(f"{path}: no such file (an llm logs.db was expected)")
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise ConfigurationError(f"{path}: cannot be opened: {error}") from None
    connection.row_factory = sqlite3.Row
    try:
        yield connection
    except sqlite3.DatabaseError as error:
        raise DecodeError(f"{path}: unreadable as an llm logs.db: {error}") from None
    finally:
        connection.close()


def layouts(connection: sqlite3.Connection, path: Path) -> tuple[str, ...]:
    """The layouts the file holds (`CURRENT`, `LEGACY`); ConfigurationError naming what
    was expected when it holds neither."""
    try:
        tables = {row[0] for row in connection.execute("select name from sqlite_master")}
    except sqlite3.DatabaseError as error:
        raise ConfigurationError(f"{path}: not an SQLite database ({error})") from None
    found = tuple(name for name, needed in _TABLES.items() if tables.issuperset(needed))
    if not found:
        raise ConfigurationError(
            f"{path}: not an llm logs.db (it has neither llm's threads/turns/messages/parts "
            "tables nor its older responses table)"
        )
    return found


def attachment(row: sqlite3.Row) -> dict[str, Any]:
    """An attachment row's metadata (id, type, url, path, size: those it has), never its
    bytes."""
    meta = {"id": row["id"], "type": row["type"], "url": row["url"], "path": row["path"]}
    found = {k: v for k, v in meta.items() if v}
    if row["size"]:
        found["size"] = row["size"]
    return found


def tool_declaration(row: sqlite3.Row) -> ToolDeclaration:
    """A `tools` row as a declaration (its input schema read when it is JSON)."""
    from json import JSONDecodeError, loads

    schema: dict[str, Any] | None
    try:
        loaded = loads(row["input_schema"]) if row["input_schema"] else None
        schema = loaded if isinstance(loaded, dict) else None
    except JSONDecodeError:
        schema = None
    return ToolDeclaration(
        name=row["name"] or "", description=row["description"] or "", input_schema=schema
    )
