"""The conversation repository: snapshots plus a typed read path over any recorder.

`load` folds the newest snapshot and the events after it; `save` writes the collected
events, and a new snapshot every `snapshot_every` versions, in one transaction.

A snapshot is the conversation's state in msgpack, its activities stored compactly: each
distinct (name, state, provider) once, and per activity id the index of its own, so a
load builds one ActivityState per distinct kind rather than one per activity (decoding
a long conversation's snapshot is most of what loading it costs). Snapshots are derived
data: one that cannot be read (written by another version) is passed over, and the
conversation is replayed from its events.

With `cache_size`, the repository keeps the state of the conversations it last saved or
loaded (least recently used dropped first, also once their states hold more than
`DEFAULT_CACHE_ENTRIES` ids in all, so long conversations cannot make the cache take
hundreds of MB). A load then starts from a copy of that state
and folds only the events stored after it (`select_states(gt=version)`), so events another
writer (another process) appended are never missed; a save still conflicts on a taken
version, and only a successful save or a load updates the cache. Like eventsourcing's
repository cache ("fetch events after cache"), it assumes a stored event is never changed
or removed: the store is append-only.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import datetime
from typing import Final, NamedTuple
from uuid import UUID

import msgspec

from convstore.domain.conversation import Conversation
from convstore.domain.errors import (
    ConcurrencyConflict,
    ConversationForgotten,
    ConversationNotFound,
    ResponseStoredElsewhere,
)
from convstore.domain.errors import IntegrityError as UnreadableEvent
from convstore.domain.events import EPOCH, Event, Forgotten, ResponseStarted, Started
from convstore.domain.sealing import UNSEALED
from convstore.domain.service import Ciphers, ConversationFilter, ConversationSummary
from convstore.domain.settled import ActivityState, SettledItems, StoredResponse
from convstore.domain.state import ConversationState, copy_state, forked, settle
from convstore.domain.vocabulary import ConversationId
from convstore.storage.catalogue import (
    TURN_STARTED,
    CatalogueEntry,
    CatalogueRow,
    catalogue_row,
    not_a_prefix,
    prefix_range,
)
from convstore.storage.errors import IntegrityError, MigrationRequired, ResponseTaken
from convstore.storage.mapper import EventMapper
from convstore.storage.recorder import (
    ConversationRecorder,
    FirstEvent,
    ResponseRow,
    SnapshotRecord,
)

DEFAULT_SNAPSHOT_EVERY = 100
"""Versions between snapshots. A snapshot holds only the open items (`domain.settled`),
so it costs a few hundred bytes whatever the conversation's length, and a load replays at
most 99 events after it."""
DEFAULT_CACHE_SIZE = 1000
"""Conversations whose state `open_store`'s repository keeps (see the module's docstring)."""
DEFAULT_CACHE_ENTRIES = 250_000
"""At most this many response, call and activity ids in the cached states together
(about 200 bytes each: a 10,000-event conversation holds some 2,000)."""


class _Snapshot(msgspec.Struct, array_like=True, tag=5):
    """A snapshot's layout: the state without its activities, then the activities.

    Tag 5 since the state is settled (`domain.state.settle`: it keeps only the
    open items, the store's `settled` table the rest); tag 4 since it keeps the current
    title and labels, tag 3 each response's attempt. A snapshot of an earlier tag is
    passed over, and its conversation replayed from its events until the next snapshot."""

    state: ConversationState
    """Every field but `activities`, which is empty here."""
    activity_ids: list[str]
    kind_of: bytes | list[int]
    """Per activity id, in order, the index of its entry in `kinds` (bytes while they fit)."""
    kinds: list[ActivityState]


_encode_snapshot = msgspec.msgpack.Encoder().encode
_decode_snapshot = msgspec.msgpack.Decoder(_Snapshot).decode


def encode_snapshot(state: ConversationState) -> bytes:
    """A state as snapshot bytes."""
    index: dict[ActivityState, int] = {}
    kinds: list[ActivityState] = []
    kind_of: list[int] = []
    for activity in state.activities.values():
        kind = index.get(activity)
        if kind is None:
            kind = index[activity] = len(kinds)
            kinds.append(activity)
        kind_of.append(kind)
    return _encode_snapshot(
        _Snapshot(
            msgspec.structs.replace(state, activities={}),
            list(state.activities),
            bytes(kind_of) if len(kinds) <= 256 else kind_of,
            kinds,
        )
    )


def decode_snapshot(data: bytes) -> ConversationState | None:
    """The state in snapshot bytes, or None when they cannot be read: another layout
    (the first, a plain map of the state, and tags 2 and 3 lack what the state keeps)."""
    try:
        snapshot = _decode_snapshot(data)
    except msgspec.DecodeError:
        return None
    state = snapshot.state
    kinds = snapshot.kinds
    try:
        state.activities = dict(
            zip(snapshot.activity_ids, map(kinds.__getitem__, snapshot.kind_of), strict=True)
        )
    except (IndexError, ValueError):  # an index past `kinds`, or lengths that differ
        return None
    return state


_encode_value = msgspec.msgpack.Encoder().encode
_decode_response = msgspec.msgpack.Decoder(StoredResponse).decode
_decode_call = msgspec.msgpack.Decoder(bool).decode
_decode_activity = msgspec.msgpack.Decoder(ActivityState).decode


def settled_rows(items: SettledItems) -> list[tuple[str, bytes]]:
    """The `settled` table's (key, value) of each item a state let go: the key is the
    item's kind (`r`esponse, `c`all, `a`ctivity) then its id."""
    return [
        *((f"r{rid}", _encode_value(stored)) for rid, stored in items.responses.items()),
        *((f"c{call}", _encode_value(answered)) for call, answered in items.calls.items()),
        *((f"a{a}", _encode_value(state)) for a, state in items.activities.items()),
    ]


class StoreSettled:
    """The `Settled` port over one conversation's rows of the store's `settled` table."""

    __slots__ = ("_id", "_recorder")

    def __init__(self, recorder: ConversationRecorder, conversation_id: ConversationId) -> None:
        self._recorder = recorder
        self._id = conversation_id

    def found(
        self,
        *,
        responses: Collection[str] = (),
        calls: Collection[str] = (),
        activities: Collection[str] = (),
        upto: int,
    ) -> SettledItems:
        """The settled items among these ids, as of version `upto`, in one query."""
        keys = [
            *(f"r{rid}" for rid in responses),
            *(f"c{call}" for call in calls),
            *(f"a{a}" for a in activities),
        ]
        items = SettledItems(responses={}, calls={}, activities={})
        for key, value in self._recorder.select_settled(self._id, keys, upto).items():
            kind, item = key[0], key[1:]
            if kind == "r":
                items.responses[item] = _decode_response(value)
            elif kind == "c":
                items.calls[item] = _decode_call(value)
            else:
                items.activities[item] = _decode_activity(value)
        return items


class _Cached(NamedTuple):
    version: int
    state: ConversationState
    weight: int
    """1 + its response, call and activity ids: what the state costs to keep."""


class EventRepository:
    """Loads and saves Conversation aggregates through a recorder."""

    def __init__(
        self,
        recorder: ConversationRecorder,
        mapper: EventMapper | None = None,
        *,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        cache_size: int = 0,
        cache_entries: int = DEFAULT_CACHE_ENTRIES,
        unseal: Callable[[bytes], bytes] | None = None,
        ciphers: Ciphers | None = None,
    ) -> None:
        self.recorder = recorder
        self.mapper = mapper or EventMapper()
        decode = self.mapper.decode
        self.decode: Callable[[bytes], Event] = (
            decode if unseal is None else (lambda state: decode(unseal(state)))
        )
        """Stored bytes → the typed event, its content unsealed on an encrypted store."""
        self.sealed_only = unseal is not None
        """Whether `save` refuses events not sealed (an encrypted store: never half on)."""
        self.ciphers = ciphers
        """On an encrypted store, what gives each loaded aggregate its cipher (as the
        service does), so an aggregate loaded here can record and be saved."""
        self.snapshot_every = snapshot_every
        self.cache_size = cache_size
        """How many conversations' states to keep; 0 (the default here) keeps none, so
        every load reads the snapshot and events as stored. `open_store` keeps 1,000."""
        self.cache_entries = cache_entries
        self._cache: OrderedDict[ConversationId, _Cached] = OrderedDict()
        self._cache_weight = 0
        self._cache_guard = threading.Lock()

    def drop_cached(self, conversation_ids: Collection[UUID]) -> None:
        """Drop these conversations' cached states (they were forgotten)."""
        with self._cache_guard:
            for conversation_id in conversation_ids:
                cached = self._cache.pop(ConversationId(conversation_id), None)
                if cached is not None:
                    self._cache_weight -= cached.weight

    def forget(self) -> None:
        """Drop every cached state (a commit group lost appends the cache had seen)."""
        with self._cache_guard:
            self._cache.clear()
            self._cache_weight = 0

    def load(self, conversation_id: ConversationId) -> Conversation:
        """The conversation as of its newest event, with its cipher on an encrypted store;
        raises ConversationNotFound, ConversationForgotten. A fork starts from its
        parent's state at the fork point (`domain.state.forked`)."""
        conversation = self._load(conversation_id)
        if self.ciphers is not None:
            conversation.cipher = self.ciphers.cipher(conversation_id)
        return conversation

    def _load(self, conversation_id: ConversationId) -> Conversation:
        if self.cache_size:
            cached = self._cached(conversation_id)
            if cached is not None:
                cached_version, cached_state = cached
                after = self.recorder.select_states(conversation_id, gt=cached_version)
                _refuse_forgotten(conversation_id, after, cached_state.forgotten_on)
                conversation = Conversation.replay(
                    conversation_id,
                    map(self.decode, (state for _, state in after)),
                    state=copy_state(cached_state),
                    version=cached_version,
                    settled=StoreSettled(self.recorder, conversation_id),
                )
                if after:
                    self._remember(conversation)
                return conversation
        snapshot = self.recorder.select_snapshot(conversation_id)
        state = None if snapshot is None else decode_snapshot(snapshot.state)
        version = 0 if snapshot is None or state is None else snapshot.version
        rows = self.recorder.select_states(conversation_id, gt=version)
        if state is None and not rows:
            raise ConversationNotFound(f"no conversation {conversation_id} in this store")
        _refuse_forgotten(conversation_id, rows, None if state is None else state.forgotten_on)
        decode = self.decode
        if state is None:
            state = self._fork_base(decode(rows[0][1]))
        # A generator, not a list: each event is dropped once applied, so replay's peak
        # memory is the rows plus one event, not the rows plus every decoded event.
        conversation = Conversation.replay(
            conversation_id,
            (decode(state) for _, state in rows),
            state=state,
            version=version,
            settled=StoreSettled(self.recorder, conversation_id),
        )
        if self.cache_size:
            self._remember(conversation)
        return conversation

    def state_at(self, conversation_id: ConversationId, version: int) -> ConversationState:
        """The state as of `version` of the conversation's reading, from its events alone
        (a fork's reading numbers its parent's events up to the fork point first)."""
        rows = self.recorder.select_states(conversation_id)
        if not rows:
            raise ConversationNotFound(f"no conversation {conversation_id} in this store")
        _refuse_forgotten(conversation_id, rows, None)
        decode = self.decode
        first = decode(rows[0][1])
        own_from = 1
        if isinstance(first, Started) and first.forked_from is not None:
            if version <= first.forked_at:
                return self.state_at(ConversationId(first.forked_from), version)
            own_from = first.forked_at  # its version v reads as forked_at + v - 1
        upto = version - own_from + 1
        return Conversation.replay(
            conversation_id,
            (decode(state) for stored, state in rows if stored <= upto),
            state=self._fork_base(first),
        ).state

    def _fork_base(self, first: Event) -> ConversationState | None:
        """For a fork's Started, the state it starts from: its parent's at the fork point."""
        if not isinstance(first, Started) or first.forked_from is None:
            return None
        try:
            return forked(self.state_at(ConversationId(first.forked_from), first.forked_at))
        except ConversationForgotten:  # its parent was forgotten: the prefix is hidden
            return forked(ConversationState())

    def save(self, conversation: Conversation) -> None:
        """Write the collected events atomically; raises ConcurrencyConflict, EventTooLarge."""
        events = conversation.pending
        if not events:
            return
        if self.sealed_only:
            _refuse_unsealed(events, conversation.encoded)
        stored = list(map(self.mapper.stored, events, conversation.encoded))
        responses = [_row(e) for e in events if type(e) is ResponseStarted and _indexed(e)]
        snapshot = kept = None
        every = self.snapshot_every
        if every and conversation.version // every > (conversation.version - len(stored)) // every:
            kept, items = settle(conversation.state, conversation.version)
            snapshot = SnapshotRecord(
                conversation.id, conversation.version, encode_snapshot(kept), settled_rows(items)
            )
        try:
            self.recorder.append(
                stored, snapshot, responses, self._catalogue_row(conversation, events)
            )
        except ResponseTaken:
            raise self._stored_elsewhere(conversation.id, responses) from None
        except IntegrityError:
            raise ConcurrencyConflict(
                f"conversation {conversation.id} changed while this write was prepared "
                f"(version {stored[0].originator_version} is taken); reload and retry"
            ) from None
        conversation.collect_events()
        if self.cache_size:
            self._remember(conversation, kept)

    def locate(self, started: ResponseStarted) -> ConversationId | None:
        """The conversation holding the provider response `started` opens, if any."""
        rows = self.recorder.select_responses(*_key(started))
        return ConversationId(rows[0].originator_id) if rows else None

    def placed(self, started: ResponseStarted) -> tuple[ConversationId, int] | None:
        """Where the store's index places this attempt of a provider response: its
        (conversation, version); None when it is not indexed (or not a provider's)."""
        if not _indexed(started):
            return None
        for row in self.recorder.select_responses(*_key(started)):
            if row.attempt == started.attempt:
                return ConversationId(row.originator_id), row.originator_version
        return None

    def _stored_elsewhere(
        self, conversation_id: ConversationId, responses: Sequence[ResponseRow]
    ) -> ResponseStoredElsewhere:
        for row in responses:
            for held in self.recorder.select_responses(row.provider, row.server, row.response_id):
                if held.attempt == row.attempt and held.originator_id != conversation_id:
                    return ResponseStoredElsewhere(
                        f"response {row.response_id!r} is already stored in conversation "
                        f"{held.originator_id}; nothing was written (ingest it there, or "
                        "start another conversation from it with `convstore fork`)",
                        conversation_id=held.originator_id,
                    )
        return ResponseStoredElsewhere(
            f"conversation {conversation_id}: a response of this write was stored by another "
            "write meanwhile; nothing was written: read again"
        )

    def _cached(self, conversation_id: ConversationId) -> tuple[int, ConversationState] | None:
        with self._cache_guard:
            cached = self._cache.get(conversation_id)
            if cached is None:
                return None
            self._cache.move_to_end(conversation_id)
            return cached.version, cached.state

    def _remember(
        self, conversation: Conversation, settled: ConversationState | None = None
    ) -> None:
        """Keep a copy of a conversation's state as stored (it holds no pending events),
        or the `settled` form of it its snapshot just stored."""
        state = copy_state(conversation.state) if settled is None else settled
        entry = _Cached(
            conversation.version,
            state,
            1 + len(state.responses) + len(state.calls) + len(state.activities),
        )
        conversation_id = conversation.id
        cache = self._cache
        with self._cache_guard:
            cached = cache.get(conversation_id)
            if cached is not None:
                if cached.version > entry.version:
                    return  # another thread of this process remembered a newer version
                self._cache_weight -= cached.weight
            cache[conversation_id] = entry
            cache.move_to_end(conversation_id)
            self._cache_weight += entry.weight
            while len(cache) > self.cache_size or (
                self._cache_weight > self.cache_entries and len(cache) > 1
            ):
                self._cache_weight -= cache.popitem(last=False)[1].weight

    def events(self, conversation_id: ConversationId, *, after: int = 0) -> Iterator[Event]:
        """Stored events in version order after `after`; raises ConversationNotFound."""
        rows = self.recorder.select_states(conversation_id, gt=after)
        if not rows and after == 0:
            raise ConversationNotFound(f"no conversation {conversation_id} in this store")
        _refuse_forgotten(conversation_id, rows, None)
        decode = self.decode
        return (decode(state) for _, state in rows)

    def _catalogue_row(
        self, conversation: Conversation, events: Sequence[Event]
    ) -> CatalogueRow | None:
        """The catalogue row a save of `events` writes (None on a store without one)."""
        if not self.recorder.catalogued():
            return None
        first, inherited = events[0], None
        if isinstance(first, Started) and first.forked_from is not None:
            parent = self.recorder.select_catalogue_entry(first.forked_from)
            if parent is not None and parent.provider is not None:
                inherited = parent.provider, parent.model or ""
        turns = conversation.state.counts.get(TURN_STARTED, 0)
        state = conversation.state
        return catalogue_row(
            conversation.id,
            events,
            turns=turns,
            metadata=(state.title, state.labels),
            inherited=inherited,
        )

    def summaries(
        self,
        *,
        offset: int = 0,
        limit: int = 50,
        newest_first: bool = False,
        where: ConversationFilter | None = None,
    ) -> list[ConversationSummary]:
        """Conversations in the order they started (or the reverse), filtered by `where`:
        from the catalogue, or from their first events on a store without one (which
        cannot filter: a reader one migration behind)."""
        where = where or ConversationFilter()
        if self.recorder.catalogued():
            entries = self.recorder.select_catalogue(
                where, offset=offset, limit=limit, newest_first=newest_first
            )
            return [self._entry_summary(entry) for entry in entries]
        _filters_need_catalogue(where)
        firsts = self.recorder.select_first_events(
            offset=offset, limit=limit, newest_first=newest_first
        )
        return [self._first_summary(first) for first in firsts]

    def count(self, where: ConversationFilter | None = None) -> int:
        """How many conversations `where` lets through."""
        where = where or ConversationFilter()
        if self.recorder.catalogued():
            return self.recorder.count_catalogue(where)
        _filters_need_catalogue(where)
        return sum(1 for _ in _first_ids(self.recorder))

    def matching(self, prefix: str, *, limit: int) -> list[ConversationId]:
        """At most `limit` conversations whose id starts with the hex `prefix`."""
        span = prefix_range(prefix)
        if span is None:
            raise not_a_prefix(prefix)
        low, high = span
        return [ConversationId(key) for key in self.recorder.select_ids(low, high, limit)]

    def _entry_summary(self, entry: CatalogueEntry) -> ConversationSummary:
        if entry.title is None:  # not catalogued: read its first and newest events
            key = entry.originator_id
            [first] = self.recorder.select_events(key, limit=1)
            [newest] = self.recorder.select_events(key, desc=True, limit=1)
            return self._first_summary(FirstEvent(key, first.state, newest.originator_version))
        return ConversationSummary(
            id=ConversationId(entry.originator_id),
            title=entry.title,
            labels=entry.labels,
            created_on=entry.created_at or EPOCH,
            events=entry.events,
            last_activity_at=entry.last_activity_at,
            provider=entry.provider,
            model=entry.model,
            turns=entry.turns,
            forked_from=None if entry.forked_from is None else ConversationId(entry.forked_from),
        )

    def _first_summary(self, first: FirstEvent) -> ConversationSummary:
        labels: tuple[str, ...]
        forked_from = None
        try:
            started = self.decode(first.state)
        except (
            UnreadableEvent,
            ConversationForgotten,
        ):  # listed all the same, said unreadable: never a stop
            title, labels, created = UNREADABLE_TITLE, (), _stamp(first.state)
        else:
            title, labels = ("", ())
            if isinstance(started, Started):
                title, labels, forked_from = started.title, started.labels, started.forked_from
            created = started.timestamp
        return ConversationSummary(
            id=ConversationId(first.originator_id),
            title=title,
            labels=labels,
            created_on=created,
            events=first.events,
            forked_from=None if forked_from is None else ConversationId(forked_from),
        )


def _refuse_unsealed(events: Sequence[Event], encoded: Sequence[bytes]) -> None:
    """Raise IntegrityError (nothing written) for an event an encrypted store would hold in
    clear: its aggregate was given no cipher."""
    for event, state in zip(events, encoded, strict=True):
        if b'"sealed":"' not in state and type(event).__name__ not in UNSEALED:
            raise UnreadableEvent(
                f"{type(event).__name__} at version {event.originator_version} of conversation "
                f"{event.originator_id} is not sealed, and this store encrypts: nothing was "
                "written (record through the store's service, which seals)"
            )


def forgotten_event(state: bytes) -> Forgotten | None:
    """The Forgotten event stored bytes hold, or None when they hold another event."""
    if b'"type":"Forgotten"' not in state:  # never sealed, so never missed
        return None
    try:
        event = EventMapper.decode(state)
    except UnreadableEvent:
        return None
    return event if isinstance(event, Forgotten) else None


def _refuse_forgotten(
    conversation_id: UUID, rows: Sequence[tuple[int, bytes]], on: datetime | None
) -> None:
    """Raise ConversationForgotten when the newest of `rows` (or the state, `on`) says
    the conversation was forgotten: nothing may be read of it any more."""
    if rows:
        newest = forgotten_event(rows[-1][1])
        if newest is not None:
            on = newest.timestamp
    if on is not None:
        raise ConversationForgotten(
            f"conversation {conversation_id} was forgotten on {on:%Y-%m-%d}",
            conversation_id=conversation_id,
            on=on,
        )


def _filters_need_catalogue(where: ConversationFilter) -> None:
    if not where.empty:
        raise MigrationRequired(
            "listing with a filter needs the catalogue of migration 0003_catalogue, which this"
            " store lacks: run `convstore --db URL migrate`, then list again"
        )


def _first_ids(recorder: ConversationRecorder) -> Iterator[UUID]:
    offset = 0
    while page := recorder.select_first_events(offset=offset, limit=1000):
        yield from (first.originator_id for first in page)
        offset += len(page)


def _indexed(started: ResponseStarted) -> bool:
    """Whether a response goes in the store-wide index: a provider's (history read from a
    request is each conversation's own)."""
    return started.origin == "provider"


def _key(started: ResponseStarted) -> tuple[str, str, str]:
    """(provider, server, response id): the server is not recorded yet, so ''."""
    return started.provider, "", started.response_id


def _row(started: ResponseStarted) -> ResponseRow:
    return ResponseRow(
        *_key(started),
        attempt=started.attempt,
        originator_id=started.originator_id,
        originator_version=started.originator_version,
    )


UNREADABLE_TITLE: Final = "(its first event cannot be read: run `convstore verify`)"
"""The title a listing gives a conversation whose first event cannot be decoded."""


class _Stamped(msgspec.Struct):
    timestamp: datetime = EPOCH


def _stamp(state: bytes) -> datetime:
    """The time an unreadable event says it was recorded, where it still says so."""
    try:
        return msgspec.json.decode(state, type=_Stamped).timestamp
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return EPOCH
