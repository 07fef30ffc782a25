"""The index of prefix digests that threads proxied requests into stored conversations.

A conversation reads as a sequence of atoms: each user message's text, each tool
result's content, each assistant text, each tool call's name and arguments (what a client
sends back as it received it; reasoning and ids are left out, as clients drop or respell
them). The digest of a sequence chains an HMAC over its atoms, keyed with the store's own
key (`prefix_key`), so a digest in the store confirms no content a reader guesses. Beside
it, an `opaque` digest takes the opaque values too (call ids, reasoning signatures and
encrypted payloads): a tie between conversations sharing the prefix goes to an exact
match on them.

Each recorded exchange indexes its conversation as it then reads (`add`); a request is
looked up by the digests of every prefix of its messages (`find`), in one query: never a
scan of the store.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from uuid import UUID

import msgspec

from convstore.domain.events import (
    AssistantText,
    Event,
    Reasoning,
    ToolCallRequested,
    ToolCallResponded,
    UserMessage,
)
from convstore.storage.recorder import ConversationRecorder, PrefixRow

__all__ = ["Candidate", "PrefixIndex"]

_ENCODER = msgspec.json.Encoder(order="sorted")
_DIGEST_BYTES = 16


def _atoms(event: Event) -> tuple[bytes | None, bytes | None]:
    """(content atom, opaque atom) of one event; None where it has none."""
    if isinstance(event, UserMessage):
        return _ENCODER.encode(["u", list(event.blocks)]), None
    if isinstance(event, ToolCallResponded):
        return _ENCODER.encode(["r", event.content]), _ENCODER.encode(["r", event.call_id])
    if isinstance(event, AssistantText):
        return (_ENCODER.encode(["a", event.text]) if event.text else None), None
    if isinstance(event, ToolCallRequested):
        atom = _ENCODER.encode(["c", event.name, event.arguments])
        return atom, _ENCODER.encode(["c", event.call_id])
    if isinstance(event, Reasoning) and event.payload is not None:
        return None, _ENCODER.encode(["t", event.payload.raw.decode("utf-8", "replace")])
    return None, None


@dataclass(frozen=True, slots=True)
class Candidate:
    """A stored conversation the request may continue: `prefix` of the request's atoms
    equal it as of `version` (of its reading)."""

    conversation_id: UUID
    version: int
    prefix: int
    opaque_match: bool
    position: int


class PrefixIndex:
    """Digests of conversations' atom sequences, in the store's `prefixes` table."""

    def __init__(self, recorder: ConversationRecorder) -> None:
        self._recorder = recorder
        self._key: bytes | None = None
        self._lock = threading.Lock()

    def _hmac_key(self) -> bytes:
        with self._lock:
            if self._key is None:
                self._key = self._recorder.prefix_key()
            return self._key

    def chain(self, events: Iterable[Event]) -> list[tuple[bytes, bytes]]:
        """(digest, opaque digest) after each content atom of `events`, in order."""
        key = self._hmac_key()
        digest = opaque = b""
        out: list[tuple[bytes, bytes]] = []
        for event in events:
            content, hidden = _atoms(event)
            if hidden is not None:
                opaque = _step(key, opaque, b"o" + hidden)
            if content is not None:
                digest = _step(key, digest, b"c" + content)
                opaque = _step(key, opaque, b"c" + content)
                out.append((digest, opaque))
        return out

    def add(self, conversation_id: UUID, reading: Sequence[Event]) -> None:
        """Index the conversation as `reading` (its events as read, a fork's parent's
        first) has it, at its last version."""
        chained = self.chain(reading)
        if chained and reading:
            digest, opaque = chained[-1]
            version = reading[-1].originator_version
            self._recorder.insert_prefix(digest, opaque, conversation_id, version)

    def find(self, events: Iterable[Event]) -> list[Candidate]:
        """The conversations a request's message drafts (`events`, in order) continue,
        best first: the longest prefix, then an exact match on opaque values, then the
        most recent."""
        chained = self.chain(events)
        if not chained:
            return []
        where = {digest: (i + 1, opaque) for i, (digest, opaque) in enumerate(chained)}
        rows: list[PrefixRow] = self._recorder.select_prefixes(list(where))
        found = [
            Candidate(
                conversation_id=row.originator_id,
                version=row.version,
                prefix=where[row.digest][0],
                opaque_match=hmac.compare_digest(row.opaque, where[row.digest][1]),
                position=row.position,
            )
            for row in rows
        ]
        return sorted(found, key=lambda c: (c.prefix, c.opaque_match, c.position), reverse=True)


def _step(key: bytes, previous: bytes, atom: bytes) -> bytes:
    return hmac.new(key, previous + atom, hashlib.sha256).digest()[:_DIGEST_BYTES]
