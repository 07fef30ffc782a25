"""The `llm` format's `Importer`: both layouts of a `logs.db`, the older first."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from convstore.adapters.importing.llm.drafts import exchange
from convstore.adapters.importing.llm.legacy import count_conversations, read_conversations
from convstore.adapters.importing.llm.logs import CURRENT, LEGACY, LlmThread, layouts, reading
from convstore.adapters.importing.llm.threads import count_threads, read_threads
from convstore.adapters.importing.source import ImportedConversation, ImportedExchange, Unreadable
from convstore.adapters.wire.providers import Loss

__all__ = ["LlmImporter", "conversation"]


class LlmImporter:
    """Reads an `llm` logs.db (see the package's docstring)."""

    def plan(self, path: Path) -> int:
        """The file's conversations (threads and older conversations that hold a
        response); ConfigurationError for a missing file or one of another kind."""
        with reading(path) as connection:
            found = layouts(connection, path)
            total = 0
            if LEGACY in found:
                total += count_conversations(connection)
            if CURRENT in found:
                total += count_threads(connection)
            return total

    def read(self, path: Path) -> Iterator[ImportedConversation | Unreadable]:
        """The file's conversations: the older layout's, then the threads."""
        with reading(path) as connection:
            found = layouts(connection, path)
            if LEGACY in found:
                yield from map(conversation, read_conversations(connection))
            if CURRENT in found:
                yield from map(conversation, read_threads(connection))


def conversation(thread: LlmThread) -> ImportedConversation:
    """One thread's exchanges and losses."""
    open_calls: set[str] = set()
    exchanges: list[ImportedExchange] = []
    losses: list[Loss] = []
    for turn in thread.turns:
        one, lost = exchange(turn, open_calls)
        exchanges.append(one)
        losses.extend(lost)
    return ImportedConversation(
        source_id=thread.source_id, title=thread.name, exchanges=exchanges, losses=losses
    )
