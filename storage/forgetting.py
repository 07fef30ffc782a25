"""Forgetting a conversation on an encrypted store: commit point first, then shredding.

The order of operations, each step idempotent:

1. the intent: the conversation's row in `forgetting` (so a crash after the next step is
   finished by the next `forget` or writer open);
2. the commit point: its `Forgotten` event appended (`ConversationService.forget`); from
   here on every reader treats it as forgotten;
3. its data key destroyed in the key store (`storage.keys`);
4. the derived data that holds its plaintext deleted: the views' rows (the `purges` the
   store was opened with, `Purge`), catalogue row,
   snapshots, settled items, prefix digests; then, on SQLite (every connection of an
   encrypted store has `secure_delete` on), the WAL checkpointed with TRUNCATE; on
   PostgreSQL the tables vacuumed;
5. the intent removed.

A crash before step 2 leaves the conversation readable (`finish_pending` drops the
intent); one after it leaves it forgotten, and `finish_pending` does steps 3 to 5.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final
from uuid import UUID

from convstore.domain.errors import ConfigurationError, ConversationForgotten
from convstore.domain.vocabulary import ConversationId

if TYPE_CHECKING:
    from convstore.storage import Store
    from convstore.storage.recorder import ConversationRecorder

ENCRYPT_OPTION: Final = "encrypt"
"""The `store_options` row an encrypted store holds; its value names the cipher."""
CIPHER_NAME: Final = "aes-256-gcm"

DERIVED: Final = ("catalogue", "snapshots", "settled", "prefixes", "prefix_heads")
"""The store's tables besides the events that may hold a conversation's plaintext, with
the column naming it (`_COLUMN`); the search index is the projection's own."""
_COLUMN: Final = {
    "catalogue": "id",
    "snapshots": "originator_id",
    "settled": "originator_id",
    "prefixes": "originator_id",
    "prefix_heads": "originator_id",
}


class NotEncrypted(ConfigurationError):
    """`forget` on a store without encryption: its content cannot be shredded."""


def _sqlite(recorder: ConversationRecorder) -> bool:
    from convstore.storage.sqlite import SQLiteRecorder

    return isinstance(recorder, SQLiteRecorder)


def _key(recorder: ConversationRecorder, conversation_id: UUID) -> Any:
    return conversation_id.bytes if _sqlite(recorder) else conversation_id


def _mark(recorder: ConversationRecorder) -> str:
    return "?" if _sqlite(recorder) else "%s"


# --- store options ----------------------------------------------------------------------------


def store_option(recorder: ConversationRecorder, name: str) -> str | None:
    """A `store_options` value (None without it, or on a store without the table)."""
    if not recorder.has_table("store_options"):
        return None
    with recorder.view_reader() as cursor:
        cursor.execute(f"SELECT value FROM store_options WHERE name = {_mark(recorder)}", (name,))
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def set_encrypted(recorder: ConversationRecorder, where: str) -> None:
    """Record that the store encrypts; refused (nothing written) once it holds events."""
    with recorder.view_transaction("store_options") as cursor:
        cursor.execute("SELECT 1 FROM events LIMIT 1")
        if cursor.fetchone() is not None:
            raise ConfigurationError(
                f"the store at {where} already holds conversations in clear, and "
                "encryption is chosen when a store is created: write an encrypted copy "
                "with `convstore migrate --encrypt --to URL`"
            )
        mark = _mark(recorder)
        cursor.execute(
            f"INSERT INTO store_options VALUES ({mark}, {mark})", (ENCRYPT_OPTION, CIPHER_NAME)
        )


# --- forgetting -------------------------------------------------------------------------------


def require_encrypted(store: Store) -> None:
    """Raise NotEncrypted for a store that does not encrypt (forget cannot shred it)."""
    if store.ciphers is None:
        raise NotEncrypted(
            f"the store at {store.location} does not encrypt, so forgetting cannot destroy "
            "a conversation's content: write an encrypted copy with `convstore migrate "
            "--encrypt --to URL`, then forget there"
        )


Purge = Callable[["ConversationRecorder", Sequence[UUID]], None]
"""Deletes forgotten conversations' rows from a projection's view, leaving no copy (the
search index's `purge`): storage knows no projection, so `open_store(purges=...)` is
handed them (the command line hands it the search index's). Without one, a view drops
the rows itself when it processes the Forgotten events, as every follower does."""

Step = Callable[[str], None]
"""Called after each step of a forget with its name (`STEPS`): the kill -9 tests' hook."""
STEPS: Final = ("intent", "committed", "key", "index", "derived", "scrubbed", "done")


def forget(
    store: Store,
    conversation_id: ConversationId,
    *,
    reason: str = "",
    step: Step | None = None,
) -> datetime:
    """Forget one conversation (the module's steps); returns when it was forgotten.
    Already forgotten: the cleanup is finished again. Raises NotEncrypted (exit 2) on a
    plain store, ResponseBeingWritten while a live writer holds a response open, both
    with nothing written."""
    return forget_all(store, [conversation_id], reason=reason, step=step)[conversation_id]


def forget_all(
    store: Store,
    conversation_ids: Sequence[ConversationId],
    *,
    reason: str = "",
    step: Step | None = None,
) -> dict[ConversationId, datetime]:
    """Forget conversations as `forget` does, each committed in turn, the cleanup done
    once for all (one merge of the index, one checkpoint): when each was forgotten.
    A refusal (ResponseBeingWritten) stops it there: those committed before it are
    cleaned up, it and those after it are left as they were."""
    require_encrypted(store)
    finish_pending(store)
    recorder = store.recorder
    done = step or _nothing
    forgotten: dict[ConversationId, datetime] = {}
    try:
        for conversation_id in conversation_ids:
            _intent(recorder, conversation_id, add=True)
            done("intent")
            try:
                on = store.service.forget(conversation_id, reason=reason).timestamp
            except ConversationForgotten as already:
                on = already.on
            except BaseException:
                _intent(recorder, conversation_id, add=False)
                raise
            forgotten[conversation_id] = on
            done("committed")
    finally:
        if forgotten:
            finish(store, list(forgotten), step=step)
    return forgotten


def _nothing(name: str) -> None:
    """No step hook."""


def finish(
    store: Store,
    conversation_ids: Sequence[UUID],
    *,
    step: Step | None = None,
) -> None:
    """Destroy the keys of forgotten conversations and delete their derived rows
    (steps 3 to 5); idempotent."""
    recorder = store.recorder
    done = step or _nothing
    assert store.ciphers is not None
    for conversation_id in conversation_ids:
        store.ciphers.destroy(conversation_id)
    store.repository.drop_cached(conversation_ids)
    done("key")
    for purge in store.purges:
        purge(recorder, conversation_ids)
    done("index")
    mark = _mark(recorder)
    with recorder.view_transaction("forgetting") as cursor:
        for conversation_id in conversation_ids:
            key = _key(recorder, conversation_id)
            for table in DERIVED:
                if recorder.has_table(table):
                    cursor.execute(f"DELETE FROM {table} WHERE {_COLUMN[table]} = {mark}", (key,))
    done("derived")
    recorder.scrub(DERIVED)
    done("scrubbed")
    for conversation_id in conversation_ids:
        _intent(recorder, conversation_id, add=False)
    done("done")


def finish_pending(store: Store) -> list[UUID]:
    """Finish every forget a crash interrupted (a writer's open, and each `forget`):
    an intent whose Forgotten event was committed is finished, one whose event never
    was is dropped (the conversation stays as it was). Returns the ones finished."""
    recorder = store.recorder
    if recorder.read_only or not recorder.has_table("forgetting"):
        return []
    with recorder.view_reader() as cursor:
        cursor.execute("SELECT originator_id FROM forgetting")
        pending = [r[0] if isinstance(r[0], UUID) else UUID(bytes=r[0]) for r in cursor]
    done: list[UUID] = []
    for conversation_id in pending:
        if forgotten_on(recorder, conversation_id) is None:
            _intent(recorder, conversation_id, add=False)
        else:
            done.append(conversation_id)
    if done:
        finish(store, done)
    return done


def forgotten_on(recorder: ConversationRecorder, conversation_id: UUID) -> datetime | None:
    """When the conversation was forgotten (its newest event is Forgotten), or None."""
    from convstore.storage.repository import forgotten_event

    newest = recorder.select_events(conversation_id, desc=True, limit=1)
    event = forgotten_event(newest[0].state) if newest else None
    return None if event is None else event.timestamp


def _intent(recorder: ConversationRecorder, conversation_id: UUID, *, add: bool) -> None:
    key, mark = _key(recorder, conversation_id), _mark(recorder)
    with recorder.view_transaction("forgetting") as cursor:
        if add:
            cursor.execute(f"INSERT INTO forgetting VALUES ({mark}) ON CONFLICT DO NOTHING", (key,))
        else:
            cursor.execute(f"DELETE FROM forgetting WHERE originator_id = {mark}", (key,))
