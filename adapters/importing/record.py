"""Recording an importer's conversations, idempotent on the source's ids.

A source conversation lands in the conversation whose id `conversation_id` derives from
the format and its `source_id` (or the one it names as its `target`); an exchange whose
response that conversation holds already is passed over, so a second import records
nothing and one after the source grew records only what is new. Each exchange is
`ConversationService.ingest_exchange`: its history and its response's first batch in one
transaction, the conversation started in the first. A conversation that fails part way
keeps the exchanges before the failure and is reported; the next goes on. Messages an
earlier import recorded after the last response (the source's `trailing`) are not
recorded again when the source grew and they became the history of its next exchange.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final
from uuid import UUID, uuid5

import msgspec

from convstore.adapters.importing.source import ImportedConversation, Message, Unreadable
from convstore.adapters.wire.providers import Loss
from convstore.domain.errors import ConversationNotFound, ConvstoreError
from convstore.domain.events import (
    EPOCH,
    NIL,
    ContextInjected,
    Event,
    ResponseEnded,
    ResponseStarted,
    ToolCallResponded,
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.service import ConversationService
from convstore.domain.vocabulary import ConversationId

__all__ = ["ImportReport", "Imported", "conversation_id", "record", "record_all"]

NAMESPACE: Final = UUID("5f0c3c3e-7a4e-4c1b-9a57-0b1d7e3c9a10")
"""The namespace of imported conversations' ids (uuid5 of `FORMAT NUL source id`)."""


def conversation_id(fmt: str, source_id: str) -> ConversationId:
    """The conversation a source conversation of format `fmt` lands in, on every import."""
    return ConversationId(uuid5(NAMESPACE, f"{fmt}\0{source_id}"))


class Imported(msgspec.Struct, kw_only=True):
    """What became of one source conversation."""

    source_id: str
    conversation_id: ConversationId | None = None
    responses: int = 0
    """Responses recorded by this import."""
    already_stored: int = 0
    """Responses a previous import recorded."""
    started: bool = False
    """Whether this import started the conversation."""
    losses: list[Loss] = []
    error: str | None = None
    error_type: str = ""


@dataclass
class ImportReport:
    """What an import did, conversation by conversation."""

    fmt: str
    conversations: list[Imported] = field(default_factory=list)
    interrupted: int | None = None

    @property
    def failed(self) -> list[Imported]:
        """The conversations that could not be read or recorded (in part or whole)."""
        return [c for c in self.conversations if c.error is not None]

    def summary(self) -> dict[str, object]:
        """The `--json` summary."""
        return {
            "format": self.fmt,
            "conversations": len(self.conversations),
            "started": sum(1 for c in self.conversations if c.started),
            "responses": sum(c.responses for c in self.conversations),
            "already_stored": sum(c.already_stored for c in self.conversations),
            "failed": len(self.failed),
            "losses": sum(len(c.losses) for c in self.conversations),
            "interrupted": self.interrupted,
            "items": [msgspec.to_builtins(c) for c in self.conversations],
        }


def record(service: ConversationService, fmt: str, source: ImportedConversation) -> Imported:
    """Record one source conversation (see the module's docstring)."""
    target = source.target or conversation_id(fmt, source.source_id)
    done = Imported(source_id=source.source_id, losses=list(source.losses))
    try:
        events = list(service.events(target))
    except ConversationNotFound:
        events = []
    held = {e.response_id for e in events if isinstance(e, ResponseStarted)}
    version = events[-1].originator_version if events else 0
    current: ConversationId | None = target if events else None
    if current is not None:
        done.conversation_id = current
    done.started = not events
    recorded_last = not events
    trailed = _trailed(events)
    try:
        for exchange in source.exchanges:
            head = exchange.response[0] if exchange.response else None
            if not isinstance(head, ResponseStarted):
                raise ConvstoreError(
                    "an importer's exchange must begin with its ResponseStarted (a bug of "
                    f"the {fmt} importer)"
                )
            if head.response_id in held:
                done.already_stored += 1
                recorded_last = False
                continue
            history, trailed = _unrecorded(exchange.history, trailed), []
            current, outcome = service.ingest_exchange(
                current,
                history,
                exchange.response,
                at_version=version,
                title=source.title,
                start_as=target,
            )
            done.conversation_id = current
            held.add(head.response_id)
            if outcome.already_stored:
                done.already_stored += 1
            else:
                done.responses += 1
            version = service.get(current).version
            recorded_last = True
        if source.trailing and recorded_last:
            current = _trailing(service, current, target, source)
            done.conversation_id = current
    except ConvstoreError as error:
        done.error, done.error_type = str(error), type(error).__name__
    done.started = done.started and done.conversation_id is not None
    return done


_USER_SIDE = (UserMessage, ContextInjected, ToolCallResponded, UnknownArtifact)


def _content(event: Event) -> object:
    """An event's content, without the envelope its recording stamped."""
    bare = msgspec.structs.replace(
        event, originator_id=NIL, originator_version=0, timestamp=EPOCH, prev_hash="", hash=""
    )
    return (type(event).__name__, msgspec.json.encode(bare))


def _trailed(events: list[Event]) -> list[object]:
    """The user-side events after the conversation's last response (what an earlier
    import recorded as the source's trailing messages), as contents."""
    last = max((i for i, e in enumerate(events) if isinstance(e, ResponseEnded)), default=-1)
    return [_content(e) for e in events[last + 1 :] if isinstance(e, _USER_SIDE)]


def _unrecorded(history: Sequence[Message], trailed: list[object]) -> Sequence[Message]:
    """`history` without its leading user messages that `trailed` holds already."""
    held = 0
    for role, drafts in history:
        contents = [_content(d) for d in drafts]
        if role != "user" or contents != trailed[: len(contents)]:
            break
        trailed = trailed[len(contents) :]
        held += 1
    return history[held:]


def _trailing(
    service: ConversationService,
    current: ConversationId | None,
    target: ConversationId,
    source: ImportedConversation,
) -> ConversationId:
    """The messages after the last response, each recorded as user input (the
    conversation started for them when the source holds no response at all)."""
    if current is None:
        current = service.start(source.title, start_as=target)
    for role, drafts in source.trailing:
        if role != "user":
            raise ConvstoreError(
                f"a {role} message after the last response cannot be imported (a bug of "
                "the importer: only user messages may trail)"
            )
        service.add_user_input(current, drafts)
    return current


def record_all(
    service: ConversationService,
    fmt: str,
    conversations: Iterable[ImportedConversation | Unreadable],
    *,
    progress: Callable[[int], None] | None = None,
    stopped: Callable[[], int | None] = lambda: None,
) -> ImportReport:
    """Record every conversation `conversations` yields, an Unreadable one reported;
    `progress` is told how many are done after each, and the import stops after the
    conversation being recorded once `stopped` names a signal."""
    report = ImportReport(fmt)
    for source in conversations:
        if isinstance(source, Unreadable):
            item = Imported(
                source_id=source.source_id, error=source.reason, error_type="DecodeError"
            )
        else:
            item = record(service, fmt, source)
        report.conversations.append(item)
        if progress is not None:
            progress(len(report.conversations))
        if (signum := stopped()) is not None:
            report.interrupted = signum
            break
    return report
