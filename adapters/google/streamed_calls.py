"""A function call whose arguments Gemini streams in pieces, assembled into one whole part.

With `toolConfig.functionCallingConfig.streamFunctionCallArguments` (Vertex AI, Gemini 3),
one call arrives as several `functionCall` parts, one or a few per chunk:

- the opening part names the function and says more follows: `{"functionCall": {"name":
  "f", "willContinue": true}, "thoughtSignature": "…"}` (the signature, when there is one,
  sits on this part; an `id`, when there is one, too);
- pieces carry `partialArgs`, each `{"jsonPath": "$.a.b[0].c", "stringValue" | "numberValue"
  | "boolValue" | "nullValue": …, "willContinue"?: true}`: a string value continues over
  the following pieces of the same path while `willContinue` is true (the pieces
  concatenate); pieces with only `{"willContinue": true}` carry nothing;
- the call ends with a part whose `functionCall` has no `willContinue`: an empty
  `functionCall: {}`, or the last piece itself.

`StreamedCall` applies the pieces to a JSON object (paths in RFC 9535 notation: `$`, then
`.name`, `['name']` or `[index]` segments) and gives the call as one whole part, exactly
as a non-streamed response would carry it: the opening part's fields (its signature byte
for byte) with `functionCall` = `{name, id?, args}`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import pairwise
from typing import Any, Final

__all__ = ["MalformedPiece", "StreamedCall", "json_path"]

_VALUES: Final = ("stringValue", "numberValue", "boolValue", "nullValue")
_SEGMENT: Final = re.compile(
    r"\.(?P<name>[A-Za-z_][A-Za-z0-9_-]*)"
    r"|\[(?P<index>\d+)\]"
    r"|\['(?P<single>(?:[^'\\]|\\.)*)'\]"
    r'|\["(?P<double>(?:[^"\\]|\\.)*)"\]'
)
_DOTTED: Final = re.compile(r"\$(?:\.[A-Za-z_][A-Za-z0-9_-]*)+")
"""A path of member names only (`$.a.b`), the common one: read in one match."""
_KINDS: Final[Mapping[str, tuple[type, ...]]] = {
    "stringValue": (str,),
    "numberValue": (int, float),
    "boolValue": (bool,),
}
"""The types each value field may hold (`nullValue` holds anything: it means null)."""
_MAX_INDEX: Final = 10_000
"""An array index past this is refused (a piece must not make the decoder allocate)."""


class MalformedPiece(ValueError):
    """A piece that cannot be applied: a bad path or value, or a path through a value of
    another shape."""


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def json_path(path: Any) -> list[str | int]:
    """The segments of a normalized JSON path (`$.a['b'][0]` → `["a", "b", 0]`)."""
    if not isinstance(path, str) or not path.startswith("$"):
        raise MalformedPiece("a partial argument without a JSON path")
    if _DOTTED.fullmatch(path):
        return list(path[2:].split("."))
    segments: list[str | int] = []
    at = 1
    while at < len(path):
        match = _SEGMENT.match(path, at)
        if match is None:
            raise MalformedPiece("a JSON path this decoder cannot read")
        if match["name"] is not None:
            segments.append(match["name"])
        elif match["index"] is not None:
            index = int(match["index"])
            if index > _MAX_INDEX:
                raise MalformedPiece("an array index out of range")
            segments.append(index)
        else:
            segments.append(_unescape(match["single"] or match["double"] or ""))
        at = match.end()
    if not segments:
        raise MalformedPiece("a partial argument for the whole arguments object")
    return segments


def _value(piece: Mapping[str, Any]) -> tuple[bool, Any]:
    """(whether the piece carries a value, the value)."""
    given = [key for key in _VALUES if key in piece]
    if len(given) > 1:
        raise MalformedPiece("a partial argument with several values")
    if not given:
        return False, None
    key = given[0]
    value = piece[key]
    if key == "nullValue":
        return True, None
    if not isinstance(value, _KINDS[key]) or (key == "numberValue" and isinstance(value, bool)):
        raise MalformedPiece(f"a {key} of the wrong type")
    return True, value


class StreamedCall:
    """One streamed function call: its opening part and its arguments so far."""

    __slots__ = ("_continuing", "_paths", "args", "opening")

    def __init__(self, opening: Mapping[str, Any]) -> None:
        self.opening = dict(opening)
        """The part that opened the call (name, signature, id), as received."""
        self.args: dict[str, Any] = {}
        self._continuing: set[str] = set()
        """Paths whose string value continues in the next piece of the same path."""
        self._paths: dict[str, list[str | int]] = {}
        """Each path read so far, as its segments (a string's pieces repeat its path)."""

    def add(self, call: Mapping[str, Any]) -> None:
        """Apply one part's `functionCall` pieces (raises MalformedPiece)."""
        pieces = call.get("partialArgs", [])
        if not isinstance(pieces, list):
            raise MalformedPiece("partialArgs is not a list")
        for piece in pieces:
            if not isinstance(piece, dict):
                raise MalformedPiece("a partial argument is not an object")
            self._apply(piece)

    def _apply(self, piece: Mapping[str, Any]) -> None:
        key = piece.get("jsonPath")
        if not isinstance(key, str):
            raise MalformedPiece("a partial argument without a JSON path")  # as json_path
        segments = self._paths.get(key)
        if segments is None:
            segments = self._paths[key] = json_path(key)
        carries, value = _value(piece)
        continuing = key in self._continuing
        if piece.get("willContinue") is True:
            self._continuing.add(key)
        else:
            self._continuing.discard(key)
        if not carries:
            return
        parent, last = self._parent(segments)
        current = _get(parent, last)
        if continuing and isinstance(value, str) and isinstance(current, str):
            value = current + value
        _set(parent, last, value)

    def _parent(self, segments: list[str | int]) -> tuple[dict[str, Any] | list[Any], str | int]:
        node: dict[str, Any] | list[Any] = self.args
        for segment, following in pairwise(segments):
            child = _get(node, segment)
            if child is None:
                child = [] if isinstance(following, int) else {}
                _set(node, segment, child)
            if not isinstance(child, dict | list):
                raise MalformedPiece("a JSON path through a value that is not a container")
            node = child
        return node, segments[-1]

    def part(self) -> dict[str, Any]:
        """The call as one whole part: the opening part's fields, `functionCall` holding
        its name (and id) and the assembled `args`."""
        opening = self.opening.get("functionCall")
        fields = opening if isinstance(opening, dict) else {}
        call = {k: v for k, v in fields.items() if k not in ("willContinue", "partialArgs")}
        call["args"] = self.args
        return {**self.opening, "functionCall": call}


def _get(node: dict[str, Any] | list[Any], segment: str | int) -> Any:
    if isinstance(node, dict):
        if not isinstance(segment, str):
            raise MalformedPiece("an array index into an object")
        return node.get(segment)
    if not isinstance(segment, int):
        raise MalformedPiece("a member name into an array")
    return node[segment] if segment < len(node) else None


def _set(node: dict[str, Any] | list[Any], segment: str | int, value: Any) -> None:
    if isinstance(node, dict):
        assert isinstance(segment, str)  # checked by _get
        node[segment] = value
        return
    assert isinstance(segment, int)
    node.extend([None] * (segment + 1 - len(node)))
    node[segment] = value
