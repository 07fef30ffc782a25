"""The repository's aggregate cache, on SQLite and on PostgreSQL.

`open_store` keeps the state of the conversations it last saved or loaded; a load starts
from a copy of it and folds only the events stored after it. Each test compares what a
caching repository loads with what an uncached one (`open_store(url, cache_size=0)`)
loads from the same database: the cache may only ever make loads cheaper, never different.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from convstore.domain import (
    ActivityId,
    CallId,
    Conversation,
    ConversationId,
    Event,
    HostedActivity,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    ToolCallRequested,
    TurnEnded,
    TurnId,
    TurnStarted,
    UserMessage,
)
from convstore.domain.errors import ConcurrencyConflict, EventTooLarge
from convstore.storage import PostgresLocation, SQLiteLocation, Store, open_store, parse_location
from convstore.storage.repository import EventRepository, decode_snapshot


def _uncached(url: str, cid: ConversationId) -> Conversation:
    """The conversation as stored, loaded by a store that keeps no cache."""
    with open_store(url, cache_size=0) as fresh:
        return fresh.repository.load(cid)


def _versions(url: str, cid: ConversationId) -> list[int]:
    with open_store(url, cache_size=0) as fresh:
        return [event.originator_version for event in fresh.service.events(cid)]


def _say(text: str) -> list[Event]:
    return [UserMessage(blocks=(text,))]


def _rich_turn(n: int) -> list[Event]:
    """A turn that adds one response, one client call and one hosted activity to the state
    (the cached state's dicts, and its weight in the ids bound)."""
    response = ResponseId(f"resp-{n}")
    activity = ActivityId(f"act-{n}")
    return [
        TurnStarted(turn_id=TurnId(f"turn-{n}")),
        UserMessage(blocks=(f"question {n}",)),
        ResponseStarted(response_id=response, provider="anthropic"),
        ToolCallRequested(response_id=response, call_id=CallId(f"call-{n}"), name="lookup"),
        HostedActivity(
            activity_id=activity, name="web_search", state="started", response_id=response
        ),
        HostedActivity(
            activity_id=activity, name="web_search", state="completed", response_id=response
        ),
        ResponseEnded(response_id=response, state="completed", digest=f"digest-{n}"),
        TurnEnded(turn_id=TurnId(f"turn-{n}")),
    ]


class _ReadSpy:
    """Records the reads a repository makes of its recorder (public recorder methods).

    A cache hit reads only `select_states(gt=<cached version>)`; a miss reads the
    snapshot first, then `select_states` after it (gt=0 without a snapshot).
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, recorder: Any) -> None:
        self.snapshot_reads: list[Any] = []
        self.state_reads: list[tuple[Any, int]] = []
        select_snapshot: Callable[..., Any] = recorder.select_snapshot
        select_states: Callable[..., Any] = recorder.select_states

        def spy_snapshot(originator_id: Any) -> Any:
            self.snapshot_reads.append(originator_id)
            return select_snapshot(originator_id)

        def spy_states(originator_id: Any, *args: Any, **kwargs: Any) -> Any:
            self.state_reads.append((originator_id, kwargs.get("gt", 0)))
            return select_states(originator_id, *args, **kwargs)

        monkeypatch.setattr(recorder, "select_snapshot", spy_snapshot)
        monkeypatch.setattr(recorder, "select_states", spy_states)

    def hit(self, repository: EventRepository, cid: ConversationId) -> bool:
        """Load `cid` and tell whether it came from the cache (no snapshot read)."""
        before = len(self.snapshot_reads)
        repository.load(cid)
        return len(self.snapshot_reads) == before


# --- (1) catching up with another writer ------------------------------------------------------


class TestCatchUp:
    def test_a_load_folds_events_another_store_appended(self, store_url: str) -> None:
        with open_store(store_url) as a, open_store(store_url) as b:
            cid = a.service.start("shared")
            a.service.append(cid, _say("a1"))
            cached = a.repository.load(cid)  # A's cache now holds version 2
            assert cached.version == 2

            b.service.append(cid, _say("b1"))
            b.service.append(cid, _rich_turn(1))
            assert b.repository.load(cid).version == 11

            caught_up = a.repository.load(cid)
            assert caught_up.version == 11
            assert caught_up == _uncached(store_url, cid)
            assert caught_up != cached

    def test_an_append_after_the_other_stores_lands_after_them(self, store_url: str) -> None:
        with open_store(store_url) as a, open_store(store_url) as b:
            cid = a.service.start("shared")
            a.repository.load(cid)
            b.service.append(cid, _say("from b"))

            recorded = a.service.append(cid, _say("from a"))  # loads through A's cache

            assert [e.originator_version for e in recorded] == [3]
            assert _versions(store_url, cid) == [1, 2, 3]
            texts = [e.blocks[0] for e in a.service.events(cid) if isinstance(e, UserMessage)]
            assert texts == ["from b", "from a"]
            # Both caches agree with the database, B's included (it last saw version 2).
            expected = _uncached(store_url, cid)
            assert a.repository.load(cid) == expected
            assert b.repository.load(cid) == expected
            assert expected.version == 3

    def test_a_stale_aggregate_still_conflicts(self, store_url: str) -> None:
        """The cache never hides a conflict: a version B took is refused to A."""
        with open_store(store_url) as a, open_store(store_url) as b:
            cid = a.service.start("shared")
            stale = a.repository.load(cid)
            b.service.append(cid, _say("b wins"))

            stale.record(UserMessage(blocks=("a loses",)))
            with pytest.raises(ConcurrencyConflict):
                a.repository.save(stale)

            assert _versions(store_url, cid) == [1, 2]
            assert a.repository.load(cid) == _uncached(store_url, cid)


# --- (2) and (3) failed saves leave the cache alone -------------------------------------------


class TestFailedSaves:
    def test_a_conflicting_save_leaves_the_cache_as_it_was(self, store_url: str) -> None:
        with open_store(store_url) as a, open_store(store_url) as b:
            cid = a.service.start("shared")
            a.service.append(cid, _rich_turn(1))
            stale = a.repository.load(cid)  # version 9, cached
            # B takes version 10 with one event, so A's refused state would claim the same
            # version: a cache updated by the failed save would serve A's phantom event.
            b.service.append(cid, _say("b"))
            stale.record_all(_rich_turn(2)[:1])
            assert stale.version == 10
            with pytest.raises(ConcurrencyConflict):
                a.repository.save(stale)

            loaded = a.repository.load(cid)
            assert loaded == _uncached(store_url, cid)
            assert loaded.version == 10
            assert loaded.state.open_turn is None  # B's message, not A's TurnStarted
            assert loaded != stale

            # And A goes on from there: its next append lands at 11.
            recorded = a.service.append(cid, _say("a after"))
            assert [e.originator_version for e in recorded] == [11]
            assert a.repository.load(cid) == _uncached(store_url, cid)

    def test_an_oversized_event_leaves_the_cache_and_the_store_unchanged(
        self, store_url: str
    ) -> None:
        with open_store(store_url, max_event_bytes=2048) as store:
            cid = store.service.start("small events")
            store.service.append(cid, _say("fits"))
            before = store.repository.load(cid)  # cached at version 2
            before_events = list(store.service.events(cid))

            conversation = store.repository.load(cid)
            conversation.record_all([*_rich_turn(1)[:2], UserMessage(blocks=("x" * 5000,))])
            assert conversation.version == 5
            with pytest.raises(EventTooLarge):
                store.repository.save(conversation)
            with pytest.raises(EventTooLarge):
                store.service.append(cid, _say("y" * 5000))

            assert list(store.service.events(cid)) == before_events
            assert store.repository.load(cid) == before == _uncached(store_url, cid)
            # The version the refused batch would have taken is still free.
            recorded = store.service.append(cid, _say("fits again"))
            assert [e.originator_version for e in recorded] == [3]
            assert store.repository.load(cid) == _uncached(store_url, cid)


# --- (4) unsaved changes do not leak into the cache -------------------------------------------


class TestUnsavedChanges:
    def test_changing_a_cached_load_without_saving(
        self, store_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        with open_store(store_url) as store:
            spy = _ReadSpy(monkeypatch, store.recorder)
            cid = store.service.start("drafts")
            store.service.append(cid, _rich_turn(1))
            assert spy.hit(store.repository, cid)  # what follows works on a cached copy

            loaded = store.repository.load(cid)
            # Every one of the state's dicts and fields changes: counts, responses, calls,
            # activities, head, open turn and response.
            loaded.record_all(_rich_turn(2)[:5])
            assert loaded.state.open_response is not None

            again = store.repository.load(cid)
            assert again == _uncached(store_url, cid)
            assert again.version == 9
            assert again != loaded
            assert "resp-2" not in again.state.responses
            assert "call-2" not in again.state.calls
            assert "act-2" not in again.state.activities

    def test_changing_a_saved_aggregate_without_saving(self, store_url: str) -> None:
        """The state a save caches is a copy: the saved aggregate's next drafts stay out."""
        with open_store(store_url) as store:
            conversation = Conversation.start("saved then changed")
            conversation.record_all(_rich_turn(1))
            store.repository.save(conversation)
            cid = conversation.id

            conversation.record_all(_rich_turn(2)[:5])

            assert store.repository.load(cid) == _uncached(store_url, cid)
            assert store.repository.load(cid).version == 9

    def test_two_loads_from_the_cache_are_independent(self, store_url: str) -> None:
        with open_store(store_url) as store:
            cid = store.service.start("twins")
            first, second = store.repository.load(cid), store.repository.load(cid)
            first.record_all(_rich_turn(1))
            assert second == _uncached(store_url, cid)
            second.record_all(_say("independent"))
            store.repository.save(second)
            assert store.repository.load(cid) == _uncached(store_url, cid)
            assert store.repository.load(cid).version == 2


# --- (5) the bounds evict ---------------------------------------------------------------------


class TestBounds:
    def test_the_count_bound_evicts_the_least_recently_used(
        self, store_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        with open_store(store_url, cache_size=2) as store:
            assert store.repository.cache_size == 2
            spy = _ReadSpy(monkeypatch, store.recorder)
            repository = store.repository
            one, two = store.service.start("one"), store.service.start("two")
            assert spy.hit(repository, one)  # one is now the most recently used
            three = store.service.start("three")  # evicts two

            assert spy.hit(repository, one)
            assert spy.hit(repository, three)
            assert not spy.hit(repository, two)  # reloaded from the store: evicts one
            assert not spy.hit(repository, one)
            for cid in (one, two, three):
                assert repository.load(cid) == _uncached(store_url, cid)

    def test_cache_size_zero_keeps_nothing(
        self, store_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        with open_store(store_url, cache_size=0) as store:
            spy = _ReadSpy(monkeypatch, store.recorder)
            cid = store.service.start("uncached")
            assert not spy.hit(store.repository, cid)
            assert not spy.hit(store.repository, cid)

    def test_the_ids_bound_evicts(self, store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
        # `open_store` does not expose the ids bound; `cache_entries` is the repository's
        # public constructor parameter. Weight: 1 + responses + calls + activities.
        with open_store(store_url, cache_size=0) as store:
            repository = EventRepository(
                store.recorder, store.repository.mapper, cache_size=100, cache_entries=4
            )
            spy = _ReadSpy(monkeypatch, store.recorder)
            light = []
            for n in range(3):
                conversation = Conversation.start(f"light {n}")
                repository.save(conversation)  # weight 1 each
                light.append(conversation.id)
            assert all(spy.hit(repository, cid) for cid in light)  # 3 of 4

            heavy = Conversation.start("heavy")
            heavy.record_all(_rich_turn(1))
            repository.save(heavy)  # weight 4: 7 > 4, the three light ones go

            assert spy.hit(repository, heavy.id)
            assert [spy.hit(repository, cid) for cid in light] == [False, False, False]
            assert not spy.hit(repository, heavy.id)  # the light loads pushed it out

    def test_one_state_over_the_ids_bound_is_still_kept(
        self, store_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        with open_store(store_url, cache_size=0) as store:
            repository = EventRepository(
                store.recorder, store.repository.mapper, cache_size=100, cache_entries=2
            )
            spy = _ReadSpy(monkeypatch, store.recorder)
            heavy = Conversation.start("heavier than the bound")
            heavy.record_all(_rich_turn(1))
            repository.save(heavy)
            assert spy.hit(repository, heavy.id)
            assert repository.load(heavy.id) == _uncached(store_url, heavy.id)


# --- (6) a snapshot that cannot be decoded is passed over -------------------------------------


@contextmanager
def _sql(url: str) -> Iterator[Callable[[str, Sequence[Any]], None]]:
    """Run statements on the store's snapshots table behind the repository's back."""
    location = parse_location(url)
    if isinstance(location, SQLiteLocation):
        connection = sqlite3.connect(location.path)
        try:
            yield lambda statement, params: connection.execute(statement, params) and None
            connection.commit()
        finally:
            connection.close()
        return
    assert isinstance(location, PostgresLocation)
    import psycopg
    from psycopg import sql

    with psycopg.connect(location.dsn, autocommit=True) as pg:

        def run(statement: str, params: Sequence[Any]) -> None:
            query = statement.replace("?", "%s").replace("snapshots", "{}.snapshots")
            pg.execute(sql.SQL(query).format(sql.Identifier(location.schema)), params)  # type: ignore[arg-type]

        yield run


def _corrupt_snapshot(url: str, store: Store, cid: ConversationId, state: bytes) -> None:
    key: Any = cid.bytes if isinstance(parse_location(url), SQLiteLocation) else cid
    with _sql(url) as run:
        run("UPDATE snapshots SET state = ? WHERE originator_id = ?", (state, key))
    snapshot = store.recorder.select_snapshot(cid)
    assert snapshot is not None and snapshot.state == state


@pytest.mark.parametrize(
    "corrupt",
    [
        pytest.param(lambda good: b"\xc1 not msgpack", id="garbage"),
        pytest.param(lambda good: good[: len(good) // 2], id="truncated"),
    ],
)
def test_an_unreadable_snapshot_is_skipped(
    store_url: str, corrupt: Callable[[bytes], bytes]
) -> None:
    with open_store(store_url, snapshot_every=6) as writer:
        cid = writer.service.start("snapshotted")
        writer.service.append(cid, _rich_turn(1))  # version 9: a snapshot at 9
        writer.service.append(cid, _say("after the snapshot"))
        good = writer.recorder.select_snapshot(cid)
        assert good is not None and good.version == 9
        expected = _uncached(store_url, cid)
        replayed = Conversation.replay(cid, writer.service.events(cid))
        assert expected == replayed

        bad = corrupt(good.state)
        assert decode_snapshot(bad) is None
        _corrupt_snapshot(store_url, writer, cid, bad)

    # A new caching store (cold cache) and an uncached one both replay from the events.
    with open_store(store_url, snapshot_every=6) as reader:
        loaded = reader.repository.load(cid)
        assert loaded == expected == replayed
        assert loaded == _uncached(store_url, cid)
        assert reader.repository.load(cid) == expected  # now from its cache
        # It goes on writing: the next append lands at 11 and all loads agree.
        recorded = reader.service.append(cid, _rich_turn(2))
        assert recorded[0].originator_version == 11
        assert reader.repository.load(cid) == _uncached(store_url, cid)
        assert reader.repository.load(cid) == Conversation.replay(cid, reader.service.events(cid))
