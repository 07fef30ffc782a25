"""The Gemini API over HTTP: send a request body, get the answer's bytes.

No conversation state and no decoding here: the body comes from `encode`, the bytes go to
`decode`. The model is part of the URL (`{base_url}/models/{model}:streamGenerateContent
?alt=sse`, or `:generateContent`); the body names none. The key comes from
`GEMINI_API_KEY`, else `GOOGLE_API_KEY` (or the caller), and travels only in the
`x-goog-api-key` header — never in the URL, where proxies and logs would keep it; the
transport scrubs it from every message and error body.

An HTTP error answer (any non-2xx status, after retries when the status is retryable:
429 `RESOURCE_EXHAUSTED`, 5xx `UNAVAILABLE` …) is raised as `ProviderHTTPError` carrying
`.status` and `.body` (Google's `{"error": {code, message, status}}`): record it as a
response ended `failed` by handing `.body` to the decoder.

Usage::

    with GeminiClient() as client, client.stream_generate_content(model, body) as stream:
        for chunk in stream:           # decoded body bytes, as they arrive
            ...
        if stream.interrupted:         # the connection dropped: the bytes so far were kept
            ...
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from convstore.adapters.google.config import DEFAULT_BASE_URL, check_base_url, model_path
from convstore.adapters.http.client import ProviderClient
from convstore.adapters.http.transport import HTTPStream

__all__ = ["API_KEY_VARIABLES", "DEFAULT_BASE_URL", "GeminiClient"]

API_KEY_VARIABLES: Final = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
"""Where the key is read from, in order."""


class GeminiClient(ProviderClient):
    """A client of `POST {base_url}/models/{model}:streamGenerateContent` and
    `:generateContent`."""

    provider = "google"
    title = "Gemini"
    key_variables = API_KEY_VARIABLES
    default_base_url = DEFAULT_BASE_URL

    def _check_base_url(self, url: str) -> None:
        check_base_url(url)

    def _key_headers(self, key: str) -> dict[str, str]:
        return {"x-goog-api-key": key}

    def url(self, model: str, *, stream: bool = True) -> str:
        """The method's URL (never holding the key). Raises ConfigurationError for a model
        name that cannot go in a URL path."""
        return f"{self.base_url}/{model_path(model, stream=stream)}"

    @contextmanager
    def stream_generate_content(self, model: str, body: bytes) -> Iterator[HTTPStream]:
        """Send a request to `streamGenerateContent?alt=sse` and hand over the SSE answer.

        The stream iterates over the decoded body bytes; it ends early, with
        `.interrupted` set, when the connection drops. Raises ProviderHTTPError,
        ProviderUnavailable or DecodeError (see `adapters.http.transport`).
        """
        with self._post_stream(self.url(model, stream=True), body) as stream:
            yield stream

    def generate_content(self, model: str, body: bytes) -> bytes:
        """Send a request to `generateContent` and return the JSON answer's bytes.

        Raises StreamInterrupted if the connection drops mid-body, otherwise as
        `stream_generate_content`.
        """
        return self._post(self.url(model, stream=False), body)
