"""Whole-response identity (scenario 29), on both backends.

A response id sent again is compared with the stored copy by a digest of everything the
response produced: its blocks with their payloads and signatures, its stop reason, usage
and error. Any difference is the typed `ResponseConflict` and writes nothing; the same
response re-serialized, or arriving streamed after non-streamed, or with a request that
differs only in transport fields (`stream`), is "already stored". A response stored under
the earlier digest version is compared by recomputing that version.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convstore.adapters.wire.providers import adapter
from convstore.domain import (
    Conversation,
    Event,
    ProviderPayload,
    Reasoning,
    ResponseEnded,
    ResponseStarted,
    ToolCallRequested,
    Usage,
)
from convstore.domain.digests import VERSION_2, digest_for, new_digest, same_response
from convstore.domain.errors import ResponseConflict
from convstore.domain.responses import ResponseRecorder
from convstore.storage import open_store

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
THINKING = EXAMPLES / "anthropic" / "thinking_tool_roundtrip"
WEB = EXAMPLES / "anthropic" / "web_search_citations"


def drafts_of(folder: Path, number: int, request: bytes | None = None) -> list[Event]:
    [response] = folder.glob(f"{number}.response.*")
    body = request if request is not None else (folder / f"{number}.request.json").read_bytes()
    return list(adapter("anthropic").decode(response.read_bytes(), body, None))


def _signed(draft: Event) -> Event:
    """A thinking block with another signature (same text)."""
    if not isinstance(draft, Reasoning) or draft.payload is None:
        return draft
    block = json.loads(draft.payload.raw)
    block["signature"] = "c2lnbmVkIGVsc2V3aGVyZQ=="
    payload = ProviderPayload.of("anthropic", draft.payload.format, json.dumps(block).encode())
    return msgspec.structs.replace(draft, payload=payload)


def _ended(**changes: Any) -> Callable[[Event], Event]:
    def change(draft: Event) -> Event:
        if isinstance(draft, ResponseEnded):
            return msgspec.structs.replace(draft, **changes)
        return draft

    return change


CHANGES: dict[str, Callable[[Event], Event]] = {
    "signature": _signed,
    "stop reason": _ended(stop_reason="max_tokens", finish_reason="length"),
    "usage": _ended(usage=Usage(input_tokens=1, output_tokens=2)),
    "error": _ended(state="failed", finish_reason="error"),
    "arguments": lambda d: (
        msgspec.structs.replace(d, arguments={**d.arguments, "unit": "kelvin"})
        if isinstance(d, ToolCallRequested)
        else d
    ),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_any_difference_is_a_conflict_and_writes_nothing(store_url: str, change: str) -> None:
    """Scenario 29: the same response id with another signature, stop reason, usage,
    error or tool arguments is a ResponseConflict, never "already stored"; nothing is written."""
    drafts = drafts_of(THINKING, 1)
    with open_store(store_url) as store:
        conversation = store.service.start("identity")
        assert not store.service.ingest(conversation, drafts).already_stored
        before = [e.hash for e in store.service.events(conversation)]
        changed = [CHANGES[change](d) for d in drafts]
        assert changed != drafts
        with pytest.raises(ResponseConflict, match="different content"):
            store.service.ingest(conversation, changed)
    with open_store(store_url) as reopened:
        assert [e.hash for e in reopened.service.events(conversation)] == before
        assert reopened.service.ingest(conversation, drafts).already_stored


def test_the_same_response_in_another_form_is_already_stored(store_url: str) -> None:
    """Scenario 29: the streamed and the non-streamed copy of one response (payloads
    serialized differently), and a request that differs only in `stream`, are one
    response; a copy ingested without its request is too."""
    request = json.loads((WEB / "1.request.json").read_bytes())
    plain = json.dumps({k: v for k, v in request.items() if k != "stream"}).encode()
    with open_store(store_url) as store:
        conversation = store.service.start("forms")
        assert not store.service.ingest(conversation, drafts_of(WEB, 1)).already_stored
        for copy in (
            drafts_of(WEB, 2),  # non-streamed
            drafts_of(WEB, 2, plain),  # its request without `stream`
            list(adapter("anthropic").decode((WEB / "1.response.sse").read_bytes(), None, None)),
        ):
            outcome = store.service.ingest(conversation, copy)
            assert (outcome.already_stored, outcome.events) == (True, 0)
        other = json.dumps({**request, "max_tokens": 7}).encode()  # another request
        with pytest.raises(ResponseConflict):
            store.service.ingest(conversation, drafts_of(WEB, 2, other))


def test_a_response_stored_under_the_first_digest_version_is_compared_by_recomputing() -> None:
    """Scenario 29: a response recorded before version 2 (its digest bare version-1 hex)
    is compared under version 1: the same copy is already stored, other arguments a
    conflict."""
    drafts = drafts_of(THINKING, 1)
    conversation = Conversation.start("v1")
    old = digest_for("")  # the version-1 digest
    for draft in drafts:
        old.add(draft)
    stored = [
        msgspec.structs.replace(d, digest=old.value()) if isinstance(d, ResponseEnded) else d
        for d in drafts
    ]
    conversation.record_all(stored)
    assert not old.value().startswith(VERSION_2)
    recorder = ResponseRecorder(conversation, lambda _: None)
    assert recorder.record(iter(drafts)).already_stored
    with pytest.raises(ResponseConflict):
        recorder.record(iter([CHANGES["arguments"](d) for d in drafts]))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_digest_sees_every_change_and_no_reordering_of_keys(data: st.DataObject) -> None:
    """Scenario 29 (property): re-serializing a payload (keys reordered, spaces) keeps the
    digest; changing any one JSON value inside it changes the digest."""
    drafts = drafts_of(THINKING, 1)
    signed = [i for i, d in enumerate(drafts) if getattr(d, "payload", None) is not None]
    index = data.draw(st.sampled_from(signed))
    payload = drafts[index].payload  # type: ignore[attr-defined]
    value = json.loads(payload.raw)
    keys = data.draw(st.permutations(sorted(value)))
    spaced = json.dumps({k: value[k] for k in keys}, indent=data.draw(st.sampled_from([None, 2])))
    key = data.draw(st.sampled_from(sorted(value)))
    changed = {**value, key: data.draw(st.text(max_size=5).filter(lambda t: t != value[key]))}

    def digest(raw: str) -> str:
        copy = ProviderPayload.of("anthropic", payload.format, raw.encode())
        digest = new_digest()
        for position, draft in enumerate(drafts):
            digest.add(msgspec.structs.replace(draft, payload=copy) if position == index else draft)
        return digest.value()

    original = digest(payload.raw.decode())
    assert same_response(original, digest(spaced))
    assert not same_response(original, digest(json.dumps(changed)))


def test_a_copy_without_its_request_matches_either_way() -> None:
    """The request part of a digest is compared only where both copies have one."""
    drafts = drafts_of(THINKING, 1)
    bare = [
        msgspec.structs.replace(d, settings=type(d.settings)())
        if isinstance(d, ResponseStarted)
        else d
        for d in drafts
    ]
    digests = []
    for copy in (drafts, bare):
        digest = new_digest()
        for draft in copy:
            digest.add(draft)
        digests.append(digest.value())
    with_request, without = digests
    assert with_request != without and without.endswith(":-")
    assert same_response(with_request, without) and same_response(without, with_request)
