"""Ingesting provider responses into a real store: scenarios 3, 11, 14, 21 and 22.

Responses go through each provider's decoder and `jobs.ingest` (or the service's
`ingest`) into SQLite and PostgreSQL, and are judged by what the store holds afterwards,
read back through a freshly opened store:

- 3: re-ingesting a response adds nothing and reports `already_stored`; the same id
  with different content is a ResponseConflict and writes nothing;
- 11: an unknown block is stored as an UnknownArtifact byte for byte, replayed to its
  own provider byte for byte, and shown as a placeholder;
- 14: an error event mid-stream ends the response `failed`, what arrived kept;
- 21: a very long stream is recorded with a memory peak that does not grow with it;
- 22: a compressed capture file expanding past its cap stops there, memory bounded.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from convstore.adapters import cli
from convstore.adapters.recording import jobs
from convstore.adapters.wire.providers import adapter
from convstore.domain import (
    AssistantText,
    ConversationId,
    ResponseEnded,
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.errors import DecodeError, ResponseConflict
from convstore.domain.responses import DEFAULT_FLUSH_BYTES
from convstore.storage import Store, open_store
from tests.replay_server import gzip_bomb

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _versions(url: str, conversation: ConversationId) -> list[int]:
    """The conversation's stored versions, read through a newly opened store."""
    with open_store(url) as fresh:
        return [e.originator_version for e in fresh.service.events(conversation)]


# --- scenario 3: idempotent retry ------------------------------------------------------------

EXCHANGES = {
    "anthropic": "web_search_citations/1",
    "openai": "web_search_citations/1",
    "google": "grounding_search_stream/1",
}


@pytest.mark.parametrize("provider", sorted(EXCHANGES))
def test_reingesting_a_response_adds_nothing_and_a_changed_one_conflicts(
    store_url: str, provider: str
) -> None:
    """Scenario 3: the same response id again adds nothing and says `already_stored`, also
    through a store opened afterwards (no cached state); with other content it is a typed
    ResponseConflict and nothing is written."""
    folder, number = EXCHANGES[provider].split("/")
    [response] = (EXAMPLES / provider / folder).glob(f"{number}.response.*")
    request = (EXAMPLES / provider / folder / f"{number}.request.json").read_bytes()
    with open_store(store_url) as store:
        first = jobs.ingest(store.service, provider, [response], request=request)
        assert first.exit_code == 0 and not first.responses[0].already_stored
        conversation = first.conversation_id
        assert conversation is not None
        before = _versions(store_url, conversation)
        again = jobs.ingest(
            store.service, provider, [response], request=request, conversation_id=conversation
        )
        assert again.exit_code == 0
        assert [(r.events, r.already_stored) for r in again.responses] == [(0, True)]
        assert _versions(store_url, conversation) == before

    with open_store(store_url) as reopened:
        retried = jobs.ingest(reopened.service, provider, [response], conversation_id=conversation)
        assert [(r.events, r.already_stored) for r in retried.responses] == [(0, True)]
        drafts = list(adapter(provider).decode(response.read_bytes(), request, None))
        changed = [
            msgspec.structs.replace(d, text=d.text + " (edited)")
            if isinstance(d, AssistantText)
            else d
            for d in drafts
        ]
        with pytest.raises(ResponseConflict, match="different content"):
            reopened.service.ingest(conversation, changed)
    assert _versions(store_url, conversation) == before


# --- scenario 11: unknown blocks ---------------------------------------------------------------

UNKNOWN = {
    "anthropic": b'{"type":"hologram_block","data":{"k":[1,2.50,"\\u00e9"],"z":null}}',
    "openai": b'{"type":"hologram_item","id":"hi_1","data":{"k":[1,2.50,"\\u00e9"],"z":null}}',
    "google": b'{"hologramPart":{"k":[1,2.50,"\\u00e9"],"z":null}}',
}
"""An unknown block of each provider: odd spacing-free bytes (2.50, an escape) to keep."""


def _body_with_unknown(provider: str) -> bytes:
    """A non-streamed answer: a text, the unknown block, another text."""
    unknown = UNKNOWN[provider].decode()
    if provider == "anthropic":
        return (
            '{"id":"msg_unknown","type":"message","role":"assistant",'
            '"model":"claude-sonnet-4-5","content":[{"type":"text","text":"Before."},'
            f'{unknown},{{"type":"text","text":"After."}}],"stop_reason":"end_turn",'
            '"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":4}}'
        ).encode()
    if provider == "openai":
        message = (
            '{{"type":"message","id":"{id}","status":"completed","role":"assistant",'
            '"content":[{{"type":"output_text","text":"{text}","annotations":[]}}]}}'
        )
        return (
            '{"id":"resp_unknown","object":"response","created_at":1700000000,'
            '"status":"completed","model":"gpt-5.1","output":['
            f"{message.format(id='msg_a', text='Before.')},{unknown},"
            f"{message.format(id='msg_b', text='After.')}],"
            '"usage":{"input_tokens":3,"output_tokens":4,"total_tokens":7}}'
        ).encode()
    return (
        '{"candidates":[{"content":{"role":"model","parts":[{"text":"Before."},'
        f'{unknown},{{"text":"After."}}]}},"finishReason":"STOP","index":0}}],'
        '"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":4,"totalTokenCount":7},'
        '"modelVersion":"gemini-2.5-flash","responseId":"r_unknown"}'
    ).encode()


@pytest.mark.parametrize("provider", sorted(UNKNOWN))
def test_an_unknown_block_is_kept_replayed_and_shown_as_a_placeholder(
    store_url: str, provider: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Scenario 11: an unknown block is stored as an UnknownArtifact with its bytes intact,
    sent back byte for byte when replaying to its own provider, and shown as a placeholder."""
    answer = tmp_path / "1.response.json"
    answer.write_bytes(_body_with_unknown(provider))
    with open_store(store_url) as store:
        conversation = store.service.start("unknown blocks")
        store.service.add_user_input(conversation, [UserMessage(blocks=("Show me one.",))])
        report = jobs.ingest(store.service, provider, [answer], conversation_id=conversation)
        assert report.exit_code == 0, report.error
    with open_store(store_url) as reopened:
        events = list(reopened.service.events(conversation))
    [artifact] = [
        e
        for e in events
        if isinstance(e, UnknownArtifact) and e.payload.format != "response_fields"
    ]
    assert artifact.payload.provider == provider
    assert artifact.payload.raw == UNKNOWN[provider]

    code = cli.main(["--db", store_url, "replay", str(conversation), "--to", provider])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert UNKNOWN[provider].decode() in out  # embedded byte for byte
    json.loads(out)
    code = cli.main(["--db", store_url, "show", str(conversation)])
    out, err = capsys.readouterr()
    assert code == 0, err
    placeholder = f"[unknown {provider} artifact: {artifact.payload.format}, "
    assert f"{placeholder}{len(UNKNOWN[provider])} bytes]" in out
    assert "hologram" not in out and "2.50" not in out  # its content is not shown


# --- scenario 14: an error mid-stream ---------------------------------------------------------

MID_STREAM_ERRORS = {"anthropic": "errors/1", "openai": "errors/1", "google": "errors/3"}


@pytest.mark.parametrize("provider", sorted(MID_STREAM_ERRORS))
def test_an_error_mid_stream_fails_the_response_keeping_what_arrived(
    store_url: str, provider: str
) -> None:
    """Scenario 14: the response is stored `failed` with the error; the text that arrived
    before the error is committed (read back through a newly opened store)."""
    folder, number = MID_STREAM_ERRORS[provider].split("/")
    [response] = (EXAMPLES / provider / folder).glob(f"{number}.response.sse")
    decoded = list(adapter(provider).decode(response.read_bytes(), None, None))
    arrived = "".join(d.text for d in decoded if isinstance(d, AssistantText))
    assert arrived, "the example has text before its error"
    with open_store(store_url) as store:
        report = jobs.ingest(store.service, provider, [response])
        assert report.exit_code == 3
        assert [r.ended for r in report.responses] == ["failed"]
        conversation = report.conversation_id
        assert conversation is not None
    with open_store(store_url) as reopened:
        events = list(reopened.service.events(conversation))
    assert "".join(e.text for e in events if isinstance(e, AssistantText)) == arrived
    [end] = [e for e in events if isinstance(e, ResponseEnded)]
    assert end.state == "failed" and end.error is not None


# --- scenario 21: a very long stream keeps memory flat -------------------------------------------

PIECE = "All work and no play makes a long answer. " * 50  # about 2 KB


def _long_stream(blocks: int) -> Iterator[bytes]:
    """An Anthropic stream of `blocks` text blocks of 4 pieces each, made lazily."""

    def sse(event: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(event).encode() + b"\n\n"

    yield sse(
        {
            "type": "message_start",
            "message": {
                "id": f"msg_long_{blocks}",
                "type": "message",
                "model": "claude-sonnet-4-5",
                "content": [],
                "usage": {"input_tokens": 1},
            },
        }
    )
    for index in range(blocks):
        start = {"type": "text", "text": ""}
        yield sse({"type": "content_block_start", "index": index, "content_block": start})
        for _ in range(4):
            piece = {"type": "text_delta", "text": PIECE}
            yield sse({"type": "content_block_delta", "index": index, "delta": piece})
        yield sse({"type": "content_block_stop", "index": index})
    yield sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"x": 1}})
    yield sse({"type": "message_stop"})


def _ingest_peak(store: Store, blocks: int) -> int:
    """The traced memory peak while a stream of `blocks` blocks is decoded and recorded."""
    conversation = store.service.start(f"long {blocks}")
    tracemalloc.start()
    try:
        outcome = store.service.ingest(
            conversation, adapter("anthropic").decode(_long_stream(blocks), None, None)
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (outcome.ended, outcome.events) == ("completed", blocks + 4)  # turn and response
    return peak


def test_a_very_long_stream_is_recorded_with_flat_memory(store: Store) -> None:
    """Scenario 21: recording a 32 MB stream peaks no higher than recording an 8 MB one
    (the recorder commits every DEFAULT_FLUSH_BYTES; nothing of a committed block is held)."""
    short = _ingest_peak(store, 1000)  # about 8 MB of text: two commits
    long = _ingest_peak(store, 4000)  # about 32 MB of text: eight commits
    assert long < short * 1.25 + 1024 * 1024, f"peak {long} bytes for 4x the stream ({short})"
    # The bound is the recorder's commit buffer: its events, their encodings and the
    # driver's copy of the batch (PostgreSQL's array parameters make it the larger).
    assert long < 6 * DEFAULT_FLUSH_BYTES


# --- scenario 22: a compressed capture file past its cap ---------------------------------------


def test_a_compressed_capture_past_its_cap_stops_there_with_bounded_memory(
    tmp_path: Path,
) -> None:
    """Scenario 22, the capture-file half (the gzip-encoded HTTP body half: test_http.py):
    backend-independent, no store is involved until a file is read. A 1 GiB gzip bomb
    (about 1 MB on disk) read with a 64 MiB cap raises DecodeError before it yields
    anything (the whole stream is checked first: scenario 34); the traced peak stays at
    a few chunks."""
    bomb = tmp_path / "1.response.sse.gz"
    with bomb.open("wb") as file:
        for piece in gzip_bomb(1024**3):
            file.write(piece)
    assert bomb.stat().st_size < 4 * 1024 * 1024
    cap = 64 * 1024 * 1024
    produced = 0
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError, match="expands past"):
            for chunk in jobs.read_capture(bomb, max_bytes=cap):
                produced += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert produced == 0
    assert peak < 4 * 1024 * 1024, f"peak traced memory {peak} bytes"


def test_a_compressed_capture_under_its_cap_is_read_whole(tmp_path: Path) -> None:
    """Scenario 22 (the other side of the cap): a gzip capture within it reads whole."""
    import gzip

    body = (EXAMPLES / "anthropic" / "web_search_citations" / "1.response.sse").read_bytes()
    packed = tmp_path / "1.response.sse.gz"
    packed.write_bytes(gzip.compress(body))
    assert b"".join(jobs.read_capture(packed, max_bytes=len(body))) == body
