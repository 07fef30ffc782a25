"""Figure 8: decoding. Stream decode throughput against `orjson.loads` (8a-8c; 8j for
Chat Completions, `openai-chat`, example captures only), end-to-end
ingest against the decode alone (8d, 8e; 8i in a commit group, as batch ingest runs), and
peak memory of a 100 MB stream (8f-8h).

8a-8c, per provider: `decode_stream` of every recorded (`../shared/wire`, when present)
and example SSE capture, each body as one chunk (framing, JSON, assembly, mapping to
drafts), against `orjson.loads` of the same `data:` payloads, framed beforehand by
`iter_events`: the JSON parse alone, which any decoder must at least do. Target 0.25x.

8d, 8e: `ConversationService.ingest` of a decoded web search stream into a conversation of
its own in an SQLite store (WAL, `synchronous=FULL`: the commit waits for the disk),
against decoding the same stream alone. Target 0.5x. 8i: the same, 64 responses a round in
one commit group (`store.grouped()`, as `ingest` of a folder runs): their commits shared.

8f-8h, per provider: a synthetic stream of about 100 MB (many long ASCII text deltas in
several blocks, the largest 8 MiB), written to a file and ingested from it in 64 KiB
chunks into a fresh store, under tracemalloc: the peak above the start, against the
stream's largest block, the largest unit it holds whole (a block's text, or an event's
data when one is larger: OpenAI's final event carries the whole response). Target 4x.
tracemalloc sees Python's allocations only: SQLite's own page cache is not in the peak.
"""

from __future__ import annotations

import gc
import json
import random
import re
import sqlite3
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from benchmarks.common import Figure, Sizes, interleave, skipped
from convstore.adapters.anthropic import decode as anthropic
from convstore.adapters.google import decode as google
from convstore.adapters.google.context import RequestContext as GoogleContext
from convstore.adapters.openai import decode as openai
from convstore.adapters.openai_chat import decode as openai_chat
from convstore.adapters.wire.sse import iter_events
from convstore.domain import Event
from convstore.storage import open_store

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
WIRE = ROOT.parent / "shared" / "wire"
WEB_SEARCH = (
    EXAMPLES / "anthropic" / "web_search_citations" / "1.response.sse",
    WIRE / "anthropic" / "llm-anthropic_web_search_citations_stream" / "0.response.sse",
)
"""The web search streams of 8d (ours) and 8e (recorded)."""

DONE = "[DONE]"
"""Chat Completions' end-of-stream marker: a `data:` payload that is not JSON."""
CHUNK = 64 * 1024
"""Read size of the memory figures' stream files."""
MiB = 1024 * 1024


@dataclass(frozen=True)
class Provider:
    """One provider's decoder, captures and synthetic stream."""

    name: str
    examples: str
    wire: str
    decode: Callable[..., Iterator[Event]]
    synthetic: Callable[[IO[bytes], list[int]], int] | None = None
    """Writes a stream of text blocks of the given sizes; returns its largest event's data
    (None: no memory figure)."""
    request: Any = None
    """The request context the memory figure decodes with."""


# --- synthetic streams ---------------------------------------------------------------------

_VOCABULARY = (
    "the of and to in is was that for on are with as they be at one have this from or had by "
    "word but what some we can out other were all there when up use your how said an each "
    "which do their time if will way about many then them write would like so these long make "
    "thing see two has look more day could go come did number sound no most people over know "
    "water than call first who may down side been now find"
)
_WORDS = _VOCABULARY.split()


class _Pieces:
    """Text deltas: a pool of distinct ASCII pieces (words, punctuation, quotes, line
    breaks), JSON-escaped once, drawn at random."""

    def __init__(self, size: int, seed: int) -> None:
        rng = random.Random(seed)
        self.pool: list[tuple[int, bytes]] = []
        for _ in range(64):
            words: list[str] = []
            length = 0
            while length < size:
                word = rng.choice(_WORDS)
                if rng.random() < 0.03:
                    word += rng.choice(('."\n', ". ", ",", "?\n\n", ": \\"))
                words.append(word)
                length += len(word) + 1
            text = " ".join(words)[:size]
            self.pool.append((len(text), json.dumps(text)[1:-1].encode()))
        self.rng = rng

    def take(self, total: int) -> Iterator[tuple[int, bytes]]:
        """Pieces of about `total` bytes of text: (text bytes, escaped JSON string body)."""
        done = 0
        while done < total:
            size, escaped = self.rng.choice(self.pool)
            done += size
            yield size, escaped


def _anthropic_stream(out: IO[bytes], blocks: list[int]) -> int:
    pieces = _Pieces(8192, seed=1)
    largest = 0

    def event(name: str, data: bytes) -> None:
        nonlocal largest
        largest = max(largest, len(data))
        out.write(b"event: %s\ndata: %s\n\n" % (name.encode(), data))

    event(
        "message_start",
        b'{"type":"message_start","message":{"id":"msg_synthetic","type":"message",'
        b'"role":"assistant","model":"claude-synthetic","content":[],"stop_reason":null,'
        b'"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}',
    )
    for index, size in enumerate(blocks):
        event(
            "content_block_start",
            b'{"type":"content_block_start","index":%d,"content_block":{"type":"text",'
            b'"text":""}}' % index,
        )
        head = b'{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":"' % (
            index
        )
        for _, escaped in pieces.take(size):
            event("content_block_delta", head + escaped + b'"}}')
        event("content_block_stop", b'{"type":"content_block_stop","index":%d}' % index)
    event(
        "message_delta",
        b'{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},'
        b'"usage":{"output_tokens":4096}}',
    )
    event("message_stop", b'{"type":"message_stop"}')
    return largest


def _openai_stream(out: IO[bytes], blocks: list[int]) -> int:
    """Message items as the Responses API streams them: each item's text comes as deltas,
    then whole three times (text done, part done, item done), and once more in the final
    `response.completed` with every item."""
    pieces = _Pieces(8192, seed=2)
    largest = 0
    sequence = 0

    def event(kind: str, body: bytes) -> None:
        nonlocal largest, sequence
        data = b'{"type":"%s","sequence_number":%d,%s}' % (kind.encode(), sequence, body)
        sequence += 1
        largest = max(largest, len(data))
        out.write(b"event: %s\ndata: %s\n\n" % (kind.encode(), data))

    head = (
        b'"id":"resp_synthetic","object":"response","created_at":1700000000,"model":"gpt-synth",'
        b'"tool_choice":"auto","tools":[],"store":true,"temperature":1.0'
    )
    event("response.created", b'"response":{%s,"status":"in_progress","output":[]}' % head)
    items: list[bytes] = []
    for index, size in enumerate(blocks):
        item_id = b"msg_%d" % index
        where = b'"item_id":"%s","output_index":%d,"content_index":0' % (item_id, index)
        event(
            "response.output_item.added",
            b'"output_index":%d,"item":{"id":"%s","type":"message","status":"in_progress",'
            b'"role":"assistant","content":[]}' % (index, item_id),
        )
        event(
            "response.content_part.added",
            b'%s,"part":{"type":"output_text","annotations":[],"text":""}' % where,
        )
        escaped: list[bytes] = []
        for _, piece in pieces.take(size):
            escaped.append(piece)
            event("response.output_text.delta", b'%s,"delta":"%s"' % (where, piece))
        text = b"".join(escaped)
        del escaped
        part = b'{"type":"output_text","annotations":[],"text":"%s"}' % text
        event("response.output_text.done", b'%s,"text":"%s"' % (where, text))
        event("response.content_part.done", b'%s,"part":%s' % (where, part))
        item = b'{"id":"%s","type":"message","status":"completed","role":"assistant",' % item_id
        item += b'"content":[%s]}' % part
        event("response.output_item.done", b'"output_index":%d,"item":%s' % (index, item))
        items.append(item)
    usage = b'"usage":{"input_tokens":12,"output_tokens":4096,"total_tokens":4108}'
    output = b",".join(items)
    del items
    event(
        "response.completed",
        b'"response":{%s,"status":"completed","output":[%s],%s}' % (head, output, usage),
    )
    return largest


def _gemini_stream(out: IO[bytes], blocks: list[int]) -> int:
    """Text runs as `streamGenerateContent?alt=sse` sends them (CRLF): one text part per
    chunk, thought and visible runs alternating (each run is one block)."""
    pieces = _Pieces(8192, seed=3)
    largest = 0
    tail = (
        b'"index":0}],"usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":4096,'
        b'"totalTokenCount":4108},"modelVersion":"gemini-synthetic","responseId":"synthetic"}'
    )

    def chunk(text: bytes, thought: bool, finish: bool = False) -> None:
        nonlocal largest
        flag = b',"thought":true' if thought else b""
        reason = b'"finishReason":"STOP",' if finish else b""
        data = b'{"candidates":[{"content":{"parts":[{"text":"%s"%s}],"role":"model"},%s%s' % (
            text,
            flag,
            reason,
            tail,
        )
        largest = max(largest, len(data))
        out.write(b"data: %s\r\n\r\n" % data)

    for index, size in enumerate(blocks):
        for _, piece in pieces.take(size):
            chunk(piece, thought=index % 2 == 0)
    chunk(b"", thought=False, finish=True)
    return largest


PROVIDERS: dict[str, Provider] = {
    "a": Provider(
        "Anthropic", "anthropic", "anthropic", anthropic.decode_stream, _anthropic_stream
    ),
    "b": Provider("OpenAI", "openai", "openai", openai.decode_stream, _openai_stream),
    "c": Provider(
        "Gemini",
        "google",
        "gemini",
        google.decode_stream,
        _gemini_stream,
        # A request without a grounding tool: otherwise visible text is held to the end of
        # the stream, for the grounding that arrives last (stream.py).
        request=GoogleContext(grounding=False),
    ),
}
CHAT = Provider("Chat Completions", "openai-chat", "openai-chat", openai_chat.decode_stream)
"""8j: throughput only."""


def block_sizes(total: int, largest: int) -> list[int]:
    """Block text sizes summing to about `total` bytes, the largest `largest`."""
    pattern = (1.0, 0.625, 0.375, 0.75, 0.25, 0.875, 0.5)
    sizes: list[int] = []
    while sum(sizes) < total:
        sizes.append(int(largest * pattern[len(sizes) % len(pattern)]))
    return sizes


# --- figures -------------------------------------------------------------------------------


def captures(provider: Provider) -> list[bytes]:
    """The bodies of the provider's recorded (when present) and example SSE captures."""
    paths = sorted((WIRE / provider.wire).glob("*/*.response.sse")) if WIRE.is_dir() else []
    paths += sorted((EXAMPLES / provider.examples).glob("*/*.response.sse"))
    return [path.read_bytes() for path in paths]


def throughput_figure(letter: str, provider: Provider, sizes: Sizes) -> Figure:
    """8a-8c: decode_stream of the captures against orjson.loads of their payloads."""
    bodies = captures(provider)
    payloads = [[e.data.encode() for e in iter_events([body]) if e.data != DONE] for body in bodies]
    decode = provider.decode

    def ours() -> None:
        for body in bodies:
            for _ in decode([body]):
                pass

    def baseline() -> None:
        loads = orjson.loads
        for datas in payloads:
            for data in datas:
                loads(data)

    events = sum(map(len, payloads))
    drafts = sum(len(list(decode([body]))) for body in bodies)
    assert drafts >= 2 * len(bodies)  # each body is a response: started, ended
    rounds = sizes.mapper_rounds
    timings = interleave(
        {"ours": ours, "orjson": baseline}, rounds=rounds, warmup=sizes.warmup, number=5
    )
    recorded = (
        "recorded and example"
        if (WIRE / provider.wire).is_dir()
        else "example (no recorded traffic)"
    )
    return Figure(
        f"8{letter}",
        f"{provider.name} SSE decode throughput",
        f"{provider.examples.replace('-', '_')}.decode.decode_stream of each body (framing, "
        "JSON, assembly, mapping to drafts)",
        "orjson.loads of the same data payloads (framed beforehand)",
        "throughput",
        timings.median("ours") / events,
        timings.median("orjson") / events,
        ratio=timings.throughput_ratio("ours", "orjson"),
        target=(">=", 0.25),
        note=f"per event; {len(bodies)} {recorded} captures, {events} events, "
        f"{sum(map(len, bodies)):,} bytes, {drafts} drafts; median of {rounds} interleaved rounds",
        extra={"timings": timings.summary(), "events": events, "bodies": len(bodies)},
    ).judge()


def _commit_time(folder: Path, rounds: int) -> float:
    """Median seconds of a bare sqlite3 commit of one small row (WAL, synchronous=FULL) in
    `folder`: what the disk charges any durable commit there."""
    path = folder / "decoding-commit.db"
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)")
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("INSERT INTO t (v) VALUES (?)", (b"x" * 100,))
            connection.execute("COMMIT")
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    finally:
        connection.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


_MESSAGE_ID = re.compile(rb'"id"\s*:\s*"(msg_[^"]+)"')


def renamed(body: bytes, count: int) -> Iterator[bytes]:
    """`count` copies of an Anthropic body, each with a response id of its own: a store
    holds a provider response once, so every round records a response of its own."""
    found = _MESSAGE_ID.search(body)
    assert found is not None, "no message id in the body"
    original = found.group(1)
    for i in range(count):
        yield body.replace(original, original + b"-%06d" % i)


def ingest_figures(sizes: Sizes, folder: Path) -> list[Figure]:
    """8d, 8e: ingest of a web search stream against its decode alone."""
    commit = _commit_time(folder, max(sizes.append_rounds, 30))
    return [
        _ingest_figure(letter, path, sizes, folder, commit)
        for letter, path in zip("de", WEB_SEARCH, strict=True)
    ]


def _ingest_figure(letter: str, path: Path, sizes: Sizes, folder: Path, commit: float) -> Figure:
    title = f"ingest of a {'recorded ' if letter == 'e' else ''}web search stream"
    subject = "ConversationService.ingest(decode_stream) into SQLite (WAL, FULL)"
    if not path.is_file():
        return skipped(
            f"8{letter}",
            title,
            subject=subject,
            baseline="decode_stream alone",
            kind="throughput",
            why=f"no capture at {path}",
        )
    body = path.read_bytes()
    decode = anthropic.decode_stream
    rounds, warmup = sizes.append_rounds, sizes.warmup
    with open_store(f"sqlite:///{folder / f'decoding-ingest-{letter}.db'}") as store:
        service = store.service
        conversations = iter([service.start() for _ in range(rounds + warmup)])
        bodies = renamed(body, rounds + warmup)

        def ours() -> None:
            outcome = service.ingest(next(conversations), decode([next(bodies)]))
            assert outcome.ended == "completed" and outcome.events

        def baseline() -> None:
            for _ in decode([body]):
                pass

        timings = interleave({"ingest": ours, "decode": baseline}, rounds=rounds, warmup=warmup)
    drafts = len(list(decode([body])))
    return Figure(
        f"8{letter}",
        title,
        subject + ", each into a conversation of its own",
        "decode_stream alone, the same body",
        "throughput",
        timings.median("ingest"),
        timings.median("decode"),
        ratio=timings.throughput_ratio("ingest", "decode"),
        target=(">=", 0.5),
        note=f"per response; {path.relative_to(ROOT.parent)}, {len(body):,} bytes, "
        f"{drafts} drafts, one commit; a bare sqlite3 commit of one row in the same "
        f"folder takes {commit * 1e6:.0f} µs; median of {rounds} interleaved rounds",
        extra={"timings": timings.summary(), "bare_commit_s": commit},
    ).judge()


BATCH: int = 64
"""Responses one 8i round ingests in one commit group (`storage.groups.GROUP_EVERY`)."""


def batch_ingest_figure(sizes: Sizes, folder: Path) -> Figure:
    """8i: batch ingest (a folder of captures), whose commit group commits many responses
    together, against decoding them alone: each round ingests `BATCH` web search streams,
    each into a conversation of its own, in one `store.grouped()` (its commit included)."""
    path = WEB_SEARCH[0]
    title = "batch ingest of web search streams (a commit group)"
    subject = (
        f"{BATCH} x ConversationService.ingest_exchange(decode_stream) in store.grouped(), SQLite"
    )
    if not path.is_file():
        return skipped(
            "8i", title, subject=subject, baseline="decode_stream alone", kind="throughput",
            why=f"no capture at {path}",
        )  # fmt: skip
    body = path.read_bytes()
    decode = anthropic.decode_stream
    rounds, warmup = max(sizes.append_rounds // 20, 5), 1
    with open_store(f"sqlite:///{folder / 'decoding-batch-ingest.db'}") as store:
        service = store.service
        bodies = renamed(body, (rounds + warmup) * BATCH)

        def ours() -> None:
            with store.grouped():  # as batch ingest does: each conversation started
                for _ in range(BATCH):  # in its response's first transaction
                    _, outcome = service.ingest_exchange(None, [], decode([next(bodies)]))
                    assert outcome.ended == "completed" and outcome.events

        def baseline() -> None:
            for _ in range(BATCH):
                for _ in decode([body]):
                    pass

        timings = interleave({"ingest": ours, "decode": baseline}, rounds=rounds, warmup=warmup)
    return Figure(
        "8i",
        title,
        subject + ", each response into a conversation of its own",
        f"decode_stream alone, the same body {BATCH} times",
        "throughput",
        timings.median("ingest"),
        timings.median("decode"),
        ratio=timings.throughput_ratio("ingest", "decode"),
        target=(">=", 0.5),
        note=f"per {BATCH} responses, commit included; {path.relative_to(ROOT.parent)}; "
        f"median of {rounds} interleaved rounds",
        extra={"timings": timings.summary()},
    ).judge()


def _read(path: Path) -> Iterator[bytes]:
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK):
            yield chunk


def memory_figure(letter: str, provider: Provider, sizes: Sizes, folder: Path) -> Figure:
    """8f-8h: peak memory of ingesting a synthetic stream from a file."""
    # The quick run keeps the largest block (so the recorder's 4 MiB buffer weighs the
    # same against it) and writes fewer of them.
    total, largest_block = (24 * MiB, 8 * MiB) if sizes.quick else (100 * MiB, 8 * MiB)
    # At least three blocks: OpenAI's final event (every item again) is then the largest.
    blocks = block_sizes(max(total // _copies(provider), 5 * largest_block // 2), largest_block)
    path = folder / f"decoding-{provider.examples}.sse"
    database = folder / f"decoding-memory-{provider.examples}.db"
    try:
        assert provider.synthetic is not None
        with path.open("wb") as out:
            largest_event = provider.synthetic(out, blocks)
        largest = max(*blocks, largest_event)
        stream_bytes = path.stat().st_size
        with open_store(f"sqlite:///{database}") as store:
            conversation = store.service.start()
            gc.collect()
            tracemalloc.start()
            try:
                start = tracemalloc.get_traced_memory()[0]
                tracemalloc.reset_peak()
                outcome = store.service.ingest(
                    conversation, provider.decode(_read(path), request=provider.request)
                )
                peak = tracemalloc.get_traced_memory()[1] - start
            finally:
                tracemalloc.stop()
        assert outcome.ended == "completed", outcome
    finally:
        path.unlink(missing_ok=True)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{database}{suffix}").unlink(missing_ok=True)
    unit = "largest event's data" if largest_event > max(blocks) else "largest block's text"
    return Figure(
        f"8{letter}",
        f"{provider.name} ingest peak memory, {stream_bytes / MiB:.0f} MiB stream",
        "tracemalloc peak above the start, ingesting the stream from a file in 64 KiB chunks",
        f"the stream's largest block ({unit})",
        "memory",
        float(peak),
        float(largest),
        unit="B",
        ratio=peak / largest,
        target=("<=", 4.0),
        note=f"{len(blocks)} text blocks of {min(blocks) / MiB:.1f}-{max(blocks) / MiB:.1f} MiB "
        f"(ASCII) in ~8 KiB deltas; largest event {largest_event / MiB:.2f} MiB; "
        f"{outcome.events} events recorded; peak / largest block's text "
        f"{peak / max(blocks):.2f}x",
        extra={"stream_bytes": stream_bytes, "blocks": blocks, "largest_event": largest_event},
    ).judge()


def _copies(provider: Provider) -> int:
    """How many times the provider's stream carries each block's text (the synthetic
    stream's total is about this many times its text)."""
    return 5 if provider.name == "OpenAI" else 1


def decoding_figures(sizes: Sizes, folder: Path) -> list[Figure]:
    """Figures 8a-8j."""
    figures = [throughput_figure(letter, p, sizes) for letter, p in PROVIDERS.items()]
    figures.append(throughput_figure("j", CHAT, sizes))
    figures += ingest_figures(sizes, folder)
    figures.append(batch_ingest_figure(sizes, folder))
    for letter, provider in zip("fgh", PROVIDERS.values(), strict=True):
        figures.append(memory_figure(letter, provider, sizes, folder))
    return figures


__all__ = ["block_sizes", "captures", "decoding_figures"]
