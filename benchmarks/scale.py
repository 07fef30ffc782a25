"""`make scale`: a million events on PostgreSQL, eight writers, the search followers running.

`python -m benchmarks.scale [--events N] [--conversations N] [--writers N] [--followers N]
[--url URL] [--keep] [--json FILE]` builds a store of `--events` events (default
1,000,000) across `--conversations` conversations (default 10,000), then checks it and
prints a table of figures. Exit status 1 when a correctness check fails; the speed
targets are reported, not asserted.

Content. The project's captures (`examples/{anthropic,openai,google}/`, every exchange
folder) are decoded once with the real decoders; each conversation then replays exchange
folders of one provider through the public service API, as an ingest would: a user
message, each response of the folder (`service.ingest`), tool results for the calls it
made, while another exchange fits in its share of the events; the few events left are
made up exactly by context events. Every copy gets fresh response, call and
activity ids (in the fields and inside the payloads' bytes, the same within one copy of a
folder, so a response a folder sends twice is re-ingested as `already_stored`), and text
varied with deterministic pseudo-random words. The text we write (user messages, tool
results, context) carries planted words:

- growth words (`benchmarks.search.rare_words`, the projections issue's definition): in
  the first 1% of the conversations, each word in 80 items; ranked search (top 20,
  snippets) p95 over one- and two-word queries of them is measured once the log holds
  those conversations (~10,000 events) and again at the end (~1,000,000), both on the
  one connection this process keeps, as a long-running reader would (a plan the server
  cached while the index was small would still be in use at the end);
- check words: each in a few items of a few random conversations; at the end a search
  for each must return exactly those items in exactly those conversations.

Phases. The writers (processes, each on its own conversations, `c % writers`) write the
first 1% of the conversations (the empty-store probe), then the bulk, then the last 1%
(the full-store probe), waiting at a barrier between phases while the followers catch up;
the append rate at the end is the end probe's over the start probe's (same shape, same
process count, a caught-up follower at the start of both). The followers are
`convstore project --follow` processes on the same store, running throughout; their lag
(events and seconds) is sampled from the tracking table every 0.2 s.

Checks after the run: every conversation holds exactly the events its writer
acknowledged at versions 1..n, no notification id or (conversation, version) twice and no
conversation nobody wrote, the search index's position at the log's head and no index
row for an event that does not exist, every hash chain verifies (`projections.verify`,
in parallel processes), and every check word is found in exactly its items.

Where. Without `--url`, a fresh database on the server of `CONVSTORE_BENCH_POSTGRES`
(default the local `test` database's server), dropped afterwards unless `--keep`. With
`--url`, that store as it is (it must be empty), never dropped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import queue
import random
import statistics
import sys
import threading
import time
import traceback
import zlib
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID

import msgspec

from benchmarks import workload
from benchmarks.common import Figure, render_table
from benchmarks.search import DSN, p95, rare_pool, rare_word, rare_words, worker
from convstore.adapters.recording.jobs import read_capture
from convstore.adapters.wire.names import PROVIDERS
from convstore.adapters.wire.providers import adapter
from convstore.domain import (
    AssistantText,
    ContextInjected,
    Event,
    Reasoning,
    ResponseEnded,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    UserMessage,
)
from convstore.domain.service import ConversationService
from convstore.domain.vocabulary import ConversationId, ProviderPayload
from convstore.projections.follower import DEFAULT_BATCH, Follower
from convstore.projections.search import MAX_LIMIT, SearchIndex
from convstore.projections.verify import verify_conversation
from convstore.storage import Store, open_store

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SEED = 20_250_601
PROBE_SHARE = 0.01
"""The share of the conversations each probe (empty store, full store) writes."""
QUERIES = 200
"""Timed queries per kind and size, as the search benchmark's full run."""
SAMPLE_EVERY = 0.2
"""Seconds between follower-lag samples."""
PHASES = ("start probe", "bulk", "end probe")
_CONTINUES = frozenset({"tool_use", "pause"})


# --- templates: the captures, decoded once --------------------------------------------------------


@dataclass(frozen=True)
class Response:
    """One captured response's drafts and what recording it does to a conversation."""

    drafts: tuple[Event, ...]
    response_id: str
    events: int
    """Events `service.ingest` records for it inside an open turn (before any TurnEnded)."""
    continues: bool
    """True when the turn stays open after it (tool use, a paused turn)."""
    calls: int
    """Client tool calls it requests."""


@dataclass(frozen=True)
class Template:
    """One exchange folder: its responses in order."""

    provider: str
    name: str
    responses: tuple[Response, ...]

    def cycle(self, turn_open: bool) -> tuple[int, int, bool]:
        """(events, items we write, turn open after) of one copy: a user message, then
        each response and the tool results for its calls (a repeated response adds none)."""
        events, items, seen = 2 + turn_open, 1, set()
        turn_open = True
        for response in self.responses:
            if response.response_id in seen:
                continue
            seen.add(response.response_id)
            events += (not turn_open) + response.events + (not response.continues)
            turn_open = response.continues
            if response.calls:
                events += response.calls + (not turn_open)
                items += response.calls
                turn_open = True
        return events, items, turn_open


def _response(drafts: list[Event]) -> Response:
    started, end = drafts[0], drafts[-1]
    assert isinstance(started, ResponseStarted)
    ended = isinstance(end, ResponseEnded)
    continues = (
        isinstance(end, ResponseEnded)
        and end.state == "completed"
        and end.finish_reason in _CONTINUES
    )
    return Response(
        drafts=tuple(drafts),
        response_id=started.response_id,
        events=len(drafts) + (not ended),
        continues=continues,
        calls=sum(isinstance(d, ToolCallRequested) for d in drafts),
    )


def load_templates(root: Path = EXAMPLES) -> list[Template]:
    """Every exchange folder of the captures, decoded with its provider's real decoder."""
    templates = []
    for provider in PROVIDERS:
        decode = adapter(provider).decode
        for folder in sorted(p for p in (root / provider).iterdir() if p.is_dir()):
            responses = []
            for meta in sorted(folder.glob("*.meta.json"), key=lambda p: int(p.name.split(".")[0])):
                n = meta.name.split(".")[0]
                body = next(folder.glob(f"{n}.response.*"))
                request = (folder / f"{n}.request.json").read_bytes()
                status = int(json.loads(meta.read_bytes())["status"])
                responses.append(_response(list(decode(read_capture(body), request, status))))
            templates.append(Template(provider, folder.name, tuple(responses)))
    return templates


# --- the plan: what each conversation holds -------------------------------------------------------


@dataclass
class Plan:
    """One conversation: its exchanges, its padding, and the words planted in its items."""

    index: int
    events: int
    templates: list[int] = field(default_factory=list)
    pad: int = 0
    """Context events that make up the events exactly."""
    items: int = 0
    """Texts we write: user messages, tool results, context (one index row each)."""
    words: dict[int, list[str]] = field(default_factory=dict)
    """Planted words by item."""


def plan_conversation(index: int, events: int, templates: Sequence[Template]) -> Plan:
    """Random exchanges of one provider while one fits in `events`, then padding."""
    rng = random.Random(f"{SEED}-plan-{index}")
    provider = PROVIDERS[index % len(PROVIDERS)]
    choices = [i for i, t in enumerate(templates) if t.provider == provider]
    plan = Plan(index, events)
    version, turn_open = 1, False
    while True:
        for chosen in rng.sample(choices, len(choices)):
            added, items, after = templates[chosen].cycle(turn_open)
            if version + added <= events:
                break
        else:
            break
        plan.templates.append(chosen)
        plan.items += items
        version, turn_open = version + added, after
    plan.pad = events - version
    plan.items += plan.pad
    return plan


@dataclass(frozen=True)
class Planted:
    """The planted words: growth queries and the check words' expected items."""

    one_word: list[str]
    two_words: list[str]
    items_per_word: int
    checks: dict[str, list[tuple[int, int]]]
    """Check word → its (conversation index, item) places."""


def plant(plans: Sequence[Plan], probe: range) -> Planted:
    """Growth words in the probe conversations' items; check words across all conversations."""
    places = [(c, item) for c in probe for item in range(plans[c].items)]
    pool = rare_pool(len(places))
    used = min(len(places), 40 * pool)
    one_word: dict[str, None] = {}
    two_words: dict[str, None] = {}
    for i, (c, item) in enumerate(places[:used]):
        first, second = rare_words(i, pool)
        plans[c].words.setdefault(item, []).extend((first, second))
        one_word.setdefault(first)
        two_words.setdefault(f"{first} {second}")
    rng = random.Random(f"{SEED}-checks")
    checks: dict[str, list[tuple[int, int]]] = {}
    for k in range(max(20, len(plans) // 100)):
        word = "chk" + rare_word(k)
        chosen = rng.sample(range(len(plans)), min(rng.randint(1, 3), len(plans)))
        where = sorted({(c, rng.randrange(plans[c].items)) for c in chosen if plans[c].items})
        for c, item in where:
            plans[c].words.setdefault(item, []).append(word)
        checks[word] = where
    return Planted(list(one_word), list(two_words), 2 * used // pool, checks)


# --- writing: varied copies of the templates through the service ----------------------------------


def _fresh(rng: random.Random, old: str) -> str:
    head, sep, _ = old.partition("_")
    prefix = head + sep if sep and len(head) <= 8 else ""
    return prefix + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(24))


def _rewrite(payload: ProviderPayload, ids: list[tuple[bytes, bytes]]) -> ProviderPayload:
    raw = payload.raw
    for old, new in ids:
        if old in raw:
            raw = raw.replace(old, new)
    return (
        payload if raw == payload.raw else msgspec.structs.replace(payload, value=msgspec.Raw(raw))
    )


def _varied_text(text: str, copy_seed: str) -> str:
    """`text` plus words depending only on it and the copy (a re-sent response matches)."""
    rng = random.Random(f"{copy_seed}-{zlib.crc32(text.encode())}")
    return f"{text} {workload.paragraph(rng, 1)} lex{rng.randrange(50_000):x}"


def vary(template: Template, rng: random.Random) -> list[list[Event]]:
    """One copy of a template's responses: fresh ids everywhere, varied text."""
    ids: dict[str, str] = {}
    for response in template.responses:
        for draft in response.drafts:
            for name in ("response_id", "activity_id", "call_id"):
                old = getattr(draft, name, None)
                if old and old not in ids:
                    ids[old] = _fresh(rng, old)
    raw_ids = sorted(((o.encode(), n.encode()) for o, n in ids.items()), key=lambda p: -len(p[0]))
    copy_seed = f"{rng.random()}"
    copies = []
    for response in template.responses:
        drafts: list[Event] = []
        for draft in response.drafts:
            changes: dict[str, Any] = {}
            for name in ("response_id", "activity_id", "call_id"):
                old = getattr(draft, name, None)
                if old:
                    changes[name] = ids[old]
            if isinstance(draft, AssistantText | Reasoning) and draft.text:
                changes["text"] = _varied_text(draft.text, copy_seed)
            payload = getattr(draft, "payload", None)
            if payload is not None:
                changes["payload"] = _rewrite(payload, raw_ids)
            if isinstance(draft, AssistantText) and draft.attributions:
                changes["attributions"] = tuple(
                    a
                    if a.replay is None
                    else msgspec.structs.replace(a, replay=_rewrite(a.replay, raw_ids))
                    for a in draft.attributions
                )
            drafts.append(msgspec.structs.replace(draft, **changes))
        copies.append(drafts)
    return copies


class _Texts:
    """The texts one conversation's items get: varied words, plus the planted ones."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.rng = random.Random(f"{SEED}-text-{plan.index}")
        self.item = 0

    def __call__(self) -> str:
        rng = self.rng
        words = self.plan.words.get(self.item, ())
        self.item += 1
        text = f"{workload.paragraph(rng, rng.randint(1, 2))} lex{rng.randrange(50_000):x}"
        return " ".join((text, *words))


def write_conversation(
    service: ConversationService, plan: Plan, templates: Sequence[Template]
) -> tuple[ConversationId, int]:
    """Write one planned conversation; its id and the events the service acknowledged."""
    rng = random.Random(f"{SEED}-ids-{plan.index}")
    texts = _Texts(plan)
    conversation = service.start(f"scale {plan.index}")
    acknowledged = 1
    for chosen in plan.templates:
        user = UserMessage(blocks=(texts(),))
        acknowledged += len(service.add_user_input(conversation, [user]))
        for drafts in vary(templates[chosen], rng):
            outcome = service.ingest(conversation, iter(drafts))
            acknowledged += outcome.events
            calls = [d.call_id for d in drafts if isinstance(d, ToolCallRequested)]
            if calls and not outcome.already_stored:
                results = [ToolCallResponded(call_id=call, content=texts()) for call in calls]
                acknowledged += len(service.add_user_input(conversation, results))
    if plan.pad:
        context = [ContextInjected(source="context", text=texts()) for _ in range(plan.pad)]
        acknowledged += len(service.append(conversation, context))
    return conversation, acknowledged


@dataclass
class PhaseResult:
    """What one writer did in one phase."""

    writer: int
    phase: int
    started: float
    ended: float
    written: list[tuple[int, str, int]]
    """(conversation index, id, events acknowledged)."""


@dataclass
class WriterJob:
    """One writer process's share: its conversations, phase by phase."""

    number: int
    url: str
    phases: list[list[Plan]]
    templates: list[Template]


def writer_main(job: WriterJob, barrier: Any, results: Any) -> None:
    """A writer process: each phase's conversations after the barrier, reported on `results`."""
    try:
        with open_store(job.url) as store:
            for phase, plans in enumerate(job.phases):
                barrier.wait()
                started = time.monotonic()
                written = []
                for plan in plans:
                    conversation, acknowledged = write_conversation(
                        store.service, plan, job.templates
                    )
                    written.append((plan.index, str(conversation), acknowledged))
                results.put(PhaseResult(job.number, phase, started, time.monotonic(), written))
    except BaseException:
        results.put(("error", job.number, traceback.format_exc()))
        barrier.abort()


# --- watching the followers -----------------------------------------------------------------------


class LagSampler:
    """Samples the log's head and the search index's position from a thread."""

    def __init__(self, store: Store) -> None:
        self.recorder = store.recorder
        self.samples: list[tuple[float, int, int]] = []
        """(monotonic time, head, position)."""
        self.connections = 0
        """The most sessions seen on the store's database at once."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lag-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            self.sample()
            with self.recorder.view_reader() as cursor:
                count = cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                ).fetchone()[0]
            self.connections = max(self.connections, int(count))

    def sample(self) -> tuple[int, int]:
        """Take one sample: (head, position)."""
        head = self.recorder.max_notification_id() or 0
        position = self.recorder.max_tracking_id("search") or 0
        self.samples.append((time.monotonic(), head, position))
        return head, position

    def __enter__(self) -> LagSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def wait_caught_up(self, followers: Sequence[Any], timeout: float = 1800) -> float:
        """Seconds until the index reaches the head (followers must stay alive)."""
        started = time.monotonic()
        while True:
            head, position = self.sample()
            if position >= head:
                return time.monotonic() - started
            for process in followers:
                if process.poll() is not None:
                    error = process.stderr.read().decode() if process.stderr else ""
                    raise RuntimeError(f"a follower worker exited: {error[-2000:]}")
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"the followers did not catch up in {timeout:.0f} s")
            time.sleep(0.05)

    def lags(self, first: float, last: float) -> list[tuple[float, int, float]]:
        """(time, lag in events, lag in seconds) of the samples between two times.

        The lag in seconds is how long ago the oldest event not yet indexed was committed
        (as far as the samples of the head tell).
        """
        ordered = sorted(self.samples)
        times = [t for t, _, _ in ordered]
        heads = [h for _, h, _ in ordered]
        found = []
        for t, head, position in ordered:
            if not first <= t <= last:
                continue
            lag = max(head - position, 0)
            seconds = 0.0
            if lag:
                # The first sample whose head was past the position: that event was there.
                k = bisect_right(heads, position)
                seconds = t - times[min(k, len(times) - 1)]
            found.append((t, lag, seconds))
        return found


# --- measuring search -----------------------------------------------------------------------------


def search_latencies(index: SearchIndex, planted: Planted) -> dict[str, list[float]]:
    """Latencies of `QUERIES` ranked searches (top 20, snippets) per kind of rare-term query."""
    rng = random.Random(5)
    found: dict[str, list[float]] = {}
    for kind, queries in (("one word", planted.one_word), ("two words", planted.two_words)):
        index.search(queries[0], 20)  # warm the statement and the pages
        found[kind] = []
        for _ in range(QUERIES):
            query = rng.choice(queries)
            started = time.perf_counter()
            hits = index.search(query, 20)
            found[kind].append(time.perf_counter() - started)
            if not hits:
                raise RuntimeError(f"the growth query {query!r} found nothing")
    return found


# --- checks ---------------------------------------------------------------------------------------


@dataclass
class Check:
    """One correctness check's outcome."""

    name: str
    passed: bool
    detail: str


def _count_checks(store: Store, acknowledged: dict[UUID, int]) -> list[Check]:
    with store.recorder.view_reader() as cursor:
        stored = {
            row[0]: (int(row[1]), int(row[2]), int(row[3]))
            for row in cursor.execute(
                "SELECT originator_id, count(*), min(originator_version), max(originator_version)"
                " FROM events GROUP BY originator_id"
            )
        }
        total, ids, keys = cursor.execute(
            "SELECT count(*), count(DISTINCT id),"
            " count(DISTINCT (originator_id, originator_version)) FROM events"
        ).fetchone()
        orphans = cursor.execute(
            "SELECT count(*) FROM search_rows r"
            " WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.id = r.id / 65536)"
        ).fetchone()[0]
        head = cursor.execute("SELECT max(id) FROM events").fetchone()[0]
        position = cursor.execute(
            "SELECT notification_id FROM tracking WHERE application_name = 'search'"
        ).fetchone()
    wrong = [c for c, n in acknowledged.items() if stored.get(c) != (n, 1, n)]
    unknown = [c for c in stored if c not in acknowledged]
    expected = sum(acknowledged.values())
    return [
        Check(
            "counts",
            not wrong and not unknown and total == expected,
            f"{total:,} events stored, {expected:,} acknowledged; {len(wrong)} of "
            f"{len(acknowledged):,} conversations differ (count or versions 1..n), "
            f"{len(unknown)} stored that nobody wrote",
        ),
        Check(
            "duplicates",
            total == ids == keys,
            f"{total:,} rows, {ids:,} distinct notification ids, {keys:,} distinct "
            "(conversation, version)",
        ),
        Check(
            "index",
            orphans == 0 and position is not None and position[0] == head,
            f"position {None if position is None else position[0]:,} at head {head:,}; "
            f"{orphans} index rows without their event",
        ),
    ]


_VERIFIER: dict[str, Store] = {}
"""The store a verifying process reads."""


def _open_verifier(url: str) -> None:
    _VERIFIER["store"] = open_store(url)


def _verify_chunk(ids: list[UUID]) -> list[tuple[str, int, list[str]]]:
    found = []
    for conversation in ids:
        check = verify_conversation(_VERIFIER["store"], conversation)
        found.append((check.conversation_id, check.events, [b.problem for b in check.breaks[:3]]))
    return found


def verify_chains(url: str, ids: Sequence[UUID], processes: int) -> Check:
    """Every conversation's hash chain, in `processes` processes."""
    size = max(len(ids) // (processes * 8), 1)
    chunks = [list(ids[i : i + size]) for i in range(0, len(ids), size)]
    broken: list[str] = []
    events = 0
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, context, _open_verifier, (url,)) as pool:
        for found in pool.map(_verify_chunk, chunks):
            for conversation, count, problems in found:
                events += count
                if problems:
                    broken.append(f"{conversation}: {'; '.join(problems)}")
    return Check(
        "chains",
        not broken,
        f"{len(ids):,} conversations, {events:,} events verified; {len(broken)} broken"
        + (f" (first: {broken[0]})" if broken else ""),
    )


def search_check(index: SearchIndex, planted: Planted, ids: dict[int, UUID]) -> Check:
    """Each check word finds exactly its items, in exactly its conversations."""
    wrong = []
    for word, places in planted.checks.items():
        hits = index.search(word, MAX_LIMIT)
        expected = sorted(ids[c] for c, _ in places)
        got = sorted(h.conversation_id for h in hits)
        if got != expected:
            wrong.append(
                f"{word}: {len(got)} hits in {len(set(got))} conversations, "
                f"expected {len(expected)} in {len(set(expected))}"
            )
    return Check(
        "search",
        not wrong,
        f"{len(planted.checks)} planted words, each found in exactly its items: "
        + ("yes" if not wrong else f"no, {len(wrong)} differ (first: {wrong[0]})"),
    )


# --- the database ---------------------------------------------------------------------------------


@contextlib.contextmanager
def fresh_database(keep: bool) -> Iterator[str]:
    """A new database on the benchmark server, dropped afterwards unless `keep`."""
    import psycopg
    from psycopg import sql

    name = f"convstore_scale_{os.getpid()}"
    parts = urlsplit(DSN)
    url = urlunsplit(parts._replace(path=f"/{name}"))
    with psycopg.connect(DSN, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield url
    finally:
        if keep:
            print(f"kept the store: {url}", file=sys.stderr)
        else:
            with psycopg.connect(DSN, autocommit=True) as admin:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )


# --- the run --------------------------------------------------------------------------------------


@dataclass
class Run:
    """Everything measured, for the table and the JSON document."""

    figures: list[Figure] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


def _say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _collect(results: Any, processes: Sequence[Any], count: int, phase: int) -> list[PhaseResult]:
    found: list[PhaseResult] = []
    while len(found) < count:
        try:
            item = results.get(timeout=5)
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in processes):
                raise RuntimeError("a writer process died") from None
            continue
        if isinstance(item, tuple):
            raise RuntimeError(f"writer {item[1]} failed:\n{item[2]}")
        assert item.phase == phase
        found.append(item)
    return found


def _phase_rate(results: list[PhaseResult]) -> tuple[int, float]:
    events = sum(n for r in results for _, _, n in r.written)
    span = max(r.ended for r in results) - min(r.started for r in results)
    return events, span


@dataclass
class Rig:
    """The running parts: the store, its index, the plan, the processes, their channels."""

    args: argparse.Namespace
    store: Store
    index: SearchIndex
    planted: Planted
    sampler: LagSampler
    followers: list[Any]
    writers: list[Any]
    barrier: Any
    results: Any


@dataclass
class Measured:
    """What the phases measured."""

    rates: list[tuple[int, float]] = field(default_factory=list)
    """(events, seconds) per phase."""
    spans: list[tuple[float, float]] = field(default_factory=list)
    """(start, end) monotonic times per phase."""
    latencies: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """Search latencies by size (`small`, `large`) and kind."""
    rows: dict[str, int] = field(default_factory=dict)
    """Index rows by size."""
    end_lag: tuple[int, int] = (0, 0)
    """(head, position) when the writers finished."""
    drain: float = 0.0
    """Seconds the followers took to catch up after that."""
    connections: int = 0
    """The most sessions seen on the database at once while the writers ran."""


def run(args: argparse.Namespace, url: str) -> Run:
    """Build, measure and check the store at `url`."""
    templates = load_templates()
    share, extra = divmod(args.events, args.conversations)
    plans = [
        plan_conversation(c, share + (c < extra), templates) for c in range(args.conversations)
    ]
    probe = max(round(args.conversations * PROBE_SHARE), args.writers)
    if 2 * probe > args.conversations:
        raise SystemExit("too few conversations for two probes of one per writer")
    planted = plant(plans, range(probe))
    phases = [plans[:probe], plans[probe:-probe], plans[-probe:]]
    _say(
        f"{args.events:,} events in {args.conversations:,} conversations, {args.writers} "
        f"writers, {args.followers} followers; probes of {probe} conversations; "
        f"{len(templates)} capture folders; {len(planted.one_word)} growth words "
        f"({planted.items_per_word} items each), {len(planted.checks)} check words"
    )
    context = multiprocessing.get_context("spawn")
    store = open_store(url)
    try:
        if store.recorder.max_notification_id() is not None:
            raise SystemExit(f"{url} is not an empty store")
        index = SearchIndex(store.recorder)
        Follower(store.recorder, index).setup()
        barrier, results = context.Barrier(args.writers + 1), context.Queue()
        writers = [
            context.Process(
                target=writer_main,
                args=(
                    WriterJob(
                        w,
                        url,
                        [[p for p in phase if p.index % args.writers == w] for phase in phases],
                        templates,
                    ),
                    barrier,
                    results,
                ),
                name=f"writer-{w}",
            )
            for w in range(args.writers)
        ]
        with contextlib.ExitStack() as stack:
            followers = [stack.enter_context(worker(url)) for _ in range(args.followers)]
            sampler = stack.enter_context(LagSampler(store))
            rig = Rig(args, store, index, planted, sampler, followers, writers, barrier, results)
            for process in writers:
                process.start()
            try:
                report, written = _phases(rig)
            finally:
                for process in writers:
                    process.join(timeout=5)
                    if process.is_alive():
                        process.terminate()
                        process.join()
        acknowledged = {UUID(cid): n for _, cid, n in written}
        _say("checking counts, duplicates and the index")
        report.checks.extend(_count_checks(store, acknowledged))
        report.checks.append(search_check(index, planted, {c: UUID(i) for c, i, _ in written}))
        _say("verifying every chain")
        started = time.monotonic()
        report.checks.append(verify_chains(url, list(acknowledged), os.cpu_count() or 2))
        report.info["verify_seconds"] = round(time.monotonic() - started, 1)
    finally:
        store.close()
    return report


def _phases(rig: Rig) -> tuple[Run, list[tuple[int, str, int]]]:
    """Run the writers' phases; the figures and what each conversation acknowledged."""
    measured = Measured()
    written: list[tuple[int, str, int]] = []
    for phase, name in enumerate(PHASES):
        if phase != 1:
            rig.sampler.wait_caught_up(rig.followers)
        _say(f"{name} …")
        rig.barrier.wait(timeout=600)
        found = _collect(rig.results, rig.writers, rig.args.writers, phase)
        measured.spans.append((min(r.started for r in found), max(r.ended for r in found)))
        measured.rates.append(_phase_rate(found))
        written.extend(w for r in found for w in r.written)
        events, span = measured.rates[-1]
        _say(f"{name}: {events:,} events in {span:.1f} s ({events / span:,.0f} events/s)")
        if phase == 0:
            rig.sampler.wait_caught_up(rig.followers)
            measured.rows["small"] = rig.index.count()
            measured.latencies["small"] = search_latencies(rig.index, rig.planted)
    measured.end_lag = rig.sampler.sample()
    measured.drain = rig.sampler.wait_caught_up(rig.followers)
    measured.connections = rig.sampler.connections
    _say(f"followers caught up {measured.drain:.1f} s after the writers finished")
    measured.rows["large"] = rig.index.count()
    measured.latencies["large"] = search_latencies(rig.index, rig.planted)
    report = Run(figures=_figures(rig, measured))
    if rig.args.url is None:  # a database of our own: every session on it is ours
        bound = rig.args.writers + 4 * rig.args.followers + 4
        report.checks.append(
            Check(
                "sessions",
                measured.connections <= bound,
                f"at most {measured.connections} database sessions at once (bound {bound}: "
                "one per writer, four per follower, four for this process)",
            )
        )
    head, position = measured.end_lag
    report.info.update(
        events=head,
        phases={
            name: {"events": e, "seconds": round(s, 2), "events_per_s": round(e / s, 1)}
            for name, (e, s) in zip(PHASES, measured.rates, strict=True)
        },
        index_rows=measured.rows,
        lag_at_end_events=max(head - position, 0),
        drain_seconds=round(measured.drain, 2),
        most_sessions=measured.connections,
    )
    return report, written


def _figures(rig: Rig, measured: Measured) -> list[Figure]:
    args = rig.args
    (first_events, first_s), (bulk_events, bulk_s), (last_events, last_s) = measured.rates
    start_rate, end_rate = first_events / first_s, last_events / last_s
    small_events, large_events = first_events, sum(e for e, _ in measured.rates)
    figures = [
        Figure(
            "S1",
            f"append rate at {large_events:,} events vs empty store",
            f"{args.writers} writer processes through ConversationService, the last "
            f"{PROBE_SHARE:.0%} of the conversations ({last_events:,} events)",
            f"the same shape on the empty store: the first {PROBE_SHARE:.0%} "
            f"({first_events:,} events)",
            "throughput",
            end_rate,
            start_rate,
            unit="events/s",
            ratio=end_rate / start_rate,
            target=(">=", 0.8),
            note=f"each probe starts with the followers caught up; bulk: "
            f"{bulk_events / bulk_s:,.0f} events/s over {bulk_s:.0f} s",
        ).judge()
    ]
    latencies, rows = measured.latencies, measured.rows
    for number, kind in (("2", "one word"), ("3", "two words")):
        big, base = p95(latencies["large"][kind]), p95(latencies["small"][kind])
        figures.append(
            Figure(
                f"S{number}",
                f"search p95, rare {kind}, {large_events:,} vs {small_events:,} events",
                f"SearchIndex.search(top 20, snippets) p95 with {rows['large']:,} index rows",
                f"the same queries with {rows['small']:,} index rows",
                "time",
                big,
                base,
                ratio=big / base,
                target=("<=", 3.0),
                note=f"{QUERIES} queries per size; each rare word is in "
                f"{rig.planted.items_per_word} items",
            ).judge()
        )
    bulk_start, bulk_end = measured.spans[1]
    lags = rig.sampler.lags(bulk_start, bulk_end)
    span = bulk_end - bulk_start

    def mean_lag(first: float, last: float) -> float:
        values = [lag for t, lag, _ in lags if first <= (t - bulk_start) / span < last]
        return statistics.fmean(values) if values else 0.0

    early, late = mean_lag(0.25, 0.5), mean_lag(0.75, 1.0)
    worst = max((lag for _, lag, _ in lags), default=0)
    worst_s = max((s for _, _, s in lags), default=0.0)
    head, position = measured.end_lag
    figures.append(
        Figure(
            "S4",
            "follower lag while the writers run",
            "mean lag (events) over the last quarter of the bulk phase",
            "mean lag over its second quarter",
            "time",
            late,
            early,
            unit="events",
            ratio=(late + DEFAULT_BATCH) / (early + DEFAULT_BATCH),
            target=("<=", 2.0),
            note=f"each mean plus one batch ({DEFAULT_BATCH} events): ~1 when bounded; "
            f"worst {worst:,} events / {worst_s:.1f} s; at the writers' end "
            f"{max(head - position, 0):,} events, caught up {measured.drain:.1f} s later",
        ).judge()
    )
    return figures


def _document(args: argparse.Namespace, report: Run) -> dict[str, Any]:
    return {
        "arguments": {k: v for k, v in vars(args).items() if k != "json"},
        "figures": [asdict(f) for f in report.figures],
        "checks": [asdict(c) for c in report.checks],
        "info": report.info,
    }


def main(argv: list[str] | None = None) -> int:
    """Build the store, print the table; 1 when a correctness check fails."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--followers", type=int, default=2, help="`project --follow` workers")
    parser.add_argument("--url", help="an empty PostgreSQL store (default: a fresh database)")
    parser.add_argument("--keep", action="store_true", help="keep the fresh database")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the results here")
    args = parser.parse_args(argv)
    if args.events < args.conversations * 20:
        parser.error("give each conversation at least 20 events")
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(fresh_database(args.keep))
        report = run(args, url)
    report.info["total_seconds"] = round(time.monotonic() - started, 1)
    print()
    print(render_table(report.figures))
    print()
    for check in report.checks:
        print(f"{'PASS' if check.passed else 'FAIL'}  {check.name:<10} {check.detail}")
    print()
    print(json.dumps({k: v for k, v in report.info.items()}, indent=None))
    if args.json:
        args.json.write_text(json.dumps(_document(args, report), indent=2, default=str) + "\n")
    return 0 if all(c.passed for c in report.checks) else 1


if __name__ == "__main__":
    sys.exit(main())
