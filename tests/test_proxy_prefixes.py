"""The prefix index that threads requests (`adapters.proxy.prefixes`): what it costs,
which conversations it holds, and that it is the same however it was built.

- Placing a request reads the events recorded since the index last caught up, once each,
  and the conversation it continues once (to confirm it): counted on the store's
  recorder, exchange by exchange, the index's reads stay the events each exchange wrote,
  however long the conversation grows.
- The index follows the store's log, so a conversation `ingest` or `ask` recorded is
  found by a proxy request continuing it, with no pin.
- A conversation is indexed under the provider that answered it: the same messages sent
  to another provider start a conversation of their own.
- A response completed by re-sending (its next attempt) is indexed as it reads: the next
  request, carrying the whole answer, continues it.
- An index that cannot catch up (the database busy) is logged and placing goes on; two
  indexes catching up at once (two processes) fold each event once.
- Built batch by batch as requests arrive (continuing, forking, starting anew) or rebuilt
  from the log in one batch, the index holds the same rows (hypothesis).

The tests taking a `store` run on both backends; the busy one and the hypothesis one
run on SQLite (they hold its lock, or read the index's tables, themselves).
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore.adapters import cli
from convstore.adapters.proxy import recording_transport
from convstore.adapters.proxy.prefixes import PrefixIndex
from convstore.adapters.proxy.threads import place
from convstore.adapters.recording import jobs
from convstore.adapters.wire.providers import adapter
from convstore.domain.attempts import reading
from convstore.domain.events import (
    AssistantText,
    Event,
    ResponseEnded,
    ResponseStarted,
    UserMessage,
)
from convstore.storage import Store, open_store
from tests.proxying import running_proxy
from tests.replay_server import ReplayServer, Reply
from tests.test_proxy import _reply
from tests.test_proxy_threads import _completed, _post, _sequence

KEY = "sk-ant-prefixes-test-key"
MODEL = "claude-sonnet-4-5"


def _message(n: int, text: str) -> Reply:
    """A non-streamed Anthropic answer ending its turn with `text`."""
    body = {
        "id": f"msg_prefixes_{n}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 3},
    }
    return Reply(body=json.dumps(body).encode(), framing="length")


def _conversations(store: Store) -> list[list[Event]]:
    return [store.service.history(s.id) for s in store.service.list(limit=1000)]


def _responses(events: list[Event]) -> int:
    return sum(isinstance(e, ResponseStarted) for e in events)


@dataclass
class _Reads:
    """Rows the store's recorder returned: a conversation's events (`select_states`) and
    the notification log (`select_log`), counted as they are read."""

    states: int = 0
    log: int = 0
    calls: list[str] = field(default_factory=list)

    def watch(self, store: Store) -> None:
        recorder = store.recorder
        select_states, select_log = recorder.select_states, recorder.select_log

        def states(*args: Any, **kwargs: Any) -> list[tuple[int, bytes]]:
            rows = select_states(*args, **kwargs)
            self.states += len(rows)
            return rows

        def log(*args: Any, **kwargs: Any) -> list[tuple[int, bytes]]:
            rows = select_log(*args, **kwargs)
            self.log += len(rows)
            return rows

        recorder.select_states = states  # type: ignore[method-assign]
        recorder.select_log = log  # type: ignore[method-assign]


def _drained(recording: Any) -> None:
    """Wait for the recordings of a transport or a running proxy to commit."""
    deadline = time.monotonic() + 30
    while recording.recorder.pending:
        assert time.monotonic() < deadline, "the recordings did not commit"
        time.sleep(0.01)


def test_placing_reads_each_new_event_once_and_the_conversation_once(store: Store) -> None:
    turns = 16
    reads = _Reads()
    reads.watch(store)
    seen: list[tuple[int, int, int, int]] = []  # (version before, after, log rows, states)
    with ReplayServer() as upstream:
        upstream.enqueue(*(_message(n, f"answer {n} " + "x" * 40) for n in range(turns)))
        transport = recording_transport(store, httpx_module=httpx2)
        with httpx2.Client(transport=transport) as http:
            client = anthropic.Anthropic(
                api_key=KEY, base_url=upstream.url, http_client=http, max_retries=0
            )
            messages: list[dict[str, Any]] = []
            for n in range(turns):
                [before] = [s.id for s in store.service.list()] or [None]
                version = 0 if before is None else store.service.get(before).version
                reads.states = reads.log = 0
                messages.append({"role": "user", "content": f"question {n}"})
                answer = client.messages.create(model=MODEL, max_tokens=64, messages=messages)
                _drained(transport)
                messages.append({"role": "assistant", "content": answer.content[0].text})
                [conversation] = [s.id for s in store.service.list()]
                after = store.service.get(conversation).version
                seen.append((version, after, reads.log, reads.states))
    print(seen)
    [events] = _conversations(store)
    assert _responses(events) == turns
    for version, after, log, states in seen:
        assert log == after - version  # the index read what this exchange wrote, once
        assert states <= after  # the conversation at most once
    assert len({log for _, _, log, _ in seen[1:]}) == 1  # flat in the conversation's length


def test_a_conversation_ingest_recorded_is_continued_without_a_pin(
    store: Store, tmp_path: Path
) -> None:
    first, second = _sequence("anthropic", "thinking_tool_roundtrip")
    body = tmp_path / "first.sse"
    body.write_bytes(first.body)
    ingested = jobs.ingest(store.service, "anthropic", [jobs.Exchange(body, request=first.request)])
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(_reply(second))
        httpx.post(
            proxy.url + "/v1/messages",
            content=second.request,
            headers={"content-type": "application/json", "x-api-key": KEY},
            timeout=30,
        )
    [conversation] = store.service.list()
    assert conversation.id == ingested.conversation_id
    assert _responses(store.service.history(conversation.id)) == 2


def test_a_conversation_ask_recorded_is_continued_through_the_proxy(
    store: Store, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    url = store_url
    with ReplayServer() as upstream:
        upstream.enqueue(_message(1, "Byōdō-in, then tea on Ujibashi street."))
        base = f"providers.anthropic.base_url={upstream.url}"
        code = cli.main(
            ["--db", url, "ask", "Where in Uji?", "--quiet", "--model", MODEL, "--cfg", base]
        )
        assert code == 0
        with running_proxy(store, upstream.url) as proxy:
            upstream.enqueue(_message(2, "Mimurotoji."))
            client = anthropic.Anthropic(api_key=KEY, base_url=proxy.url, max_retries=0)
            client.messages.create(
                model=MODEL,
                max_tokens=64,
                messages=[
                    {"role": "user", "content": "Where in Uji?"},
                    {"role": "assistant", "content": "Byōdō-in, then tea on Ujibashi street."},
                    {"role": "user", "content": "And after that?"},
                ],
            )
    [events] = _conversations(store)
    assert _responses(events) == 2
    assert [e.blocks[0] for e in events if isinstance(e, UserMessage)] == [
        "Where in Uji?",
        "And after that?",
    ]


def test_a_conversation_is_continued_only_by_the_provider_that_answered_it(store: Store) -> None:
    """The same messages, sent on to OpenAI, start a conversation of their own; sent on to
    Anthropic, they continue it."""
    history = [
        {"role": "user", "content": "Is Uji far from Kyoto?"},
        {"role": "assistant", "content": "Twenty minutes by train."},
    ]
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(
            _message(1, "Twenty minutes by train."),
            _completed("resp_prefixes_1", "The JR Nara line.", None),
            _message(2, "The JR Nara line."),
        )
        claude = anthropic.Anthropic(api_key=KEY, base_url=proxy.url, max_retries=0)
        claude.messages.create(model=MODEL, max_tokens=64, messages=history[:1])
        gpt = openai.OpenAI(api_key=KEY, base_url=proxy.url + "/v1", max_retries=0)
        question = {"role": "user", "content": "Which line?"}
        gpt.responses.create(model="gpt-5.1", input=[*history, question])  # type: ignore[list-item]
        claude.messages.create(model=MODEL, max_tokens=64, messages=[*history, question])  # type: ignore[list-item]
    by_provider = {
        tuple(e.provider for e in events if isinstance(e, ResponseStarted)): events
        for events in _conversations(store)
    }
    # OpenAI's: the request's history (its assistant message recorded as a response), then
    # the answer; Anthropic's: its two answers
    assert set(by_provider) == {("anthropic", "anthropic"), ("openai", "openai")}
    assert sum(isinstance(e, UserMessage) for e in by_provider["openai", "openai"]) == 2


def test_the_pin_header_wins_over_the_most_recent_conversation(store: Store) -> None:
    """Two conversations hold the same first exchange; the request continues the more
    recent unless the header pins the older."""
    ask = [{"role": "user", "content": "A haiku about tea?"}]
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(*(_message(n, "Steam over green cups") for n in range(4)))
        claude = anthropic.Anthropic(api_key=KEY, base_url=proxy.url, max_retries=0)
        claude.messages.create(model=MODEL, max_tokens=64, messages=ask)
        claude.messages.create(model=MODEL, max_tokens=64, messages=ask)
        _drained(proxy)
        older, newer = (s.id for s in store.service.list())
        more = [*ask, {"role": "assistant", "content": "Steam over green cups"}]
        claude.messages.create(
            model=MODEL,
            max_tokens=64,
            messages=[*more, {"role": "user", "content": "Another?"}],  # type: ignore[list-item]
            extra_headers={"X-Convstore-Conversation": str(older)},
        )
        claude.messages.create(
            model=MODEL,
            max_tokens=64,
            messages=[*more, {"role": "user", "content": "One more?"}],  # type: ignore[list-item]
        )
        assert all("x-convstore-conversation" not in r.headers for r in upstream.requests)
    assert len(store.service.list()) == 2
    assert _responses(store.service.history(older)) == 2
    assert _responses(store.service.history(newer)) == 2
    [pinned] = [
        e.blocks[0] for e in store.service.history(older)[-8:] if isinstance(e, UserMessage)
    ]
    assert pinned == "Another?"


# --- incremental equals rebuilt (hypothesis) --------------------------------------------------

_Step = tuple[int, int, str, str]
"""(which earlier request to go on from, how many of its exchanges to keep, question, answer)"""

_STEPS = st.lists(
    st.tuples(
        st.integers(0, 6),
        st.integers(0, 4),
        st.sampled_from(["tea?", "and matcha?", "where?", "when?"]),
        st.sampled_from(["yes", "Uji", "in May", "yes"]),
    ),
    min_size=1,
    max_size=8,
)


def _record(
    store: Store, index: PrefixIndex, messages: list[dict[str, str]], n: int, text: str
) -> None:
    """One request placed and recorded as the proxy records it (no HTTP in between)."""
    provider = adapter("anthropic")
    request = json.dumps({"model": MODEL, "max_tokens": 64, "messages": messages}).encode()
    answer = _message(n, text).body
    assert isinstance(answer, bytes)
    placed = place(store.service, index, "anthropic", request, pinned=None)
    store.service.ingest_exchange(
        placed.conversation_id,
        placed.history,
        provider.decode(answer, request, 200),
        at_version=placed.version,
        title=placed.title,
    )


def _rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(
            "SELECT digest, opaque, originator_id, version FROM prefixes ORDER BY position"
        ).fetchall()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_STEPS)
def test_the_index_built_as_requests_arrive_equals_one_rebuilt_from_the_log(
    steps: list[_Step],
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "store.db"
        with open_store(f"sqlite:///{path}") as opened:
            index = PrefixIndex(opened)
            sent: list[list[dict[str, str]]] = []
            for n, (base, keep, question, text) in enumerate(steps):
                start = sent[base % len(sent)] if sent else []
                messages = [*start[: 2 * min(keep, len(start) // 2)]]
                messages.append({"role": "user", "content": question})
                _record(opened, index, messages, n, text)
                sent.append([*messages, {"role": "assistant", "content": text}])
            index.catch_up()
            live = _rows(path)
            with sqlite3.connect(path) as db:
                heads = set(db.execute("SELECT * FROM prefix_heads").fetchall())
                db.execute("DELETE FROM prefixes")
                db.execute("DELETE FROM prefix_heads")
                db.execute("DELETE FROM tracking WHERE application_name = 'prefixes'")
            assert PrefixIndex(opened).catch_up() > 0
            assert _rows(path) == live
            with sqlite3.connect(path) as db:
                rebuilt = set(db.execute("SELECT * FROM prefix_heads").fetchall())
            assert rebuilt <= heads  # each head a rebuild keeps, the live index kept alike
            ended = [
                e
                for s in opened.service.list(limit=1000)
                for e in opened.service.events(s.id)
                if isinstance(e, ResponseEnded)
            ]
            assert len(live) == len(ended)  # a row at each response's end, a fork's own


def test_a_pin_goes_on_across_providers(store: Store) -> None:
    """The index keeps providers apart; the header is the way to continue a conversation
    Anthropic answered with OpenAI."""
    history = [
        {"role": "user", "content": "Is Uji far from Kyoto?"},
        {"role": "assistant", "content": "Twenty minutes by train."},
    ]
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(
            _message(1, "Twenty minutes by train."),
            _completed("resp_prefixes_pinned", "The JR Nara line.", None),
        )
        claude = anthropic.Anthropic(api_key=KEY, base_url=proxy.url, max_retries=0)
        claude.messages.create(model=MODEL, max_tokens=64, messages=history[:1])
        _drained(proxy)
        [conversation] = [s.id for s in store.service.list()]
        gpt = openai.OpenAI(api_key=KEY, base_url=proxy.url + "/v1", max_retries=0)
        gpt.responses.create(
            model="gpt-5.1",
            input=[*history, {"role": "user", "content": "Which line?"}],  # type: ignore[list-item]
            extra_headers={"X-Convstore-Conversation": str(conversation)},
        )
    [events] = _conversations(store)
    assert [e.provider for e in events if isinstance(e, ResponseStarted)] == [
        "anthropic",
        "openai",
    ]


def test_a_response_completed_by_resending_is_continued_as_it_reads(
    store: Store, tmp_path: Path
) -> None:
    """A stream cut off, then completed by ingesting the whole capture again (the next
    attempt, read in the first's place): the next request, carrying the whole answer,
    continues the conversation."""
    first, second, *_ = _sequence("anthropic", "mcp_connector")
    events = [e for e in first.body.split(b"\n\n") if e.strip()]
    cut, whole = tmp_path / "cut.sse", tmp_path / "whole.sse"
    cut.write_bytes(b"\n\n".join(events[: len(events) * 8 // 10]) + b"\n\n")
    whole.write_bytes(first.body)
    for capture in (cut, whole):
        jobs.ingest(store.service, "anthropic", [jobs.Exchange(capture, request=first.request)])
    [ingested] = store.service.list()
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        upstream.enqueue(_reply(second))
        _post(proxy.url, second, "anthropic")  # (the SDK's `create` takes no `mcp_servers`)
    [conversation] = store.service.list()
    assert conversation.id == ingested.id
    started = [e for e in store.service.history(conversation.id) if isinstance(e, ResponseStarted)]
    assert [e.attempt for e in started] == [1, 2, 1]
    cut_text = [e for e in store.service.history(conversation.id) if isinstance(e, AssistantText)]
    assert any(not e.attributions_complete for e in cut_text)  # the cut copy held text


def test_an_index_that_cannot_catch_up_is_logged_and_placing_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """While another writer holds the database past the busy timeout, the index stays as
    far as it got (a warning, no content) and the request is still placed; it catches up
    once the database is free."""
    path = tmp_path / "store.db"
    with open_store(f"sqlite:///{path}") as opened:
        _record(opened, PrefixIndex(opened), [{"role": "user", "content": "tea?"}], 0, "yes")
        opened.recorder.busy_timeout_ms = 50  # type: ignore[attr-defined]
        index = PrefixIndex(opened)
        blocker = sqlite3.connect(path)
        blocker.execute("BEGIN IMMEDIATE")
        going_on = [
            {"role": "user", "content": "tea?"},
            {"role": "assistant", "content": "yes"},
            {"role": "user", "content": "matcha?"},
        ]
        request = json.dumps({"model": MODEL, "max_tokens": 64, "messages": going_on}).encode()
        try:
            assert index.catch_up() == 0
            placed = place(opened.service, index, "anthropic", request, pinned=None)
            assert placed.how == "new"  # nothing indexed yet: recorded all the same
        finally:
            blocker.rollback()
            blocker.close()
        assert "the prefix index did not catch up (OperationalError)" in caplog.text
        assert "tea" not in caplog.text
        placed = place(opened.service, index, "anthropic", request, pinned=None)
        assert placed.how == "continued"


def test_two_indexes_catching_up_at_once_fold_each_event_once(store_url: str) -> None:
    """Two processes' indexes (two stores open on one database) catch up while a third
    records: each response's end is indexed once, none twice, none missed."""
    stop = threading.Event()
    with open_store(store_url) as writer, open_store(store_url) as a, open_store(store_url) as b:
        indexes = [PrefixIndex(a), PrefixIndex(b)]
        folded = [0, 0]

        def follow(n: int) -> None:
            while not stop.is_set():
                folded[n] += indexes[n].catch_up()

        threads = [threading.Thread(target=follow, args=(n,)) for n in (0, 1)]
        for thread in threads:
            thread.start()
        try:
            conversation = None
            messages: list[dict[str, str]] = []
            for n in range(12):
                messages.append({"role": "user", "content": f"question {n}"})
                request = json.dumps({"model": MODEL, "max_tokens": 64, "messages": messages})
                answer = _message(n, f"answer {n}").body
                assert isinstance(answer, bytes)
                history = adapter("anthropic").need_history()
                read = [] if conversation is None else writer.service.history(conversation)
                conversation, _ = writer.service.ingest_exchange(
                    conversation,
                    [(m.role, m.drafts) for m in history(reading(read), request.encode())],
                    adapter("anthropic").decode(answer, request.encode(), 200),
                    at_version=read[-1].originator_version if read else 0,
                )
                messages.append({"role": "assistant", "content": f"answer {n}"})
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        folded = [folded[n] + indexes[n].catch_up() for n in (0, 1)]
        assert conversation is not None
        log = list(writer.service.events(conversation))
        assert sum(folded) == len(log)  # each event folded by one index, once
        ended = [e.originator_version for e in log if isinstance(e, ResponseEnded)]
        with writer.recorder.view_reader() as cursor:
            cursor.execute("SELECT originator_id, version FROM prefixes")
            rows = sorted(version for _, version in cursor.fetchall())
        assert rows == ended


def test_on_an_encrypted_store_the_prefix_key_lives_with_the_keys(tmp_path: Path) -> None:
    """Threading works on an encrypted store, and its HMAC key is derived from the key
    store's digest key: the events' database holds none a reader could test a guess with."""
    url = f"sqlite:///{tmp_path / 'encrypted.db'}"
    with open_store(url, encrypt=True) as store, ReplayServer() as upstream:
        upstream.enqueue(*(_message(n, f"answer {n}") for n in range(3)))
        transport = recording_transport(store, httpx_module=httpx2)
        with httpx2.Client(transport=transport) as http:
            client = anthropic.Anthropic(
                api_key=KEY, base_url=upstream.url, http_client=http, max_retries=0
            )
            messages: list[dict[str, Any]] = []
            for n in range(3):
                messages.append({"role": "user", "content": f"question {n}"})
                answer = client.messages.create(model=MODEL, max_tokens=64, messages=messages)
                _drained(transport)
                messages.append({"role": "assistant", "content": answer.content[0].text})
        [conversation] = store.service.list()
        assert _responses(store.service.history(conversation.id)) == 3
    with sqlite3.connect(tmp_path / "encrypted.db") as db:
        assert db.execute("SELECT count(*) FROM prefix_key").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM prefixes").fetchone()[0] >= 3
