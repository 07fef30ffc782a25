"""What an importer reads a source into: conversations of exchanges, each the messages
before a response and the response itself, as event drafts, and what it could not carry.

An importer reads, it never writes: `Importer.plan` checks the whole source before the
first write (a problem is a ConvstoreError, exit 2, nothing written) and `Importer.read`
then yields its conversations one by one, a conversation it cannot read as `Unreadable`
(the others go on). Ids come from the source: a conversation's `source_id` names the
conversation it lands in (`record.conversation_id`), and each response's id (its
`ResponseStarted.response_id`) is derived from the source's id of that response, so an
import run twice records nothing the second time, and one run after the source grew
records only what is new.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from convstore.adapters.wire.providers import Loss
from convstore.domain.events import Event
from convstore.domain.vocabulary import ConversationId

__all__ = ["ImportedConversation", "ImportedExchange", "Importer", "Unreadable"]

Message = tuple[str, Sequence[Event]]
"""(role, drafts) of one message: `user` (UserMessage, ContextInjected,
ToolCallResponded, UnknownArtifact) or `assistant` (a whole response of origin
`request`: ResponseStarted … ResponseEnded), as `ConversationService.ingest_exchange`
takes its history."""


@dataclass(frozen=True)
class ImportedExchange:
    """One response of the source, with the messages before it that the exchanges before
    it do not carry."""

    history: Sequence[Message]
    response: Sequence[Event]
    """ResponseStarted … ResponseEnded: the response's drafts."""


@dataclass(frozen=True)
class ImportedConversation:
    """One conversation of the source."""

    source_id: str
    """The source's own id of the conversation (stable across imports)."""
    title: str
    exchanges: Sequence[ImportedExchange]
    trailing: Sequence[Message] = ()
    """Messages after the last response (a question the source holds no answer to)."""
    losses: Sequence[Loss] = field(default_factory=tuple)
    """What the source holds that the drafts do not carry, and why."""
    target: ConversationId | None = None
    """The conversation the source names as the one it continues (a history convstore
    exported and another tool went on with); None: the one `source_id` derives."""


@dataclass(frozen=True)
class Unreadable:
    """A conversation of the source that could not be read; the import goes on."""

    source_id: str
    reason: str


class Importer(Protocol):
    """A source format's reader."""

    def plan(self, path: Path) -> int:
        """Check the source at `path` before anything is written, and return how many
        conversations it holds (for progress). Raises a ConvstoreError (ConfigurationError
        for a path that is missing or of another format, DecodeError for an unreadable
        source) naming the problem."""
        ...

    def read(self, path: Path) -> Iterator[ImportedConversation | Unreadable]:
        """The source's conversations, oldest first."""
        ...
