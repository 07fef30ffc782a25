"""A plain-json reading of Gemini parts, independent of the decoder, shared by the Gemini
tests: a function call streamed in pieces (`willContinue`, `partialArgs`) as the one whole
part a client keeping the turn sends back."""

from __future__ import annotations

import re
from itertools import pairwise
from typing import Any

_SEGMENT = re.compile(r"\.(\w+)|\[(\d+)\]|\['([^']*)'\]")
_VALUES = ("stringValue", "numberValue", "boolValue", "nullValue")


def whole_calls(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`parts` with each streamed call's parts replaced by one whole call part where its
    last piece stood; every other part unchanged."""
    out: list[dict[str, Any]] = []
    open_call: dict[str, Any] | None = None
    for part in parts:
        call = part.get("functionCall")
        if call is None:
            out.append(part)
            continue
        if open_call is not None and call.get("name"):
            out.append(open_call)  # a new call: the open one ended without its marker
            open_call = None
        if open_call is None and not (call.get("willContinue") or "partialArgs" in call):
            out.append(part)
            continue
        if open_call is None:
            whole = {k: v for k, v in call.items() if k not in ("willContinue", "partialArgs")}
            open_call = {**part, "functionCall": {**whole, "args": {}}}
        apply_pieces(open_call["functionCall"]["args"], call.get("partialArgs", []))
        if not call.get("willContinue"):
            out.append(open_call)
            open_call = None
    return out + ([open_call] if open_call is not None else [])


def apply_pieces(args: dict[str, Any], pieces: list[dict[str, Any]]) -> None:
    """Each piece's value set at its JSON path; a string continued when the same path had
    `willContinue`."""
    for piece in pieces:
        keys: list[Any] = [
            int(index) if index else name or quoted
            for name, index, quoted in _SEGMENT.findall(piece["jsonPath"])
        ]
        given = [k for k in _VALUES if k in piece]
        if not given:
            continue
        value = None if given[0] == "nullValue" else piece[given[0]]
        node: Any = args
        for key, following in pairwise(keys):
            empty: Any = [] if isinstance(following, int) else {}
            if isinstance(node, list):
                node.extend([None] * (key + 1 - len(node)))
                if node[key] is None:
                    node[key] = empty
            else:
                node.setdefault(key, empty)
            node = node[key]
        last = keys[-1]
        if isinstance(node, list):
            node.extend([None] * (last + 1 - len(node)))
        current = node[last] if isinstance(node, list) else node.get(last)
        if isinstance(current, str) and isinstance(value, str):
            value = current + value
        node[last] = value
