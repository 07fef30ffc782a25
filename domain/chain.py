"""The per-conversation hash chain: canonical encoding, sealing and verification.

An event's canonical encoding is msgspec's compact JSON of its fields with the two hash
fields left out. Its `hash` is SHA-256 over the predecessor's hash, a newline, and that
encoding. Stored events are the canonical encoding with the hash fields added, so
`verify_stored` recomputes every hash from the stored bytes alone, before any upcasting:
a schema upgrade never breaks an old chain.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, TypeVar

import msgspec

from convstore.domain.errors import IntegrityError
from convstore.domain.events import Event
from convstore.domain.sealing import Cipher, seal_canonical

_HASH_FIELDS = frozenset({"prev_hash", "hash"})
_encode = msgspec.json.Encoder().encode
_split = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode

E = TypeVar("E", bound=Event)


def digest(prev_hash: str, canonical: bytes) -> str:
    """The hash of an event whose predecessor's hash is `prev_hash`."""
    h = hashlib.sha256(prev_hash.encode("ascii"))
    h.update(b"\n")
    h.update(canonical)
    return h.hexdigest()


def seal(event: E, prev_hash: str, cipher: Cipher | None = None) -> tuple[E, bytes]:
    """`event` with its chain fields set, given its predecessor's hash, and its stored
    encoding: the canonical encoding, encoded once, with the hash fields added at its end
    (what `canonical_from_stored` takes apart again; field order is not part of the
    chain). With a `cipher`, the content is sealed first (`domain.sealing`): the hash
    covers the ciphertext."""
    unsealed = (
        msgspec.structs.replace(event, prev_hash="", hash="")
        if event.prev_hash or event.hash
        else event  # a fresh draft: no copy needed to leave the hash fields out
    )
    canonical = _encode(unsealed)
    if cipher is not None:
        canonical = seal_canonical(
            canonical,
            cipher,
            type(event).__name__,
            str(event.originator_id),
            event.originator_version,
        )
    own = digest(prev_hash, canonical)
    links = b',"prev_hash":%s,"hash":"%s"}' % (_encode(prev_hash), own.encode("ascii"))
    if not prev_hash:  # a first event's, left out as the struct's default is
        links = b',"hash":"%s"}' % own.encode("ascii")
    return msgspec.structs.replace(unsealed, prev_hash=prev_hash, hash=own), canonical[:-1] + links


def canonical_from_stored(state: bytes) -> tuple[bytes, str, str]:
    """Split stored bytes into (canonical encoding, prev_hash, hash)."""
    try:
        fields = _split(state)
    except (msgspec.DecodeError, RecursionError) as error:
        raise IntegrityError(f"stored event is not a JSON object: {error}") from None
    prev_hash = _string(fields.get("prev_hash"))
    own_hash = _string(fields.get("hash"))
    canonical = b"{%s}" % b",".join(
        _encode(name) + b":" + bytes(raw)
        for name, raw in fields.items()
        if name not in _HASH_FIELDS
    )
    return canonical, prev_hash, own_hash


_LINKED: Final = b',"prev_hash":"'
_OWN: Final = b'","hash":"'
_FIRST: Final = b',"hash":"'
_HEX: Final = 64


def as_sealed(state: bytes) -> tuple[bytes, str, str] | None:
    """`canonical_from_stored(state)` read by position, for bytes laid out as `seal` writes
    them (the hash fields last, compact): None for any other layout. Only a hash that
    verifies proves the bytes are as sealed; `verify_stored` falls back to the field-by-
    field reading when it does not."""
    if not state.endswith(b'"}'):
        return None
    linked = len(_LINKED) + _HEX + len(_OWN) + _HEX + 2
    tail = state[-linked:]
    if tail.startswith(_LINKED) and tail[-_HEX - len(_OWN) - 2 : -_HEX - 2] == _OWN:
        prev, own = tail[len(_LINKED) : len(_LINKED) + _HEX], tail[-_HEX - 2 : -2]
        body = state[:-linked]
    else:
        first = len(_FIRST) + _HEX + 2
        tail = state[-first:]
        if not tail.startswith(_FIRST):
            return None
        prev, own, body = b"", tail[len(_FIRST) : -2], state[:-first]
    if not (prev.isascii() and own.isascii()):
        return None
    return body + b"}", prev.decode("ascii"), own.decode("ascii")


def _string(raw: msgspec.Raw | None) -> str:
    if raw is None:
        return ""
    try:
        return msgspec.json.decode(bytes(raw), type=str)
    except msgspec.DecodeError:
        return ""


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """One place where a stored chain does not hold."""

    version: int
    problem: str


def verify_stored(states: Iterable[tuple[int, bytes]], *, first_prev: str = "") -> list[ChainBreak]:
    """Walk stored (version, bytes) in order; list every changed, missing or moved event."""
    breaks: list[ChainBreak] = []
    expected_prev = first_prev
    expected_version: int | None = None
    for version, state in states:
        if expected_version is not None and version != expected_version:
            breaks.append(ChainBreak(version, f"version {expected_version} is missing"))
        expected_version = version + 1
        sealed = as_sealed(state)
        verified = sealed is not None and sealed[1] == expected_prev
        if sealed is not None and verified and digest(sealed[1], sealed[0]) == sealed[2]:
            expected_prev = sealed[2]  # the bytes are as sealed, byte for byte
            continue
        try:
            canonical, prev_hash, own_hash = canonical_from_stored(state)
        except IntegrityError as error:
            breaks.append(ChainBreak(version, str(error)))
            expected_prev = ""
            continue
        if prev_hash != expected_prev:
            breaks.append(ChainBreak(version, "does not follow its predecessor (removed or moved)"))
        if digest(prev_hash, canonical) != own_hash:
            breaks.append(ChainBreak(version, "content changed since it was written"))
        expected_prev = own_hash
    return breaks
