"""Which conversation a proxied request goes on: the one the client pins
(`X-Convstore-Conversation`), else a new one.

`place` returns the conversation, the request's messages it does not hold yet (the
provider's `history`: a request that is not a continuation of the pinned conversation is
refused there, and recorded as a new conversation), and the version they were read at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from convstore.adapters.wire.providers import adapter
from convstore.domain.attempts import reading
from convstore.domain.errors import ConversationNotFound, DecodeError
from convstore.domain.events import Event
from convstore.domain.service import ConversationService
from convstore.domain.vocabulary import ConversationId

__all__ = ["PIN_HEADER", "Placement", "place", "recorded_request"]

PIN_HEADER = "x-convstore-conversation"
"""The request header that pins the conversation (stripped before forwarding)."""

_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ENCODER = msgspec.json.Encoder()


@dataclass(frozen=True)
class Placement:
    """Where one request is recorded."""

    conversation_id: ConversationId | None
    """None: a new conversation."""
    history: list[tuple[str, Sequence[Event]]] = field(default_factory=list)
    version: int = 0
    how: str = "new"
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
    service: ConversationService, provider: str, request: bytes, *, pinned: str | None
) -> Placement:
    """Where `request` is recorded, and the messages of it to record first; raises
    DecodeError for a body that is not the provider's request."""
    history = adapter(provider).need_history()
    if pinned is not None:
        target = _pinned(service, pinned)
        if target is not None:
            own = list(service.events(target))
            events = service.history(target, own)
            try:
                messages = history(reading(events), request)
            except DecodeError:
                pass  # not a continuation of it: a conversation of its own
            else:
                return Placement(
                    target,
                    [(m.role, m.drafts) for m in messages],
                    own[-1].originator_version,
                    how="pinned",
                )
    messages = history([], request)
    return Placement(None, [(m.role, m.drafts) for m in messages])


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
