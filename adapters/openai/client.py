"""The OpenAI Responses API over HTTP: send a request body, get the answer's bytes.

No conversation state and no decoding here: the body comes from `encode`, the bytes go
to `decode`. The key comes from `OPENAI_API_KEY` (or the caller) and lives only in the
`authorization` request header; it is never stored, logged or put in a message (the shared
transport scrubs it from every error).

An HTTP error answer (any non-2xx status, after retries when the status is retryable) is
raised as `ProviderHTTPError` carrying `.status` and `.body`, the provider's error body:
DESIGN.md records it as a response ended `failed`, so callers hand `.body` to the
decoder. Every other failure is one of the typed errors listed in `adapters.http`.

Usage::

    with OpenAIClient() as client, client.stream_response(body) as stream:
        for chunk in stream:           # decoded body bytes, as they arrive
            ...
        if stream.interrupted:         # the connection dropped: the bytes so far were kept
            ...
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import msgspec

from convstore.adapters.http import (
    DEFAULT_MAX_BODY_BYTES,
    HTTPStream,
    RetryPolicy,
    Timeouts,
    Transport,
    api_key_from_env,
)
from convstore.adapters.openai.config import DEFAULT_BASE_URL
from convstore.domain.errors import ConfigurationError, DecodeError

__all__ = ["API_KEY_VARIABLE", "DEFAULT_BASE_URL", "OpenAIClient", "with_stream"]

API_KEY_VARIABLE: Final = "OPENAI_API_KEY"
_JSON: Final = {"content-type": "application/json"}
_FIELDS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_encode = msgspec.json.Encoder().encode
_TRUE: Final = b"true"
_WHITESPACE: Final = b" \t\r\n"


class OpenAIClient:
    """A client of `POST {base_url}/responses`, streamed or not."""

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        *,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        key = api_key.strip() if api_key is not None else api_key_from_env(API_KEY_VARIABLE)
        if not key:
            raise ConfigurationError(f"the OpenAI API key is empty: set {API_KEY_VARIABLE}")
        self.base_url = base_url.rstrip("/")
        self._headers = {"authorization": f"Bearer {key}"}
        self._transport = Transport(
            provider="openai",
            timeouts=timeouts,
            retry=retry,
            max_body_bytes=max_body_bytes,
        )

    def __repr__(self) -> str:
        return f"OpenAIClient(base_url={self.base_url!r})"

    def close(self) -> None:
        """Close the pooled connections."""
        self._transport.close()

    def __enter__(self) -> OpenAIClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def stream_response(self, body: bytes) -> Iterator[HTTPStream]:
        """Send a Responses request with `"stream": true` and hand over the SSE answer.

        The stream iterates over the decoded body bytes; it ends early, with
        `.interrupted` set, when the connection drops. Raises ProviderHTTPError,
        ProviderUnavailable or DecodeError (see `adapters.http`).
        """
        with self._transport.post_stream(
            self._url,
            headers={**self._headers, "accept": "text/event-stream", **_JSON},
            body=with_stream(body, stream=True),
        ) as stream:
            yield stream

    def create_response(self, body: bytes) -> bytes:
        """Send a Responses request without streaming and return the JSON answer's bytes.

        Raises StreamInterrupted if the connection drops mid-body, otherwise as
        `stream_response`.
        """
        return self._transport.post(
            self._url,
            headers={**self._headers, "accept": "application/json", **_JSON},
            body=with_stream(body, stream=False),
        )

    @property
    def _url(self) -> str:
        return f"{self.base_url}/responses"


def with_stream(body: bytes, *, stream: bool) -> bytes:
    """The request body with its `stream` field as asked; every other value keeps its bytes.

    `stream=True`: a body without the field gets `"stream":true` inserted after its `{`
    (the rest byte-identical); one with another value is re-encoded with `true`.
    `stream=False`: a body whose `stream` is `true` is re-encoded without it. Re-encoding
    keeps each value's bytes exactly (only the whitespace between fields changes).
    """
    try:
        fields = _FIELDS.decode(body)
    except (msgspec.DecodeError, RecursionError) as error:
        raise DecodeError(f"the OpenAI request body is not a JSON object: {error}") from None
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
