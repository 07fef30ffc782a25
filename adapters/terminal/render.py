"""The one way text reaches a terminal: the sanitizer, the renderer, and inert JSON.

Stored text is untrusted (model output, web content, tool results, titles): an escape
sequence in it could retitle the window, forge a hyperlink, move the cursor, or reorder
what a reader sees. Every byte the command line writes passes through `sanitize`
(`Renderer` applies it), and `--json` output is built by `to_json`, which escapes the same
characters, so JSON on a terminal is inert too.

The rule: every forbidden character becomes one visible placeholder; everything else
passes unchanged (all printable Unicode, CJK, emoji, `\\n`, `\\t`).

- A whole escape sequence becomes `␛` (U+241B), once: CSI, OSC (titles, hyperlinks), DCS,
  SOS, PM, APC with their parameters and terminator, and any other `ESC`-introduced
  sequence, in the 7-bit (`ESC [`) or 8-bit (U+009B) form.
- A C0 control other than `\\n` and `\\t` (a lone ESC, BEL, bare CR, BS, ...) and DEL
  become their Control Picture (`␛ ␇ ␍ ␈ ... ␡`).
- Every other forbidden character becomes `\ufffd` (U+FFFD): C1 controls (U+0080-U+009F);
  format characters (category Cf: bidi controls, zero-width space, BOM, invisible
  operators, tag characters, ...); the invisible fillers U+115F, U+1160, U+17B4, U+17B5,
  U+3164, U+FFA0; U+2028 and U+2029; unassigned default-ignorables; lone surrogates.

Kept on purpose: ZWNJ and ZWJ (U+200C, U+200D: emoji sequences, Indic and Arabic scripts
need them), variation selectors, and a well-formed emoji tag sequence (a subdivision flag
such as England's: U+1F3F4, two to seven tag letters or digits, U+E007F). `\\r\\n`
becomes `\\n`: only a bare CR is a control.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final, Protocol

# One character class for everything forbidden outside escape sequences.
_FORBIDDEN_CHARS: Final = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 except \t \n, DEL, C1
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2"  # Cf in the BMP...
    "\u115f\u1160\u17b4\u17b5\u180e"  # ...with the invisible fillers
    "\u200b\u200e\u200f\u2028-\u202e\u2060-\u206f"  # zero-width, bidi, separators, operators
    "\u3164\ud800-\udfff\ufeff\uffa0\ufff0-\ufffb"  # filler, lone surrogates, BOM, annotation
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e00ff\U000e01f0-\U000e0fff"  # tags; default-ignorables (not the VS)
)
_TAG_LETTERS: Final = "[\U000e0030-\U000e0039\U000e0061-\U000e007a]{2,7}\U000e007f"
_FLAG: Final = "\U0001f3f4"
_CSI: Final = r"[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"
_OSC: Final = r"[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"  # ends at BEL or ST
_STRING: Final = r"[^\x1b\x9c]*(?:\x1b\\|\x9c)"  # DCS, SOS, PM, APC end at ST

# Every match starts with one forbidden character (or a flag), so the regex engine skips
# clean text at C speed; what follows it is dispatched on that first character.
_UNSAFE: Final = re.compile(
    rf"""
    [{_FORBIDDEN_CHARS}{_FLAG}]
    (?:
        (?<=\x1b) (?: \[{_CSI} | \]{_OSC} | [PX^_]{_STRING} | [\x20-\x2f]*[\x30-\x7e] )
      | (?<=\x9b) {_CSI}
      | (?<=\x9d) {_OSC}
      | (?<=[\x90\x98\x9e\x9f]) {_STRING}
      | (?<=\r) \n
      | (?<={_FLAG}) {_TAG_LETTERS}
    )?
    """,
    re.VERBOSE,
)
_FORBIDDEN: Final = re.compile(f"[{_FORBIDDEN_CHARS}]")

ESCAPE_PLACEHOLDER: Final = "\u241b"
"""Shown for a whole escape sequence (and for a lone ESC)."""
OTHER_PLACEHOLDER: Final = "\ufffd"
"""Shown for a removed character with no Control Picture."""


def _placeholder(char: str) -> str:
    code = ord(char)
    if code < 0x20:
        return chr(0x2400 + code)  # the Control Pictures block mirrors C0
    if code == 0x7F:
        return "\u2421"
    return OTHER_PLACEHOLDER


def _replace(match: re.Match[str]) -> str:
    found = match.group()
    first = found[0]
    if first == _FLAG:
        return found  # a flag alone, or a well-formed emoji tag sequence
    if len(found) == 1:
        return _placeholder(first)
    if first == "\r":
        return "\n"
    return ESCAPE_PLACEHOLDER


def sanitize(text: str) -> str:
    """`text` with every control, escape sequence and invisible format character made visible.

    Idempotent; `\\n`, `\\t` and all printable text are unchanged (see the module's table).
    """
    return _UNSAFE.sub(_replace, text)


def one_line(text: str) -> str:
    """`sanitize(text)` with newlines and tabs turned into spaces, for one-line contexts."""
    return sanitize(text).replace("\n", " ").replace("\t", " ")


def shorten(text: str, width: int) -> str:
    """`one_line(text)`, cut to `width` characters with an ellipsis when longer."""
    line = one_line(text)
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def to_json(data: Any) -> str:
    """Compact JSON of plain data, readable Unicode kept, every forbidden character escaped.

    Lossless: parsing the result gives back exactly `data`'s strings.
    """
    import json  # here: `--help` prints no JSON

    return inert_json(json.dumps(data, ensure_ascii=False, separators=(",", ":")))


def inert_json(text: str) -> str:
    """Already-encoded JSON with every forbidden character escaped as `\\uXXXX` (lossless)."""
    # Outside strings JSON is ASCII, so every match lies inside a string and \\uXXXX is valid.
    return _FORBIDDEN.sub(_json_escape, text)


class TextStream(Protocol):
    """Where a Renderer writes: anything with `write(str)` (a file, sys.stdout, StringIO)."""

    def write(self, text: str, /) -> object:
        """Write `text`."""
        ...


class Renderer:
    """Writes to one text stream, sanitizing everything: the only path to a terminal."""

    def __init__(self, stream: TextStream) -> None:
        self.stream = stream
        self.wrote = False
        """Whether anything was written yet."""

    def write(self, text: str) -> None:
        """Write sanitized `text` as is (no newline added)."""
        self.wrote = self.wrote or bool(text)
        text = sanitize(text)
        try:
            self.stream.write(text)
        except UnicodeEncodeError:  # a terminal that cannot show the text: escape it
            encoding = getattr(self.stream, "encoding", None) or "ascii"
            self.stream.write(text.encode(encoding, "backslashreplace").decode(encoding))

    def styled(self, text: str, style: str) -> None:
        """Write sanitized `text` in an SGR `style` (e.g. `2`, dim) on a terminal; plain
        text anywhere else. The style's codes are ours: stored text never carries one."""
        isatty = getattr(self.stream, "isatty", None)
        if not (isatty and isatty()):
            self.write(text)
            return
        self.stream.write(f"\x1b[{style}m")  # our own codes, around sanitized text
        self.write(text)
        self.stream.write("\x1b[0m")

    def line(self, text: str = "") -> None:
        """Write one sanitized line."""
        self.write(text + "\n")

    def lines(self, lines: Iterable[str]) -> None:
        """Write sanitized lines."""
        for text in lines:
            self.line(text)

    def json(self, data: Any) -> None:
        """Write `data` as one line of inert JSON."""
        self.line(to_json(data))

    def json_text(self, text: str) -> None:
        """Write already-encoded JSON as one inert line (its values unchanged)."""
        self.line(inert_json(text))

    def json_array(self, items: Iterable[Any]) -> None:
        """Write a JSON array, one element a line, streaming (memory stays flat)."""
        self.line("[")
        separator = ""
        for item in items:
            self.write(separator + to_json(item))
            separator = ",\n"
        if separator:
            self.line()
        self.line("]")

    def flush(self) -> None:
        """Flush the stream, where it can be flushed."""
        flush = getattr(self.stream, "flush", None)
        if flush is not None:
            flush()
