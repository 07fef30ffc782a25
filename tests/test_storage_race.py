"""Scenario 1 (RELIABILITY.md), racing appenders: two processes read-then-append to one
conversation, on SQLite and PostgreSQL.

Every call returns the new version it wrote or raises ConcurrencyConflict; afterwards the
versions are gapless (1 is Started, then one per success), each returned version is one
of them and none is returned twice, every event's notification id and hash is unique, and
a replay holds them all.
"""

from __future__ import annotations

import multiprocessing
import traceback
from multiprocessing.synchronize import Barrier
from typing import Any

import pytest

from convstore.domain import Conversation, ConversationId, UserMessage
from convstore.domain.errors import ConcurrencyConflict
from convstore.storage import open_store
from tests.conftest import BACKENDS

APPENDS = 1000
"""Read-then-append calls per process, as the scenario says (about 10 s per backend)."""


def _racer(
    url: str, cid: ConversationId, name: str, appends: int, *, start: Barrier, results: Any
) -> None:
    """One process: open the store, wait for the other, then append `appends` times."""
    outcome: dict[str, Any] = {"name": name, "ok": 0, "conflicts": 0, "versions": []}
    outcome["errors"] = []
    try:
        with open_store(url) as store:
            start.wait(timeout=60)
            for i in range(appends):
                try:
                    [event] = store.service.append(cid, [UserMessage(blocks=(f"{name} {i}",))])
                except ConcurrencyConflict:
                    outcome["conflicts"] += 1
                else:
                    outcome["ok"] += 1
                    outcome["versions"].append(event.originator_version)
    except BaseException:  # reported to the parent, which fails the test
        outcome["errors"].append(traceback.format_exc())
    results.put(outcome)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_two_processes_racing_on_one_conversation(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """Scenario 1: every call a new version or the typed conflict; versions 1..N, no
    duplicate event or notification id; a replay holds all N events."""
    url: str = request.getfixturevalue(f"{backend}_url")
    with open_store(url) as store:
        cid = store.service.start("raced")

    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(2), context.Queue()
    racers = [
        context.Process(
            target=_racer,
            args=(url, cid, name, APPENDS),
            kwargs={"start": start, "results": results},
        )
        for name in ("left", "right")
    ]
    for racer in racers:
        racer.start()
    outcomes = [results.get(timeout=600) for _ in racers]
    for racer in racers:
        racer.join(timeout=30)
        assert racer.exitcode == 0

    assert [o["errors"] for o in outcomes] == [[], []], "a racer failed unexpectedly"
    for outcome in outcomes:
        assert outcome["ok"] + outcome["conflicts"] == APPENDS
    successes = sum(o["ok"] for o in outcomes)
    assert successes >= APPENDS  # every conflict means the other side succeeded
    returned = sorted(v for o in outcomes for v in o["versions"])
    assert returned == list(range(2, successes + 2))  # each call's own, never shared

    with open_store(url) as store:
        events = list(store.service.events(cid))
        n = 1 + successes
        assert [e.originator_version for e in events] == list(range(1, n + 1))
        assert len({e.hash for e in events}) == n
        log = [nid for nid, _ in store.recorder.select_log(None, 10 * n)]
        assert len(log) == len(set(log)) == n  # one notification id per event
        texts = [e.blocks[0] for e in events if isinstance(e, UserMessage)]
        assert len(texts) == len(set(texts)) == successes
        replayed = store.service.get(cid)
        assert replayed.version == n
        assert replayed == Conversation.replay(cid, events)
