"""Seeded mutation fuzzing of the SSE framer and every provider decoder (issue 6, item 2).

Reliability scenarios 11, 12, 13, 15, 21 and 23 (see RELIABILITY.md) on inputs no
hand-written case reaches: every capture in `examples/*/` and, when present,
`../shared/wire` is a seed; hypothesis mutates it structurally (events duplicated,
dropped, reordered, spliced in from other captures and providers; JSON values replaced by
hostile ones, grafted from other captures, retyped, removed, nudged out of range), then
byte by byte (flips, insertions, truncation), and re-chunks it at random boundaries.

The oracle, for each decoder entry point (`ProviderAdapter.decode`/`history` from the
registry, each provider's `decode_stream`/`decode_message`/`decode_array`, and the SSE
framer):

- only the documented errors: `DecodeError` (its subclasses `SSEDecodeError` and
  `HistoryMismatch` included); anything else is a decoder bug;
- what decodes is recorded through the application service into a store, and the
  aggregate must accept it (a refusal is a decoder bug), and chunking does not change it;
- no hang: a hypothesis deadline per example, and on large inputs a CPU-time budget
  proportional to their size;
- bounded memory: on large mutated streams, the tracemalloc peak while decoding is at
  most `MEMORY_FACTOR` times the largest unit held whole (a block's text, or an event's
  data) plus a constant, the 4x the design targets.

Scenario 37 (type confusion) sweeps every field of every seed's request and response
instead: each is given a value of every other JSON type (`CONFUSIONS`); the request goes
through `ingest --request` (the history path), the response through every decoder, with
the same oracle, and a replaced usage counter changes no counter but its own.

`make test` runs a fixed (derandomized) sample in well under a minute; the
`@pytest.mark.soak` twins run many more random examples and print a reproduction blob
(the type-confusion sweep, whole).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import itertools
import json
import re
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore.adapters.anthropic import decode as anthropic_decode
from convstore.adapters.google import decode as google_decode
from convstore.adapters.openai import decode as openai_decode
from convstore.adapters.openai_chat import decode as chat_decode
from convstore.adapters.recording.jobs import CHUNK_BYTES, ingest, read_capture
from convstore.adapters.wire.names import PROVIDERS
from convstore.adapters.wire.providers import adapter
from convstore.adapters.wire.sse import SSEDecodeError, SSEFramer, iter_events
from convstore.domain.conversation import Conversation
from convstore.domain.errors import DecodeError
from convstore.domain.events import Event
from convstore.domain.responses import ResponseRecorder
from convstore.domain.service import ConversationService
from convstore.domain.vocabulary import ProviderPayload, check_json_document
from convstore.storage import Store, open_store
from convstore.storage.repository import EventRepository

ROOT: Final = Path(__file__).resolve().parents[1]
EXAMPLES: Final = ROOT / "examples"
WIRE: Final = ROOT.parent / "shared" / "wire"
WIRE_FOLDERS: Final = {
    "anthropic": "anthropic",
    "openai": "openai",
    "google": "gemini",
    "openai-chat": "openai-chat",
}
"""Each provider's folder in `../shared/wire` (Gemini's is named after the API)."""
MODEL_CALL: Final = re.compile(
    r"/messages$|/responses$|:(stream)?[gG]enerateContent$|/chat/completions$"
)
"""The paths of model exchanges; the corpus's other exchanges (file set-up) are not seeds."""

MEMORY_FACTOR: Final = 4
"""Peak allocation while decoding ≤ this times the largest unit held whole (DESIGN.md, the
100 MB figure: < 4x its largest block) …"""
MEMORY_SLACK: Final = 4 * 1024 * 1024
"""… plus this constant (interpreter and decoder set-up, small events, buffers)."""
CPU_SECONDS_PER_MIB: Final = 1.0
"""A hang check, not a speed test: decoders run at tens of MB/s, so this is ~50x slack."""
CPU_SECONDS_BASE: Final = 5.0

FAST: Final = settings(
    derandomize=True,
    database=None,
    deadline=None,  # tests assert no timings: a loaded machine must not fail them
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""`make test`: the same examples every run (stable in CI), no deadline."""
SOAK: Final = settings(
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""`make soak`: fresh random examples each run; a failure prints its reproduction blob."""


# --- seeds ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    """One recorded model exchange: its response body, request body and HTTP status, and
    the exchanges before it in its sequence (what a conversation holds before it)."""

    provider: str
    name: str
    body: bytes
    request: bytes | None
    status: int | None
    earlier: tuple[Path, ...]
    """The earlier response files of the sequence, ingested unmutated before this one."""
    earlier_request: Path | None
    """The request file of the first earlier exchange (its history)."""


def _exchanges(folder: Path) -> list[tuple[int, Path, Path | None, int | None, bool]]:
    """(n, response file, request file, status, is a model call) of a sequence's exchanges."""
    found = []
    for response in folder.glob("*.response.*"):
        n = response.name.split(".")[0]
        meta_file = folder / f"{n}.meta.json"
        meta = json.loads(meta_file.read_bytes()) if meta_file.exists() else {}
        request = folder / f"{n}.request.json"
        model_call = not meta.get("path") or bool(MODEL_CALL.search(meta["path"]))
        status = meta.get("status")
        found.append((int(n), response, request if request.exists() else None, status, model_call))
    return sorted(found, key=lambda exchange: exchange[0])


def _seeds() -> list[Seed]:
    seeds: list[Seed] = []
    for provider in PROVIDERS:
        for root in (EXAMPLES / provider, WIRE / WIRE_FOLDERS[provider]):
            if not root.is_dir():
                continue
            for folder in sorted(path for path in root.iterdir() if path.is_dir()):
                exchanges = [x for x in _exchanges(folder) if x[4]]
                for position, (_, response, request, status, _) in enumerate(exchanges):
                    earlier = exchanges[:position]
                    seeds.append(
                        Seed(
                            provider=provider,
                            name=f"{root.parent.name}/{root.name}/{folder.name}/{response.name}",
                            body=b"".join(read_capture(response)),
                            request=request.read_bytes() if request else None,
                            status=status,
                            earlier=tuple(x[1] for x in earlier),
                            earlier_request=earlier[0][2] if earlier else None,
                        )
                    )
    return seeds


SEEDS: Final = _seeds()
SEEDS_OF: Final = {p: [s for s in SEEDS if s.provider == p] for p in PROVIDERS}


# --- units: a body as SSE blocks (or one JSON document), and the JSON inside each -------------

_BLOCK_END: Final = re.compile(rb"\r\n\r\n|\n\n")


def _units(body: bytes) -> list[bytes]:
    """An SSE body's blocks, each with the blank line that ends it; a JSON body whole."""
    if not body.lstrip().startswith((b"event:", b"data:", b":", b"id:")):
        return [body]
    units, start = [], 0
    for match in _BLOCK_END.finditer(body):
        units.append(body[start : match.end()])
        start = match.end()
    if start < len(body):
        units.append(body[start:])
    return units


@dataclass(frozen=True)
class Parsed:
    """A unit's JSON (an SSE block's one data line, or a JSON body) and what surrounds it."""

    before: bytes
    value: Any
    after: bytes
    paths: tuple[tuple[Any, ...], ...]
    dicts: tuple[tuple[Any, ...], ...]
    ints: tuple[tuple[Any, ...], ...]
    strings: tuple[tuple[Any, ...], ...]


MAX_PATHS: Final = 4000


@functools.lru_cache(maxsize=4096)
def _parsed(unit: bytes) -> Parsed | None:
    """The unit's JSON with the paths to its nodes by kind, or None when it holds none."""
    start = 0
    if not unit.lstrip().startswith((b"{", b"[")):
        match = re.search(rb"^data: ?", unit, re.MULTILINE)
        if match is None:
            return None
        start = match.end()
    end = unit.find(b"\n", start) if start else len(unit)
    end = len(unit) if end < 0 else end
    try:
        value = json.loads(unit[start:end])
    except (ValueError, RecursionError):
        return None
    paths: list[tuple[Any, ...]] = []
    dicts: list[tuple[Any, ...]] = []
    ints: list[tuple[Any, ...]] = []
    strings: list[tuple[Any, ...]] = []
    stack: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while stack and len(paths) < MAX_PATHS:
        path, node = stack.pop()
        paths.append(path)
        if isinstance(node, dict):
            dicts.append(path)
            stack.extend(((*path, key), child) for key, child in node.items())
        elif isinstance(node, list):
            stack.extend(((*path, index), child) for index, child in enumerate(node))
        elif isinstance(node, int) and not isinstance(node, bool):
            ints.append(path)
        elif isinstance(node, str):
            strings.append(path)
    return Parsed(
        unit[:start], value, unit[end:], tuple(paths), tuple(dicts), tuple(ints), tuple(strings)
    )


_SENTINEL: Final = "\ue000fuzz\ue000"
_SENTINEL_JSON: Final = json.dumps(_SENTINEL, ensure_ascii=False).encode()


def _get(value: Any, path: Sequence[Any]) -> Any:
    for step in path:
        value = value[step]
    return value


def _with(value: Any, path: Sequence[Any], new: Any) -> Any:
    """`value` with the node at `path` replaced (copied along the path only); a `_DELETE`
    marks the node removed from its parent."""
    if not path:
        return new
    step, rest = path[0], path[1:]
    copy = dict(value) if isinstance(value, dict) else list(value)
    child = _with(value[step], rest, new)
    if child is _DELETE:
        del copy[step]
    else:
        copy[step] = child
    return copy


_DELETE: Final = object()


def _encode(value: Any) -> bytes:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", "surrogatepass")


def _rebuilt(parsed: Parsed, path: Sequence[Any], raw: bytes | None) -> bytes:
    """The unit with the node at `path` replaced by the JSON text `raw` (None: removed)."""
    node = _DELETE if raw is None else _SENTINEL
    text = _encode(_with(parsed.value, path, node))
    if raw is not None:
        text = text.replace(_SENTINEL_JSON, raw, 1)
    return parsed.before + text + parsed.after


# --- what a mutation puts in ------------------------------------------------------------------

HOSTILE_VALUES: Final[tuple[bytes, ...]] = (
    b"null",
    b"true",
    b"0",
    b"-1",
    b"1.5",
    b"-0.0",
    b"1e400",
    b"-1e400",
    b"1e308",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"9" * 400,
    b'""',
    b'"x"',
    b"{}",
    b"[]",
    b"[{}]",
    b"[null]",
    b'{"type":null}',
    b'{"type":"fuzz_unknown"}',
    b'"\\ud800"',
    b'"\\udc00\\ud800x"',
    b'"\xff\xfe"',
    b'"\xc0\xaf"',
    b'"\xed\xa0\x80"',
    b'"a\\u0000b"',
    b'"\x1b]0;title\x07"',
    b"[" * 3000 + b"]" * 3000,
    b'{"a":' * 3000 + b"1" + b"}" * 3000,
    b"[" * 100_000 + b"]" * 100_000,
    b"[" * 50_000,
)
"""JSON values no provider sends: edge numbers, every type, lone surrogates, invalid
UTF-8, control characters, deep nesting (closed and not)."""

RESIZED_MAX: Final = 1 << 18
"""The longest a repeated string grows to (characters): repeats of repeats of a long
encrypted value must not make a capture of tens of megabytes."""

NUDGES: Final = (-1, 1, 2, -(2**31), 2**31, 2**63, 10**6, -(10**6), 10**30)
"""What an integer is moved by: just out of range, or far out."""

BYTES: Final[tuple[bytes, ...]] = (
    *(b"\n", b"\r", b"\r\n", b"\n\n", b"\x00", b"\xff", b"\xc3", b"\xe2\x80", b"}", b"]"),
    *(b'"', b"data: ", b"event: error\n", b":\n", b"\xef\xbb\xbf", b"\\", b"\\u"),
)
"""What a byte mutation inserts: line endings, NUL, bytes no UTF-8 text starts with or
cut sequences, JSON punctuation, field names, a BOM, escapes."""


def _every_unit() -> list[bytes]:
    return [unit for seed in SEEDS for unit in _units(seed.body)]


def _types() -> tuple[str, ...]:
    """Every `type` value the seeds hold: a node retyped as another known kind."""
    found = {"fuzz_unknown", ""}
    for unit in ALL_UNITS:
        parsed = _parsed(unit)
        if parsed is not None:
            for path in parsed.dicts:
                kind = _get(parsed.value, path).get("type")
                if isinstance(kind, str):
                    found.add(kind)
    return tuple(sorted(found))


def _grafts() -> tuple[bytes, ...]:
    """Small JSON subtrees of every seed: what a node is replaced by to confuse its type."""
    found: set[bytes] = set()
    for unit in ALL_UNITS:
        parsed = _parsed(unit)
        if parsed is not None:
            for path in parsed.paths:
                node = _get(parsed.value, path)
                if isinstance(node, dict | list) and node:
                    text = _encode(node)
                    if len(text) <= 2048:
                        found.add(text)
    return tuple(sorted(found))


ALL_UNITS: Final = _every_unit()
TYPES: Final = _types()
GRAFTS: Final = _grafts()


# --- mutations --------------------------------------------------------------------------------

_index = st.integers(0, 2**16)


def _value_ops() -> st.SearchStrategy[tuple[Any, ...]]:
    """A change to one JSON node of one unit: (kind, unit, node, argument)."""
    return st.one_of(
        st.tuples(st.just("hostile"), _index, _index, st.sampled_from(HOSTILE_VALUES)),
        st.tuples(st.just("graft"), _index, _index, _index),
        st.tuples(st.just("drop_key"), _index, _index, st.none()),
        st.tuples(st.just("dup_key"), _index, _index, st.sampled_from(HOSTILE_VALUES[:20])),
        st.tuples(st.just("retype"), _index, _index, _index),
        st.tuples(st.just("nudge"), _index, _index, st.sampled_from(NUDGES)),
        st.tuples(st.just("resize"), _index, _index, st.integers(-8, 64)),
    )


def _event_ops() -> st.SearchStrategy[tuple[Any, ...]]:
    """A change to the sequence of units: (kind, unit, other unit or seed unit)."""
    kinds = st.sampled_from(("dup_unit", "drop_unit", "swap", "splice"))
    return st.tuples(kinds, _index, _index)


def _byte_ops() -> st.SearchStrategy[tuple[Any, ...]]:
    """A change to the serialized bytes: (kind, position, argument)."""
    return st.one_of(
        st.tuples(st.just("flip"), _index, st.integers(0, 255)),
        st.tuples(st.just("insert"), _index, st.sampled_from(BYTES)),
        st.tuples(st.just("delete"), _index, st.integers(1, 64)),
        st.tuples(st.just("cut"), _index, st.none()),
    )


def _apply_value(units: list[bytes], op: tuple[Any, ...]) -> None:
    kind, at, node, argument = op
    if not units:
        return
    at %= len(units)
    parsed = _parsed(units[at])
    if parsed is None:
        return
    pools = {"drop_key": parsed.paths[1:], "nudge": parsed.ints, "resize": parsed.strings}
    candidates = pools.get(kind, parsed.dicts if kind in ("dup_key", "retype") else parsed.paths)
    if kind == "drop_key":
        candidates = tuple(p for p in candidates if isinstance(p[-1], str))
    if not candidates:
        return
    path = candidates[node % len(candidates)]
    current = _get(parsed.value, path)
    raw: bytes | None
    if kind == "hostile":
        raw = argument
    elif kind == "graft":
        raw = GRAFTS[argument % len(GRAFTS)]
    elif kind == "drop_key":
        raw = None
    elif kind == "dup_key":
        if not current:
            return
        key = next(iter(current))
        raw = b"{" + _encode(key) + b":" + argument + b"," + _encode(current)[1:]
    elif kind == "retype":
        raw = _encode({**current, "type": TYPES[argument % len(TYPES)]})
    elif kind == "nudge":
        raw = str(current + argument).encode()
    else:  # resize: a string cut short, or repeated (offsets into it go out of range)
        times = max(1, min(argument, RESIZED_MAX // max(len(current), 1)))
        raw = _encode(current[: -argument or None] if argument <= 0 else current * times)
    units[at] = _rebuilt(parsed, path, raw)


def _apply_event(units: list[bytes], op: tuple[Any, ...]) -> None:
    kind, at, other = op
    if kind == "splice":
        units.insert(at % (len(units) + 1), ALL_UNITS[other % len(ALL_UNITS)])
        return
    if not units:
        return
    at %= len(units)
    other %= len(units)
    if kind == "dup_unit":
        units.insert(other, units[at])
    elif kind == "drop_unit":
        del units[at]
    else:
        units[at], units[other] = units[other], units[at]


def _apply_bytes(body: bytes, op: tuple[Any, ...]) -> bytes:
    kind, at, argument = op
    at %= len(body) + 1
    if kind == "flip":
        return body[:at] + bytes((argument,)) + body[at + 1 :]
    if kind == "insert":
        inserted: bytes = argument
        return body[:at] + inserted + body[at:]
    if kind == "delete":
        return body[:at] + body[at + argument :]
    return body[:at]


@dataclass(frozen=True)
class Mutant:
    """A mutated exchange of one seed, cut into chunks."""

    seed: Seed
    body: bytes
    request: bytes | None
    status: int | None
    cuts: tuple[int, ...]

    def chunks(self) -> list[bytes]:
        """The body cut at `cuts` (empty chunks included: a reader may deliver them)."""
        edges = (0, *sorted(c % (len(self.body) + 1) for c in self.cuts), len(self.body))
        return [self.body[a:b] for a, b in itertools.pairwise(edges)]

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """How hypothesis prints a failing example: the bytes, and the seed's name only."""
        printer.text(repr(self))

    def __repr__(self) -> str:
        body = (
            repr(self.body)
            if len(self.body) <= REPR_BYTES
            else f"<{len(self.body)} bytes, sha256 {hashlib.sha256(self.body).hexdigest()[:16]}>"
        )
        return (
            f"Mutant(seed={self.seed.name!r}, body={body}, request={self.request!r}, "
            f"status={self.status!r}, cuts={self.cuts!r})"
        )


REPR_BYTES: Final = 256 * 1024
"""A larger mutated body is named by its size and digest (reproduce it from the blob)."""


def mutate(
    body: bytes, value_ops: Iterable[Any], event_ops: Iterable[Any], byte_ops: Iterable[Any]
) -> bytes:
    """`body` with the structured mutations applied, then the byte mutations."""
    units = _units(body)
    for op in event_ops:
        _apply_event(units, op)
    for op in value_ops:
        _apply_value(units, op)
    mutated = b"".join(units)
    for op in byte_ops:
        mutated = _apply_bytes(mutated, op)
    return mutated


@st.composite
def mutants(
    draw: st.DrawFn, provider: str, *, request_ops: bool = True, with_request: bool = False
) -> Mutant:
    """A seed of `provider` (`with_request`: one with a request body), mutated: events,
    JSON values and bytes, cut into chunks."""
    seeds = SEEDS_OF[provider]
    if with_request:
        seeds = [seed for seed in seeds if seed.request is not None]
    seed = draw(st.sampled_from(seeds))
    body = mutate(
        seed.body,
        draw(st.lists(_value_ops(), max_size=4)),
        draw(st.lists(_event_ops(), max_size=3)),
        draw(st.lists(_byte_ops(), max_size=2)),
    )
    request = seed.request
    if request is not None and request_ops:
        request = mutate(request, draw(st.lists(_value_ops(), max_size=2)), (), ())
    status = draw(st.sampled_from((seed.status, None, 200, 400, 500, 529)))
    cuts = tuple(draw(st.lists(st.integers(0, 2**20), max_size=6)))
    return Mutant(seed, body, request, status, cuts)


# --- the oracle -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    """An in-memory SQLite store: decoded drafts are recorded through its service."""
    with open_store("sqlite:///:memory:") as opened:
        yield opened


def decode_or_refuse(decode: Callable[[], Iterable[Event]]) -> list[Event] | None:
    """The drafts `decode` yields, or None when it refuses the input with a DecodeError;
    any other exception propagates (a decoder bug)."""
    try:
        return list(decode())
    except DecodeError:
        return None


def record(service: ConversationService, drafts: list[Event]) -> None:
    """Record drafts as one response of a new conversation: the aggregate must accept them
    and the store write them. (Written without the store-wide response index: mutants of
    one capture share its response id, and a response is indexed once per store.)"""
    repository = service.repository
    assert isinstance(repository, EventRepository)

    def save(conversation: Conversation) -> None:
        events = conversation.collect_events()
        repository.recorder.append([repository.mapper.to_stored_event(e) for e in events])

    for draft in drafts:  # decoders mark their payloads checked: each must be one
        for payload in _payloads(draft):  # JSON document all the same
            check_json_document(payload.raw)
    ResponseRecorder(Conversation.start("fuzz"), save).record(drafts)


def _payloads(event: Event) -> list[ProviderPayload]:
    """The payloads an event carries (its own, its citations' replays, its request's)."""
    found = [getattr(event, "payload", None)]
    found += [a.replay for a in getattr(event, "attributions", ())]
    settings = getattr(event, "settings", None)
    found.append(None if settings is None else settings.native)
    return [payload for payload in found if payload is not None]


def check_decode(service: ConversationService, provider: str, mutant: Mutant) -> None:
    """The registry's decode, chunked and whole: a DecodeError or drafts the store records,
    the same either way."""
    decode = adapter(provider).decode
    chunked = decode_or_refuse(lambda: decode(mutant.chunks(), mutant.request, mutant.status))
    whole = decode_or_refuse(lambda: decode(mutant.body, mutant.request, mutant.status))
    assert chunked == whole
    if chunked is not None:
        record(service, chunked)


DIRECT: Final[dict[str, tuple[Callable[..., Iterable[Event]], ...]]] = {
    "anthropic": (anthropic_decode.decode_stream, anthropic_decode.decode_message),
    "openai": (openai_decode.decode_stream, openai_decode.decode_message),
    "google": (
        google_decode.decode_stream,
        google_decode.decode_array,
        google_decode.decode_message,
    ),
    "openai-chat": (chat_decode.decode_stream, chat_decode.decode_message),
}
"""Each provider's decoders by body shape, called directly whatever the body's shape."""


def check_direct(service: ConversationService, provider: str, mutant: Mutant) -> None:
    """Each shape's decoder on any body: a DecodeError or drafts the store records."""
    for decode in DIRECT[provider]:
        given = mutant.body if decode.__name__ == "decode_message" else mutant.chunks()
        drafts = decode_or_refuse(functools.partial(decode, given))
        if drafts is not None:
            record(service, drafts)


def check_framer(body: bytes, chunks: Sequence[bytes], max_event_bytes: int) -> None:
    """The framer's readings (`feed`, `feed_data`, `iter_events` of the whole body) agree,
    and raise nothing but SSEDecodeError."""

    def read(feed: Callable[[SSEFramer, bytes], list[Any]]) -> list[str] | None:
        framer = SSEFramer(max_event_bytes=max_event_bytes)
        try:
            out = [x for chunk in chunks for x in feed(framer, chunk)]
            closed = framer.close()
        except SSEDecodeError:
            return None
        datas = [x.data if hasattr(x, "data") else x.decode() for x in out]
        return datas + [event.data for event in closed]

    by_event = read(SSEFramer.feed)
    assert read(SSEFramer.feed_data) == by_event
    try:
        whole: list[str] | None = [
            e.data for e in iter_events([body], max_event_bytes=max_event_bytes)
        ]
    except SSEDecodeError:
        whole = None
    if max_event_bytes >= len(body):
        # Under a cap it reaches, chunking may matter (by design): the line being
        # received counts against the cap, whatever its field, and a line read whole
        # was never "being received".
        assert whole == by_event


def check_history(service: ConversationService, folder: Path, mutant: Mutant) -> None:
    """`ingest --request` with a mutated request and response, in a conversation holding
    the exchanges before it (unmutated): the history decoder and the response decoder end
    in drafts the store records, or in a DecodeError the ingest reports; nothing escapes.
    The store's response index is emptied first: the mutants of one capture share its
    response id, and a response is stored once per store, so each example starts its own
    conversation as it would in a store of its own (opening one per example doubled the
    soak's time)."""
    repository = service.repository
    assert isinstance(repository, EventRepository)
    with repository.recorder.view_transaction("fuzz") as cursor:
        cursor.execute("DELETE FROM responses")
    seed = mutant.seed
    conversation = None
    if seed.earlier:
        before = ingest(
            service,
            seed.provider,
            seed.earlier,
            request=seed.earlier_request.read_bytes() if seed.earlier_request else None,
        )
        assert before.error is None, before.error  # the captures themselves are readable
        conversation = before.conversation_id
    response = folder / "response"
    response.write_bytes(mutant.body)
    ingest(service, seed.provider, [response], request=mutant.request, conversation_id=conversation)


# --- memory and time on large mutated streams ---------------------------------------------------

PIECE: Final = (b"lorem ipsum dolor sit amet, " * 2400)[:65536].decode()
"""The text one inflated delta carries (64 KiB of ASCII)."""


def _delta_unit(units: Sequence[bytes]) -> tuple[int, tuple[Any, ...]] | None:
    """The first unit carrying a text piece (a `…delta` event's text, or a Gemini chunk's
    part text) and the path to that text."""
    for at, unit in enumerate(units):
        parsed = _parsed(unit)
        if parsed is None or not isinstance(parsed.value, dict):
            continue
        delta = "delta" in str(parsed.value.get("type", ""))
        for path in parsed.strings:
            if path and path[-1] in ("text", "delta") and (delta or "parts" in path):
                return at, path
    return None


def inflated(body: bytes, block_bytes: int) -> bytes | None:
    """A stream whose first text block is about `block_bytes` long: its first text piece
    made 64 KiB and repeated in place (None when the stream has no text piece)."""
    units = _units(body)
    found = _delta_unit(units)
    if found is None:
        return None
    at, path = found
    parsed = _parsed(units[at])
    assert parsed is not None
    big = _rebuilt(parsed, path, _encode(PIECE))
    units[at : at + 1] = [big] * max(1, block_bytes // len(PIECE))
    return b"".join(units)


LARGE_SEEDS: Final = [
    seed
    for seed in SEEDS
    if _units(seed.body)[0].lstrip().startswith((b"event:", b"data:"))
    and _delta_unit(_units(seed.body)) is not None
]
"""The streams an inflated copy can be made of."""


def _largest(value: Any) -> int:
    """The size in memory of the largest text or bytes value inside a draft (a text with
    a character past U+00FF takes 2 or 4 bytes a character, whatever its UTF-8 size)."""
    if isinstance(value, str):
        return sys.getsizeof(value)
    if isinstance(value, bytes | msgspec.Raw):
        return len(value)
    if isinstance(value, msgspec.Struct):
        value = msgspec.structs.astuple(value)
    elif isinstance(value, dict):
        value = (*value.keys(), *value.values())
    if isinstance(value, tuple | list):
        return max(map(_largest, value), default=0)
    return 0


def largest_unit(body: bytes, drafts: Iterable[Event]) -> int:
    """The largest unit a decoder must hold whole: an SSE event's data, or a block's
    text (the largest value of a draft, or the inflated block's pieces as streamed: a
    decoder that takes the text from the item's final event holds them until then)."""
    framer = SSEFramer()
    try:
        data = [
            len(d)
            for i in range(0, len(body), CHUNK_BYTES)
            for d in framer.feed_data(body[i : i + CHUNK_BYTES])
        ]
        data += [len(event.data.encode()) for event in framer.close()]
    except SSEDecodeError:
        data = []
    streamed = body.count(PIECE.encode()) * len(PIECE)
    return max([streamed, *data, *map(_largest, drafts)])


def check_memory_and_time(provider: str, body: bytes, request: bytes | None) -> tuple[int, int]:
    """Decode `body` read as `ingest` reads a file; the peak allocation (tracemalloc, above
    the start) stays within `MEMORY_FACTOR` x the largest unit + `MEMORY_SLACK`, and the
    CPU time within a size-proportional budget. Returns (peak, largest unit)."""
    decode = adapter(provider).decode
    largest = largest_unit(body, decode_or_refuse(lambda: decode(body, request, None)) or ())
    chunks = [body[i : i + CHUNK_BYTES] for i in range(0, len(body), CHUNK_BYTES)]
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        began = time.process_time()
        try:
            for _ in decode(iter(chunks), request, None):
                pass
        except DecodeError:
            pass
        spent = time.process_time() - began
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    budget = CPU_SECONDS_BASE + CPU_SECONDS_PER_MIB * len(body) / 2**20
    assert spent <= budget, f"{spent:.1f} s of CPU for {len(body)} bytes: a hang?"
    assert peak <= MEMORY_FACTOR * largest + MEMORY_SLACK, (
        f"peak {peak} B for a largest unit of {largest} B ({peak / max(largest, 1):.2f}x)"
    )
    return peak, largest


@st.composite
def large_mutants(draw: st.DrawFn, block_bytes: int) -> Mutant:
    """An inflated stream (a text block of about `block_bytes`), its events mutated
    (duplicated, dropped, reordered, spliced) and its bytes (flipped, cut)."""
    seed = draw(st.sampled_from(LARGE_SEEDS))
    body = inflated(seed.body, block_bytes)
    assert body is not None
    body = mutate(
        body,
        (),
        draw(st.lists(_event_ops(), max_size=3)),
        draw(st.lists(_byte_ops(), max_size=2)),
    )
    return Mutant(seed, body, seed.request, None, ())


# --- the fuzz tests: a fixed sample for make test, many random examples under soak ------------

ANY_MUTANT: Final = st.one_of([mutants(provider) for provider in PROVIDERS])
WITH_REQUEST: Final = st.one_of([mutants(provider, with_request=True) for provider in PROVIDERS])
FRAMED: Final = st.one_of([mutants(provider, request_ops=False) for provider in PROVIDERS])


def fuzz_decode(store: Store, mutant: Mutant) -> None:
    """Scenarios 23, 13, 11, 12: any mutation of a capture, through the registry's decode
    with its (mutated) request and any status, is refused with DecodeError or decodes to
    drafts the aggregate accepts; chunking does not change the result; each shape's
    decoder, given any body, does the same."""
    check_decode(store.service, mutant.seed.provider, mutant)
    check_direct(store.service, mutant.seed.provider, mutant)


def fuzz_history(store: Store, folder: Path, mutant: Mutant) -> None:
    """Scenarios 23, 13: mutated requests through `ingest --request` (see `check_history`)."""
    check_history(store.service, folder, mutant)


def fuzz_framer(mutant: Mutant, max_event_bytes: int) -> None:
    """Scenario 15: the framer on mutated captures of every provider, under any event cap:
    `feed`, `feed_data` and `iter_events` agree, and raise nothing but SSEDecodeError."""
    check_framer(mutant.body, mutant.chunks(), max_event_bytes)


@settings(FAST, max_examples=1000)
@given(mutant=ANY_MUTANT)
def test_mutated_captures_decode_or_raise_decode_error(store: Store, mutant: Mutant) -> None:
    """Scenarios 23, 13, 11, 12 (see `fuzz_decode`)."""
    fuzz_decode(store, mutant)


@settings(FAST, max_examples=300)
@given(mutant=WITH_REQUEST)
def test_mutated_requests_ingest_or_report_a_decode_error(
    store: Store, tmp_path_factory: pytest.TempPathFactory, mutant: Mutant
) -> None:
    """Scenarios 23, 13 (see `fuzz_history`)."""
    fuzz_history(store, tmp_path_factory.getbasetemp(), mutant)


@settings(FAST, max_examples=400)
@given(mutant=FRAMED, max_event_bytes=st.sampled_from((1, 64, 4096, 2**26)))
def test_mutated_captures_frame_alike(mutant: Mutant, max_event_bytes: int) -> None:
    """Scenario 15 (see `fuzz_framer`)."""
    fuzz_framer(mutant, max_event_bytes)


@settings(FAST, max_examples=6, deadline=None)
@given(mutant=large_mutants(4 * 2**20))
def test_large_mutated_streams_keep_memory_and_time_bounded(mutant: Mutant) -> None:
    """Scenario 21: a stream with a 4 MiB text block, mutated, decodes within 4x its largest
    unit (plus a constant) of memory and a size-proportional CPU time."""
    check_memory_and_time(mutant.seed.provider, mutant.body, mutant.request)


@pytest.mark.soak
@settings(SOAK, max_examples=15, deadline=None)
@given(mutant=large_mutants(16 * 2**20))
def test_soak_large_mutated_streams_keep_memory_and_time_bounded(mutant: Mutant) -> None:
    """Scenario 21 with 16 MiB blocks and more examples (see the make-test twin)."""
    check_memory_and_time(mutant.seed.provider, mutant.body, mutant.request)


@pytest.mark.soak
@settings(SOAK, max_examples=6000)
@given(mutant=ANY_MUTANT)
def test_soak_mutated_captures_decode_or_raise_decode_error(store: Store, mutant: Mutant) -> None:
    """Scenarios 23, 13, 11, 12, many random examples (see `fuzz_decode`)."""
    fuzz_decode(store, mutant)


@pytest.mark.soak
@settings(SOAK, max_examples=2000)
@given(mutant=WITH_REQUEST)
def test_soak_mutated_requests_ingest_or_report_a_decode_error(
    store: Store, tmp_path_factory: pytest.TempPathFactory, mutant: Mutant
) -> None:
    """Scenarios 23, 13, many random examples (see `fuzz_history`)."""
    fuzz_history(store, tmp_path_factory.getbasetemp(), mutant)


@pytest.mark.soak
@settings(SOAK, max_examples=3000)
@given(mutant=FRAMED, max_event_bytes=st.sampled_from((1, 64, 4096, 2**26)))
def test_soak_mutated_captures_frame_alike(mutant: Mutant, max_event_bytes: int) -> None:
    """Scenario 15, many random examples (see `fuzz_framer`)."""
    fuzz_framer(mutant, max_event_bytes)


# --- type confusion: every field of every capture, given a value of another type -------------

CONFUSIONS: Final[tuple[bytes, ...]] = (
    *(b"{}", b"[]", b'""', b"0", b"-1", b"1e400", b"true", b"null"),
    b'"' + b"x" * 100_000 + b'"',
)
"""Scenario 37: what a field is replaced by: every JSON type, a negative, a number out of
range, a huge string."""
USAGE_FIELDS: Final = frozenset({"usage", "tool_usage", "usageMetadata"})
"""The fields holding a response's usage counters (any provider)."""


@dataclass(frozen=True)
class Site:
    """One field of one capture: in its request (`unit` None) or in a unit of its response."""

    seed: Seed
    unit: int | None
    path: tuple[Any, ...]

    def __repr__(self) -> str:
        return f"Site(seed={self.seed.name!r}, unit={self.unit!r}, path={self.path!r})"


def _sites(seed: Seed) -> list[Site]:
    """Every field (every JSON node but the root) of the seed's request and response."""
    sites: list[Site] = []
    sources = [(None, seed.request)] if seed.request is not None else []
    sources += list(enumerate(_units(seed.body)))
    for unit, data in sources:
        parsed = _parsed(data) if data is not None else None
        if parsed is not None:
            sites.extend(Site(seed, unit, path) for path in parsed.paths if path)
    return sites


SITES: Final = [site for seed in SEEDS for site in _sites(seed)]


def retyped(site: Site, value: bytes) -> Mutant:
    """The seed's exchange with the field at `site` replaced by `value`."""
    seed = site.seed
    if site.unit is None:
        assert seed.request is not None
        parsed = _parsed(seed.request)
        assert parsed is not None
        return Mutant(seed, seed.body, _rebuilt(parsed, site.path, value), seed.status, ())
    units = _units(seed.body)
    parsed = _parsed(units[site.unit])
    assert parsed is not None
    units[site.unit] = _rebuilt(parsed, site.path, value)
    return Mutant(seed, b"".join(units), seed.request, seed.status, (len(seed.body) // 2,))


def _usage_counters(drafts: list[Event] | None) -> dict[str, int] | None:
    """The usage counters of the decoded response, flat; None when it has none."""
    usage = getattr(drafts[-1], "usage", None) if drafts else None
    if usage is None:
        return None
    fields = msgspec.structs.asdict(usage)
    flat = {name: value for name, value in fields.items() if type(value) is int}
    flat.update({f"hosted.{name}": value for name, value in usage.hosted.items()})
    flat.update({f"other.{name}": value for name, value in usage.other.items()})
    return flat


def _counts_under(node: Any) -> int:
    """How many integers a JSON subtree holds (the counters a replacement may take along)."""
    if isinstance(node, dict):
        return sum(_counts_under(child) for child in node.values())
    if isinstance(node, list):
        return sum(_counts_under(child) for child in node)
    return int(type(node) is int)


def check_usage_neighbours(site: Site, value: bytes, mutant: Mutant) -> None:
    """Scenario 37, the fields around a usage counter: a replaced counter (or object of
    counters) changes at most the counters it held; every other counter reads as it did,
    and none reads as a negative number."""
    if site.unit is None or not USAGE_FIELDS & {s for s in site.path if isinstance(s, str)}:
        return
    decode = adapter(site.seed.provider).decode
    before = _usage_counters(decode_or_refuse(lambda: decode(site.seed.body, None, None)))
    after = _usage_counters(decode_or_refuse(lambda: decode(mutant.body, None, None)))
    if before is None or after is None:
        return  # the replacement took the response or its end along (e.g. its `type`)
    assert all(count >= 0 for count in after.values()), after
    changed = {name for name, count in after.items() if before.get(name) != count}
    parsed = _parsed(_units(site.seed.body)[site.unit])
    assert parsed is not None
    usage_at = max(i for i, step in enumerate(site.path) if step in USAGE_FIELDS)
    lists = [i for i, step in enumerate(site.path) if isinstance(step, int) and i > usage_at]
    held = _get(parsed.value, site.path[: lists[-1] + 1] if lists else site.path)
    # A replaced counter is gone, or reads as what replaced it (0, a count wherever it
    # lands), or as an earlier copy's value (a stream's later usage updates an earlier
    # one's), or under another name (a Gemini detail's `modality` replaced): only those.
    allowed = _counts_under(held) + (value == b"0")
    lost = before.keys() - after.keys()
    assert max(len(changed), len(lost)) <= allowed, (before, after)


def fuzz_confusion(store: Store, folder: Path, site: Site, value: bytes) -> None:
    """Scenario 37: the field at `site` given `value`: the request through `ingest
    --request` (the history path), the response through every decoder; a DecodeError or
    a recorded response, never another exception, and the usage counters around it stay."""
    mutant = retyped(site, value)
    if site.unit is None:
        check_history(store.service, folder, mutant)
        return
    check_decode(store.service, site.seed.provider, mutant)
    check_direct(store.service, site.seed.provider, mutant)
    check_usage_neighbours(site, value, mutant)


@settings(FAST, max_examples=1000)
@given(site=st.sampled_from(SITES), value=st.sampled_from(CONFUSIONS))
def test_a_field_of_another_type_is_a_decode_error_or_read_alone(
    store: Store, tmp_path_factory: pytest.TempPathFactory, site: Site, value: bytes
) -> None:
    """Scenario 37 on a fixed sample of (field, value) pairs (see `fuzz_confusion`)."""
    fuzz_confusion(store, tmp_path_factory.getbasetemp(), site, value)


@settings(FAST, max_examples=400)
@given(
    site=st.sampled_from([s for s in SITES if s.unit is not None and USAGE_FIELDS & set(s.path)]),
    value=st.sampled_from(CONFUSIONS),
)
def test_a_usage_counter_of_another_type_leaves_the_others(
    store: Store, tmp_path_factory: pytest.TempPathFactory, site: Site, value: bytes
) -> None:
    """Scenario 37 on a fixed sample of usage fields (see `check_usage_neighbours`)."""
    fuzz_confusion(store, tmp_path_factory.getbasetemp(), site, value)


@pytest.mark.soak
@pytest.mark.parametrize("seed", SEEDS, ids=[seed.name for seed in SEEDS])
def test_soak_every_field_of_every_capture_of_every_type(
    store: Store, tmp_path_factory: pytest.TempPathFactory, seed: Seed
) -> None:
    """Scenario 37, the full sweep: every field of the capture's request and response,
    given each of `CONFUSIONS` (see `fuzz_confusion`)."""
    for site in _sites(seed):
        for value in CONFUSIONS:
            fuzz_confusion(store, tmp_path_factory.getbasetemp(), site, value)


# --- regressions: what the fuzzer found, pinned --------------------------------------------------


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "chunked"])
def test_a_bad_byte_after_an_array_element_keeps_the_elements_before_it(whole: bool) -> None:
    """Scenario 13: a Gemini chunk array broken after its first element keeps that element,
    whether the break arrives in the same read as the element or a later one (the whole
    body used to be refused, as if nothing had arrived)."""
    body = (
        b'[{"candidates":[{"content":{"role":"model","parts":[{"text":"kept"}]}}],'
        b'"responseId":"r1"}\x00,{"candidates":[]}]'
    )
    cut = body.index(b"\x00")
    given = body if whole else [body[:cut], body[cut:]]
    drafts = list(adapter("google").decode(given, None, None))
    assert [type(d).__name__ for d in drafts] == [
        "ResponseStarted",
        "AssistantText",
        "ResponseEnded",
    ]
    assert getattr(drafts[1], "text", None) == "kept"
    assert getattr(drafts[-1], "state", None) == "abandoned"


ROUND_TRIP: Final = {
    "anthropic": "thinking_tool_roundtrip",
    "openai": "reasoning_function_roundtrip",
    "google": "thinking_function_roundtrip",
    "openai-chat": "tool_call_stream",
}
"""Each provider's example whose first response is a stream of several events."""


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
def test_invalid_utf8_late_in_a_read_keeps_the_events_before_it(provider: str, eol: bytes) -> None:
    """Scenario 13: a stream with an invalid UTF-8 byte decodes to the same drafts whether
    the events before the byte arrive in the same read or an earlier one; the response
    ends at the bad byte with what came before it kept (a whole body used to lose it all)."""
    units = _units((EXAMPLES / provider / ROUND_TRIP[provider] / "1.response.sse").read_bytes())
    body = b"".join(units[:3]).replace(b"\r\n", b"\n").replace(b"\n", eol) + b"data: \x80" + eol * 2
    decode = adapter(provider).decode
    whole = list(decode(body, None, None))
    chunked = list(decode([body[: body.index(b"\x80")], body[body.index(b"\x80") :]], None, None))
    assert whole == chunked
    assert len(whole) > 2  # the events before the bad byte made drafts
    assert "invalid UTF-8" in msgspec.json.encode(whole[-1]).decode()


@pytest.mark.parametrize("method", [SSEFramer.feed, SSEFramer.feed_data], ids=["feed", "feed_data"])
@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_an_oversized_event_keeps_the_events_before_it(
    method: Callable[[SSEFramer, bytes], list[Any]], eol: bytes
) -> None:
    """Scenario 21: an event over the cap fails the stream there, and the events completed
    before it in the same read are still delivered (they used to be lost with it, so a
    whole body with an oversized event decoded to no response at all)."""
    framer = SSEFramer(max_event_bytes=100)
    body = b"data: a" + eol + eol + b"event: x" + eol + b"data: " + b"x" * 200 + eol + eol
    got = method(framer, body)
    assert [getattr(x, "data", x) for x in got] in (["a"], [b"a"])
    with pytest.raises(SSEDecodeError, match="exceeds 100 bytes"):
        method(framer, b"data: b" + eol + eol)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_request_body_that_is_not_utf8_is_a_decode_error(provider: str) -> None:
    """Scenario 23: a captured request with invalid UTF-8 in a field kept only raw (here
    `temperature`) is refused with DecodeError; it used to reach the aggregate inside the
    response's settings payload, which refused it (InvalidPayload)."""
    request = b'{"model":"m","temperature":"\xed\xa0\x80","stream":true}'
    body = (EXAMPLES / provider / ROUND_TRIP[provider] / "1.response.sse").read_bytes()
    with pytest.raises(DecodeError, match="not UTF-8"):
        list(adapter(provider).decode(body, request, None))
