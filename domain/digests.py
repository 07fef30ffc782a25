"""A response's identity digest, so a response id sent again can be compared with the copy
stored: the same content is "already stored", any difference a `ResponseConflict`.

Version 2 (`v2:<response>:<request>`, SHA-256 hex each) covers everything the response
produced: its start (provider, model, origin), every block with its payloads and its
citations' replay values, and its end (state, stop reason, usage, error). Apart, it covers
the request the start recorded, without transport-only fields (`stream`,
`stream_options`): two copies are the same response when their response parts are equal
and, where both were ingested with their request (`-` marks none), their request parts
too. Payloads are digested canonically: the JSON they hold with object keys sorted, so a
response that arrives streamed and not, or re-serialized, has one digest. Left out: the
envelope (ids, versions, times, hashes), the writer, the attempt and why we ended it
(`end_reason`).

Version 1 (bare hex, written before version 2) covered the portable content only: no
payloads, no end. A response stored under it is compared by recomputing version 1 over
what arrives, so it is never reported as a false conflict.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, Final, Protocol

import msgspec

from convstore.domain.events import AssistantText, Event, ResponseEnded, ResponseStarted
from convstore.domain.vocabulary import ProviderPayload, RequestSettings

__all__ = [
    "VERSION_2",
    "ResponseDigest",
    "digest_for",
    "new_digest",
    "same_response",
    "same_start",
]

VERSION_2: Final = "v2:"
"""The prefix of a version-2 digest."""

TRANSPORT_FIELDS: Final = frozenset({"stream", "stream_options"})
"""Request fields that say how the answer travels, not what was asked."""

_ENVELOPE: Final = frozenset(
    {
        "originator_id",
        "originator_version",
        "timestamp",
        "prev_hash",
        "hash",
        "writer",
        "digest",
        "attempt",
        "end_reason",
    }
)
_V1_LEFT_OUT: Final = _ENVELOPE | {"payload", "replay", "settings"}
_encode = msgspec.json.Encoder(order="sorted").encode
_any = msgspec.json.Decoder()


class ResponseDigest(Protocol):
    """A digest folding in a response's drafts one by one."""

    def add(self, draft: Event) -> None:
        """Fold in one draft (the start, a block, or the end)."""
        ...

    def value(self) -> str:
        """The digest so far, as a `ResponseEnded` records it."""
        ...


Keyed = Callable[[str], str]
"""A keyed digest of a digest (an HMAC under the store's key: `sealing.Cipher.keyed`), so
a stored digest cannot confirm guessed content; None on a plain store."""


class _WholeDigest:
    """Version 2: every field the response produced, payloads canonical; its request
    apart. With `keyed`, both parts are keyed (an encrypted store's)."""

    def __init__(self, keyed: Keyed | None = None) -> None:
        self._hash = hashlib.sha256()
        self._request = ""
        self._keyed = keyed

    def add(self, draft: Event) -> None:
        self._hash.update(type(draft).__name__.encode())
        if isinstance(draft, ResponseStarted):
            self._hash.update(_encode(_canonical(draft, _ENVELOPE | {"settings"})))
            if draft.settings != RequestSettings():
                request = _encode(_canonical(draft.settings))
                self._request = hashlib.sha256(request).hexdigest()
            return
        self._hash.update(_encode(_canonical(draft, _ENVELOPE)))

    def value(self) -> str:
        response, request = self._hash.hexdigest(), self._request
        keyed = self._keyed
        if keyed is not None:
            response, request = keyed(response), request and keyed(request)
        return f"{VERSION_2}{response}:{request or '-'}"


class _PortableDigest:
    """Version 1: the portable content of the start and the blocks (payloads, settings
    and the end left out)."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def add(self, draft: Event) -> None:
        if isinstance(draft, ResponseEnded):
            return
        fields = msgspec.structs.asdict(draft)
        if isinstance(draft, AssistantText):
            fields["attributions"] = [
                {k: v for k, v in msgspec.structs.asdict(a).items() if k not in _V1_LEFT_OUT}
                for a in draft.attributions
            ]
        kept = {k: v for k, v in fields.items() if k not in _V1_LEFT_OUT}
        self._hash.update(type(draft).__name__.encode())
        self._hash.update(msgspec.json.encode(kept))

    def value(self) -> str:
        return self._hash.hexdigest()


def new_digest(keyed: Keyed | None = None) -> ResponseDigest:
    """The digest a response recorded now carries (version 2; keyed with `keyed`)."""
    return _WholeDigest(keyed)


def digest_for(stored: str, keyed: Keyed | None = None) -> ResponseDigest:
    """A digest of the version `stored` was computed under, to compare a copy with it."""
    return _WholeDigest(keyed) if stored.startswith(VERSION_2) else _PortableDigest()


def same_response(stored: str, copy: str) -> bool:
    """Whether a copy's digest (computed by `digest_for(stored)`) is the stored response's."""
    if not stored.startswith(VERSION_2):
        return copy == stored
    response, _, request = stored.removeprefix(VERSION_2).partition(":")
    copy_response, _, copy_request = copy.removeprefix(VERSION_2).partition(":")
    if response != copy_response:
        return False
    return request == copy_request or "-" in (request, copy_request)


def same_start(stored: ResponseStarted, copy: ResponseStarted) -> bool:
    """Whether two ResponseStarted open the same response: equal but for the envelope,
    their requests compared (without transport fields) only where both recorded one."""
    left_out = _ENVELOPE | {"settings"}
    if _encode(_canonical(stored, left_out)) != _encode(_canonical(copy, left_out)):
        return False
    if RequestSettings() in (stored.settings, copy.settings):
        return True
    return _encode(_canonical(stored.settings)) == _encode(_canonical(copy.settings))


_PLAIN: Final = frozenset({str, int, float, bool, type(None)})
"""Types that are their own builtins (what most fields hold): no conversion to look up."""


def _canonical(value: Any, left_out: frozenset[str] = frozenset()) -> Any:
    """`value` as plain JSON builtins, every payload as the JSON it holds."""
    if type(value) in _PLAIN:
        return value
    if isinstance(value, ProviderPayload):
        return {
            "provider": value.provider,
            "format": value.format,
            "binding": value.binding,
            "value": _payload_json(value),
        }
    if isinstance(value, RequestSettings):
        fields = _canonical_struct(value, frozenset({"native"}))
        if value.native is not None:
            native = _payload_json(value.native)
            if isinstance(native, dict):
                native = {k: v for k, v in native.items() if k not in TRANSPORT_FIELDS}
            fields["native"] = {**_canonical(value.native), "value": native}
        return fields
    if isinstance(value, msgspec.Struct):
        return _canonical_struct(value, left_out)
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return msgspec.to_builtins(value)


def _canonical_struct(value: msgspec.Struct, left_out: frozenset[str]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name in value.__struct_fields__:
        if name not in left_out:
            field = getattr(value, name)
            fields[name] = field if type(field) in _PLAIN else _canonical(field)
    return fields


def _payload_json(payload: ProviderPayload) -> Any:
    """The JSON a payload holds (its bytes as text when they are not JSON, which
    `ProviderPayload.of` never lets through)."""
    try:
        return _any.decode(payload.raw)
    except msgspec.DecodeError:
        return payload.raw.decode("utf-8", "replace")
