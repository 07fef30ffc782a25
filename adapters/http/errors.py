"""The typed errors of HTTP to the providers (the domain's tree, plus one branch of our own)::

ConvstoreError
├── ConfigurationError        (domain) an API key variable is not set
├── DecodeError               (domain) a body past max_body_bytes, a corrupt or
│                             unsupported content coding
└── ProviderError             the provider could not serve the request
    ├── ProviderUnavailable   no HTTP answer after every attempt (connect error,
    │                         timeout, connection dropped before the answer's head)
    ├── ProviderHTTPError     an HTTP error answer, after retries when retryable;
    │                         carries .status, .body (bytes: record it as data), .headers
    └── StreamInterrupted     the connection ended mid-body: not raised by
                              HTTPStream.iter_bytes (which ends, keeping what arrived,
                              and sets HTTPStream.interrupted), raised by read()
"""

from __future__ import annotations

from collections.abc import Mapping

from convstore.domain.errors import ConvstoreError


class ProviderError(ConvstoreError):
    """The provider could not serve the request."""


class ProviderUnavailable(ProviderError):
    """No HTTP answer came after every attempt (connect error, timeout, dropped connection)."""

    def __init__(self, message: str, *, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class ProviderHTTPError(ProviderError):
    """An HTTP error answer; `body` is the provider's error body, to be recorded as data."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        body: bytes,
        headers: Mapping[str, str],
        attempts: int,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        """The decoded error body (API keys scrubbed)."""
        self.headers = dict(headers)
        """The answer's headers (never the request's)."""
        self.attempts = attempts


class StreamInterrupted(ProviderError):
    """The connection ended before the body did; what arrived was handed over."""

    def __init__(self, message: str, *, received: int) -> None:
        super().__init__(message)
        self.received = received
        """Decoded body bytes handed over before the interruption."""
