"""A hand-built Anthropic web-search conversation, recorded through `ConversationService`.

Signed reasoning, a hosted web search (3 results), cited text, a client tool round-trip
and a final answer: 15 events in one turn, for tests of the readings (`list`, `show`).
Every provider value is made up (see examples/README.md).
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from convstore.domain import (
    ActivityId,
    AssistantText,
    Attribution,
    CallId,
    ConversationId,
    ConversationService,
    HostedActivity,
    ProviderPayload,
    Reasoning,
    RequestSettings,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    Source,
    ToolCallRequested,
    ToolCallResponded,
    ToolDeclaration,
    Usage,
    UserMessage,
)

TITLE_OF_CONVERSATION = "Matcha in Uji"
LABELS = ("demo", "web-search")
MODEL = "claude-sonnet-4-5"
SEARCH_VERSION = "web_search_20250305"
QUESTION = "Where in Uji can I drink good matcha, and will it rain there tomorrow?"
QUERY = "Uji matcha cafés 宇治抹茶"
FIRST, SECOND = ResponseId("msg_01DemoSearchAndTool"), ResponseId("msg_02DemoFinalAnswer")
SEARCH = ActivityId("srvtoolu_01DemoWebSearch")
WEATHER = CallId("toolu_01DemoGetWeather")
URL = "https://www.example.org/food/uji-matcha-cafes"
TITLE = "The best matcha cafés in Uji — a local's list"
SOURCE = Source(kind="web", url=URL, title=TITLE)
EXCERPT = "Chazen-an, a family-run café a few minutes from Byōdō-in, pours thick koicha."
SETTINGS = RequestSettings(
    system="You are a concise travel assistant.",
    tools=(
        ToolDeclaration(name="web_search", hosted=True, native_type=SEARCH_VERSION),
        ToolDeclaration(
            name="get_weather",
            description="Tomorrow's forecast for a place.",
            input_schema={"type": "object", "properties": {"location": {"type": "string"}}},
        ),
    ),
    tool_choice="auto",
    max_tokens=2048,
)


def opaque(label: str) -> str:
    """A made-up opaque value (signature, encrypted content) that looks like the wire's."""
    return base64.b64encode(hashlib.sha512(label.encode()).digest() * 2).decode()


def _payload(block: dict[str, Any], *, version: str = "") -> ProviderPayload:
    raw = json.dumps(block, ensure_ascii=False, separators=(",", ":")).encode()
    return ProviderPayload.of(
        "anthropic", "content_block", raw, version=version, binding={"model": MODEL}
    )


def _first_response() -> list[Any]:
    thinking = "The user wants cafés in Uji and tomorrow's weather: search, then call the tool."
    results = [
        {"type": "web_search_result", "url": url, "title": title, "encrypted_content": opaque(url)}
        for url, title in (
            ("https://travel.example.com/japan/kyoto/uji-tea-guide", "Uji Tea Guide"),
            (URL, TITLE),
            ("https://blog.example.net/ja/uji-matcha-meaning", "宇治抹茶の基本"),
        )
    ]
    citation = {
        "type": "web_search_result_location",
        "url": URL,
        "title": TITLE,
        "cited_text": EXCERPT,
        "encrypted_index": opaque("index"),
    }
    started = {"query": QUERY}
    return [
        ResponseStarted(response_id=FIRST, provider="anthropic", model=MODEL, settings=SETTINGS),
        Reasoning(
            response_id=FIRST,
            text=thinking,
            payload=_payload(
                {"type": "thinking", "thinking": thinking, "signature": opaque("signature")}
            ),
        ),
        HostedActivity(
            activity_id=SEARCH,
            name="web_search",
            state="started",
            response_id=FIRST,
            input=started,
            payload=_payload(
                {"type": "server_tool_use", "id": SEARCH, "name": "web_search", "input": started},
                version=SEARCH_VERSION,
            ),
        ),
        HostedActivity(
            activity_id=SEARCH,
            name="web_search",
            state="completed",
            response_id=FIRST,
            summary="3 results",
            payload=_payload(
                {"type": "web_search_tool_result", "tool_use_id": SEARCH, "content": results},
                version=SEARCH_VERSION,
            ),
        ),
        AssistantText(
            response_id=FIRST,
            text="Chazen-an near Byōdō-in serves thick koicha with seasonal wagashi 🍵",
            attributions=(
                Attribution(
                    source=SOURCE,
                    excerpt=EXCERPT,
                    replay=ProviderPayload.of(
                        "anthropic", "citation", json.dumps(citation).encode()
                    ),
                ),
            ),
        ),
        ToolCallRequested(
            response_id=FIRST,
            call_id=WEATHER,
            name="get_weather",
            arguments={"location": "Uji, Kyoto"},
        ),
        ResponseEnded(
            response_id=FIRST,
            state="completed",
            finish_reason="tool_use",
            stop_reason="tool_use",
            usage=Usage(input_tokens=9874, output_tokens=356, hosted={"web_search_requests": 1}),
        ),
    ]


def _second_response() -> list[Any]:
    answer = "Go to Chazen-an for koicha, and pack an umbrella: light rain is likely (70 %)."
    return [
        ResponseStarted(response_id=SECOND, provider="anthropic", model=MODEL, settings=SETTINGS),
        AssistantText(response_id=SECOND, text=answer),
        ResponseEnded(
            response_id=SECOND,
            state="completed",
            finish_reason="stop",
            stop_reason="end_turn",
            usage=Usage(input_tokens=10412, output_tokens=48),
        ),
    ]


def build(service: ConversationService) -> ConversationId:
    """Record the sample conversation; return its id."""
    conversation = service.start(TITLE_OF_CONVERSATION, list(LABELS))
    service.add_user_input(conversation, [UserMessage(blocks=(QUESTION,))])
    service.ingest(conversation, _first_response())
    service.add_user_input(
        conversation,
        [ToolCallResponded(call_id=WEATHER, content="Tomorrow: 14 °C, light rain (70 %)")],
    )
    service.ingest(conversation, _second_response())
    return conversation
