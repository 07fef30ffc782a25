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


class Cipher(Protocol):
    """Authenticated encryption under one conversation's data key."""

    def encrypt(self, plaintext: bytes, associated: bytes) -> bytes:
        """The ciphertext (nonce included) of `plaintext`, bound to `associated`."""
        ...

    def decrypt(self, ciphertext: bytes, associated: bytes) -> bytes:
        """The plaintext; raises IntegrityError when the ciphertext or `associated` changed."""
        ...

    def keyed(self, digest: str) -> str:
        """`digest` keyed (hex): an HMAC under the store's key, the same for every
        conversation (a fork compares its parent's digests), so a stored response digest
        cannot confirm guessed content."""
        ...


def identity(kind: str, originator_id: str, version: int) -> bytes:
    """The associated data of an event's ciphertext: its type, conversation and version,
    so a ciphertext moved to another event does not decrypt."""
    return b"%s\n%s\n%d" % (kind.encode(), originator_id.encode(), version)


def seal_canonical(
    canonical: bytes, cipher: Cipher, kind: str, originator: str, version: int
) -> bytes:
    """The sealed canonical encoding of event `originator`/`version` of type `kind`, from
    its canonical encoding (no hash fields): the clear fields, then `sealed` last."""
    if kind in UNSEALED:
        return canonical
    clear: list[bytes] = []
    secret: list[bytes] = []
    keys = _KEYS
    for name, raw in _split(canonical).items():
        key = keys.get(name)
        if key is None:
            key = keys[name] = _encode(name) + b":"
        (clear if name in CLEAR else secret).append(key + raw)
    sealed = cipher.encrypt(b"{%s}" % b",".join(secret), identity(kind, originator, version))
    clear.append(b'"sealed":' + _encode(sealed))
    return b"{%s}" % b",".join(clear)


_KEYS: dict[str, bytes] = {}
"""Each field name's `"name":` prefix, encoded once."""


class SealedPart(msgspec.Struct):
    """What opening a sealed event needs: its ciphertext and its identity."""

    sealed: bytes | None = None
    type: str = ""
    originator_id: str = ""
    originator_version: int = 0


_sealed_part = msgspec.json.Decoder(SealedPart).decode


def sealed_part(stored: bytes) -> SealedPart | None:
    """The sealed part of stored event bytes; None when nothing is sealed (or the bytes
    are not an event's)."""
    if b'"sealed":"' not in stored:
        return None
    try:
        part = _sealed_part(stored)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    return part if part.sealed is not None else None


def sealed_kind(stored: bytes) -> str | None:
    """The event type of stored bytes holding sealed content; None when none is sealed."""
    part = sealed_part(stored)
    return None if part is None else part.type


def unseal_part(stored: bytes, part: SealedPart, cipher: Cipher) -> bytes:
    """Stored bytes with their sealed `part` decrypted back into their fields; raises
    IntegrityError when it does not decrypt."""
    assert part.sealed is not None
    # `identity` and `strip` inlined: this runs once per event of every encrypted read.
    secret = cipher.decrypt(
        part.sealed,
        b"%s\n%s\n%d" % (part.type.encode(), part.originator_id.encode(), part.originator_version),
    )
    start = stored.find(b',"sealed":"')
    end = stored.index(b'"', start + 11) + 1
    if secret == b"{}":
        return stored[:start] + stored[end:]
    return b"%s%s,%s" % (stored[:start], stored[end:-1], secret[1:])


def unseal(stored: bytes, cipher: Cipher) -> bytes:
    """Stored bytes with the sealed content decrypted (unchanged when nothing is sealed)."""
    part = sealed_part(stored)
    return stored if part is None else unseal_part(stored, part, cipher)


def strip(stored: bytes) -> bytes:
    """Stored bytes without their sealed field: the clear fields alone."""
    start = stored.find(b',"sealed":"')
    if start < 0:
        return stored
    end = stored.index(b'"', start + 11) + 1  # base64 holds no quote
    return stored[:start] + stored[end:]
