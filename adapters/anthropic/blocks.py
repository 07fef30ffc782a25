"""Anthropic content blocks → domain drafts: the mapping tables.

One `BlockMapper` per response turns each closed block (streamed and assembled, or
sliced whole from a non-streamed body) into drafts, applying the partial-commit rules of
DESIGN.md to blocks the stream cut: text keeps its citations so far, marked incomplete;
reasoning loses its signature; a client tool call becomes a `partial` UnknownArtifact; a
hosted call stays `started`. A block of a type not in the tables, or of a known type but
an unexpected shape, becomes an UnknownArtifact: preserved, never a crash.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from convstore.adapters.anthropic.citations import attribution
from convstore.adapters.anthropic.context import PROVIDER, RequestContext, activity_name
from convstore.adapters.wire.assembler import AssembledBlock
from convstore.adapters.wire.counts import count_field
from convstore.domain.events import (
    AssistantText,
    Event,
    HostedActivity,
    Reasoning,
    ToolCallRequested,
    UnknownArtifact,
)
from convstore.domain.vocabulary import (
    ActivityId,
    CallId,
    ProviderPayload,
    ResponseId,
)

__all__ = ["BlockMapper"]


class _Malformed(Exception):
    """A known block type with an unexpected shape: kept as an UnknownArtifact."""


def _str(d: Mapping[str, Any], key: str) -> str | None:
    value = d.get(key)
    return value if isinstance(value, str) else None


def _int(d: Mapping[str, Any], key: str) -> int | None:
    value = d.get(key)
    return value if type(value) is int else None


def _need_str(d: Mapping[str, Any], key: str) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not value:
        raise _Malformed(key)
    return value


def _encode(value: Any) -> bytes:
    return msgspec.json.encode(value)


# --- hosted activity: inputs and outcomes ----------------------------------------------------

ACTIVITY_INPUTS: Final[Mapping[str, tuple[str, ...]]] = {
    "web_search": ("query",),
    "web_fetch": ("url",),
    "code_execution": ("code",),
    "bash_code_execution": ("command",),
    "text_editor_code_execution": ("command", "path"),
}
"""Server tool name → the input fields its normalized input keeps (others: all of it)."""

RESULT_NAMES: Final[Mapping[str, str]] = {"mcp_tool_result": "mcp"}
"""Result block type → activity name, when its call is neither in the same response nor
replayed by the request (the default drops the `_tool_result` suffix:
`web_search_tool_result` → `web_search`)."""


def _exit(content: Mapping[str, Any]) -> str:
    code = _int(content, "return_code")
    return f"exit {code}" if code is not None else "done"


def _fetched(content: Mapping[str, Any]) -> str:
    url = _str(content, "url")
    return f"fetched {url}" if url else "fetched"


def _tools_found(content: Mapping[str, Any]) -> str:
    found = content.get("tool_references")
    return _count(len(found), "tool") if isinstance(found, list) else "done"


def _viewed(content: Mapping[str, Any]) -> str:
    lines = count_field(content, "num_lines")
    return f"viewed {_count(lines, 'line')}" if lines is not None else "viewed"


def _created(content: Mapping[str, Any]) -> str:
    return "updated" if content.get("is_file_update") is True else "created"


RESULT_SUMMARIES: Final[Mapping[str, Callable[[Mapping[str, Any]], str]]] = {
    "web_fetch_result": _fetched,
    "code_execution_result": _exit,
    "encrypted_code_execution_result": _exit,
    "bash_code_execution_result": _exit,
    "tool_search_tool_search_result": _tools_found,
    "text_editor_code_execution_view_result": _viewed,
    "text_editor_code_execution_create_result": _created,
    "text_editor_code_execution_str_replace_result": lambda content: "edited",
}
"""A successful result's content type → its summary (lists count results; else `done`)."""


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _outcome(block: Mapping[str, Any]) -> tuple[str, str]:
    """(`completed` | `failed`, summary) of a hosted result block."""
    content = block.get("content")
    if block.get("is_error") is True:
        return "failed", "error"
    if isinstance(content, list):
        noun = "block" if block.get("type") == "mcp_tool_result" else "result"
        return "completed", _count(len(content), noun)
    if isinstance(content, dict):
        kind = content.get("type")
        if isinstance(kind, str) and kind.endswith("_error"):
            return "failed", _str(content, "error_code") or kind
        summary = RESULT_SUMMARIES.get(kind) if isinstance(kind, str) else None
        return "completed", summary(content) if summary is not None else "done"
    return "completed", "done"


# --- the mapper ------------------------------------------------------------------------------


class BlockMapper:
    """Maps the closed content blocks of one response to drafts."""

    __slots__ = ("_activities", "_binding", "_calls", "_ended", "context", "model", "response_id")

    def __init__(self, response_id: ResponseId, model: str, context: RequestContext) -> None:
        self.response_id = response_id
        self.model = model
        self.context = context
        self._binding = {"model": model} if model else {}
        self._activities: dict[str, str] = {}
        """Hosted activity id → name, for the activities this response reported."""
        self._ended: set[str] = set()
        """Hosted activity ids whose terminal transition this response reported."""
        self._calls: set[str] = set()

    def __call__(self, assembled: AssembledBlock) -> list[Event]:
        """The drafts of one closed block."""
        kind = assembled.block.get("type")
        handler = _BLOCKS.get(kind) if type(kind) is str else None
        if handler is None and isinstance(kind, str) and kind.endswith("_tool_result"):
            handler = BlockMapper._hosted_result
        if handler is not None:
            try:
                return handler(self, assembled)
            except _Malformed:
                pass
        return [self.unknown(assembled)]

    # --- payloads ---

    def payload(
        self, assembled: AssembledBlock, *, version: str = "", bound: bool = False
    ) -> ProviderPayload:
        """The block's payload: `partial` when cut or unparsed, else `content_block`."""
        raw: bytes
        if assembled.unparsed:
            extra = {"partial_json": "".join(assembled.unparsed.values())}
            raw = _encode({**assembled.block, **extra})
        elif assembled.raw is None:
            raw = _encode(assembled.block)
        else:
            raw = bytes(assembled.raw)  # a copy: the payload must not pin a larger buffer
        complete = assembled.complete and not assembled.unparsed
        return ProviderPayload.parsed(  # the block was parsed from these bytes, or encoded
            PROVIDER,
            "content_block" if complete else "partial",
            raw,
            version=version,
            binding=dict(self._binding) if bound else {},
        )

    def unknown(self, assembled: AssembledBlock) -> UnknownArtifact:
        """A block kept as it came: replayed to Anthropic, ignored by everyone else."""
        return UnknownArtifact(payload=self.payload(assembled), response_id=self.response_id)

    def unknown_value(self, value: bytes, fmt: str) -> UnknownArtifact:
        """Any other JSON the adapter does not model (a stream event, message fields)."""
        payload = ProviderPayload(provider=PROVIDER, format=fmt, value=msgspec.Raw(value))
        return UnknownArtifact(payload=payload, response_id=self.response_id)

    # --- block types ---

    def _text(self, assembled: AssembledBlock) -> list[Event]:
        block = assembled.block
        text, citations = block.get("text"), block.get("citations")
        if type(text) is not str and not isinstance(text, str):
            raise _Malformed("text")
        if not citations:
            if citations is not None and not isinstance(citations, list):
                raise _Malformed("text")
            if assembled.complete:
                return self.plain_text(text)
            return [
                AssistantText(response_id=self.response_id, text=text, attributions_complete=False)
            ]
        if not isinstance(citations, list):
            raise _Malformed("text")
        return [
            AssistantText(
                response_id=self.response_id,
                text=text,
                attributions=tuple(map(attribution, citations)),
                attributions_complete=assembled.complete,
            )
        ]

    def plain_text(self, text: str) -> list[Event]:
        """The drafts of a complete text block without citations."""
        return [AssistantText(response_id=self.response_id, text=text)]

    def _thinking(self, assembled: AssembledBlock) -> list[Event]:
        text = assembled.block.get("thinking")
        if not isinstance(text, str):
            raise _Malformed("thinking")
        # Partial reasoning is stored unsigned: a cut block's signature may be partial too.
        payload = self.payload(assembled, bound=True) if assembled.complete else None
        return [Reasoning(response_id=self.response_id, text=text, payload=payload)]

    def _redacted(self, assembled: AssembledBlock) -> list[Event]:
        if not isinstance(assembled.block.get("data"), str):
            raise _Malformed("data")
        payload = None
        # The data arrives whole in the start event: only a delta could leave it partial.
        if assembled.complete or assembled.raw is not None:
            whole = msgspec.structs.replace(assembled, complete=True)
            payload = self.payload(whole, bound=True)
        return [Reasoning(response_id=self.response_id, redacted=True, payload=payload)]

    def _tool_use(self, assembled: AssembledBlock) -> list[Event]:
        block = assembled.block
        call_id, name = _need_str(block, "id"), _need_str(block, "name")
        arguments = block.get("input")
        if not assembled.complete or assembled.unparsed:
            return [self.unknown(assembled)]  # never a ToolCallRequested for a cut call
        if not isinstance(arguments, dict) or call_id in self._calls:
            raise _Malformed("tool_use")
        self._calls.add(call_id)
        return [
            ToolCallRequested(
                response_id=self.response_id,
                call_id=CallId(call_id),
                name=name,
                arguments=arguments,
                payload=self.payload(assembled),
            )
        ]

    def _hosted_call(self, assembled: AssembledBlock) -> list[Event]:
        """A `server_tool_use` or `mcp_tool_use`: the `started` transition of its activity."""
        block = assembled.block
        activity_id = _need_str(block, "id")
        name = activity_name(block)
        if name is None:
            raise _Malformed("name")
        arguments = block.get("input")
        if activity_id in self._activities or not isinstance(arguments, dict | None):
            raise _Malformed("server_tool_use")
        arguments = arguments or {}
        keys = ACTIVITY_INPUTS.get(name)
        normalized = (
            arguments if keys is None else {k: arguments[k] for k in keys if k in arguments}
        )
        self._activities[activity_id] = name
        return [
            HostedActivity(
                activity_id=ActivityId(activity_id),
                name=name,
                state="started",
                response_id=self.response_id,
                input=normalized,
                payload=self.payload(assembled, version=self.context.version_of(name), bound=True),
            )
        ]

    def _hosted_result(self, assembled: AssembledBlock) -> list[Event]:
        block = assembled.block
        activity_id = _need_str(block, "tool_use_id")
        if not assembled.complete:
            return [self.unknown(assembled)]  # the activity stays `started`
        kind = _need_str(block, "type")
        name = self._activities.get(activity_id)
        if name is None:
            # Its call is in an earlier response (a deferred search, a `pause_turn`
            # continuation: the request replays it), or never came: the terminal
            # transition alone, never dropped.
            name = (
                self.context.replayed_calls.get(activity_id)
                or RESULT_NAMES.get(kind)
                or kind.removesuffix("_tool_result")
            )
        elif activity_id in self._ended:
            raise _Malformed("a second result")
        self._ended.add(activity_id)
        self._activities[activity_id] = name
        state, summary = _outcome(block)
        version = self.context.version_of(name)
        return [
            HostedActivity(
                activity_id=ActivityId(activity_id),
                name=name,
                state="failed" if state == "failed" else "completed",
                response_id=self.response_id,
                summary=summary,
                payload=self.payload(assembled, version=version, bound=True),
            )
        ]


_BLOCKS: Final[Mapping[str, Callable[[BlockMapper, AssembledBlock], list[Event]]]] = {
    "text": BlockMapper._text,
    "thinking": BlockMapper._thinking,
    "redacted_thinking": BlockMapper._redacted,
    "tool_use": BlockMapper._tool_use,
    "server_tool_use": BlockMapper._hosted_call,
    "mcp_tool_use": BlockMapper._hosted_call,
    "mcp_tool_result": BlockMapper._hosted_result,
}
"""Block type → its mapping (other `*_tool_result` types map as hosted results)."""
