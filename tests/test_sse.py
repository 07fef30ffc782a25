"""The SSE framer: each WHATWG parsing rule, our end-of-stream choice, and properties."""

import itertools
import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convstore.adapters.wire.sse import (
    DEFAULT_MAX_EVENT_BYTES,
    SSEDecodeError,
    SSEEvent,
    SSEFramer,
    iter_events,
)

WIRE = Path(__file__).parents[2] / "shared" / "wire"


def frame(chunks: Iterable[bytes], **kwargs: int) -> tuple[list[SSEEvent], SSEFramer]:
    """Feed `chunks` to a new framer and close it; return the events and the framer."""
    framer = SSEFramer(**kwargs)
    events: list[SSEEvent] = []
    for chunk in chunks:
        events += framer.feed(chunk)
    events += framer.close()
    return events, framer


def datas(chunks: Iterable[bytes]) -> list[str]:
    return [event.data for event in frame(chunks)[0]]


def split_at(raw: bytes, cuts: Iterable[int]) -> list[bytes]:
    """`raw` cut at the given offsets (clamped, sorted, repeats give empty chunks)."""
    points = sorted(min(max(cut, 0), len(raw)) for cut in cuts)
    edges = [0, *points, len(raw)]
    return [raw[a:b] for a, b in itertools.pairwise(edges)]


# --- line endings --------------------------------------------------------------------


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_each_line_ending(eol: bytes) -> None:
    raw = b"event: e" + eol + b"data: a" + eol + b"data: b" + eol + eol + b"data: c" + eol + eol
    events, framer = frame([raw])
    assert events == [SSEEvent(event="e", data="a\nb"), SSEEvent(data="c")]
    assert not framer.ended_mid_event


def test_mixed_line_endings() -> None:
    """Scenario 15 (backend-independent: SSE framing): CRLF, LF and CR mixed."""
    assert datas([b"data: a\rdata: b\r\ndata: c\n\r\ndata: d\r\r"]) == ["a\nb\nc", "d"]


def test_cr_at_chunk_end_then_lf_is_one_line_ending() -> None:
    # Were the LF a line ending of its own, it would be a blank line dispatching "a".
    assert datas([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]) == ["a\nb"]


def test_cr_then_empty_chunks_then_lf_is_one_line_ending() -> None:
    assert datas([b"data: a\r", b"", b"", b"\ndata: b\n\n"]) == ["a\nb"]


def test_cr_then_other_byte_then_lf_is_two_endings() -> None:
    assert datas([b"data: a\r", b"data: b", b"\n\n"]) == ["a\nb"]
    # A CR inside a chunk (not at its end) does not swallow the next chunk's LF.
    assert datas([b"data: a\rdata: b", b"\n\n"]) == ["a\nb"]


def test_cr_lf_cr_lf_as_bytes_one_at_a_time() -> None:
    raw = b"data: a\r\n\r\ndata: b\r\n\r\n"
    assert datas(raw[i : i + 1] for i in range(len(raw))) == ["a", "b"]


# --- fields ---------------------------------------------------------------------------


def test_comments_are_ignored() -> None:
    """Scenario 15 (backend-independent: SSE framing): comments."""
    raw = b": hello\n:\ndata: a\n: between\ndata: b\n\n: ping\n\n"
    events, framer = frame([raw])
    assert events == [SSEEvent(data="a\nb")]
    assert not framer.ended_mid_event


def test_multi_line_data_is_joined_with_lf() -> None:
    """Scenario 15 (backend-independent: SSE framing): multi-line data."""
    assert datas([b"data: a\ndata:\ndata: c\ndata\n\n"]) == ["a\n\nc\n"]


def test_single_leading_space_is_stripped() -> None:
    raw = b"data:x\n\ndata: x\n\ndata:  x\n\ndata:\tx\n\ndata: \n\n"
    assert datas([raw]) == ["x", "x", " x", "\tx", ""]
    raw = b"event:  e\nid:  1\nretry:  5\ndata\n\nevent:e\nid:2\nretry:6\ndata\n\n"
    assert frame([raw])[0] == [
        SSEEvent(event=" e", data="", id=" 1"),
        SSEEvent(event="e", data="", id="2", retry=6),
    ]


def test_field_without_colon_has_empty_value() -> None:
    assert datas([b"data\n\n"]) == [""]
    events, _ = frame([b"event\ndata: a\n\n"])
    assert events == [SSEEvent(data="a")]


def test_event_names() -> None:
    raw = b"event: first\ndata: 1\n\ndata: 2\n\nevent:\ndata: 3\n\nevent: a:b \ndata: 4\n\n"
    events, _ = frame([raw])
    assert [(e.event, e.data) for e in events] == [
        ("first", "1"),
        (None, "2"),  # the name does not outlive its event
        (None, "3"),  # empty means the spec's default type
        ("a:b ", "4"),
    ]


def test_block_without_data_is_not_dispatched() -> None:
    events, framer = frame([b"event: ping\n\nevent: x\nid: 7\n\ndata: d\n\n"])
    assert events == [SSEEvent(data="d", id="7")]
    assert not framer.ended_mid_event


def test_empty_data_line_is_dispatched() -> None:
    assert frame([b"event: e\ndata:\n\n"])[0] == [SSEEvent(event="e", data="")]


def test_id_persists_until_changed() -> None:
    raw = b"id: 1\ndata: a\n\ndata: b\n\nid\ndata: c\n\nid: 2\n\ndata: d\n\nid: x\x00y\ndata: e\n\n"
    events, framer = frame([raw])
    assert [(e.id, e.data) for e in events] == [
        ("1", "a"),
        ("1", "b"),
        ("", "c"),
        ("2", "d"),  # set by a block that dispatched nothing
        ("2", "e"),  # an id containing NUL is ignored
    ]
    assert framer.last_event_id == "2"
    assert frame([b"data: a\n\n"])[0][0].id is None


def test_retry() -> None:
    raw = (
        b"retry: 3000\ndata: a\n\ndata: b\n\nretry: 12a\ndata: c\n\n"
        b"retry:\ndata: d\n\nretry: \xd9\xa3\ndata: e\n\nretry: 10\n\n"
    )
    events, framer = frame([raw])
    assert [(e.retry, e.data) for e in events] == [
        (3000, "a"),
        (None, "b"),
        (None, "c"),  # not all digits: ignored
        (None, "d"),
        (None, "e"),  # a non-ASCII digit (Arabic-Indic three) is not a digit here
    ]
    assert framer.retry == 10  # a retry-only block still sets the reconnection time


def test_unknown_fields_are_ignored() -> None:
    raw = b"foo: bar\ndata : not data\nDATA: upper\ndata: kept\n\n"
    assert frame([raw])[0] == [SSEEvent(data="kept")]


# --- end of stream ----------------------------------------------------------------------


def test_clean_end() -> None:
    events, framer = frame([b"data: a\n\n: trailing comment\n"])
    assert events == [SSEEvent(data="a")]
    assert not framer.ended_mid_event


def test_final_event_without_blank_line_is_delivered_incomplete() -> None:
    events, framer = frame([b"data: a\n\nevent: e\ndata: b\ndata: c\n"])
    assert events == [SSEEvent(data="a"), SSEEvent(event="e", data="b\nc", complete=False)]
    assert framer.ended_mid_event


def test_final_line_without_line_ending_counts() -> None:
    events, framer = frame([b"data: a\n", b"data: b"])
    assert events == [SSEEvent(data="a\nb", complete=False)]
    assert framer.ended_mid_event


@pytest.mark.parametrize(
    "raw", [b"event: e\n", b"id: 1", b"data: a\n\n: cut comm", b"data: a\n\nret"]
)
def test_cut_without_data_reports_mid_event(raw: bytes) -> None:
    events, framer = frame([raw])
    assert all(event.complete for event in events)
    assert framer.ended_mid_event


def test_empty_stream() -> None:
    events, framer = frame([])
    assert events == []
    assert not framer.ended_mid_event


def test_close_is_final() -> None:
    framer = SSEFramer()
    assert framer.feed(b"data: a\n") == []
    assert framer.close() == [SSEEvent(data="a", complete=False)]
    assert framer.close() == []
    with pytest.raises(RuntimeError):
        framer.feed(b"\n")


def test_iter_events_matches_framer() -> None:
    chunks = [b"event: e\ndata: a\n", b"\ndata: b"]
    assert list(iter_events(chunks)) == frame(chunks)[0]
    assert list(iter_events(chunks))[-1].complete is False


# --- encoding ---------------------------------------------------------------------------


def test_bom_at_start_is_skipped() -> None:
    assert datas([b"\xef\xbb\xbfdata: a\n\n"]) == ["a"]
    assert datas([b"\xef", b"\xbb", b"\xbf", b"data: a\n\n"]) == ["a"]
    assert datas([b"\xef\xbb\xbfdata: a"]) == ["a"]  # in the unterminated last line too


def test_only_one_bom_and_only_at_start() -> None:
    # A second BOM makes the first field name "\ufeffdata", an unknown field.
    assert datas([b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\ndata: b\n\n"]) == ["b"]
    assert datas([b"data: \xef\xbb\xbfa\n\n\xef\xbb\xbfdata: b\n\n"]) == ["\ufeffa"]


def test_utf8_split_at_every_byte() -> None:
    """Scenario 15 (backend-independent: SSE framing): UTF-8 sequences split at every byte."""
    text = "héllo € 😀 𝄞 中文"
    raw = f"event: ü\ndata: {text}\n\n".encode()
    for i in range(len(raw) + 1):
        assert frame([raw[:i], raw[i:]])[0] == [SSEEvent(event="ü", data=text)], i
    assert frame(raw[i : i + 1] for i in range(len(raw)))[0] == [SSEEvent(event="ü", data=text)]


@pytest.mark.parametrize(
    ("chunks", "offset"),
    [
        ([b"data: \xff\n\n"], 6),
        ([b"data: ok\n\n", b"data: x\xc3(\n\n"], 17),  # bad continuation byte
        ([b"data: ok\n\ndata: ", b"abc \xe2\x82\n\n"], 20),  # a sequence cut by LF
        ([b": comment \xed\xa0\x80\n"], 10),  # a surrogate, even in a comment
        ([b"data: a\n", b"data: \x80"], 14),  # in the unterminated last line
        ([b"\r", b"\ndata: \xc0\xaf\n"], 8),  # an overlong encoding
    ],
)
def test_invalid_utf8_raises_with_offset(chunks: list[bytes], offset: int) -> None:
    framer = SSEFramer()
    with pytest.raises(SSEDecodeError, match=rf"invalid UTF-8 at byte {offset}\b"):
        for chunk in chunks:
            framer.feed(chunk)
        framer.close()
    assert issubclass(SSEDecodeError, ValueError)
    with pytest.raises(RuntimeError):
        framer.feed(b"data: more\n\n")


def test_character_cut_by_end_of_stream_is_dropped() -> None:
    events, framer = frame([b"data: ok\n\ndata: abc\xe2\x82"])
    assert events == [SSEEvent(data="ok"), SSEEvent(data="abc", complete=False)]
    assert framer.ended_mid_event


# --- size cap ---------------------------------------------------------------------------


def test_default_cap() -> None:
    assert SSEFramer().max_event_bytes == DEFAULT_MAX_EVENT_BYTES == 64 * 1024 * 1024


def test_event_at_cap_passes_and_over_cap_raises() -> None:
    assert datas([b"data: " + b"x" * 64 + b"\n\n"]) == ["x" * 64]
    assert frame([b"data: " + b"x" * 64 + b"\n\n"], max_event_bytes=64)[0][0].data == "x" * 64
    with pytest.raises(SSEDecodeError, match="event exceeds 64 bytes"):
        frame([b"data: " + b"x" * 65 + b"\n\n"], max_event_bytes=64)


def test_cap_counts_the_whole_event_in_utf8_bytes() -> None:
    # 30 + 30 ASCII bytes fit 64; the next event starts from zero.
    ok = b"data: " + b"a" * 30 + b"\ndata: " + b"b" * 30 + b"\n\n"
    assert len(frame([ok, ok], max_event_bytes=64)[0]) == 2
    with pytest.raises(SSEDecodeError, match="exceeds 64 bytes"):
        frame([ok.replace(b"\n\n", b"\n") * 2], max_event_bytes=64)
    # 22 characters of 3 bytes each: 66 bytes.
    with pytest.raises(SSEDecodeError, match="exceeds 64 bytes"):
        frame([("data: " + "中" * 22 + "\n\n").encode()], max_event_bytes=64)


def test_unterminated_line_cannot_grow_without_bound() -> None:
    framer = SSEFramer(max_event_bytes=1000)
    framer.feed(b"data: ")
    with pytest.raises(SSEDecodeError, match="exceeds 1000 bytes"):
        for _ in range(100):
            framer.feed(b"x" * 100)


def test_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        SSEFramer(max_event_bytes=0)


def test_long_line_in_small_chunks() -> None:
    # Joined once at its end: were the line re-joined per chunk this would take minutes.
    line = b"y" * (4 * 1024 * 1024)
    chunks = [b"data: ", *(line[i : i + 256] for i in range(0, len(line), 256)), b"\n\n"]
    (event,) = frame(chunks)[0]
    assert len(event.data) == len(line)


# --- properties -------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One event to serialise, and the fields the serialiser may add around it."""

    name: str | None
    lines: list[str]
    id: str | None
    retry: int | None


no_eol = st.characters(exclude_characters="\r\n", exclude_categories=("Cs",))
texts = st.text(alphabet=no_eol, max_size=12) | st.sampled_from(["😀", "a😀b", "é", " x", ""])
specs = st.builds(
    Spec,
    name=st.none() | st.text(alphabet=no_eol, min_size=1, max_size=8) | st.just(" x"),
    lines=st.lists(texts, min_size=1, max_size=4),
    id=st.none()
    | st.text(
        alphabet=st.characters(exclude_characters="\r\n\x00", exclude_categories=("Cs",)),
        max_size=5,
    ),
    retry=st.none() | st.integers(min_value=0, max_value=10**6),
)


def data_line(draw: st.DrawFn, value: str) -> str:
    """A `data` line for `value`, in one of its equivalent spellings."""
    forms = [f"data: {value}"]
    if not value.startswith(" "):  # the space is optional unless the value starts with one
        forms.append(f"data:{value}")
    if not value:
        forms.append("data")
    return draw(st.sampled_from(forms))


def serialise(draw: st.DrawFn, events: Sequence[Spec]) -> list[str]:
    """Field and comment lines, blank lines between events, in a random but valid shape."""
    lines: list[str] = []

    def comments() -> None:
        lines.extend(":" + c for c in draw(st.lists(texts, max_size=2)))

    for spec in events:
        fields = [data_line(draw, line) for line in spec.lines]
        if spec.name is not None:
            fields.insert(draw(st.integers(0, len(fields))), f"event: {spec.name}")
        if spec.id is not None:
            fields.insert(draw(st.integers(0, len(fields))), f"id: {spec.id}")
        if spec.retry is not None:
            fields.insert(draw(st.integers(0, len(fields))), f"retry: {spec.retry}")
        comments()
        for field in fields:
            lines.append(field)
            comments()
        lines.append("")
    return lines


def join_lines(draw: st.DrawFn, lines: list[str]) -> str:
    """Each line ended by a random CR, LF or CRLF, never CR before an empty LF line."""
    out: list[str] = []
    previous = ""
    for line in lines:
        choices = ["\n", "\r\n", "\r"]
        if previous == "\r" and not line:
            choices = ["\r\n", "\r"]  # "\r" + "\n" would read as one CRLF
        previous = draw(st.sampled_from(choices))
        out += [line, previous]
    return "".join(out)


def expected(events: Sequence[Spec]) -> list[SSEEvent]:
    last_id: str | None = None
    out = []
    for spec in events:
        last_id = spec.id if spec.id is not None else last_id
        out.append(
            SSEEvent(event=spec.name, data="\n".join(spec.lines), id=last_id, retry=spec.retry)
        )
    return out


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[SSEEvent], list[bytes]]:
    events = draw(st.lists(specs, max_size=6))
    raw = join_lines(draw, serialise(draw, events)).encode()
    if draw(st.booleans()):
        raw = b"\xef\xbb\xbf" + raw
    cuts = draw(st.lists(st.integers(0, len(raw)), max_size=12))
    return expected(events), split_at(raw, cuts)


@given(streams())
@settings(max_examples=300)
def test_framing_recovers_the_serialised_events(case: tuple[list[SSEEvent], list[bytes]]) -> None:
    """Scenario 15 (backend-independent: SSE framing): any events, serialised with random line
    endings, comments and multi-line data, re-chunked at random boundaries, come back identical."""
    events, chunks = case
    got, framer = frame(chunks)
    assert got == events
    assert not framer.ended_mid_event


@given(st.lists(specs, min_size=1, max_size=4), st.data())
def test_cut_final_event_is_delivered_incomplete(events: list[Spec], data: st.DataObject) -> None:
    lines = serialise(data.draw, events)
    while lines[-1] == "" or lines[-1].startswith(":"):  # end right after its last field
        lines.pop()
    raw = join_lines(data.draw, lines).encode()
    if data.draw(st.booleans()):
        raw = raw.rstrip(b"\r\n")  # and maybe without that field's line ending
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=8))
    got, framer = frame(split_at(raw, cuts))
    want = expected(events)
    assert got[:-1] == want[:-1]
    assert got[-1] == SSEEvent(
        event=want[-1].event,
        data=want[-1].data,
        id=want[-1].id,
        retry=want[-1].retry,
        complete=False,
    )
    assert framer.ended_mid_event


# A plain reading of the spec over the whole stream at once, to compare the framer with.


def reference(raw: bytes) -> tuple[list[SSEEvent], bool, str | None, int | None]:
    dropped = False
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        if exc.reason != "unexpected end of data" or exc.end != len(raw):
            raise
        text = raw[: exc.start].decode()  # a character cut by the end of the stream
        dropped = True
    text = text.removeprefix("\ufeff")
    *lines, tail = re.split(r"\r\n|\r|\n", text)
    cut_mid_line = bool(tail) or dropped
    if tail:
        lines.append(tail)
    events: list[SSEEvent] = []
    data: list[str] = []
    name, retry, last_id, framer_retry, pending = "", None, None, None, False
    for line in [*lines, None]:
        if line is None or not line:
            if pending and data:
                complete = line is not None
                events.append(SSEEvent(event=name or None, data="\n".join(data), id=last_id,
                                       retry=retry, complete=complete))  # fmt: skip
            if line is None:
                return events, cut_mid_line or pending, last_id, framer_retry
            data, name, retry, pending = [], "", None, False
            continue
        if line.startswith(":"):
            continue
        pending = True
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
        elif field == "id" and "\0" not in value:
            last_id = value
        elif field == "retry" and re.fullmatch(r"[0-9]+", value):
            retry = framer_retry = int(value)
    raise AssertionError("unreachable")


tokens = st.sampled_from(
    [b"data", b"event", b"id", b"retry", b":", b" ", b"  ", b"\r", b"\n", b"\r\n", b"x",
     b"12", "é".encode(), "😀".encode(), b"\xef\xbb\xbf", b"\x00", b"\xf0\x9f", b"\xff"]
)  # fmt: skip


@given(st.lists(tokens, max_size=40).map(b"".join), st.data())
@settings(max_examples=500)
def test_framer_agrees_with_the_reference(raw: bytes, data: st.DataObject) -> None:
    """Scenario 15 (backend-independent: SSE framing): any bytes, any chunking: the same events as a
    reference parser."""
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=10))
    try:
        want = reference(raw)
    except UnicodeDecodeError as exc:
        with pytest.raises(SSEDecodeError, match=rf"at byte {exc.start}\b"):
            frame(split_at(raw, cuts))
        return
    got, framer = frame(split_at(raw, cuts))
    assert (got, framer.ended_mid_event, framer.last_event_id, framer.retry) == want


# --- recorded traffic -------------------------------------------------------------------


WIRE_FILES = sorted(WIRE.glob("*/*/*.response.sse")) if WIRE.is_dir() else []


@pytest.mark.skipif(not WIRE.is_dir(), reason=f"no recorded traffic at {WIRE}")
@pytest.mark.parametrize(
    "path", WIRE_FILES or [None], ids=[str(p.relative_to(WIRE)) for p in WIRE_FILES] or ["none"]
)
def test_recorded_streams(path: Path) -> None:
    raw = path.read_bytes()
    whole, framer = frame([raw])
    assert whole
    assert not framer.ended_mid_event
    assert all(event.complete for event in whole)
    assert frame(raw[i : i + 1] for i in range(len(raw)))[0] == whole
    rng = random.Random(str(path.relative_to(WIRE)))
    for _ in range(5):
        cuts = [rng.randrange(len(raw) + 1) for _ in range(rng.randrange(1, 64))]
        assert frame(split_at(raw, cuts))[0] == whole
    assert reference(raw)[0] == whole
    if path.parts[-3] in ("anthropic", "openai", "gemini"):
        for event in whole:
            assert event.data
            json.loads(event.data)


# --- feed_data: the data alone ----------------------------------------------------------


def frame_data(chunks: Iterable[bytes], **kwargs: int) -> tuple[list[str], SSEFramer]:
    """Feed `chunks` with `feed_data` and close; return the data (decoded) and the framer."""
    framer = SSEFramer(**kwargs)
    out: list[str] = []
    for chunk in chunks:
        datas = framer.feed_data(chunk)
        assert all(type(data) is bytes for data in datas)
        out += [data.decode() for data in datas]
    out += [event.data for event in framer.close()]
    return out, framer


@pytest.mark.parametrize(
    "raw",
    [
        b'data: {"a": 1}\n\ndata: {"b": 2}\n\n',
        b"event: e\ndata: x\n\nevent: f\ndata: y\n\n",
        b"event: e\ndata: x\n\ndata: y\n\nevent:\ndata:z\n\n",  # mixed; an empty name
        b"data:x\n\ndata:  y\n\n",  # one optional space, and only one
        b"data: a\ndata: b\n\ndata: c\n\n",  # multi-line data: the line parser
        b"data: a\n\nid: 7\ndata: b\n\ndata: c\n\n",  # an id between fast blocks
        b"data: a\n\n: comment\n\nevent: only\n\ndata: b\n\n",  # undispatched blocks
        b"data: a\n\n\n\ndata: b\n\n",  # extra blank lines
        b"data: a\r\n\r\nevent: e\r\ndata: b\r\n\r\n",  # CRLF
        b"\xef\xbb\xbfdata: a\n\n",  # BOM
        b"event: e\ndata: a\n\nevent: e\ndata: b",  # cut inside the last event
        b"data\n\ndata: \n\n",  # empty data, both spellings
        b"event: e\nretry: 5\ndata: a\n\nevent: e\ndata: b\n\n",
        b"data: a\nevent: e\n\ndata: b\n\n",  # event after data
        "data: é😀\n\nevent: 中\ndata: 文\n\n".encode(),
    ],
)
def test_feed_data_matches_feed(raw: bytes) -> None:
    whole, framer = frame([raw])
    want = ([e.data for e in whole], framer.ended_mid_event, framer.last_event_id, framer.retry)
    for chunks in ([raw], [raw[i : i + 1] for i in range(len(raw))], split_at(raw, [7, 19])):
        got, data_framer = frame_data(chunks)
        have = (got, data_framer.ended_mid_event, data_framer.last_event_id, data_framer.retry)
        assert have == want


def test_feed_data_continues_an_event_under_way() -> None:
    framer = SSEFramer()
    assert framer.feed_data(b"event: e\ndata: a\n") == []
    assert framer.feed_data(b"data: b\n\ndata: c\n\ndata: d\n") == [b"a\nb", b"c"]
    assert framer.feed_data(b"\ndata: e\n\n") == [b"d", b"e"]
    assert framer.close() == []


def test_feed_and_feed_data_mix() -> None:
    framer = SSEFramer()
    assert framer.feed_data(b"id: 1\ndata: a\n\ndata: b") == [b"a"]
    assert framer.feed(b"\n\ndata: c\n\n") == [
        SSEEvent(data="b", id="1"),
        SSEEvent(data="c", id="1"),
    ]
    assert framer.feed_data(b"data: d\n\n") == [b"d"]
    assert framer.close() == []
    with pytest.raises(RuntimeError, match=r"feed_data\(\) after close\(\)"):
        framer.feed_data(b"data: e\n\n")


def test_feed_data_cap() -> None:
    assert frame_data([b"data: " + b"x" * 64 + b"\n\n"], max_event_bytes=64)[0] == ["x" * 64]
    with pytest.raises(SSEDecodeError, match="event exceeds 64 bytes"):
        frame_data([b"data: a\n\ndata: " + b"x" * 65 + b"\n\n"], max_event_bytes=64)
    with pytest.raises(SSEDecodeError, match="exceeds 64 bytes"):
        frame_data([("event: e\ndata: " + "中" * 22 + "\n\n").encode()], max_event_bytes=64)
    # 21 characters of 3 bytes each: 63 bytes, under the cap.
    assert frame_data([("data: " + "中" * 21 + "\n\n").encode()], max_event_bytes=64)[0]
    with pytest.raises(SSEDecodeError, match="exceeds 1000 bytes"):
        framer = SSEFramer(max_event_bytes=1000)
        for _ in range(100):
            framer.feed_data(b"data: " + b"x" * 100)


def test_feed_data_invalid_utf8() -> None:
    framer = SSEFramer()
    assert framer.feed_data(b"data: a\n\n") == [b"a"]
    # The event before the bad byte is delivered; the next call raises (scenario 13).
    assert framer.feed_data(b"data: b\n\ndata: \xff\n\n") == [b"b"]
    with pytest.raises(SSEDecodeError, match=r"invalid UTF-8 at byte 24\b"):
        framer.feed_data(b"data: c\n\n")
    with pytest.raises(RuntimeError, match=r"feed_data\(\) after an SSEDecodeError"):
        framer.feed_data(b"data: d\n\n")


@given(streams())
@settings(max_examples=300)
def test_feed_data_recovers_the_serialised_data(case: tuple[list[SSEEvent], list[bytes]]) -> None:
    """Scenario 15 (backend-independent: SSE framing): the fast path, as above."""
    events, chunks = case
    got, framer = frame_data(chunks)
    assert got == [event.data for event in events]
    assert not framer.ended_mid_event
    assert framer.last_event_id == (events[-1].id if events else None)


fast_blocks = st.lists(
    st.sampled_from(
        [
            b"data: {}\n\n",
            b"event: e\ndata: x y\n\n",
            b"data:z\n\n",
            b"event: \xc3\xa9\ndata: \n\n",
            b"data: {}\r\n\r\n",
            b"event: e\r\ndata: x\r\n\r\n",
            b"data: q\r\n\n",
        ]
    )
    | tokens,
    max_size=40,
).map(b"".join)


@given(st.one_of(st.lists(tokens, max_size=40).map(b"".join), fast_blocks), st.data())
@settings(max_examples=500)
def test_feed_data_agrees_with_the_reference(raw: bytes, data: st.DataObject) -> None:
    """Scenario 15 (backend-independent: SSE framing): the fast path agrees with the reference."""
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=10))
    mixed = data.draw(st.lists(st.booleans(), min_size=11, max_size=11))
    try:
        want = reference(raw)
    except UnicodeDecodeError as exc:
        with pytest.raises(SSEDecodeError, match=rf"at byte {exc.start}\b"):
            frame_data(split_at(raw, cuts))
        return
    framer = SSEFramer()
    got: list[str] = []
    for chunk, plain in zip(split_at(raw, cuts), mixed, strict=False):
        if plain:  # feed and feed_data share the state
            got += [event.data for event in framer.feed(chunk)]
        else:
            got += [data.decode() for data in framer.feed_data(chunk)]
    got += [event.data for event in framer.close()]
    events, ended, last_id, retry = want
    assert got == [event.data for event in events]
    assert (framer.ended_mid_event, framer.last_event_id, framer.retry) == (ended, last_id, retry)


@pytest.mark.skipif(not WIRE.is_dir(), reason=f"no recorded traffic at {WIRE}")
@pytest.mark.parametrize(
    "path", WIRE_FILES or [None], ids=[str(p.relative_to(WIRE)) for p in WIRE_FILES] or ["none"]
)
def test_recorded_streams_feed_data(path: Path) -> None:
    raw = path.read_bytes()
    whole = [event.data for event in frame([raw])[0]]
    assert frame_data([raw])[0] == whole
    assert frame_data(raw[i : i + 1] for i in range(len(raw)))[0] == whole
    rng = random.Random(str(path.relative_to(WIRE)))
    for _ in range(5):
        cuts = [rng.randrange(len(raw) + 1) for _ in range(rng.randrange(1, 64))]
        assert frame_data(split_at(raw, cuts))[0] == whole


def test_feed_data_large_event_across_chunks() -> None:
    value = b'{"text": "' + b"x" * 100_000 + b'"}'
    raw = b"event: big\ndata: " + value + b"\n\nevent: e\ndata:y\n\n" + b"event: f\ndata:" + value
    raw += b"\n\nid: 3\ndata: z\n\n"
    pieces = [raw[i : i + 4096] for i in range(0, len(raw), 4096)]
    got, framer = frame_data(pieces, max_event_bytes=200_000)
    assert got == [value.decode(), "y", value.decode(), "z"]
    assert framer.last_event_id == "3"
    with pytest.raises(SSEDecodeError, match="exceeds 50000 bytes"):
        frame_data(pieces, max_event_bytes=50_000)
