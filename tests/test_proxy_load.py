"""The proxy and the async transport under load: 50 concurrent streams, each its own
question and response, are all recorded once, none lost or duplicated, every client
getting its stream byte for byte; and a `kill -9` of `convstore proxy` in the middle of
such a load leaves a store that passes SQLite's integrity check and `convstore verify`,
each response stored at most once (soak: the kill loop)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from convstore.adapters.proxy import recording_transport
from convstore.domain.events import ResponseEnded, ResponseStarted
from convstore.storage import Store, open_store
from tests.proxying import capture, running_proxy
from tests.replay_server import ReplayServer, Reply
from tests.sdk_readers import with_event_names

STREAMS = 50
BASE = capture("anthropic/thinking_tool_roundtrip/1")
BASE_ID = json.loads(with_event_names(BASE.body).split(b"\n\n")[0].split(b"data: ", 1)[1])[
    "message"
]["id"].encode()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as opened:
        yield opened


def _body(n: int) -> bytes:
    """The capture's stream, its response id made the n-th's own."""
    return with_event_names(BASE.body).replace(BASE_ID, b"%s_load_%d" % (BASE_ID, n))


def _request(n: int) -> dict[str, object]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": f"Question number {n}"}],
    }


async def _streams(url: str, client: httpx.AsyncClient) -> dict[int, bytes]:
    async def one(n: int) -> tuple[int, bytes]:
        async with client.stream("POST", url + "/v1/messages", json=_request(n)) as response:
            return n, b"".join([chunk async for chunk in response.aiter_raw()])

    return dict(await asyncio.gather(*(one(n) for n in range(STREAMS))))


def _enqueue(upstream: ReplayServer) -> None:
    upstream.enqueue(
        *(
            Reply(body=_body(n), content_type="text/event-stream", pause=0.002)
            for n in range(STREAMS)
        )
    )


def _check_recorded(store: Store, got: dict[int, bytes]) -> None:
    sent = {_body(n) for n in range(STREAMS)}
    assert set(got.values()) == sent  # every client its own stream, byte for byte
    summaries = store.service.list(limit=1000)
    assert len(summaries) == STREAMS
    ids = []
    for summary in summaries:
        events = list(store.service.events(summary.id))
        [started] = [e for e in events if isinstance(e, ResponseStarted)]
        [end] = [e for e in events if isinstance(e, ResponseEnded)]
        assert end.state == "completed"
        ids.append(started.response_id)
    assert sorted(ids) == sorted(f"{BASE_ID.decode()}_load_{n}" for n in range(STREAMS))


def test_fifty_concurrent_streams_through_the_proxy_are_all_recorded_once(store: Store) -> None:
    with ReplayServer() as upstream, running_proxy(store, upstream.url) as proxy:
        _enqueue(upstream)

        async def run() -> dict[int, bytes]:
            limits = httpx.Limits(max_connections=STREAMS)
            async with httpx.AsyncClient(timeout=60, limits=limits) as client:
                return await _streams(proxy.url, client)

        got = asyncio.run(run())
    _check_recorded(store, got)


def test_fifty_concurrent_streams_through_the_async_transport_are_all_recorded_once(
    store: Store,
) -> None:
    with ReplayServer() as upstream:
        _enqueue(upstream)
        transport = recording_transport(store, asynchronous=True)

        async def run() -> dict[int, bytes]:
            async with httpx.AsyncClient(transport=transport, timeout=60) as client:
                return await _streams(upstream.url, client)

        got = asyncio.run(run())
        assert transport.recorder.close() == 0
    _check_recorded(store, got)


# --- kill -9 ----------------------------------------------------------------------------


def _proxy(db: Path, upstream: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "convstore.adapters.cli",
            "--db",
            f"sqlite:///{db}",
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            f"anthropic={upstream}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("convstore proxy listening on "), line
    return process, line.split()[-1]


def _load(url: str, stop: threading.Event, first: int) -> threading.Thread:
    """Clients streaming questions `first`, `first + 1`, … until `stop` (or the proxy
    dies), 10 at a time."""

    def client(lane: int) -> None:
        n = first + lane
        with httpx.Client(timeout=10) as http:
            while not stop.is_set():
                try:
                    with http.stream("POST", url + "/v1/messages", json=_request(n)) as answer:
                        for _ in answer.iter_raw():
                            pass
                except httpx.HTTPError:
                    return
                n += 10

    lanes = [threading.Thread(target=client, args=(lane,), daemon=True) for lane in range(10)]
    for lane in lanes:
        lane.start()

    def joined() -> None:
        for lane in lanes:
            lane.join()

    waiter = threading.Thread(target=joined, daemon=True)
    waiter.start()
    return waiter


def _verified(db: Path) -> int:
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    verified = subprocess.run(
        [sys.executable, "-m", "convstore.adapters.cli", "--db", f"sqlite:///{db}", "verify"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    with open_store(f"sqlite:///{db}") as store:
        ids = [
            e.response_id
            for s in store.service.list(limit=100_000)
            for e in store.service.events(s.id)
            if isinstance(e, ResponseStarted)
        ]
    assert len(ids) == len(set(ids))  # nothing recorded twice
    return len(ids)


def _kill_under_load(db: Path, trial: int, seconds: float) -> int:
    """One kill; how many responses the store then holds."""
    with ReplayServer() as upstream:
        upstream.enqueue(
            *(
                Reply(body=_body(trial * 10_000 + n), content_type="text/event-stream", pause=0.003)
                for n in range(2000)
            )
        )
        process, url = _proxy(db, upstream.url)
        stop = threading.Event()
        load = _load(url, stop, 0)
        time.sleep(seconds)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        stop.set()
        load.join(timeout=30)
    return _verified(db)


def test_kill_9_under_load_leaves_a_store_that_verifies(tmp_path: Path) -> None:
    assert _kill_under_load(tmp_path / "store.db", 0, 1.5) > 0


@pytest.mark.soak
def test_soak_kill_9_under_load_again_and_again(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    for trial in range(8):
        _kill_under_load(db, trial, 0.5 + trial * 0.3)
