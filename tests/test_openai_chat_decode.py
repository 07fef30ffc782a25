"""Chat Completions decoding (`adapters.openai_chat`): the project's example captures, the
differences of compatible servers, and properties over generated streams."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convstore.adapters.openai_chat.context import RequestContext
from convstore.adapters.openai_chat.decode import decode_message, decode_stream, detect_and_decode
from convstore.adapters.wire.providers import adapter, read_payload, serving
from convstore.domain.errors import DecodeError
from convstore.domain.events import (
    AssistantText,
    Event,
    Reasoning,
    ResponseEnded,
    ResponseStarted,
    ToolCallRequested,
    UnknownArtifact,
)
from convstore.domain.vocabulary import TextRange

EXAMPLES = Path(__file__).parents[1] / "examples" / "openai-chat"


def decoded(folder: str, number: int, *, server: str = "") -> list[Event]:
    base = EXAMPLES / folder
    body = next(base.glob(f"{number}.response.*")).read_bytes()
    request = base / f"{number}.request.json"
    status = json.loads((base / f"{number}.meta.json").read_text())["status"]
    with serving(server):
        return list(
            adapter("openai-chat").decode(
                body, request.read_bytes() if request.exists() else None, status
            )
        )


def of(events: list[Event], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def artifact(events: list[Event], fmt: str) -> Any:
    [found] = [e for e in of(events, UnknownArtifact) if e.payload.format == fmt]
    return msgspec.json.decode(found.payload.raw)


def ended(events: list[Event]) -> ResponseEnded:
    assert isinstance(events[-1], ResponseEnded)
    return events[-1]


def test_a_streamed_tool_call_is_assembled_from_its_fragments() -> None:
    events = decoded("tool_call_stream", 1, server="api.openai.com")
    started = events[0]
    assert isinstance(started, ResponseStarted)
    assert started.provider == "openai-chat"
    assert started.response_id == "chatcmpl-Cq7Vw2kXbT9nHs4LdPzE1aRfY0uJm"
    assert started.settings.system == "You are a terse assistant."
    assert [t.name for t in started.settings.tools] == ["get_weather"]
    calls = of(events, ToolCallRequested)
    assert [(c.call_id, c.arguments) for c in calls] == [
        ("call_Qm2vX8bLk1sTz9", {"city": "Zürich", "unit": "c"}),
        ("call_Hn4pR7cWd3yUe6", {"city": "Kraków", "unit": "c"}),
    ]
    native = msgspec.json.decode(calls[0].payload.raw)
    assert native["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Zürich", "unit": "c"}',
    }
    assert calls[0].payload.binding == {"model": "gpt-4.1-2025-04-14", "server": "api.openai.com"}
    end = ended(events)
    assert (end.finish_reason, end.stop_reason) == ("tool_use", "tool_calls")
    assert end.usage is not None and end.usage.input_tokens == 84  # from the final chunk
    assert end.usage.other["completion_tokens_details.accepted_prediction_tokens"] == 0


def test_a_whole_response_keeps_its_message_bytes_and_usage_details() -> None:
    events = decoded("tool_call_stream", 2)
    [text] = of(events, AssistantText)
    body = (EXAMPLES / "tool_call_stream" / "2.response.json").read_bytes()
    message = msgspec.json.decode(body)["choices"][0]["message"]
    assert msgspec.json.decode(text.payload.raw) == message
    assert text.payload.raw in body.replace(b"\n", b"") or msgspec.json.decode(text.payload.raw)
    end = ended(events)
    assert end.usage is not None and end.usage.cache_read_tokens == 128
    assert artifact(events, "response_fields")["service_tier"] == "default"


@pytest.mark.parametrize("number", [1, 2])
def test_url_citations_become_ranges_over_their_text(number: int) -> None:
    events = decoded("citations_refusal", number)
    [text] = of(events, AssistantText)
    cited = [(a.source.url, text.text[a.range.start : a.range.end]) for a in text.attributions]
    assert cited == [
        ("https://example.com/rhone/source", "Le Rhône naît au glacier du Rhône"),
        ("https://example.org/rhone/delta", "se jette en Méditerranée."),
    ]


def test_streamed_and_whole_forms_decode_alike() -> None:
    def shape(events: list[Event]) -> list[tuple[str, str]]:
        return [(type(e).__name__, getattr(e, "text", "")) for e in events]

    assert shape(decoded("citations_refusal", 1))[:2] == shape(decoded("citations_refusal", 2))[:2]


def test_a_refusal_ends_refusal_and_its_logprobs_are_kept_joined() -> None:
    events = decoded("citations_refusal", 3)
    [text] = of(events, AssistantText)
    assert text.text == "I'm sorry, I can't help with that."
    assert ended(events).finish_reason == "refusal"
    logprobs = artifact(events, "choice_fields")["logprobs"]
    assert [t["token"] for t in logprobs["refusal"]] == [
        "I'm sorry, ",
        "I can't help ",
        "with that.",
    ]


def test_deepseek_reasoning_content_and_cache_counters() -> None:
    events = decoded("compatible_servers", 1)
    [thought] = of(events, Reasoning)
    assert thought.text.startswith("The user asks") and thought.payload is None
    end = ended(events)
    assert end.usage is not None and end.usage.reasoning_tokens == 48
    assert end.usage.other["prompt_cache_miss_tokens"] == 18


def test_openrouter_comments_reasoning_details_and_signature() -> None:
    events = decoded("compatible_servers", 2)
    [thought] = of(events, Reasoning)
    assert thought.text == "Two plus two is four."
    [detail] = msgspec.json.decode(thought.payload.raw)
    assert detail["text"] == "Two plus two is four." and detail["signature"].startswith("EqQB")
    assert artifact(events, "choice_fields")["native_finish_reason"] == "end_turn"
    assert artifact(events, "response_fields")["provider"] == "Anthropic"
    assert artifact(events, "unread_usage") == {"usage": {"cost": 0.000492}}


def test_n_choices_interleaved_keep_the_first_typed_and_the_others_whole() -> None:
    events = decoded("compatible_servers", 3)
    [text] = of(events, AssistantText)
    assert text.text == "Bonjour le monde."
    other = artifact(events, "choice")
    assert other["index"] == 1 and other["message"]["content"] == "Salut tout le monde!"
    assert other["finish_reason"] == "stop"
    assert len(other["logprobs"]["content"]) == 4
    assert ended(events).finish_reason == "length"
    assert ended(events).usage is None


def test_azure_filter_results_are_kept_and_read_as_screening_notices() -> None:
    events = decoded("compatible_servers", 4)
    assert "prompt_filter_results" in artifact(events, "response_fields")
    assert "content_filter_results" in artifact(events, "choice_fields")
    readings = [read_payload(e.payload) for e in of(events, UnknownArtifact)]
    notices = [n for r in readings if r is not None for n in r.notices]
    assert [(n.kind, n.code) for n in notices] == [
        ("screening", "content_filter.completion"),
        ("screening", "content_filter.prompt"),
    ]
    assert notices[1].details["jailbreak"] == "not detected"
    assert notices[0].details["filtered"] == "none" and notices[0].details["hate"] == "safe"


def test_perplexity_citations_are_numbered_sources_and_fractional_costs_unread() -> None:
    events = decoded("compatible_servers", 5)
    fields = artifact(events, "response_fields")
    assert fields["citations"] == ["https://example.com/bern", "https://example.net/swiss-capital"]
    assert len(fields["search_results"]) == 2
    assert artifact(events, "unread_usage")["usage"]["cost"]["total_cost"] == 0.005
    [text] = of(events, AssistantText)  # its [n] markers number the citations
    placed = [(a.source.url, a.source.title, a.range) for a in text.attributions]
    assert placed == [
        ("https://example.com/bern", "Bern", TextRange(40, 40)),
        ("https://example.net/swiss-capital", "Capital of Switzerland", TextRange(43, 43)),
    ]
    assert text.text[40:46] == "[1][2]"


def test_an_error_chunk_mid_stream_fails_the_response_and_keeps_the_text() -> None:
    events = decoded("errors", 1)
    [text] = of(events, AssistantText)
    assert text.text == "The answer is" and not text.attributions_complete
    end = ended(events)
    assert end.state == "failed" and end.error is not None
    assert (end.error.type, end.error.message) == ("server_error", "Provider disconnected")


def test_a_cut_tool_call_is_partial_never_requested() -> None:
    events = decoded("errors", 2)
    assert not of(events, ToolCallRequested)
    [partial] = [e for e in of(events, UnknownArtifact) if e.payload.format == "partial"]
    assert b'"arguments":"{\\"query\\": \\"ins"' in partial.payload.raw
    assert ended(events).state == "abandoned"


@pytest.mark.parametrize(("number", "kind"), [(3, "requests"), (4, "error")])
def test_http_error_bodies_fail(number: int, kind: str) -> None:
    end = ended(decoded("errors", number))
    assert end.state == "failed" and end.error is not None and end.error.type == kind


def test_comment_lines_and_a_missing_done_complete_when_every_choice_finished() -> None:
    body = (
        b": keep-alive\n\n"
        b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
        b": keep-alive\n\n"
        b'data: {"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    )
    events = list(decode_stream([body]))
    assert of(events, AssistantText)[0].text == "hi"
    assert ended(events).state == "completed"


def test_usage_in_every_chunk_keeps_the_newest() -> None:
    chunks = [
        {
            "id": "c2",
            "choices": [{"index": 0, "delta": {"content": "a"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        },
        {
            "id": "c2",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        },
    ]
    body = (
        b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    )
    end = ended(list(decode_stream([body])))
    assert end.usage is not None and end.usage.output_tokens == 2


def test_malformed_json_mid_stream_abandons() -> None:
    body = b'data: {"id":"c3","choices":[{"index":0,"delta":{"content":"x"}}]}\n\ndata: {"id":\n\n'
    events = list(decode_stream([body]))
    assert of(events, AssistantText)[0].text == "x"
    end = ended(events)
    assert end.state == "abandoned" and end.error is not None
    assert end.error.type == "malformed_stream"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"[]",
        b'{"object":"list"}',
        b"data: [DONE]\n\n",
        b'data: {"type":"response.created"}\n\n',
    ],
)
def test_input_without_a_response_is_a_decode_error(body: bytes) -> None:
    with pytest.raises(DecodeError):
        list(detect_and_decode(body))


def test_a_range_outside_its_text_is_dropped() -> None:
    body = {
        "id": "c4",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "short",
                    "annotations": [
                        {
                            "type": "url_citation",
                            "url_citation": {
                                "start_index": 2,
                                "end_index": 99,
                                "url": "https://example.com/",
                            },
                        }
                    ],
                },
                "finish_reason": "stop",
            }
        ],
    }
    [text] = of(decode_message(json.dumps(body).encode()), AssistantText)
    [attribution] = text.attributions
    assert attribution.range is None and attribution.unplaced


def test_a_request_names_the_binding_model_and_server() -> None:
    context = RequestContext.from_body(
        b'{"model":"llama3.2","messages":[]}', server="localhost:11434"
    )
    events = decode_message(
        b'{"id":"c5","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}',
        request=context,
    )
    [text] = of(events, AssistantText)
    assert text.payload.binding == {"model": "llama3.2", "server": "localhost:11434"}


# --- properties -------------------------------------------------------------------------------

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)


def _frame(chunks: list[dict[str, Any]], *, done: bool = True) -> bytes:
    body = b"".join(
        b"data: " + json.dumps(c, ensure_ascii=False).encode() + b"\n\n" for c in chunks
    )
    return body + (b"data: [DONE]\n\n" if done else b"")


@st.composite
def streams(draw: st.DrawFn) -> tuple[str, list[str], dict[str, Any], list[dict[str, Any]]]:
    text_pieces = draw(st.lists(_TEXT, min_size=1, max_size=6))
    arguments = draw(st.dictionaries(st.text(max_size=5), st.integers() | _TEXT, max_size=3))
    encoded = json.dumps(arguments, ensure_ascii=False)
    cuts = sorted(draw(st.lists(st.integers(0, len(encoded)), max_size=4)))
    fragments = [encoded[a:b] for a, b in zip([0, *cuts], [*cuts, len(encoded)], strict=True)]
    chunks: list[dict[str, Any]] = [
        {"id": "p1", "model": "m", "choices": [{"index": 0, "delta": {"content": piece}}]}
        for piece in text_pieces
    ]
    chunks.append(
        {
            "id": "p1",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "f", "arguments": ""},
                            }
                        ]
                    },
                }
            ],
        }
    )
    chunks.extend(
        {
            "id": "p1",
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": f}}]}}
            ],
        }
        for f in fragments
    )
    chunks.append(
        {"id": "p1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    )
    return "".join(text_pieces), fragments, arguments, chunks


@settings(max_examples=60, deadline=None)
@given(stream=streams(), size=st.integers(1, 64))
def test_any_stream_in_any_chunking_decodes_to_the_whole_message(
    stream: tuple[str, list[str], dict[str, Any], list[dict[str, Any]]], size: int
) -> None:
    text, _, arguments, chunks = stream
    body = _frame(chunks)
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    events = list(decode_stream(pieces))
    assert [e.text for e in of(events, AssistantText)] == ([text] if text else [])
    [call] = of(events, ToolCallRequested)
    assert call.arguments == arguments
    assert ended(events).finish_reason == "tool_use"
    whole = {
        "id": "p1",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text or None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {
                                "name": "f",
                                "arguments": json.dumps(arguments, ensure_ascii=False),
                            },
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    same = decode_message(json.dumps(whole, ensure_ascii=False).encode())
    assert [
        (type(e).__name__, getattr(e, "text", None), getattr(e, "arguments", None)) for e in same
    ] == [
        (type(e).__name__, getattr(e, "text", None), getattr(e, "arguments", None)) for e in events
    ]


@settings(max_examples=60, deadline=None)
@given(stream=streams(), cut=st.integers(0, 10_000))
def test_a_stream_cut_anywhere_never_crashes_and_never_requests_a_cut_call(
    stream: tuple[str, list[str], dict[str, Any], list[dict[str, Any]]], cut: int
) -> None:
    body = _frame(stream[3], done=False)
    body = body[: cut % (len(body) + 1)]
    try:
        events = list(detect_and_decode(body))
    except DecodeError:
        return  # nothing response-like arrived
    end = ended(events)
    if end.state != "completed":
        assert not of(events, ToolCallRequested)
    assert isinstance(events[0], ResponseStarted)


def test_a_chunk_of_another_shape_or_after_its_choice_finished_is_kept_as_it_came() -> None:
    chunks = [
        b'{"id":"c6","choices":[{"index":0,"delta":{"content":"a"}}]}',
        b'{"id":"c6","choices":{"index":0}}',
        b'{"id":"c6","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
        b'{"id":"c6","choices":[{"index":0,"delta":{"content":"late"}}]}',
    ]
    body = b"".join(b"data: " + c + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    events = list(decode_stream([body]))
    formats = [e.payload.format for e in of(events, UnknownArtifact)]
    assert formats[:2] == ["stream_chunk", "stream_choice"]
    assert [e.text for e in of(events, AssistantText)] == ["a"]
    assert ended(events).state == "completed"
