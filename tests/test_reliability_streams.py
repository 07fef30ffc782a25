"""Scenario 12 (RELIABILITY.md): unknown SSE events and pings in a stream.

Backend-independent: this is decoding, before anything reaches a store (scenario 11's
tests/test_reliability_ingest.py shows artifacts keep their bytes through both backends).

Into the streamed example that has a non-streamed twin (the same response in both forms,
`web_search_citations` 1 and 2), pings and events of a type no decoder knows are inserted
at random event boundaries. The pings leave no trace; each unknown event is kept as a
`stream_event` UnknownArtifact holding its bytes; and with those artifacts set aside the
drafts equal the non-streamed form's. Gemini is not here: its streams have neither pings
nor event types (each chunk is a whole GenerateContentResponse, kept in order by
tests/test_google_decode.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convstore.adapters.wire.providers import adapter
from convstore.domain import Event, UnknownArtifact
from tests import test_anthropic_decode, test_openai_decode

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

COMPARABLE: dict[str, Callable[[list[Event]], list[Any]]] = {
    "anthropic": test_anthropic_decode.comparable,
    "openai": test_openai_decode.comparable,
}
PINGS = {
    "anthropic": b'event: ping\ndata: {"type": "ping"}\n\n',
    "openai": b": keep-alive\n\n",  # OpenAI keeps a stream open with SSE comments
}


def _unknown(provider: str, n: int) -> bytes:
    """The data of an event type nobody knows (odd bytes: 2.50, an escape, no spaces)."""
    if provider == "anthropic":
        return b'{"type":"hologram_flash","n":%d,"k":[2.50,"\\u00e9"]}' % n
    return b'{"type":"response.hologram.flash","sequence_number":%d,"k":[2.50,"\\u00e9"]}' % (
        10_000 + n
    )


def _decode(provider: str, folder: str, number: int, body: bytes | None = None) -> list[Event]:
    base = EXAMPLES / provider / folder
    [response] = base.glob(f"{number}.response.*")
    request = (base / f"{number}.request.json").read_bytes()
    return list(adapter(provider).decode(body or response.read_bytes(), request, None))


@settings(max_examples=30, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("provider", sorted(COMPARABLE))
def test_pings_vanish_unknown_events_are_kept_and_the_rest_equals_the_whole_response(
    provider: str, data: st.DataObject
) -> None:
    """Scenario 12: pings ignored; unknown events kept as UnknownArtifact, bytes intact;
    apart from them, the assembled response equals the non-streamed one."""
    body = (EXAMPLES / provider / "web_search_citations" / "1.response.sse").read_bytes()
    boundaries = [m.end() for m in re.finditer(rb"\n\n", body)][:-1]
    chosen = data.draw(st.lists(st.sampled_from(boundaries), min_size=1, max_size=12))
    inserted: list[bytes] = []
    pieces, last = [], 0
    for n, at in enumerate(sorted(chosen)):
        unknown = _unknown(provider, n)
        pieces += [body[last:at], PINGS[provider], b"event: x\ndata: " + unknown + b"\n\n"]
        inserted.append(unknown)
        last = at
    pieces.append(body[last:])

    streamed = _decode(provider, "web_search_citations", 1, b"".join(pieces))
    kept = [
        e for e in streamed if isinstance(e, UnknownArtifact) and e.payload.format == "stream_event"
    ]
    assert [k.payload.raw for k in kept] == inserted  # in order, byte for byte
    assert not any(b"ping" in k.payload.raw or b"keep-alive" in k.payload.raw for k in kept)
    rest = [e for e in streamed if not any(e is k for k in kept)]
    whole = _decode(provider, "web_search_citations", 2)
    assert COMPARABLE[provider](rest) == COMPARABLE[provider](whole)
