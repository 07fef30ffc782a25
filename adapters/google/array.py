"""Incremental reading of one JSON array: `streamGenerateContent` without `alt=sse`.

The body is `[{chunk}\\n,\\r\\n{chunk}\\n]`, arriving in arbitrary pieces. `ArrayReader`
hands out each element's bytes as soon as the element is whole, holding only the element
being received. Finding an element's end is msgspec's job (C speed): decoding from the
element's start either succeeds, reports the input truncated (wait for more), or reports
trailing characters at the byte where the element ended. Attempts are made when the
buffered bytes could end an element, or have doubled since the last attempt, so the work
stays linear in the body's length however it is split.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from convstore.domain.errors import DecodeError

__all__ = ["ArrayReader", "MalformedArray"]

_WHITESPACE: Final = b" \t\r\n"
_BOM: Final = b"\xef\xbb\xbf"
_TRAILING: Final = re.compile(r"trailing characters \(byte (\d+)\)")
_TRUNCATED: Final = "truncated"
_AT_BYTE: Final = re.compile(r"\(byte (\d+)\)$")
"""Where msgspec found a value malformed: at the very end of the bytes, a number cut
after its sign, point or exponent (`-`, `1.`, `1e`), which more bytes may complete."""
_RAW: Final = msgspec.json.Decoder(msgspec.Raw)
_ENDS: Final = frozenset(b"}]")


class MalformedArray(DecodeError):
    """Bytes that are not (the beginning of) a JSON array of objects."""


class ArrayReader:
    """Splits a JSON array arriving in pieces into the bytes of its elements."""

    __slots__ = ("_buffer", "_count", "_failed", "_state", "_tried", "ended", "started")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._state = "open"  # open → element ⇄ after → closed
        self._tried = 0
        """Bytes buffered for the current element at the last attempt that found it cut."""
        self._count = 0
        self._failed: MalformedArray | None = None
        """The error found after elements this piece completed: raised at the next call."""
        self.started = False
        """True once the opening bracket was read."""
        self.ended = False
        """True once the closing bracket was read: the array is whole."""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The elements this piece completes; raises MalformedArray on bytes no JSON array
        can hold."""
        self._buffer += chunk
        return self._drain(final=False)

    def close(self) -> list[bytes]:
        """The input ended: the last element if it is whole (check `ended` for the
        closing bracket)."""
        return self._drain(final=True)

    def _drain(self, *, final: bool) -> list[bytes]:
        """The elements the buffer completes. Malformed bytes after some of them raise
        at the next call, so what came before them is never lost with them."""
        if self._failed is not None:
            raise self._failed
        out: list[bytes] = []
        try:
            return self._read(out, final=final)
        except MalformedArray as error:
            if not out:
                raise
            self._failed = error
            return out

    def _read(self, out: list[bytes], *, final: bool) -> list[bytes]:
        """`_drain`'s work: whole elements go to `out` as they are found."""
        buffer = self._buffer
        at = 0
        size = len(buffer)
        while True:
            while at < size and buffer[at] in _WHITESPACE:
                at += 1
            if at == size:
                break
            state = self._state
            if state == "open":
                if buffer.startswith(_BOM, at):
                    at += len(_BOM)
                    continue
                if not final and _BOM.startswith(buffer[at:]):
                    break  # a byte-order mark, cut
                if buffer[at] != ord("["):
                    raise MalformedArray("not a JSON array")
                at += 1
                self.started = True
                self._state = "element"
            elif state == "element":
                if buffer[at] == ord("]") and self._count == 0:
                    at += 1
                    self._state, self.ended = "closed", True
                    continue
                end = self._element_end(at, final=final)
                if end is None:
                    break
                element = bytes(buffer[at:end]).rstrip(_WHITESPACE)
                out.append(element)
                self._count += 1
                self._tried = 0
                at = end
                self._state = "after"
            elif state == "after":
                byte = buffer[at]
                at += 1
                if byte == ord(","):
                    self._state = "element"
                elif byte == ord("]"):
                    self._state, self.ended = "closed", True
                else:
                    raise MalformedArray(f"unexpected {chr(byte)!r} after an array element")
            else:
                raise MalformedArray("bytes after the end of the JSON array")
        del buffer[:at]
        return out

    def _element_end(self, at: int, *, final: bool) -> int | None:
        """Where the element starting at `at` ends, or None until more bytes arrive."""
        buffer = self._buffer
        pending = len(buffer) - at
        if not final and pending < 2 * self._tried:
            tail = bytes(buffer[-16:]).rstrip(_WHITESPACE)
            if not tail or tail[-1] not in b"}],":
                return None  # nothing new that could end an element
        try:
            _RAW.decode(bytes(buffer[at:]))
        except RecursionError:
            raise MalformedArray("malformed array element: nested too deeply") from None
        except msgspec.DecodeError as error:
            message = str(error)
            found = _TRAILING.search(message)
            if found is not None:
                end = at + int(found.group(1)) - 1
                if end <= at:
                    raise MalformedArray(f"malformed array element: {message}") from None
                return end
            at_byte = _AT_BYTE.search(message)
            cut = at_byte is not None and int(at_byte.group(1)) >= pending
            if _TRUNCATED in message or (cut and not final):
                if final:
                    return None
                self._tried = pending
                return None
            raise MalformedArray(f"malformed array element: {message}") from None
        # The rest of the buffer is one whole value: an object or array cannot grow.
        last = buffer.rstrip(_WHITESPACE)[-1:]
        if final or (last and last[0] in _ENDS):
            return len(buffer)
        self._tried = pending
        return None
