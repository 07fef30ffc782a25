"""The `ask` job: send the next question to a live provider and record the answer as it
streams, continuing a paused turn by itself.

Refused means nothing written: the configuration (every key), the model, the hosted
tools, the conversation and its unanswered tool calls are checked, and the request is
built, before anything is sent; the key is read when it is sent. The question, the start
of a new conversation and the response's first blocks are recorded together once the
provider answers (an HTTP error answer is recorded as a response ended `failed`), through
the live recording core (`recording.live`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Protocol

import msgspec

from convstore.adapters.config.app import AppConfig, checked
from convstore.adapters.config.loading import load_config
from convstore.adapters.http.errors import ProviderHTTPError
from convstore.adapters.recording.live import Interrupts, record_live
from convstore.adapters.wire.names import PROVIDERS
from convstore.adapters.wire.preview import Piece, previewed
from convstore.adapters.wire.providers import EncodedRequest, ProviderAdapter, adapter
from convstore.domain.calls import unanswered_calls
from convstore.domain.conversation import new_conversation_id
from convstore.domain.errors import ConfigurationError
from convstore.domain.events import Event, ResponseEnded, UserMessage
from convstore.domain.responses import CONTINUES, ResponseOutcome
from convstore.domain.service import ConversationService
from convstore.domain.vocabulary import ConversationId, ErrorInfo

__all__ = ["AskReport", "Watcher", "ask"]

PAUSED: Final = "pause"
"""The finish reason of a paused turn (Anthropic's `pause_turn`): the turn goes on."""
CUT_AT_LENGTH: Final = "length"
"""The finish reason of a response cut at its token limit."""


class Watcher(Protocol):
    """What a person watching sees (`terminal.live.LiveView`): told each step as it comes."""

    def note(self, text: str) -> None:
        """Something a person should know before the request goes out."""
        ...

    def begin(self, conversation_id: ConversationId) -> None:
        """The provider answered: recording starts in this conversation."""
        ...

    def piece(self, piece: Piece) -> None:
        """A piece of a block still streaming."""
        ...

    def draft(self, draft: Event) -> None:
        """A closed block, or a response's start or end."""
        ...


class AskReport(msgspec.Struct, kw_only=True):
    """What `ask` did: every response it recorded, in order (continuations included)."""

    conversation_id: ConversationId
    responses: list[ResponseOutcome] = []
    abandoned: int = 0
    """Pending hosted activities of another provider recorded `abandoned` first."""
    interrupted: int | None = None
    """The signal that stopped it (SIGINT, SIGTERM), after what arrived was recorded."""
    notes: list[str] = []
    """What a person should know about the requests sent (e.g. a hosted tool kept
    declared while its activity is pending)."""
    error: ErrorInfo | None = None
    """The provider's error, when the last response failed with one."""

    @property
    def response(self) -> ResponseOutcome:
        """The last response recorded."""
        return self.responses[-1]


def ask(
    service: ConversationService | None,
    provider: str,
    text: str,
    *,
    writer: Callable[[], ConversationService] | None = None,
    conversation_id: ConversationId | None = None,
    cfg: Iterable[str] = (),
    model: str | None = None,
    title: str | None = None,
    watcher: Watcher | None = None,
    continue_on_length: bool = False,
) -> AskReport:
    """Ask `provider` the next question and record each response as it streams.

    A paused turn is continued by itself, each continuation its own response in the same
    turn, up to `ask.max_continuations`; so is a response cut at its token limit with
    `continue_on_length`, where the provider continues an assistant prefill (else a
    ConfigurationError). Continuing a conversation on another provider first records that
    provider's pending hosted activities `abandoned`. A signal while a response streams
    ends it as a partial commit and stops (`AskReport.interrupted`).

    `service` reads the conversation continued (None: no store is read, for a new
    conversation); `writer` opens the service the answer is recorded through, once the
    provider answers (default: `service`), so a refused `ask` opens no store to write.
    """
    recording = _Writer(writer or _given(service))
    if not text.strip():
        raise ConfigurationError("the question is empty: nothing was sent or written")
    provider_adapter = adapter(provider)
    config = load_config(list(cfg))
    settings = _checked(config)
    if continue_on_length and not provider_adapter.continues_prefill:
        raise ConfigurationError(
            f"--continue-on-length: {provider} cannot continue an assistant's cut answer "
            "(it takes no assistant prefill); nothing was sent or written"
        )
    events: list[Event] = []
    notes: list[str] = []
    if conversation_id is not None:
        if service is None:
            raise ConfigurationError("continuing a conversation needs its store")
        service.check_writable(conversation_id, what="ask")  # before a request is sent
        events = service.history(conversation_id)
        notes = _unanswered_calls(events, conversation_id)
    encode = provider_adapter.need_encode()
    request = encode(events, config, model, text)
    continues = CONTINUES | {CUT_AT_LENGTH} if continue_on_length else CONTINUES
    report = AskReport(conversation_id=conversation_id or new_conversation_id(), notes=notes)
    if watcher is not None:
        for note in notes:
            watcher.note(note)
    history: list[tuple[str, Sequence[Event]]] = [("user", [UserMessage(blocks=(text,))])]
    for _ in range(settings.ask.max_continuations + 1):
        for note in request.notes:
            if note not in report.notes:
                report.notes.append(note)
                if watcher is not None:
                    watcher.note(note)
        end = _one_response(
            recording,
            provider_adapter,
            request,
            config,
            report,
            history=history,
            start=conversation_id is None and not report.responses,
            title=title or text[:60],
            continues=continues,
            watcher=watcher,
        )
        history = []
        if report.interrupted is not None or end is None or end.state != "completed":
            break
        if end.finish_reason != PAUSED and not (
            continue_on_length and end.finish_reason == CUT_AT_LENGTH
        ):
            break
        request = encode(recording().history(report.conversation_id), config, model, None)
    return report


class _Writer:
    """The recording service, opened on first use."""

    def __init__(self, open_writer: Callable[[], ConversationService]) -> None:
        self._open = open_writer
        self._service: ConversationService | None = None

    def __call__(self) -> ConversationService:
        if self._service is None:
            self._service = self._open()
        return self._service


def _given(service: ConversationService | None) -> Callable[[], ConversationService]:
    def given() -> ConversationService:
        if service is None:
            raise ConfigurationError("ask needs a service to record through")
        return service

    return given


def _checked(config: Mapping[str, Any]) -> AppConfig:
    return checked(config, {name: _configure(name) for name in PROVIDERS})


def _configure(name: str) -> Callable[[Mapping[str, Any]], object]:
    def check(config: Mapping[str, Any]) -> object:
        configure = adapter(name).configure
        return None if configure is None else configure(config)

    return check


def _unanswered_calls(events: Sequence[Event], conversation_id: ConversationId) -> list[str]:
    """A note naming the client tool calls without a result, which the provider refuses."""
    calls = unanswered_calls(events)
    if not calls:
        return []
    listed = ", ".join(f"{call.call_id!r} ({call.name})" for call in calls)
    return [
        f"conversation {conversation_id} has client tool calls without a result ({listed}): "
        "the provider will likely refuse the request. Answer each with `convstore answer "
        f"{conversation_id} CALL_ID --text …`, or `convstore repair {conversation_id}` to "
        "answer them with an error"
    ]


Record = Callable[
    [Iterable[Event], Callable[[], bool] | None], tuple[ConversationId, ResponseOutcome]
]
"""Records one response's drafts (with the recorder's `ready`, for a live stream)."""


def _one_response(
    recording: Callable[[], ConversationService],
    provider: ProviderAdapter,
    request: EncodedRequest,
    config: Mapping[str, Any],
    report: AskReport,
    *,
    history: Sequence[tuple[str, Sequence[Event]]],
    start: bool,
    title: str,
    continues: frozenset[str],
    watcher: Watcher | None,
) -> ResponseEnded | None:
    """Send one request and record its response in `report`; its end as recorded."""
    body = request.recorded_json()

    def opened() -> Record:
        """The provider answered: close what another provider left pending, and record
        in the conversation as it is now."""
        service = recording()
        if watcher is not None:
            watcher.begin(report.conversation_id)
        version = 0 if start else _abandon_others(service, provider, report)

        def record(
            drafts: Iterable[Event], ready: Callable[[], bool] | None
        ) -> tuple[ConversationId, ResponseOutcome]:
            return service.ingest_exchange(
                None if start else report.conversation_id,
                history,
                drafts,
                at_version=version,
                title=title,
                ready=ready,
                continues=continues,
                start_as=report.conversation_id,
            )

        return record

    try:
        with provider.need_send()(request, config) as stream:
            end, outcome = _streamed(
                stream, opened(), provider, body, report=report, watcher=watcher
            )
    except ProviderHTTPError as error:
        record = opened()
        drafts = list(provider.decode(error.body, body, error.status))
        if watcher is not None:
            for draft in drafts:
                watcher.draft(draft)
        _, outcome = record(drafts, None)
        end = next((d for d in reversed(drafts) if isinstance(d, ResponseEnded)), None)
    report.responses.append(outcome)
    report.error = end.error if end is not None and end.state == "failed" else None
    return end


def _streamed(
    stream: Iterable[bytes],
    record: Record,
    provider: ProviderAdapter,
    body: bytes,
    *,
    report: AskReport,
    watcher: Watcher | None,
) -> tuple[ResponseEnded | None, ResponseOutcome]:
    """Decode the stream here and record it on a writer thread (`live`), a signal ending
    it as a partial commit; its end as recorded, and the outcome."""
    with Interrupts() as interrupts:
        chunks: Iterable[bytes] = interrupts.chunks(stream)
        if watcher is not None and provider.preview is not None:
            chunks = previewed(chunks, provider.preview, watcher.piece)
        drafts = interrupts.marked(provider.decode(chunks, body, None))
        end, (_, outcome) = record_live(
            drafts if watcher is None else _watched(drafts, watcher), record
        )
        report.interrupted = interrupts.signum
    return end, outcome


def _watched(drafts: Iterable[Event], watcher: Watcher) -> Iterator[Event]:
    """`drafts`, each shown to `watcher` once it is handed to the recording."""
    for draft in drafts:
        yield draft
        watcher.draft(draft)


def _abandon_others(
    service: ConversationService, provider: ProviderAdapter, report: AskReport
) -> int:
    """Record other providers' pending activities `abandoned`; the version after."""
    for other in PROVIDERS:
        if other != provider.name:
            closed = service.abandon_activities(report.conversation_id, provider=other)
            report.abandoned += len(closed)
    return service.get(report.conversation_id).version
