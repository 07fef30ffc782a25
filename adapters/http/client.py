"""What every provider's client shares: the API key from the environment, the base URL,
the pooled transport, and JSON requests streamed or not.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar, Final, Self

from convstore.adapters.http.transport import (
    DEFAULT_MAX_BODY_BYTES,
    HTTPStream,
    RetryPolicy,
    Timeouts,
    Transport,
)
from convstore.domain.errors import ConfigurationError


def api_key_from_env(*names: str) -> str:
    """The API key in the first of these environment variables that is set and not blank."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    wanted = " or ".join(names)
    raise ConfigurationError(
        f"no API key: set the environment variable {wanted} (keys are read from the "
        "environment only and never stored)"
    )


_JSON: Final = {"content-type": "application/json"}


class ProviderClient:
    """What every provider's client shares: the API key (the caller's, else the first of
    `key_variables` set; never empty), the base URL, the pooled transport, and JSON
    requests streamed or not. A provider's client names its endpoints and key headers."""

    provider: ClassVar[str]
    """Names the provider in the transport's messages, e.g. "anthropic"."""
    title: ClassVar[str]
    """Names the API for a person, e.g. "Anthropic"."""
    key_variables: ClassVar[tuple[str, ...]]
    """The environment variables the key is read from, in order."""
    default_base_url: ClassVar[str]

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        url = self.default_base_url if base_url is None else base_url
        self._check_base_url(url)
        key = api_key.strip() if api_key is not None else api_key_from_env(*self.key_variables)
        if not key:
            raise ConfigurationError(
                f"the {self.title} API key is empty: set {' or '.join(self.key_variables)}"
            )
        self.base_url = url.rstrip("/")
        self._headers = self._key_headers(key)
        self._transport = Transport(
            provider=self.provider, timeouts=timeouts, retry=retry, max_body_bytes=max_body_bytes
        )

    def _check_base_url(self, url: str) -> None:
        """Raise ConfigurationError for a base URL requests cannot be built on (by default
        every URL is taken)."""

    def _key_headers(self, key: str) -> dict[str, str]:
        """The headers every request carries: the key's, and any the API requires."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    def close(self) -> None:
        """Close the pooled connections."""
        self._transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def _post_stream(self, url: str, body: bytes) -> Iterator[HTTPStream]:
        """POST a JSON body asking for server-sent events; the answer as an HTTPStream."""
        with self._transport.post_stream(
            url, headers={**self._headers, "accept": "text/event-stream", **_JSON}, body=body
        ) as stream:
            yield stream

    def _post(self, url: str, body: bytes) -> bytes:
        """POST a JSON body asking for JSON; the answer's bytes."""
        return self._transport.post(
            url, headers={**self._headers, "accept": "application/json", **_JSON}, body=body
        )
