"""Counts read one value at a time, so one wrong value never takes its neighbours along.

Reliability scenario 37 (type confusion). A count is a JSON integer from 0 to
`MAX_COUNT`: not a boolean (Python's `True` is an `int`), not a fraction, not negative,
not a number past the range (`1e400`, which `msgspec` refuses, so decoding a whole usage
object with one would lose every counter). `read_counters` reads a usage object field by
field from its raw bytes:

- a count goes to `Counters.counts` under its dotted name (`server_tool_use.web_search_requests`);
- a value that is a number but not a count, or any non-null value of a `named` counter
  (a string, an object or a list where a known counter goes), goes to `Counters.unread`,
  nested as it came, its bytes exactly as received. The decoders keep that as an
  UnknownArtifact of format `UNREAD_USAGE` (`{"usage": {"output_tokens": -5}}`), so no
  reading ever shows it as a number, and nothing is lost;
- objects are read the same way, field by field; anything else beside the counters (a
  string such as `service_tier`, a boolean, a list) is not a counter and is left out, as
  before.
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

__all__ = [
    "MAX_COUNT",
    "UNREAD_USAGE",
    "Counters",
    "count",
    "count_field",
    "count_of",
    "encoded_unread",
    "fields_of",
    "plain_counts",
    "plain_counts_of",
    "read_counters",
    "read_each",
    "usage_fields",
]

MAX_COUNT: Final = 2**63 - 1
"""The largest count: what a signed 64-bit column (and every provider's schema) holds."""
UNREAD_USAGE: Final = "unread_usage"
"""The UnknownArtifact format of a response's usage values that are not counts, kept raw
under the provider's own field names (never replayed: they were never content)."""
MAX_DEPTH: Final = 8
"""Usage objects nest two levels; a deeper object is kept whole in `unread`."""

_FIELDS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY: Final = msgspec.json.Decoder()
_ENCODE: Final = msgspec.json.Encoder().encode
_NUMBER_START: Final = frozenset(b"-0123456789")
_NULL: Final = b"null"
_WHITESPACE: Final = b" \t\r\n"


def count(value: Any) -> int | None:
    """`value` if it is a count (an `int`, not a `bool`, from 0 to `MAX_COUNT`), else None."""
    return value if type(value) is int and 0 <= value <= MAX_COUNT else None


def count_field(d: Mapping[str, Any], key: str) -> int | None:
    """The count at `d[key]`; None when absent or not a count."""
    return count(d.get(key))


def count_of(raw: bytes) -> int | None:
    """The count a raw JSON value holds; None for any other value (out of range included)."""
    try:
        return count(_ANY.decode(raw))
    except (msgspec.DecodeError, RecursionError):
        return None


def fields_of(raw: bytes | None) -> dict[str, msgspec.Raw] | None:
    """A raw JSON object's fields, each raw; None when absent, null or not an object."""
    if not raw or bytes(raw) == _NULL:
        return None
    try:
        return _FIELDS.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None


@dataclass
class Counters:
    """A usage object read field by field (see the module docstring)."""

    counts: dict[str, int] = field(default_factory=dict)
    """Each count under its dotted name."""
    unread: dict[str, Any] = field(default_factory=dict)
    """The values that are not counts, nested as they came; the leaves are `msgspec.Raw`."""
    whole: msgspec.Raw | None = None
    """The usage value itself, raw, when it is not an object (nothing in it was read)."""

    def unread_value(self) -> Any:
        """What was not read (`whole`, else `unread`), or None when everything was."""
        return self.whole if self.whole is not None else (self.unread or None)


def encoded_unread(read: Mapping[str, Counters]) -> bytes | None:
    """`{usage field name: what was not read}` as JSON, the leaves as received: the value
    of an `UNREAD_USAGE` artifact; None when everything was read."""
    unread = {name: value for name, c in read.items() if (value := c.unread_value()) is not None}
    return msgspec.json.encode(unread) if unread else None


def usage_fields(raw: msgspec.Raw | None, into: dict[str, msgspec.Raw]) -> msgspec.Raw | None:
    """Add a raw usage object's fields to `into` (a later one's replace an earlier one's);
    returns `raw` itself when it is present but not an object (to keep whole), else None."""
    if not raw or bytes(raw) == _NULL:
        return None
    fields = fields_of(raw)
    if fields is None:
        return raw
    into.update(fields)
    return None


def read_counters(
    fields: Mapping[str, msgspec.Raw], named: Container[str] = (), whole: msgspec.Raw | None = None
) -> Counters:
    """Read a usage object's raw `fields` (see the module docstring); `named` are the
    dotted names of the counters the provider documents; `whole`, a usage value that was
    not an object (see `usage_fields`), is kept raw as it is."""
    if whole is None:
        counts = plain_counts(fields, named)
        if counts is not None:
            return Counters(counts)
    return read_each(fields, named, whole)


def read_each(
    fields: Mapping[str, msgspec.Raw], named: Container[str] = (), whole: msgspec.Raw | None = None
) -> Counters:
    """`read_counters` field by field, each value from its own bytes: what any usage
    object needs when something in it is not a count."""
    out = Counters(whole=whole)
    # Depth first, in document order (the order `Usage.other` keeps), without recursion.
    stack: list[tuple[str, Iterator[tuple[str, msgspec.Raw]], dict[str, Any], int]] = [
        ("", iter(fields.items()), out.unread, 0)
    ]
    while stack:
        prefix, values, unread, depth = stack[-1]
        item = next(values, None)
        if item is None:
            stack.pop()
            continue
        name, raw = item
        key = prefix + name
        value = bytes(raw)
        first = value[:1]
        if first == b"{" and key not in named:
            nested = fields_of(raw) if depth < MAX_DEPTH else None
            if nested is None:
                unread[name] = raw
            else:
                inner = unread.setdefault(name, {})
                stack.append((key + ".", iter(nested.items()), inner, depth + 1))
        elif first and first[0] in _NUMBER_START:
            found = count_of(value)
            if found is None:
                unread[name] = raw
            else:
                out.counts[key] = found
        elif value != _NULL and key in named:
            unread[name] = raw
    _prune(out.unread)
    return out


def plain_counts(
    fields: Mapping[str, msgspec.Raw], named: Container[str] = ()
) -> dict[str, int] | None:
    """`read_counters(fields, named).counts` in one decode, when nothing in `fields` is
    left unread (the common usage object: counts, strings, nested objects of counts);
    None otherwise, for `read_counters` to read field by field."""
    try:
        values = _ANY.decode(_ENCODE(fields))
    except (msgspec.DecodeError, RecursionError):
        return None
    counts: dict[str, int] = {}
    return counts if _plain(values, "", named, counts, 0) else None


def plain_counts_of(
    raws: Sequence[msgspec.Raw], named: Container[str] = ()
) -> dict[str, int] | None:
    """`plain_counts` of the usage objects `raws` merged as `usage_fields` merges them (a
    later one's fields replace an earlier one's, in place), read in one decode of their
    members joined into one object, without decoding each into its fields first; None
    when any is not an object or something would be left unread (then read them the
    general way). Each raw is one JSON value, as msgspec decoded it."""
    members: list[bytes] = []
    for raw in raws:
        value = bytes(raw).strip(_WHITESPACE)
        if value[:1] != b"{" or value[-1:] != b"}":
            return None
        inner = value[1:-1].strip(_WHITESPACE)
        if inner:
            members.append(inner)
    merged = value if len(raws) == 1 else b"{" + b",".join(members) + b"}"
    try:
        values = _ANY.decode(merged)
    except (msgspec.DecodeError, RecursionError):
        return None
    counts: dict[str, int] = {}
    return counts if _plain(values, "", named, counts, 0) else None


def _plain(
    values: dict[str, Any], prefix: str, named: Container[str], counts: dict[str, int], depth: int
) -> bool:
    """Add the counts of decoded `values` to `counts` in document order (as `read_counters`
    names them); False as soon as a value would be left unread."""
    for name, value in values.items():
        kind = type(value)
        if kind is int:
            if not 0 <= value <= MAX_COUNT:
                return False
            counts[prefix + name if prefix else name] = value
        elif kind is dict:
            key = prefix + name
            if key in named or depth >= MAX_DEPTH:
                return False
            if not _plain(value, key + ".", named, counts, depth + 1):
                return False
        elif kind is float or (value is not None and prefix + name in named):
            return False  # a number that is no count, or a named counter that is none
    return True


def _prune(unread: dict[str, Any]) -> None:
    """Drop the objects of `unread` that came out empty (every value inside was read)."""
    stack = [unread]
    order: list[dict[str, Any]] = []
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(child for child in node.values() if isinstance(child, dict))
    for node in reversed(order):  # innermost first
        for name in [n for n, child in node.items() if isinstance(child, dict) and not child]:
            del node[name]
