"""Replay of a conversation with redactions (`domain.redaction`): what is sent, and when
same-provider replay is refused.

Every encoder is handed the overlay, so a redacted text is sent marked and its payload is
left out (the encoder rebuilds the block from the portable content, as it does for a
foreign event). Where the provider signs the text (a thought signature, a thinking block's
signature, reasoning's encrypted content), the block cannot be rebuilt: the provider
would reject the marked text under the old signature. When the request built from the
stored events would carry such a payload, replay is refused, naming the event
(`RedactedReplay`); when it would leave the payload out anyway (another provider, a
model the payload is not bound to), the overlay is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import msgspec

from convstore.domain.errors import RedactedReplay
from convstore.domain.events import Event
from convstore.domain.redaction import hidden
from convstore.domain.vocabulary import ProviderPayload

__all__ = ["Signed", "refuse_signed", "signed_by"]

Signed = Callable[[ProviderPayload], bool]
"""Whether a payload carries a signature over the text it came with (so it must
round-trip with that text, unchanged)."""

_keys = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


def signed_by(provider: str, keys: Collection[str]) -> Signed:
    """`Signed` for payloads of `provider` holding any of `keys` at their top level."""

    def signed(payload: ProviderPayload) -> bool:
        if payload.provider != provider:
            return False
        try:
            fields = _keys(bytes(payload.value))
        except msgspec.DecodeError:  # not an object: nothing signed in it
            return False
        return any(key in fields for key in keys)

    return signed


def refuse_signed(
    events: Sequence[Event], provider: str, signed: Signed | None, sent: Callable[[], bytes]
) -> None:
    """Raise RedactedReplay when a redacted event among `events` (a conversation's
    history) holds a payload `signed` says is signed over its text, and the request built
    from the events as stored (`sent`, called only then) carries that payload: it would
    round-trip. One the request leaves out (bound to another model) refuses nothing."""
    marks = hidden(events)
    if not marks or signed is None:
        return
    bound = [
        (event.originator_version, payload)
        for event in events
        if event.originator_version in marks
        and (payload := getattr(event, "payload", None)) is not None
        and signed(payload)
    ]
    if not bound:
        return
    request = sent()
    for version, payload in bound:
        if bytes(payload.value) in request:
            raise RedactedReplay(
                f"event {version} is redacted, and {provider} signed its text "
                f"({payload.format}): replaying it to {provider} would need the hidden text. "
                "Nothing was sent; replay to another provider or model, or fork the "
                f"conversation before version {version}",
                version=version,
            )
