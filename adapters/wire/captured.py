"""Reading a captured request, alike for every provider: its fields, the settings it
records, and how much of the history it carries a conversation already holds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec

from convstore.adapters.wire.bodies import require_utf8
from convstore.domain.errors import DecodeError
from convstore.domain.events import Event, ToolCallRequested, ToolCallResponded
from convstore.domain.vocabulary import ProviderPayload

__all__ = ["decoded_settings", "held_prefix", "native_request", "open_calls", "request_fields"]

_FIELDS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY: Final = msgspec.json.Decoder()


def request_fields(body: bytes | str, api: str) -> dict[str, msgspec.Raw]:
    """The top-level fields of a request body to `api` (e.g. "Anthropic"); DecodeError if
    it is not a JSON object, or not UTF-8 (the fields are kept raw, as a payload)."""
    if isinstance(body, bytes):
        require_utf8(body, what=f"the {api} request body")
    try:
        return _FIELDS.decode(body)
    except (msgspec.DecodeError, RecursionError) as error:
        raise DecodeError(f"the {api} request body is not a JSON object: {error}") from None


def decoded_settings(
    fields: Mapping[str, msgspec.Raw], names: Iterable[str], api: str
) -> dict[str, Any]:
    """The fields named in `names`, decoded; DecodeError when one is well-formed JSON that
    cannot be read (a number out of range)."""
    try:
        return {name: _ANY.decode(fields[name]) for name in names if name in fields}
    except msgspec.DecodeError as error:
        raise DecodeError(f"the {api} request body is malformed: {error}") from None


def native_request(
    provider: str, fields: Mapping[str, msgspec.Raw], history: str
) -> ProviderPayload:
    """The request's native settings as `ResponseStarted` records them: its fields without
    the `history` one (`messages`, `input`, `contents`)."""
    native = {name: raw for name, raw in fields.items() if name != history}
    return ProviderPayload(
        provider=provider, format="request", value=msgspec.Raw(msgspec.json.encode(native))
    )


def open_calls(events: Iterable[Event]) -> set[str]:
    """The ids of the client tool calls `events` request and do not answer."""
    calls: set[str] = set()
    for event in events:
        if isinstance(event, ToolCallRequested):
            calls.add(event.call_id)
        elif isinstance(event, ToolCallResponded):
            calls.discard(event.call_id)
    return calls


def held_prefix(
    held: Sequence[tuple[str, tuple[Any, ...]]],
    wanted: Sequence[tuple[int, str, tuple[Any, ...]]],
    count: int,
    *,
    turns: str,
    unit: str,
    mismatch: type[DecodeError],
) -> int:
    """How many of a request's `count` turns (its `turns` field: `messages`, `contents`) a
    conversation already holds.

    `held` is the (role, key) of each `unit` (block, part) of the conversation's turns,
    `wanted` the (turn index, role, key) of each of the request's. Raises `mismatch`
    unless `held` is a prefix of `wanted` that ends on a turn boundary."""
    if not held:
        return 0
    for position, (role, key) in enumerate(held):
        if position >= len(wanted):
            raise mismatch(
                f"the conversation holds more than the request's {turns}: the request is "
                "not a continuation of it"
            )
        index, wanted_role, wanted_key = wanted[position]
        if (role, key) != (wanted_role, wanted_key):
            raise mismatch(
                f"the conversation differs from the request at {turns}[{index}] "
                f"({wanted_role} {wanted_key[0]} {unit}): its recorded {turns} must be a "
                "prefix of the request's"
            )
    if len(held) == len(wanted):
        return count
    last_index, next_index = wanted[len(held) - 1][0], wanted[len(held)][0]
    if last_index == next_index:
        raise mismatch(
            f"the conversation ends inside {turns}[{next_index}] of the request: its "
            f"recorded {turns} must be a prefix of the request's"
        )
    return next_index
