"""Figure 13: the web viewer's pages, rendered server-side, against the same reading drawn
as terminal text in the same process and run.

A SQLite store of 10,000 conversations (`--quick`: 200), each one seeded turn of
`workload.turn` (a question, a response with reasoning, a hosted web search, cited text
and a tool call, the tool's result, the final answer), and one conversation of 200 such
turns. The viewer's ASGI app is called in process through httpx's ASGI transport (its
Host rule, headers, routing, threadpool hop and template included; no socket), over the
store opened read-only, as `convstore serve` opens it.

- 13a: the list page (`/`, the newest 50 of 10,000) against `convstore list`'s work: the
  same page of summaries, the count, and the terminal lines (`values.summary_line`),
  sanitized.
- 13b: a 200-turn transcript (`/c/{id}`) against `convstore show`'s work: the same
  history folded, presented (`presentation.present` with its chain status) and drawn as
  terminal lines, sanitized. Its turns are `workload.turn`'s: 23 events each, two
  responses with reasoning, a hosted search, three cited passages and a tool call.
- 13c: the same for a 200-turn plain chat (a question, an answer of one text: 6 events a
  turn), the other end of what a transcript holds.

Each side runs `requests` times per round, rounds interleaved; the ratio is the median of
ours / baseline (time: lower is better; informative, no target). The issue's goal is
absolute: p95 ≤ 50 ms server-side for both pages; the note gives our p50 and p95.
"""

from __future__ import annotations

import asyncio
import gc
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import msgspec

from benchmarks import workload
from benchmarks.common import Figure, Sizes, interleave
from convstore.adapters.terminal import render, transcript, values
from convstore.adapters.web.app import viewer_app
from convstore.adapters.wire.providers import read_payload
from convstore.domain import (
    AssistantText,
    ConversationId,
    Event,
    TurnEnded,
    TurnId,
    TurnStarted,
    UserMessage,
)
from convstore.projections import chain, portable, presentation
from convstore.storage import Store, open_store

HOST = "viewer.bench"
LONG_TURNS = 200
GOAL_MS = 50.0


def chat_turn(rng: random.Random) -> list[Event]:
    """A plain chat turn: a question and an answer of one text, nothing else."""
    response = workload.response(rng, tool_call=False)
    started, ended = response[0], response[-1]
    answer = [e for e in response if isinstance(e, AssistantText)][-1]
    turn = TurnId(f"turn_{rng.getrandbits(64):016x}")
    return [
        TurnStarted(turn_id=turn),
        UserMessage(blocks=(workload.paragraph(rng, rng.randint(1, 3)),)),
        started,
        msgspec.structs.replace(answer, attributions=()),
        ended,
        TurnEnded(turn_id=turn),
    ]


def build_store(path: Path, conversations: int) -> tuple[ConversationId, ConversationId]:
    """`conversations` one-turn conversations, one of `LONG_TURNS` turns and one of as many
    chat turns; the long ones' ids."""
    with open_store(f"sqlite:///{path}") as store:
        turns = workload.turns(seed=13)
        for seed in range(conversations):
            conversation = workload.conversation(workload.conversation_id(seed), f"chat {seed}")
            conversation.record_all(next(turns))
            store.repository.save(conversation)
        long_id = workload.conversation_id(conversations)
        conversation = workload.conversation(long_id, f"{LONG_TURNS} turns")
        for _ in range(LONG_TURNS):
            conversation.record_all(next(turns))
            store.repository.save(conversation)
        chat_id = workload.conversation_id(conversations + 1)
        conversation = workload.conversation(chat_id, f"{LONG_TURNS} chat turns")
        rng = random.Random(13)
        for _ in range(LONG_TURNS):
            conversation.record_all(chat_turn(rng))
            store.repository.save(conversation)
    return long_id, chat_id


class _Viewer:
    """The viewer's app over a read-only store, called in process."""

    def __init__(self, store: Store) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=viewer_app(store, hosts=frozenset({HOST}))),
            base_url=f"http://{HOST}",
        )

    def get(self, path: str) -> str:
        page = self.loop.run_until_complete(self.client.get(path))
        assert page.status_code == 200, (path, page.status_code)
        return page.text

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


def _terminal_list(store: Store) -> str:
    service = store.service
    rows = service.list(offset=0, limit=50, newest_first=True)
    lines = [values.summary_line(row) for row in rows]
    lines.append(f"{len(rows):,} of {service.count():,} shown")
    return render.sanitize("\n".join(lines))


def _terminal_show(store: Store, conversation: ConversationId) -> str:
    events = store.service.history(conversation)
    status = chain.chain_status(store, conversation)
    view = presentation.present(portable.fold(events, read_payload), status)
    return render.sanitize("\n".join(transcript.transcript_lines(view)))


def _percentiles(call: Callable[[], object], times: int) -> tuple[float, float]:
    """p50 and p95 of `times` calls, in milliseconds, the collector on as in the server
    (which freezes what it holds at startup, as `web.server.serve` does)."""
    gc.collect()
    gc.freeze()
    seconds = []
    for _ in range(times):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    gc.unfreeze()
    cuts = statistics.quantiles(seconds, n=20)
    return statistics.median(seconds) * 1e3, cuts[18] * 1e3


def _figure(
    number: str,
    title: str,
    *,
    subject: str,
    baseline: str,
    ours: Callable[[], object],
    theirs: Callable[[], object],
    requests: int,
    rounds: int,
    note: str,
) -> Figure:
    timings = interleave(
        {"viewer": ours, "terminal": theirs}, rounds=rounds, warmup=1, number=requests
    )
    p50, p95 = _percentiles(ours, max(requests * rounds, 20))
    verdict = "meets" if p95 <= GOAL_MS else "misses"
    return Figure(
        number,
        title,
        subject,
        baseline,
        "time",
        timings.median("viewer"),
        timings.median("terminal"),
        ratio=timings.time_ratio("viewer", "terminal"),
        note=f"{note}; viewer p50 {p50:.1f} ms, p95 {p95:.1f} ms server-side ({verdict} the"
        f" goal of p95 <= {GOAL_MS:.0f} ms); median of {rounds} interleaved rounds of"
        f" {requests}",
        extra={"timings": timings.summary(), "p50_ms": p50, "p95_ms": p95},
    ).judge()


def viewer_figures(sizes: Sizes, folder: Path) -> list[Figure]:
    """Figure 13: the list page and a 200-turn transcript, against terminal text."""
    conversations = 200 if sizes.quick else 10_000
    rounds = 2 if sizes.quick else 5
    path = folder / "viewer.db"
    long_id, chat_id = build_store(path, conversations)
    listed = conversations + 2
    store = open_store(f"sqlite:///{path}", read_only=True)
    viewer = _Viewer(store)
    try:
        assert f"of {listed:,} shown" in _terminal_list(store)
        assert f"50 of {listed}" in viewer.get("/")
        return [
            _figure(
                "13a",
                f"viewer list page ({listed:,} conversations)",
                subject="GET / (the newest 50, the count, filters form) through the ASGI app",
                baseline="convstore list's work: the same page, the count, terminal lines",
                ours=lambda: viewer.get("/"),
                theirs=lambda: _terminal_list(store),
                requests=20,
                rounds=rounds,
                note=f"a read-only SQLite store of {listed:,} conversations",
            ),
            _figure(
                "13b",
                f"viewer transcript ({LONG_TURNS} turns)",
                subject=f"GET /c/ID of a {LONG_TURNS}-turn conversation through the ASGI app",
                baseline="convstore show's work: history, fold, present, chain, terminal lines",
                ours=lambda: viewer.get(f"/c/{long_id}"),
                theirs=lambda: _terminal_show(store, long_id),
                requests=3,
                rounds=rounds,
                note=f"{LONG_TURNS} turns of 23 events ({LONG_TURNS * 23 + 1:,} events)",
            ),
            _figure(
                "13c",
                f"viewer transcript ({LONG_TURNS} chat turns)",
                subject=f"GET /c/ID of a {LONG_TURNS}-turn plain chat through the ASGI app",
                baseline="convstore show's work: history, fold, present, chain, terminal lines",
                ours=lambda: viewer.get(f"/c/{chat_id}"),
                theirs=lambda: _terminal_show(store, chat_id),
                requests=5,
                rounds=rounds,
                note=f"{LONG_TURNS} turns of 6 events ({LONG_TURNS * 6 + 1:,} events)",
            ),
        ]
    finally:
        viewer.close()
        store.close()
