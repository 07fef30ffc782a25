"""The Responses API stream vocabulary: one struct for every event, and the delta table.

Every stream event is an object tagged by `type` whose other fields come from a small
shared set (`output_index`, `content_index`, `item_id`, `delta`, …), so one struct with
optional fields decodes them all in one pass; fields it does not name (`obfuscation`,
`logprobs`, `sequence_number`) are skipped. A field of an unexpected type fails
validation, and the decoder keeps the event's data as an UnknownArtifact. Items, parts,
annotations and response objects stay raw until read.

Output items are the assembler's blocks, keyed by `output_index`. Nested parts are
assembled under path-like field names, `content/<i>` (the part as announced),
`content/<i>/text` (text or refusal pieces), `content/<i>/annotations`,
`content/<i>/final` (the `.done` text), `content/<i>/done` (the part closed), and the
same under `summary/<i>` for reasoning summaries. A shell call's commands go to
`commands/<i>/start|text|final`, a hosted shell output's to `shell_output/<i>/stdout|stderr`
(pieces) and `shell_output/<i>/chunks` (the `.done` output), an apply_patch diff to
`operation/diff`; `cut_items.rebuild` folds them all back into the native item when a
stream is cut. A complete item is never rebuilt: `output_item.done`
carries it whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from convstore.adapters.wire.assembler import DeltaApplier, OpenBlock

__all__ = ["DELTAS", "EVENT", "PIECES", "STATUS_EVENTS", "StreamEvent", "aimed", "decode_object"]

_ABSENT: Final = msgspec.Raw()
"""An absent raw field (msgspec has no optional Raw): empty, so false."""


class StreamEvent(msgspec.Struct, gc=False):
    """A stream event: the fields any known event type carries, None when absent."""

    type: str
    output_index: int | None = None
    content_index: int | None = None
    summary_index: int | None = None
    item_id: str | None = None
    delta: Any = None
    text: str | None = None
    refusal: str | None = None
    arguments: str | None = None
    code: Any = None
    """The code of `code_interpreter_call_code.done`, or an `error` event's error code."""
    command_index: int | None = None
    """The shell command a `shell_call_command.*` / `shell_call_output_content.*` event is
    about."""
    command: str | None = None
    diff: str | None = None
    input: Any = None
    partial_image_b64: str | None = None
    message: Any = None
    error: Any = None
    item: msgspec.Raw = _ABSENT
    part: msgspec.Raw = _ABSENT
    annotation: msgspec.Raw = _ABSENT
    response: msgspec.Raw = _ABSENT
    output: msgspec.Raw = _ABSENT
    """The output chunks of `shell_call_output_content.done`."""


EVENT: Final = msgspec.json.Decoder(StreamEvent)
"""Decodes one event's `data`; ValidationError for an unexpected shape."""

_OBJECT: Final = msgspec.json.Decoder(dict[str, Any])


def decode_object(raw: msgspec.Raw) -> dict[str, Any] | None:
    """A raw field as an object; None when absent or not an object."""
    if not raw:
        return None
    try:
        return _OBJECT.decode(raw)
    except msgspec.DecodeError:
        return None


def aimed(block: OpenBlock, event: StreamEvent) -> bool:
    """False when the event names another item than the block under assembly."""
    item_id = event.item_id
    return item_id is None or block.start.get("id") in (None, item_id)


def _content_key(event: StreamEvent, leaf: str) -> str | None:
    index = event.content_index
    return None if index is None or index < 0 else f"content/{index}/{leaf}"


def _summary_key(event: StreamEvent, leaf: str) -> str | None:
    index = event.summary_index
    return None if index is None or index < 0 else f"summary/{index}/{leaf}"


def _command_key(event: StreamEvent, leaf: str) -> str | None:
    index = event.command_index
    return None if index is None or index < 0 else f"commands/{index}/{leaf}"


def _shell_output_key(event: StreamEvent, leaf: str) -> str | None:
    index = event.command_index
    return None if index is None or index < 0 else f"shell_output/{index}/{leaf}"


def _content_text(event: StreamEvent) -> str | None:
    return _content_key(event, "text")


def _summary_text(event: StreamEvent) -> str | None:
    return _summary_key(event, "text")


def _field(name: str) -> Callable[[StreamEvent], str | None]:
    def field_name(event: StreamEvent) -> str | None:
        return name

    return field_name


PIECES: Final[Mapping[str, Callable[[StreamEvent], str | None]]] = {
    "response.output_text.delta": _content_text,
    "response.refusal.delta": _content_text,
    "response.reasoning_text.delta": _content_text,
    "response.reasoning_summary_text.delta": _summary_text,
    "response.function_call_arguments.delta": _field("arguments"),
    "response.mcp_call_arguments.delta": _field("arguments"),
    "response.custom_tool_call_input.delta": _field("input"),
    "response.code_interpreter_call_code.delta": _field("code"),
    "response.apply_patch_call_operation_diff.delta": _field("operation/diff"),
}
"""Event type whose string `delta` is a piece of text → the string field of the item
under assembly it is appended to (None: the event names no valid part). A part's text
goes to `content/<i>/text` or `summary/<i>/text`; a call's to `arguments`, `input` or
`code`. The decoder's hot path appends these straight to the field's piece list."""


def _append(field_of: Callable[[StreamEvent], str | None]) -> DeltaApplier:
    """A piece of text appended to a field's pieces (see `PIECES`)."""

    def apply(block: OpenBlock, event: StreamEvent) -> bool:
        key, piece = field_of(event), event.delta
        if key is None or not isinstance(piece, str) or not aimed(block, event):
            return False
        block.append_text(key, piece)
        return True

    return apply


def _final(key_of: Callable[[StreamEvent, str], str | None], name: str) -> DeltaApplier:
    """A `.done` event's whole text for a part."""

    def apply(block: OpenBlock, event: StreamEvent) -> bool:
        key, text = key_of(event, "final"), getattr(event, name)
        if key is None or not isinstance(text, str) or not aimed(block, event):
            return False
        block.set(key, text)
        # The pieces so far are superseded: `items.rebuild` reads the final text first.
        block.forget(key.removesuffix("final") + "text")
        return True

    return apply


def _part(key_of: Callable[[StreamEvent, str], str | None], *, done: bool) -> DeltaApplier:
    """A part announced (`.added`) or closed whole (`.done`)."""

    def apply(block: OpenBlock, event: StreamEvent) -> bool:
        key, part = key_of(event, ""), decode_object(event.part)
        if key is None or part is None or not aimed(block, event):
            return False
        block.set(key.removesuffix("/"), part)
        if done:
            block.set(key + "done", True)
            # The part came whole: `items.rebuild` reads it alone, not its text so far.
            block.forget(key + "text")
            block.forget(key + "final")
        return True

    return apply


def _annotation(block: OpenBlock, event: StreamEvent) -> bool:
    key, annotation = _content_key(event, "annotations"), decode_object(event.annotation)
    if key is None or annotation is None or not aimed(block, event):
        return False
    block.append_item(key, annotation)
    return True


def _field_done(name: str, source: str) -> DeltaApplier:
    """A `.done` event's whole value for a string field of the item."""

    def apply(block: OpenBlock, event: StreamEvent) -> bool:
        value = getattr(event, source)
        if not isinstance(value, str) or not aimed(block, event):
            return False
        block.set(name, value)
        return True

    return apply


def _status(status: str) -> DeltaApplier:
    def apply(block: OpenBlock, event: StreamEvent) -> bool:
        if not aimed(block, event):
            return False
        block.set("status", status)
        return True

    return apply


def _partial_image(block: OpenBlock, event: StreamEvent) -> bool:
    if not isinstance(event.partial_image_b64, str) or not aimed(block, event):
        return False
    block.set("partial_image_b64", event.partial_image_b64)  # the latest preview only
    return True


def _command(leaf: str) -> DeltaApplier:
    """A shell command as announced (`.added`: `start`) or whole (`.done`: `final`)."""

    def apply(block: OpenBlock, event: StreamEvent) -> bool:
        key, command = _command_key(event, leaf), event.command
        if key is None or not isinstance(command, str) or not aimed(block, event):
            return False
        block.set(key, command)
        if leaf == "final":
            block.forget(key.removesuffix("final") + "text")
        return True

    return apply


def _command_piece(block: OpenBlock, event: StreamEvent) -> bool:
    key, piece = _command_key(event, "text"), event.delta
    if key is None or not isinstance(piece, str) or not aimed(block, event):
        return False
    block.append_text(key, piece)
    return True


def _shell_output_piece(block: OpenBlock, event: StreamEvent) -> bool:
    """A piece of a hosted shell command's stdout and/or stderr."""
    delta = event.delta
    if not isinstance(delta, dict) or not aimed(block, event):
        return False
    pieces = [(name, delta.get(name)) for name in ("stdout", "stderr")]
    keys = [(_shell_output_key(event, name), piece) for name, piece in pieces if piece is not None]
    if not keys or any(key is None or not isinstance(piece, str) for key, piece in keys):
        return False
    for key, piece in keys:
        assert key is not None
        block.append_text(key, piece)
    return True


def _shell_output_done(block: OpenBlock, event: StreamEvent) -> bool:
    """A hosted shell command's output chunks, whole."""
    key = _shell_output_key(event, "chunks")
    try:
        chunks = msgspec.json.decode(event.output) if event.output else None
    except msgspec.DecodeError:
        chunks = None
    if key is None or not isinstance(chunks, list) or not aimed(block, event):
        return False
    block.set(key, chunks)
    for name in ("stdout", "stderr"):
        block.forget(key.removesuffix("chunks") + name)
    return True


def _noted(block: OpenBlock, event: StreamEvent) -> bool:
    """A progress event that changes nothing the item keeps (`compaction.compacting`)."""
    return aimed(block, event)


STATUS_EVENTS: Final[Mapping[str, tuple[str, str]]] = {
    f"response.{item}.{stage}": (item, stage)
    for item, stages in {
        "web_search_call": ("in_progress", "searching", "completed", "failed"),
        "file_search_call": ("in_progress", "searching", "completed", "failed"),
        "code_interpreter_call": ("in_progress", "interpreting", "completed", "failed"),
        "image_generation_call": ("in_progress", "generating", "completed", "failed"),
        "mcp_call": ("in_progress", "completed", "failed"),
        "mcp_list_tools": ("in_progress", "completed", "failed"),
    }.items()
    for stage in stages
}
"""Progress event type → (the item type it reports on, the status it announces). The
item's final status comes from `output_item.done`; until then the event only marks the
block (and opens one when `output_item.added` never came)."""

DELTAS: Final[Mapping[str, DeltaApplier]] = {
    "response.content_part.added": _part(_content_key, done=False),
    "response.content_part.done": _part(_content_key, done=True),
    "response.output_text.done": _final(_content_key, "text"),
    "response.output_text.annotation.added": _annotation,
    "response.refusal.done": _final(_content_key, "refusal"),
    "response.reasoning_text.done": _final(_content_key, "text"),
    "response.reasoning_summary_part.added": _part(_summary_key, done=False),
    "response.reasoning_summary_part.done": _part(_summary_key, done=True),
    "response.reasoning_summary_text.done": _final(_summary_key, "text"),
    "response.function_call_arguments.done": _field_done("arguments", "arguments"),
    "response.mcp_call_arguments.done": _field_done("arguments", "arguments"),
    "response.custom_tool_call_input.done": _field_done("input", "input"),
    "response.code_interpreter_call_code.done": _field_done("code", "code"),
    "response.image_generation_call.partial_image": _partial_image,
    "response.shell_call_command.added": _command("start"),
    "response.shell_call_command.delta": _command_piece,
    "response.shell_call_command.done": _command("final"),
    "response.shell_call_output_content.delta": _shell_output_piece,
    "response.shell_call_output_content.done": _shell_output_done,
    "response.apply_patch_call_operation_diff.done": _field_done("operation/diff", "diff"),
    "response.compaction.compacting": _noted,
    **{kind: _status(status) for kind, (_, status) in STATUS_EVENTS.items()},
    **{kind: _append(field_of) for kind, field_of in PIECES.items()},
}
"""Event type → how it changes the output item under assembly (others are kept as
unknown stream events)."""
