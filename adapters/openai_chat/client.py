"""Chat Completions over HTTP: send a request body to `{base_url}/chat/completions`, get
the answer's bytes.

No conversation state and no decoding here: the body comes from `encode`, the bytes go
to `decode`. The key comes from `OPENAI_CHAT_API_KEY`, or from `OPENAI_API_KEY` only when
the server is OpenAI's own (an OpenAI key is never sent to another server); it lives only
in the `authorization` request header and is never stored, logged or put in a message.
A local server that needs no key still wants one set (any value), as the `openai` SDK
does. HTTP errors and transport failures are raised as in `adapters.http.transport`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from convstore.adapters.http.client import ProviderClient, api_key_from_env
from convstore.adapters.http.transport import HTTPStream
from convstore.adapters.openai_chat.config import DEFAULT_BASE_URL
from convstore.adapters.openai_chat.context import server_host
from convstore.adapters.wire.bodies import with_stream

__all__ = ["API_KEY_VARIABLE", "ChatClient", "api_key_for"]

API_KEY_VARIABLE: Final = "OPENAI_CHAT_API_KEY"
OPENAI_KEY_VARIABLE: Final = "OPENAI_API_KEY"
OPENAI_HOST: Final = "api.openai.com"


def api_key_for(base_url: str) -> str:
    """The key for a server: `OPENAI_CHAT_API_KEY`, else (OpenAI's own server only)
    `OPENAI_API_KEY`; ConfigurationError when none is set."""
    if server_host(base_url) == OPENAI_HOST:
        return api_key_from_env(API_KEY_VARIABLE, OPENAI_KEY_VARIABLE)
    return api_key_from_env(API_KEY_VARIABLE)


class ChatClient(ProviderClient):
    """A client of `POST {base_url}/chat/completions`, streamed or not."""

    provider = "openai-chat"
    title = "Chat Completions"
    key_variables = (API_KEY_VARIABLE,)
    default_base_url = DEFAULT_BASE_URL

    def _key_headers(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    @contextmanager
    def stream_response(self, body: bytes) -> Iterator[HTTPStream]:
        """Send a request with `"stream": true` and hand over the SSE answer (see
        `adapters.http.transport` for what it raises)."""
        with self._post_stream(
            self._url, with_stream(body, stream=True, provider="Chat Completions")
        ) as stream:
            yield stream

    def create_response(self, body: bytes) -> bytes:
        """Send a request without streaming and return the JSON answer's bytes."""
        return self._post(self._url, with_stream(body, stream=False, provider="Chat Completions"))

    @property
    def _url(self) -> str:
        return f"{self.base_url}/chat/completions"
