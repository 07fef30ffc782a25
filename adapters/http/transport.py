"""HTTP transport for provider clients: POST a request, stream the answer, retry safely.

Provider-neutral (Anthropic today; OpenAI and Gemini reuse it). One job: turn a request
into either a stream of decoded body bytes or one typed error, and never leak a key.

- **Retries** happen only before a single byte of the body was handed to the caller: on a
  transport failure (connection refused or reset, timeouts before the answer's head) and
  on a retryable status (408, 409, 429, every 5xx, Anthropic's 529 `overloaded_error`
  included), with exponential backoff and jitter. `retry-after-ms` and `retry-after`
  (seconds or an HTTP date) are honoured, capped at `RetryPolicy.max_delay`; an
  `x-should-retry: true|false` header overrides the status. Once the caller has the
  stream, nothing is retried: what arrived is the caller's to record.
- **Bodies** are read as raw bytes and decoded here, not by httpx (whose decoders inflate
  a whole network chunk at once): gzip (multi-member too) and deflate (zlib-wrapped or
  raw) are inflated in pieces of at most 64 KiB, and the decoded total is counted as it
  streams. Past `max_body_bytes` (default 256 MiB; 1 MiB for an error answer's body,
  which is held whole) the body is stopped with a `DecodeError`, so a compression bomb
  costs bounded memory. We ask for `gzip, deflate`
  only; any other content coding is refused with a `DecodeError`.
- **Secrets**: the values of `x-api-key`, `authorization`, `x-goog-api-key` and `api-key`
  request headers are scrubbed from every message and every body, error or successful,
  this module produces (a successful body as it streams, a key split between two pieces
  included);
  no error keeps a reference to httpx's request (it holds the headers); URLs in messages
  lose their query string.

The typed errors are drawn in `errors`; `codings` inflates the body, `client` holds what
every provider's client shares.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import httpx
import msgspec

from convstore.adapters.http.codings import ACCEPT_ENCODING, content_codings, inflate
from convstore.adapters.http.errors import (
    ProviderHTTPError,
    ProviderUnavailable,
    StreamInterrupted,
)
from convstore.domain.errors import ConfigurationError, DecodeError

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_ERROR_BODY_BYTES",
    "SECRET_HEADERS",
    "HTTPStream",
    "RetryPolicy",
    "Timeouts",
    "Transport",
]

DEFAULT_MAX_BODY_BYTES: Final = 256 * 1024 * 1024
"""The default cap on one decoded response body."""

MAX_ERROR_BODY_BYTES: Final = 1024 * 1024
"""The cap on an error answer's decoded body (it is held in memory whole)."""

SECRET_HEADERS: Final = frozenset({"x-api-key", "authorization", "x-goog-api-key", "api-key"})
"""Request headers whose values never appear in a message, a log line or an error body."""

REDACTED: Final = "[redacted]"


log = logging.getLogger("convstore.http")


# --- settings ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds to wait: to connect, between two reads, for a write, for a pooled connection."""

    connect: float = 10.0
    read: float = 600.0
    write: float = 60.0
    pool: float = 10.0

    def to_httpx(self) -> httpx.Timeout:
        """The same four timeouts as httpx takes them."""
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.write, pool=self.pool)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When and how long to wait before sending a request again."""

    max_attempts: int = 4
    """Attempts in all, the first included (1 = never retry)."""
    base_delay: float = 0.5
    """The first backoff in seconds; each further one doubles it."""
    max_delay: float = 30.0
    """The longest wait, whatever the backoff or a `retry-after` header asks."""
    jitter: float = 0.25
    """A backoff is shortened by a random fraction up to this (0 = exact)."""
    retry_statuses: frozenset[int] = frozenset({408, 409, 429})
    """Retryable statuses besides every 5xx."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError("retry.max_attempts must be at least 1")
        if self.base_delay < 0 or self.max_delay < 0 or not 0 <= self.jitter <= 1:
            raise ConfigurationError("retry delays must be >= 0 and retry.jitter in [0, 1]")

    def retryable(self, status: int, headers: Mapping[str, str]) -> bool:
        """Whether an answer with this status and these headers may be tried again."""
        should = headers.get("x-should-retry", "").strip().lower()
        if should in ("true", "false"):
            return should == "true"
        return status >= 500 or status in self.retry_statuses

    def delay(self, attempt: int, headers: Mapping[str, str] | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        asked = _retry_after(headers) if headers is not None else None
        if asked is not None:
            return min(asked, self.max_delay)
        backoff = min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))
        return backoff * (1 - self.jitter * random.random())


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The wait a `retry-after-ms` or `retry-after` header asks for, if readable."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000
        except ValueError:
            value = -1.0
        if 0 <= value < float("inf"):
            return value
    after = headers.get("retry-after")
    if after is None:
        return None
    try:
        value = float(after)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(after)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        value = max(0.0, (when - datetime.now(UTC)).total_seconds())
    return value if 0 <= value < float("inf") else None


# --- secrets ----------------------------------------------------------------------------


class _Scrubber:
    """Removes the secret header values of one request from text and bytes."""

    __slots__ = ("_secrets",)

    def __init__(self, headers: Mapping[str, str]) -> None:
        found: set[str] = set()
        for name, value in headers.items():
            if name.lower() in SECRET_HEADERS and value.strip():
                found.add(value.strip())
                scheme, _, token = value.strip().partition(" ")
                if token.strip() and scheme.lower() in ("bearer", "basic", "token"):
                    found.add(token.strip())
        # Longest first, so a token inside "Bearer <token>" cannot leave a fragment behind.
        self._secrets = sorted(found, key=len, reverse=True)

    def text(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    def data(self, data: bytes) -> bytes:
        for secret in self._secrets:
            data = data.replace(secret.encode(), REDACTED.encode())
        return data

    def stream(self, pieces: Iterable[bytes]) -> Iterator[bytes]:
        """`pieces` scrubbed as they pass, a secret split between two of them included:
        the last bytes of each (one fewer than the longest secret) wait for the next, and
        are handed over before an error `pieces` raises."""
        if not self._secrets:
            yield from pieces
            return
        keep = max(len(secret.encode()) for secret in self._secrets) - 1
        held = b""
        try:
            for piece in pieces:
                held = self.data(held + piece)
                if len(held) > keep:
                    cut = len(held) - keep
                    yield held[:cut]
                    held = held[cut:]
        except Exception:
            if held:
                yield held
            raise
        if held:
            yield held


def _where(url: httpx.URL | str) -> str:
    """A URL for messages: scheme, host, port and path; never the query (it may hold a key)."""
    url = httpx.URL(url)
    return str(url.copy_with(query=None, fragment=None, userinfo=b""))


def _describe(error: httpx.TransportError, timeouts: Timeouts) -> str:
    """What went wrong, in words, without httpx's request (which holds the headers)."""
    kinds: list[tuple[type[httpx.TransportError], str]] = [
        (httpx.ConnectTimeout, f"no connection within {timeouts.connect:g}s (connect timeout)"),
        (httpx.ReadTimeout, f"nothing received for {timeouts.read:g}s (read timeout)"),
        (httpx.WriteTimeout, f"the request could not be sent within {timeouts.write:g}s"),
        (httpx.PoolTimeout, f"no free connection within {timeouts.pool:g}s (pool timeout)"),
        (httpx.ConnectError, "the connection failed"),
        (httpx.ProxyError, "the proxy failed"),
        (httpx.RemoteProtocolError, "the server broke the HTTP protocol or closed the connection"),
        (httpx.ReadError, "the connection failed while reading"),
        (httpx.WriteError, "the connection failed while sending"),
        (httpx.UnsupportedProtocol, "the URL's scheme is not http or https"),
    ]
    what = next((text for kind, text in kinds if isinstance(error, kind)), "the transport failed")
    detail = str(error).strip()
    return f"{what} ({detail})" if detail else what


class HTTPStream:
    """A successful answer whose body has not been read yet.

    Iterating it (or `iter_bytes()`) yields the decoded body as it arrives. If the
    connection ends before the body does, iteration simply stops, keeping what arrived,
    and `interrupted` says what happened: a decoder reading the bytes sees a cut stream.
    A body past `max_body_bytes` raises `DecodeError` instead.
    """

    def __init__(
        self,
        response: httpx.Response,
        *,
        attempts: int,
        max_body_bytes: int,
        timeouts: Timeouts,
        scrubber: _Scrubber,
    ) -> None:
        self._response = response
        self._codings = content_codings(response.headers)
        self._max = max_body_bytes
        self._timeouts = timeouts
        self._scrub = scrubber
        self._started = False
        self.status: int = response.status_code
        """The HTTP status (2xx here; error answers become ProviderHTTPError)."""
        self.headers: Mapping[str, str] = response.headers
        """The answer's headers (case-insensitive)."""
        self.attempts = attempts
        """Requests sent to get this answer (1 when the first one succeeded)."""
        self.received = 0
        """Decoded body bytes handed over so far."""
        self.interrupted: StreamInterrupted | None = None
        """Set when the connection ended before the body did."""

    def __iter__(self) -> Iterator[bytes]:
        return self.iter_bytes()

    def iter_bytes(self) -> Iterator[bytes]:
        """The decoded body, piece by piece, as it arrives, the request's keys scrubbed
        (a provider may echo one back); may be called once."""
        if self._started:
            raise RuntimeError("the answer's body was already read")
        self._started = True
        return self._scrub.stream(self._decoded())

    def _decoded(self) -> Iterator[bytes]:
        pieces: Iterable[bytes] = self._raw()
        for coding in self._codings:
            pieces = inflate(pieces, coding, self._cut_coding)
        for piece in pieces:
            room = self._max - self.received
            if len(piece) > room:
                if room > 0:
                    self.received += room
                    yield piece[:room]
                raise DecodeError(
                    f"the response body is larger than max_body_bytes = {self._max} bytes "
                    "once decoded (a runaway body or a compression bomb); reading stopped there"
                )
            self.received += len(piece)
            yield piece

    def read(self) -> bytes:
        """The whole decoded body; raises StreamInterrupted if the connection ended early."""
        body = b"".join(self.iter_bytes())
        if self.interrupted is not None:
            raise self.interrupted
        return body

    def _raw(self) -> Iterator[bytes]:
        raw = 0
        failure: str | None = None
        try:
            for chunk in self._response.iter_raw():
                raw += len(chunk)
                if raw > self._max and self._codings:  # else the decoded count stops it
                    raise DecodeError(
                        f"the response body is larger than max_body_bytes = {self._max} bytes "
                        "before decoding; reading stopped there"
                    )
                yield chunk
        except httpx.TransportError as error:
            failure = self._scrub.text(_describe(error, self._timeouts))
        if failure is not None:
            self._interrupt(f"the connection ended before the body did: {failure}")

    def _cut_coding(self) -> None:
        if self.interrupted is None:
            self._interrupt("the compressed body ended before its end marker")

    def _interrupt(self, why: str) -> None:
        self.interrupted = StreamInterrupted(
            f"{why}; {self.received} bytes of body arrived and were kept",
            received=self.received,
        )
        log.warning("%s", self.interrupted)


# --- the transport ----------------------------------------------------------------------


class Transport:
    """One pooled HTTP client and its policy: timeouts, retries, the body cap."""

    def __init__(
        self,
        *,
        provider: str,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_body_bytes < 1:
            raise ConfigurationError("max_body_bytes must be at least 1")
        self.provider = provider
        """Names the provider in messages, e.g. "anthropic"."""
        self.timeouts = timeouts or Timeouts()
        self.retry = retry or RetryPolicy()
        self.max_body_bytes = max_body_bytes
        self._sleep = sleep
        self._client = httpx.Client(timeout=self.timeouts.to_httpx(), follow_redirects=False)

    def close(self) -> None:
        """Close the pooled connections."""
        self._client.close()

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Transport(provider={self.provider!r})"

    @contextmanager
    def post_stream(
        self, url: str, *, headers: Mapping[str, str], body: bytes
    ) -> Iterator[HTTPStream]:
        """POST `body` and hand over the 2xx answer's stream, retrying what may be retried.

        Raises ProviderUnavailable (no answer after every attempt), ProviderHTTPError (an
        error answer), DecodeError (an undecodable error body or content coding).
        """
        scrubber = _Scrubber(headers)
        sent = {**headers, "accept-encoding": ACCEPT_ENCODING}
        where = _where(url)
        attempt = 0
        while True:
            attempt += 1
            failure: str | None = None
            response: httpx.Response | None = None
            try:
                request = self._client.build_request("POST", url, headers=sent, content=body)
                response = self._client.send(request, stream=True)
            except httpx.TransportError as error:
                failure = scrubber.text(_describe(error, self.timeouts))
                retryable = not isinstance(error, httpx.UnsupportedProtocol)
            if response is None:
                if retryable and attempt < self.retry.max_attempts:
                    self._wait(attempt, None, f"{where}: {failure}")
                    continue
                raise ProviderUnavailable(
                    f"{self.provider} did not answer at {where} after {attempt} "
                    f"attempt{'s' if attempt > 1 else ''}: {failure}",
                    attempts=attempt,
                )
            if response.is_success:
                try:
                    yield HTTPStream(
                        response,
                        attempts=attempt,
                        max_body_bytes=self.max_body_bytes,
                        timeouts=self.timeouts,
                        scrubber=scrubber,
                    )
                finally:
                    response.close()
                return
            error_body, cut = self._read_error(response, scrubber)
            status, answer_headers = response.status_code, dict(response.headers)
            retry = (cut or self.retry.retryable(status, answer_headers)) and (
                attempt < self.retry.max_attempts
            )
            if retry:
                self._wait(attempt, answer_headers, f"{where} answered HTTP {status}")
                continue
            raise ProviderHTTPError(
                _http_message(
                    self.provider, where, status, error_body, attempts=attempt, scrubber=scrubber
                ),
                status=status,
                body=error_body,
                headers={k: scrubber.text(v) for k, v in answer_headers.items()},
                attempts=attempt,
            )

    def post(self, url: str, *, headers: Mapping[str, str], body: bytes) -> bytes:
        """POST `body` and return the whole decoded 2xx body (errors as for post_stream)."""
        with self.post_stream(url, headers=headers, body=body) as stream:
            return stream.read()

    def _read_error(self, response: httpx.Response, scrubber: _Scrubber) -> tuple[bytes, bool]:
        """An error answer's body (capped, scrubbed) and whether it was cut short."""
        try:
            stream = HTTPStream(
                response,
                attempts=0,
                max_body_bytes=min(self.max_body_bytes, MAX_ERROR_BODY_BYTES),
                timeouts=self.timeouts,
                scrubber=scrubber,
            )
            body = b"".join(stream.iter_bytes())
        finally:
            response.close()
        return scrubber.data(body), stream.interrupted is not None

    def _wait(self, attempt: int, headers: Mapping[str, str] | None, why: str) -> None:
        delay = self.retry.delay(attempt, headers)
        log.warning(
            "%s; retrying in %.2fs (attempt %d of %d)",
            why,
            delay,
            attempt + 1,
            self.retry.max_attempts,
        )
        self._sleep(delay)


_ERROR_SHAPE = msgspec.json.Decoder(dict[str, object])


def _http_message(
    provider: str, where: str, status: int, body: bytes, *, attempts: int, scrubber: _Scrubber
) -> str:
    """A message for an HTTP error answer, with the provider's own explanation if it gave one."""
    reason = httpx.codes.get_reason_phrase(status)
    message = f"{provider} answered HTTP {status}{f' {reason}' if reason else ''} at {where}"
    if attempts > 1:
        message += f" (after {attempts} attempts)"
    explanation = _explanation(body)
    if explanation:
        message += f": {explanation}"
    return scrubber.text(message)


def _explanation(body: bytes) -> str:
    """`error.type` and `error.message` of a JSON error body (the three providers agree)."""
    try:
        document = _ERROR_SHAPE.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return ""
    error = document.get("error")
    if not isinstance(error, dict):
        return ""
    kind = error.get("type") or error.get("status") or error.get("code")
    text = error.get("message")
    parts = [str(part)[:500] for part in (kind, text) if isinstance(part, str | int) and part]
    return " - ".join(parts)
