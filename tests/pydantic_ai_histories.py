"""Message histories written by the real pydantic-ai (pydantic-ai-slim), for the import
and export tests: one built part by part with every kind we read, and agent runs on a
`FunctionModel` (offline), continued to make a longer history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

T0 = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
ANTHROPIC_SIGNATURE = "RXVjbGlkZWFuIHNpZ25hdHVyZQ=="
REDACTED_DATA = "cmVkYWN0ZWQgdGhpbmtpbmc="
OPENAI_ENCRYPTED = "Z0FBQUFBQm9fZW5jcnlwdGVk"
GOOGLE_SIGNATURE = "Q2lRQmh0aG91Z2h0"


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def every_kind() -> list[ModelMessage]:
    """A history with every part kind the importer reads (and two it does not carry)."""
    return [
        ModelRequest(
            parts=[
                SystemPromptPart(content="You are a concise travel assistant.", timestamp=at(0)),
                UserPromptPart(
                    content=[
                        "What is the weather in Paris, and what should I pack?",
                        ImageUrl(url="https://example.com/suitcase.png"),
                    ],
                    timestamp=at(0),
                ),
            ],
            timestamp=at(0),
        ),
        ModelResponse(
            parts=[
                ThinkingPart(
                    content="I should search for the forecast first.",
                    signature=ANTHROPIC_SIGNATURE,
                    provider_name="anthropic",
                ),
                ThinkingPart(
                    content="",
                    id="redacted_thinking",
                    signature=REDACTED_DATA,
                    provider_name="anthropic",
                ),
                NativeToolCallPart(
                    tool_name="web_search",
                    args={"query": "Paris weather forecast"},
                    tool_call_id="srvtoolu_01",
                    provider_name="anthropic",
                ),
                NativeToolReturnPart(
                    tool_name="web_search",
                    content=[
                        {"url": "https://example.com/paris", "title": "Paris forecast"},
                        {"url": "https://example.org/meteo", "title": "Météo"},
                    ],
                    tool_call_id="srvtoolu_01",
                    provider_name="anthropic",
                    timestamp=at(2),
                ),
                TextPart(content="Rain is likely; let me check the temperature."),
                ToolCallPart(
                    tool_name="get_temperature", args={"city": "Paris"}, tool_call_id="toolu_01"
                ),
            ],
            usage=RequestUsage(
                input_tokens=120,
                output_tokens=48,
                cache_read_tokens=100,
                cache_write_tokens=20,
                details={"web_search_requests": 1},
            ),
            model_name="claude-sonnet-4-5-20250929",
            provider_name="anthropic",
            provider_response_id="msg_01PydAiEveryKind",
            provider_details={"finish_reason": "tool_use"},
            finish_reason="tool_call",
            timestamp=at(3),
        ),
        ModelRequest(
            parts=[
                ToolReturnPart(
                    tool_name="get_temperature",
                    content={"celsius": 14},
                    tool_call_id="toolu_01",
                    timestamp=at(4),
                )
            ],
            timestamp=at(4),
        ),
        ModelResponse(
            parts=[
                ThinkingPart(
                    content="Summarise: rain, 14 °C.",
                    id="rs_01",
                    signature=OPENAI_ENCRYPTED,
                    provider_name="openai",
                ),
                ToolCallPart(
                    tool_name="packing_list", args='{"weather": "rain"}', tool_call_id="call_02"
                ),
            ],
            usage=RequestUsage(input_tokens=200, output_tokens=30, output_reasoning_tokens=12),
            model_name="gpt-5.1",
            provider_name="openai",
            provider_response_id="resp_02PydAi",
            finish_reason="tool_call",
            timestamp=at(5),
        ),
        ModelRequest(
            parts=[
                ToolReturnPart(
                    tool_name="packing_list",
                    content="unknown weather kind",
                    tool_call_id="call_02",
                    outcome="retried",
                    retry=RetryInfo(cause="model_retry", attempt=1, max_retries=2),
                    timestamp=at(6),
                ),
            ],
            timestamp=at(6),
        ),
        ModelResponse(
            parts=[
                ThinkingPart(
                    content="Answer plainly.",
                    signature=GOOGLE_SIGNATURE,
                    provider_name="google-gla",
                ),
                TextPart(content="Expect rain around 14 °C: pack a raincoat and layers."),
            ],
            usage=RequestUsage(input_tokens=260, output_tokens=22),
            model_name="gemini-2.5-flash",
            provider_name="google-gla",
            finish_reason="stop",
            timestamp=at(7),
        ),
        ModelRequest(
            parts=[
                RetryFeedbackPart(
                    content="Please answer in one sentence.",
                    retry=RetryInfo(cause="validation_error"),
                    timestamp=at(8),
                ),
            ],
            timestamp=at(8),
        ),
        ModelResponse(
            parts=[TextPart(content="Rain and 14 °C: a raincoat and layers.")],
            model_name="gemini-2.5-flash",
            provider_name="google-gla",
            finish_reason="stop",
            timestamp=at(9),
        ),
    ]


def weather_agent() -> Agent[None, str]:
    """An agent on a FunctionModel: it calls `get_weather` (once with arguments it is
    asked to retry), then answers from the tool's result."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns and returns[-1].outcome == "success":
            return ModelResponse(parts=[TextPart(f"It is {returns[-1].content}.")])
        city = "Paris" if not returns else "Paris, FR"
        return ModelResponse(
            parts=[
                ThinkingPart(content=f"look up {city}"),
                ToolCallPart("get_weather", {"city": city}),
            ]
        )

    agent: Agent[None, str] = Agent(FunctionModel(model), system_prompt="Be brief.")

    @agent.tool_plain
    def get_weather(city: str) -> str:
        if "," not in city:
            raise ModelRetry("name the country too")
        return "sunny"

    return agent


def agent_run() -> list[ModelMessage]:
    """One agent run's whole history."""
    return weather_agent().run_sync("Weather in Paris?").all_messages()


def continued(history: list[ModelMessage]) -> list[ModelMessage]:
    """`history` with one more run of the agent after it."""
    return weather_agent().run_sync("And tomorrow?", message_history=history).all_messages()


def write(path: Path, messages: list[ModelMessage]) -> Path:
    """The history as pydantic-ai writes it."""
    path.write_bytes(ModelMessagesTypeAdapter.dump_json(messages))
    return path
