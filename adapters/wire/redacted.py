"""Replay of a conversation with redactions (`domain.redaction`): what is sent, and when
same-provider replay is refused.

Every encoder is handed the overlay, so a redacted text is sent marked and its payload is
left out (the encoder rebuilds the block from the portable content, as it does for a
foreign event). Where the provider signs the text (a thought signature, a thinking block's
signature, reasoning's encrypted content), the block cannot be rebuilt: the provider
would reject the marked text under the old signature. Replay to that provider is then
refused, naming the event (`RedactedReplay`); another provider reads the overlay alone.
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


def refuse_signed(events: Sequence[Event], provider: str, signed: Signed | None) -> None:
    """Raise RedactedReplay when a redacted event among `events` (a conversation's
    history) holds a payload `signed` says is signed over its text."""
    marks = hidden(events)
    if not marks or signed is None:
        return
    for event in events:
        if event.originator_version not in marks:
            continue
        payload: ProviderPayload | None = getattr(event, "payload", None)
        if payload is not None and signed(payload):
            version = event.originator_version
            raise RedactedReplay(
                f"event {version} is redacted, and {provider} signed its text "
                f"({payload.format}): replaying it to {provider} would need the hidden text. "
                "Nothing was sent; replay to another provider, or fork the conversation "
                f"before version {version}",
                version=version,
            )
