"""The state of one Chat Completions SSE stream, chunk by chunk.

Each `data:` line is a `chat.completion.chunk`; `data: [DONE]` ends the stream. The first
chunk with an id (or with choices) opens the response; chunks before it (Azure's first
chunk, with an empty id and `prompt_filter_results`) only bring response fields. Each
choice is assembled by the shared assembler, its message as block 0 and its tool calls
as blocks 1, 2, … (keyed by the tool call's `index`, or its position where a server sends
none): text fields (`content`, `refusal`, `reasoning_content`, `reasoning`, a call's
`arguments`) arrive as pieces joined once at close; `annotations` and
`reasoning_details` as items, the latter merged by their own `index`. A choice closes at
its `finish_reason` and is mapped then (`choice`).

The response completes at `[DONE]`, or at the end of a stream whose every choice
finished (some servers send no `[DONE]`); usage is read from the newest chunk that
carried it (every chunk, or only a final one with no choices when
`stream_options.include_usage` asked for it). A chunk carrying an `error` (OpenRouter,
vLLM) fails the response; a stream cut short, or broken by malformed JSON, abandons it.
Either way, what arrived is kept under the partial-commit rules of DESIGN.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

from convstore.adapters.openai_chat.choice import MESSAGE_FIELDS, Choice, ToolCall
from convstore.adapters.openai_chat.context import RequestContext
from convstore.adapters.openai_chat.response import (
    ResponseHead,
    derived_id,
    error_info,
    failed_response,
    reported_error,
)
from convstore.adapters.wire.assembler import AssembledBlock, OpenBlock, StreamAssembler
from convstore.domain.errors import DecodeError
from convstore.domain.events import Event
from convstore.domain.vocabulary import EndState, ErrorInfo, ResponseId

__all__ = ["MAX_EARLY_CHUNKS", "StreamDecoder"]

MAX_EARLY_CHUNKS: Final = 64
"""Chunks without an id or choices kept before the response opens; past that, the input
is no Chat Completions stream."""

_FIELDS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_CHOICES: Final = msgspec.json.Decoder(list[dict[str, msgspec.Raw]])
_ANY: Final = msgspec.json.Decoder()
_NULL: Final = b"null"
_DONE: Final = b"[DONE]"
_NOTHING: Final[Sequence[Event]] = ()
_NOISE: Final = frozenset({"obfuscation"})
"""Chunk fields that carry nothing to keep (OpenAI's padding against length analysis)."""
_CHOICE_FIELDS: Final = frozenset({"index", "delta", "message", "finish_reason", "logprobs"})


def _texts(name: str) -> Any:
    def apply(block: OpenBlock, piece: Any) -> bool:
        if not isinstance(piece, str):
            return False
        block.append_text(name, piece)
        return True

    return apply


def _items(name: str) -> Any:
    def apply(block: OpenBlock, items: Any) -> bool:
        if not isinstance(items, list):
            return False
        for item in items:
            block.append_item(name, item)
        return True

    return apply


APPLIERS: Final = {
    "content": _texts("content"),
    "refusal": _texts("refusal"),
    "reasoning_content": _texts("reasoning_content"),
    "reasoning": _texts("reasoning"),
    "annotations": _items("annotations"),
    "reasoning_details": _items("reasoning_details"),
    "call.name": _texts("name"),
    "call.arguments": _texts("arguments"),
}
"""Delta field (a tool call's: `call.<field>`) → how it applies to its block."""


def _kept(block: AssembledBlock) -> list[AssembledBlock]:
    return [block]


def merge_details(details: list[Any]) -> list[Any]:
    """Streamed `reasoning_details` pieces merged by their `index`: `text` and `summary`
    pieces joined, every other non-null field (a `signature`, `data`) taken as it came."""
    merged: dict[Any, dict[str, Any]] = {}
    order: list[Any] = []
    for position, piece in enumerate(details):
        if not isinstance(piece, dict):
            merged[("item", position)] = piece
            order.append(("item", position))
            continue
        key = piece.get("index", ("item", position))
        key = key if isinstance(key, int) else ("item", position)
        into = merged.get(key)
        if into is None:
            merged[key] = dict(piece)
            order.append(key)
            continue
        for name, value in piece.items():
            before = into.get(name)
            if name in ("text", "summary") and isinstance(value, str) and isinstance(before, str):
                into[name] = before + value
            elif value is not None:
                into[name] = value
    return [merged[key] for key in order]


class _ChoiceState:
    """One choice under assembly."""

    __slots__ = ("assembler", "calls", "choice_extras", "extras", "finish_reason", "logprobs")

    def __init__(self) -> None:
        self.assembler: StreamAssembler[AssembledBlock] = StreamAssembler(APPLIERS, _kept)
        self.assembler.start(0, {})
        self.calls = 0
        self.extras: dict[str, list[msgspec.Raw]] = {}
        self.choice_extras: dict[str, list[msgspec.Raw]] = {}
        self.logprobs: dict[str, list[Any]] | None = None
        self.finish_reason: str | None = None

    def delta(self, delta: Mapping[str, msgspec.Raw]) -> None:
        assembler = self.assembler
        for name, raw in delta.items():
            if bytes(raw) == _NULL:
                continue
            if name == "tool_calls":
                self._calls(raw)
            elif name in MESSAGE_FIELDS:
                if name != "role" and not assembler.delta(0, name, _value(raw)):
                    self.extras.setdefault(name, []).append(raw)
            else:
                self.extras.setdefault(name, []).append(raw)

    def _calls(self, raw: msgspec.Raw) -> None:
        calls = _value(raw)
        if not isinstance(calls, list):
            self.extras.setdefault("tool_calls", []).append(raw)
            return
        assembler = self.assembler
        for call in calls:
            if not isinstance(call, dict):
                continue
            index = call.get("index")
            slot = index + 1 if type(index) is int and index >= 0 else self.calls + 1
            block = assembler.block(slot)
            if block is None:
                start = {k: v for k, v in call.items() if k not in ("index", "function")}
                assembler.start(slot, start)
                self.calls = max(self.calls, slot)
            elif isinstance(call.get("id"), str) and call["id"] and not block.start.get("id"):
                block.set("id", call["id"])
            function = call.get("function")
            if isinstance(function, dict):
                for name in ("name", "arguments"):
                    piece = function.get(name)
                    if isinstance(piece, str):
                        assembler.delta(slot, f"call.{name}", piece)

    def fields(self, fields: Mapping[str, msgspec.Raw]) -> None:
        for name, raw in fields.items():
            if name in _CHOICE_FIELDS or bytes(raw) == _NULL:
                if name == "logprobs" and bytes(raw) != _NULL:
                    self._logprobs(raw)
                continue
            self.choice_extras.setdefault(name, []).append(raw)

    def _logprobs(self, raw: msgspec.Raw) -> None:
        value = _value(raw)
        if not isinstance(value, dict):
            self.choice_extras.setdefault("logprobs", []).append(raw)
            return
        joined = self.logprobs if self.logprobs is not None else {}
        self.logprobs = joined
        for name, items in value.items():
            if isinstance(items, list):
                joined.setdefault(name, []).extend(items)

    def close(self, index: int, *, complete: bool) -> Choice:
        blocks = self.assembler.finish(cut=not complete)
        message = dict(blocks[0].block)
        details = message.get("reasoning_details")
        if isinstance(details, list):
            message["reasoning_details"] = merge_details(details)
        calls = []
        for block in blocks[1:]:
            native = {k: v for k, v in block.block.items() if k not in ("name", "arguments")}
            native["function"] = {
                "name": block.block.get("name", ""),
                "arguments": block.block.get("arguments", ""),
            }
            calls.append(ToolCall(native, complete=block.complete))
        extras = {name: _one_or_list(values) for name, values in self.extras.items()}
        choice_extras = {name: _one_or_list(v) for name, v in self.choice_extras.items()}
        if self.logprobs is not None:
            choice_extras["logprobs"] = msgspec.Raw(msgspec.json.encode(self.logprobs))
        return Choice(
            index=index,
            message=message,
            tool_calls=calls,
            extras=extras,
            choice_extras=choice_extras,
            finish_reason=self.finish_reason,
            complete=complete,
        )


def _value(raw: msgspec.Raw) -> Any:
    try:
        return _ANY.decode(raw)
    except msgspec.DecodeError:
        return None


def _one_or_list(values: list[msgspec.Raw]) -> msgspec.Raw:
    """A field that came in one chunk as it came; in several, the list of its values."""
    if len(values) == 1:
        return values[0]
    return msgspec.Raw(b"[" + b",".join(bytes(v) for v in values) + b"]")


class StreamDecoder:
    """Turns the `data` of each SSE event into drafts; `done` once the response ended."""

    def __init__(self, context: RequestContext) -> None:
        self.context = context
        self.head: ResponseHead | None = None
        self.done = False
        self._early: list[dict[str, msgspec.Raw]] = []
        self._open: dict[int, _ChoiceState] = {}
        self._closed: set[int] = set()

    def feed(self, data: bytes) -> Sequence[Event]:
        """The drafts one chunk completes."""
        if self.done:
            return _NOTHING
        if data.strip() == _DONE:
            if self.head is None:
                raise DecodeError("not a Chat Completions stream: [DONE] before any chunk")
            return self._close("completed")
        try:
            fields = _FIELDS.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as error:
            return self.end("malformed_stream", f"malformed JSON in a chunk: {error}")
        for name in _NOISE & fields.keys():
            del fields[name]
        reported = reported_error(fields)
        if reported is not None:
            info = error_info(reported)
            if self.head is None:
                self.done = True
                return failed_response(derived_id(data.strip()), self.context, info)
            self.head.update({k: v for k, v in fields.items() if k != "error"})
            return self._close("failed", info)
        try:
            choices = _CHOICES.decode(fields["choices"]) if "choices" in fields else []
        except (msgspec.DecodeError, msgspec.ValidationError):
            choices = None
        out: list[Event] = []
        if self.head is None:
            response_id = _value(fields["id"]) if "id" in fields else None
            if not (isinstance(response_id, str) and response_id) and not choices:
                return self._early_chunk(fields)
            if not isinstance(response_id, str) or not response_id:
                response_id = derived_id(data.strip())
            out.extend(self._open_response(ResponseId(response_id), fields))
        else:
            self.head.update(fields)
        if choices is None:
            out.append(self._unknown(data.strip(), "stream_chunk"))
            return out
        for choice in choices:
            out.extend(self._choice(choice))
        return out

    def _unknown(self, value: bytes, fmt: str) -> Event:
        """A chunk (or part of one) kept as it came: its choices were not a list."""
        assert self.head is not None
        return self.head.mapper.unknown_value(value, fmt)

    def _early_chunk(self, fields: dict[str, msgspec.Raw]) -> Sequence[Event]:
        if len(self._early) >= MAX_EARLY_CHUNKS:
            raise DecodeError(
                f"not a Chat Completions stream: no chunk with an id or choices in its first "
                f"{MAX_EARLY_CHUNKS}"
            )
        self._early.append(fields)
        return _NOTHING

    def _open_response(
        self, response_id: ResponseId, fields: dict[str, msgspec.Raw]
    ) -> list[Event]:
        merged: dict[str, msgspec.Raw] = {}
        for early in (*self._early, fields):
            merged.update((k, v) for k, v in early.items() if bytes(v) != _NULL)
        self._early = []
        self.head = ResponseHead(response_id, merged, self.context)
        return [self.head.started()]

    def _choice(self, fields: dict[str, msgspec.Raw]) -> Sequence[Event]:
        assert self.head is not None
        index = _value(fields["index"]) if "index" in fields else 0
        if type(index) is not int or index < 0 or index in self._closed:
            return [self.head.mapper.unknown_value(msgspec.json.encode(fields), "stream_choice")]
        state = self._open.get(index)
        if state is None:
            state = self._open[index] = _ChoiceState()
        delta = fields.get("delta")
        if delta is not None and bytes(delta) != _NULL:
            try:
                state.delta(_FIELDS.decode(delta))
            except (msgspec.DecodeError, msgspec.ValidationError):
                state.extras.setdefault("delta", []).append(delta)
        state.fields(fields)
        finish = _value(fields["finish_reason"]) if "finish_reason" in fields else None
        if not isinstance(finish, str) or not finish:
            return _NOTHING
        state.finish_reason = finish
        if index == 0:
            self.head.finish_reason = finish
        del self._open[index]
        self._closed.add(index)
        return self.head.mapper(state.close(index, complete=True))

    def end(self, kind: str, message: str) -> Sequence[Event]:
        """The stream stopped without `[DONE]`: complete when every choice finished,
        else abandon (DecodeError if it never started)."""
        if self.done:
            return _NOTHING
        if self.head is None:
            raise DecodeError(f"not a Chat Completions stream: {message} before its first chunk")
        if kind == "incomplete_stream" and not self._open and self._closed:
            return self._close("completed")
        return self._close("abandoned", ErrorInfo(type=kind, message=message))

    def _close(self, state: EndState, error: ErrorInfo | None = None) -> list[Event]:
        assert self.head is not None
        self.done = True
        out: list[Event] = []
        complete = state == "completed"
        for index in sorted(self._open):
            out.extend(self.head.mapper(self._open.pop(index).close(index, complete=complete)))
        out.extend(self.head.ended(state, error))
        return out
