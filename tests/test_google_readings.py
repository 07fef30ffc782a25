"""What the Gemini decoder reads out of the wire formats issue 11 names, on the project's
example captures: streamed function-call arguments, several results of one code run,
grounding supports that do not fit the text, server-side tool invocations, every finish
reason, and the notices (finish message, safety ratings, a blocked prompt, Model Armor)
the portable reading shows through `read_payload`, for payloads stored by this decoder
and by earlier ones alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from google.genai import types as genai_types
from hypothesis import given
from hypothesis import strategies as st

from convstore.adapters.google.config import GoogleConfig
from convstore.adapters.google.context import RequestContext, model_from_path
from convstore.adapters.google.decode import detect_and_decode
from convstore.adapters.google.encode import encode_request
from convstore.adapters.google.grounding import (
    UNPLACED_MISMATCH,
    UNPLACED_OUTSIDE,
    UNPLACED_SPLIT,
)
from convstore.adapters.google.notices import interpret
from convstore.adapters.google.response import FINISH_REASONS
from convstore.adapters.google.streamed_calls import MalformedPiece, StreamedCall, json_path
from convstore.adapters.wire.providers import read_payload
from convstore.domain.conversation import Conversation
from convstore.domain.events import (
    AssistantText,
    Event,
    HostedActivity,
    ResponseEnded,
    ToolCallRequested,
    ToolCallResponded,
    TurnStarted,
    UnknownArtifact,
)
from convstore.domain.vocabulary import CallId, ProviderPayload, TurnId
from convstore.projections.portable import ActivityItem, ResponseItem, TextItem, UnknownItem, fold

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "google"


def decoded(name: str, n: int) -> list[Event]:
    folder = EXAMPLES / name
    if not folder.is_dir():
        pytest.skip(f"no example capture {name}")
    meta = json.loads((folder / f"{n}.meta.json").read_text())
    request = folder / f"{n}.request.json"
    context = RequestContext.from_body(request.read_bytes(), model=model_from_path(meta["path"]))
    [body] = folder.glob(f"{n}.response.*")
    return list(detect_and_decode(body.read_bytes(), request=context, status=meta["status"]))


def recorded(*responses: list[Event]) -> list[Event]:
    """The responses recorded in one conversation (client calls answered between them)."""
    conversation = Conversation.start("test")
    conversation.record(TurnStarted(turn_id=TurnId("turn-1")))
    for drafts in responses:
        conversation.record_all(drafts)
        for call in conversation.open_calls():
            conversation.record(ToolCallResponded(call_id=CallId(call), content="ok"))
    return list(conversation.pending)


def of(events: list[Event], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def raw_json(payload: ProviderPayload | None) -> Any:
    assert payload is not None
    return json.loads(payload.raw)


# --- streamed function-call arguments --------------------------------------------------------


def test_streamed_arguments_become_whole_calls_with_their_signature() -> None:
    events = decoded("streamed_call_arguments", 1)
    calls = of(events, ToolCallRequested)
    assert [(c.name, c.arguments) for c in calls] == [
        (
            "plan_trip",
            {
                "traveller": {"name": "Zoë", "adults": 1, "pets": True},
                "stops": [
                    {"city": "Lisboa", "nights": 2, "note": None},
                    {"city": "Porto", "nights": 3, "note": "vue sur le Douro 🌉"},
                ],
            },
        ),
        ("get_weather", {"city": "Porto"}),
        ("list_alerts", {}),  # no `args` key: a call with no arguments
    ]
    first, second, third = (raw_json(c.payload) for c in calls)
    assert "thoughtSignature" in first and first["functionCall"].keys() == {"name", "args"}
    assert "thoughtSignature" not in second and "thoughtSignature" not in third
    assert calls[0].payload.binding == {"model": "gemini-3-pro-preview"}
    assert third == {"functionCall": {"name": "list_alerts"}}
    assert not of(events, UnknownArtifact)  # no piece, no end marker left over
    end = events[-1]
    assert isinstance(end, ResponseEnded) and end.finish_reason == "tool_use"


def test_a_json_array_stream_assembles_calls_too_and_keeps_their_ids() -> None:
    [call] = of(decoded("streamed_call_arguments", 2), ToolCallRequested)
    assert call.call_id == "call-note-1"
    assert call.arguments == {"lines": ["Réserver le dîner", "Promener le chien 🐕"]}


def test_streamed_calls_replay_whole_and_in_place_never_as_pieces() -> None:
    events = recorded(decoded("streamed_call_arguments", 1))
    encoded = encode_request(events, config=GoogleConfig(), model="gemini-3-pro-preview")
    [model] = [c for c in json.loads(encoded.to_json())["contents"] if c["role"] == "model"]
    calls = [p for p in model["parts"] if "functionCall" in p]
    assert [p["functionCall"]["name"] for p in calls] == ["plan_trip", "get_weather", "list_alerts"]
    assert [("thoughtSignature" in p) for p in calls] == [True, False, False]
    assert all(p["functionCall"] and "willContinue" not in p["functionCall"] for p in calls)
    assert not encoded.losses


@given(st.lists(st.text("ab_-1é", min_size=1, max_size=4), min_size=1, max_size=4))
def test_a_dotted_json_path_reads_as_its_bracketed_spelling(names: list[str]) -> None:
    """`$.a.b` (read in one match) gives the segments `$['a']['b']` (read segment by
    segment) gives, when every name is one a dotted path may hold; else it is refused."""
    dotted = "$." + ".".join(names)
    if all(name[0] in "ab_" and set(name) <= set("ab_-1") for name in names):
        assert json_path(dotted) == json_path("$" + "".join(f"['{n}']" for n in names)) == names
    else:
        with pytest.raises(MalformedPiece):
            json_path(dotted)


def test_json_paths_and_malformed_pieces() -> None:
    assert json_path("$.a['b c'][2].d") == ["a", "b c", 2, "d"]
    for bad in ("a.b", "$", "$..a", "$[99999999]", 7):
        with pytest.raises(MalformedPiece):
            json_path(bad)
    call = StreamedCall({"functionCall": {"name": "f", "willContinue": True}})
    call.add({"partialArgs": [{"jsonPath": "$.a", "stringValue": "x"}]})
    for piece in (
        {"jsonPath": "$.a.b", "stringValue": "y"},  # through a string
        {"jsonPath": "$.a", "numberValue": "1"},
        {"jsonPath": "$.a", "stringValue": "x", "boolValue": True},
    ):
        with pytest.raises(MalformedPiece):
            call.add({"partialArgs": [piece]})


def test_a_piece_that_cannot_be_applied_keeps_everything_and_makes_no_call() -> None:
    chunks = [
        {"functionCall": {"name": "f", "willContinue": True}},
        {"functionCall": {"partialArgs": [{"jsonPath": "nope", "stringValue": "x"}]}},
        {"functionCall": {}},
    ]
    body = b"".join(
        b"data: "
        + json.dumps(
            {"candidates": [{"content": {"parts": [part]}}], "responseId": "r", "modelVersion": "m"}
        ).encode()
        + b"\r\n\r\n"
        for part in chunks
    )
    events = list(detect_and_decode(body))
    assert not of(events, ToolCallRequested)
    assert [e.payload.format for e in of(events, UnknownArtifact)] == ["partial"] * 3


@given(
    st.dictionaries(
        st.text("abcdefgh", min_size=1, max_size=4),
        st.one_of(st.text(max_size=6), st.integers(-9, 9), st.booleans(), st.none()),
        max_size=5,
    ),
    st.integers(1, 4),
)
def test_any_flat_arguments_streamed_in_string_pieces_assemble_exactly(
    arguments: dict[str, Any], size: int
) -> None:
    call = StreamedCall({"functionCall": {"name": "f", "willContinue": True}})
    for key, value in arguments.items():
        path = f"$['{key}']"
        if isinstance(value, str) and value:
            pieces = [value[i : i + size] for i in range(0, len(value), size)]
            for n, piece in enumerate(pieces):
                last = n == len(pieces) - 1
                call.add(
                    {
                        "partialArgs": [
                            {"jsonPath": path, "stringValue": piece, "willContinue": not last}
                        ]
                    }
                )
        else:
            kind = {str: "stringValue", bool: "boolValue", int: "numberValue"}.get(type(value))
            piece = (
                {"jsonPath": path, kind: value}
                if kind
                else {"jsonPath": path, "nullValue": "NULL_VALUE"}
            )
            call.add({"partialArgs": [piece]})
    assert call.part() == {"functionCall": {"name": "f", "args": arguments}}


# --- several results of one code run ---------------------------------------------------------


def test_a_code_run_with_several_results_is_one_activity_ending_as_its_last() -> None:
    events = decoded("code_execution_results", 1)
    runs = [(a.activity_id, a.state) for a in of(events, HostedActivity)]
    first, second = runs[0][0], runs[2][0]
    assert second == "exec-b"
    assert runs == [
        (first, "started"),
        (first, "failed"),
        (second, "started"),
        (second, "completed"),
    ]
    ended = [a for a in of(events, HostedActivity) if a.state != "started"]
    assert [a.payload.format for a in ended] == ["parts", "parts"]
    outcomes = [[p["codeExecutionResult"]["outcome"] for p in raw_json(a.payload)] for a in ended]
    assert outcomes == [["OUTCOME_OK", "OUTCOME_FAILED"], ["OUTCOME_FAILED", "OUTCOME_OK"]]
    assert ended[0].summary.startswith("failed: ZeroDivisionError")
    assert all(a.input for a in of(events, HostedActivity) if a.state == "started")


def test_several_results_replay_as_their_parts_in_place() -> None:
    events = recorded(decoded("code_execution_results", 1))
    config = GoogleConfig.from_block({"hosted_tools": {"code_execution": {"enable": True}}})
    encoded = encode_request(events, config=config, model="gemini-3-flash-preview")
    [model] = [c for c in json.loads(encoded.to_json())["contents"] if c["role"] == "model"]
    body = json.loads((EXAMPLES / "code_execution_results" / "1.response.json").read_bytes())
    assert model["parts"] == body["candidates"][0]["content"]["parts"]
    assert not encoded.losses


# --- grounding supports that do not fit the text ---------------------------------------------


def test_supports_that_do_not_fit_keep_every_source_without_a_range() -> None:
    events = decoded("grounding_unplaced", 1)
    [text] = of(events, AssistantText)
    cited = [(a.source.url, a.range is not None, a.unplaced) for a in text.attributions]
    assert cited == [
        ("https://example.com/musee/horaires", True, ""),
        ("https://example.org/tarifs", False, UNPLACED_MISMATCH),
        ("https://example.org/tarifs", False, UNPLACED_SPLIT),
        ("https://example.net/agenda", False, UNPLACED_SPLIT),
        ("https://example.net/agenda", False, UNPLACED_OUTSIDE),
    ]
    assert all(a.excerpt is None and a.source.title for a in text.attributions)
    [placed] = [a for a in text.attributions if a.range is not None]
    assert text.text[placed.range.start : placed.range.end] == "Le musée ouvre à 10 h."
    reading = fold(recorded(events), read_payload)
    [item] = [i for t in reading.turns for i in t.items if isinstance(i, TextItem)]
    assert [c.unplaced for c in item.citations] == [a.unplaced for a in text.attributions]


# --- server-side tool invocations, unknown parts, finish reasons ------------------------------


def test_server_side_tool_invocations_are_one_hosted_activity() -> None:
    events = decoded("server_tool_invocation", 1)
    search = [a for a in of(events, HostedActivity) if a.activity_id == "tc-9f2"]
    assert [(a.name, a.state) for a in search] == [
        ("web_search", "started"),
        ("web_search", "completed"),
    ]
    assert search[0].input == {"queries": ["northernmost city in the United States"]}
    assert search[0].payload is not None and search[0].payload.binding  # signed: bound
    [call] = of(events, ToolCallRequested)
    assert (call.call_id, call.name) == ("fc-31a", "getWeather")
    [unknown] = of(events, UnknownArtifact)
    assert raw_json(unknown.payload) == {
        "futurePart": {"kind": "preview", "note": "a part type no SDK knows yet"}
    }


def test_an_unexpected_tool_call_is_an_error_with_its_message() -> None:
    events = decoded("server_tool_invocation", 3)
    end = events[-1]
    assert isinstance(end, ResponseEnded)
    assert (end.state, end.finish_reason, end.stop_reason) == (
        "completed",
        "error",
        "UNEXPECTED_TOOL_CALL",
    )
    [response] = [
        i
        for t in fold(recorded(events), read_payload).turns
        for i in t.items
        if isinstance(i, ResponseItem)
    ]
    assert [(n.kind, n.message) for n in response.notices] == [
        ("finish_message", "Unexpected tool call: getTime is not declared.")
    ]


def test_every_finish_reason_the_sdk_documents_is_mapped() -> None:
    documented = {reason.value for reason in genai_types.FinishReason}
    assert documented <= FINISH_REASONS.keys()


def test_a_429_answering_an_sse_request_is_a_failed_response() -> None:
    events = decoded("errors", 5)
    assert [type(e).__name__ for e in events] == ["ResponseStarted", "ResponseEnded"]
    end = events[-1]
    assert isinstance(end, ResponseEnded) and end.state == "failed" and end.error is not None
    assert (end.error.type, end.error.status) == ("RESOURCE_EXHAUSTED", 429)


# --- notices ---------------------------------------------------------------------------------


def notices_of(events: list[Event]) -> list[tuple[str, str, str, dict[str, str]]]:
    reading = fold(recorded(events), read_payload)
    items = [i for t in reading.turns for i in t.items]
    assert not [i for i in items if isinstance(i, UnknownItem) and i.format.endswith("_fields")]
    return [
        (n.kind, n.code, n.message, n.details)
        for i in items
        if isinstance(i, ResponseItem)
        for n in i.notices
    ]


def test_a_safety_stop_reads_as_its_finish_message_and_ratings() -> None:
    notices = notices_of(decoded("safety_notices", 1))
    assert notices[0] == (
        "finish_message",
        "",
        "The response was stopped because it may contain dangerous content.",
        {},
    )
    assert notices[1:] == [
        (
            "safety",
            "HARM_CATEGORY_HARASSMENT",
            "",
            {
                "probability": "NEGLIGIBLE",
                "probabilityScore": "0.02",
                "severity": "HARM_SEVERITY_NEGLIGIBLE",
                "severityScore": "0.01",
                "subject": "response",
            },
        ),
        (
            "safety",
            "HARM_CATEGORY_DANGEROUS_CONTENT",
            "",
            {
                "probability": "HIGH",
                "probabilityScore": "0.91",
                "severity": "HARM_SEVERITY_HIGH",
                "severityScore": "0.87",
                "blocked": "true",
                "subject": "response",
            },
        ),
    ]


def test_a_prompt_blocked_by_model_armor_reads_as_a_screening() -> None:
    events = decoded("safety_notices", 2)
    assert events[-1].finish_reason == "content_filter"  # type: ignore[attr-defined]
    notices = notices_of(events)
    kind, code, message, details = notices[0]
    assert (kind, code, details) == ("screening", "MODEL_ARMOR", {"subject": "prompt"})
    assert message.startswith("Blocked by Model Armor")
    assert [(k, c, d["subject"]) for k, c, _, d in notices[1:]] == [
        ("safety", "HARM_CATEGORY_HATE_SPEECH", "prompt"),
        ("safety", "HARM_CATEGORY_DANGEROUS_CONTENT", "prompt"),
    ]


def test_payloads_stored_by_earlier_versions_read_the_same() -> None:
    """An artifact stored before notices were typed is read, never rewritten; other
    kinds, other providers and unreadable values read as None."""

    def payload(fmt: str, value: bytes, provider: str = "google") -> ProviderPayload:
        return ProviderPayload(provider=provider, format=fmt, value=msgspec.Raw(value))

    old = payload("response_fields", b'{"promptFeedback":{"blockReason":"SAFETY"}}')
    reading = interpret(old)
    assert reading is not None and [(n.kind, n.code) for n in reading.notices] == [
        ("blocked", "SAFETY")
    ]
    assert read_payload(old) == reading
    assert interpret(payload("candidate_fields", b'{"avgLogprobs":-0.3}')) is None
    assert interpret(payload("part", b'{"finishMessage":"x"}')) is None
    assert interpret(payload("candidate_fields", b'{"finishMessage":"x"}', "openai")) is None
    assert interpret(payload("candidate_fields", b"[1, 2]")) is None


def test_a_web_search_lists_every_page_it_consulted() -> None:
    """The grounding block's chunks are the search's sources, cited or not; a grounding
    block that is no web search reads as nothing (it stays an unknown artifact)."""
    reading = fold(recorded(decoded("grounding_unplaced", 1)), read_payload)
    [search] = [i for t in reading.turns for i in t.items if isinstance(i, ActivityItem)]
    assert [(s.url, s.title) for s in search.sources] == [
        ("https://example.com/musee/horaires", "example.com"),
        ("https://example.org/tarifs", "example.org"),
        ("https://example.net/agenda", "example.net"),
    ]
    retrieval = b'{"groundingChunks":[{"web":{"uri":"https://example.com/x"}}]}'
    unknown = ProviderPayload(
        provider="google", format="grounding_metadata", value=msgspec.Raw(retrieval)
    )
    assert interpret(unknown) is None
