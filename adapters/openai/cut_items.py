"""Cut output items (the stream ended before `output_item.done`): the assembled parts
folded back into the native item, so that the mapper reads a cut item as a whole one."""

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
                    part["annotations"] = [*as_list(part.get("annotations")), *added]
            if position < len(result):
                result[position] = part
            else:
                result.append(part)
        item[name] = result
    return item, closed
