"""Realistic conversation events, built with the domain vocabulary.

One Anthropic response with hosted web search and a client tool call becomes ten
events: ResponseStarted, Reasoning (thinking block with its signature), AssistantText
(preamble), HostedActivity started (the `server_tool_use` block) and completed (the
`web_search_tool_result` block with three results' `encrypted_content`), two cited
AssistantText blocks (with `encrypted_index` replay values) and a plain one,
ToolCallRequested (the `tool_use` block), and ResponseEnded with usage. Text varies from
event to event and opaque strings are base64 of random bytes, so nothing compresses or
repeats in a way that would flatter a figure. Everything is seeded: runs are reproducible.
"""

from __future__ import annotations

import base64
import hashlib
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from uuid import UUID

import orjson

from convstore.domain import (
    ActivityId,
    AssistantText,
    Attribution,
    CallId,
    Conversation,
    ConversationId,
    Event,
    HostedActivity,
    ProviderPayload,
    Reasoning,
    RequestSettings,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    Source,
    Started,
    TextRange,
    ToolCallRequested,
    ToolCallResponded,
    ToolDeclaration,
    TurnEnded,
    TurnId,
    TurnStarted,
    Usage,
    UserMessage,
)
from convstore.domain.writers import current_writer

MODEL = "claude-sonnet-4-5-20250929"
WRITER_ID = "0f6c2a9e4b1d4e8f"
"""The writer id the drafts carry: a process's hold id, as `service.writer` records it."""
RESPONSE_EVENTS = 10
"""Events one `response` yields."""

_TEXT = (
    "matcha tea Uji Kyoto garden river shaded leaves harvest spring ceremony bowl whisk "
    "koicha usucha wagashi seasonal family cafe temple station market roast grade "
    "ceremonial culinary bitter sweet umami grassy smooth foam water temperature minutes "
    "weather forecast rain umbrella jacket morning evening wind humidity degrees percent "
    "search results source article guide list review local traveller history century "
    "between near along first planted prized famous quiet crowded open closed weekend "
    "the a of and to in for with on at from by about that this it is was are be can "
    "will would should could may might also however because therefore while although"
)
_WORDS = tuple(_TEXT.split())

_DOMAINS = ("travel.example.com", "www.example.org", "blog.example.net", "news.example.io")


def _opaque(rng: random.Random, size: int) -> str:
    return base64.b64encode(rng.randbytes(size * 3 // 4)).decode("ascii")


def _ident(rng: random.Random, prefix: str) -> str:
    return prefix + base64.b32encode(rng.randbytes(15)).decode("ascii").lower()


def _sentence(rng: random.Random, words: int) -> str:
    chosen = [rng.choice(_WORDS) for _ in range(words)]
    if rng.random() < 0.3:
        chosen.insert(rng.randrange(len(chosen)), str(rng.randrange(1, 2000)))
    return " ".join(chosen).capitalize() + rng.choice((".", ".", "!", "?", ";"))


def paragraph(rng: random.Random, sentences: int) -> str:
    """A few sentences of varied text."""
    return " ".join(_sentence(rng, rng.randint(6, 18)) for _ in range(sentences))


def _payload(block: dict[str, object]) -> ProviderPayload:
    return ProviderPayload.of(
        "anthropic",
        "content_block",
        orjson.dumps(block),
        version="2023-06-01",
        binding={"model": MODEL},
    )


_SETTINGS = RequestSettings(
    system="You are a helpful travel assistant. Cite your sources. Answer concisely.",
    tools=(
        ToolDeclaration(name="web_search", hosted=True, native_type="web_search_20250305"),
        ToolDeclaration(
            name="get_weather",
            description="Get the weather forecast for a city.",
            input_schema={
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        ),
    ),
    tool_choice="auto",
    max_tokens=4096,
)


def response(rng: random.Random, *, tool_call: bool = True) -> list[Event]:
    """One response's drafts (ten of them, nine without the client tool call)."""
    rid = ResponseId(_ident(rng, "msg_"))
    activity = ActivityId(_ident(rng, "srvtoolu_"))
    query = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 7)))
    thinking = paragraph(rng, rng.randint(2, 5))
    results = [
        {
            "type": "web_search_result",
            "url": f"https://{rng.choice(_DOMAINS)}/{rng.choice(_WORDS)}/{_ident(rng, '')}",
            "title": _sentence(rng, rng.randint(4, 9)),
            "encrypted_content": _opaque(rng, rng.randint(300, 700)),
            "page_age": f"{rng.randint(1, 28)} days ago",
        }
        for _ in range(3)
    ]
    drafts: list[Event] = [
        ResponseStarted(
            response_id=rid,
            provider="anthropic",
            model=MODEL,
            settings=_SETTINGS,
            writer=current_writer(WRITER_ID),
        ),
        Reasoning(
            response_id=rid,
            text=thinking,
            payload=_payload(
                {"type": "thinking", "thinking": thinking, "signature": _opaque(rng, 400)}
            ),
        ),
        AssistantText(response_id=rid, text=_sentence(rng, rng.randint(6, 12))),
        HostedActivity(
            activity_id=activity,
            name="web_search",
            state="started",
            response_id=rid,
            input={"query": query},
            payload=_payload(
                {
                    "type": "server_tool_use",
                    "id": activity,
                    "name": "web_search",
                    "input": {"query": query},
                }
            ),
        ),
        HostedActivity(
            activity_id=activity,
            name="web_search",
            state="completed",
            response_id=rid,
            summary=f"{len(results)} results",
            payload=_payload(
                {"type": "web_search_tool_result", "tool_use_id": activity, "content": results}
            ),
        ),
    ]
    for result in results[:2]:
        text = paragraph(rng, rng.randint(1, 3))
        cited = _sentence(rng, rng.randint(10, 25))
        citation = {
            "type": "web_search_result_location",
            "url": result["url"],
            "title": result["title"],
            "cited_text": cited,
            "encrypted_index": _opaque(rng, rng.randint(100, 160)),
        }
        drafts.append(
            AssistantText(
                response_id=rid,
                text=text,
                attributions=(
                    Attribution(
                        source=Source(
                            kind="web", url=str(result["url"]), title=str(result["title"])
                        ),
                        excerpt=cited,
                        range=TextRange(0, len(text)),
                        replay=ProviderPayload.of(
                            "anthropic", "citation", orjson.dumps(citation), version="2023-06-01"
                        ),
                    ),
                ),
            )
        )
    drafts.append(AssistantText(response_id=rid, text=paragraph(rng, rng.randint(1, 4))))
    if tool_call:
        call = CallId(_ident(rng, "toolu_"))
        arguments = {"city": rng.choice(("Uji", "Kyoto", "Nara", "Osaka")), "days": 3}
        drafts.append(
            ToolCallRequested(
                response_id=rid,
                call_id=call,
                name="get_weather",
                arguments=arguments,
                payload=_payload(
                    {"type": "tool_use", "id": call, "name": "get_weather", "input": arguments}
                ),
            )
        )
    digest = hashlib.sha256(rid.encode()).hexdigest()
    drafts.append(
        ResponseEnded(
            response_id=rid,
            state="completed",
            finish_reason="tool_use" if tool_call else "stop",
            stop_reason="tool_use" if tool_call else "end_turn",
            usage=Usage(
                input_tokens=rng.randint(500, 20_000),
                output_tokens=rng.randint(50, 2_000),
                cache_read_tokens=rng.randint(0, 10_000),
                hosted={"web_search_requests": 1},
            ),
            digest=digest,
        )
    )
    return drafts


def turn(rng: random.Random) -> list[Event]:
    """One turn: a question, a response calling a tool, its result, and the final answer."""
    tid = TurnId(_ident(rng, "turn_"))
    first = response(rng, tool_call=True)
    call = next(e for e in first if isinstance(e, ToolCallRequested))
    return [
        TurnStarted(turn_id=tid),
        UserMessage(blocks=(paragraph(rng, rng.randint(1, 3)),)),
        *first,
        ToolCallResponded(
            call_id=call.call_id,
            content=orjson.dumps(
                {"forecast": paragraph(rng, 1), "high": rng.randint(5, 30)}
            ).decode(),
        ),
        *response(rng, tool_call=False),
        TurnEnded(turn_id=tid),
    ]


def turns(seed: int) -> Iterator[list[Event]]:
    """An endless, reproducible sequence of turns."""
    rng = random.Random(seed)
    while True:
        yield turn(rng)


def responses(seed: int) -> Iterator[list[Event]]:
    """An endless, reproducible sequence of responses (ten events each)."""
    rng = random.Random(seed)
    while True:
        yield response(rng)


class FixedClock:
    """A deterministic clock, so two stores fed the same drafts hold the same bytes."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2025, 6, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=37)
        return self.now


def conversation_id(seed: int) -> ConversationId:
    """A reproducible conversation id."""
    return ConversationId(UUID(int=(0x5EED << 64) + seed))


def conversation(cid: ConversationId, title: str = "benchmark") -> Conversation:
    """A started conversation on a fixed clock, not saved yet."""
    started = Conversation(cid)
    started.clock = FixedClock()
    started.record(Started(title=title, labels=("benchmark",)))
    return started
