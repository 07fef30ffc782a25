"""Server-Sent Events framing, shared by every provider adapter.

Bytes in, `SSEEvent`s out, following the WHATWG `text/event-stream` parsing rules
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation).
Framing only: this module knows nothing about JSON or providers; each provider's decoder
reads `SSEEvent.data`, or the bytes `SSEFramer.feed_data` cuts out (faster: no event
objects, no decoded copy of the text).

Where we depart from the browser's reading, on purpose:

- Invalid UTF-8 raises `SSEDecodeError` (with its byte offset) instead of becoming
  U+FFFD: a recorder must not store text the provider never sent.
- End of stream: the spec discards an event that no blank line closed. We are a
  recorder, so `SSEFramer.close()` still delivers it when it has a data line, with
  `complete=False`, and sets `SSEFramer.ended_mid_event`. An unterminated last line
  counts as a line; a multi-byte character cut by the end of the stream is dropped.
- Memory is bounded: the framer holds only the line being received and the current
  event's fields. When the current event's data (UTF-8 bytes of its `data` values) plus
  the line being received exceed `max_event_bytes`, it raises `SSEDecodeError` instead
  of growing without bound.
- Nothing before an error is lost, whatever the chunking: a call that meets invalid
  UTF-8 or an oversized event returns the events completed before it, and the next call
  (`feed`, `feed_data` or `close`) raises the error.

As in the spec: a block with no `data` line is not dispatched (an `event:`-only block
included); `id` is the last event ID, which persists across events until an `id:` field
changes it (None until the first one); `retry:` changes the stream's reconnection time,
kept on the framer, and is also shown on the event whose block carried it.
"""

import codecs
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Final, TypeVar

import msgspec

from convstore.domain.errors import DecodeError

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "SSEDecodeError",
    "SSEEvent",
    "SSEFramer",
    "iter_events",
]

DEFAULT_MAX_EVENT_BYTES: Final = 64 * 1024 * 1024
"""The default cap on one event's size (DESIGN.md: `limits.max_event_bytes`)."""

_BOM: Final = "\ufeff"
_CR: Final = 13
_LF: Final = 10
_BOM_BYTES: Final = _BOM.encode()
_DATA_BLOCK: Final = re.compile(rb"(?:event:[^\n]*\n)?data: ?([^\n]*)\n\n")
"""A whole block of one `data` line, after an `event` line or not: it captures the data.
(`[^\n]`, one excluded byte, is what the regex engine matches fastest.)"""
_CRLF_DATA_BLOCK: Final = re.compile(rb"(?:event:[^\r\n]*\r\n)?data: ?([^\n]*)\r\n\r\n")
"""The same block with CRLF line endings (the data it captures may end up holding a CR,
which the caller checks for)."""
_LINE_BYTES: Final = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)")
_LINE_TEXT: Final = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)")
"""One line with its ending: how a read that met an oversized event is read again."""


class SSEDecodeError(DecodeError):
    """A byte stream that is not a readable event stream: bad UTF-8 or an oversized event."""


class SSEEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One dispatched event."""

    data: str
    """The event's `data` lines joined with "\\n"."""
    event: str | None = None
    """The `event:` name; None when absent or empty (the spec's default type, `message`)."""
    id: str | None = None
    """The last event ID at dispatch (it persists across events); None if none was sent."""
    retry: int | None = None
    """The reconnection time (ms) a `retry:` field in this event's block set, if any."""
    complete: bool = True
    """False for a final event the stream cut before its closing blank line."""


_Lines = TypeVar("_Lines", str, bytes)
_Out = TypeVar("_Out", SSEEvent, bytes)
_State = tuple[list[str], str, int | None, int, bool, str | None, int | None, bool]
"""A framer's event under way, ids and BOM flag (see `SSEFramer._state`)."""


class SSEFramer:
    """Incremental event-stream framer: `feed` it bytes as they arrive, then `close` it.

    After an `SSEDecodeError` the framer is spent: further calls raise `RuntimeError`.
    """

    __slots__ = (
        "_at_start",
        "_data",
        "_event",
        "_event_retry",
        "_failed",
        "_in_event",
        "_offset",
        "_size",
        "_skip_lf",
        "_spent",
        "_tail",
        "_tail_size",
        "ended_mid_event",
        "last_event_id",
        "max_event_bytes",
        "retry",
    )

    def __init__(self, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        if max_event_bytes <= 0:
            raise ValueError(f"max_event_bytes must be positive, got {max_event_bytes}")
        self.max_event_bytes = max_event_bytes
        """The cap on one event's size in bytes."""
        self.last_event_id: str | None = None
        """The spec's last event ID buffer, as the latest `id:` field set it."""
        self.retry: int | None = None
        """The stream's reconnection time (ms), as the latest `retry:` field set it."""
        self.ended_mid_event = False
        """Set by `close()`: the stream stopped mid-line or inside an unfinished event."""
        # Only the current incomplete line (as raw parts, joined once it ends, so a long
        # line arriving in many small chunks costs linear time) and the current event.
        self._tail: list[bytes] = []
        self._tail_size = 0
        self._offset = 0  # bytes received so far: error messages name absolute offsets
        self._skip_lf = False  # the last chunk ended in CR: a leading LF completes CRLF
        self._at_start = True  # a BOM is skipped only at the start of the stream
        self._data: list[str] = []
        self._event = ""
        self._event_retry: int | None = None
        self._size = 0
        self._in_event = False  # a field line arrived since the last blank line
        self._spent = ""
        self._failed: SSEDecodeError | None = None  # raised by the next call

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Frame the next piece of the stream; return the events it completed."""
        head, start = self._whole_lines(chunk, "feed()")
        if not head:
            return []
        try:
            text = str(head, "utf-8")
        except UnicodeDecodeError as exc:
            text = self._before_bad_utf8(head, exc, start).decode()
        state = self._state()
        try:
            events = self._lines(text)
        except SSEDecodeError as error:  # an oversized event: what came before it is kept
            self._restore(state)
            return self._until_error(self._lines, _LINE_TEXT.findall(text), error)
        self._check_tail()
        return events

    def feed_data(self, chunk: bytes) -> list[bytes]:
        """Like `feed`, but return only the `data` of each event it completed, in UTF-8.

        The same framing, checks and state (the two can be mixed on one stream), without
        an `SSEEvent` per event or a decoded copy of the text: what the provider decoders
        read (JSON decoders take the bytes as they are). Whole blocks of one `data:`
        line, alone or after an `event:` line (which only names the event), are cut out
        in one regex pass; any other block goes through the line parser.
        """
        if self._tail or self._skip_lf or self._in_event or self._data or self._spent:
            return self._feed_data(chunk)
        # The common case, straight through: no line or event under way, so the chunk up
        # to its last blank line is whole blocks, read here if they have the common shapes.
        # The end of the last blank line (searched from the end: it is near it).
        if b"\r" in chunk:
            crlf = chunk.rfind(b"\n\r\n")
            lf = chunk.rfind(b"\n\n", crlf + 1)
            end = lf + 2 if lf >= 0 else crlf + 3
        else:
            end = chunk.rfind(b"\n\n") + 2
        if end < 3:
            return self._feed_data(chunk)
        if self._at_start:
            if chunk[:1] == _BOM_BYTES[:1]:
                return self._feed_data(chunk)
            self._at_start = False
        blocks = chunk if end == len(chunk) else chunk[:end]
        if not blocks.isascii():
            try:
                str(blocks, "utf-8")  # validation only: the bytes are what we hand out
            except UnicodeDecodeError:
                return self._feed_data(chunk)  # the events before the bad byte, then the error
        if b"\r" in blocks:
            # CRLF line endings. A lone CR ends a line too: a data value must hold none.
            parts = _CRLF_DATA_BLOCK.split(blocks)
            datas: list[bytes] = parts[1::2]
            if any(parts[::2]) or b"\r" in b"".join(datas):
                return self._feed_data(chunk)
        else:
            parts = _DATA_BLOCK.split(blocks)
            if any(parts[::2]):
                return self._feed_data(chunk)
            datas = parts[1::2]
        limit = self.max_event_bytes
        if end > limit and max(map(len, datas)) > limit:
            return self._feed_data(chunk)  # the events before the oversized one, then the error
        self._offset += end
        if end != len(chunk):
            datas.extend(self._feed_data(chunk[end:]))
        return datas

    def _feed_data(self, chunk: bytes) -> list[bytes]:
        """`feed_data` in every case."""
        head, start = self._whole_lines(chunk, "feed_data()")
        if not head:
            return []
        if not head.isascii():
            try:
                str(head, "utf-8")  # validation only: the bytes are what we hand out
            except UnicodeDecodeError as exc:
                head = self._before_bad_utf8(head, exc, start)
                if not head:
                    return []
        state = self._state()
        try:
            datas = self._data_lines(head)
        except SSEDecodeError as error:  # an oversized event: what came before it is kept
            self._restore(state)
            return self._until_error(self._data_lines, _LINE_BYTES.findall(head), error)
        self._check_tail()
        return datas

    def _whole_lines(self, chunk: bytes, method: str) -> tuple[bytes, int]:
        """Take `chunk` in; return the whole lines it completes (b"" if none), undecoded,
        and their offset in the stream."""
        self._raise_spent(method)
        size = len(chunk)
        if self._skip_lf and size:
            self._skip_lf = False
            if chunk[0] == _LF:
                self._offset += 1
                chunk = chunk[1:]
                size -= 1
        # Line endings are ASCII and never occur inside a UTF-8 sequence, so everything up
        # to the last CR or LF is whole lines of whole characters.
        end = chunk.rfind(b"\n") + 1
        if end != size:
            cr = chunk.rfind(b"\r") + 1
            if cr > end:
                end = cr
                # A CR that ends the chunk may be the first half of a CRLF.
                self._skip_lf = cr == size
        tail = self._tail
        if not end:
            if size:
                tail.append(chunk)
                self._tail_size += size
                self._offset += size
                self._check_tail()
            return b"", 0
        start = self._offset - self._tail_size
        self._offset += size
        head = chunk if end == size else chunk[:end]
        if tail:
            tail.append(head)
            head = b"".join(tail)
        if end == size:
            if tail:
                self._tail = []
                self._tail_size = 0
        else:
            self._tail = [chunk[end:]]
            self._tail_size = size - end
        return head, start

    def close(self) -> list[SSEEvent]:
        """Flush at end of input: return the cut final event, if any (`complete=False`).

        Sets `ended_mid_event` when the stream did not end on an event boundary.
        """
        if self._spent == "close()":
            return []
        self._raise_spent("close()")
        events: list[SSEEvent] = []
        ended_mid_line = False
        if self._tail:
            raw = b"".join(self._tail)
            start = self._offset - self._tail_size
            self._tail = []
            self._tail_size = 0
            # Not final: a character cut by the end of the stream stays in the decoder and
            # is dropped; any other bad byte still raises.
            decoder = codecs.getincrementaldecoder("utf-8")()
            try:
                text = decoder.decode(raw)
            except UnicodeDecodeError as exc:
                raise self._bad_utf8(exc, start) from None
            if self._at_start:
                self._at_start = False
                if text.startswith(_BOM):
                    text = text[1:]
            # A lone BOM is an empty stream, not a cut line.
            ended_mid_line = bool(text) or bool(decoder.getstate()[0])
            if text:  # the unterminated last line counts as a line
                events = self._lines(text + "\n")
        self.ended_mid_event = ended_mid_line or self._in_event
        if self._data:
            events.append(self._dispatch(complete=False))
        self._spent = "close()"
        return events

    def _raise_spent(self, method: str) -> None:
        """Raise the error a previous call found (once), else refuse a spent framer."""
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed
        if self._spent:
            raise RuntimeError(f"SSEFramer.{method} after {self._spent}")

    def _check_tail(self) -> None:
        """Fail (at the next call) when the line being received makes the event too large."""
        if self._tail_size and self._tail_size + self._size > self.max_event_bytes:
            self._failed = self._failed or self._too_large()

    def _state(self) -> _State:
        """What reading whole lines changes (the event under way, the ids, the BOM flag)."""
        return (
            list(self._data),
            self._event,
            self._event_retry,
            self._size,
            self._in_event,
            self.last_event_id,
            self.retry,
            self._at_start,
        )

    def _restore(self, state: _State) -> None:
        (
            self._data,
            self._event,
            self._event_retry,
            self._size,
            self._in_event,
            self.last_event_id,
            self.retry,
            self._at_start,
        ) = state

    def _until_error(
        self, read: Callable[[_Lines], list[_Out]], lines: list[_Lines], error: SSEDecodeError
    ) -> list[_Out]:
        """Read `lines` again one at a time up to the one that fails, so that the events
        before it are returned; the error is kept for the next call."""
        out: list[_Out] = []
        try:
            for line in lines:
                out.extend(read(line))
        except SSEDecodeError as again:
            error = again
        self._spent = "an SSEDecodeError"
        self._failed = error
        return out

    def _before_bad_utf8(self, head: bytes, exc: UnicodeDecodeError, start: int) -> bytes:
        """The whole lines of `head` before its invalid UTF-8 (read by the caller); the
        error is kept for the next call, so the events before the bad byte are not lost."""
        self._failed = self._bad_utf8(exc, start)
        cut = max(head.rfind(b"\n", 0, exc.start), head.rfind(b"\r", 0, exc.start)) + 1
        return head[:cut]

    def _normalized(self, text: str) -> str:
        """`text` without the stream's leading BOM, its line endings all LF."""
        if self._at_start:
            self._at_start = False
            if text.startswith(_BOM):
                text = text[1:]
        if "\r" in text:
            # A CRLF split across chunks was handled in feed(): no text starts with its LF.
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        return text

    def _data_lines(self, raw: bytes) -> list[bytes]:
        """The data of the events `raw` (whole lines of valid UTF-8) completes."""
        if self._at_start:
            self._at_start = False
            if raw.startswith(_BOM_BYTES):
                raw = raw[len(_BOM_BYTES) :]
        if b"\r" in raw:
            # A CRLF split across chunks was handled in feed_data(): none starts with its LF.
            raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        datas: list[bytes] = []
        if self._in_event or self._data:
            # The event under way ends at the first blank line: the line parser reads it.
            if raw[0] == _LF:
                cut = 1
            else:
                cut = raw.find(b"\n\n") + 2
                if cut == 1:
                    return self._parsed_data(raw, blocks=False)
            value = None if self._data else self._last_data_line(raw, cut)
            datas = [value] if value is not None else self._parsed_data(raw[:cut], blocks=False)
            raw = raw[cut:]
        end = raw.rfind(b"\n\n") + 2
        if end > 1:
            blocks = raw if end == len(raw) else raw[:end]
            # The regex takes each block of the two common shapes whole, capturing its
            # data: anything else is left between two matches (or before the first).
            parts = _DATA_BLOCK.split(blocks)
            if any(parts[::2]):
                datas.extend(self._parsed_data(blocks, blocks=True))
            else:
                found: list[bytes] = parts[1::2]
                limit = self.max_event_bytes
                if len(blocks) > limit and max(map(len, found)) > limit:
                    raise self._too_large()
                if datas:
                    datas.extend(found)
                else:
                    datas = found
            raw = raw[end:]
        if raw:  # the lines of an event still under way
            datas.extend(self._parsed_data(raw, blocks=False))
        return datas

    def _last_data_line(self, raw: bytes, cut: int) -> bytes | None:
        """The data of the event under way (which has no data line yet) when `raw[:cut]`
        is its one `data:` line then the blank line that ends it; else None.

        The common way a large event arrives: its `event:` line in one chunk, its data
        line across the next ones. Read here, the data is one copy of the line, where the
        line parser would make four (text, line, value, bytes).
        """
        if raw.find(b"\n") != cut - 2:
            return None
        if raw.startswith(b"data: "):
            value = raw[6 : cut - 2]
        elif raw.startswith(b"data:"):
            value = raw[5 : cut - 2]
        else:
            return None
        if len(value) > self.max_event_bytes:
            raise self._too_large()
        self._event = ""
        self._event_retry = None
        self._size = 0
        self._in_event = False
        return value

    def _parsed_data(self, raw: bytes, *, blocks: bool) -> list[bytes]:
        """The data of the events `raw` completes, read by the parser of `feed`: block by
        block when `blocks` (no event under way), else line by line."""
        text = str(raw, "utf-8")
        events = self._lines(text) if blocks else self._slow_lines(text)
        return [event.data.encode() for event in events]

    def _lines(self, text: str) -> list[SSEEvent]:
        """Interpret `text`, whole lines (the spec's "process the field" and "dispatch")."""
        text = self._normalized(text)
        if self._in_event or self._data:
            return self._slow_lines(text)
        # Fast path: most events are `data: …` or `event: …\ndata: …` then a blank line.
        # Whole blocks of those shapes become events directly; any other block (comments,
        # ids, multi-line data, a field without its space) goes through the line parser.
        blocks = text.split("\n\n")
        rest = blocks.pop()
        events: list[SSEEvent] = []
        append = events.append
        limit = self.max_event_bytes
        for block in blocks:
            if block[:6] == "data: " and "\n" not in block:
                name, value = None, block[6:]
            elif block[:7] == "event: " and block.count("\n") == 1:
                name, _, value = block[7:].partition("\n")
                if value[:6] != "data: " or not name:
                    events.extend(self._slow_lines(block + "\n\n"))
                    continue
                value = value[6:]
            else:
                events.extend(self._slow_lines(block + "\n\n"))
                continue
            if (len(value) if value.isascii() else len(value.encode())) > limit:
                raise self._too_large()
            append(SSEEvent(data=value, event=name, id=self.last_event_id))
        if rest:
            events.extend(self._slow_lines(rest))
        return events

    def _slow_lines(self, text: str) -> list[SSEEvent]:
        """The line-by-line parser: every field, comment and line shape of the spec."""
        lines = text.split("\n")
        lines.pop()  # the text ends with a line ending: the last piece is empty
        events: list[SSEEvent] = []
        # Locals in the loop: attribute access per line would dominate the cost.
        data = self._data
        event = self._event
        retry = self._event_retry
        size = self._size
        in_event = self._in_event
        for line in lines:
            if line:
                if line[:6] == "data: ":  # the common line, parsed without partition()
                    value = line[6:]
                else:
                    name, _, value = line.partition(":")
                    if value[:1] == " ":
                        value = value[1:]
                    if name != "data":
                        if name == "event":
                            event = value
                            in_event = True
                        elif name:  # an empty name is a comment line
                            in_event = True
                            retry = self._rare_field(name, value, retry)
                        continue
                # Only data lines accumulate; any other field holds one line at most.
                in_event = True
                # isascii() is O(1): only a line with non-ASCII text is encoded to count.
                size += len(value) if value.isascii() else len(value.encode())
                if size > self.max_event_bytes:
                    raise self._too_large()
                data.append(value)
            elif in_event:
                if data:
                    events.append(
                        SSEEvent(
                            data=data[0] if len(data) == 1 else "\n".join(data),
                            event=event or None,
                            id=self.last_event_id,
                            retry=retry,
                        )
                    )
                    data = []
                event = ""
                retry = None
                size = 0
                in_event = False
        self._data = data
        self._event = event
        self._event_retry = retry
        self._size = size
        self._in_event = in_event
        return events

    def _rare_field(self, name: str, value: str, retry: int | None) -> int | None:
        """Process an `id`, `retry` or unknown field; return the event's retry value."""
        if name == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            retry = self.retry = int(value)
        return retry

    def _dispatch(self, *, complete: bool) -> SSEEvent:
        """Build the event from the pending fields and forget them."""
        data = self._data
        out = SSEEvent(
            data="\n".join(data),
            event=self._event or None,
            id=self.last_event_id,
            retry=self._event_retry,
            complete=complete,
        )
        self._data = []
        self._event = ""
        self._event_retry = None
        self._size = 0
        self._in_event = False
        return out

    def _too_large(self) -> SSEDecodeError:
        self._spent = "an SSEDecodeError"
        return SSEDecodeError(f"event exceeds {self.max_event_bytes} bytes")

    def _bad_utf8(self, exc: UnicodeDecodeError, start: int) -> SSEDecodeError:
        self._spent = "an SSEDecodeError"
        bad = exc.object[exc.start : exc.end].hex(" ")
        return SSEDecodeError(
            f"invalid UTF-8 at byte {start + exc.start} of the stream ({exc.reason}: {bad})"
        )


def iter_events(
    chunks: Iterable[bytes], *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
) -> Iterator[SSEEvent]:
    """Frame a whole stream; a final event cut by the end of input has `complete=False`."""
    framer = SSEFramer(max_event_bytes=max_event_bytes)
    for chunk in chunks:
        yield from framer.feed(chunk)
    yield from framer.close()
