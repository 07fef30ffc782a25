"""The search projection: a full-text index over the portable reading, kept exactly once.

What is indexed, straight from the events (one index row per piece; never a payload, never
a Display's content):

| kind          | from                                                              |
|---------------|-------------------------------------------------------------------|
| `user`        | UserMessage text blocks                                           |
| `context`     | ContextInjected text                                              |
| `text`        | AssistantText text                                                |
| `citation`    | AssistantText citations: each source's title and URL              |
| `reasoning`   | Reasoning text (not when redacted)                                |
| `tool_call`   | ToolCallRequested name and arguments (their JSON as stored)       |
| `tool_result` | ToolCallResponded content                                         |
| `activity`    | HostedActivity input: its string values (search queries, URLs)    |

A piece longer than `CHUNK` characters is split into several rows. Each row points back to
its conversation, the turn open at that event (None outside a turn), the event's version and
notification id, and its kind. The turn is tracked by the projection itself: a small table
`search_turns` (conversation → open turn) written in the same transaction as the rows, so a
rebuild derives exactly the same turns.

Tables (in the events' database; SQLite file or PostgreSQL schema):

- `search_rows (id, conversation_id, version, turn_id, kind, body[, terms])`: `id` is
  `notification_id * 65536 + piece`, so the rows' keys follow the log and a rebuild writes
  the same keys. `body` is the original text (NUL replaced by U+FFFD).
- SQLite: `search_fts`, a contentless FTS5 table (`unicode61 remove_diacritics 2`, with
  marks and code points newer than its Unicode tables counted as word characters, so it
  splits the normalized text at spaces only) whose rowid is `search_rows.id`.
- PostgreSQL: `search_rows.terms`, a `tsvector` built with the `simple` configuration (no
  stemming, no stop words: every language alike), GIN-indexed. New rows wait in the
  index's pending list, which every query reads whole (about 6 µs a row), until an
  insert finds it full and merges it; its limit is 1 MB (`GIN_PENDING_KB`), not the
  server's 4 MB default: at most ~0.8 ms a query instead of ~3 ms, for no insert speed
  we could measure (256 kB costs a fifth of it, no list at all five sixths).
- `search_turns (conversation_id, turn_id)`: the open turn of each conversation.
- the store's `tracking` table: the projection's position, under the name `search`.

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

Ranking: bm25 on SQLite, `ts_rank` on PostgreSQL; ties by index order. Snippets are made
here from the stored original text (not by FTS5 `snippet()` or `ts_headline`, which can
only show the normalized text they indexed: no accents, spaced-out CJK): a window of words
around the first match, matches in `[` `]`, whitespace collapsed, `…` where cut.
"""

from __future__ import annotations

import re
import unicodedata
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol
from uuid import UUID

import msgspec

from convstore.domain.errors import ConvstoreError
from convstore.domain.vocabulary import ConversationId, TurnId
from convstore.projections.follower import Follower, Positioned, TrackedProjection
from convstore.storage.recorder import ConversationRecorder
from convstore.storage.upcasting import UPCASTERS, upcast

if TYPE_CHECKING:
    from convstore.storage import Store

NAME: Final = "search"
"""The projection's tracking name."""

CHUNK: Final = 16_384
"""Longest piece of text in one index row, in characters; longer text makes several rows."""

PIECES: Final = 65_536
"""Row ids are `notification_id * PIECES + piece`."""

MAX_QUERY_CHARS: Final = 4096
MAX_QUERY_TERMS: Final = 64
MAX_TERM_CHARS: Final = 255
MAX_NEAR: Final = 50
DEFAULT_NEAR: Final = 10
MAX_DEPTH: Final = 32
MAX_LIMIT: Final = 1000


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


def _storable(text: str) -> str:
    """Text any backend stores: NUL (PostgreSQL refuses it) and lone surrogates replaced."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "replace").decode("utf-8")
    return text


# --- what an event contributes ------------------------------------------------------------------


class _Source(msgspec.Struct):
    url: str | None = None
    title: str | None = None


class _Attribution(msgspec.Struct):
    source: _Source


class Indexed(msgspec.Struct):
    """What the index reads of a stored event: its type, place and text-bearing fields.

    One struct for every event type (a field a type lacks keeps its default), decoded from
    the stored JSON directly: payloads, settings, timestamps and hashes are skipped, not
    built (three to four times faster than the full typed decode), and an event type
    added later is read and passed over rather than refused.
    """

    type: str
    originator_id: UUID
    originator_version: int
    turn_id: str | None = None
    blocks: tuple[str, ...] = ()
    text: str = ""
    attributions: tuple[_Attribution, ...] = ()
    redacted: bool = False
    name: str = ""
    arguments: msgspec.Raw = msgspec.Raw(b"")
    content: str = ""
    input: dict[str, Any] = {}


_read_indexed = msgspec.json.Decoder(Indexed).decode
_encode = msgspec.json.encode


def read_event(state: bytes) -> Indexed:
    """Stored event bytes → `Indexed`; a record of an earlier schema version is upcast first.

    `Indexed` reads any tag, so an earlier version is told by its tag being registered
    with an upcaster (a lookup in an empty dict while there is none), not by a failure.
    """
    event = _read_indexed(state)
    if event.type in UPCASTERS:
        current = upcast(state)
        if current is not None:
            return _read_indexed(current)
    return event


def _strings(value: Any, into: list[str]) -> None:
    """The string leaves of a JSON-like value, keys excluded, in order."""
    if isinstance(value, str):
        if value:
            into.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _strings(item, into)
    elif isinstance(value, list | tuple):
        for item in value:
            _strings(item, into)


def _assistant_text(event: Indexed) -> list[tuple[str, str]]:
    found = [("text", event.text)] if event.text else []
    sources: list[str] = []
    for attribution in event.attributions:
        for part in (attribution.source.title, attribution.source.url):
            if part and part not in sources:
                sources.append(part)
    if sources:
        found.append(("citation", "\n".join(sources)))
    return found


def _user_message(event: Indexed) -> list[tuple[str, str]]:
    text = "\n\n".join(block for block in event.blocks if block)
    return [("user", text)] if text else []


def _reasoning(event: Indexed) -> list[tuple[str, str]]:
    return [("reasoning", event.text)] if event.text and not event.redacted else []


def _tool_result(event: Indexed) -> list[tuple[str, str]]:
    return [("tool_result", event.content)] if event.content else []


def _tool_call(event: Indexed) -> list[tuple[str, str]]:
    arguments = bytes(event.arguments).decode()
    call = f"{event.name} {arguments if arguments not in ('', '{}') else ''}".strip()
    return [("tool_call", call)] if call else []


def _activity(event: Indexed) -> list[tuple[str, str]]:
    inputs: list[str] = []
    _strings(event.input, inputs)
    return [("activity", "\n".join(inputs))] if inputs else []


def _context(event: Indexed) -> list[tuple[str, str]]:
    return [("context", event.text)] if event.text else []


_PIECES: Final[dict[str, Callable[[Indexed], list[tuple[str, str]]]]] = {
    "AssistantText": _assistant_text,
    "UserMessage": _user_message,
    "Reasoning": _reasoning,
    "ToolCallResponded": _tool_result,
    "ToolCallRequested": _tool_call,
    "HostedActivity": _activity,
    "ContextInjected": _context,
}


def pieces(event: Indexed) -> list[tuple[str, str]]:
    """(kind, text) of every piece of portable text an event holds, in a fixed order."""
    found = _PIECES.get(event.type)
    return [] if found is None else found(event)


def chunks(text: str) -> list[str]:
    """`text` cut into pieces of at most CHUNK characters, at whitespace where there is some."""
    if len(text) <= CHUNK:
        return [text]
    out: list[str] = []
    start = 0
    while len(text) - start > CHUNK:
        end = start + CHUNK
        cut = max(
            text.rfind(" ", start + CHUNK // 2, end), text.rfind("\n", start + CHUNK // 2, end)
        )
        if cut > start:
            end = cut + 1
        out.append(text[start:end])
        start = end
    out.append(text[start:])
    return out


Row = tuple[int, UUID, int, str | None, str, str]
"""One index row: id, conversation, version, turn, kind, body."""


# --- hits ---------------------------------------------------------------------------------------


class Hit(msgspec.Struct, frozen=True, kw_only=True):
    """One search result: where the text is, and a snippet of it."""

    conversation_id: ConversationId
    turn_id: TurnId | None
    """The turn open at the event (None outside a turn)."""
    version: int
    """The event's version in its conversation."""
    kind: str
    """What the text is: user, context, text, citation, reasoning, tool_call, tool_result,
    activity."""
    snippet: str
    """Words around the first match, matches in `[` `]`; stored text, not yet sanitized."""
    score: float
    """Higher is better: -bm25 on SQLite, ts_rank on PostgreSQL (not comparable across)."""
    position: int
    """The event's notification id."""
    piece: int = 0
    """Which piece of the event's text (a long text makes several)."""


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


# --- backends -----------------------------------------------------------------------------------


class _Dialect(Protocol):
    def setup(self, cursor: Any) -> None: ...
    def reset(self, cursor: Any) -> None: ...
    def turn(self, cursor: Any, conversation: UUID) -> str | None: ...
    def set_turns(self, cursor: Any, turns: dict[UUID, str | None]) -> None: ...
    def insert(self, cursor: Any, rows: list[Row]) -> None: ...
    def search(self, cursor: Any, node: Node, limit: int) -> list[tuple[Row, float]]: ...
    def dump(self, cursor: Any) -> Iterator[bytes]: ...


_SQLITE_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS search_rows ("
    " id INTEGER PRIMARY KEY, conversation_id BLOB NOT NULL, version INTEGER NOT NULL,"
    " turn_id TEXT, kind TEXT NOT NULL, body TEXT NOT NULL)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS search_fts USING fts5("
    "body, content='',"
    " tokenize=\"unicode61 remove_diacritics 2 categories 'L* N* M* Co Cn'\")",
    "CREATE TABLE IF NOT EXISTS search_turns ("
    " conversation_id BLOB PRIMARY KEY, turn_id TEXT NOT NULL) WITHOUT ROWID",
)
_SQLITE_SEARCH: Final = (
    "SELECT r.id, r.conversation_id, r.version, r.turn_id, r.kind, r.body, m.rank"
    " FROM (SELECT rowid, rank FROM search_fts WHERE search_fts MATCH ?"
    "       ORDER BY rank, rowid LIMIT ?) AS m"
    " JOIN search_rows AS r ON r.id = m.rowid ORDER BY m.rank, r.id"
)


class _SQLite:
    """FTS5, contentless; the rows table holds the text and the pointers."""

    def setup(self, cursor: Any) -> None:
        for statement in _SQLITE_SCHEMA:
            cursor.execute(statement)

    def reset(self, cursor: Any) -> None:
        # Dropping frees the pages at once; deleting a million rows would hold the write
        # lock (and so every writer) far longer.
        for table in ("search_rows", "search_fts", "search_turns"):
            cursor.execute(f"DROP TABLE IF EXISTS {table}")
        self.setup(cursor)

    def turn(self, cursor: Any, conversation: UUID) -> str | None:
        row = cursor.execute(
            "SELECT turn_id FROM search_turns WHERE conversation_id = ?", (conversation.bytes,)
        ).fetchone()
        return None if row is None else str(row[0])

    def set_turns(self, cursor: Any, turns: dict[UUID, str | None]) -> None:
        cursor.executemany(
            "DELETE FROM search_turns WHERE conversation_id = ?",
            [(c.bytes,) for c, t in turns.items() if t is None],
        )
        cursor.executemany(
            "INSERT OR REPLACE INTO search_turns VALUES (?, ?)",
            [(c.bytes, t) for c, t in turns.items() if t is not None],
        )

    def insert(self, cursor: Any, rows: list[Row]) -> None:
        cursor.executemany(
            "INSERT INTO search_rows VALUES (?, ?, ?, ?, ?, ?)",
            [(i, c.bytes, v, t, k, b) for i, c, v, t, k, b in rows],
        )
        # ASCII text goes as it is: unicode61 splits and folds it exactly like `terms`.
        cursor.executemany(
            "INSERT INTO search_fts (rowid, body) VALUES (?, ?)",
            [(r[0], b if (b := r[5]).isascii() else normalized(b)) for r in rows],
        )

    def search(self, cursor: Any, node: Node, limit: int) -> list[tuple[Row, float]]:
        found = cursor.execute(_SQLITE_SEARCH, (to_fts5(node), limit)).fetchall()
        return [((i, UUID(bytes=c), v, t, k, b), -float(rank)) for i, c, v, t, k, b, rank in found]

    def dump(self, cursor: Any) -> Iterator[bytes]:
        for row in cursor.execute(
            "SELECT id, conversation_id, version, turn_id, kind, body FROM search_rows ORDER BY id"
        ):
            yield _encode([row[0], UUID(bytes=row[1]), *row[2:]])
        cursor.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.search_vocab"
            " USING fts5vocab(main, search_fts, instance)"
        )
        for row in cursor.execute(
            "SELECT term, doc, col, offset FROM temp.search_vocab ORDER BY doc, offset, term"
        ):
            yield _encode(list(row))
        for row in cursor.execute("SELECT conversation_id, turn_id FROM search_turns ORDER BY 1"):
            yield _encode([UUID(bytes=row[0]), row[1]])


GIN_PENDING_KB: Final = 1024
"""PostgreSQL: the GIN index's pending list limit (see the module's tables)."""

_POSTGRES_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS search_rows ("
    " id bigint PRIMARY KEY, conversation_id uuid NOT NULL, version bigint NOT NULL,"
    " turn_id text, kind text NOT NULL, body text NOT NULL, terms tsvector NOT NULL)",
    "CREATE INDEX IF NOT EXISTS search_rows_terms ON search_rows USING gin (terms)"
    f" WITH (gin_pending_list_limit = {GIN_PENDING_KB})",
    "CREATE TABLE IF NOT EXISTS search_turns ("
    " conversation_id uuid PRIMARY KEY, turn_id text NOT NULL)",
)
_POSTGRES_INSERT: Final = (
    "INSERT INTO search_rows SELECT i, c, v, t, k, b, to_tsvector('simple', f)"
    " FROM unnest(%s::bigint[], %s::uuid[], %s::bigint[], %s::text[], %s::text[], %s::text[],"
    " %s::text[]) AS u(i, c, v, t, k, b, f)"
)
_POSTGRES_SEARCH: Final = (
    "SELECT id, conversation_id, version, turn_id, kind, body, ts_rank(terms, q) AS score"
    " FROM search_rows, to_tsquery('simple', %s) AS q"
    " WHERE terms @@ q ORDER BY score DESC, id LIMIT %s"
)


class _Postgres:
    """A tsvector column (`simple` over normalized words) with a GIN index."""

    def setup(self, cursor: Any) -> None:
        for statement in _POSTGRES_SCHEMA:
            cursor.execute(statement)

    def reset(self, cursor: Any) -> None:
        cursor.execute("TRUNCATE search_rows, search_turns")

    def turn(self, cursor: Any, conversation: UUID) -> str | None:
        row = cursor.execute(
            "SELECT turn_id FROM search_turns WHERE conversation_id = %s", (conversation,)
        ).fetchone()
        return None if row is None else str(row[0])

    def set_turns(self, cursor: Any, turns: dict[UUID, str | None]) -> None:
        closed = [c for c, t in turns.items() if t is None]
        if closed:
            cursor.execute(
                "DELETE FROM search_turns WHERE conversation_id = ANY(%s::uuid[])", (closed,)
            )
        opened = [(c, t) for c, t in turns.items() if t is not None]
        if opened:
            cursor.execute(
                "INSERT INTO search_turns SELECT * FROM unnest(%s::uuid[], %s::text[])"
                " ON CONFLICT (conversation_id) DO UPDATE SET turn_id = EXCLUDED.turn_id",
                ([c for c, _ in opened], [t for _, t in opened]),
            )

    def insert(self, cursor: Any, rows: list[Row]) -> None:
        cursor.execute(
            _POSTGRES_INSERT,
            (*map(list, zip(*rows, strict=True)), [normalized(r[5]) for r in rows]),
        )

    def search(self, cursor: Any, node: Node, limit: int) -> list[tuple[Row, float]]:
        # Never a prepared statement: planned for each query, with its words known, the
        # GIN index is chosen for a rare word and the table's real size is seen. A
        # prepared one ends on a generic plan made once and kept until something
        # invalidates it (ANALYZE, VACUUM; never when autovacuum is off): one made while
        # the index was small scans the whole table for every query once it is large.
        found = cursor.execute(
            _POSTGRES_SEARCH, (to_tsquery(node), limit), prepare=False
        ).fetchall()
        return [((i, c, v, t, k, b), float(score)) for i, c, v, t, k, b, score in found]

    def dump(self, cursor: Any) -> Iterator[bytes]:
        for row in cursor.execute(
            "SELECT id, conversation_id, version, turn_id, kind, body, terms::text"
            " FROM search_rows ORDER BY id"
        ):
            yield _encode(list(row))
        for row in cursor.execute("SELECT conversation_id, turn_id FROM search_turns ORDER BY 1"):
            yield _encode(list(row))


def _dialect(recorder: ConversationRecorder) -> _Dialect:
    from convstore.storage.sqlite import SQLiteRecorder

    if isinstance(recorder, SQLiteRecorder):
        return _SQLite()
    from convstore.storage.postgres import PostgresRecorder

    if isinstance(recorder, PostgresRecorder):
        return _Postgres()
    raise TypeError(f"no search index for {type(recorder).__name__}")


# --- the projection -----------------------------------------------------------------------------


class SearchIndex(TrackedProjection):
    """The search view of one store: `process` keeps it, `search` reads it."""

    name = NAME
    decoder = staticmethod(read_event)

    def __init__(self, recorder: ConversationRecorder) -> None:
        self.recorder = recorder
        self.dialect = _dialect(recorder)
        self._ready = False

    def setup(self, cursor: Any) -> None:
        """Create the tables if missing."""
        self.dialect.setup(cursor)
        self._ready = True

    def reset(self, cursor: Any) -> None:
        """Delete every row, turn and FTS entry."""
        self.dialect.reset(cursor)

    def process(self, cursor: Any, events: Sequence[Positioned]) -> int:
        """Index a batch: rows for its text, the open turns it changed."""
        dialect = self.dialect
        turns: dict[UUID, str | None] = {}
        changed: set[UUID] = set()
        rows: list[Row] = []
        for position, event in events:
            found = pieces(event)
            conversation = event.originator_id
            if not found:
                if event.type == "TurnStarted":
                    turns[conversation] = event.turn_id
                    changed.add(conversation)
                elif event.type == "TurnEnded":
                    turns[conversation] = None
                    changed.add(conversation)
                continue
            if conversation in turns:
                turn = turns[conversation]
            else:
                turn = turns[conversation] = dialect.turn(cursor, conversation)
            key = position * PIECES
            version = event.originator_version
            for kind, text in found:
                for chunk in chunks(_storable(text)):
                    if key < (position + 1) * PIECES:
                        rows.append((key, conversation, version, turn, kind, chunk))
                    key += 1
        if rows:
            dialect.insert(cursor, rows)
        if changed:
            dialect.set_turns(cursor, {c: turns[c] for c in changed})
        return len(rows)

    def _ensure_tables(self) -> None:
        if not self._ready:
            with self.recorder.view_transaction(self.name) as cursor:
                self.setup(cursor)

    def search(self, query: str, limit: int = 20) -> list[Hit]:
        """The best `limit` hits for a user query (see the module's query language).

        Raises SearchQueryError for a query with nothing to search for.
        """
        if not 1 <= limit <= MAX_LIMIT:
            raise SearchQueryError(f"limit must be between 1 and {MAX_LIMIT}, not {limit}")
        node = parse_query(query)
        self._ensure_tables()
        with self.recorder.view_reader() as cursor:
            found = self.dialect.search(cursor, node, limit)
        return [
            Hit(
                conversation_id=ConversationId(conversation),
                turn_id=None if turn is None else TurnId(turn),
                version=version,
                kind=kind,
                snippet=snippet(body, node),
                score=score,
                position=key // PIECES,
                piece=key % PIECES,
            )
            for (key, conversation, version, turn, kind, body), score in found
        ]

    def dump(self) -> bytes:
        """Every row, FTS entry and open turn in key order, one JSON array a line."""
        self._ensure_tables()
        with self.recorder.view_reader() as cursor:
            return b"\n".join(self.dialect.dump(cursor))

    def count(self) -> int:
        """How many index rows there are."""
        self._ensure_tables()
        with self.recorder.view_reader() as cursor:
            return int(cursor.execute("SELECT count(*) FROM search_rows").fetchone()[0])


def follower(store: Store, **options: Any) -> Follower:
    """A follower keeping `store`'s search index (options: see `Follower`)."""
    return Follower(
        store.recorder, SearchIndex(store.recorder), mapper=store.repository.mapper, **options
    )


def search(store: Store, query: str, limit: int = 20, *, catch_up: bool = True) -> list[Hit]:
    """Search `store`, after bringing its index up to the log's head (unless told not to)."""
    keeper = follower(store)
    if catch_up:
        keeper.catch_up()
    projection = keeper.projection
    assert isinstance(projection, SearchIndex)
    return projection.search(query, limit)
