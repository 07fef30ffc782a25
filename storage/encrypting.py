"""`convstore migrate --encrypt --to URL`: an encrypted copy of a plain store.

Encryption is chosen when a store is created, so a plain store is never changed in place:
its conversations are recorded again, in the order they started (a fork after its
parent), into a new encrypted store, each event with its own id, version, time and
content, now sealed. The copy's chains cover the ciphertext, so each conversation has two
heads, the source's and the copy's: both are reported, so an anchor of the source can be
matched with one of the copy. The source is only read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime

import msgspec

from convstore.domain.conversation import Conversation
from convstore.domain.errors import ConfigurationError
from convstore.domain.events import Event, Started
from convstore.domain.state import forked
from convstore.domain.vocabulary import ConversationId
from convstore.storage import Store, open_store

BATCH = 500
"""Events saved per transaction of the copy (outside any response's events, a response
may span two: each commit holds whole events, as a streamed response's do)."""


class CopiedConversation(msgspec.Struct, frozen=True, kw_only=True):
    """One conversation copied: its events and both chain heads."""

    conversation_id: str
    events: int
    source_head: str
    """The source's newest hash (over the plain encoding)."""
    head: str
    """The copy's newest hash (over the ciphertext)."""


class EncryptedCopy(msgspec.Struct, frozen=True, kw_only=True):
    """What `encrypt_copy` wrote."""

    source: str
    target: str
    conversations: list[CopiedConversation]
    events: int


def encrypt_copy(
    source: Store,
    target_url: str,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> EncryptedCopy:
    """Record every conversation of `source` into a new encrypted store at `target_url`.
    Raises ConfigurationError (nothing written) when the source is encrypted already or
    the target holds conversations."""
    if source.encrypted:
        raise ConfigurationError(f"the store at {source.location} is encrypted already")
    with open_store(target_url, encrypt=True) as target:
        if target.recorder.max_notification_id() is not None:
            raise ConfigurationError(
                f"the store at {target.location} holds conversations already: "
                "`--to` names a new store"
            )
        ids = list(_ids(source))
        copied = []
        for done, conversation_id in enumerate(ids, 1):
            copied.append(_copy(source, target, conversation_id))
            if progress is not None:
                progress(done, len(ids))
        return EncryptedCopy(
            source=str(source.location),
            target=str(target.location),
            conversations=copied,
            events=sum(c.events for c in copied),
        )


def _ids(store: Store) -> Iterator[ConversationId]:
    offset = 0
    while page := store.recorder.select_first_events(offset=offset, limit=500):
        yield from (ConversationId(first.originator_id) for first in page)
        offset += len(page)


def _copy(source: Store, target: Store, conversation_id: ConversationId) -> CopiedConversation:
    events = list(source.repository.events(conversation_id))
    first = events[0]
    state = None
    if isinstance(first, Started) and first.forked_from is not None:
        parent = ConversationId(first.forked_from)
        state = forked(target.repository.state_at(parent, first.forked_at))
    conversation = Conversation(conversation_id, state=state)
    assert target.ciphers is not None
    conversation.cipher = target.ciphers.cipher(conversation_id)
    for event in events:
        conversation.clock = _at(event.timestamp)
        conversation.record(_draft(event))
        if len(conversation.pending) >= BATCH and conversation.state.open_response is None:
            target.repository.save(conversation)
    target.repository.save(conversation)
    return CopiedConversation(
        conversation_id=str(conversation_id),
        events=len(events),
        source_head=events[-1].hash,
        head=conversation.state.head,
    )


def _at(moment: datetime) -> Callable[[], datetime]:
    return lambda: moment


def _draft(event: Event) -> Event:
    """The event as a draft again (its chain fields cleared; `record` stamps the rest)."""
    return msgspec.structs.replace(event, prev_hash="", hash="")
