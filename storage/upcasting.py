"""Upcasting: stored records of an earlier schema version read as today's events.

A record's schema version is in its `type` tag: version 1 is the bare class name (every
event class today: the schema has only ever had version 1), version N is `Name@N`. When
an event class's stored shape changes, the class gets the next version's tag
(`class ResponseEnded(Event, ..., tag="ResponseEnded@2")`) and the change is registered
here as an upcaster from the version before:

    @upcaster("ResponseEnded", 1)
    def _usage_in_one_field(fields: Fields) -> Fields: ...

Readers that dispatch on the tag (the search index's text extractors) follow the new tag.

A record of today's version costs nothing extra: its tag is in the decoder's union, so
it decodes in one msgspec pass as before. Only a record that decode refuses (the mapper)
or whose tag is registered here (a partial reader such as the search index) is upcast:
from its version to the next until no upcaster is registered for the tag reached, then
decoded as today's class. An upcaster is a pure function of the record's fields, the
envelope (`Event`'s id, version, timestamp and hashes) left out and kept as stored;
each value arrives as `msgspec.Raw`, so what an upcaster does not touch (a provider
payload) stays byte for byte, and a value it sets may be any msgspec-encodable one. It
returns the fields as the next version stores them (defaults left out), which the golden
fixtures' test checks. Nothing is re-hashed or written back: `verify` checks the stored
bytes as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeAlias

import msgspec

from convstore.domain.errors import IntegrityError
from convstore.domain.events import EVENT_TYPES, Event

Fields: TypeAlias = dict[str, Any]
"""A record's fields but its tag and envelope: `msgspec.Raw` as stored, or set plain."""
Upcaster: TypeAlias = Callable[[Fields], Fields]
"""One version's fields → the next version's."""

TAG: Final = "type"
"""The field holding a record's tag (the events' msgspec `tag_field`)."""
ENVELOPE: Final = Event.__struct_fields__
"""Fields every event carries and upcasting keeps as stored, the hashes among them."""
CURRENT: Final = frozenset(cls.__struct_config__.tag for cls in EVENT_TYPES)
"""Today's tags: the one version of each event type that decodes without upcasting."""

UPCASTERS: Final[dict[str, Upcaster]] = {}
"""Stored tag of an earlier version → its upcaster to the next version."""

_split = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_string = msgspec.json.Decoder(str).decode
_encode = msgspec.json.Encoder().encode


def tag_of(name: str, version: int) -> str:
    """The tag version `version` of event type `name` is stored with."""
    return name if version == 1 else f"{name}@{version}"


def _next(tag: str) -> str:
    name, at, number = tag.rpartition("@")
    if not at:
        return tag_of(tag, 2)
    return tag_of(name, int(number) + 1)


def upcaster(name: str, version: int) -> Callable[[Upcaster], Upcaster]:
    """Register the decorated function as the upcaster of `name`'s version `version`."""
    tag = tag_of(name, version)

    def register(function: Upcaster) -> Upcaster:
        if tag in CURRENT:
            raise ValueError(f"{tag} is today's tag: only earlier versions are upcast")
        if tag in UPCASTERS:
            raise ValueError(f"an upcaster of {tag} is registered already")
        UPCASTERS[tag] = function
        return function

    return register


_READ: Final = {
    name: int(number or 1) for name, _, number in (str(tag).partition("@") for tag in CURRENT)
}
"""Each event type's name → the version of it this convstore reads."""


def unknown(state: bytes) -> str | None:
    """Why a record that decode refused carries a tag this version cannot read: a later
    version of a type it knows or a type it does not know (a newer convstore wrote it), or
    an earlier version without an upcaster; None when its tag is today's, an upcast one's,
    or not a string at all."""
    try:
        tag = _string(_split(state)[TAG])
    except (msgspec.DecodeError, RecursionError, KeyError):
        return None
    if tag in CURRENT or tag in UPCASTERS:
        return None
    name, at, number = tag.rpartition("@")
    shown = repr(tag if len(tag) <= 80 else tag[:77] + "...")
    read = _READ.get(name if at else tag)
    newer = "a newer convstore wrote it: upgrade convstore to read it"
    if read is None:
        return f"its type {shown} is none this convstore knows ({newer})"
    if not number.isdigit():
        return None
    if int(number) > read:
        return (
            f"{shown} is a later version of {name} than version {read}, which this convstore reads"
            f" ({newer})"
        )
    return f"{shown} is an earlier version of {name} this convstore has no upcaster for"


def upcast(state: bytes) -> bytes | None:
    """Today's encoding of a stored record of an earlier version; None when it is not one.

    Raises IntegrityError when an upcaster refuses the record's fields.
    """
    try:
        fields: Fields = _split(state)
        tag = _string(fields.pop(TAG))
    except (msgspec.DecodeError, RecursionError, KeyError):
        return None
    function = UPCASTERS.get(tag)
    if function is None:
        return None
    envelope = {name: fields.pop(name) for name in ENVELOPE if name in fields}
    while function is not None:
        try:
            fields = function(fields)
        except (KeyError, TypeError, ValueError, RecursionError) as error:
            raise IntegrityError(f"stored {tag} record cannot be upcast: {error!r}") from None
        tag = _next(tag)
        function = UPCASTERS.get(tag)
    return _encode({TAG: tag, **fields, **envelope})
