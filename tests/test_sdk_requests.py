"""The SDK request check itself: it refuses what the SDKs' types drop or coerce, and
accepts the providers' documented request shapes."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.sdk_requests import (
    assert_valid_anthropic_request,
    assert_valid_google_request,
    assert_valid_openai_request,
    verbatim_paths,
)

ASSISTANT_TEXT = {"role": "assistant", "content": "Hello."}
OUTPUT_MESSAGE = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Hello.", "annotations": []}],
}


def test_openai_accepts_documented_items() -> None:
    assert_valid_openai_request(
        {"model": "gpt-5", "input": [{"role": "user", "content": "Hi"}, ASSISTANT_TEXT]}
    )
    assert_valid_openai_request({"model": "gpt-5", "input": [OUTPUT_MESSAGE], "stream": True})


@pytest.mark.parametrize(
    ("body", "named"),
    [
        # an output message without `type`/`id`/`status`: no member of the input union
        (
            {"model": "m", "input": [{"role": "assistant", "content": OUTPUT_MESSAGE["content"]}]},
            "input[0]",
        ),
        # a key the TypedDict does not have is dropped by pydantic: refused here
        ({"model": "m", "input": [{**ASSISTANT_TEXT, "id": "x"}]}, "input[0].id"),
        ({"model": "m", "input": [ASSISTANT_TEXT], "bogus": 1}, "bogus"),
        # a value pydantic would coerce
        ({"model": "m", "input": [ASSISTANT_TEXT], "temperature": "1"}, "temperature"),
        ({"model": "m", "input": [ASSISTANT_TEXT], "store": 1}, "store"),
    ],
)
def test_openai_refuses_what_the_sdk_drops_or_coerces(body: dict[str, Any], named: str) -> None:
    with pytest.raises(AssertionError, match=rf"(?m)^  {re.escape(named)}:"):
        assert_valid_openai_request(body)


def test_exempt_parts_leave_the_check() -> None:
    unknown = {"type": "future_item", "id": "fi_1"}
    body = {"model": "m", "input": [ASSISTANT_TEXT, unknown, ASSISTANT_TEXT, unknown]}
    with pytest.raises(AssertionError):
        assert_valid_openai_request(body)
    paths = verbatim_paths(body, [b'{"id": "fi_1", "type": "future_item"}'])
    assert paths == [("input", 1), ("input", 3)]
    assert_valid_openai_request(body, exempt=paths)


def test_anthropic_checks_blocks_as_request_types() -> None:
    body: dict[str, Any] = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
        ],
    }
    assert_valid_anthropic_request(body)
    # a field of no request block (the response models would keep it: checked as blocks)
    body["messages"][1]["content"][0]["parsed_output"] = {}
    with pytest.raises(AssertionError, match=r"messages\[1\]\.content\[0\]\.parsed_output"):
        assert_valid_anthropic_request(body)


def test_google_maps_the_rest_body() -> None:
    body: dict[str, Any] = {
        "contents": [
            {"role": "user", "parts": [{"text": "Hi"}]},
            {"role": "model", "parts": [{"text": "Hello.", "thoughtSignature": "q83vEjRWeJA="}]},
        ],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [{"googleSearch": {}}],
        "generationConfig": {"temperature": 0.5, "thinkingConfig": {"thinkingBudget": 128}},
    }
    assert_valid_google_request(body)
    with pytest.raises(AssertionError, match=r"generationConfig\.tools"):
        assert_valid_google_request({**body, "generationConfig": {"tools": []}})
    with pytest.raises(AssertionError, match=r"contents\[0\]"):
        assert_valid_google_request(
            {**body, "contents": [{"role": "user", "parts": [{"txt": "Hi"}]}]}
        )
    with pytest.raises(AssertionError, match="topLevel"):
        assert_valid_google_request({**body, "topLevel": 1})
