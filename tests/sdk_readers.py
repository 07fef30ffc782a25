"""Each provider's official SDK reading a capture served from 127.0.0.1, as a `Reading`.

The capture's recorded answer is served by a `ReplayServer` to the SDK's own client:
Anthropic's `beta.messages.stream(...).get_final_message()` (the beta types are a
superset: MCP blocks, containers) or `beta.messages.create`; OpenAI's
`responses.stream(...).get_final_response()` or `responses.create`; google-genai's
`models.generate_content_stream`, whose per-chunk parses `merge_chunks` joins (it has no
accumulated final message), or `models.generate_content`. An HTTP error body, or an error
the SDK raises mid-stream, becomes the reading's `error`; what the SDK had accumulated
until then stays in the reading.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import anthropic
import msgspec
import openai
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from tests.replay_server import Capture, ReplayServer, Reply
from tests.sdk_chat_reader import chat_reading
from tests.sdk_oracle import (
    Call,
    Cite,
    Consulted,
    Hosted,
    Reading,
    Thought,
    digest,
    flat_counters,
)

MODEL = "oracle-model"
"""The model named in the SDK's request (the server answers with the capture whatever it is)."""

_EVENTS = re.compile(rb"\r?\n\r?\n")


def _events(body: bytes) -> Iterator[bytes]:
    for event in _EVENTS.split(body):
        if event.strip():
            yield event


def with_event_names(body: bytes) -> bytes:
    """An Anthropic stream with an `event:` line on every event: the SDK skips events
    without one, and the corpus re-framed some streams without theirs (Anthropic's event
    name is always its data's `type`, so they are put back from it)."""
    framed = []
    for event in _events(body):
        lines = event.splitlines()
        if not any(line.startswith(b"event:") for line in lines):
            data = b"\n".join(line[5:].strip() for line in lines if line.startswith(b"data:"))
            kind = json.loads(data).get("type") if data else None
            if isinstance(kind, str):
                lines.insert(0, b"event: " + kind.encode())
        framed.append(b"\n".join(lines))
    return b"\n\n".join(framed) + b"\n\n"


def as_sse(body: bytes) -> bytes:
    """Gemini's JSON-array stream (`streamGenerateContent` without `alt=sse`) as the SSE
    stream the SDK asks for, each element's bytes unchanged (one `data:` line per line of
    a pretty-printed element: SSE joins them back with newlines)."""
    chunks = msgspec.json.decode(body, type=list[msgspec.Raw])
    return b"".join(
        b"".join(b"data: " + line + b"\n" for line in bytes(chunk).splitlines()) + b"\n"
        for chunk in chunks
    )


def _served(capture: Capture, body: bytes, content_type: str) -> ReplayServer:
    server = ReplayServer()
    server.enqueue(Reply(status=capture.status, body=body, content_type=content_type))
    return server


# --- Anthropic ------------------------------------------------------------------------------------


def _anthropic_error(error: anthropic.APIStatusError) -> tuple[str, str]:
    body = error.body if isinstance(error.body, Mapping) else {}
    detail = body.get("error", body)
    return str(detail.get("type", "")), str(detail.get("message", ""))


def anthropic_reading(capture: Capture) -> Reading:
    """The `anthropic` SDK's reading of the capture."""
    body = with_event_names(capture.body) if capture.streamed else capture.body
    kind = "text/event-stream" if capture.streamed else capture.content_type
    message: Any = None
    error: tuple[str, str] | None = None
    request: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 1,
        "messages": [{"role": "user", "content": "oracle"}],
    }
    with _served(capture, body, kind) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0)
        try:
            if capture.streamed:
                with client.beta.messages.stream(**request) as stream:
                    try:
                        message = stream.get_final_message()
                    except anthropic.APIStatusError as failed:
                        error = _anthropic_error(failed)
                        message = _snapshot(stream)
            else:
                message = client.beta.messages.create(**request)
        except anthropic.APIStatusError as failed:
            error = _anthropic_error(failed)
    reading = Reading(error=error) if message is None else _anthropic_message(message)
    reading.error = error
    return reading


def _snapshot(stream: Any) -> Any:
    try:
        return stream.current_message_snapshot
    except AssertionError:  # the error came before `message_start`
        return None


def _anthropic_message(message: Any) -> Reading:
    reading = Reading(
        stop_reason=message.stop_reason,
        usage=flat_counters(message.usage.model_dump(mode="json")),
    )
    results = {
        block.tool_use_id: block.type
        for block in message.content
        if block.type.endswith("_tool_result")
    }
    uses: set[str] = set()
    for block in message.content:
        kind = block.type
        if kind == "text":
            block_index = len(reading.texts)
            reading.texts.append(block.text)
            reading.citations.extend(
                Cite(
                    block_index,
                    getattr(c, "url", None)
                    or getattr(c, "source", None)
                    or getattr(c, "file_id", None),
                    getattr(c, "title", None) or getattr(c, "document_title", None),
                    c.cited_text,
                )
                for c in block.citations or ()
            )
        elif kind == "thinking":
            reading.reasoning.append(Thought(block.thinking, digest(block.signature)))
        elif kind == "redacted_thinking":
            reading.reasoning.append(Thought("", digest(block.data)))
        elif kind == "tool_use":
            reading.calls.append(Call(block.id, block.name, block.input))
        elif kind in ("server_tool_use", "mcp_tool_use"):
            name = (
                block.name if kind == "server_tool_use" else f"mcp:{block.server_name}/{block.name}"
            )
            uses.add(block.id)
            reading.hosted.append(Hosted(block.id, name, block.id in results))
        if kind == "web_search_tool_result" and isinstance(block.content, list):
            reading.sources.extend(
                Consulted(block.tool_use_id, result.url, result.title) for result in block.content
            )
        if kind.endswith("_tool_result") and block.tool_use_id not in uses:
            # the result of a use made in an earlier response (e.g. after `pause_turn`);
            # an MCP result does not name its tool
            name = None if kind == "mcp_tool_result" else kind.removesuffix("_tool_result")
            reading.hosted.append(Hosted(block.tool_use_id, name, True))
    return reading


# --- OpenAI ---------------------------------------------------------------------------------------

OPENAI_CLIENT_CALLS: Mapping[str, str] = {
    "computer_call": "computer",
    "local_shell_call": "local_shell",
    "shell_call": "shell",
    "apply_patch_call": "apply_patch",
}
"""Client-run items other than function and custom tool calls, and the tool they name."""

OPENAI_HOSTED: Mapping[str, Callable[[Any], str]] = {
    "web_search_call": lambda item: "web_search",
    "file_search_call": lambda item: "file_search",
    "code_interpreter_call": lambda item: "code_interpreter",
    "image_generation_call": lambda item: "image_generation",
    "tool_search_call": lambda item: "tool_search",
    "mcp_call": lambda item: f"mcp:{item.server_label}/{item.name}",
    "mcp_list_tools": lambda item: f"mcp:{item.server_label}/tools/list",
    "mcp_approval_request": lambda item: f"mcp:{item.server_label}/{item.name}",
}
"""Provider-run output items and the activity name each is read as."""

RUNNING = frozenset({"in_progress", "searching", "interpreting", "generating", "calling"})


def _openai_error(error: openai.APIStatusError) -> tuple[str, str]:
    body = error.body if isinstance(error.body, Mapping) else {}
    return str(body.get("type") or body.get("code") or ""), str(body.get("message", ""))


def openai_reading(capture: Capture) -> Reading:
    """The `openai` SDK's reading of the capture."""
    response: Any = None
    error: tuple[str, str] | None = None
    kept: dict[str, str | None] = {}
    partial: dict[tuple[int, int], str] = {}
    with _served(capture, capture.body, capture.content_type) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="test", max_retries=0)
        try:
            if capture.streamed:
                with client.responses.stream(model=MODEL, input="oracle") as stream:
                    for event in stream:
                        kind = event.type
                        if kind == "response.output_item.done" and event.item.type == "reasoning":
                            kept[event.item.id] = event.item.encrypted_content
                        elif kind == "response.output_text.delta":
                            partial[event.output_index, event.content_index] = event.snapshot
                        elif kind in ("response.failed", "response.incomplete"):
                            response = event.response
                        elif kind == "error":
                            error = (event.code or "", event.message)
                    if response is None and error is None:
                        response = stream.get_final_response()
            else:
                response = client.responses.create(model=MODEL, input="oracle")
        except openai.APIStatusError as failed:
            error = _openai_error(failed)
    if response is None:  # cut by an `error` event: what the SDK accumulated
        return Reading(texts=[partial[key] for key in sorted(partial)], error=error)
    reading = _openai_response(response, kept)
    failure = response.error
    if failure is not None:  # its type where it gives one (as HTTP error bodies do), else its code
        kind = getattr(failure, "type", None) or failure.code
        reading.error = (str(kind), failure.message)
    return reading


def _openai_response(response: Any, kept: Mapping[str, str | None]) -> Reading:
    status = response.status
    incomplete = response.incomplete_details
    usage = {} if response.usage is None else flat_counters(response.usage.model_dump(mode="json"))
    if response.tool_usage is not None:
        usage.update(flat_counters(response.tool_usage.model_dump(mode="json"), "tool_usage."))
    reading = Reading(
        stop_reason=incomplete.reason if status == "incomplete" and incomplete else status,
        usage=usage,
    )
    for item in response.output:
        kind = item.type
        if kind == "message":
            _openai_message(item, reading)
        elif kind == "reasoning":
            summary = "\n\n".join(part.text for part in item.summary or ())
            text = summary or "".join(part.text for part in item.content or ())
            # The SDK is wrong here: its final object keeps `response.completed`'s
            # encrypted_content, while OpenAI documents `output_item.done`'s as the one to keep.
            reading.reasoning.append(
                Thought(text, digest(kept.get(item.id, item.encrypted_content)))
            )
        elif kind == "function_call":
            reading.calls.append(Call(item.call_id, item.name, _arguments(item.arguments)))
        elif kind == "custom_tool_call":
            reading.calls.append(Call(item.call_id, item.name, {"input": item.input}))
        elif kind == "shell_call" and _in_container(item):  # OpenAI runs it, answers it
            finished = item.status not in RUNNING
            reading.hosted.append(Hosted(item.call_id, "shell", finished))
        elif kind == "tool_search_call" and item.execution == "client":
            arguments = item.arguments
            parsed = _arguments(arguments) if isinstance(arguments, str) else arguments
            reading.calls.append(Call(item.call_id, "tool_search", parsed))
        elif kind in OPENAI_CLIENT_CALLS:
            reading.calls.append(Call(item.call_id, OPENAI_CLIENT_CALLS[kind]))
        elif kind in OPENAI_HOSTED:
            # an approval request awaits the client; an approved call continues its activity
            status = getattr(item, "status", None)
            finished = kind != "mcp_approval_request" and status not in RUNNING
            activity = getattr(item, "approval_request_id", None) or item.id
            reading.hosted.append(Hosted(activity, OPENAI_HOSTED[kind](item), finished))
            action = getattr(item, "action", None)
            reading.sources.extend(
                Consulted(item.id, source.url, None)
                for source in getattr(action, "sources", None) or ()
                if getattr(source, "url", None)
            )
    return reading


def _in_container(item: Any) -> bool:
    environment = getattr(item, "environment", None)
    return getattr(environment, "type", None) == "container_reference"


def _arguments(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments else {}
    except ValueError:
        return arguments


def _openai_message(item: Any, reading: Reading) -> None:
    for part in item.content:
        if part.type == "refusal":  # shown as the response's text (its finish_reason says refusal)
            reading.texts.append(part.refusal)
            continue
        if part.type != "output_text":
            continue
        block, text = len(reading.texts), part.text
        reading.texts.append(text)
        for note in part.annotations or ():
            if note.type == "url_citation":
                cited = text[note.start_index : note.end_index]
                reading.citations.append(Cite(block, note.url, note.title, cited))
            elif note.type == "container_file_citation":
                cited = text[note.start_index : note.end_index]
                reading.citations.append(Cite(block, note.file_id, note.filename, cited))
            elif note.type in ("file_citation", "file_path"):
                title = getattr(note, "filename", None)
                reading.citations.append(Cite(block, note.file_id, title, f"@{note.index}"))


# --- Gemini ---------------------------------------------------------------------------------------


def _model_of(capture: Capture) -> str:
    found = re.search(r"models/([^/:]+):", capture.path)
    return found.group(1) if found else MODEL


def gemini_reading(capture: Capture) -> Reading:
    """The `google-genai` SDK's reading of the capture (its chunks merged)."""
    streamed = capture.streamed or "streamGenerateContent" in capture.path
    body, kind = capture.body, capture.content_type
    if streamed and not capture.streamed and capture.status < 400:
        body, kind = as_sse(capture.body), "text/event-stream"
    chunks: list[genai_types.GenerateContentResponse] = []
    error: tuple[str, str] | None = None
    with _served(capture, body, kind) as server:
        options = genai_types.HttpOptions(base_url=server.url)
        client = genai.Client(api_key="test", http_options=options)
        try:
            if streamed:
                for chunk in client.models.generate_content_stream(
                    model=_model_of(capture), contents="oracle"
                ):
                    chunks.append(chunk)
            else:
                chunks.append(
                    client.models.generate_content(model=_model_of(capture), contents="oracle")
                )
        except genai_errors.APIError as failed:
            error = (str(failed.status or failed.code), str(failed.message or ""))
    reading = merged_reading(chunks)
    reading.error = error
    return reading


TOOL_TYPES: Mapping[str, str] = {
    "GOOGLE_SEARCH_WEB": "web_search",
    "GOOGLE_SEARCH_IMAGE": "image_search",
    "URL_CONTEXT": "url_context",
    "GOOGLE_MAPS": "google_maps",
    "FILE_SEARCH": "file_search",
}
"""A server-side `toolCall`'s type and the activity name it is read as."""


def merge_chunks(chunks: Iterable[genai_types.GenerateContentResponse]) -> dict[str, Any]:
    """The SDK's per-chunk parses of one streamed answer joined into one candidate: its
    parts in order (a function call streamed as `partialArgs` assembled into one call),
    and the last finish reason, grounding and URL metadata, usage and prompt feedback."""
    merged: dict[str, Any] = {"parts": [], "finish": None, "grounding": None, "urls": None}
    merged.update(usage=None, feedback=None)
    streaming: genai_types.FunctionCall | None = None
    for chunk in chunks:
        merged["usage"] = chunk.usage_metadata or merged["usage"]
        merged["feedback"] = chunk.prompt_feedback or merged["feedback"]
        for candidate in chunk.candidates or ():
            merged["finish"] = candidate.finish_reason or merged["finish"]
            grounding = candidate.grounding_metadata
            if grounding is not None and grounding.model_dump(exclude_none=True):
                merged["grounding"] = grounding
            merged["urls"] = candidate.url_context_metadata or merged["urls"]
            for part in candidate.content.parts or () if candidate.content else ():
                streaming = _add_part(merged["parts"], part, streaming)
    return merged


def _add_part(
    parts: list[Any], part: genai_types.Part, streaming: genai_types.FunctionCall | None
) -> genai_types.FunctionCall | None:
    """Append one part; returns the function call still streaming its arguments."""
    call = part.function_call
    if call is None:
        parts.append(part)
        return streaming
    if streaming is not None and not call.name:  # the next piece of the open call
        _apply_partial_args(streaming, call.partial_args or ())
    else:
        streaming = call.model_copy(deep=True)
        if call.partial_args:
            streaming.args = dict(call.args or {})
            _apply_partial_args(streaming, call.partial_args)
            streaming.partial_args = None
        parts.append(genai_types.Part(function_call=streaming))
    return streaming if call.will_continue else None


_PATH = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]|\['([^']*)'\]")


def _apply_partial_args(
    call: genai_types.FunctionCall, pieces: Iterable[genai_types.PartialArg]
) -> None:
    args: dict[str, Any] = call.args if call.args is not None else {}
    call.args = args
    for piece in pieces:
        steps = [
            name or (int(index) if index else quoted)
            for name, index, quoted in _PATH.findall(piece.json_path or "")
        ]
        value: Any = (
            piece.string_value
            if piece.string_value is not None
            else piece.number_value
            if piece.number_value is not None
            else piece.bool_value
        )
        _set_path(args, steps, value, append=piece.string_value is not None)


def _set_path(root: Any, steps: list[Any], value: Any, *, append: bool) -> None:
    holder = root
    for step, following in itertools.pairwise(steps):
        empty: Any = [] if isinstance(following, int) else {}
        if isinstance(holder, list):
            while len(holder) <= step:
                holder.append(None)
            holder[step] = empty if holder[step] is None else holder[step]
        else:
            holder.setdefault(step, empty)
        holder = holder[step]
    last = steps[-1]
    if isinstance(holder, list):
        while len(holder) <= last:
            holder.append(None)
        current = holder[last]
    else:
        current = holder.get(last)
    joined = current + value if append and isinstance(current, str) else value
    holder[last] = joined


def merged_reading(chunks: Iterable[genai_types.GenerateContentResponse]) -> Reading:
    """The reading of a Gemini answer from the SDK's parses of its chunks."""
    merged = merge_chunks(chunks)
    parts = merged["parts"]
    visible = "".join(p.text for p in parts if p.text is not None and not p.thought)
    thought = "".join(p.text for p in parts if p.text is not None and p.thought)
    finish, feedback = merged["finish"], merged["feedback"]
    stop = finish or (feedback.block_reason if feedback is not None else None)
    usage = merged["usage"]
    consulted: list[Consulted] = []
    reading = Reading(
        texts=[visible] if visible else [],
        reasoning=[Thought(thought)] if thought else [],
        calls=[
            Call(p.function_call.id, p.function_call.name or "", p.function_call.args or {})
            for p in parts
            if p.function_call is not None
        ],
        hosted=_gemini_hosted(parts, merged, consulted),
        sources=consulted,
        citations=_grounded(visible, merged["grounding"]),
        stop_reason=None if stop is None else str(getattr(stop, "value", stop)),
        usage={}
        if usage is None
        else flat_counters(usage.model_dump(mode="json", by_alias=True, exclude_none=True)),
    )
    return reading


def _gemini_hosted(
    parts: list[Any], merged: Mapping[str, Any], sources: list[Consulted]
) -> list[Hosted]:
    """The hosted activities of a Gemini answer; the sources its search lists go to
    `sources`."""
    hosted: list[Hosted] = []
    code: dict[str | None, int] = {}
    answered = {p.tool_response.id for p in parts if p.tool_response is not None}
    for part in parts:
        if part.executable_code is not None:
            key = getattr(part.executable_code, "id", None)
            code[key] = len(hosted)
            hosted.append(Hosted(key, "code_execution", False))
        elif part.code_execution_result is not None:
            key = getattr(part.code_execution_result, "id", None)
            at = code.get(key, code.get(None) if key is None else None)
            if at is None:
                hosted.append(Hosted(key, "code_execution", True))
            else:
                hosted[at] = Hosted(hosted[at].id, "code_execution", True)
        elif part.tool_call is not None:
            call = part.tool_call
            kind = str(getattr(call.tool_type, "value", call.tool_type) or "")
            name = TOOL_TYPES.get(kind, kind.lower())
            hosted.append(Hosted(call.id, name, call.id in answered))
    grounding = merged["grounding"]
    if grounding is not None and (grounding.web_search_queries or grounding.search_entry_point):
        hosted.append(Hosted(None, "web_search", True))
        sources.extend(
            Consulted(None, chunk.web.uri, chunk.web.title)
            for chunk in grounding.grounding_chunks or ()
            if chunk.web is not None
        )
    if merged["urls"] is not None:
        hosted.append(Hosted(None, "url_context", True))
    return hosted


def _grounded(visible: str, grounding: Any) -> list[Cite]:
    """Each grounding support's sources with the text its UTF-8 byte offsets (over the
    visible text parts joined) point at; None where they do not fit: out of the text, cut
    inside a character, or not the segment's own `text`."""
    if grounding is None:
        return []
    data = visible.encode()
    sources = grounding.grounding_chunks or []
    cites = []
    for support in grounding.grounding_supports or ():
        segment = support.segment
        start = (segment.start_index or 0) if segment else 0
        end = (segment.end_index or 0) if segment else 0
        try:
            pointed: str | None = (
                data[start:end].decode() if 0 <= start <= end <= len(data) else None
            )
        except UnicodeDecodeError:
            pointed = None
        if segment is not None and segment.text is not None and pointed != segment.text:
            pointed = None  # the offsets contradict the provider's own segment text
        for index in support.grounding_chunk_indices or ():
            source = sources[index] if 0 <= index < len(sources) else None
            place = None if source is None else source.web or source.retrieved_context
            uri = getattr(place, "uri", None)
            cites.append(Cite(0, uri, getattr(place, "title", None), pointed))
    return sorted(cites, key=repr)


READERS: Mapping[str, Callable[[Capture], Reading]] = {
    "anthropic": anthropic_reading,
    "openai": openai_reading,
    "google": gemini_reading,
    "openai-chat": chat_reading,
}
"""Each provider's SDK reader."""
