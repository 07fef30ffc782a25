"""The main jobs, provider by provider: ingest captured responses, ask a live provider,
and build the request that would continue a conversation (replay).

Library functions the command line calls; each reads or writes only through the
application service. Every request is rebuilt from the stored events, so retry, restart
and resumption after an interrupt all work the same way.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from pathlib import Path
from typing import Final

import msgspec

from convstore.adapters.config.loading import load_config
from convstore.adapters.http.errors import ProviderHTTPError
from convstore.adapters.wire.providers import PROVIDERS, EncodedRequest, ProviderAdapter, adapter
from convstore.domain.errors import DecodeError, ResponseConflict
from convstore.domain.events import Event, ResponseStarted, UserMessage
from convstore.domain.responses import ResponseOutcome
from convstore.domain.service import ConversationService
from convstore.domain.vocabulary import ConversationId

CHUNK_BYTES: Final = 64 * 1024
MAX_CAPTURE_BYTES: Final = 1024 * 1024 * 1024
"""A compressed capture is stopped once it expands past this many bytes."""
_GZIP_MAGIC: Final = b"\x1f\x8b"


class IngestReport(msgspec.Struct, kw_only=True):
    """What `ingest` did: the conversation, each response's outcome, and why it stopped."""

    conversation_id: ConversationId | None
    responses: list[ResponseOutcome] = []
    history_messages: int = 0
    """Messages of `--request` recorded before the first response."""
    error: str | None = None
    exit_code: int = 0
    """0 all completed; 3 a response ended failed or abandoned; 2 a file held no response;
    4 a stored response id arrived with different content."""


def read_capture(path: Path, *, max_bytes: int = MAX_CAPTURE_BYTES) -> Iterator[bytes]:
    """A capture file's bytes in chunks; gzip files are expanded, at most `max_bytes`."""
    with path.open("rb") as file:
        first = file.read(CHUNK_BYTES)
        if not first.startswith(_GZIP_MAGIC):
            yield first
            yield from iter(lambda: file.read(CHUNK_BYTES), b"")
            return
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        produced = 0
        for compressed in chain((first,), iter(lambda: file.read(CHUNK_BYTES), b"")):
            data = compressed
            while data:
                chunk = inflater.decompress(data, CHUNK_BYTES)
                produced += len(chunk)
                if produced > max_bytes:
                    raise DecodeError(f"{path.name} expands past {max_bytes} bytes; not read")
                yield chunk
                data = inflater.unconsumed_tail
        yield inflater.flush()


def _first_checked(drafts: Iterator[Event]) -> tuple[Event, Iterator[Event]]:
    """The first draft, read now (a body holding no response raises here), and all drafts."""
    first = next(drafts, None)
    if first is None:
        raise DecodeError("the input holds no response")
    return first, chain((first,), drafts)


def ingest(
    service: ConversationService,
    provider: str,
    files: Sequence[Path],
    *,
    request: bytes | None = None,
    conversation_id: ConversationId | None = None,
    title: str | None = None,
) -> IngestReport:
    """Ingest response bodies (SSE or JSON, detected) in order into one conversation.

    `request` is the captured request body that produced the first file: the messages
    the conversation does not hold yet are recorded first. A new conversation is started
    only once the first file is known to hold a response.
    """
    provider_adapter = adapter(provider)
    report = IngestReport(conversation_id=conversation_id)
    for position, path in enumerate(files):
        produced_by = request if position == 0 else None
        try:
            first, drafts = _first_checked(
                provider_adapter.decode(read_capture(path), produced_by, None)
            )
            if report.conversation_id is None:
                report.conversation_id = service.start(title or path.parent.name or path.stem)
            stored = service.get(report.conversation_id).state.responses
            if produced_by is not None and not (
                isinstance(first, ResponseStarted) and first.response_id in stored
            ):
                report.history_messages = _record_history(
                    service, provider_adapter, report.conversation_id, produced_by
                )
            outcome = service.ingest(report.conversation_id, drafts)
        except DecodeError as error:
            report.error, report.exit_code = f"{path}: {error}", 2
            return report
        except ResponseConflict as error:
            report.error, report.exit_code = f"{path}: {error}", 4
            return report
        report.responses.append(outcome)
        if outcome.ended != "completed" and not outcome.already_stored:
            report.exit_code = 3
    return report


def _record_history(
    service: ConversationService,
    provider: ProviderAdapter,
    conversation_id: ConversationId,
    request: bytes,
) -> int:
    messages = provider.need_history()(list(service.events(conversation_id)), request)
    for message in messages:
        if message.role == "assistant":
            service.ingest(conversation_id, message.drafts)
        else:
            service.add_user_input(conversation_id, message.drafts)
    return len(messages)


def replay(
    service: ConversationService,
    conversation_id: ConversationId,
    provider: str,
    *,
    cfg: Iterable[str] = (),
    model: str | None = None,
    user: str | None = None,
) -> EncodedRequest:
    """The native request that continues the conversation on `provider`. Never writes."""
    events = list(service.events(conversation_id))
    return adapter(provider).need_encode()(events, load_config(list(cfg)), model, user)


class AskReport(msgspec.Struct, kw_only=True):
    """What `ask` did."""

    conversation_id: ConversationId
    response: ResponseOutcome
    abandoned: int = 0
    """Pending hosted activities of another provider recorded `abandoned` first."""


def ask(
    service: ConversationService,
    provider: str,
    text: str,
    *,
    conversation_id: ConversationId | None = None,
    cfg: Iterable[str] = (),
    model: str | None = None,
    title: str | None = None,
) -> AskReport:
    """Ask `provider` the next question and record the whole response as it streams.

    Continuing a conversation on another provider first records that provider's pending
    hosted activities `abandoned`. A provider's HTTP error answer is recorded as a
    response ended `failed`.
    """
    provider_adapter = adapter(provider)
    config = load_config(list(cfg))
    abandoned = 0
    if conversation_id is None:
        conversation_id = service.start(title or text[:60])
    else:
        for other in PROVIDERS:
            if other != provider:
                abandoned += len(service.abandon_activities(conversation_id, provider=other))
    service.add_user_input(conversation_id, [UserMessage(blocks=(text,))])
    events = list(service.events(conversation_id))
    request = provider_adapter.need_encode()(events, config, model, None)
    body = request.recorded_json()
    try:
        with provider_adapter.need_send()(request, config) as stream:
            outcome = service.ingest(conversation_id, provider_adapter.decode(stream, body, None))
    except ProviderHTTPError as error:
        failed = provider_adapter.decode(error.body, body, error.status)
        outcome = service.ingest(conversation_id, failed)
    return AskReport(conversation_id=conversation_id, response=outcome, abandoned=abandoned)
