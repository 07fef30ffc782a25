"""Anthropic Messages API responses → domain drafts.

`decode_stream` reads an SSE body, `decode_message` a non-streamed JSON body (or an HTTP
error body), and `detect_and_decode` tells them apart. Each yields `ResponseStarted`, the
drafts of each content block as it closes (see `blocks`), then `ResponseEnded`. Drafts
leave the event envelope at its defaults; the ingest layer records them.

A stream cut short, broken by malformed JSON or ended by an `error` event keeps
everything that arrived, under the partial-commit rules of DESIGN.md, and ends the
response `abandoned` (or `failed`). Input that holds no response at all (it ends before
`message_start`, or is not a Messages API body) raises `DecodeError`; nothing else is
raised on any input.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Final

import msgspec

from convstore.adapters.anthropic.context import RequestContext
from convstore.adapters.anthropic.response import (
    FINISH_REASONS,
    ResponseHead,
    decode_field,
    derived_id,
    error_info,
    failed_response,
    whole_blocks,
)
from convstore.adapters.anthropic.stream import StreamDecoder
from convstore.adapters.wire.bodies import require_utf8
from convstore.adapters.wire.sse import SSEDecodeError, SSEFramer
from convstore.domain.errors import DecodeError
from convstore.domain.events import Event
from convstore.domain.vocabulary import ErrorInfo, ResponseId

__all__ = [
    "FINISH_REASONS",
    "RequestContext",
    "decode_message",
    "decode_stream",
    "detect_and_decode",
]

_FIELDS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_SSE_START: Final = (b"event:", b"data:", b"id:", b"retry:", b":")
_BOM: Final = b"\xef\xbb\xbf"
_SNIFF: Final = 16
_NO_REQUEST: Final = RequestContext()
"""The context of a response whose request is unknown (immutable: shared)."""


def decode_stream(
    chunks: Iterable[bytes], *, request: RequestContext | None = None
) -> Iterator[Event]:
    """Drafts of a streamed (SSE) Messages API response, as its blocks close."""
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
    yield from stream.end("incomplete_stream", "the stream ended before message_stop")


def decode_message(
    body: bytes, *, request: RequestContext | None = None, status: int | None = None
) -> list[Event]:
    """Drafts of a non-streamed Messages API response body, or of an HTTP error body."""
    context = request or RequestContext()
    require_utf8(body, what="the Anthropic response body")
    try:
        fields = _FIELDS.decode(body)
    except (msgspec.DecodeError, RecursionError) as error:
        raise DecodeError(
            f"not an Anthropic response: the body is not a JSON object ({error})"
        ) from None
    kind = decode_field(fields.get("type"))
    if kind == "error":
        request_id = decode_field(fields.get("request_id"))
        response_id = (
            ResponseId(request_id)
            if isinstance(request_id, str) and request_id
            else derived_id(body)
        )
        info = error_info(decode_field(fields.get("error")), status)
        return failed_response(response_id, context, info)
    message_id = decode_field(fields.get("id"))
    content = fields.get("content")
    if kind not in ("message", None) or not isinstance(message_id, str) or not message_id:
        raise DecodeError(f"not an Anthropic message: type {kind!r}, id {message_id!r}")
    if content is None and kind is None:
        raise DecodeError("not an Anthropic message: no type and no content")
    head = ResponseHead(message_id, fields, context)
    events: list[Event] = [head.started()]
    try:
        events.extend(whole_blocks(head.mapper, content))
    except msgspec.ValidationError:
        raise DecodeError("not an Anthropic message: its content is not a list") from None
    stop_reason = decode_field(fields.get("stop_reason"))
    events.extend(head.ended("completed", stop_reason if isinstance(stop_reason, str) else None))
    return events


def detect_and_decode(
    body: bytes | Iterable[bytes],
    *,
    request: RequestContext | None = None,
    status: int | None = None,
) -> Iterator[Event]:
    """Drafts of any Anthropic response body: SSE, JSON, or an HTTP error body.

    Whole bodies and chunk iterables alike; the kind is told from the first bytes. With
    `status` ≥ 400, a body that is not an Anthropic error still records a failed
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
    if head.lstrip().removeprefix(_BOM).lstrip().startswith(_SSE_START):
        return decode_stream(chain((head,), chunks), request=request)
    whole = (head + b"".join(chunks)).removeprefix(_BOM)
    try:
        return iter(decode_message(whole, request=request, status=status))
    except DecodeError:
        if status is None or status < 400:
            raise
    info = ErrorInfo(type=f"http_{status}", message="the error body is not JSON", status=status)
    return iter(failed_response(derived_id(whole), request or RequestContext(), info))
