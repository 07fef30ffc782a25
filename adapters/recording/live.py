"""The recording core that live streams share (`ask`, a streamed `ingest`, later the proxy).

A live response is decoded on the caller's thread and recorded on a writer thread of its
own (`RecordingThread`), so the stream never waits on a commit: the recorder commits each
block boundary at which no further draft is ready, so what arrived is stored while a
person watches, in as few commits as the writer keeps up with.

`Interrupts` turns SIGINT and SIGTERM into the end of the input: the decoder then closes
its open block as a partial commit (text, and the citations received so far marked
incomplete) and ends the response `abandoned`; `interrupted` marks that end
(`ResponseEnded.end_reason`). The caller exits 130 or 143 once it is recorded. A second
signal stops at once (the open response is then closed by the next writer, or `repair`).
"""

from __future__ import annotations

import queue
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import Final, Generic, TypeVar

import msgspec

from convstore.domain.events import Event, ResponseEnded

__all__ = ["Interrupted", "Interrupts", "RecordingThread", "SignalStop", "record_live"]

R = TypeVar("R")

SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


class SignalStop(KeyboardInterrupt):
    """A second signal: stop at once, unwinding as Ctrl-C does; `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class Interrupted(BaseException):
    """Raised inside a blocking read by the first signal, to end the input there (a
    BaseException, so that no library's `except Exception` keeps the read going)."""


class Interrupts:
    """SIGINT and SIGTERM caught while a live stream is read: the first ends the input,
    a second stops at once. Handlers are installed on the main thread only (elsewhere
    signals keep their handlers) and restored on exit."""

    def __init__(self) -> None:
        self.signum: int | None = None
        """The first signal received, if any."""
        self._reading = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            raise SignalStop(signum)
        self.signum = signum
        if self._reading:
            raise Interrupted

    def chunks(self, source: Iterable[bytes]) -> Iterator[bytes]:
        """`source`'s chunks until it ends or a signal arrives (which may cut a blocking
        read short: the read is abandoned, its connection closed by its owner)."""
        pieces = iter(source)
        while self.signum is None:
            try:
                self._reading = True
                if self.signum is not None:
                    return
                chunk = next(pieces)
            except (StopIteration, Interrupted):
                return
            finally:
                self._reading = False
            yield chunk

    def marked(self, drafts: Iterable[Event]) -> Iterator[Event]:
        """`drafts`, the response's end marked `interrupted` when a signal cut its stream:
        an end the cut made (`abandoned`, its error only the cut's) is ours, and says so."""
        for draft in drafts:
            if (
                self.signum is not None
                and isinstance(draft, ResponseEnded)
                and draft.state == "abandoned"
            ):
                yield msgspec.structs.replace(draft, end_reason="interrupted", error=None)
            else:
                yield draft


class RecordingThread(Generic[R]):
    """Records one response's drafts on a thread of its own, handed over with `put`.

    `record(drafts, ready)` is the recording (e.g. `ConversationService.ingest` with the
    recorder's `ready`): it reads the drafts as they are put, and `ready()` tells it
    whether another one is already waiting, so it commits where none is.
    """

    def __init__(self, record: Callable[[Iterable[Event], Callable[[], bool]], R]) -> None:
        self._queue: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        self._record = record
        self._result: R | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="convstore-writer", daemon=True)
        self._thread.start()

    def _drafts(self) -> Iterator[Event]:
        while True:
            draft = self._queue.get()
            if draft is None:
                return
            yield draft

    def _ready(self) -> bool:
        return not self._queue.empty()

    def _run(self) -> None:
        try:
            self._result = self._record(self._drafts(), self._ready)
        except BaseException as error:  # handed to the caller by `put` and `close`
            self._error = error
        finally:
            self._done.set()

    def put(self, draft: Event) -> None:
        """Hand over the next draft; raises the recording's error if it failed."""
        if self._error is not None:
            raise self._error
        self._queue.put(draft)

    def abandon(self) -> None:
        """End the input without waiting: the recording ends the response as the input
        left it (`abandoned`) and commits, unless the process exits first."""
        self._queue.put(None)

    def close(self) -> R:
        """Wait for the recording to end (the input ends here) and return its result, or
        raise its error."""
        self._queue.put(None)
        while not self._done.wait(0.1):  # a timed wait: a signal is handled meanwhile
            pass
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def record_live(
    drafts: Iterable[Event], record: Callable[[Iterable[Event], Callable[[], bool]], R]
) -> tuple[ResponseEnded | None, R]:
    """Read `drafts` (decoded on this thread, as they arrive) and record them on a
    `RecordingThread` running `record`; the response's end as decoded, and the recording's
    result. An error while reading ends the recording's input (`abandon`) and is raised."""
    thread = RecordingThread(record)
    end: ResponseEnded | None = None
    try:
        for draft in drafts:
            if isinstance(draft, ResponseEnded):
                end = draft
            thread.put(draft)
    except BaseException:
        thread.abandon()
        raise
    return end, thread.close()
