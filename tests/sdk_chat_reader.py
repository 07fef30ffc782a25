"""The `openai` SDK's Chat Completions types reading a capture served from 127.0.0.1.

A non-streamed capture is read by `chat.completions.create` as one `ChatCompletion`; a
streamed one by `chat.completions.create(stream=True)`, each chunk parsed by the SDK as a
`ChatCompletionChunk` and joined here by the documented rules (content, refusal and
reasoning pieces concatenate; a tool call's fragments join by its `index`; annotations and
`reasoning_details` append). The SDK's own accumulator (`ChatCompletionStreamState`) is not
used: it refuses list entries without an `index`, which streamed `annotations` are. Only
choice 0 is read: convstore records it as the answer (the others are kept whole). An HTTP
error body, or an error chunk the SDK raises mid-stream, becomes the reading's `error`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import openai

from tests.replay_server import Capture, ReplayServer, Reply
from tests.sdk_oracle import Call, Cite, Reading, Thought, flat_counters

MODEL = "oracle-model"
_DONE = b"data: [DONE]"


def _arguments(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return text


def _error(error: openai.APIError) -> tuple[str, str]:
    body = error.body
    if isinstance(body, str):
        return "error", body
    body = body if isinstance(body, Mapping) else {}
    kind = body.get("type") or body.get("code") or ""
    return str(kind), str(body.get("message", ""))


def _numbered(reading: Reading, extra: Mapping[str, Any] | None) -> None:
    """Perplexity's top-level `citations` (the SDK keeps them as extra fields): the source
    its `[n]` marker numbers, at the point the marker stands (`@pos`), titled from
    `search_results`."""
    citations = (extra or {}).get("citations")
    if not isinstance(citations, list) or not reading.texts:
        return
    results = (extra or {}).get("search_results") or []
    titles = {r.get("url"): r.get("title") for r in results if isinstance(r, dict)}
    text = reading.texts[0]
    for number, url in enumerate(citations, start=1):
        at = text.find(f"[{number}]")
        reading.citations.append(Cite(0, url, titles.get(url), f"@{at}" if at >= 0 else None))


def _message_reading(message: Mapping[str, Any], finish: str | None, usage: Any) -> Reading:
    reading = Reading(stop_reason=finish, usage=flat_counters(usage) if usage else {})
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if not reasoning:
        details = message.get("reasoning_details") or []
        reasoning = "".join(d.get("text") or "" for d in details if isinstance(d, dict))
    if reasoning:
        reading.reasoning.append(Thought(reasoning))
    content = message.get("content")
    if isinstance(content, str) and content:
        reading.texts.append(content)
        for note in message.get("annotations") or ():
            if note.get("type") == "url_citation":
                cited = note["url_citation"]
                text = content[cited["start_index"] : cited["end_index"]]
                fits = 0 <= cited["start_index"] <= cited["end_index"] <= len(content)
                reading.citations.append(
                    Cite(0, cited.get("url"), cited.get("title"), text if fits else None)
                )
    if message.get("refusal"):
        reading.texts.append(message["refusal"])
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        reading.calls.append(
            Call(
                call.get("id"), function.get("name", ""), _arguments(function.get("arguments", ""))
            )
        )
    return reading


def _joined(chunks: list[Any]) -> tuple[dict[str, Any], str | None, Any]:
    """Choice 0's message joined from the SDK's parsed chunks, its finish reason, usage."""
    message: dict[str, Any] = {}
    calls: dict[int, dict[str, Any]] = {}
    finish, usage = None, None
    for chunk in chunks:
        if chunk.usage is not None:
            usage = chunk.usage.model_dump(mode="json")
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta.model_dump(mode="json")
            for name in ("content", "refusal", "reasoning_content", "reasoning"):
                if isinstance(delta.get(name), str):
                    message[name] = message.get(name, "") + delta[name]
            for name in ("annotations", "reasoning_details"):
                if isinstance(delta.get(name), list):
                    message.setdefault(name, []).extend(delta[name])
            for call in choice.delta.tool_calls or ():
                into = calls.setdefault(call.index, {"function": {"name": "", "arguments": ""}})
                if call.id:
                    into["id"] = call.id
                if call.function is not None:
                    into["function"]["name"] += call.function.name or ""
                    into["function"]["arguments"] += call.function.arguments or ""
            finish = choice.finish_reason or finish
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    details = message.get("reasoning_details")
    if details:  # pieces of one detail share its index: their text joined
        merged: dict[Any, dict[str, Any]] = {}
        for piece in details:
            into = merged.setdefault(piece.get("index"), {"text": ""})
            into["text"] += piece.get("text") or ""
        message["reasoning_details"] = list(merged.values())
    return message, finish, usage


def chat_reading(capture: Capture) -> Reading:
    """The `openai` SDK's Chat Completions reading of the capture."""
    server = ReplayServer()
    server.enqueue(
        Reply(status=capture.status, body=capture.body, content_type=capture.content_type)
    )
    with server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="test", max_retries=0)
        messages: Any = [{"role": "user", "content": "oracle"}]
        chunks: list[Any] = []
        try:
            if capture.streamed:
                for chunk in client.chat.completions.create(
                    model=MODEL, messages=messages, stream=True
                ):
                    chunks.append(chunk)
            else:
                completion = client.chat.completions.create(model=MODEL, messages=messages)
                choice = completion.choices[0]
                usage = (
                    None if completion.usage is None else completion.usage.model_dump(mode="json")
                )
                reading = _message_reading(
                    choice.message.model_dump(mode="json"), choice.finish_reason, usage
                )
                _numbered(reading, completion.model_dump(mode="json"))
                return reading
        except openai.APIError as failed:
            message, _, usage = _joined(chunks)
            reading = _message_reading(message, None, None)
            return Reading(texts=reading.texts, error=_error(failed))
    message, finish, usage = _joined(chunks)
    if finish is None and _DONE not in capture.body:  # cut short: what arrived
        reading = _message_reading(message, None, None)
        return Reading(
            texts=reading.texts, error=("incomplete_stream", "the stream ended before [DONE]")
        )
    reading = _message_reading(message, finish, usage)
    _numbered(reading, chunks[-1].model_dump(mode="json") if chunks else None)
    return reading
