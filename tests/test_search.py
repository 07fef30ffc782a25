"""The search projection on both backends: exactly once, deterministic, safe to query.

- the index equals a fold over every event (an independent model of the indexing rules)
  after random interleavings of appends, rolled-back appends and projection runs with a
  crash injected inside or after the batch's transaction; a restart neither skips nor
  repeats an event, and the index equals a rebuild;
- a rebuild gives byte-identical rows; re-processing a tracked position is refused;
- hostile queries never produce a database error; a quoted phrase finds its document;
  accents fold, CJK is found inside unspaced text;
- several writers with a follower running: the follower sees exactly the final log;
- gaps left by rolled-back appends on PostgreSQL are logged and passed over;
- the `search`, `reindex` and `project` commands end to end.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore.adapters import cli
from convstore.domain import (
    ActivityId,
    AssistantText,
    Attribution,
    CallId,
    ContextInjected,
    ConversationId,
    Event,
    HostedActivity,
    Reasoning,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    Retitled,
    Source,
    Started,
    ToolCallRequested,
    ToolCallResponded,
    TurnEnded,
    TurnStarted,
    UserMessage,
)
from convstore.domain.errors import ConcurrencyConflict, ConvstoreError
from convstore.projections import query, search
from convstore.projections.follower import Follower, Positioned
from convstore.projections.query import SearchQueryError
from convstore.projections.search import SearchIndex
from convstore.storage import Store, open_store
from convstore.storage.errors import IntegrityError, StorageError, TrackingConflict
from convstore.storage.mapper import EventMapper
from tests.conftest import drop_postgres_schema

SLOW = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@contextlib.contextmanager
def fresh_store(base_url: str) -> Iterator[Store]:
    """A new, empty store beside `base_url` (one per hypothesis example), removed after."""
    schema = None
    if base_url.startswith("sqlite"):
        path = Path(base_url.removeprefix("sqlite:///")).parent / f"{uuid.uuid4().hex}.db"
        url = f"sqlite:///{path}"
    else:
        match = re.search(r"schema=(\w+)", base_url)
        assert match is not None
        schema = f"{match.group(1)}_{uuid.uuid4().hex[:8]}"
        url = base_url.replace(match.group(0), f"schema={schema}")
    try:
        with open_store(url) as store:
            yield store
    finally:
        if schema is not None:
            drop_postgres_schema(schema)
        else:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)


# --- writing conversations ------------------------------------------------------------------------

WORDS = (
    "matcha",
    "Uji",
    "koicha",
    "café",
    "cafe",
    "Straße",
    "naïve",
    "東京タワー",
    "宇治抹茶",
    "rain",
    "🍵",
    "example.org/tea",
    "get_weather",
    "ÉCOLE",
)
sentences = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)


class Writer:
    """Appends user messages, context, responses and turn ends to a store's conversations."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.service = store.service
        self.conversations: list[ConversationId] = []
        self.count = 0
        self.tag = uuid.uuid4().hex[:8]
        """Makes its response ids its own: a response id is stored once per store."""

    def start(self, n: int) -> None:
        self.conversations = [self.service.start(f"conversation {i}") for i in range(n)]

    def _id(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}_{self.tag}"

    def user(self, which: int, text: str) -> None:
        cid = self.conversations[which]
        self.service.add_user_input(cid, [UserMessage(blocks=(text, "second " + text))])

    def context(self, which: int, text: str) -> None:
        self.service.append(
            self.conversations[which], [ContextInjected(source="context", text=text)]
        )

    def end_turn(self, which: int) -> None:
        cid = self.conversations[which]
        turn = self.service.get(cid).state.open_turn
        if turn is not None:
            self.service.append(cid, [TurnEnded(turn_id=turn)])

    def response(self, which: int, text: str, tool: bool) -> None:
        cid = self.conversations[which]
        rid = ResponseId(self._id("msg_"))
        activity = ActivityId(self._id("srv_"))
        drafts: list[Event] = [
            ResponseStarted(response_id=rid, provider="anthropic", model="m"),
            Reasoning(response_id=rid, text=f"thinking about {text}"),
            Reasoning(response_id=rid, text="secret", redacted=True),
            HostedActivity(
                activity_id=activity,
                name="web_search",
                state="started",
                response_id=rid,
                input={"query": text, "urls": ["https://example.org/q"]},
            ),
            HostedActivity(
                activity_id=activity,
                name="web_search",
                state="completed",
                response_id=rid,
                summary="summary is not indexed",
            ),
            AssistantText(
                response_id=rid,
                text=f"answer: {text}",
                attributions=(
                    Attribution(
                        source=Source(kind="web", url="https://example.org/tea", title=text),
                        excerpt="excerpts are not indexed",
                    ),
                ),
            ),
        ]
        call = CallId(self._id("call_"))
        if tool:
            drafts.append(
                ToolCallRequested(
                    response_id=rid, call_id=call, name="get_weather", arguments={"city": text}
                )
            )
        drafts.append(
            ResponseEnded(
                response_id=rid, state="completed", finish_reason="tool_use" if tool else "stop"
            )
        )
        self.service.append(cid, drafts)
        if tool:
            self.service.add_user_input(
                cid, [ToolCallResponded(call_id=call, content=f"weather for {text}")]
            )

    def retitle(self, which: int, text: str) -> None:
        """A new title (every third one empty: the title cleared)."""
        self.count += 1
        self.service.retitle(self.conversations[which], "" if self.count % 3 == 0 else text)

    def rolled_back(self, which: int, text: str) -> None:
        """An append that loses a race: rolled back (on PostgreSQL its ids become a gap)."""
        cid = self.conversations[which]
        with open_store(_url_of(self.store)) as other:
            stale = other.repository.load(cid)
            self.context(which, text)
            stale.record(ContextInjected(source="context", text="never stored " + text))
            with pytest.raises(ConcurrencyConflict):
                other.repository.save(stale)


def _url_of(store: Store) -> str:
    location: Any = store.location
    if hasattr(location, "path"):
        return f"sqlite:///{location.path}"
    return f"{location.dsn}{'&' if '?' in location.dsn else '?'}schema={location.schema}"


# --- the model: a fold over every event ----------------------------------------------------------


def log_events(store: Store) -> list[Positioned]:
    """Every event in notification order, with its notification id."""
    decode = EventMapper.decode
    out: list[Positioned] = []
    position = None
    while batch := store.recorder.select_notifications(
        start=position, limit=500, inclusive_of_start=False
    ):
        out.extend((n.id, decode(n.state)) for n in batch)
        position = batch[-1].id
    return out


Expected = tuple[str, int, str | None, str, str]


def model(events: Sequence[Positioned]) -> list[tuple[int, Expected]]:
    """(notification id, (conversation, version, turn, kind, text)) the index should hold."""
    open_turn: dict[uuid.UUID, str | None] = {}
    out: list[tuple[int, Expected]] = []
    for position, event in events:
        cid = event.originator_id
        texts: list[tuple[str, str]] = []
        match event:
            case Started() | Retitled():  # the current title's rows only, in no turn
                out = [row for row in out if not (row[1][0] == str(cid) and row[1][3] == "title")]
                if event.title:
                    out.append(
                        (position, (str(cid), event.originator_version, None, "title", event.title))
                    )
                continue
            case TurnStarted():
                open_turn[cid] = event.turn_id
            case TurnEnded():
                open_turn[cid] = None
            case UserMessage():
                texts.append(("user", "\n\n".join(event.blocks)))
            case ContextInjected():
                texts.append(("context", event.text))
            case Reasoning() if not event.redacted:
                texts.append(("reasoning", event.text))
            case HostedActivity() if event.input:
                texts.append(("activity", f"{event.input['query']}\nhttps://example.org/q"))
            case AssistantText():
                texts.append(("text", event.text))
                source = event.attributions[0].source
                texts.append(("citation", f"{source.title}\n{source.url}"))
            case ToolCallRequested():
                texts.append(("tool_call", f'get_weather {{"city":"{event.arguments["city"]}"}}'))
            case ToolCallResponded():
                texts.append(("tool_result", event.content))
        turn = open_turn.get(cid)
        out.extend(
            (position, (str(cid), event.originator_version, turn, kind, text))
            for kind, text in texts
        )
    return out


def index_rows(store: Store) -> list[tuple[int, Expected]]:
    with store.recorder.view_reader() as cursor:
        rows = cursor.execute(
            "SELECT id, conversation_id, version, turn_id, kind, body FROM search_rows ORDER BY id"
        ).fetchall()
    return [
        (
            i // search.PIECES,
            (str(c if isinstance(c, uuid.UUID) else uuid.UUID(bytes=c)), v, t, k, b),
        )
        for i, c, v, t, k, b in rows
    ]


class Crash(Exception):
    """An injected crash."""


def _faulty(point: str, nth: int) -> Any:
    seen = 0

    def fault(at: str) -> None:
        nonlocal seen
        if at == point:
            if seen == nth:
                raise Crash(f"crash at {point} #{nth}")
            seen += 1

    return fault


operations = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.integers(0, 2), sentences),
        st.tuples(st.just("context"), st.integers(0, 2), sentences),
        st.tuples(st.just("response"), st.integers(0, 2), sentences, st.booleans()),
        st.tuples(st.just("end_turn"), st.integers(0, 2)),
        st.tuples(st.just("retitle"), st.integers(0, 2), sentences),
        st.tuples(st.just("rolled_back"), st.integers(0, 2), sentences),
        st.tuples(
            st.just("project"),
            st.integers(1, 4),
            st.none()
            | st.tuples(st.sampled_from(["read", "written", "committed"]), st.integers(0, 2)),
        ),
    ),
    max_size=16,
)


@settings(SLOW, max_examples=40)
@given(ops=operations)
def test_index_equals_a_fold_over_the_log_despite_crashes(
    store_url: str, ops: list[tuple[Any, ...]]
) -> None:
    """Scenario 6, both backends: crashes injected (hypothesis) at reading, after the view write and
    after the commit; after restart the view equals a fold over all events, and a rebuild
    (scenario 7) the same."""
    with fresh_store(store_url) as store:
        writer = Writer(store)
        writer.start(3)
        for op in ops:
            if op[0] == "project":
                _, batch, crash = op
                fault = None if crash is None else _faulty(*crash)
                follower = search.follower(store, batch_size=batch, fault=fault)
                with contextlib.suppress(Crash):
                    follower.catch_up()
            else:
                getattr(writer, op[0])(*op[1:])
        # The restart: a new follower catches up.
        follower = search.follower(store, batch_size=5)
        follower.catch_up()
        events = log_events(store)
        assert follower.position() == events[-1][0]
        rows = index_rows(store)
        assert rows == model(events)  # nothing skipped, nothing twice, in log order
        index = follower.projection
        assert isinstance(index, SearchIndex)
        before = index.dump()
        follower.rebuild()
        assert index.dump() == before


def test_rebuild_is_byte_identical(store: Store) -> None:
    """Scenario 7, both backends: drop the index (reset) and rebuild: byte-identical rows."""
    writer = Writer(store)
    writer.start(3)
    for i, words in enumerate(WORDS):
        writer.user(i % 3, words)
        writer.response(i % 3, f"{words} {WORDS[-i]}", tool=i % 2 == 0)
        if i % 4 == 0:
            writer.end_turn(i % 3)
    long_text = " ".join(f"word{i}" for i in range(6000)) + " needle at the end"
    writer.context(0, long_text)
    follower = search.follower(store, batch_size=3)
    follower.catch_up()
    index = follower.projection
    assert isinstance(index, SearchIndex)
    first = index.dump()
    assert index.count() > 2 * len(WORDS)
    report = search.follower(store, batch_size=1000).rebuild()
    assert report.position == store.recorder.max_notification_id()
    assert index.dump() == first
    # A long text is cut into several rows; its end is found.
    hits = index.search('"needle at the end"')
    assert [h.kind for h in hits] == ["context"] and hits[0].piece > 0


def test_a_tracked_position_is_not_processed_again(store: Store) -> None:
    """Scenario 6, both backends: re-processing a tracked position is refused by its tracking
    key."""
    Writer(store).start(2)
    follower = search.follower(store)
    follower.catch_up()
    position = follower.position()
    assert position is not None
    recorder = store.recorder
    with (
        pytest.raises(IntegrityError),
        recorder.view_transaction(search.NAME, track=position, after=position) as cursor,
    ):
        cursor.execute("DELETE FROM search_turns")
    with (
        pytest.raises(TrackingConflict),
        recorder.view_transaction(search.NAME, track=position + 1, after=position - 1),
    ):
        pytest.fail("a stale position must be refused before the block runs")
    assert follower.position() == position


def test_workers_racing_on_one_index_apply_each_event_once(store_url: str) -> None:
    """Scenario 6, both backends: workers racing on one index apply each event exactly once."""
    with fresh_store(store_url) as store:
        writer = Writer(store)
        writer.start(3)
        for i in range(30):
            writer.response(i % 3, WORDS[i % len(WORDS)], tool=i % 3 == 0)
        url = _url_of(store)
        reports = []

        def work() -> None:
            with open_store(url) as own:
                reports.append(search.follower(own, batch_size=4).catch_up())

        threads = [threading.Thread(target=work) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sum(r.events for r in reports) == len(log_events(store))
        assert index_rows(store) == model(log_events(store))


# --- queries --------------------------------------------------------------------------------------

HOSTILE = st.lists(
    st.one_of(
        st.sampled_from(
            [
                '"',
                "-",
                "NEAR(",
                "NEAR",
                "*",
                "col:",
                "body:",
                "(",
                ")",
                "OR",
                "AND",
                "NOT",
                "\x00",
                "🍵",
                ",",
                ":",
                "^",
                "+",
                "'",
                "\\",
                "{",
                "}",
                "[",
                "]",
                "5",
                " ",
                "matcha",
                "café",
                "東京",
                "<->",
                "&",
                "|",
                "!",
                ":*",
                "\u0301",
                "\u0483",
                "%",
                "?",
                ";",
                "$1",
            ]
        ),
        st.text(max_size=6),
    ),
    max_size=24,
).map("".join)


@pytest.fixture
def planted(store: Store) -> Store:
    writer = Writer(store)
    writer.start(2)
    writer.user(0, "matcha in Uji near the bridge")
    writer.context(0, "matcha tea by the quiet river")
    writer.response(1, "東京タワー café naïve Straße", tool=True)
    return store


@settings(SLOW, max_examples=300)
@given(query=HOSTILE)
def test_hostile_queries_never_reach_the_database_as_syntax(planted: Store, query: str) -> None:
    """Scenario 19, both backends: hostile query strings never give a database error (bound
    parameters: test_reliability_search.py)."""
    try:
        hits = search.search(planted, query, catch_up=False)
    except SearchQueryError:
        return
    except StorageError as error:
        pytest.fail(f"database error for {query!r}: {error}")
    assert all(isinstance(hit.snippet, str) for hit in hits)


def test_query_language(planted: Store) -> None:
    search.follower(planted).catch_up()

    def kinds(query: str) -> list[tuple[int, str]]:
        return sorted((h.version, h.kind) for h in search.search(planted, query, catch_up=False))

    assert kinds('"near the bridge"') == [(3, "user")]
    assert kinds('"the near bridge"') == []
    assert kinds("matcha -bridge") == [(4, "context")]
    assert kinds("matcha -(bridge OR quiet)") == []
    assert kinds("bridge OR weather") == sorted([(3, "user"), *kinds("weather")])
    assert kinds("riv*") == [(4, "context")]
    assert kinds('"quiet riv"*') == [(4, "context")]
    assert kinds("NEAR(matcha river, 4)") == [(4, "context")]
    assert kinds("NEAR(matcha river, 3)") == []
    assert kinds("NEAR(river matcha)") == [(4, "context")]
    assert kinds("user:matcha") == []  # a column prefix is just words: `user matcha`
    assert kinds('"unbalanced (matcha') == []
    assert kinds("(matcha") == [(3, "user"), (4, "context")]
    assert kinds("matcha)) AND ((Uji") == [(3, "user")]
    for nothing in ("", "   ", "-matcha", "NOT matcha", "()", '""', "*", "\x00", "-(a OR b)"):
        with pytest.raises(SearchQueryError):
            search.search(planted, nothing, catch_up=False)
    with pytest.raises(SearchQueryError):
        search.search(planted, "x" * (query.MAX_QUERY_CHARS + 1), catch_up=False)
    with pytest.raises(SearchQueryError):
        search.search(planted, "matcha", 0, catch_up=False)


def test_non_ascii_search(planted: Store) -> None:
    search.follower(planted).catch_up()

    def found(query: str) -> set[str]:
        return {h.kind for h in search.search(planted, query, catch_up=False)}

    assert "text" in found("cafe")  # accents fold: the text says café
    assert "text" in found("CAFÉ")
    assert "text" in found("naive")
    assert "text" in found("strasse")
    assert "text" in found("東京")  # inside unspaced CJK text
    assert "text" in found("タワー")
    assert "text" not in found("京東")
    hit = next(h for h in search.search(planted, "東京", catch_up=False) if h.kind == "text")
    assert "[東京]タワー" in hit.snippet
    hit = next(h for h in search.search(planted, "cafe", catch_up=False) if h.kind == "text")
    assert "[café]" in hit.snippet


alphabet = st.sampled_from("abcdeéüßxyz\u03b1\u03b2\u03b3жзк東京宇治タワー서울")
words = st.text(alphabet, min_size=1, max_size=8).filter(lambda w: bool(query.terms(w)))


@settings(SLOW, max_examples=40)
@given(phrase=st.lists(words, min_size=1, max_size=4).map(" ".join), noise=st.lists(words))
def test_a_quoted_phrase_finds_its_document(store: Store, phrase: str, noise: list[str]) -> None:
    """Scenario 19, both backends: a quoted phrase finds its planted document."""
    cid = store.service.start("planted")
    text = " ".join([*noise, phrase, *noise])
    store.service.add_user_input(cid, [UserMessage(blocks=(text,))])
    hits = search.search(store, f'"{phrase}"', limit=1000)
    assert any(h.conversation_id == cid for h in hits)


# --- the log under load, and gaps -----------------------------------------------------------------


class Seeing(SearchIndex):
    """The search index, remembering every notification id it processed."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.seen: list[int] = []

    def process(self, cursor: Any, events: Sequence[Positioned]) -> int:
        self.seen.extend(position for position, _ in events)
        return super().process(cursor, events)


def test_writers_and_a_following_worker(store_url: str) -> None:
    """Scenario 4 in small (threads, both backends): the ids the following worker processed equal
    the final log, none skipped or repeated."""
    writers, rounds = 4, 25
    with open_store(store_url) as store:
        url = _url_of(store)
        index = Seeing(store.recorder)
        follower = Follower(store.recorder, index, batch_size=50)
        stop = threading.Event()
        worker = threading.Thread(target=follower.follow, args=(stop,), kwargs={"interval": 0.02})
        worker.start()

        def write(n: int) -> None:
            with open_store(url) as own:
                w = Writer(own)
                w.start(1)
                for i in range(rounds):
                    w.response(0, f"{WORDS[i % len(WORDS)]} writer{n}", tool=i % 5 == 0)

        threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        deadline = time.monotonic() + 30
        while follower.lag() and time.monotonic() < deadline:
            time.sleep(0.02)
        stop.set()
        worker.join(timeout=30)
        assert not worker.is_alive()
        events = log_events(store)
        assert index.seen == [position for position, _ in events]  # none skipped or repeated
        assert index_rows(store) == model(events)
        for n in range(writers):
            assert len(search.search(store, f"writer{n}", limit=1000)) > rounds


def test_a_rolled_back_append_is_passed_over(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario 5, both backends: after a rolled-back append the follower neither stalls nor skips
    the later event, and logs the gap on PostgreSQL (on SQLite a rolled-back append consumes no
    id: ids are max(id) + 1 under the write lock, so there is no gap to report)."""
    with open_store(store_url) as store:
        writer = Writer(store)
        writer.start(1)
        follower = search.follower(store)
        follower.catch_up()
        writer.rolled_back(0, "lost race")
        writer.user(0, "after the gap")
        with caplog.at_level(logging.WARNING, logger="convstore"):
            report = follower.catch_up()
        assert search.search(store, '"after the gap"')
        assert not search.search(store, '"never stored"')
        if store_url.startswith("postgresql"):
            assert report.gaps >= 1
            assert "missing" in caplog.text and "lost race" not in caplog.text
        else:
            assert report.gaps == 0  # SQLite assigns max(id) + 1 under its write lock


@pytest.mark.postgres
def test_an_open_transaction_holds_the_follower_back_then_leaves_a_gap(
    postgres_url: str,
) -> None:
    """Scenario 5 on PostgreSQL only (SQLite has no id drawn by an uncommitted writer): an open
    transaction holding an id holds the follower back, never past it; once rolled back the gap is
    passed over."""
    import psycopg

    with open_store(postgres_url) as store:
        writer = Writer(store)
        writer.start(1)
        follower = search.follower(store)
        follower.catch_up()
        location: Any = store.location
        schema = location.schema
        pending = psycopg.connect(location.dsn)
        try:
            # An append that drew its id and holds the events lock, not yet committed.
            pending.execute(
                f'INSERT INTO "{schema}".events (originator_id, originator_version, topic, state)'
                " VALUES (%s, 1, 1, %s)",
                (uuid.uuid4(), b"{}"),
            )
            pending.execute(f'LOCK TABLE "{schema}".events IN EXCLUSIVE MODE')
            before = follower.position()
            assert follower.catch_up().events == 0
            assert follower.position() == before
            done = threading.Event()

            def later() -> None:
                writer.user(0, "committed after the rollback")
                done.set()

            appender = threading.Thread(target=later)
            appender.start()
            time.sleep(0.2)
            assert not done.is_set()  # writers queue behind the open transaction
            pending.rollback()
            appender.join(timeout=10)
            assert done.is_set()
        finally:
            pending.close()
        report = follower.catch_up()
        assert report.gaps == 1
        assert search.search(store, '"committed after the rollback"')


@pytest.mark.postgres
def test_a_subscription_overtaken_by_another_worker_applies_nothing_twice(
    postgres_url: str,
) -> None:
    """RELIABILITY 6: a following worker whose subscription began before another worker
    processed its notifications gets a conflict for them, never their rows a second time
    (it used to read the position after subscribing and apply the older notifications
    after it: a duplicate key that ended the worker)."""
    with open_store(postgres_url) as store:
        writer = Writer(store)
        writer.start(1)
        for i in range(6):
            writer.user(0, f"{WORDS[i]} overtaken")
        late = search.follower(store)
        late.setup()
        subscription = store.recorder.subscribe(gt=None)  # subscribed from the start…
        search.follower(store).catch_up()  # …when another worker processes everything
        late._follow_subscription(subscription, threading.Event(), 0.05, None, after=None)
        assert index_rows(store) == model(log_events(store))
        assert late.lag() == 0


# --- the commands ---------------------------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_search_reindex_project_commands(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_store(store_url) as store:
        writer = Writer(store)
        writer.start(1)
        writer.user(0, "matcha \x1b]0;pwned\x07 with \x1b[31mred\x1b[0m koicha \u202e evil")
        cid = str(writer.conversations[0])
    code, out, err = _cli(capsys, "--db", store_url, "search", "koicha")
    assert code == 0, err
    assert cid in out and "turn-1" in out and "v3" in out and "user" in out
    assert "[koicha]" in out and "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    code, out, _ = _cli(capsys, "--db", store_url, "search", '"pwned with"', "--json")
    assert code == 0
    (hit,) = json.loads(out)
    assert hit["conversation_id"] == cid and hit["version"] == 3 and hit["kind"] == "user"
    assert "\x1b" not in out  # escaped inside the JSON string
    code, out, err = _cli(capsys, "--db", store_url, "search", "nothing-like-this")
    assert code == 0 and out == "" and "no matches" in err
    code, _, err = _cli(capsys, "--db", store_url, "search", "--", "-matcha")
    assert code == 2 and "nothing to search for" in err
    code, out, _ = _cli(capsys, "--db", store_url, "reindex", "--json")
    assert code == 0
    assert json.loads(out)["events"] == json.loads(out)["position"]
    code, out, _ = _cli(capsys, "--db", store_url, "project")
    assert code == 0 and out.startswith("search: 0 events")


def test_search_without_catch_up_reads_the_index_as_it_stands(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_store(store_url) as store:
        writer = Writer(store)
        writer.start(1)
        writer.user(0, "gyokuro first")
        code, out, err = _cli(capsys, "--db", store_url, "search", "gyokuro")
        assert code == 0 and "user" in out, err
        writer.user(0, "sencha later")
        head = store.recorder.max_notification_id()
        code, out, err = _cli(capsys, "--db", store_url, "search", "sencha", "--no-catch-up")
        assert code == 0 and out == ""
        assert "events behind the log" in err and "no matches" in err
        assert search.follower(store).position() != head  # nothing was indexed
        code, out, err = _cli(capsys, "--db", store_url, "search", "sencha")
        assert code == 0 and "user" in out and "behind" not in err
        assert search.follower(store).position() == head


def test_project_follow_runs_as_a_worker_until_interrupted(store_url: str) -> None:
    import signal

    with open_store(store_url) as store:
        writer = Writer(store)
        writer.start(1)
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "convstore.adapters.cli",
                "--db",
                store_url,
                "project",
                "--follow",
                "--interval",
                "0.05",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert worker.stdout is not None
            first = json.loads(worker.stdout.readline())
            assert first["position"] == store.recorder.max_notification_id()
            writer.user(0, "followed by the worker")
            second = json.loads(worker.stdout.readline())
            assert second["rows"] == 1
            assert search.search(store, '"followed by the worker"', catch_up=False)
            worker.send_signal(signal.SIGINT)
            assert worker.wait(timeout=20) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


def test_convstore_error_for_bad_limit(planted: Store) -> None:
    with pytest.raises(ConvstoreError):
        search.search(planted, "matcha", search.MAX_LIMIT + 1)


def test_the_ranked_query_is_planned_for_each_search(postgres_url: str) -> None:
    """A long-lived reader's searches are never a prepared statement: psycopg prepares a
    query after five runs, and PostgreSQL's generic plan for it, made while the index was
    small (a sequential scan), was kept as the table grew: 19x slower at a million events
    (`make scale`). Planned per search, the GIN index is used whatever the size."""
    with open_store(postgres_url) as store:
        writer = Writer(store)
        writer.start(1)
        writer.user(0, "genmaicha planned")
        for _ in range(12):
            assert search.search(store, "genmaicha")
        with store.recorder.view_reader() as cursor:
            prepared = cursor.execute(
                "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                ("%ts_rank%",),
            ).fetchone()
        assert prepared == (0,)
