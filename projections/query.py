"""The search language: text normalization, the query parser and its renderings for
FTS5 and `to_tsquery`, and snippets; the same on both backends.

Text normalization, the same on both backends (`terms`): case folding, compatibility
normalization (full-width letters, ligatures), diacritics removed (`café` is found by
`cafe` and the other way round), letters and digits make words (punctuation and `_`
separate them, so a URL's parts are words), and every CJK character (Han, kana, Hangul) is
a word of its own: CJK text has no spaces, so `東京` is searched as the phrase `東 京`,
which finds it inside `東京タワー`. Thai and other scripts written without spaces are only
found by whole runs. PostgreSQL's parser is given the normalized words only, so its URL,
e-mail and hyphenation rules never apply; FTS5 gets ASCII text as it is (its tokenizer
does the same as `terms` there) and other text normalized.

Why `simple` over normalized words on PostgreSQL: a language configuration would stem
one language and drop its stop words while mangling every other, and PostgreSQL's parser
keeps a CJK run as one word (`東京タワーに行きました` is a single lexeme), so a CJK word
inside it could never be found; `unaccent` is an extension a server may not offer. So
the folding and splitting happen here, identically for both backends, and PostgreSQL
only lower-cases and positions words it is given one by one.

Query language (`parse_query`), lenient by design: every string is either a query or a
`SearchQueryError` saying there is nothing to search for; it never reaches the database
as syntax. The parsed query is rendered as an FTS5 expression or a `to_tsquery` string
made only of quoted normalized words and our own operators, passed as a bound parameter
(not `websearch_to_tsquery`: it has no prefix or NEAR, and would parse the words again).

- words are ANDed; `"a phrase"` matches adjacent words; a bare word with punctuation
  inside (`foo:bar`, `example.com/x`, `col:term`) is the phrase of its words;
- `word*` and `"a phr"*` match by prefix (of the last word);
- `-word`, `-"phrase"`, `-(group)` and `NOT x` exclude; exclusions need something to
  exclude from: a group of exclusions only is dropped, and a query of them is an error;
- `a OR b` (upper case) is either; `AND` (upper case) is allowed and changes nothing;
- `( … )` groups; a missing `)` closes at the end, a stray `)` is ignored, nesting deeper
  than 32 is flattened;
- `NEAR(a b "c d", N)` (N at most 50, default 10): the phrases within N words of each
  other. Exact in FTS5; on PostgreSQL pairs are expanded into `<k>` distances both ways
  (exact for two phrases; for more, each consecutive pair is near: slightly looser);
- an unbalanced `"` runs to the end; NUL and control characters are spaces; a query over
  `MAX_QUERY_CHARS` characters or with more than `MAX_QUERY_TERMS` words is an error.

Snippets (`snippet`) are made from the stored original text, not by FTS5 `snippet()` or
`ts_headline`, which can only show the normalized text they indexed (no accents,
spaced-out CJK): a window of words around the first match, matches in `[` `]`, whitespace
collapsed, `…` where cut.
"""

from __future__ import annotations

import re
import unicodedata
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from convstore.domain.errors import ConvstoreError

MAX_QUERY_CHARS: Final = 4096
MAX_QUERY_TERMS: Final = 64
MAX_TERM_CHARS: Final = 255
MAX_NEAR: Final = 50
DEFAULT_NEAR: Final = 10
MAX_DEPTH: Final = 32


class SearchQueryError(ConvstoreError):
    """A search query with nothing to search for, or too long."""


# --- text normalization -------------------------------------------------------------------------

# Scripts written without spaces between words: each character is a word of its own.
_CJK: Final = (
    "\u2e80-\u2fdf\u3005-\u3007\u3021-\u3029\u3038-\u303c"  # radicals, iteration marks
    "\u3041-\u3096\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff"  # hiragana, katakana
    "\u3105-\u312f\u3131-\u318e\u31a0-\u31bf\u31f0-\u31ff"  # bopomofo, jamo, small kana
    "\u3400-\u4dbf\u4e00-\u9fff\ua000-\ua48c\uac00-\ud7a3\uf900-\ufaff"  # Han, Yi, Hangul
    "\uff66-\uff9f\U00020000-\U0003134f"  # half-width kana, Han extensions
)
# Combining marks that belong inside words (Python's \w leaves them out).
_MARKS: Final = (
    "\u0300-\u036f\u0483-\u0489\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7"
    "\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06dc\u06df-\u06e4\u06e7\u06e8\u06ea-\u06ed"
    "\u0900-\u0963\u0966-\u096f\u0971-\u0df3"  # Indic blocks without the dandas
    "\u0e31\u0e34-\u0e3a\u0e47-\u0e4e\u0eb1\u0eb4-\u0ebc\u0ec8-\u0ecd"  # Thai, Lao
    "\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
)
_TOKEN: Final = re.compile(f"[{_CJK}]|(?:[^\\W_{_CJK}]|[{_MARKS}])+")
_MARKS_ONLY: Final = re.compile(f"[{_MARKS}]+")
_ASCII_TOKEN: Final = re.compile("[a-z0-9]+")
_DIACRITICS: Final = re.compile("[\u0300-\u036f]")
_NO_DECOMPOSITION: Final = str.maketrans(
    {"ø": "o", "ł": "l", "đ": "d", "ħ": "h", "\u0131": "i", "ŧ": "t", "ŀ": "l", "ð": "d"}
)


def fold(text: str) -> str:
    """Case-folded, compatibility-normalized text without diacritics (kana marks kept)."""
    if text.isascii():
        return text.lower()
    text = unicodedata.normalize("NFKD", text.casefold())
    text = _DIACRITICS.sub("", text)
    return unicodedata.normalize("NFC", text).translate(_NO_DECOMPOSITION)


def terms(text: str) -> list[str]:
    """The words of `text` as the index sees them (see the module's normalization rules)."""
    if text.isascii():
        return _ASCII_TOKEN.findall(text.lower())
    return _TOKEN.findall(fold(text))


def normalized(text: str) -> str:
    """`terms(text)` joined by spaces: what a full-text engine is given to index."""
    return " ".join(terms(text))


# --- the query language -------------------------------------------------------------------------


@dataclass(frozen=True)
class Phrase:
    """Adjacent words; `prefix`: the last one matches as a prefix."""

    words: tuple[str, ...]
    prefix: bool = False


@dataclass(frozen=True)
class Near:
    """Phrases within `distance` words of each other."""

    phrases: tuple[Phrase, ...]
    distance: int


@dataclass(frozen=True)
class AllOf:
    """Every `include`, and none of `exclude`."""

    include: tuple[Node, ...]
    exclude: tuple[Node, ...] = ()


@dataclass(frozen=True)
class AnyOf:
    """At least one option."""

    options: tuple[Node, ...]


Node = Phrase | Near | AllOf | AnyOf

_LEXEME: Final = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<quote>"[^"]*"?)(?P<star>\*?)
  | (?P<near>NEAR\()
  | (?P<open>\()
  | (?P<close>\))
  | (?P<comma>,)
  | (?P<minus>-(?=[^\s-]))
  | (?P<word>[^\s"(),]+)
    """,
    re.VERBOSE,
)
_CONTROLS: Final = re.compile("[\x00-\x1f\x7f-\x9f]")
_OPERATORS: Final = {"OR", "AND", "NOT"}


def parse_query(query: str) -> Node:
    """The user's query as a tree of phrases and operators (rules in the module docstring).

    Raises SearchQueryError when nothing is left to search for, or the query is too long.
    """
    if len(query) > MAX_QUERY_CHARS:
        raise SearchQueryError(
            f"search query too long: {len(query)} characters (at most {MAX_QUERY_CHARS})"
        )
    lexemes: list[tuple[str, str]] = []
    for match in _LEXEME.finditer(_CONTROLS.sub(" ", query)):
        kind = match.lastgroup or "space"
        if kind == "space":
            continue
        if kind in ("quote", "star"):
            text = match.group("quote")
            closed = len(text) > 1 and text.endswith('"')
            lexemes.append(
                ("prefix" if match.group("star") else "phrase", text[1 : -1 if closed else None])
            )
        elif kind == "word":
            text = match.group()
            if text in _OPERATORS:
                lexemes.append((text, text))
            elif text.endswith("*"):
                lexemes.append(("prefix", text.rstrip("*")))
            else:
                lexemes.append(("phrase", text))
        else:
            lexemes.append((kind, match.group()))
    node = _Parser(lexemes).parse()
    if node is None:
        raise SearchQueryError(
            f"nothing to search for in {query[:80]!r}: it has no words"
            + (" outside exclusions" if any(k in ("minus", "NOT") for k, _ in lexemes) else "")
            + (
                f" (a word over {MAX_TERM_CHARS} characters is not searched for)"
                if any(len(t) > MAX_TERM_CHARS for _, text in lexemes for t in terms(text))
                else ""
            )
        )
    count = sum(len(p.words) for p in positive_phrases(node)) + _excluded_words(node)
    if count > MAX_QUERY_TERMS:
        raise SearchQueryError(
            f"search query has {count} words; at most {MAX_QUERY_TERMS} are searched for"
        )
    return node


def _phrase(text: str, prefix: bool) -> Phrase | None:
    words = tuple(
        t for t in terms(text) if len(t) <= MAX_TERM_CHARS and not _MARKS_ONLY.fullmatch(t)
    )
    return Phrase(words, prefix) if words else None


def _all_of(include: list[Node], exclude: list[Node]) -> Node | None:
    if not include:
        return None  # nothing to exclude from
    if len(include) == 1 and not exclude:
        return include[0]
    return AllOf(tuple(include), tuple(exclude))


def _any_of(options: list[Node | None]) -> Node | None:
    kept: list[Node] = []
    for option in options:
        if isinstance(option, AnyOf):
            kept.extend(option.options)
        elif option is not None:
            kept.append(option)
    if not kept:
        return None
    return kept[0] if len(kept) == 1 else AnyOf(tuple(kept))


class _Parser:
    """Recursive descent over lexemes that never fails: what does not fit is dropped."""

    def __init__(self, lexemes: list[tuple[str, str]]) -> None:
        self.lexemes = lexemes
        self.at = 0
        self.depth = 0

    def _peek(self) -> str | None:
        return self.lexemes[self.at][0] if self.at < len(self.lexemes) else None

    def parse(self) -> Node | None:
        parts: list[Node] = []
        while True:
            node = self._or()
            if node is not None:
                parts.append(node)
            if self._peek() is None:
                break
            self.at += 1  # a stray `)`
        return _all_of(parts, [])

    def _or(self) -> Node | None:
        options = [self._and()]
        while self._peek() == "OR":
            self.at += 1
            options.append(self._and())
        return _any_of(options)

    def _and(self) -> Node | None:
        include: list[Node] = []
        exclude: list[Node] = []
        while (kind := self._peek()) is not None and kind not in ("close", "OR"):
            if kind in ("AND", "comma"):
                self.at += 1
                continue
            negated = False
            while self._peek() in ("minus", "NOT"):
                negated = True
                self.at += 1
            node = self._primary()
            if node is not None:
                (exclude if negated else include).append(node)
        return _all_of(include, exclude)

    def _primary(self) -> Node | None:
        kind = self._peek()
        if kind is None or kind in ("close", "OR"):
            return None
        text = self.lexemes[self.at][1]
        self.at += 1
        if kind in ("phrase", "prefix"):
            return _phrase(text, kind == "prefix")
        if kind == "open":
            if self.depth >= MAX_DEPTH:
                return None  # too deep: the group's contents join this level
            self.depth += 1
            node = self._or()
            self.depth -= 1
            if self._peek() == "close":
                self.at += 1
            return node
        if kind == "near":
            return self._near()
        return None  # AND, comma, a dangling `-` or NOT

    def _near(self) -> Node | None:
        phrases: list[Phrase] = []
        distance = DEFAULT_NEAR
        while (kind := self._peek()) is not None and kind != "close":
            text = self.lexemes[self.at][1]
            self.at += 1
            if kind == "comma":
                if self._peek() == "phrase" and self.lexemes[self.at][1].isdigit():
                    distance = min(int(self.lexemes[self.at][1][:6]), MAX_NEAR)
                    self.at += 1
            elif kind in ("phrase", "prefix"):
                phrase = _phrase(text, kind == "prefix")
                if phrase is not None:
                    phrases.append(phrase)
        if self._peek() == "close":
            self.at += 1
        if len(phrases) < 2:
            return phrases[0] if phrases else None
        return Near(tuple(phrases), distance)


def positive_phrases(node: Node) -> Iterator[Phrase]:
    """The phrases a match contains (not the excluded ones), for highlighting."""
    if isinstance(node, Phrase):
        yield node
    elif isinstance(node, Near):
        yield from node.phrases
    elif isinstance(node, AllOf):
        for child in node.include:
            yield from positive_phrases(child)
    else:
        for child in node.options:
            yield from positive_phrases(child)


def _excluded_words(node: Node) -> int:
    if isinstance(node, AllOf):
        return sum(
            sum(len(p.words) for p in positive_phrases(child)) + _excluded_words(child)
            for child in node.exclude
        ) + sum(_excluded_words(child) for child in node.include)
    if isinstance(node, AnyOf):
        return sum(_excluded_words(child) for child in node.options)
    return 0


def to_fts5(node: Node) -> str:
    """An FTS5 MATCH expression: every word double-quoted, only our operators."""
    if isinstance(node, Phrase):
        return '"' + " ".join(node.words) + '"' + ("*" if node.prefix else "")
    if isinstance(node, Near):
        return f"NEAR({' '.join(to_fts5(p) for p in node.phrases)}, {node.distance})"
    if isinstance(node, AllOf):
        text = "(" + " AND ".join(to_fts5(child) for child in node.include) + ")"
        if node.exclude:
            text += " NOT (" + " OR ".join(to_fts5(child) for child in node.exclude) + ")"
        return "(" + text + ")"
    return "(" + " OR ".join(to_fts5(child) for child in node.options) + ")"


def to_tsquery(node: Node) -> str:
    """A `to_tsquery` string: every word single-quoted, only our operators."""
    if isinstance(node, Phrase):
        words = [f"'{word}'" for word in node.words]
        if node.prefix:
            words[-1] += ":*"
        return words[0] if len(words) == 1 else "(" + " <-> ".join(words) + ")"
    if isinstance(node, Near):
        pairs = []
        for left, right in zip(node.phrases, node.phrases[1:], strict=False):
            a, b = to_tsquery(left), to_tsquery(right)
            options = [
                f"({x} <{k}> {y})" for k in range(1, node.distance + 2) for x, y in ((a, b), (b, a))
            ]
            pairs.append("(" + " | ".join(options) + ")")
        return "(" + " & ".join(pairs) + ")"
    if isinstance(node, AllOf):
        text = " & ".join(to_tsquery(child) for child in node.include)
        if node.exclude:
            text += " & !(" + " | ".join(to_tsquery(child) for child in node.exclude) + ")"
        return "(" + text + ")"
    return "(" + " | ".join(to_tsquery(child) for child in node.options) + ")"


# --- snippets -----------------------------------------------------------------------------------

SNIPPET_BEFORE: Final = 6
SNIPPET_WORDS: Final = 24
_SPACES: Final = re.compile(r"\s+")


def snippet(text: str, node: Node) -> str:
    """Words of `text` around the first word the query's phrases match, matches in `[` `]`."""
    exact: set[str] = set()
    prefixes: list[str] = []
    for phrase in positive_phrases(node):
        *whole, last = phrase.words
        exact.update(whole)
        if phrase.prefix:
            prefixes.append(last)
        else:
            exact.add(last)
    prefix_tuple = tuple(prefixes)

    def matches(word: str) -> bool:
        for folded in terms(word):
            if folded in exact or (prefix_tuple and folded.startswith(prefix_tuple)):
                return True
        return False

    before: deque[tuple[int, int, bool]] = deque(maxlen=SNIPPET_BEFORE)
    window: list[tuple[int, int, bool]] = []
    for match in _TOKEN.finditer(text):
        hit = matches(match.group())
        if not window and not hit:
            before.append((match.start(), match.end(), False))
            continue
        window.append((match.start(), match.end(), hit))
        if len(window) >= SNIPPET_WORDS:
            break
    if not window:  # no match to show (the highlighting is simpler than the engines)
        window = list(before)
        before.clear()
        if not window:
            return _SPACES.sub(" ", text[:200]).strip()
    words = [*before, *window]
    out: list[str] = ["…"] if words[0][0] > 0 and text[: words[0][0]].strip() else []
    cursor = words[0][0]
    open_mark = False
    for start, end, hit in words:
        gap = text[cursor:start]
        if open_mark and (not hit or len(gap) > 3):  # `[New York]`, `[example.org]`
            out.append("]")
            open_mark = False
        out.append(gap)
        if hit and not open_mark:
            out.append("[")
            open_mark = True
        out.append(text[start:end])
        cursor = end
    if open_mark:
        out.append("]")
    if text[cursor:].strip():
        out.append("…")
    return _SPACES.sub(" ", "".join(out)).strip()
