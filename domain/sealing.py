"""Content sealing: an event's content encrypted under its conversation's key, the chain
over the ciphertext.

With a `Cipher` (a port the service hands the aggregate; `convstore.storage` builds it
over the conversation's data key), an event is stored as its *clear* fields (the envelope:
type, ids, versions, timestamp, the hash links) and one `sealed` field, the ciphertext of
every other field's canonical JSON, with the event's identity as associated data. The
hash covers that stored form, so `verify` needs no key and holds after the key is
destroyed (`forget`). `Forgotten` events are never sealed: every reader must see them.
"""

from __future__ import annotations

from typing import Final, Protocol

import msgspec

from convstore.domain.errors import IntegrityError

SEALED: Final = "sealed"
"""The stored field holding the ciphertext."""

CLEAR: Final = frozenset(
    {
        "type",
        "originator_id",
        "originator_version",
        "timestamp",
        "prev_hash",
        "hash",
        # ids and positions, never content: the store's indexes and forks need them
        "response_id",
        "call_id",
        "activity_id",
        "turn_id",
        "attempt",
        "forked_from",
        "forked_at",
    }
)
"""The fields of a sealed event that stay in clear."""

UNSEALED: Final = frozenset({"Forgotten"})
"""Event types stored in clear whole."""

_split = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_encode = msgspec.json.Encoder().encode


class _Sealed(msgspec.Struct):
    sealed: bytes | None = None
    type: str = ""
    originator_id: str = ""
    originator_version: int = 0


_sealed_part = msgspec.json.Decoder(_Sealed).decode


class Cipher(Protocol):
    """Authenticated encryption under one conversation's data key."""

    def encrypt(self, plaintext: bytes, associated: bytes) -> bytes:
        """The ciphertext (nonce included) of `plaintext`, bound to `associated`."""
        ...

    def decrypt(self, ciphertext: bytes, associated: bytes) -> bytes:
        """The plaintext; raises IntegrityError when the ciphertext or `associated` changed."""
        ...


def identity(kind: str, originator_id: str, version: int) -> bytes:
    """The associated data of an event's ciphertext: its type, conversation and version,
    so a ciphertext moved to another event does not decrypt."""
    return b"%s\n%s\n%d" % (kind.encode(), originator_id.encode(), version)


def seal_canonical(canonical: bytes, cipher: Cipher) -> bytes:
    """The sealed canonical encoding of an event's canonical encoding (no hash fields)."""
    fields = _split(canonical)
    kind = msgspec.json.decode(bytes(fields["type"]), type=str)
    if kind in UNSEALED:
        return canonical
    clear = {name: raw for name, raw in fields.items() if name in CLEAR}
    secret = b"{%s}" % b",".join(
        _encode(name) + b":" + bytes(raw) for name, raw in fields.items() if name not in CLEAR
    )
    originator = msgspec.json.decode(bytes(fields["originator_id"]), type=str)
    version = msgspec.json.decode(bytes(fields["originator_version"]), type=int)
    sealed = cipher.encrypt(secret, identity(kind, originator, version))
    parts = [_encode(name) + b":" + bytes(raw) for name, raw in clear.items()]
    parts.append(_encode(SEALED) + b":" + _encode(sealed))
    return b"{%s}" % b",".join(parts)


def sealed_kind(stored: bytes) -> str | None:
    """The event type of stored bytes holding sealed content; None when none is sealed
    (or the bytes are not an event's)."""
    if b'"sealed":"' not in stored:
        return None
    try:
        part = _sealed_part(stored)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    return part.type if part.sealed is not None else None


def unseal(stored: bytes, cipher: Cipher) -> bytes:
    """Stored bytes with the sealed content decrypted back into its fields (the bytes
    unchanged when nothing is sealed); raises IntegrityError when it does not decrypt."""
    try:
        part = _sealed_part(stored)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as error:
        raise IntegrityError(f"stored event is not an event: {error}") from None
    if part.sealed is None:
        return stored
    secret = cipher.decrypt(
        part.sealed, identity(part.type, part.originator_id, part.originator_version)
    )
    return strip(stored)[:-1] + b"," + secret[1:] if secret != b"{}" else strip(stored)


def strip(stored: bytes) -> bytes:
    """Stored bytes without their sealed field: the clear fields alone."""
    fields = _split(stored)
    return b"{%s}" % b",".join(
        _encode(name) + b":" + bytes(raw) for name, raw in fields.items() if name != SEALED
    )
