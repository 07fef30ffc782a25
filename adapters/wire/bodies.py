"""Byte-exact edits of a request body that is about to be sent.

A replayed body embeds stored provider values byte for byte, so a client may only touch
what it must (the `stream` flag) and must leave every other value's bytes as they are.
"""

from __future__ import annotations

from typing import Final

import msgspec

from convstore.domain.errors import DecodeError

_FIELDS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_encode: Final = msgspec.json.Encoder().encode
_TRUE: Final = b"true"
_WHITESPACE: Final = b" \t\r\n"


def require_utf8(body: bytes, *, what: str) -> None:
    """Raise DecodeError unless `body` is UTF-8 (JSON's only encoding on the wire).

    Raw slices of a body are kept as payloads, and a payload must be UTF-8: checking the
    whole body once here turns a bad byte into a clear error before any draft is made.
    """
    if body.isascii():
        return
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DecodeError(f"{what} is not UTF-8 (byte {error.start}: {error.reason})") from None


def with_stream(body: bytes, *, stream: bool, provider: str = "provider") -> bytes:
    """The request body with its `stream` field as asked; every other value keeps its bytes.

    `stream=True`: a body without the field gets `"stream":true` inserted after its `{`
    (the rest byte-identical); one with another value is re-encoded with `true`.
    `stream=False`: a body whose `stream` is `true` is re-encoded without it. Re-encoding
    keeps each value's bytes exactly (only the whitespace between fields changes).
    """
    try:
        fields = _FIELDS.decode(body)
    except (msgspec.DecodeError, RecursionError) as error:
        raise DecodeError(f"the {provider} request body is not a JSON object: {error}") from None
    current = fields.get("stream")
    streams = current is not None and bytes(current) == _TRUE
    if streams == stream:
        return body
    if stream and current is None:
        start = len(body) - len(body.lstrip(_WHITESPACE))
        rest = body[start + 1 :]
        separator = b"," if rest.lstrip(_WHITESPACE)[:1] != b"}" else b""
        return body[: start + 1] + b'"stream":true' + separator + rest
    if stream:
        fields["stream"] = msgspec.Raw(_TRUE)
    else:
        del fields["stream"]
    return _encode(fields)
