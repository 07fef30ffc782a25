"""The main jobs, provider by provider: ingest captured responses, and build the request
that would continue a conversation (replay); `asking` asks a live provider.

Library functions the command line calls; each reads or writes only through the
application service. Every request is rebuilt from the stored events, so retry, restart
and resumption after an interrupt all work the same way.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, replace
from itertools import chain
from pathlib import Path
from typing import BinaryIO, Final

import msgspec

from convstore.adapters.config.loading import load_config
from convstore.adapters.http.codings import inflate
from convstore.adapters.recording.live import Interrupts
from convstore.adapters.wire.providers import (
    EncodedRequest,
    MessageDrafts,
    ProviderAdapter,
    adapter,
)
from convstore.domain.attempts import reading
from convstore.domain.errors import (
    ConcurrencyConflict,
    DecodeError,
    ResponseConflict,
    ResponseStoredElsewhere,
)
from convstore.domain.events import Event, ResponseStarted
from convstore.domain.responses import ResponseOutcome
from convstore.domain.service import ConversationService
from convstore.domain.vocabulary import ConversationId

CHUNK_BYTES: Final = 64 * 1024
MAX_CAPTURE_BYTES: Final = 1024 * 1024 * 1024
"""The most bytes a capture or a request body may hold (a compressed one, expanded)."""
_GZIP_MAGIC: Final = b"\x1f\x8b"


class IngestReport(msgspec.Struct, kw_only=True):
    """What `ingest` did: the conversation, each response's outcome, and why it stopped."""

    conversation_id: ConversationId | None
    responses: list[ResponseOutcome] = []
    history_messages: int = 0
    """Messages of `--request` recorded before the first response."""
    error: str | None = None
    error_type: str = ""
    """The class of the error that stopped it, e.g. `DecodeError`."""
    interrupted: int | None = None
    """The signal that stopped it (SIGINT, SIGTERM), after what arrived was recorded."""
    exit_code: int = 0
    """0 all completed; 3 a response ended failed or abandoned; 2 a file held no response;
    4 a stored response id arrived with different content."""

    def fail(self, where: str, error: Exception, exit_code: int) -> IngestReport:
        """Stop at `where` (the file at fault) with `error`."""
        self.error, self.error_type = f"{where}: {error}", type(error).__name__
        self.exit_code = exit_code
        return self


@dataclass(frozen=True)
class Exchange:
    """One response file to ingest, with the request body that produced it."""

    path: Path
    request: bytes | None = None
    request_path: Path | None = None
    """Where the request is read from, as it is ingested, when `request` is not given."""
    request_name: str = "--request"
    """How an error inside `request` names it (its file)."""
    status: int | None = None
    """The HTTP status the response arrived with, when the capture says."""
    shown: str = ""
    """How messages and the default title name the file (default: its path)."""
    separate: bool = False
    """A request that does not continue the conversation is a separate question of the
    same capture: its messages are all recorded, after what the conversation holds."""

    @property
    def name(self) -> str:
        """The file as messages name it."""
        return self.shown or str(self.path)


class _RequestFailed(Exception):
    """A request body that could not be read: the error names the request, not the response."""

    def __init__(self, name: str, error: DecodeError) -> None:
        super().__init__(name, error)
        self.name, self.error = name, error


def check_request(provider: str, body: bytes, name: str) -> None:
    """Raise DecodeError naming `name` when `body` is not a request `provider` reads (one of
    another provider's shape included), before anything is written."""
    try:
        adapter(provider).need_history()([], body)
    except DecodeError as error:
        raise DecodeError(f"{name}: {error}") from None


def read_capture(path: Path, *, max_bytes: int | None = None) -> Iterator[bytes]:
    """A capture's bytes in chunks of at most `CHUNK_BYTES`; gzip (every member) expanded.

    Every input is bounded by `max_bytes` (default `MAX_CAPTURE_BYTES`) and checked whole
    before the first chunk is yielded, so a refused input writes nothing: a file larger
    than the cap, gzip that expands past it, a truncated or corrupt gzip stream, and a
    path that cannot be read (missing, a folder) raise DecodeError, whose message the
    caller prefixes with the path. A pipe or a device is first copied, up to the cap,
    into an anonymous temporary file. Memory stays at a few chunks.
    """
    cap = MAX_CAPTURE_BYTES if max_bytes is None else max_bytes
    with _opened(path) as opened:
        regular = stat.S_ISREG(os.fstat(opened.fileno()).st_mode)
        with nullcontext(opened) if regular else _spooled(opened, cap) as source:
            compressed = source.read(len(_GZIP_MAGIC)) == _GZIP_MAGIC
            source.seek(0)
            if not compressed:
                if os.fstat(source.fileno()).st_size > cap:
                    raise DecodeError(f"is larger than {cap} bytes; not read")
                yield from _capped(_chunks(source), cap, "is larger than")
                return
            for _ in _capped(_inflated(source), cap, "expands past"):
                pass  # the whole stream is checked first: nothing is written if it fails
            source.seek(0)
            yield from _inflated(source)


def read_body(path: Path, *, max_bytes: int | None = None) -> bytes:
    """A whole captured body (a request) read as `read_capture` reads a capture; its
    DecodeError names the path."""
    try:
        return b"".join(read_capture(path, max_bytes=max_bytes))
    except DecodeError as error:
        raise DecodeError(f"{path}: {error}") from None


def spool(stream: BinaryIO, target: Path, *, max_bytes: int | None = None) -> None:
    """Copy a pipe's bytes (standard input's) into the file `target`, refused (DecodeError)
    past `max_bytes` (default `MAX_CAPTURE_BYTES`), so it can be read as a capture."""
    cap = MAX_CAPTURE_BYTES if max_bytes is None else max_bytes
    with target.open("wb") as file:
        for chunk in _capped(_chunks(stream), cap, "is larger than"):
            file.write(chunk)


def check_readable(path: Path) -> None:
    """Raise DecodeError when `path` is missing or a folder (without opening it)."""
    try:
        mode = path.stat().st_mode
    except (OSError, ValueError) as error:
        raise _unreadable(error) from None
    if stat.S_ISDIR(mode):
        raise DecodeError("is a folder, not a file")


def _unreadable(error: OSError | ValueError) -> DecodeError:
    if isinstance(error, IsADirectoryError):
        return DecodeError("is a folder, not a file")
    if isinstance(error, OSError):
        return DecodeError(f"cannot be read: {error.strerror}")
    return DecodeError("is not a file name (it holds a NUL byte)")


@contextmanager
def _opened(path: Path) -> Iterator[BinaryIO]:
    try:
        file = path.open("rb")
    except (OSError, ValueError) as error:
        raise _unreadable(error) from None
    with file:
        yield file


def _chunks(file: BinaryIO) -> Iterator[bytes]:
    try:
        yield from iter(lambda: file.read(CHUNK_BYTES), b"")
    except OSError as error:
        raise DecodeError(f"cannot be read: {error.strerror}") from None


@contextmanager
def _spooled(pipe: BinaryIO, cap: int) -> Iterator[BinaryIO]:
    """A pipe's or a device's bytes in an anonymous temporary file, refused past `cap`."""
    with tempfile.TemporaryFile() as spool:
        for chunk in _capped(_chunks(pipe), cap, "is larger than"):
            spool.write(chunk)
        spool.seek(0)
        yield spool


def _capped(chunks: Iterable[bytes], cap: int, past: str) -> Iterator[bytes]:
    produced = 0
    for chunk in chunks:
        produced += len(chunk)
        if produced > cap:
            raise DecodeError(f"{past} {cap} bytes; not read")
        yield chunk


def _inflated(file: BinaryIO) -> Iterator[bytes]:
    def truncated() -> None:
        raise DecodeError("is a truncated gzip file: it ends inside a member")

    return inflate(_chunks(file), "gzip", truncated)


def _first_checked(drafts: Iterator[Event]) -> tuple[Event, Iterator[Event]]:
    """The first draft, read now (a body holding no response raises here), and all drafts."""
    first = next(drafts, None)
    if first is None:
        raise DecodeError("the input holds no response")
    return first, chain((first,), drafts)


def ingest(
    service: ConversationService,
    provider: str,
    files: Sequence[Path | Exchange],
    *,
    request: bytes | None = None,
    conversation_id: ConversationId | None = None,
    title: str | None = None,
    interrupts: Interrupts | None = None,
) -> IngestReport:
    """Ingest response bodies (SSE or JSON, detected) in order into one conversation.

    Each `Exchange`'s request is the captured body that produced it: the messages the
    conversation does not hold yet are recorded before its response (`request`: the
    first file's, for plain paths). A new conversation is started only once the first
    file is known to hold a response; a missing file or a folder among `files` is refused
    (exit 2) before anything is written. `interrupts`: the caller's, when it ingests
    several captures under one (a signal then stops here too), else one of its own.
    """
    provider_adapter = adapter(provider)
    exchanges = [f if isinstance(f, Exchange) else Exchange(f) for f in files]
    if request is not None and exchanges:
        exchanges[0] = replace(exchanges[0], request=request)
    report = IngestReport(conversation_id=conversation_id)
    for exchange in exchanges:  # a missing file or a folder is refused before any write
        try:
            check_readable(exchange.path)
        except DecodeError as error:
            return report.fail(exchange.name, error, 2)
    with ExitStack() as stack:
        caught = interrupts if interrupts is not None else stack.enter_context(Interrupts())
        for exchange in exchanges:
            try:
                outcome = _ingest_one(
                    service,
                    provider_adapter,
                    exchange,
                    report=report,
                    title=title,
                    interrupts=caught,
                )
            except _RequestFailed as failed:
                return report.fail(failed.name, failed.error, 2)
            except DecodeError as error:
                if caught.signum is not None:  # stopped before a response began
                    break
                return report.fail(exchange.name, error, 2)
            except (ResponseConflict, ResponseStoredElsewhere) as error:
                return report.fail(exchange.name, error, 4)
            report.responses.append(outcome)
            if outcome.ended != "completed" and not outcome.already_stored:
                report.exit_code = 3
            if caught.signum is not None:
                break
        report.interrupted = caught.signum
    return report


RACE_RETRIES: Final = 3
"""How often an ingest whose conversation moved on under it reads it again."""


def _ingest_one(
    service: ConversationService,
    provider: ProviderAdapter,
    exchange: Exchange,
    *,
    report: IngestReport,
    title: str | None,
    interrupts: Interrupts,
) -> ResponseOutcome:
    """Record one capture (and the messages of its request the conversation lacks) in
    `report`'s conversation. A provider response is stored once in the whole store:
    without a conversation, one the store holds is ingested into its own (already stored,
    or the next attempt of a copy cut short); one held by another conversation than the one
    asked for is refused (ResponseStoredElsewhere). A new conversation is started in the
    response's first transaction. The history and the response's first batch are one
    transaction at the version the history was read from; when another writer moved the
    conversation on meanwhile, or stored the response first, it is read again (the
    response is then usually stored already); a capture from a pipe gets the conflict
    instead. A signal while it is read ends the capture there (`live.Interrupts`)."""
    path, request = exchange.path, exchange.request
    if request is None and exchange.request_path is not None:
        try:
            request = b"".join(read_capture(exchange.request_path))
        except DecodeError as error:
            raise _RequestFailed(exchange.request_name, error) from None
    retries = 0
    while True:
        chunks = interrupts.chunks(read_capture(path))
        decoded = provider.decode(chunks, request, exchange.status)
        first, drafts = _first_checked(interrupts.marked(decoded))
        started = first if isinstance(first, ResponseStarted) else None
        home = None if started is None else service.locate(started)
        if started is not None and home is not None and report.conversation_id is None:
            report.conversation_id = home
        target = report.conversation_id
        own = [] if target is None else list(service.events(target))
        version = own[-1].originator_version if own else 0
        events = own if target is None else service.history(target, own)
        stored = {e.response_id for e in events if isinstance(e, ResponseStarted)}
        if started is not None and home not in (None, target) and started.response_id not in stored:
            raise ResponseStoredElsewhere(
                f"response {started.response_id!r} is already stored in conversation {home}, "
                f"not in {report.conversation_id}; nothing was written (ingest it without "
                "--conversation, or fork that conversation)",
                conversation_id=home,
            )
        history: list[tuple[str, Sequence[Event]]] = []
        if request is not None and not (started is not None and started.response_id in stored):
            messages = _request_messages(provider, exchange, reading(events), request)
            history = [(message.role, message.drafts) for message in messages]
        try:
            report.conversation_id, outcome = service.ingest_exchange(
                report.conversation_id,
                history,
                drafts,
                at_version=version,
                title=title or path.parent.name or path.stem,
            )
        except ConcurrencyConflict:
            retries += 1
            if retries > RACE_RETRIES or not path.is_file():  # a pipe cannot be read again
                raise
            continue
        report.history_messages += len(history)
        return outcome


def _request_messages(
    provider: ProviderAdapter, exchange: Exchange, events: Sequence[Event], request: bytes
) -> list[MessageDrafts]:
    """The request's messages the conversation of `events` does not hold: all of them for
    a separate question (`Exchange.separate`); an error names the request."""
    history = provider.need_history()
    try:
        try:
            return history(events, request)
        except DecodeError:
            if not exchange.separate:
                raise
            return history([], request)
    except DecodeError as error:
        raise _RequestFailed(exchange.request_name, error) from None


def replay(
    service: ConversationService,
    conversation_id: ConversationId,
    provider: str,
    *,
    cfg: Iterable[str] = (),
    model: str | None = None,
    user: str | None = None,
    events: Sequence[Event] | None = None,
) -> EncodedRequest:
    """The native request that continues the conversation on `provider`. Never writes.
    `events`: the conversation's history (`service.history`), when already read."""
    if events is None:
        events = service.history(conversation_id)
    return adapter(provider).need_encode()(events, load_config(list(cfg)), model, user)
