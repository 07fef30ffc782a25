"""Responses API output items → domain drafts: the mapping tables.

One `ItemMapper` per response turns each closed output item (streamed and assembled, or
sliced whole from a response's `output`) into drafts:

`message`
    One AssistantText per `output_text` part, its annotations as attributions, and one
    per `refusal` part (the refusal text is what the model said; the response's finish
    reason becomes `refusal`). Every AssistantText of one message carries the same
    payload, the whole message item (format `output_item`, bound to the model): the
    encoder replays it once per item id. A message with neither part kind is kept as an
    UnknownArtifact (its parts are in the payload).
`reasoning`
    A Reasoning whose text is the summary parts, then any `reasoning_text` content, joined
    by blank lines; its payload is the item as `output_item.done` carried it (`id` and
    `encrypted_content` byte-identical), bound to the model. With no readable text the
    reasoning is `redacted`.
`function_call`, and the client tools' call items (`computer_call`, `local_shell_call`,
`shell_call`, `apply_patch_call`, `custom_tool_call`)
    A ToolCallRequested (call id = `call_id`; arguments parsed from the JSON string, or
    the item's own fields for the typed tools) with the item as payload, `id` included
    (OpenAI refuses a re-minted item id on replay).
hosted items (`web_search_call`, `file_search_call`, `code_interpreter_call`,
`image_generation_call`, `mcp_call`, `mcp_list_tools`)
    The activity (id = item id) `started`, then its terminal transition from the item's
    `status`, both with the normalized input; the terminal one carries the item (format
    `output_item`, version = the declared tool type, bound to the model). The call and
    its result are one item on this wire, so there is no separate call payload.
anything else
    An UnknownArtifact (format `output_item`): kept and replayed to OpenAI, never a crash.

Annotations: `url_citation` → a web source whose `start_index` / `end_index` become the
range (OpenAI counts code points, as TextRange does: no conversion; `end_index` is
exclusive, whatever the reference says); `file_citation` and `file_path` → a file source
with a zero-length range at their `index`: a point, where the citation marker stood
(recorded traffic has it just before the closing period of the sentence it supports; the
API reference calls it "the index of the file in the list of files", which that traffic
contradicts), since OpenAI names no span; `container_file_citation` → a file source (id =
`file_id`) with its span. A range that does not lie in the text is dropped (the
annotation itself stays in the payload) and logged, without any of the text. Annotations
carry no separate replay value: the message payload holds them.

Cut items (the stream ended before `output_item.done`) follow the partial-commit table
of DESIGN.md: a message's parts become AssistantText (an open part with
`attributions_complete = False`) with the assembled item as a `partial` payload;
reasoning keeps its text and loses its payload (an unsigned `encrypted_content` may be
stale); a client call becomes an UnknownArtifact `partial`, never a ToolCallRequested; a
hosted activity is recorded `started` only, with the assembled item as `partial` payload.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from convstore.adapters.openai.context import PROVIDER, RequestContext
from convstore.adapters.wire.assembler import AssembledBlock
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
    Attribution,
    CallId,
    Lifecycle,
    ProviderPayload,
    ResponseId,
    Source,
    TextRange,
)

__all__ = [
    "ACTIVITY_INPUTS",
    "ACTIVITY_SUMMARIES",
    "ANNOTATION_SOURCES",
    "CLIENT_CALLS",
    "HOSTED_ITEMS",
    "ItemMapper",
    "rebuild",
]

log = logging.getLogger("convstore.adapters.openai")


class _Malformed(Exception):
    """A known item type with an unexpected shape: kept as an UnknownArtifact."""


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


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


_encode = msgspec.json.encode
_decode = msgspec.json.decode


# --- cut items: folding the assembled parts back into the native item ------------------------

_DEFAULT_PARTS: Final[Mapping[tuple[str, str], Mapping[str, Any]]] = {
    ("message", "content"): {"type": "output_text", "text": "", "annotations": []},
    ("reasoning", "content"): {"type": "reasoning_text", "text": ""},
    ("reasoning", "summary"): {"type": "summary_text", "text": ""},
}


_LEAVES: Final[Mapping[str, type]] = {
    "": dict,
    "text": str,
    "final": str,
    "annotations": list,
    "done": bool,
}
"""The path-named fields `wire` assembles, by leaf, with the type each holds."""


def rebuild(block: Mapping[str, Any]) -> tuple[dict[str, Any], set[tuple[str, int]]]:
    """The native item of a cut block, and the (field, position) of each part closed.

    Folds the path-named fields of `wire` (`content/<i>`, `content/<i>/text`, …) into
    the item's `content` / `summary` lists; an open part gets its text so far.
    """
    item: dict[str, Any] = {}
    groups: dict[str, dict[int, dict[str, Any]]] = {}
    for key, value in block.items():
        name, slash, rest = key.partition("/")
        digits, _, leaf = rest.partition("/")
        expected = _LEAVES.get(leaf)
        if not slash or not digits.isdigit() or expected is None or not isinstance(value, expected):
            item[key] = value  # an item field (even one that looks like a path)
            continue
        groups.setdefault(name, {}).setdefault(int(digits), {})[leaf] = value
    closed: set[tuple[str, int]] = set()
    kind = item.get("type")
    for name, parts in groups.items():
        listed = item.get(name)
        result = list(listed) if isinstance(listed, list) else []
        for index in sorted(parts):
            pieces = parts[index]
            start = pieces.get("")
            if not isinstance(start, dict):
                start = result[index] if index < len(result) else None
            if not isinstance(start, dict):
                refusal = name == "content" and kind == "message" and "refusal" in pieces
                default = _DEFAULT_PARTS.get((str(kind), name), {"type": "text", "text": ""})
                start = {"type": "refusal", "refusal": ""} if refusal else default
            part = dict(start)
            position = index if index < len(result) else len(result)
            if pieces.get("done") is True:
                closed.add((name, position))
            else:
                text_key = "refusal" if part.get("type") == "refusal" else "text"
                final = pieces.get("final")
                before = part.get(text_key)
                if isinstance(final, str):
                    part[text_key] = final
                elif "text" in pieces:
                    part[text_key] = (before if isinstance(before, str) else "") + pieces["text"]
                added = pieces.get("annotations")
                if isinstance(added, list):
                    part["annotations"] = [*_list(part.get("annotations")), *added]
            if position < len(result):
                result[position] = part
            else:
                result.append(part)
        item[name] = result
    return item, closed


# --- annotations -------------------------------------------------------------------------------


def _span(a: Mapping[str, Any]) -> tuple[int, int] | None:
    start, end = _int(a, "start_index"), _int(a, "end_index")
    return None if start is None or end is None else (start, end)


def _point(a: Mapping[str, Any]) -> tuple[int, int] | None:
    index = _int(a, "index")
    return None if index is None else (index, index)


def _web_source(a: Mapping[str, Any]) -> Source:
    return Source(kind="web", url=_str(a, "url"), title=_str(a, "title"))


def _file_source(a: Mapping[str, Any]) -> Source:
    return Source(kind="file", id=_str(a, "file_id"), title=_str(a, "filename"))


ANNOTATION_SOURCES: Final[
    Mapping[
        str,
        tuple[
            Callable[[Mapping[str, Any]], Source],
            Callable[[Mapping[str, Any]], tuple[int, int] | None],
        ],
    ]
] = {
    "url_citation": (_web_source, _span),
    "file_citation": (_file_source, _point),
    "container_file_citation": (_file_source, _span),
    "file_path": (_file_source, _point),
}
"""Annotation type → (the Source it points at, its span in the text). An unknown type
becomes a `document` source with any url, title and span it has."""


def _unknown_source(a: Mapping[str, Any]) -> Source:
    return Source(
        kind="document", url=_str(a, "url"), title=_str(a, "title"), id=_str(a, "file_id")
    )


# --- hosted activity: inputs, summaries, states ----------------------------------------------


def _web_search_input(item: Mapping[str, Any]) -> dict[str, Any]:
    action = item.get("action")
    if not isinstance(action, dict):
        return {}
    kind = action.get("type")
    keys = {"search": ("query", "queries"), "open_page": ("url",), "find": ("url", "pattern")}
    wanted = keys.get(kind) if isinstance(kind, str) else None
    if wanted is None:
        return {k: v for k, v in action.items() if k != "sources"}
    return {k: action[k] for k in wanted if action.get(k) is not None}


def _web_search_summary(item: Mapping[str, Any]) -> str:
    action = item.get("action")
    if not isinstance(action, dict):
        return "done"
    kind = action.get("type")
    if kind == "open_page":
        return f"opened {_str(action, 'url') or 'a page'}"
    if kind == "find":
        return f'found "{_str(action, "pattern") or ""}" in {_str(action, "url") or "a page"}'
    query = _str(action, "query")
    queries = [q for q in _list(action.get("queries")) if isinstance(q, str)]
    shown = ", ".join(f'"{q}"' for q in (queries or ([query] if query else [])))
    summary = f"searched {shown}" if shown else "searched"
    sources = action.get("sources")
    return f"{summary} ({_count(len(sources), 'source')})" if isinstance(sources, list) else summary


def _file_search_summary(item: Mapping[str, Any]) -> str:
    results = item.get("results")
    return _count(len(results), "result") if isinstance(results, list) else "done"


def _code_summary(item: Mapping[str, Any]) -> str:
    outputs = item.get("outputs")
    if not isinstance(outputs, list):
        return "done"
    kinds = [o.get("type") for o in outputs if isinstance(o, dict)]
    shown = [
        _count(kinds.count(kind), noun)
        for kind, noun in (("logs", "log"), ("image", "image"))
        if kind in kinds
    ]
    return ", ".join(shown) or "no output"


def _tools_listed(item: Mapping[str, Any]) -> str:
    tools = item.get("tools")
    return _count(len(tools), "tool") if isinstance(tools, list) else "done"


def _arguments(item: Mapping[str, Any]) -> dict[str, Any]:
    text = item.get("arguments")
    if not isinstance(text, str):
        return {}
    try:
        value = _decode(text)
    except (msgspec.DecodeError, RecursionError):
        return {"arguments": text}
    return value if isinstance(value, dict) else {"arguments": text}


def _kept(key: str, name: str, kind: type) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """The input `{name: item[key]}` when the item has one of type `kind`, else `{}`."""

    def normalized(item: Mapping[str, Any]) -> dict[str, Any]:
        value = item.get(key)
        return {name: value} if isinstance(value, kind) else {}

    return normalized


ACTIVITY_INPUTS: Final[Mapping[str, Callable[[Mapping[str, Any]], dict[str, Any]]]] = {
    "web_search_call": _web_search_input,
    "file_search_call": _kept("queries", "queries", list),
    "code_interpreter_call": _kept("code", "code", str),
    "image_generation_call": _kept("revised_prompt", "prompt", str),
    "mcp_call": _arguments,
    "mcp_list_tools": _kept("server_label", "server_label", str),
}
"""Hosted item type → its normalized input."""

ACTIVITY_SUMMARIES: Final[Mapping[str, Callable[[Mapping[str, Any]], str]]] = {
    "web_search_call": _web_search_summary,
    "file_search_call": _file_search_summary,
    "code_interpreter_call": _code_summary,
    "image_generation_call": lambda i: "1 image" if isinstance(i.get("result"), str) else "done",
    "mcp_call": lambda i: "done",
    "mcp_list_tools": _tools_listed,
}
"""Hosted item type → the summary of a successful run."""


def _mcp_name(item: Mapping[str, Any]) -> str:
    return f"mcp:{_str(item, 'server_label') or ''}/{_need_str(item, 'name')}"


HOSTED_ITEMS: Final[Mapping[str, Callable[[Mapping[str, Any]], str]]] = {
    "web_search_call": lambda i: "web_search",
    "file_search_call": lambda i: "file_search",
    "code_interpreter_call": lambda i: "code_interpreter",
    "image_generation_call": lambda i: "image_generation",
    "mcp_call": _mcp_name,
    "mcp_list_tools": lambda i: f"mcp:{_str(i, 'server_label') or ''}/tools/list",
}
"""Hosted item type → the activity name (`mcp:<server>/<tool>` as for Anthropic)."""

_TERMINAL: Final[Mapping[str, Lifecycle]] = {
    "completed": "completed",
    "failed": "failed",
    "incomplete": "failed",
}


def _terminal_state(item: Mapping[str, Any]) -> tuple[Lifecycle, str] | None:
    """(state, summary-if-failed) from the item's status; None while it still runs."""
    status = item.get("status")
    error = item.get("error")
    if status is None or status == "completed":
        if error not in (None, "", {}):
            message = error if isinstance(error, str) else "error"
            return "failed", message if len(message) <= 80 else "error"
        return "completed", ""
    if isinstance(status, str) and status in _TERMINAL:
        return _TERMINAL[status], status
    return None


def _client_fields(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in ("id", "type", "status", "call_id")}


CLIENT_CALLS: Final[
    Mapping[str, tuple[Callable[[Mapping[str, Any]], str], Callable[[Mapping[str, Any]], Any]]]
] = {
    "computer_call": (lambda i: "computer", _client_fields),
    "local_shell_call": (lambda i: "local_shell", _client_fields),
    "shell_call": (lambda i: "shell", _client_fields),
    "apply_patch_call": (lambda i: "apply_patch", _client_fields),
    "custom_tool_call": (lambda i: _need_str(i, "name"), lambda i: {"input": i.get("input")}),
}
"""Typed client tool call item → (its tool name, its arguments). `function_call` parses its
JSON `arguments` instead."""


# --- the mapper ------------------------------------------------------------------------------


class ItemMapper:
    """Maps the closed output items of one response to drafts."""

    def __init__(self, response_id: ResponseId, model: str, context: RequestContext) -> None:
        self.response_id = response_id
        self.model = model
        self.context = context
        self._binding = {"model": model} if model else {}
        self._activities: set[str] = set()
        self._calls: set[str] = set()
        self.client_calls = 0
        """ToolCallRequested drafts made: the response then ends with `tool_use`."""
        self.refused = False
        """A refusal part was mapped: the response then ends with `refusal`."""
        self.dropped_ranges = 0
        """Annotation ranges dropped because they did not lie in their text."""

    def __call__(self, assembled: AssembledBlock) -> list[Event]:
        """The drafts of one closed (or cut) output item."""
        block = assembled.block
        closed: set[tuple[str, int]] = set()
        if not assembled.complete and assembled.raw is None:
            block, closed = rebuild(block)
            assembled = AssembledBlock(assembled.index, block, None, False)
        kind = block.get("type")
        handler = _ITEMS.get(kind) if isinstance(kind, str) else None
        if handler is None and isinstance(kind, str):
            if kind in HOSTED_ITEMS:
                handler = ItemMapper._hosted
            elif kind in CLIENT_CALLS:
                handler = ItemMapper._client_call
        try:
            if handler is not None:
                return handler(self, assembled, closed)
        except _Malformed:
            pass
        return [self.unknown(assembled)]

    # --- payloads ---

    def payload(
        self, assembled: AssembledBlock, *, version: str = "", bound: bool = False
    ) -> ProviderPayload:
        """The item's payload: its bytes as received when whole, `partial` when cut."""
        raw = assembled.raw if assembled.raw is not None else _encode(assembled.block)
        return ProviderPayload(
            provider=PROVIDER,
            format="output_item" if assembled.complete else "partial",
            version=version,
            binding=self._binding if bound else {},
            value=msgspec.Raw(raw),
        )

    def unknown(self, assembled: AssembledBlock) -> UnknownArtifact:
        """An item kept as it came: replayed to OpenAI, ignored by everyone else."""
        return UnknownArtifact(payload=self.payload(assembled), response_id=self.response_id)

    def unknown_value(self, value: bytes, fmt: str) -> UnknownArtifact:
        """Any other JSON the adapter does not model (a stream event, response fields)."""
        payload = ProviderPayload(provider=PROVIDER, format=fmt, value=msgspec.Raw(value))
        return UnknownArtifact(payload=payload, response_id=self.response_id)

    # --- item types ---

    def _message(self, assembled: AssembledBlock, closed: set[tuple[str, int]]) -> list[Event]:
        item = assembled.block
        content = item.get("content")
        if not isinstance(content, list):
            raise _Malformed("content")
        payload = self.payload(assembled, bound=True)
        out: list[Event] = []
        for position, part in enumerate(content):
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "output_text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise _Malformed("text")
                attributions = self._attributions(part.get("annotations"), text, item)
                out.append(
                    AssistantText(
                        response_id=self.response_id,
                        text=text,
                        attributions=attributions,
                        attributions_complete=(
                            assembled.complete or ("content", position) in closed
                        ),
                        payload=payload,
                    )
                )
            elif kind == "refusal":
                refusal = part.get("refusal")
                if not isinstance(refusal, str):
                    raise _Malformed("refusal")
                self.refused = True
                out.append(
                    AssistantText(response_id=self.response_id, text=refusal, payload=payload)
                )
        return out or [UnknownArtifact(payload=payload, response_id=self.response_id)]

    def _attributions(
        self, annotations: Any, text: str, item: Mapping[str, Any]
    ) -> tuple[Attribution, ...]:
        out: list[Attribution] = []
        for annotation in _list(annotations):
            if not isinstance(annotation, dict):
                continue
            kind = annotation.get("type")
            known = ANNOTATION_SOURCES.get(kind) if isinstance(kind, str) else None
            to_source, to_span = known if known is not None else (_unknown_source, _span)
            span = to_span(annotation)
            text_range = None
            if span is not None:
                start, end = span
                if 0 <= start <= end <= len(text):
                    text_range = TextRange(start, end)
                else:
                    self.dropped_ranges += 1
                    log.warning(
                        "response %s, item %s: %s range [%d, %d) does not lie in its text "
                        "of %d code points; dropped (the annotation stays in the payload)",
                        self.response_id,
                        _str(item, "id"),
                        kind,
                        start,
                        end,
                        len(text),
                    )
            out.append(Attribution(source=to_source(annotation), range=text_range))
        return tuple(out)

    def _reasoning(self, assembled: AssembledBlock, closed: set[tuple[str, int]]) -> list[Event]:
        item = assembled.block
        summary, content = item.get("summary"), item.get("content")
        if not isinstance(summary, list | None) or not isinstance(content, list | None):
            raise _Malformed("reasoning")
        pieces = [
            part["text"]
            for part in [*(summary or ()), *(content or ())]
            if isinstance(part, dict) and isinstance(part.get("text"), str) and part["text"]
        ]
        text = "\n\n".join(pieces)
        if not assembled.complete:
            # Unsigned: the encrypted content announced before `output_item.done` is not
            # the one to keep (with store=false the two differ).
            return [Reasoning(response_id=self.response_id, text=text)]
        return [
            Reasoning(
                response_id=self.response_id,
                text=text,
                redacted=not text,
                payload=self.payload(assembled, bound=True),
            )
        ]

    def _function_call(
        self, assembled: AssembledBlock, closed: set[tuple[str, int]]
    ) -> list[Event]:
        item = assembled.block
        call_id, name = _need_str(item, "call_id"), _need_str(item, "name")
        text = item.get("arguments")
        if not isinstance(text, str):
            raise _Malformed("arguments")
        if not assembled.complete or item.get("status") == "incomplete":
            return [self._partial(assembled)]  # never a ToolCallRequested for a cut call
        try:
            arguments = _decode(text) if text.strip() else {}
        except (msgspec.DecodeError, RecursionError):
            return [self._partial(assembled)]
        if not isinstance(arguments, dict):
            raise _Malformed("arguments")
        return [self._requested(assembled, call_id, name, arguments)]

    def _client_call(self, assembled: AssembledBlock, closed: set[tuple[str, int]]) -> list[Event]:
        item = assembled.block
        to_name, to_arguments = CLIENT_CALLS[item["type"]]
        call_id, name = _need_str(item, "call_id"), to_name(item)
        if not assembled.complete or item.get("status") == "incomplete":
            return [self._partial(assembled)]
        return [self._requested(assembled, call_id, name, to_arguments(item))]

    def _requested(
        self, assembled: AssembledBlock, call_id: str, name: str, arguments: dict[str, Any]
    ) -> ToolCallRequested:
        if call_id in self._calls:
            raise _Malformed("a second call with this id")
        self._calls.add(call_id)
        self.client_calls += 1
        return ToolCallRequested(
            response_id=self.response_id,
            call_id=CallId(call_id),
            name=name,
            arguments=arguments,
            payload=self.payload(assembled),
        )

    def _partial(self, assembled: AssembledBlock) -> UnknownArtifact:
        payload = self.payload(assembled)
        if payload.format != "partial":
            payload = msgspec.structs.replace(payload, format="partial")
        return UnknownArtifact(payload=payload, response_id=self.response_id)

    def _hosted(self, assembled: AssembledBlock, closed: set[tuple[str, int]]) -> list[Event]:
        item = assembled.block
        kind = item["type"]
        activity_id = _need_str(item, "id")
        name = HOSTED_ITEMS[kind](item)
        if activity_id in self._activities:
            raise _Malformed("a second item with this id")
        self._activities.add(activity_id)
        normalized = ACTIVITY_INPUTS[kind](item)
        payload = self.payload(assembled, version=self.context.version_of(name), bound=True)
        ended = _terminal_state(item) if assembled.complete else None
        if ended is None:
            # Cut, or reported still running: recorded started, the item kept with it.
            return [
                self._activity(
                    activity_id,
                    name=name,
                    state="started",
                    normalized=normalized,
                    summary="",
                    payload=payload,
                )
            ]
        state, failure = ended
        summary = ACTIVITY_SUMMARIES[kind](item) if state == "completed" else failure
        return [
            self._activity(
                activity_id,
                name=name,
                state="started",
                normalized=normalized,
                summary="",
                payload=None,
            ),
            self._activity(
                activity_id,
                name=name,
                state=state,
                normalized=normalized,
                summary=summary,
                payload=payload,
            ),
        ]

    def _activity(
        self,
        activity_id: str,
        *,
        name: str,
        state: Lifecycle,
        normalized: dict[str, Any],
        summary: str,
        payload: ProviderPayload | None,
    ) -> HostedActivity:
        return HostedActivity(
            activity_id=ActivityId(activity_id),
            name=name,
            state=state,
            response_id=self.response_id,
            input=normalized,
            summary=summary,
            payload=payload,
        )


_ITEMS: Final[
    Mapping[str, Callable[[ItemMapper, AssembledBlock, set[tuple[str, int]]], list[Event]]]
] = {
    "message": ItemMapper._message,
    "reasoning": ItemMapper._reasoning,
    "function_call": ItemMapper._function_call,
}
"""Item type → its mapping (hosted and typed client calls: `HOSTED_ITEMS`, `CLIENT_CALLS`)."""
