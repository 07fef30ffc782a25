"""One recorded exchange, beside the stream it copies: the bridge from a byte stream
(the proxy's event loop, or an SDK's thread through the transport) to the recording core.

The stream hands each raw chunk to a `Feed` and goes on at once: a feed never blocks
and is bounded by the bytes waiting in it. The feed is the writer's queue: the exchange's
own thread (its writer) inflates a copy (gzip, deflate: `http.codings`, capped at
`max_body_bytes`), decodes it with the provider's decoder and records the drafts with
`ingest_exchange` (history and first blocks in one transaction, then each block boundary
where no chunk waits, as `ask`'s writer does), in the conversation `threads.place` finds
(then the prefix index, `prefixes`, catches up with the store's log, so the next request
continuing it finds it). When the recording falls more than the cap behind, the feed stops taking
chunks and the response is recorded as far as it got, ended `failed`
(`recorder_overloaded`); the stream is never slowed.

A stream that stops early (the client went away, the upstream died, shutdown after the
grace) ends the recording's input there: the decoder closes its open block and ends the
response `abandoned`, `end_reason` saying why (`disconnected`, `interrupted`) where it
is ours. Only the request body (scrubbed of credentials by the decoders) and the response
body are read; headers never reach the recording.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Final

import msgspec

from convstore.adapters.http.codings import content_codings, inflate
from convstore.adapters.http.transport import DEFAULT_MAX_BODY_BYTES, MAX_ERROR_BODY_BYTES
from convstore.adapters.proxy.prefixes import PrefixIndex
from convstore.adapters.proxy.threads import place, recorded_request
from convstore.adapters.wire.providers import adapter, serving
from convstore.domain.errors import ConcurrencyConflict, ConvstoreError, DecodeError
from convstore.domain.events import Event, ResponseEnded
from convstore.domain.responses import ResponseOutcome
from convstore.domain.service import ConversationService
from convstore.domain.vocabulary import ConversationId, ErrorInfo
from convstore.storage import Store

__all__ = ["Exchange", "Feed", "Recorded", "Recorder"]

log = logging.getLogger("convstore.proxy")

SETTLE_WAIT: Final = 10.0
"""Seconds a recording waits for the exchanges answered before its request arrived (the
request may continue one of them) to be recorded, before it is placed."""
COALESCE: Final = 0.02
"""Seconds a writer that caught up with its stream pauses before it waits for more."""
WRITERS: Final = 256
"""Exchanges recorded at once (more wait their turn, their answers buffered in their feed)."""
RACE_RETRIES: Final = 3
"""How often a recording whose conversation moved on before its first commit places the
request again."""

OVERLOADED: Final = "recorder_overloaded"
TOO_LARGE: Final = "too_large"
DISCONNECTED: Final = "disconnected"
"""`end_reason` of a response whose client went away before it ended."""
INTERRUPTED: Final = "interrupted"
"""`end_reason` of a response still streaming when the proxy stopped (after its grace)."""
UPSTREAM_LOST: Final = "upstream_lost"
"""`end_reason` of a response whose upstream connection broke before it ended."""


class Feed:
    """Raw chunks handed from a stream to its recording's thread: `put` never blocks; past
    `cap` bytes waiting, the feed stops (`failure`: `recorder_overloaded`) and drops the
    rest."""

    def __init__(self, cap: int) -> None:
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._cap = cap
        self._waiting = 0
        self._lock = threading.Lock()
        self._closed = False
        self.failure: ErrorInfo | None = None
        """Why the recording stopped before the stream did (ours, not the provider's)."""
        self.cut = ""
        """Why the stream stopped early (an `end_reason`), empty when it ended whole."""

    def put(self, chunk: bytes) -> None:
        """Hand over the next chunk (dropped once the feed has stopped)."""
        with self._lock:
            if self._closed:
                return
            if self._waiting + len(chunk) > self._cap:
                self._stop(ErrorInfo(type=OVERLOADED, message=_overloaded(self._cap)))
                return
            self._waiting += len(chunk)
        self._queue.put(chunk)

    def end(self, cut: str = "") -> None:
        """The stream ended (`cut`: why, when it stopped early)."""
        with self._lock:
            if self._closed:
                return
            self.cut = cut
            self._closed = True
        self._queue.put(None)

    def stop(self, failure: ErrorInfo) -> None:
        """The recording stops here (e.g. a body past its cap): later chunks are dropped."""
        with self._lock:
            if not self._closed:
                self._stop(failure)

    def _stop(self, failure: ErrorInfo) -> None:
        self.failure = failure
        self._closed = True
        self._queue.put(None)

    def discard(self) -> None:
        """Drop the chunks waiting, without waiting for more (the feed has stopped, and
        its end may have been read already)."""
        while True:
            try:
                chunk = self._queue.get_nowait()
            except queue.Empty:
                return
            if chunk is None:
                return
            with self._lock:
                self._waiting -= len(chunk)

    def waiting(self) -> bool:
        """Whether a chunk is waiting (the recorder then batches on: see `ready`)."""
        return not self._queue.empty()

    def chunks(self) -> Iterator[bytes]:
        """The chunks as they are put, until the feed ends or stops: the ones waiting at
        once, then, before waiting for more, a pause of `COALESCE` seconds, so a paced
        stream wakes its writer once per pause rather than once per chunk."""
        while True:
            try:
                chunk = self._queue.get_nowait()
            except queue.Empty:
                time.sleep(COALESCE)
                chunk = self._queue.get()
            if chunk is None:
                return
            with self._lock:
                self._waiting -= len(chunk)
            yield chunk


def _overloaded(cap: int) -> str:
    return (
        f"the recording fell more than {cap} bytes behind the stream; recorded as far as "
        "it got (the client got the whole response)"
    )


class Recorded(msgspec.Struct, frozen=True, kw_only=True):
    """What one exchange's recording did."""

    conversation_id: ConversationId
    outcome: ResponseOutcome
    placement: str
    """How the conversation was found: `new`, `continued`, `pinned`, `forked`."""


class Exchange:
    """One request's recording: `begin` once the upstream answered, then `feed` each raw
    chunk of the answer, then `end` (with why, when it stopped early)."""

    def __init__(
        self,
        recorder: Recorder,
        provider: str,
        request: bytes,
        request_headers: Mapping[str, str],
        *,
        model: str = "",
        pinned: str | None = None,
        server: str = "",
    ) -> None:
        self._recorder = recorder
        self.provider = provider
        self._request = request
        self._request_coding = request_headers.get("content-encoding", "")
        self._model = model
        self._server = server
        self._pinned = pinned
        self._feed = Feed(recorder.max_body_bytes)
        self._status = 200
        self._coding_header = ""
        self._begun = False
        self.result: Recorded | None = None
        """The recording, once it ended (None when it failed: see the log)."""
        self.done = threading.Event()
        self.answered = False
        """Whether its client has the whole answer (the stream ended, not yet recorded)."""
        self.after: list[Exchange] = []
        """Exchanges answered, not yet recorded, when this one was opened: it may continue
        one of them, so it is placed once they are recorded (within `SETTLE_WAIT`)."""

    def begin(self, status: int, headers: Mapping[str, str]) -> None:
        """The upstream answered with `status` and (lower-cased) `headers`: record."""
        self._status = status
        self._coding_header = headers.get("content-encoding", "")
        self._begun = True
        self._recorder.run(self._run)

    def feed(self, chunk: bytes) -> None:
        """The answer's next raw chunk (as it came off the wire); never blocks."""
        self._feed.put(chunk)

    def end(self, cut: str = "") -> None:
        """The answer ended; `cut` (an `end_reason`) when it stopped before its end."""
        self.answered = not cut
        self._feed.end(cut)
        if not self._begun:  # no answer came: nothing to record, nothing to wait for
            self._recorder.forget(self)
            self.done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the recording to be committed; whether it was within `timeout`."""
        return self.done.wait(timeout)

    # --- the recording's thread -------------------------------------------------------

    def _run(self) -> None:
        try:
            with serving(self._server):  # openai-chat's payloads are bound to it
                self.result = self._record()
        except ConvstoreError as error:  # never the content: a type and what it concerns
            log.warning(
                "proxy: an exchange with %s was forwarded but not recorded (%s: its request"
                " or answer is not one convstore reads)",
                self.provider,
                type(error).__name__,
            )
            self._feed.stop(ErrorInfo(type="not_recorded"))
            self._feed.discard()  # what was put already
        except Exception:
            log.exception(
                "proxy: an exchange with %s was forwarded but not recorded", self.provider
            )
            self._feed.stop(ErrorInfo(type="not_recorded"))
        finally:
            self.done.set()
            self._recorder.forget(self)

    def _record(self) -> Recorded:
        provider = adapter(self.provider)
        request = recorded_request(self.provider, self._inflated_request(), model=self._model)
        chunks = self._body(content_codings({"content-encoding": self._coding_header}))
        body: bytes | Iterable[bytes] = chunks
        if self._status >= 400:  # an error answer is read whole, under its own cap
            body = b"".join(chunks)
        drafts = _Counted(self._marked(provider.decode(body, request, self._status)))
        service = self._recorder.service
        deadline = time.monotonic() + SETTLE_WAIT
        for earlier in self.after:
            earlier.wait(max(0.0, deadline - time.monotonic()))
        for attempt in range(RACE_RETRIES + 1):
            placed = place(
                service, self._recorder.index, self.provider, request, pinned=self._pinned
            )
            try:
                conversation_id, outcome = service.ingest_exchange(
                    placed.conversation_id,
                    placed.history,
                    drafts,
                    at_version=placed.version,
                    title=placed.title,
                    ready=self._feed.waiting,
                )
                break
            except ConcurrencyConflict:  # moved on before the first commit: place it again
                if attempt == RACE_RETRIES or drafts.count:
                    raise
        self._recorder.index.catch_up()  # the next request finds it without waiting on that
        if self._feed.failure is not None:
            log.warning(
                "proxy: a response from %s was recorded only as far as it got (%s)",
                self.provider,
                self._feed.failure.type,
            )
        return Recorded(conversation_id=conversation_id, outcome=outcome, placement=placed.how)

    def _inflated_request(self) -> bytes:
        codings = content_codings({"content-encoding": self._request_coding})
        if not codings:
            return self._request
        pieces: Iterable[bytes] = [self._request]
        for coding in codings:
            pieces = inflate(pieces, coding, _truncated)
        whole = bytearray()
        for piece in pieces:
            whole += piece
            if len(whole) > self._recorder.max_body_bytes:
                raise DecodeError("the request body expands past its cap")
        return bytes(whole)

    def _body(self, codings: Sequence[str]) -> Iterator[bytes]:
        """The answer's body decoded, stopped (`too_large`) past its cap."""
        cap = MAX_ERROR_BODY_BYTES if self._status >= 400 else self._recorder.max_body_bytes
        chunks: Iterable[bytes] = self._feed.chunks()
        for coding in codings:
            chunks = inflate(chunks, coding, lambda: None)  # a cut stream is abandoned
        total = 0
        for chunk in chunks:
            total += len(chunk)
            if total > cap:
                self._feed.stop(
                    ErrorInfo(type=TOO_LARGE, message=f"the body is larger than {cap} bytes")
                )
                for _ in self._feed.chunks():
                    pass
                return
            yield chunk

    def _marked(self, drafts: Iterable[Event]) -> Iterator[Event]:
        """`drafts`, the response's end marked with why we ended it, when we did."""
        for draft in drafts:
            yield self._ours(draft) if isinstance(draft, ResponseEnded) else draft

    def _ours(self, end: ResponseEnded) -> ResponseEnded:
        failure, cut = self._feed.failure, self._feed.cut
        if end.state != "abandoned":
            return end
        if failure is not None:
            return msgspec.structs.replace(
                end, state="failed", error=failure, end_reason=failure.type
            )
        if cut:
            return msgspec.structs.replace(end, end_reason=cut, error=None)
        return end


def _truncated() -> None:
    raise DecodeError("the compressed request body is truncated")


class _Counted:
    """Drafts, counting how many were taken."""

    def __init__(self, drafts: Iterable[Event]) -> None:
        self._drafts = iter(drafts)
        self.count = 0

    def __iter__(self) -> Iterator[Event]:
        for draft in self._drafts:
            self.count += 1
            yield draft


class Recorder:
    """Records exchanges into `store`, each on its own thread; `close` waits for those
    still open. Shared by the proxy and the recording transport."""

    def __init__(self, store: Store, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.service: ConversationService = store.service
        self.index = PrefixIndex(store)
        """Where recorded conversations are found again (`prefixes`)."""
        self.max_body_bytes = max_body_bytes
        """The cap on one decoded body, and on the bytes a recording may fall behind."""
        self._open: set[Exchange] = set()
        self._lock = threading.Lock()
        self._writers = _Writers(WRITERS)

    def run(self, recording: Callable[[], None]) -> None:
        """Run one exchange's recording on a writer thread."""
        self._writers.submit(recording)

    def open(
        self,
        provider: str,
        request: bytes,
        request_headers: Mapping[str, str],
        *,
        model: str = "",
        pinned: str | None = None,
        server: str = "",
    ) -> Exchange:
        """A new exchange of `provider` for the request body `request`, answered by
        `server` (the upstream's host)."""
        exchange = Exchange(
            self, provider, request, request_headers, model=model, pinned=pinned, server=server
        )
        with self._lock:
            exchange.after = [e for e in self._open if e.answered]
            self._open.add(exchange)
        return exchange

    def forget(self, exchange: Exchange) -> None:
        """`exchange` is recorded (or will not be)."""
        with self._lock:
            self._open.discard(exchange)

    @property
    def pending(self) -> int:
        """Exchanges not recorded yet."""
        with self._lock:
            return len(self._open)

    def close(self, timeout: float = 30.0) -> int:
        """End every exchange still open (`interrupted`) and wait up to `timeout` seconds
        for the recordings to commit; how many did not."""
        with self._lock:
            still = list(self._open)
        for exchange in still:
            exchange.end(INTERRUPTED)
        return sum(not exchange.wait(timeout) for exchange in still)


class _Writers:
    """Daemon threads that run recordings, at most `most` at once, each kept for the next
    (with its store connections) rather than started per exchange."""

    def __init__(self, most: int) -> None:
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._most = most
        self._threads = 0
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, task: Callable[[], None]) -> None:
        """Run `task` on an idle thread, a new one, or the next to be free."""
        with self._lock:
            start = self._idle == 0 and self._threads < self._most
            if start:
                self._threads += 1
            elif self._idle:
                self._idle -= 1
        self._tasks.put(task)
        if start:
            threading.Thread(target=self._work, name="convstore-proxy", daemon=True).start()

    def _work(self) -> None:
        while True:
            self._tasks.get()()
            with self._lock:
                self._idle += 1
