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

from convstore.adapters.bodies import with_stream
from convstore.adapters.http import (
    DEFAULT_MAX_BODY_BYTES,
    HTTPStream,
    RetryPolicy,
    Timeouts,
    Transport,
    api_key_from_env,
)
from convstore.adapters.openai.config import DEFAULT_BASE_URL
from convstore.domain.errors import ConfigurationError

__all__ = ["API_KEY_VARIABLE", "DEFAULT_BASE_URL", "OpenAIClient"]

API_KEY_VARIABLE: Final = "OPENAI_API_KEY"
_JSON: Final = {"content-type": "application/json"}


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
            body=with_stream(body, stream=True, provider="OpenAI"),
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
            body=with_stream(body, stream=False, provider="OpenAI"),
        )

    @property
    def _url(self) -> str:
        return f"{self.base_url}/responses"
