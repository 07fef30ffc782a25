"""OpenAI Responses API responses → domain drafts.

`decode_stream` reads an SSE body, `decode_message` a non-streamed JSON body (the
response object, the compact endpoint's `response.compaction`, or an HTTP error body),
and `detect_and_decode` tells them apart. Each yields `ResponseStarted`, the drafts of each
output item as it closes (see `items`), then `ResponseEnded`. Drafts leave the event
envelope at its defaults; the ingest layer records them. The response id is the `resp_…`
id; stream deltas' `obfuscation` fields are ignored.

A stream cut short, broken by malformed JSON, or ended by an `error` event or
`response.failed` keeps everything that arrived, under the partial-commit rules of
DESIGN.md, and ends the response `abandoned` (or `failed`). An HTTP error body
(`{"error": {...}}`) is a response ended `failed` with the error's type and message.
Input that holds nothing response-like (it ends before `response.created`, or is not a
Responses API body) raises `DecodeError`; nothing else is raised on any input.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Final

import msgspec

from convstore.adapters.openai.context import RequestContext
from convstore.adapters.openai.response import (
    INCOMPLETE_REASONS,
    ResponseHead,
    decode_field,
    derived_id,
    error_info,
    failed_response,
    whole_items,
)
from convstore.adapters.openai.stream import StreamDecoder
from convstore.adapters.wire.bodies import require_utf8
from convstore.adapters.wire.sse import SSEDecodeError, SSEFramer
from convstore.domain.errors import DecodeError
from convstore.domain.events import Event
from convstore.domain.vocabulary import ErrorInfo

__all__ = [
    "INCOMPLETE_REASONS",
    "RequestContext",
    "decode_message",
    "decode_stream",
    "detect_and_decode",
]

_FIELDS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_SSE_START: Final = (b"event:", b"data:", b"id:", b"retry:", b":")
_BOM: Final = b"\xef\xbb\xbf"
_SNIFF: Final = 16
_OBJECTS: Final = frozenset({"response", "response.compaction", None})
"""Response object types: a response, and the `/v1/responses/compact` endpoint's compacted
window (its `output` the kept user messages and a `compaction` item; no status)."""
_NO_REQUEST: Final = RequestContext()
"""The context of a response whose request is unknown (immutable: shared)."""


def decode_stream(
    chunks: Iterable[bytes], *, request: RequestContext | None = None
) -> Iterator[Event]:
    """Drafts of a streamed (SSE) Responses API response, as its items close."""
    stream = StreamDecoder(request or _NO_REQUEST)
    framer = SSEFramer()
    feed_data = framer.feed_data
    feed_all = stream.feed_all
    try:
        for chunk in chunks:
            # Nothing kept in a local: neither a draft (a whole block's text) nor an event's
            # data may stay alive while the next chunks assemble the next block.
            yield from feed_all(feed_data(chunk))
            if stream.done:
                return
        for event in framer.close():
            yield from stream.feed(event.data)
            if stream.done:
                return
    except SSEDecodeError as error:
        yield from stream.end("malformed_stream", f"unreadable event stream: {error}")
        return
    yield from stream.end("incomplete_stream", "the stream ended before its final event")


def decode_message(
    body: bytes, *, request: RequestContext | None = None, status: int | None = None
) -> list[Event]:
    """Drafts of a non-streamed Responses API body (a response object or an error body)."""
    context = request or RequestContext()
    require_utf8(body, what="the OpenAI response body")
    try:
        fields = _FIELDS.decode(body)
    except (msgspec.DecodeError, RecursionError) as error:
        raise DecodeError(
            f"not an OpenAI response: the body is not a JSON object ({error})"
        ) from None
    kind = decode_field(fields.get("object"))
    response_id = decode_field(fields.get("id"))
    reported = decode_field(fields.get("error"))
    if kind is None and "output" not in fields and isinstance(reported, dict):
        return failed_response(derived_id(body), context, error_info(reported, status))
    known = kind is None or (isinstance(kind, str) and kind in _OBJECTS)  # never unhashable
    if not known or not isinstance(response_id, str) or not response_id:
        named = repr(kind) if kind is None or isinstance(kind, str) else type(kind).__name__
        given = repr(response_id) if isinstance(response_id, str | None) else "not a string"
        raise DecodeError(f"not an OpenAI response: object {named}, id {given}")
    if kind is None and "output" not in fields:
        raise DecodeError("not an OpenAI response: no object type and no output")
    head = ResponseHead(response_id, fields, context)
    events: list[Event] = [head.started()]
    try:
        events.extend(whole_items(head.mapper, fields.get("output")))
    except msgspec.ValidationError:
        raise DecodeError("not an OpenAI response: its output is not a list") from None
    state, stop_reason, info = head.outcome()
    if info is not None and status is not None:
        info = msgspec.structs.replace(info, status=status)
    events.extend(head.ended(state, stop_reason, info))
    return events


def detect_and_decode(
    body: bytes | Iterable[bytes],
    *,
    request: RequestContext | None = None,
    status: int | None = None,
) -> Iterator[Event]:
    """Drafts of any Responses API body: SSE, JSON, or an HTTP error body.

    Whole bodies and chunk iterables alike; the kind is told from the first bytes. With
    `status` ≥ 400, a body that is not an OpenAI error still records a failed response;
    otherwise unreadable input raises DecodeError.
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
    if head.lstrip().removeprefix(_BOM).lstrip().startswith(_SSE_START):
        return decode_stream(chain((head,), chunks), request=request)
    whole = head + b"".join(chunks)
    try:
        return iter(decode_message(whole, request=request, status=status))
    except DecodeError:
        if status is None or status < 400:
            raise
    info = ErrorInfo(type=f"http_{status}", message="the error body is not JSON", status=status)
    return iter(failed_response(derived_id(whole), request or RequestContext(), info))
