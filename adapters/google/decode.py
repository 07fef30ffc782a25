"""Gemini `generateContent` / `streamGenerateContent` responses → domain drafts.

Three body shapes, one decoder (`stream.ChunkDecoder`) behind them:

- `decode_stream`: an SSE body (`streamGenerateContent?alt=sse`), one chunk per event;
- `decode_array`: the JSON array of chunks `streamGenerateContent` answers without
  `alt=sse`, read incrementally (`array.ArrayReader`);
- `decode_message`: one JSON object (`generateContent`, or an HTTP error body
  `{"error": {code, message, status}}`, which becomes a response ended `failed`).

`detect_and_decode` tells them apart from the first bytes. Each yields `ResponseStarted`,
the drafts of the candidate's parts (see `parts`), the grounding activities (see
`grounding`), then `ResponseEnded`. Drafts leave the event envelope at its defaults; the
ingest layer records them.

A stream cut short or broken by malformed JSON keeps everything that arrived, under the
partial-commit rules of DESIGN.md, and ends the response `abandoned`; an error chunk ends
it `failed`. Input that holds nothing response-like (it ends before the first whole chunk,
or is not a Gemini body) raises `DecodeError`; nothing else is raised on any input.
Response ids are the chunks' `responseId`, or a digest of the first chunk when absent, and
every id derived from them is positional, so decoding the same bytes twice gives the same
ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Final

from convstore.adapters.google.array import ArrayReader, MalformedArray
from convstore.adapters.google.context import RequestContext, model_from_path
from convstore.adapters.google.response import FINISH_REASONS, derived_id, failed_response
from convstore.adapters.google.stream import ChunkDecoder
from convstore.adapters.wire.sse import SSEDecodeError, SSEFramer
from convstore.domain.errors import DecodeError
from convstore.domain.events import Event
from convstore.domain.vocabulary import ErrorInfo

__all__ = [
    "FINISH_REASONS",
    "RequestContext",
    "context_for",
    "decode_array",
    "decode_message",
    "decode_stream",
    "detect_and_decode",
    "model_from_path",
]

_SSE_START: Final = (b"event:", b"data:", b"id:", b"retry:", b":")
_BOM: Final = b"\xef\xbb\xbf"
_SNIFF: Final = 16
_NO_REQUEST: Final = RequestContext()
"""The context of a response whose request is unknown (immutable: shared)."""
_WHITESPACE: Final = b" \t\r\n"


def decode_stream(
    chunks: Iterable[bytes], *, request: RequestContext | None = None
) -> Iterator[Event]:
    """Drafts of an SSE `streamGenerateContent?alt=sse` body."""
    stream = ChunkDecoder(request or _NO_REQUEST)
    framer = SSEFramer()
    feed = stream.feed
    feed_data = framer.feed_data
    try:
        for chunk in chunks:
            for data in feed_data(chunk):
                # Not kept in a local: a draft (a whole run's text) must not stay alive
                # while the next chunks assemble the next run.
                yield from feed(data)
                if stream.done:
                    return
        for event in framer.close():
            yield from feed(event.data.encode(), cut=not event.complete)
            if stream.done:
                return
    except SSEDecodeError as error:
        yield from stream.end("malformed_stream", f"unreadable event stream: {error}")
        return
    yield from stream.finish()


def decode_array(
    chunks: Iterable[bytes],
    *,
    request: RequestContext | None = None,
    status: int | None = None,
) -> Iterator[Event]:
    """Drafts of the JSON array `streamGenerateContent` answers without `alt=sse`,
    read as it arrives (`status`: the HTTP status, recorded with an error chunk)."""
    stream = ChunkDecoder(request or _NO_REQUEST, status=status)
    reader = ArrayReader()
    try:
        for chunk in chunks:
            for element in reader.feed(chunk):
                yield from _element(stream, element)
                if stream.done:
                    return
        for element in reader.close():
            yield from _element(stream, element)
            if stream.done:
                return
    except MalformedArray as error:
        yield from stream.end("malformed_stream", f"unreadable chunk array: {error}")
        return
    if reader.ended:
        yield from stream.finish(complete=True)
    else:
        yield from stream.end("incomplete_stream", "the array ended before its closing bracket")


def _element(stream: ChunkDecoder, element: bytes) -> Iterable[Event]:
    try:
        element.decode()
    except UnicodeDecodeError as error:
        return stream.end("malformed_stream", f"a chunk is not UTF-8: {error}")
    return stream.feed(element)


def decode_message(
    body: bytes, *, request: RequestContext | None = None, status: int | None = None
) -> list[Event]:
    """Drafts of a non-streamed body: one `GenerateContentResponse` or an HTTP error body
    (a JSON array of chunks is read as `decode_array` reads it)."""
    context = request or RequestContext()
    body = bytes(body).removeprefix(_BOM)
    if body.lstrip(_WHITESPACE).startswith(b"["):
        return list(decode_array([body], request=context, status=status))
    try:
        body.decode()
    except UnicodeDecodeError as error:
        raise DecodeError(f"not a Gemini response: the body is not UTF-8 ({error})") from None
    stream = ChunkDecoder(context, whole=True, status=status)
    events = list(stream.feed(body))
    events.extend(stream.finish())
    return events


def detect_and_decode(
    body: bytes | Iterable[bytes],
    *,
    request: RequestContext | None = None,
    status: int | None = None,
) -> Iterator[Event]:
    """Drafts of any Gemini response body: SSE, one JSON object, or a JSON array of
    chunks; whole bodies and chunk iterables alike, told apart by their first bytes.

    With `status` ≥ 400, a body that is not a Gemini error still records a failed
    response; otherwise unreadable input raises DecodeError.
    """
    chunks: Iterator[bytes]
    if isinstance(body, bytes | bytearray | memoryview):
        head, chunks = bytes(body), iter(())
    else:
        chunks = iter(body)
        head = b""
        for chunk in chunks:
            head += chunk  # only until the first few meaningful bytes
            if len(head.lstrip()) >= _SNIFF:
                break
    start = head.lstrip(_WHITESPACE).removeprefix(_BOM).lstrip(_WHITESPACE)
    failing = status is not None and status >= 400
    if start.startswith(_SSE_START):
        return decode_stream(chain((head,), chunks), request=request)
    if start.startswith(b"[") and not failing:
        return decode_array(chain((head,), chunks), request=request)
    whole = head + b"".join(chunks)
    try:
        return iter(decode_message(whole, request=request, status=status))
    except DecodeError:
        if not failing:
            raise
    info = ErrorInfo(type=f"http_{status}", message="the error body is not JSON", status=status)
    return iter(failed_response(derived_id(whole, "error"), request or RequestContext(), info))


def context_for(
    request_body: bytes | None, *, path: str = "", model: str = ""
) -> RequestContext | None:
    """The RequestContext of a recorded request body and its URL path (None without a
    body): the model comes from the path, as a Gemini body does not name it."""
    if request_body is None:
        return None
    return RequestContext.from_body(request_body, model=model or model_from_path(path))
