"""The Anthropic Messages API over HTTP: send a request body, get the answer's bytes.

No conversation state and no decoding here: the body comes from `encode`, the bytes go
to `decode`. The key comes from `ANTHROPIC_API_KEY` (or the caller) and lives only in the
request headers; it is never stored, logged or put in a message.

An HTTP error answer (any non-2xx status, after retries when the status is retryable) is
raised as `ProviderHTTPError` carrying `.status` and `.body`, the provider's error body:
DESIGN.md records it as a response ended `failed`, so callers hand `.body` to the
decoder. Every other failure is one of the typed errors listed in `adapters.http.transport`.

Usage::

    with AnthropicClient() as client, client.stream_message(body) as stream:
        for chunk in stream:           # decoded body bytes, as they arrive
            ...
        if stream.interrupted:         # the connection dropped: the bytes so far were kept
            ...
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Final

from convstore.adapters.http.client import ProviderClient
from convstore.adapters.http.transport import (
    DEFAULT_MAX_BODY_BYTES,
    HTTPStream,
    RetryPolicy,
    Timeouts,
)
from convstore.adapters.wire.bodies import with_stream

__all__ = ["API_KEY_VARIABLE", "API_VERSION", "DEFAULT_BASE_URL", "AnthropicClient"]

DEFAULT_BASE_URL: Final = "https://api.anthropic.com"
API_VERSION: Final = "2023-06-01"
API_KEY_VARIABLE: Final = "ANTHROPIC_API_KEY"


class AnthropicClient(ProviderClient):
    """A client of `POST {base_url}/v1/messages`, streamed or not."""

    provider = "anthropic"
    title = "Anthropic"
    key_variables = (API_KEY_VARIABLE,)
    default_base_url = DEFAULT_BASE_URL

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        *,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        betas: Sequence[str] = (),
    ) -> None:
        super().__init__(
            base_url, api_key, timeouts=timeouts, retry=retry, max_body_bytes=max_body_bytes
        )
        if betas:
            self._headers["anthropic-beta"] = ",".join(betas)

    def _key_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key, "anthropic-version": API_VERSION}

    @contextmanager
    def stream_message(self, body: bytes) -> Iterator[HTTPStream]:
        """Send a Messages request with `"stream": true` and hand over the SSE answer.

        The stream iterates over the decoded body bytes; it ends early, with
        `.interrupted` set, when the connection drops. Raises ProviderHTTPError,
        ProviderUnavailable or DecodeError (see `adapters.http.transport`).
        """
        with self._post_stream(
            self._url, with_stream(body, stream=True, provider="Anthropic")
        ) as stream:
            yield stream

    def create_message(self, body: bytes) -> bytes:
        """Send a Messages request without streaming and return the JSON answer's bytes.

        Raises StreamInterrupted if the connection drops mid-body, otherwise as
        `stream_message`.
        """
        return self._post(self._url, with_stream(body, stream=False, provider="Anthropic"))

    @property
    def _url(self) -> str:
        return f"{self.base_url}/v1/messages"
