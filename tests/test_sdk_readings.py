"""convstore's reading of every capture agrees with the provider's official SDK reading the
same bytes, served from 127.0.0.1 (`tests/sdk_oracle.py`, `tests/sdk_readers.py`).

One test per model exchange of the project's examples and of `../shared/wire` (skipped,
saying why, when that folder is absent); a failure lists every field where the two
readings differ, ours against the SDK's.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convstore.adapters.wire.names import PROVIDERS
from tests.replay_server import Capture
from tests.sdk_oracle import Cite, Reading, cases, differences, our_reading
from tests.sdk_readers import READERS, as_sse, merged_reading, with_event_names


@pytest.mark.parametrize(("provider", "capture"), cases())
def test_convstore_reads_a_capture_as_the_sdk_does(provider: str, capture: Capture) -> None:
    sdk = READERS[provider](capture)
    ours = our_reading(provider, capture)
    found = differences(ours, sdk)
    assert not found, f"{capture}: convstore ≠ the {provider} SDK:\n" + "\n".join(found)


def test_every_provider_has_an_sdk_reader_and_captures() -> None:
    assert set(READERS) == set(PROVIDERS)
    named = {p for p, c in (param.values for param in cases()) if c is not None}
    assert named == set(PROVIDERS)


def test_a_difference_names_the_field_and_both_values() -> None:
    ours = Reading(texts=["a", "b"], stop_reason="end_turn", usage={"input_tokens": 3})
    sdk = Reading(texts=["a", "c"], stop_reason="end_turn", usage={"input_tokens": 4})
    assert differences(ours, sdk) == [
        "texts[1]: ours 'b' ≠ SDK 'c'",
        "usage.input_tokens: ours 3 ≠ SDK 4",
    ]
    assert differences(ours, ours) == []


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@given(pieces=st.lists(_TEXT, min_size=1, max_size=6), cut=st.integers(0, 5))
def test_gemini_chunks_served_as_sse_merge_to_the_whole_text_and_its_offsets(
    pieces: list[str], cut: int
) -> None:
    """Gemini's JSON-array stream turned into SSE and parsed by the SDK chunk by chunk
    merges back to the text joined; a support's UTF-8 byte offsets point at its text."""
    from google.genai import types

    whole = "".join(pieces)
    cited = whole[: min(cut, len(whole))]
    chunks = [
        {"candidates": [{"content": {"role": "model", "parts": [{"text": piece}]}, "index": 0}]}
        for piece in pieces
    ]
    chunks[-1]["candidates"][0]["groundingMetadata"] = {
        "groundingChunks": [{"web": {"uri": "https://example.com/", "title": "t"}}],
        "groundingSupports": [
            {"segment": {"endIndex": len(cited.encode())}, "groundingChunkIndices": [0]}
        ],
    }
    body = json.dumps(chunks, ensure_ascii=False, indent=1).encode()
    parsed = [
        types.GenerateContentResponse.model_validate_json(
            b"\n".join(line.removeprefix(b"data: ") for line in event.splitlines())
        )
        for event in as_sse(body).split(b"\n\n")
        if event
    ]
    reading = merged_reading(parsed)
    assert reading.texts == ([whole] if whole else [])
    assert reading.citations == [Cite(0, "https://example.com/", "t", cited)]


def test_an_anthropic_stream_without_event_lines_gets_them_from_its_types() -> None:
    body = b'data: {"type":"message_start"}\n\nevent: ping\ndata: {"type":"ping"}\n\n'
    assert with_event_names(body) == (
        b'event: message_start\ndata: {"type":"message_start"}\n\n'
        b'event: ping\ndata: {"type":"ping"}\n\n'
    )
