"""The index of prefix digests that threads requests into stored conversations.

A conversation reads as a sequence of atoms: each user message's text, each tool
result's content, each assistant text, each tool call's name and arguments (what a client
sends back as it received it; reasoning and ids are left out, as clients drop or respell
them). The digest of a sequence chains an HMAC over its atoms, keyed with the store's own
key (`prefix_key`; on an encrypted store, a key derived from the key store's digest key,
so the events' database alone holds no key to test a guess with), so a digest in the
store confirms no content a reader guesses. Beside
it, an `opaque` digest takes the opaque values too (call ids, reasoning signatures and
encrypted payloads): a tie between conversations sharing the prefix goes to an exact
match on them.

The index is a projection of the store's notification log (`projections.follower`, under
the tracking name `prefixes`), so it holds every conversation however it was recorded:
`ingest`, `ask`, `import`, the proxy or the transport, in any process. Each event is
folded once into its conversation's chain, whose state is kept in `prefix_heads` as of a
version (`0006_prefix_heads`): a new event extends the chain, never a re-read of the
conversation. Each response's end indexes the conversation as it then reads, by its
digest bound to the provider that answered (a `prefixes` row), so a request is matched
only with conversations its own provider continued. A fork's chain starts from its
parent's at the fork point. A copy completing a response cut short is read in the first
copy's place (`domain.attempts`): there the chain is folded again from the reading.

A request is looked up (`find`) by the bound digests of every prefix of its messages, in
one query, after the index caught up with the log: placing it costs the request's own
atoms, never a scan of the store.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final
from uuid import UUID

import msgspec

from convstore.domain.attempts import reading
from convstore.domain.events import (
    AssistantText,
    Event,
    Reasoning,
    ResponseEnded,
    ResponseStarted,
    Started,
    ToolCallRequested,
    ToolCallResponded,
    UserMessage,
)
from convstore.domain.vocabulary import ConversationId
from convstore.projections.follower import Follower, Positioned, TrackedProjection
from convstore.storage import Store
from convstore.storage.errors import OperationalError
from convstore.storage.recorder import ConversationRecorder, PrefixRow

__all__ = ["Candidate", "Chain", "PrefixIndex"]

log = logging.getLogger("convstore.proxy")

NAME: Final = "prefixes"
"""The index's tracking name (its position in the notification log)."""

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


def _step(key: bytes, previous: bytes, atom: bytes) -> bytes:
    return hmac.new(key, previous + atom, hashlib.sha256).digest()[:_DIGEST_BYTES]


def _bound(key: bytes, provider: str, digest: bytes) -> bytes:
    """`digest` bound to `provider`: what a `prefixes` row is looked up by."""
    return _step(key, digest, b"p" + provider.encode())


@dataclass(frozen=True, slots=True)
class Chain:
    """A conversation's digest chain through its own version `version` (its reading's
    version is `version + shift`: a fork's reading numbers its parent's events first)."""

    digest: bytes = b""
    """Over the content atoms so far."""
    opaque: bytes = b""
    """Over the content and opaque atoms, as of the last content atom."""
    tail: bytes = b""
    """Over the content and opaque atoms, the ones after the last content atom too."""
    provider: str = ""
    """The provider of the last response started."""
    version: int = 0
    shift: int = 0

    def fold(self, key: bytes, event: Event) -> Chain:
        """The chain with `event` (at its own version) folded in."""
        content, hidden = _atoms(event)
        digest, opaque, tail = self.digest, self.opaque, self.tail
        if hidden is not None:
            tail = _step(key, tail, b"o" + hidden)
        if content is not None:
            digest = _step(key, digest, b"c" + content)
            opaque = tail = _step(key, tail, b"c" + content)
        provider = event.provider if isinstance(event, ResponseStarted) else self.provider
        return Chain(digest, opaque, tail, provider, event.originator_version, self.shift)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A stored conversation the request may continue: `prefix` of the request's atoms
    equal it as of `version` (of its reading)."""

    conversation_id: UUID
    version: int
    prefix: int
    opaque_match: bool
    position: int


PREFIX_KEY_LABEL: Final = "convstore.proxy.prefix-key"
"""What the key store's digest key is applied to, on an encrypted store, to make the
prefix index's key."""


class PrefixIndex:
    """The prefix index of one store: `find` the conversations a request continues."""

    def __init__(self, store: Store) -> None:
        self._recorder = store.recorder
        self._ciphers = store.ciphers
        self._key: bytes | None = None
        self._key_lock = threading.Lock()
        self._lock = threading.Lock()
        projection = _Heads(self._hmac_key, store.recorder, store.service.history)
        self._follower = Follower(store.recorder, projection, mapper=store.repository.mapper)

    def _hmac_key(self) -> bytes:
        with self._key_lock:
            if self._key is None:
                ciphers = self._ciphers
                self._key = (
                    self._recorder.prefix_key()
                    if ciphers is None
                    else bytes.fromhex(ciphers.keyed(PREFIX_KEY_LABEL))
                )
            return self._key

    def catch_up(self) -> int:
        """Fold the events recorded since the last call into the index; how many. A
        database that fails (busy past its retries, gone) is logged, and the index stays
        as far as it got: the recording matters more than its threading."""
        try:
            self._hmac_key()  # made, if need be, before the index's transaction begins
            with self._lock:  # one catch-up at a time here (others', elsewhere, conflict)
                return self._follower.catch_up().events
        except OperationalError as error:
            log.warning("proxy: the prefix index did not catch up (%s)", type(error).__name__)
            return 0

    def find(self, provider: str, events: Iterable[Event]) -> list[Candidate]:
        """The conversations `provider` answered that a request's message drafts
        (`events`, in order) continue, best first: the longest prefix, then an exact match
        on opaque values, then the most recent."""
        self.catch_up()
        key = self._hmac_key()
        chain, where = Chain(), dict[bytes, tuple[int, bytes]]()
        for event in events:
            folded = chain.fold(key, event)
            if folded.digest != chain.digest:
                where[_bound(key, provider, folded.digest)] = (len(where) + 1, folded.opaque)
            chain = folded
        if not where:
            return []
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


History = Callable[[ConversationId], list[Event]]
"""A conversation's events as its reading folds them (`ConversationService.history`)."""


class _Heads(TrackedProjection):
    """The projection that folds each event into its conversation's chain."""

    name = NAME

    def __init__(
        self, key: Callable[[], bytes], recorder: ConversationRecorder, history: History
    ) -> None:
        self._key = key
        self._history = history
        self._sql = _Sql(recorder)

    def setup(self, cursor: Any) -> None:
        """Nothing to create: the tables are the store's (`0005_prefixes`,
        `0006_prefix_heads`)."""

    def reset(self, cursor: Any) -> None:
        """Delete every row of the index."""
        cursor.execute("DELETE FROM prefixes")
        cursor.execute("DELETE FROM prefix_heads")

    def process(self, cursor: Any, events: Sequence[Positioned]) -> int:
        """Fold a batch: a `prefixes` row at each response's end, a head there and at the
        batch's end."""
        key, sql = self._key(), self._sql
        chains: dict[UUID, Chain] = {}
        kept: dict[UUID, int] = {}  # the version of each conversation's newest head
        rows = 0
        for _, event in events:
            conversation = event.originator_id
            chain = chains.get(conversation)
            if isinstance(event, ResponseStarted) and event.attempt > 1:
                # a copy completing one cut short: read in the first's place, so the
                # chain is the reading's through it
                own = event.originator_version
                chain = self._replayed(ConversationId(conversation), own, own=True)
                chains[conversation] = chain
            else:
                if chain is None:
                    chain = self._chain_before(cursor, event, chains, kept)
                chain = chains[conversation] = chain.fold(key, event)
            if isinstance(event, ResponseEnded) and chain.digest:
                sql.row(cursor, _bound(key, chain.provider, chain.digest), chain, conversation)
                sql.head(cursor, conversation, chain)
                kept[conversation] = chain.version
                rows += 2
        for conversation, chain in chains.items():
            if kept.get(conversation) != chain.version:
                sql.head(cursor, conversation, chain)
                rows += 1
        return rows

    def _chain_before(
        self, cursor: Any, event: Event, chains: dict[UUID, Chain], kept: dict[UUID, int]
    ) -> Chain:
        """The chain of `event`'s conversation before `event`: its newest head, or for a
        conversation's Started, empty (a fork: its parent's as of the fork point)."""
        if not isinstance(event, Started):
            head = self._sql.newest(cursor, event.originator_id)
            if head is not None:
                return head
            own = event.originator_version - 1  # not indexed (an event it could not read)
            return self._replayed(ConversationId(event.originator_id), own, own=True)
        if event.forked_from is None:
            return Chain()
        for conversation, chain in chains.items():  # the heads the fork base may be among
            if kept.get(conversation) != chain.version:
                self._sql.head(cursor, conversation, chain)
                kept[conversation] = chain.version
        parent, at = event.forked_from, event.forked_at
        base = self._sql.newest(cursor, parent, upto=at)
        if base is None or base.version + base.shift != at:
            base = self._replayed(ConversationId(parent), at, own=False)
        return replace(base, version=0, shift=at - 1)

    def _replayed(self, conversation: ConversationId, upto: int, *, own: bool) -> Chain:
        """The chain of `conversation` through version `upto` (its own, or its reading's),
        folded from its events as read (`domain.attempts`): where no head holds it (a
        fork at a version no response ended at), or a copy completing one cut short
        changed what the conversation reads as."""
        events = self._history(conversation)
        first = events[0]
        shift = first.forked_at - 1 if isinstance(first, Started) and first.forked_from else 0
        last = upto + shift if own else upto
        key, chain = self._key(), Chain()
        for event in reading([e for e in events if e.originator_version <= last]):
            chain = chain.fold(key, event)
        return replace(chain, version=last - shift, shift=shift)


class _Sql:
    """The index's statements, in the backend's parameter style."""

    def __init__(self, recorder: ConversationRecorder) -> None:
        from convstore.storage.sqlite import SQLiteRecorder

        sqlite = isinstance(recorder, SQLiteRecorder)
        mark = "?" if sqlite else "%s"
        self._id: Callable[[UUID], Any] = (lambda u: u.bytes) if sqlite else (lambda u: u)
        columns = "version, shift, digest, opaque, tail, provider"
        self._head = (
            f"INSERT INTO prefix_heads (originator_id, {columns}) VALUES"
            f" ({', '.join([mark] * 7)}) ON CONFLICT DO NOTHING"
        )
        self._row = (
            "INSERT INTO prefixes (digest, opaque, originator_id, version)"
            f" VALUES ({mark}, {mark}, {mark}, {mark})"
        )
        newest = f"SELECT {columns} FROM prefix_heads WHERE originator_id = {mark}"
        order = " ORDER BY version DESC LIMIT 1"
        self._newest = newest + order
        self._newest_upto = newest + f" AND version + shift <= {mark}" + order

    def head(self, cursor: Any, conversation: UUID, chain: Chain) -> None:
        """Keep `chain` as `conversation`'s head at its version."""
        cursor.execute(
            self._head,
            (
                self._id(conversation),
                chain.version,
                chain.shift,
                chain.digest,
                chain.opaque,
                chain.tail,
                chain.provider,
            ),
        )

    def row(self, cursor: Any, digest: bytes, chain: Chain, conversation: UUID) -> None:
        """Index `conversation` as `chain` has it, by `digest`."""
        version = chain.version + chain.shift
        cursor.execute(self._row, (digest, chain.opaque, self._id(conversation), version))

    def newest(self, cursor: Any, conversation: UUID, *, upto: int | None = None) -> Chain | None:
        """`conversation`'s newest head (at or before version `upto` of its reading)."""
        if upto is None:
            cursor.execute(self._newest, (self._id(conversation),))
        else:
            cursor.execute(self._newest_upto, (self._id(conversation), upto))
        found = cursor.fetchone()
        if found is None:
            return None
        version, shift, digest, opaque, tail, provider = found
        return Chain(bytes(digest), bytes(opaque), bytes(tail), provider, version, shift)
