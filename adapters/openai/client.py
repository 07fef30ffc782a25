"""The OpenAI Responses API over HTTP: send a request body, get the answer's bytes.

No conversation state and no decoding here: the body comes from `encode`, the bytes go
to `decode`. The key comes from `OPENAI_API_KEY` (or the caller) and lives only in the
`authorization` request header; it is never stored, logged or put in a message (the shared
transport scrubs it from every error).

An HTTP error answer (any non-2xx status, after retries when the status is retryable) is
raised as `ProviderHTTPError` carrying `.status` and `.body`, the provider's error body:
DESIGN.md records it as a response ended `failed`, so callers hand `.body` to the
decoder. Every other failure is one of the typed errors listed in `adapters.http.transport`.

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

from convstore.adapters.http.client import ProviderClient
from convstore.adapters.http.transport import HTTPStream
from convstore.adapters.openai.config import DEFAULT_BASE_URL
from convstore.adapters.wire.bodies import with_stream

__all__ = ["API_KEY_VARIABLE", "DEFAULT_BASE_URL", "OpenAIClient"]

API_KEY_VARIABLE: Final = "OPENAI_API_KEY"


class OpenAIClient(ProviderClient):
    """A client of `POST {base_url}/responses`, streamed or not."""

    provider = "openai"
    title = "OpenAI"
    key_variables = (API_KEY_VARIABLE,)
    default_base_url = DEFAULT_BASE_URL

    def _key_headers(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    @contextmanager
    def stream_response(self, body: bytes) -> Iterator[HTTPStream]:
        """Send a Responses request with `"stream": true` and hand over the SSE answer.

        The stream iterates over the decoded body bytes; it ends early, with
        `.interrupted` set, when the connection drops. Raises ProviderHTTPError,
        ProviderUnavailable or DecodeError (see `adapters.http.transport`).
        """
        with self._post_stream(
            self._url, with_stream(body, stream=True, provider="OpenAI")
        ) as stream:
            yield stream

    def create_response(self, body: bytes) -> bytes:
        """Send a Responses request without streaming and return the JSON answer's bytes.

        Raises StreamInterrupted if the connection drops mid-body, otherwise as
        `stream_response`.
        """
        return self._post(self._url, with_stream(body, stream=False, provider="OpenAI"))

    @property
    def _url(self) -> str:
        return f"{self.base_url}/responses"
