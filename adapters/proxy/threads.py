"""Which conversation a proxied request goes on.

In order: the one the client pins (`X-Convstore-Conversation: ID`, stripped before
forwarding), when the request continues it; for OpenAI, the one holding the stored
response `previous_response_id` names; else the stored conversation that is a prefix of
the request's messages, found through the prefix index (`prefixes`: among the
conversations the same provider answered, the longest prefix, then an exact match on
opaque values, then the most recent). A conversation that moved on
past the prefix since (the request edits its history) is forked where the request leaves
it, the fork going on with the request's own messages. Anything else starts a new
conversation. Every candidate is confirmed by the provider's own `history`, which
refuses a conversation that is not a prefix of the request.

`place` returns the conversation, the request's messages it does not hold yet, and the
version they were read at (`ingest_exchange` records them with the response, refusing
them if the conversation moved on meanwhile).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec

from convstore.adapters.proxy.prefixes import PrefixIndex
from convstore.adapters.wire.providers import History, MessageDrafts, adapter
from convstore.domain.attempts import reading
from convstore.domain.errors import ConversationNotFound, DecodeError, InvariantViolation
from convstore.domain.events import (
    Event,
    ResponseEnded,
    ResponseStarted,
    TurnEnded,
    UserMessage,
)
from convstore.domain.service import ConversationService
from convstore.domain.vocabulary import ConversationId, ResponseId

__all__ = ["PIN_HEADER", "Placement", "place", "recorded_request"]

log = logging.getLogger("convstore.proxy")

PIN_HEADER: Final = "x-convstore-conversation"
"""The request header that pins the conversation (stripped before forwarding)."""
TITLE_CHARS: Final = 60

_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ENCODER = msgspec.json.Encoder()


class _Previous(msgspec.Struct):
    previous_response_id: str | None = None


_PREVIOUS = msgspec.json.Decoder(_Previous)


@dataclass(frozen=True)
class Placement:
    """Where one request is recorded."""

    conversation_id: ConversationId | None
    """None: a new conversation."""
    history: list[tuple[str, Sequence[Event]]] = field(default_factory=list)
    version: int = 0
    how: str = "new"
    """`new`, `pinned`, `continued`, `forked`."""
    title: str = ""


def recorded_request(provider: str, body: bytes, *, model: str = "") -> bytes:
    """The request as a recording keeps it: Gemini's body with the model its URL named
    (as `EncodedRequest.recorded_json` keeps it); any other body as it is."""
    if provider != "google" or not model:
        return body
    try:
        fields = _OBJECT.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return body  # the decoder refuses it, with its own message
    fields.setdefault("model", msgspec.Raw(_ENCODER.encode(model)))
    return _ENCODER.encode(fields)


def place(
    service: ConversationService,
    index: PrefixIndex,
    provider: str,
    request: bytes,
    *,
    pinned: str | None,
) -> Placement:
    """Where `request` is recorded, and the messages of it to record first; raises
    DecodeError for a body that is not the provider's request."""
    history = adapter(provider).need_history()
    if pinned is not None:
        target = _pinned(service, pinned)
        found = None
        if target is not None:
            found = _continuing(service, history, target, request, how="pinned")
            if found is not None:
                return found
        log.warning(
            "proxy: the %s header %s; the request is placed as if it had none",
            PIN_HEADER,
            "names no single stored conversation"
            if target is None
            else f"names conversation {target}, which the request does not continue",
        )
    if provider == "openai":
        found = _after_previous(service, history, request)
        if found is not None:
            return found
    messages = history([], request)
    drafts = [draft for message in messages for draft in message.drafts]
    for candidate in index.find(provider, drafts):
        target = ConversationId(candidate.conversation_id)
        try:
            found = _at(service, history, target, candidate.version, request)
        except ConversationNotFound:
            continue
        if found is not None:
            return found
    return Placement(None, _pairs(messages), title=_title(drafts))


def _at(
    service: ConversationService,
    history: History,
    target: ConversationId,
    version: int,
    request: bytes,
) -> Placement | None:
    """The request placed after `target` as of `version` (of its reading): continuing it
    when that is where it is now (or only the turn ended since), else in a fork at
    `version`; None when `target` as of then is not a prefix of the request after all."""
    own = list(service.events(target))
    events = service.history(target, own)
    after = [e for e in events if e.originator_version > version]
    if all(isinstance(e, TurnEnded) for e in after):  # nothing since but the turn's end
        return _continuing(service, history, target, request, how="continued", own=own)
    then = [e for e in events if e.originator_version <= version]
    try:
        messages = history(reading(then), request)
    except DecodeError:
        return None
    try:
        fork = service.fork(target, at=version)
    except InvariantViolation:
        return None
    return Placement(fork, _pairs(messages), service.get(fork).version, how="forked")


def _continuing(
    service: ConversationService,
    history: History,
    target: ConversationId,
    request: bytes,
    *,
    how: str,
    own: list[Event] | None = None,
) -> Placement | None:
    """The request going on in `target` as it is now; None when `target` is not a prefix
    of the request."""
    own = own if own is not None else list(service.events(target))
    events = service.history(target, own)
    try:
        messages = history(reading(events), request)
    except DecodeError:
        return None
    return Placement(target, _pairs(messages), own[-1].originator_version, how=how)


def _after_previous(
    service: ConversationService, history: History, request: bytes
) -> Placement | None:
    """An OpenAI request going on from the stored response its `previous_response_id`
    names: in that response's conversation, or a fork of it where a later response
    followed that one."""
    try:
        previous = _PREVIOUS.decode(request).previous_response_id
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if not previous:
        return None
    probe = ResponseStarted(response_id=ResponseId(previous), provider="openai")
    target = service.locate(probe)
    if target is None:
        return None
    events = service.history(target)
    ends = [e for e in events if isinstance(e, ResponseEnded) and e.response_id == previous]
    if not ends:
        return None
    return _at(service, history, target, ends[-1].originator_version, request)


def _pairs(messages: Sequence[MessageDrafts]) -> list[tuple[str, Sequence[Event]]]:
    return [(m.role, m.drafts) for m in messages]


def _title(drafts: Sequence[Event]) -> str:
    """A new conversation's title: the start of its first user text."""
    for draft in drafts:
        if isinstance(draft, UserMessage) and draft.blocks:
            return " ".join(draft.blocks[0].split())[:TITLE_CHARS]
    return ""


def _pinned(service: ConversationService, text: str) -> ConversationId | None:
    """The conversation a pin header names (a full id, or a unique prefix), if stored."""
    found = service.matching(text.strip().lower(), limit=2)
    if len(found) != 1:
        return None
    try:
        service.get(found[0])
    except ConversationNotFound:
        return None
    return found[0]
