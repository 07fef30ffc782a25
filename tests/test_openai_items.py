"""OpenAI item and response kinds beyond text, reasoning and function calls: what the
decoder makes of them, what `interpret` reads out of their payloads, and their round trip
back to OpenAI (decode → store → encode) on the project's example captures.

Captures (examples/openai/, written from the documented formats): `notices` (a failed
response, an incomplete one with moderation), `mcp_approval`, `shell_apply_patch`,
`tool_search`, `compaction`; `web_search_citations` for `action.sources`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convstore.adapters.openai.context import RequestContext
from convstore.adapters.openai.decode import decode_message, decode_stream, detect_and_decode
from convstore.adapters.openai.history import history
from convstore.adapters.openai.inputs import build_input
from convstore.adapters.openai.notices import STREAM_TYPED, interpret
from convstore.adapters.wire.providers import adapter, read_payload
from convstore.domain.conversation import Conversation
from convstore.domain.events import (
    Event,
    HostedActivity,
    Reasoning,
    ResponseEnded,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    TurnStarted,
    UnknownArtifact,
)
from convstore.domain.vocabulary import (
    CallId,
    Notice,
    PayloadReading,
    ProviderPayload,
    ResponseId,
    Source,
    TurnId,
)
from convstore.projections import portable

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "openai"


def files(name: str, n: int) -> tuple[bytes | None, Path, int]:
    folder = EXAMPLES / name
    request = folder / f"{n}.request.json"
    [response] = folder.glob(f"{n}.response.*")
    meta = json.loads((folder / f"{n}.meta.json").read_text())
    return (request.read_bytes() if request.exists() else None), response, meta["status"]


def decode(name: str, n: int) -> list[Event]:
    request, response, status = files(name, n)
    context = RequestContext.from_body(request) if request is not None else None
    return list(detect_and_decode(response.read_bytes(), request=context, status=status))


def only(events: list[Event], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def body_of(name: str, n: int) -> dict[str, Any]:
    """The final response object of a capture (the JSON body, or `response.completed`'s)."""
    _, response, _ = files(name, n)
    if response.suffix == ".json":
        parsed: dict[str, Any] = json.loads(response.read_bytes())
        return parsed
    for line in response.read_text().splitlines():
        if line.startswith("data:"):
            event = json.loads(line[5:])
            if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
                final: dict[str, Any] = event["response"]
                return final
    raise AssertionError("no final response")


def conversation(*exchanges: tuple[str, int]) -> Conversation:
    """One conversation through these exchanges: each request's new items (from its
    history), then its response."""
    conv = Conversation.start("test")
    conv.record(TurnStarted(turn_id=TurnId("turn-1")))
    for name, n in exchanges:
        request, _, _ = files(name, n)
        assert request is not None
        for message in history(list(conv.pending), request):
            conv.record_all(message.drafts)
        conv.record_all(decode(name, n))
    return conv


def input_items(name: str, n: int) -> list[bytes]:
    """The request's `input` items, each as the bytes a client sent."""
    request, _, _ = files(name, n)
    assert request is not None
    value = msgspec.json.decode(request, type=dict[str, msgspec.Raw])["input"]
    return [bytes(item) for item in msgspec.json.decode(value, type=list[msgspec.Raw])]


def built(conv: Conversation, model: str) -> list[Any]:
    """The input items the encoder rebuilds for the conversation, as JSON values."""
    items = build_input(list(conv.pending), model=model, store=True).items
    return [json.loads(msgspec.json.encode(item)) for item in items]


def reading(*responses: list[Event]) -> portable.PortableConversation:
    conv = Conversation.start("test")
    conv.record(TurnStarted(turn_id=TurnId("turn-1")))
    for drafts in responses:
        conv.record_all(drafts)
        for call in conv.open_calls():
            conv.record(ToolCallResponded(call_id=CallId(call), content="ok"))
    return portable.fold(conv.pending, read_payload)


def response_items(conv: portable.PortableConversation) -> list[portable.ResponseItem]:
    return [
        item
        for turn in conv.turns
        for item in turn.items
        if isinstance(item, portable.ResponseItem)
    ]


def all_items(conv: portable.PortableConversation) -> list[Any]:
    return [item for turn in conv.turns for item in turn.items]


# --- item 7: notices, sources, redaction ---------------------------------------------------------


def test_the_adapter_registers_interpret() -> None:
    assert adapter("openai").interpret is interpret


def test_a_failed_response_has_its_error_as_ended_error_and_as_a_notice() -> None:
    events = decode("notices", 1)
    end = events[-1]
    error = body_of("notices", 1)["error"]
    assert isinstance(end, ResponseEnded) and end.state == "failed"
    assert end.error is not None
    assert (end.error.type, end.error.message) == (error["type"], error["message"])
    [fields] = [e for e in only(events, UnknownArtifact) if e.payload.format == "response_fields"]
    reading_ = interpret(fields.payload)
    assert reading_ == PayloadReading(
        notices=(
            Notice(
                kind="error",
                code=error["code"],
                message=error["message"],
                details={"type": error["type"], "param": error["param"]},
            ),
        )
    )
    [response] = response_items(reading(events))
    assert [(n.kind, n.code, n.message) for n in response.notices] == [
        ("error", error["code"], error["message"])
    ]
    assert not [i for i in all_items(reading(events)) if isinstance(i, portable.UnknownItem)]


def test_an_incomplete_response_names_its_reason_and_moderation_as_notices() -> None:
    events = decode("notices", 2)
    body = body_of("notices", 2)
    end = events[-1]
    assert isinstance(end, ResponseEnded)
    assert (end.finish_reason, end.stop_reason) == ("content_filter", "content_filter")
    [response] = response_items(reading(events))
    notices = {(n.kind, n.code): n for n in response.notices}
    assert set(notices) == {
        ("incomplete", body["incomplete_details"]["reason"]),
        ("screening", "moderation.input"),
        ("screening", "moderation.output"),
    }
    flagged = notices["screening", "moderation.output"].details
    assert flagged["flagged"] == "true" and flagged["categories"] == "violence"
    assert notices["screening", "moderation.input"].details["flagged"] == "false"


def test_reasoning_with_neither_text_nor_encrypted_content_is_not_redacted() -> None:
    [plain] = only(decode("notices", 2), Reasoning)
    assert (plain.text, plain.redacted) == ("", False)
    # Encrypted content and no summary: the reasoning was withheld.
    [withheld] = only(decode("reasoning_function_roundtrip", 2), Reasoning)
    assert withheld.payload is not None
    assert json.loads(withheld.payload.raw)["encrypted_content"]
    assert (withheld.text, withheld.redacted) == ("", True)


def test_web_search_sources_are_the_activitys_sources() -> None:
    events = decode("web_search_citations", 1)
    expected = {}
    for item in body_of("web_search_citations", 1)["output"]:
        if item["type"] == "web_search_call":
            urls = [s["url"] for s in (item["action"].get("sources") or [])]
            expected[item["id"]] = list(dict.fromkeys(urls))
    assert any(expected.values())
    for activity in only(events, HostedActivity):
        if activity.payload is not None:
            found = interpret(activity.payload)
            assert found is not None
            assert [s.url for s in found.sources] == expected[activity.activity_id]
            assert all(s.kind == "web" for s in found.sources)
    folded = [i for i in all_items(reading(events)) if isinstance(i, portable.ActivityItem)]
    assert {a.activity_id: [s.url for s in a.sources] for a in folded} == expected


def stored_unknown(response_id: str, fmt: str, value: bytes) -> UnknownArtifact:
    """An artifact as an earlier version stored it."""
    payload = ProviderPayload(provider="openai", format=fmt, value=msgspec.Raw(value))
    return UnknownArtifact(payload=payload, response_id=ResponseId(response_id))


def test_artifacts_stored_as_unknown_by_earlier_versions_are_read_not_rewritten() -> None:
    rid = "resp_earlier"
    old_fields = b'{"created_at":1775990000,"store":true}'  # no error, no incomplete_details
    delta = (
        b'{"type":"response.shell_call_command.delta","output_index":0,"command_index":0,'
        b'"delta":"ls"}'
    )
    compaction = b'{"id":"cmp_1","type":"compaction","encrypted_content":"gAAAAAB"}'
    hologram = b'{"id":"holo_1","type":"hologram_call"}'
    events: list[Event] = [
        ResponseStarted(response_id=ResponseId(rid), provider="openai", model="gpt-5.1"),
        stored_unknown(rid, "stream_event", delta),
        stored_unknown(rid, "output_item", compaction),
        stored_unknown(rid, "output_item", hologram),
        stored_unknown(rid, "response_fields", old_fields),
        ResponseEnded(response_id=ResponseId(rid), state="completed", finish_reason="stop"),
    ]
    assert delta.split(b'"type":"')[1].split(b'"')[0].decode() in STREAM_TYPED
    folded = reading(events)
    [response] = response_items(folded)
    assert [(n.kind, n.code) for n in response.notices] == [("context_management", "compaction")]
    unknown = [i for i in all_items(folded) if isinstance(i, portable.UnknownItem)]
    assert len(unknown) == 1  # the item type nobody knows stays unknown
    assert interpret(events[4].payload) == PayloadReading()  # type: ignore[attr-defined]


@given(st.binary(max_size=64), st.sampled_from(["response_fields", "output_item", "stream_event"]))
@settings(max_examples=200, deadline=None)
def test_interpret_never_raises(value: bytes, fmt: str) -> None:
    payload = ProviderPayload(provider="openai", format=fmt, value=msgspec.Raw(value))
    result = interpret(payload)
    assert result is None or isinstance(result, PayloadReading)


@given(
    st.dictionaries(
        st.sampled_from(["error", "incomplete_details", "moderation", "type", "action"]),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=5),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=8), inner, max_size=3)
            ),
            max_leaves=8,
        ),
    ),
    st.sampled_from(["response_fields", "output_item"]),
)
@settings(max_examples=200, deadline=None)
def test_interpret_reads_any_shape_into_typed_values(value: dict[str, Any], fmt: str) -> None:
    payload = ProviderPayload(
        provider="openai", format=fmt, value=msgspec.Raw(json.dumps(value).encode())
    )
    result = interpret(payload)
    if result is not None:
        for notice in result.notices:
            assert isinstance(notice.code, str) and isinstance(notice.message, str)
            assert all(isinstance(v, str) for v in notice.details.values())
        assert all(isinstance(s, Source) and s.url for s in result.sources)


# --- item 8: MCP approval, failed MCP calls ------------------------------------------------------


def test_an_mcp_approval_request_is_a_pending_activity_closed_by_the_approved_call() -> None:
    first, second = decode("mcp_approval", 1), decode("mcp_approval", 2)
    body1, body2 = body_of("mcp_approval", 1), body_of("mcp_approval", 2)
    request = next(i for i in body1["output"] if i["type"] == "mcp_approval_request")
    call = next(i for i in body2["output"] if i["type"] == "mcp_call")
    assert call["approval_request_id"] == request["id"]
    pending = [a for a in only(first, HostedActivity) if a.activity_id == request["id"]]
    assert [(a.state, a.name, a.summary) for a in pending] == [
        ("started", "mcp:wiki/lookup", "awaiting approval")
    ]
    assert json.loads(pending[0].payload.raw) == request
    assert pending[0].input == json.loads(request["arguments"])
    [closed] = only(second, HostedActivity)
    assert (closed.activity_id, closed.state, closed.name) == (
        request["id"],
        "completed",
        "mcp:wiki/lookup",
    )
    assert json.loads(closed.payload.raw) == call
    assert not only(second, UnknownArtifact)[:-1]  # only the response fields are kept aside
    conv = conversation(("mcp_approval", 1), ("mcp_approval", 2))
    assert conv.state.activities[request["id"]].state == "completed"


def test_the_mcp_approval_round_trip_replays_every_item_in_place() -> None:
    """The list, the request, the client's approval and the approved call, in order; the
    provider's items byte for byte as received."""
    conv = conversation(("mcp_approval", 1), ("mcp_approval", 2))
    body2 = body_of("mcp_approval", 2)
    items = built(conv, body2["model"])
    sent = [json.loads(i) for i in input_items("mcp_approval", 2)]
    assert items[1:4] == sent[1:4]  # mcp_list_tools, mcp_approval_request, mcp_approval_response
    assert items[4] == body2["output"][0]  # the approved mcp_call, as received
    raw = build_input(list(conv.pending), model=body2["model"], store=True).items
    [pending] = [
        e for e in conv.pending if isinstance(e, HostedActivity) and e.activity_id == sent[2]["id"]
    ][:1]
    assert pending.payload is not None and msgspec.Raw(pending.payload.raw) in raw


def test_a_failed_mcp_call_is_a_failed_activity_with_its_error() -> None:
    events = decode("mcp_approval", 3)
    item = next(i for i in body_of("mcp_approval", 3)["output"] if i["type"] == "mcp_call")
    states = [(a.activity_id, a.state) for a in only(events, HostedActivity)]
    assert (item["id"], "failed") in states
    [failed] = [a for a in only(events, HostedActivity) if a.state == "failed"]
    assert failed.summary == item["error"]["message"]


# --- item 8: client shell, apply_patch, local shell; hosted shell --------------------------------


def test_client_shell_and_apply_patch_calls_from_their_stream_events() -> None:
    events = decode("shell_apply_patch", 1)
    body = body_of("shell_apply_patch", 1)
    calls = only(events, ToolCallRequested)
    assert [(c.name, c.call_id) for c in calls] == [
        ("shell", body["output"][0]["call_id"]),
        ("apply_patch", body["output"][1]["call_id"]),
    ]
    assert calls[0].arguments == {"action": body["output"][0]["action"]}
    assert calls[1].arguments == {"operation": body["output"][1]["operation"]}
    assert [json.loads(c.payload.raw) for c in calls] == body["output"]
    assert not [e for e in only(events, UnknownArtifact) if e.payload.format == "stream_event"]
    end = events[-1]
    assert isinstance(end, ResponseEnded) and end.finish_reason == "tool_use"


def test_a_cut_shell_and_patch_stream_keeps_what_the_deltas_built() -> None:
    _, response, _ = files("shell_apply_patch", 1)
    body = response.read_bytes()
    cut_in_diff = body.index(b'"response.apply_patch_call_operation_diff.done"')
    events = list(decode_stream([body[:cut_in_diff]]))
    [partial] = [e for e in only(events, UnknownArtifact) if e.payload.format == "partial"]
    item = json.loads(partial.payload.raw)
    final = body_of("shell_apply_patch", 1)["output"][1]
    assert item["type"] == "apply_patch_call"
    assert item["operation"]["path"] == final["operation"]["path"]
    assert final["operation"]["diff"].startswith(item["operation"]["diff"])
    assert item["operation"]["diff"]
    cut_in_command = body.index(b'"response.shell_call_command.done"')
    events = list(decode_stream([body[:cut_in_command]]))
    [partial] = [e for e in only(events, UnknownArtifact) if e.payload.format == "partial"]
    commands = json.loads(partial.payload.raw)["action"]["commands"]
    assert commands == ["ls -la"]  # the first command's deltas, before its `.done`


def test_shell_and_patch_outputs_come_back_as_tool_results_and_replay_unchanged() -> None:
    conv = conversation(("shell_apply_patch", 1), ("shell_apply_patch", 2))
    sent = input_items("shell_apply_patch", 2)
    results = [e for e in conv.pending if isinstance(e, ToolCallResponded)]
    outputs = [json.loads(i) for i in sent if b'_output"' in i]
    assert [r.call_id for r in results] == [o["call_id"] for o in outputs]
    assert "README.md" in results[0].content  # the shell output's stdout
    assert [r.payload.raw for r in results] == [i for i in sent if b'_output"' in i]  # type: ignore[union-attr]
    body2 = body_of("shell_apply_patch", 2)
    [local] = [
        e for e in conv.pending if isinstance(e, ToolCallRequested) and e.name == "local_shell"
    ]
    assert local.arguments == {"action": body2["output"][0]["action"]}
    items = built(conv, body2["model"])
    assert items[: len(sent)] == [json.loads(i) for i in sent]
    assert items[len(sent)] == body2["output"][0]


def test_a_hosted_shell_is_one_activity_from_its_call_to_its_output() -> None:
    events = decode("shell_apply_patch", 3)
    body = body_of("shell_apply_patch", 3)
    call, output = body["output"][0], body["output"][1]
    activities = only(events, HostedActivity)
    assert [(a.activity_id, a.name, a.state) for a in activities] == [
        (call["call_id"], "shell", "started"),
        (call["call_id"], "shell", "completed"),
    ]
    assert activities[0].input == activities[1].input == {"commands": call["action"]["commands"]}
    assert [json.loads(a.payload.raw) for a in activities] == [call, output]
    assert activities[1].summary == "exit 0"
    assert not only(events, ToolCallRequested)
    end = events[-1]
    assert isinstance(end, ResponseEnded) and end.finish_reason == "stop"
    assert not [e for e in only(events, UnknownArtifact) if e.payload.format == "stream_event"]
    conv = reading(events)
    assert [i.state for i in all_items(conv) if isinstance(i, portable.ActivityItem)] == [
        "completed"
    ]
    record = Conversation.start("test")
    record.record(TurnStarted(turn_id=TurnId("turn-1")))
    record.record_all(events)
    items = built(record, body["model"])
    assert items == [call, output, body["output"][2]]  # both items, each in its place


# --- item 8: tool search -------------------------------------------------------------------------


def test_a_client_tool_search_is_a_tool_call_answered_by_its_output() -> None:
    events = decode("tool_search", 1)
    [call] = only(events, ToolCallRequested)
    item = body_of("tool_search", 1)["output"][0]
    assert (call.name, call.call_id, call.arguments) == (
        "tool_search",
        item["call_id"],
        item["arguments"],
    )
    conv = conversation(("tool_search", 1), ("tool_search", 2))
    [result] = [e for e in conv.pending if isinstance(e, ToolCallResponded)]
    assert result.call_id == item["call_id"] and result.payload is not None
    assert result.payload.raw == input_items("tool_search", 2)[2]


def test_a_server_tool_search_is_one_activity_then_the_loaded_call() -> None:
    events = decode("tool_search", 3)
    call, output, function = body_of("tool_search", 3)["output"]
    activities = only(events, HostedActivity)
    assert [(a.activity_id, a.state, a.summary) for a in activities] == [
        (call["id"], "started", "searching"),
        (call["id"], "completed", "1 tool"),
    ]
    assert activities[0].input == call["arguments"]
    assert [json.loads(a.payload.raw) for a in activities] == [call, output]
    [requested] = only(events, ToolCallRequested)
    assert requested.name == function["name"]


# --- item 8: compaction, background mode ---------------------------------------------------------


def test_the_compact_endpoint_response_decodes_and_its_compaction_is_a_notice() -> None:
    events = decode("compaction", 1)
    body = body_of("compaction", 1)
    assert isinstance(events[0], ResponseStarted) and events[0].response_id == body["id"]
    end = events[-1]
    assert isinstance(end, ResponseEnded) and end.state == "completed"
    assert end.usage is not None and end.usage.input_tokens == body["usage"]["input_tokens"]
    kept = [
        json.loads(e.payload.raw)
        for e in only(events, UnknownArtifact)
        if e.payload.format == "output_item"
    ]
    assert kept == body["output"]  # every item kept, in order
    [response] = response_items(reading(events))
    assert ("context_management", "compaction") in [(n.kind, n.code) for n in response.notices]


def test_the_compaction_item_sent_back_as_input_replays_byte_identical() -> None:
    conv = conversation(("compaction", 2))
    sent = input_items("compaction", 2)
    compaction = next(i for i in sent if b'"compaction"' in i)
    raw = b"".join(
        msgspec.json.encode(i)
        for i in build_input(list(conv.pending), model="gpt-5.1", store=True).items
    )
    assert compaction in raw
    items = built(conv, "gpt-5.1")
    kinds = [i.get("type", "message") for i in items]
    assert kinds[: len(sent)] == [json.loads(i).get("type", "message") for i in sent]


def test_a_background_stream_opens_queued_and_its_compaction_item_is_kept_in_place() -> None:
    events = decode("compaction", 2)
    body = body_of("compaction", 2)
    assert isinstance(events[0], ResponseStarted)
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "ResponseStarted",
        "UnknownArtifact",
        "AssistantText",
        "UnknownArtifact",
        "ResponseEnded",
    ]
    assert json.loads(events[1].payload.raw) == body["output"][0]  # type: ignore[attr-defined]
    assert not [e for e in only(events, UnknownArtifact) if e.payload.format == "stream_event"]
    end = events[-1]
    assert isinstance(end, ResponseEnded) and (end.state, end.finish_reason) == (
        "completed",
        "stop",
    )


@pytest.mark.parametrize("status", ["queued", "in_progress"])
def test_a_background_response_fetched_unfinished_is_not_a_failure(status: str) -> None:
    body = json.dumps(
        {
            "id": "resp_bg",
            "object": "response",
            "status": status,
            "model": "gpt-5.1",
            "output": [],
            "background": True,
        }
    ).encode()
    end = decode_message(body)[-1]
    assert isinstance(end, ResponseEnded) and end.state == "abandoned"
    assert end.error is not None and end.error.type == status
    assert "background" in end.error.message


# --- unknown item types --------------------------------------------------------------------------


def test_an_unknown_item_type_replays_byte_identical_in_its_place() -> None:
    """hosted_tools/2: `hologram_call` sits between an image generation and a computer call."""
    events = decode("hosted_tools", 2)
    _, response, _ = files("hosted_tools", 2)
    conv = Conversation.start("test")
    conv.record(TurnStarted(turn_id=TurnId("turn-1")))
    conv.record_all(events)
    items = build_input(list(conv.pending), model=body_of("hosted_tools", 2)["model"], store=True)
    raws = [bytes(i) for i in items.items if isinstance(i, msgspec.Raw)]
    output = body_of("hosted_tools", 2)["output"]
    at = [i["type"] for i in output].index("hologram_call")
    assert [json.loads(r)["type"] for r in raws] == [i["type"] for i in output]
    assert raws[at] in response.read_bytes()  # the bytes as received
