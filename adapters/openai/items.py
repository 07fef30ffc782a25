"""Responses API output items → domain drafts: the item mapper.

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
    `encrypted_content` byte-identical), bound to the model. With no readable text but an
    `encrypted_content`, the reasoning is `redacted`; with neither, nothing was withheld.
`function_call`, and the client tools' call items (`computer_call`, `local_shell_call`,
`shell_call` in a local environment, `apply_patch_call`, `custom_tool_call`, a
`tool_search_call` the client executes)
    A ToolCallRequested (call id = `call_id`; arguments parsed from the JSON string, or
    the item's own fields for the typed tools, less those saying where it runs or who
    made it) with the item as payload, `id` included (OpenAI refuses a re-minted item id
    on replay).
provider-run work that comes as a call item and a result item (a hosted `shell_call` and
its `shell_call_output`, a server `tool_search_call` and its `tool_search_output`, an
`mcp_approval_request` and the approved `mcp_call`)
    One activity: the call item starts it (its payload on `started`), the result item
    ends it (its payload on the terminal transition); see `paired_items`.
hosted items (`web_search_call`, `file_search_call`, `code_interpreter_call`,
`image_generation_call`, `mcp_call`, `mcp_list_tools`)
    The activity (id = item id) `started`, then its terminal transition from the item's
    `status`, both with the normalized input; the terminal one carries the item (format
    `output_item`, version = the declared tool type, bound to the model). The call and
    its result are one item on this wire, so there is no separate call payload.
anything else
    An UnknownArtifact (format `output_item`): kept and replayed to OpenAI, never a crash.

The tables the mapper reads are in `hosted_items` (hosted tool items), `citations`
(annotations → sources and ranges) and `cut_items` (a cut item folded back into the native
item). A range that does not lie in the text is dropped (the annotation itself stays in
the payload) and logged, without any of the text. Annotations carry no separate replay
value: the message payload holds them.

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

from convstore.adapters.openai.citations import ANNOTATION_SOURCES, span_of, unknown_source
from convstore.adapters.openai.context import PROVIDER, RequestContext
from convstore.adapters.openai.cut_items import rebuild
from convstore.adapters.openai.hosted_items import (
    ACTIVITY_INPUTS,
    ACTIVITY_SUMMARIES,
    HOSTED_ITEMS,
    terminal_state,
)
from convstore.adapters.openai.item_fields import Malformed, as_list, need_str, str_field
from convstore.adapters.openai.paired_items import CLOSERS, OPENERS, is_hosted
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
    TextRange,
)

__all__ = ["CLIENT_CALLS", "ItemMapper"]

log = logging.getLogger("convstore.adapters.openai")

_encode = msgspec.json.encode
_decode = msgspec.json.decode


_NOT_ARGUMENTS: Final = frozenset(
    {"id", "type", "status", "call_id", "caller", "created_by", "environment", "execution"}
)
"""Fields of a typed call item that say where it came from or runs, not what it asks."""


def _client_fields(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in _NOT_ARGUMENTS}


def _search_arguments(item: Mapping[str, Any]) -> dict[str, Any]:
    arguments = item.get("arguments")
    if isinstance(arguments, dict):
        return arguments
    return {} if arguments is None else {"arguments": arguments}


CLIENT_CALLS: Final[
    Mapping[str, tuple[Callable[[Mapping[str, Any]], str], Callable[[Mapping[str, Any]], Any]]]
] = {
    "computer_call": (lambda i: "computer", _client_fields),
    "local_shell_call": (lambda i: "local_shell", _client_fields),
    "shell_call": (lambda i: "shell", _client_fields),
    "apply_patch_call": (lambda i: "apply_patch", _client_fields),
    "custom_tool_call": (lambda i: need_str(i, "name"), lambda i: {"input": i.get("input")}),
    "tool_search_call": (lambda i: "tool_search", _search_arguments),
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
        self._opened: dict[str, dict[str, Any]] = {}
        """Paired activities started in this response and not yet closed → their input."""
        self._open_by_kind: dict[str, list[str]] = {}
        """Opener item type → the activities it started that are still open, in order."""
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
            if (kind in OPENERS or kind in CLOSERS) and is_hosted(block):
                handler = ItemMapper._opener if kind in OPENERS else ItemMapper._closer
            elif kind in HOSTED_ITEMS:
                handler = ItemMapper._hosted
            elif kind in CLIENT_CALLS:
                handler = ItemMapper._client_call
        try:
            if handler is not None:
                return handler(self, assembled, closed)
        except Malformed:
            pass
        return [self.unknown(assembled)]

    # --- payloads ---

    def payload(
        self, assembled: AssembledBlock, *, version: str = "", bound: bool = False
    ) -> ProviderPayload:
        """The item's payload: its bytes as received when whole, `partial` when cut."""
        raw = assembled.raw if assembled.raw is not None else _encode(assembled.block)
        return ProviderPayload.parsed(  # the item was parsed from these bytes, or encoded
            PROVIDER,
            "output_item" if assembled.complete else "partial",
            raw,
            version=version,
            binding=self._binding if bound else {},
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
            raise Malformed("content")
        payload = self.payload(assembled, bound=True)
        out: list[Event] = []
        for position, part in enumerate(content):
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "output_text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise Malformed("text")
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
                    raise Malformed("refusal")
                self.refused = True
                out.append(
                    AssistantText(response_id=self.response_id, text=refusal, payload=payload)
                )
        return out or [UnknownArtifact(payload=payload, response_id=self.response_id)]

    def _attributions(
        self, annotations: Any, text: str, item: Mapping[str, Any]
    ) -> tuple[Attribution, ...]:
        out: list[Attribution] = []
        for annotation in as_list(annotations):
            if not isinstance(annotation, dict):
                continue
            kind = annotation.get("type")
            known = ANNOTATION_SOURCES.get(kind) if isinstance(kind, str) else None
            to_source, to_span = known if known is not None else (unknown_source, span_of)
            span = to_span(annotation)
            text_range, unplaced = None, ""
            if span is not None:
                start, end = span
                if 0 <= start <= end <= len(text):
                    text_range = TextRange(start, end)
                else:
                    unplaced = (
                        f"OpenAI's range [{start}, {end}) does not lie in the text "
                        f"of {len(text)} code points"
                    )
                    self.dropped_ranges += 1
                    log.warning(
                        "response %s, item %s: %s range [%d, %d) does not lie in its text "
                        "of %d code points; dropped (the annotation stays in the payload)",
                        self.response_id,
                        str_field(item, "id"),
                        kind,
                        start,
                        end,
                        len(text),
                    )
            out.append(
                Attribution(source=to_source(annotation), range=text_range, unplaced=unplaced)
            )
        return tuple(out)

    def _reasoning(self, assembled: AssembledBlock, closed: set[tuple[str, int]]) -> list[Event]:
        item = assembled.block
        summary, content = item.get("summary"), item.get("content")
        if not isinstance(summary, list | None) or not isinstance(content, list | None):
            raise Malformed("reasoning")
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
        # Redacted: reasoning that came only as `encrypted_content`. With neither text nor
        # encrypted content (store=true, no summary asked for) nothing was withheld.
        encrypted = item.get("encrypted_content")
        return [
            Reasoning(
                response_id=self.response_id,
                text=text,
                redacted=not text and isinstance(encrypted, str) and bool(encrypted),
                payload=self.payload(assembled, bound=True),
            )
        ]

    def _function_call(
        self, assembled: AssembledBlock, closed: set[tuple[str, int]]
    ) -> list[Event]:
        item = assembled.block
        call_id, name = need_str(item, "call_id"), need_str(item, "name")
        text = item.get("arguments")
        if not isinstance(text, str):
            raise Malformed("arguments")
        if not assembled.complete or item.get("status") == "incomplete":
            return [self._partial(assembled)]  # never a ToolCallRequested for a cut call
        try:
            arguments = _decode(text) if text.strip() else {}
        except (msgspec.DecodeError, RecursionError):
            return [self._partial(assembled)]
        if not isinstance(arguments, dict):
            raise Malformed("arguments")
        return [self._requested(assembled, call_id, name, arguments)]

    def _client_call(self, assembled: AssembledBlock, closed: set[tuple[str, int]]) -> list[Event]:
        item = assembled.block
        to_name, to_arguments = CLIENT_CALLS[item["type"]]
        call_id, name = need_str(item, "call_id"), to_name(item)
        if not assembled.complete or item.get("status") == "incomplete":
            return [self._partial(assembled)]
        return [self._requested(assembled, call_id, name, to_arguments(item))]

    def _requested(
        self, assembled: AssembledBlock, call_id: str, name: str, arguments: dict[str, Any]
    ) -> ToolCallRequested:
        if call_id in self._calls:
            raise Malformed("a second call with this id")
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
        activity_id = need_str(item, "id")
        name = HOSTED_ITEMS[kind](item)
        if activity_id in self._activities:
            raise Malformed("a second item with this id")
        self._activities.add(activity_id)
        normalized = ACTIVITY_INPUTS[kind](item)
        payload = self.payload(assembled, version=self.context.version_of(name), bound=True)
        ended = terminal_state(item) if assembled.complete else None
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

    def _opener(self, assembled: AssembledBlock, closed: set[tuple[str, int]]) -> list[Event]:
        """A call item of provider-run work whose result comes as another item."""
        item = assembled.block
        kind = item["type"]
        opener = OPENERS[kind]
        activity_id, name = opener.activity_id(item), opener.name(item)
        if activity_id in self._activities:
            raise Malformed("a second item with this id")
        self._activities.add(activity_id)
        normalized = opener.normalized(item)
        payload = self.payload(assembled, version=self.context.version_of(name), bound=True)
        started = self._activity(
            activity_id,
            name=name,
            state="started",
            normalized=normalized,
            summary=opener.pending,
            payload=payload,
        )
        ended = terminal_state(item) if assembled.complete else None
        if ended is not None and ended[0] == "failed":  # the call itself failed: no result comes
            failed = self._activity(
                activity_id,
                name=name,
                state="failed",
                normalized=normalized,
                summary=ended[1],
                payload=None,
            )
            return [started, failed]
        self._opened[activity_id] = normalized
        self._open_by_kind.setdefault(kind, []).append(activity_id)
        return [started]

    def _closer(self, assembled: AssembledBlock, closed: set[tuple[str, int]]) -> list[Event]:
        """A result item ending the activity its call item started (see `paired_items`)."""
        item = assembled.block
        closer = CLOSERS[item["type"]]
        named = closer.activity_id(item)
        waiting = self._open_by_kind.get(closer.opener, [])
        activity_id = named or (waiting[-1] if waiting else need_str(item, "id"))
        ended = terminal_state(item) if assembled.complete else None
        if ended is None:
            # Cut, or reported still running: kept as it came; its call (if here) stays
            # started.
            return [self._partial(assembled) if not assembled.complete else self.unknown(assembled)]
        if activity_id in self._activities and activity_id not in self._opened:
            raise Malformed("a second item with this id")
        self._activities.add(activity_id)
        normalized = self._opened.pop(activity_id, None)
        if activity_id in waiting:
            waiting.remove(activity_id)
        name = closer.name(item)
        state, failure = ended
        return [
            self._activity(
                activity_id,
                name=name,
                state=state,
                normalized=closer.normalized(item) if normalized is None else normalized,
                summary=closer.summary(item) if state == "completed" else failure,
                payload=self.payload(assembled, version=self.context.version_of(name), bound=True),
            )
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
