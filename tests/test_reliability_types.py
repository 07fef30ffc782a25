"""Reliability scenario 37, type confusion: a JSON value of the wrong type in a request or
response field is a typed DecodeError or that field alone kept raw; never an internal
error, never the loss of the fields around it. The sweep over every field of every capture
is in test_fuzz_decoders.py; these are the classes it found, pinned on the examples.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convstore.adapters.recording.jobs import ingest
from convstore.adapters.wire.counts import (
    MAX_COUNT,
    UNREAD_USAGE,
    count,
    plain_counts_of,
    read_counters,
    read_each,
    usage_fields,
)
from convstore.adapters.wire.providers import adapter, read_payload
from convstore.domain.events import Event, ResponseEnded, UnknownArtifact, UserMessage
from convstore.domain.vocabulary import Usage
from convstore.projections.portable import load
from convstore.storage import Store, open_store

EXAMPLES: Final = Path(__file__).resolve().parents[1] / "examples"

WRONG: Final[dict[str, bytes]] = {
    "out of range": b"1e400",
    "negative": b"-5",
    "fraction": b"1.5",
    "boolean": b"true",
    "string": b'"7"',
    "object": b"{}",
    "list": b"[3]",
    "past 64 bits": b"18446744073709551616",
}
"""What a usage counter is replaced by: each is no count."""

COUNTER: Final = {
    "anthropic": ("thinking_tool_roundtrip/2.response.json", b'"output_tokens":'),
    "openai": ("reasoning_function_roundtrip/2.response.json", b'"output_tokens":'),
    "google": ("thinking_function_roundtrip/2.response.sse", b'"candidatesTokenCount":'),
}
"""Each provider's capture and the counter replaced (its last occurrence): `output_tokens`."""


def _with_counter(body: bytes, key: bytes, value: bytes) -> bytes:
    at = body.rindex(key) + len(key)
    digits = len(body[at:]) - len(body[at:].lstrip(b" "))
    end = at + digits
    while body[end : end + 1].isdigit():
        end += 1
    return body[:at] + b" " * digits + value + body[end:]


def _usage(drafts: list[Event]) -> Usage:
    ended = drafts[-1]
    assert isinstance(ended, ResponseEnded) and ended.usage is not None
    return ended.usage


def _counters(usage: Usage) -> dict[str, int]:
    fields = msgspec.structs.asdict(usage)
    flat = {k: v for k, v in fields.items() if isinstance(v, int)}
    flat.update({f"hosted.{k}": v for k, v in usage.hosted.items()})
    flat.update({f"other.{k}": v for k, v in usage.other.items()})
    return flat


@pytest.mark.parametrize("provider", sorted(COUNTER))
@pytest.mark.parametrize("wrong", sorted(WRONG))
def test_one_bad_usage_counter_drops_only_itself_and_is_kept_raw(
    store: Store, tmp_path: Path, provider: str, wrong: str
) -> None:
    """Scenario 37: one usage counter that is no count (1e400, negative, a fraction, a
    boolean, a string, an object, a list, past 64 bits) is left out of `Usage` and kept raw
    in an `unread_usage` artifact; every other counter and the stop reason stay as they
    were (one 1e400 used to drop every counter, and negative counts were kept as numbers);
    the response records and its portable reading shows no such number."""
    name, key = COUNTER[provider]
    capture = EXAMPLES / provider / name
    body = capture.read_bytes()
    decode = adapter(provider).decode
    clean = list(decode(body, None, None))
    mutated = _with_counter(body, key, WRONG[wrong])
    drafts = list(decode(mutated, None, None))

    before, after = _counters(_usage(clean)), _counters(_usage(drafts))
    assert after == {k: v for k, v in before.items() if k != "output_tokens"}
    assert drafts[-1].stop_reason == clean[-1].stop_reason  # type: ignore[attr-defined]
    kept = [
        d for d in drafts if isinstance(d, UnknownArtifact) and d.payload.format == UNREAD_USAGE
    ]
    assert len(kept) == 1
    assert WRONG[wrong] in kept[0].payload.raw and key.strip(b'":') in kept[0].payload.raw

    path = tmp_path / capture.name
    path.write_bytes(mutated)
    report = ingest(store.service, provider, [path])
    assert report.error is None and report.exit_code == 0
    assert report.conversation_id is not None
    reading = load(store.service, report.conversation_id, read_payload)
    shown = json.loads(msgspec.json.encode(reading))
    numbers = list(_numbers(shown))
    assert all(n >= 0 for n in numbers)  # nothing negative, nothing infinite (JSON has none)


def _numbers(value: Any) -> Any:
    if isinstance(value, dict):
        for child in value.values():
            yield from _numbers(child)
    elif isinstance(value, list):
        for child in value:
            yield from _numbers(child)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield value


def test_a_count_is_a_non_negative_int_below_2_63() -> None:
    """Scenario 37: booleans (Python's `True` is an `int`), fractions, negatives and numbers
    past 64 bits are no counts; a usage object reads each counter alone, nested ones by
    their dotted names, and keeps the rest raw in place."""
    assert [count(v) for v in (0, 7, MAX_COUNT)] == [0, 7, MAX_COUNT]
    assert {count(v) for v in (True, False, -1, 1.0, MAX_COUNT + 1, "7", None, [], {})} == {None}
    raw = (
        b'{"a":1,"b":1e400,"c":{"d":2,"e":-1,"f":{}},"tier":"standard","n":"x","g":null,'
        b'"h":{"i":true}}'
    )
    fields = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
    read = read_counters(fields, named={"n", "h.i"})
    assert read.counts == {"a": 1, "c.d": 2}
    assert msgspec.json.encode(read.unread) == b'{"b":1e400,"c":{"e":-1},"n":"x","h":{"i":true}}'


_USAGE_LEAVES = st.sampled_from(
    [b"0", b"7", b"-1", b"1.0", b"1e400", b"9223372036854775808", b"true", b"null", b'"x"',
     b"[1]", b"[]", b"{}", b"-0", b"9223372036854775807"]
)  # fmt: skip
_USAGE_NAMES = st.sampled_from(["a", "b", "n", "h"])


def _usage_value(depth: int) -> st.SearchStrategy[bytes]:
    if depth == 0:
        return _USAGE_LEAVES
    return _USAGE_LEAVES | st.lists(
        st.tuples(_USAGE_NAMES, _usage_value(depth - 1)), max_size=4
    ).map(lambda items: b"{" + b",".join(b'"%s":%s' % (k.encode(), v) for k, v in items) + b"}")


@given(st.lists(st.tuples(_USAGE_NAMES, _usage_value(3)), max_size=5))
@settings(max_examples=400)
def test_a_usage_object_in_one_decode_reads_as_field_by_field(items: list[Any]) -> None:
    """Scenario 37: the one-decode reading of a usage object gives exactly what reading
    each value from its own bytes gives (or defers to it)."""
    raw = b"{" + b",".join(b'"%s":%s' % (k.encode(), v) for k, v in items) + b"}"
    fields = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
    for named in ({"n", "h.a"}, set(), {"a", "h"}):
        fast, each = read_counters(fields, named), read_each(fields, named)
        assert fast.counts == each.counts and list(fast.counts) == list(each.counts)
        assert msgspec.json.encode(fast.unread) == msgspec.json.encode(each.unread)


_USAGE_OBJECT = st.lists(st.tuples(_USAGE_NAMES, _usage_value(2)), max_size=4).map(
    lambda items: b"{" + b",".join(b'"%s":%s' % (k.encode(), v) for k, v in items) + b"}"
)


@given(st.lists(_USAGE_OBJECT | _USAGE_LEAVES | st.just(b' { "a" : 1 } '), max_size=3))
@settings(max_examples=400)
def test_usage_objects_merged_in_one_decode_read_as_merged_field_by_field(
    raws: list[bytes],
) -> None:
    """Scenario 37: the counts of several usage values (a stream's `message_start` and
    `message_delta`) read in one decode are those of their fields merged one by one, in
    the same order; or the one-decode reading defers (a value that is no object, or
    anything left unread)."""
    values = [msgspec.Raw(raw) for raw in raws if raw.strip() != b"null"]
    fields: dict[str, msgspec.Raw] = {}
    whole = None
    for raw in values:
        whole = usage_fields(raw, fields) or whole
    for named in ({"n", "h.a"}, set(), {"a", "h"}):
        fast = plain_counts_of(values, named)
        if fast is None:
            continue
        assert whole is None
        each = read_each(fields, named)
        assert fast == each.counts and list(fast) == list(each.counts)
        assert not each.unread


@pytest.mark.parametrize("kind", [b"{}", b"[]", b'{"a":[1]}', b"7", b"true"])
def test_an_openai_request_item_whose_type_is_not_a_string_ingests(
    store: Store, tmp_path: Path, kind: bytes
) -> None:
    """Scenario 37: an OpenAI request item whose `type` is an object, a list, a number or
    a boolean is an item of no known kind: `ingest --request` records the history and the
    response (it used to crash with TypeError: unhashable type); the other items still
    read, and the odd item is kept raw."""
    folder = EXAMPLES / "openai" / "compaction"
    request = json.loads((folder / "2.request.json").read_bytes())
    request["input"][2]["type"] = "\ue000"
    body = json.dumps(request).replace('"\\ue000"', kind.decode()).encode()
    with open_store(str(tmp_path / "clean.db")) as other:  # a response is stored once a store
        clean = ingest(other.service, "openai", [folder / "2.response.sse"],
                       request=(folder / "2.request.json").read_bytes())  # fmt: skip
    report = ingest(store.service, "openai", [folder / "2.response.sse"], request=body)
    assert report.error is None, report.error
    assert report.exit_code == 0 and report.conversation_id is not None
    assert report.history_messages == clean.history_messages
    events = list(store.service.events(report.conversation_id))
    texts = [text for e in events if isinstance(e, UserMessage) for text in e.blocks]
    assert texts == [
        part["text"] for item in request["input"] if "role" in item for part in item["content"]
    ]
    kept = [e for e in events if isinstance(e, UnknownArtifact) and kind in e.payload.raw]
    assert kept  # the odd item, raw


def test_an_anthropic_delta_at_index_minus_one_is_not_appended_to_the_last_block() -> None:
    """Scenario 37: a text delta whose `index` is -1 names no block: it is kept as an
    unknown event, read whole or event by event (read whole, the stream's hot path took
    -1 for "the block of the previous delta", its own marker for none, and appended the
    piece to that block's text)."""
    body = (EXAMPLES / "anthropic" / "pause_turn" / "2.response.sse").read_bytes()
    piece = b'"text":"work on the bridge began in 1995 and the"'
    at = body.index(piece)
    start = body.rindex(b'"index":3', 0, at)
    mutated = body[:start] + b'"index":-1' + body[start + len(b'"index":3') :]
    decode = adapter("anthropic").decode
    whole = list(decode(mutated, None, None))
    events = [event + b"\n\n" for event in mutated.split(b"\n\n") if event]
    assert list(decode(events, None, None)) == whole
    kept = [d for d in whole if isinstance(d, UnknownArtifact) and piece in d.payload.raw]
    assert len(kept) == 1
    texts = "".join(getattr(d, "text", "") for d in whole)
    assert "work on the bridge began" not in texts


@pytest.mark.parametrize("number", [b"-1", b"1.5", b"1e400", b"-0.25e-3"])
def test_a_gemini_array_cut_inside_a_number_reads_as_if_whole(number: bytes) -> None:
    """Scenarios 37 and 13: a Gemini chunk array read in pieces, cut after a number's sign,
    point or exponent (`-`, `1.`, `1e`), reads as the whole body does (msgspec calls such
    a cut number malformed, not truncated, and the array used to end there, abandoned)."""
    body = (EXAMPLES / "google" / "streamed_call_arguments" / "2.response.json").read_bytes()
    key = b'"trafficType": "ON_DEMAND"'
    assert key in body
    mutated = body.replace(key, b'"trafficType": ' + number, 1)
    decode = adapter("google").decode
    whole = list(decode(mutated, None, None))
    assert getattr(whole[-1], "state", None) == "completed"
    at = mutated.index(number)
    for cut in range(at, at + len(number) + 1):
        assert list(decode([mutated[:cut], mutated[cut:]], None, None)) == whole
