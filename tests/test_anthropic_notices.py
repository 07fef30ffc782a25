"""What an Anthropic response said besides its content, as typed notices of the reading.

`stop_details`, `container` and `context_management` are kept as the response's
`message_fields` (bytes as received, never rewritten) and read by the adapter's `interpret`
when the portable reading folds them, including artifacts an earlier version stored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convstore.adapters.anthropic.context import RequestContext
from convstore.adapters.anthropic.decode import detect_and_decode
from convstore.adapters.anthropic.notices import interpret
from convstore.adapters.wire.providers import read_payload
from convstore.domain.conversation import Conversation
from convstore.domain.events import UnknownArtifact
from convstore.domain.vocabulary import Notice, ProviderPayload
from convstore.projections import portable

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "anthropic"


def reading(name: str, n: int) -> portable.PortableConversation:
    folder = EXAMPLES / name
    if not folder.is_dir():
        pytest.skip(f"no example {name}")
    [response] = folder.glob(f"{n}.response.*")
    request = folder / f"{n}.request.json"
    context = RequestContext.from_body(request.read_bytes()) if request.exists() else None
    conversation = Conversation.start()
    conversation.record_all(list(detect_and_decode(response.read_bytes(), request=context)))
    return portable.fold(list(conversation.pending), read_payload)


def notices(name: str, n: int) -> list[tuple[str, str, str, dict[str, str]]]:
    found = reading(name, n)
    items = [i for turn in found.turns for i in turn.items]
    assert not any(isinstance(i, portable.UnknownItem) for i in items)  # nothing left unread
    [response] = [i for i in items if isinstance(i, portable.ResponseItem)]
    return [(x.kind, x.code, x.message, x.details) for x in response.notices]


def last_delta(name: str) -> dict[str, Any]:
    body = (EXAMPLES / name / "1.response.sse").read_text()
    events = [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")]
    delta: dict[str, Any] = next(e for e in reversed(events) if e["type"] == "message_delta")
    return delta


def test_a_refusal_gives_its_category_and_explanation_streamed_and_not() -> None:
    stop = last_delta("refusal")["delta"]["stop_details"]
    assert notices("refusal", 1) == [("refusal", stop["category"], stop["explanation"], {})]
    body = json.loads((EXAMPLES / "refusal" / "2.response.json").read_bytes())
    assert notices("refusal", 2) == [
        ("refusal", "", "", {"recommended_model": body["stop_details"]["recommended_model"]})
    ]
    # The fallback credit token is an opaque value: kept, never read out.
    assert body["stop_details"]["fallback_credit_token"] not in repr(reading("refusal", 2))


def test_container_and_context_management_streamed_and_not() -> None:
    delta = last_delta("text_editor_code_execution")
    container = delta["delta"]["container"]
    [edit] = delta["context_management"]["applied_edits"]  # beside the delta, not in it
    assert notices("text_editor_code_execution", 1) == [
        ("container", container["id"], "", {"expires_at": container["expires_at"]}),
        (
            "context_management",
            edit["type"],
            "",
            {"cleared_tool_uses": "3", "cleared_input_tokens": "5120"},
        ),
    ]
    body = json.loads((EXAMPLES / "text_editor_code_execution" / "2.response.json").read_bytes())
    [edit] = body["context_management"]["applied_edits"]
    assert notices("text_editor_code_execution", 2) == [
        ("container", body["container"]["id"], "", {"expires_at": body["container"]["expires_at"]}),
        (
            "context_management",
            edit["type"],
            "",
            {k: str(v) for k, v in edit.items() if k != "type"},
        ),
    ]
    assert notices("dynamic_filtering", 1) == notices("dynamic_filtering", 2)


def test_the_bytes_stay_as_received_for_replay() -> None:
    folder = EXAMPLES / "dynamic_filtering"
    context = RequestContext.from_body((folder / "2.request.json").read_bytes())
    body = (folder / "2.response.json").read_bytes()
    [kept] = [e for e in detect_and_decode(body, request=context) if isinstance(e, UnknownArtifact)]
    assert kept.payload.format == "message_fields"
    assert json.loads(kept.payload.raw)["container"] == json.loads(body)["container"]


def message_fields(value: bytes, fmt: str = "message_fields") -> ProviderPayload:
    return ProviderPayload(provider="anthropic", format=fmt, value=msgspec.Raw(value))


def test_an_artifact_stored_by_an_earlier_version_is_read_too() -> None:
    """A container stored before `interpret` existed (and the id-only form) reads as a notice."""
    stored = b'{"container":{"id":"container_011","expires_at":"2026-01-01T00:00:00Z"}}'
    reading = interpret(message_fields(stored))
    assert reading is not None
    assert reading.notices == (
        Notice(
            kind="container", code="container_011", details={"expires_at": "2026-01-01T00:00:00Z"}
        ),
    )
    assert interpret(message_fields(b'{"container":"container_012"}')) is not None


@pytest.mark.parametrize(
    "payload",
    [
        message_fields(b'{"diagnostics":{"x":1}}'),  # no notice kind for it: stays unknown
        message_fields(b'{"container":{"id":"c"}}', fmt="stream_event"),
        ProviderPayload(provider="openai", format="message_fields", value=msgspec.Raw(b"{}")),
        message_fields(b"[1, 2]"),
        message_fields(b'{"stop_details": 7, "container": [], "context_management": "x"}'),
    ],
)
def test_what_types_no_notice_reads_as_none(payload: ProviderPayload) -> None:
    assert interpret(payload) is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
FIELD = st.sampled_from(["stop_details", "container", "context_management", "other"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(FIELD, JSON, max_size=4), st.text(min_size=9, max_size=12))
def test_any_fields_read_without_raising_and_tokens_stay_unread(
    fields: dict[str, Any], token: str
) -> None:
    """(The drawn JSON texts are shorter than any token, so none can pass for one.)"""
    if isinstance(fields.get("stop_details"), dict):
        fields["stop_details"]["fallback_credit_token"] = "fct-" + token
    reading = interpret(message_fields(msgspec.json.encode(fields)))
    if reading is None:
        return
    assert reading.notices
    for notice in reading.notices:
        assert "fct-" + token not in (notice.code, notice.message, *notice.details.values())


@pytest.mark.parametrize(("name", "n"), [("web_search_citations", 1), ("dynamic_filtering", 2)])
def test_a_web_search_lists_every_page_it_consulted(name: str, n: int) -> None:
    """Streamed and not; a search called from code execution too."""
    folder = EXAMPLES / name
    body = (folder / "2.response.json").read_bytes()
    results = [b for b in json.loads(body)["content"] if b["type"] == "web_search_tool_result"]
    found = reading(name, n)
    searches = [
        i
        for turn in found.turns
        for i in turn.items
        if isinstance(i, portable.ActivityItem) and i.name == "web_search"
    ]
    assert [(i.activity_id, [(s.kind, s.url, s.title) for s in i.sources]) for i in searches] == [
        (b["tool_use_id"], [("web", r["url"], r["title"]) for r in b["content"]]) for b in results
    ]


def test_the_stop_sequence_that_ended_the_answer_is_a_notice() -> None:
    reading = interpret(message_fields(b'{"stop_sequence":"###","container":"c_1"}'))
    assert reading is not None
    assert reading.notices == (
        Notice(kind="stop_sequence", code="###"),
        Notice(kind="container", code="c_1"),
    )
    assert interpret(message_fields(b'{"stop_sequence":null}')) is None
