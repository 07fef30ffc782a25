"""Chat Completions responses → domain drafts.

`decode_stream` reads an SSE body of `chat.completion.chunk`s, `decode_message` a
non-streamed JSON body (a `chat.completion`, or an HTTP error body), and
`detect_and_decode` tells them apart. Each yields `ResponseStarted`, the drafts of each
choice as it closes (see `choice`), the response fields kept, then `ResponseEnded`.
Drafts leave the event envelope at its defaults; the ingest layer records them.

A stream cut short, broken by malformed JSON, or ended by an error chunk keeps everything
that arrived and ends the response `abandoned` (or `failed`). An HTTP error body (OpenAI's
`{"error": {...}}`, Ollama's `{"error": "..."}`, vLLM's `{"object": "error", ...}`) is a
response ended `failed` with the error's type and message. Input that holds nothing
response-like raises `DecodeError`; nothing else is raised on any input.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Any, Final

import msgspec

from convstore.adapters.openai_chat.choice import MESSAGE_FIELDS, Choice, whole_tool_calls
from convstore.adapters.openai_chat.context import RequestContext
from convstore.adapters.openai_chat.response import (
    ResponseHead,
    derived_id,
    error_info,
    failed_response,
    reported_error,
)
from convstore.adapters.openai_chat.stream import StreamDecoder
from convstore.adapters.wire.bodies import require_utf8
from convstore.adapters.wire.sse import SSEDecodeError, SSEFramer
from convstore.domain.errors import DecodeError
from convstore.domain.events import Event
from convstore.domain.vocabulary import ErrorInfo, ResponseId

__all__ = ["RequestContext", "decode_message", "decode_stream", "detect_and_decode"]

_FIELDS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_CHOICES: Final = msgspec.json.Decoder(list[dict[str, msgspec.Raw]])
_RAW_LIST: Final = msgspec.json.Decoder(list[msgspec.Raw])
_ANY: Final = msgspec.json.Decoder()
_SSE_START: Final = (b"event:", b"data:", b"id:", b"retry:", b":")
_BOM: Final = b"\xef\xbb\xbf"
_SNIFF: Final = 16
_NULL: Final = b"null"
_CHOICE_FIELDS: Final = frozenset({"index", "message", "finish_reason"})
_NO_REQUEST: Final = RequestContext()


def decode_stream(
    chunks: Iterable[bytes], *, request: RequestContext | None = None
) -> Iterator[Event]:
    """Drafts of a streamed (SSE) Chat Completions response, as its choices close."""
    stream = StreamDecoder(request or _NO_REQUEST)
    framer = SSEFramer()
    try:
        for chunk in chunks:
            for data in framer.feed_data(chunk):
                yield from stream.feed(data)
                if stream.done:
                    return
        for event in framer.close():
            yield from stream.feed(event.data.encode())
            if stream.done:
                return
    except SSEDecodeError as error:
        yield from stream.end("malformed_stream", f"unreadable event stream: {error}")
        return
    yield from stream.end("incomplete_stream", "the stream ended before [DONE]")


def decode_message(
    body: bytes, *, request: RequestContext | None = None, status: int | None = None
) -> list[Event]:
    """Drafts of a non-streamed Chat Completions body (a completion or an error body)."""
    context = request or _NO_REQUEST
    require_utf8(body, what="the Chat Completions response body")
    try:
        fields = _FIELDS.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as error:
        raise DecodeError(
            f"not a Chat Completions response: the body is not a JSON object ({error})"
        ) from None
    reported = reported_error(fields)
    if reported is not None and "choices" not in fields:
        return failed_response(derived_id(body), context, error_info(reported, status))
    try:
        choices = _CHOICES.decode(fields["choices"]) if "choices" in fields else None
    except (msgspec.DecodeError, msgspec.ValidationError):
        choices = None
    if choices is None:
        raise DecodeError("not a Chat Completions response: it has no list of choices")
    given = _decode(fields.get("id"))
    response_id = ResponseId(given) if isinstance(given, str) and given else derived_id(body)
    head = ResponseHead(response_id, fields, context)
    events: list[Event] = [head.started()]
    for position, choice in enumerate(choices):
        mapped = whole_choice(choice, position)
        if mapped.index == 0:
            head.finish_reason = mapped.finish_reason
        events.extend(head.mapper(mapped))
    info: ErrorInfo | None = None
    if reported is not None:
        info = error_info(reported, status)
    events.extend(head.ended("failed" if info is not None else "completed", info))
    return events


def _decode(raw: msgspec.Raw | None) -> Any:
    if raw is None:
        return None
    try:
        return _ANY.decode(raw)
    except msgspec.DecodeError:
        return None


def whole_choice(fields: dict[str, msgspec.Raw], position: int) -> Choice:
    """A choice of a whole response, its message's bytes kept as received."""
    index = _decode(fields.get("index"))
    finish = _decode(fields.get("finish_reason"))
    raw = fields.get("message")
    message_fields: dict[str, msgspec.Raw] = {}
    if raw is not None and bytes(raw) != _NULL:
        try:
            message_fields = _FIELDS.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            message_fields = {}
    known = {
        name: _decode(value)
        for name, value in message_fields.items()
        if name in MESSAGE_FIELDS and name != "tool_calls"
    }
    extras = {
        name: value
        for name, value in message_fields.items()
        if name not in MESSAGE_FIELDS and bytes(value) != _NULL
    }
    calls = message_fields.get("tool_calls")
    try:
        tool_calls = (
            whole_tool_calls(_RAW_LIST.decode(calls)) if calls and bytes(calls) != _NULL else []
        )
    except (msgspec.DecodeError, msgspec.ValidationError):
        tool_calls = []
        if calls is not None:
            extras["tool_calls"] = calls
    return Choice(
        index=index if type(index) is int else position,
        message=known,
        tool_calls=tool_calls,
        raw=bytes(raw) if raw is not None and message_fields else None,
        extras=extras,
        choice_extras={
            name: value
            for name, value in fields.items()
            if name not in _CHOICE_FIELDS and bytes(value) != _NULL
        },
        finish_reason=finish if isinstance(finish, str) else None,
    )


def detect_and_decode(
    body: bytes | Iterable[bytes],
    *,
    request: RequestContext | None = None,
    status: int | None = None,
) -> Iterator[Event]:
    """Drafts of any Chat Completions body: SSE, JSON, or an HTTP error body.

    Whole bodies and chunk iterables alike; the kind is told from the first bytes. With
    `status` ≥ 400, a body that is not an error object still records a failed response;
    otherwise unreadable input raises DecodeError.
    """
    chunks: Iterator[bytes]
    if isinstance(body, bytes | bytearray | memoryview):
        head, chunks = bytes(body), iter(())
    else:
        chunks = iter(body)
        head = b""
        for chunk in chunks:
            head += chunk
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
    return iter(failed_response(derived_id(whole), request or _NO_REQUEST, info))
