"""Cut output items (the stream ended before `output_item.done`): the assembled parts
folded back into the native item, so that the mapper reads a cut item as a whole one.

The diff of a cut apply_patch call is the deltas' text (the `.done` diff once it came)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from convstore.adapters.openai.item_fields import as_list

__all__ = ["rebuild"]


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


_TOOL_LEAVES: Final[Mapping[str, Mapping[str, type]]] = {
    "commands": {"start": str, "text": str, "final": str},
    "shell_output": {"stdout": str, "stderr": str, "chunks": list},
}
"""The path-named fields of a shell call's commands and a hosted shell's output."""

_DIFF: Final = "operation/diff"


_Groups = dict[str, dict[int, dict[str, Any]]]


def _tool_fields(block: Mapping[str, Any]) -> tuple[dict[str, Any], _Groups]:
    """The block without its tool path fields, and those fields by name and position (the
    diff under `_DIFF`, position 0)."""
    rest: dict[str, Any] = {}
    tools: _Groups = {}
    for key, value in block.items():
        name, slash, tail = key.partition("/")
        digits, _, leaf = tail.partition("/")
        expected = _TOOL_LEAVES.get(name, {}).get(leaf)
        if slash and digits.isdigit() and expected is not None and isinstance(value, expected):
            tools.setdefault(name, {}).setdefault(int(digits), {})[leaf] = value
        elif key == _DIFF and isinstance(value, str):
            tools[_DIFF] = {0: {"diff": value}}
        else:
            rest[key] = value
    return rest, tools


def _fold_tools(item: dict[str, Any], groups: _Groups) -> None:
    """Fold a cut shell call's commands (into `action.commands`), a hosted shell output's
    pieces (into `output`) and an apply_patch diff (into `operation.diff`) back into the
    item."""
    diff = groups.get(_DIFF)
    if diff:
        operation = item.get("operation")
        item["operation"] = {**(operation if isinstance(operation, dict) else {}), **diff[0]}
    commands = groups.get("commands")
    if commands:
        action = item.get("action")
        action = dict(action) if isinstance(action, dict) else {}
        listed = action.get("commands")
        result = [c if isinstance(c, str) else "" for c in as_list(listed)]
        for index in sorted(commands):
            pieces = commands[index]
            final = pieces.get("final")
            text = (
                final
                if isinstance(final, str)
                else pieces.get("start", "") + pieces.get("text", "")
            )
            position = min(index, len(result))
            if position < len(result):
                result[position] = text
            else:
                result.append(text)
        action["commands"] = result
        item["action"] = action
    outputs = groups.get("shell_output")
    if outputs:
        chunks: list[Any] = []
        for index in sorted(outputs):
            pieces = outputs[index]
            whole = pieces.get("chunks")
            if isinstance(whole, list):
                chunks.extend(whole)
            else:
                chunks.append(
                    {"stdout": pieces.get("stdout", ""), "stderr": pieces.get("stderr", "")}
                )
        item["output"] = chunks


def rebuild(block: Mapping[str, Any]) -> tuple[dict[str, Any], set[tuple[str, int]]]:
    """The native item of a cut block, and the (field, position) of each part closed.

    Folds the path-named fields of `wire` (`content/<i>`, `content/<i>/text`, …) into
    the item's `content` / `summary` lists; an open part gets its text so far. A shell
    call's commands, a hosted shell's output and an apply_patch diff go back to their
    places in the item the same way.
    """
    block, tools = _tool_fields(block)
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
                    part["annotations"] = [*as_list(part.get("annotations")), *added]
            if position < len(result):
                result[position] = part
            else:
                result.append(part)
        item[name] = result
    _fold_tools(item, tools)
    return item, closed
