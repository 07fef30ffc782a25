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
| `title`       | the conversation's title: its Started's, then each Retitled's     |

A conversation's title rows are its current title's only: a Retitled deletes the rows of
the title before it (an empty title leaves none). They belong to no turn (the title is
the conversation's), so their `turn_id` is None.

A piece longer than `CHUNK` characters is split into several rows. Each row points back to
its conversation, the turn open at that event (None outside a turn), the event's version and
notification id, and its kind. The turn is tracked by the projection itself: a small table
`search_turns` (conversation → open turn) written in the same transaction as the rows, so a
rebuild derives exactly the same turns.

Tables (in the events' database; SQLite file or PostgreSQL schema; each backend's SQL is
`projections.search_sql`):

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
- `search_attempts (conversation_id, turn_id)`: while a later attempt of a response is open
  (a copy completing one cut short, `domain.attempts`), the turn its rows belong to: the
  first attempt's, where every reading places it. When that attempt starts, the rows of
  the earlier attempts are deleted, so search finds each response once, as it reads.
- `search_titles (conversation_id, low, high)`: the ids of each conversation's title rows,
  so a Retitled deletes them by key, never by scanning the rows.
- the store's `tracking` table: the projection's position, under the name `search`.

Ranking: bm25 on SQLite, `ts_rank` on PostgreSQL; ties by index order.
Snippets: `query.snippet`, from the stored original text.

The text normalization and the query language are `projections.query`, shared by
both backends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final
from uuid import UUID

import msgspec

from convstore.domain.redaction import marked, marked_blocks, merged
from convstore.domain.vocabulary import ConversationId, TurnId
from convstore.projections import search_sql
from convstore.projections.follower import Follower, Positioned, TrackedProjection
from convstore.projections.query import (
    SearchQueryError,
    parse_query,
    snippet,
)
from convstore.projections.search_sql import Row
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

MAX_LIMIT: Final = 1000


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
    response_id: str | None = None
    attempt: int = 1
    blocks: tuple[str, ...] = ()
    text: str = ""
    attributions: tuple[_Attribution, ...] = ()
    redacted: bool = False
    name: str = ""
    arguments: msgspec.Raw = msgspec.Raw(b"")
    content: str = ""
    input: dict[str, Any] = {}
    title: str = ""
    event_version: int = 0
    span: tuple[int, int] | None = None
    """A Redacted's target and span (`domain.redaction`)."""


_read_indexed = msgspec.json.Decoder(Indexed).decode
_encode = msgspec.json.encode


def redacted(event: Indexed, spans: Sequence[tuple[int, int] | None]) -> Indexed:
    """`event` with the spans of its text hidden (a None among them: all of it), as the
    portable reading has it (`domain.redaction.redacted`)."""
    whole = None in spans
    hide = None if whole else merged([s for s in spans if s is not None])
    return msgspec.structs.replace(
        event,
        blocks=marked_blocks(event.blocks, hide) if event.blocks else (),
        text=marked(event.text, hide) if event.text else "",
        content=marked(event.content, hide) if event.content else "",
        attributions=() if whole else event.attributions,
    )


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


def _title(event: Indexed) -> list[tuple[str, str]]:
    return [(TITLE, event.title)] if event.title else []


TITLE: Final = "title"
"""The kind of a conversation's title rows."""

_RETITLES: Final = frozenset({"Started", "Retitled"})
"""The events that set the title (a Retitled's deletes the rows of the title before)."""

_PIECES: Final[dict[str, Callable[[Indexed], list[tuple[str, str]]]]] = {
    "Started": _title,
    "Retitled": _title,
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


def _rows(
    position: int, event: Indexed, turn: str | None, found: list[tuple[str, str]]
) -> list[Row]:
    """The index rows of an event's pieces, at most PIECES of them."""
    rows: list[Row] = []
    key = position * PIECES
    for kind, text in found:
        for chunk in chunks(_storable(text)):
            if key < (position + 1) * PIECES:
                rows.append((key, event.originator_id, event.originator_version, turn, kind, chunk))
            key += 1
    return rows


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
    activity, title."""
    snippet: str
    """Words around the first match, matches in `[` `]`; stored text, not yet sanitized."""
    score: float
    """Higher is better: -bm25 on SQLite, ts_rank on PostgreSQL (not comparable across)."""
    position: int
    """The event's notification id."""
    piece: int = 0
    """Which piece of the event's text (a long text makes several)."""


SEARCH_TABLES: Final = ("search_rows", "search_turns", "search_attempts", "search_titles")
"""The index's tables that name a conversation."""
_NO_VERSION: Final = 2**62
"""Above any version: a span that covers a whole conversation."""


def _unsealing(unseal: Callable[[bytes], bytes]) -> Callable[[bytes], Indexed]:
    """`read_event` after `unseal`; an event whose key is gone (its conversation was
    forgotten) reads as its clear fields alone, so it indexes nothing."""
    from convstore.domain.errors import ConversationForgotten
    from convstore.domain.sealing import strip

    def read(state: bytes) -> Indexed:
        try:
            return read_event(unseal(state))
        except ConversationForgotten:
            return read_event(strip(state))

    return read


def _within(version: int, spans: list[tuple[int, int]]) -> bool:
    return any(first <= version <= last for first, last in spans)


# --- the projection -----------------------------------------------------------------------------


class SearchIndex(TrackedProjection):
    """The search view of one store: `process` keeps it, `search` reads it."""

    name = NAME
    forgets = True

    def __init__(self, recorder: ConversationRecorder) -> None:
        self.recorder = recorder
        self.dialect = search_sql.dialect(recorder)
        self._ready = False
        unseal = recorder.unseal
        self._read: Callable[[bytes], Indexed] = (
            read_event if unseal is None else _unsealing(unseal)
        )
        """Stored bytes → `Indexed` (their content unsealed on an encrypted store)."""
        self.decoder = self._read

    @classmethod
    def purge(cls, recorder: ConversationRecorder, conversations: Sequence[UUID]) -> None:
        """Delete every row of these conversations (they were forgotten), leaving no copy
        of their text in the index (a `storage.forgetting.Purge`)."""
        index = cls(recorder)
        if not index._ensure_tables():
            return
        with recorder.view_transaction(index.name) as cursor:
            index._purge(cursor, conversations)
        recorder.scrub(SEARCH_TABLES)

    def _purge(self, cursor: Any, conversations: Iterable[UUID]) -> None:
        """Delete forgotten conversations' rows, then merge the index so no segment keeps
        their terms."""
        dialect = self.dialect
        for conversation in conversations:
            dialect.delete(cursor, conversation, [(0, _NO_VERSION)])
            dialect.set_turns(cursor, {conversation: None})
            dialect.set_attempt_turns(cursor, {conversation: None})
            dialect.set_titles(cursor, {conversation: None})
        dialect.merge(cursor)

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
        attempts = dialect.attempt_turns(cursor)
        """Conversations whose open response is a later attempt → the turn it reads in."""
        attempts_changed: dict[UUID, tuple[str | None] | None] = {}
        titles: dict[UUID, tuple[int, int] | None] = {}
        """Conversations whose title rows this batch changed → their ids (None: none)."""
        for position, event in events:
            conversation = event.originator_id
            if event.type == "ResponseStarted" and event.attempt > 1:
                turn, spans = self._earlier_attempts(event)
                dialect.delete(cursor, conversation, spans)
                rows = [r for r in rows if not (r[1] == conversation and _within(r[2], spans))]
                attempts[conversation] = turn
                attempts_changed[conversation] = (turn,)
            elif event.type == "ResponseEnded" and conversation in attempts:
                del attempts[conversation]
                attempts_changed[conversation] = None
            rows = self._rewritten(cursor, position, event, titles, rows)
            found = pieces(event)
            if not found:
                if event.type == "TurnStarted":
                    turns[conversation] = event.turn_id
                    changed.add(conversation)
                elif event.type == "TurnEnded":
                    turns[conversation] = None
                    changed.add(conversation)
                continue
            if event.type in _RETITLES:
                turn = None  # the conversation's, not a turn's
            elif conversation in attempts:
                turn = attempts[conversation]
            elif conversation in turns:
                turn = turns[conversation]
            else:
                turn = turns[conversation] = dialect.turn(cursor, conversation)
            rows.extend(new := _rows(position, event, turn, found))
            if event.type in _RETITLES:  # its pieces are all title rows
                titles[conversation] = (new[0][0], new[-1][0])
        if rows:
            dialect.insert(cursor, rows)
        if changed:
            dialect.set_turns(cursor, {c: turns[c] for c in changed})
        if attempts_changed:
            dialect.set_attempt_turns(cursor, attempts_changed)
        if titles:
            dialect.set_titles(cursor, titles)
        return self._purge_forgotten(cursor, events, len(rows))

    def _purge_forgotten(self, cursor: Any, events: Sequence[Positioned], rows: int) -> int:
        """Delete every row of the conversations forgotten in this batch (a Forgotten
        indexes nothing itself): every reader treats them as forgotten from there.
        Returns `rows`, the batch's count."""
        forgotten = {e.originator_id for _, e in events if e.type == "Forgotten"}
        if forgotten:
            self._purge(cursor, forgotten)
        return rows

    def _rewritten(
        self,
        cursor: Any,
        position: int,
        event: Indexed,
        titles: dict[UUID, tuple[int, int] | None],
        rows: list[Row],
    ) -> list[Row]:
        """`rows` after the rows an event replaces are dropped (a Retitled's: the title's;
        a Redacted's: its target's, derived again)."""
        if event.type == "Retitled":
            return self._drop_title(cursor, event.originator_id, titles, rows)
        if event.type == "Redacted":
            return self._redact(cursor, position, event, rows)
        return rows

    def _redact(self, cursor: Any, position: int, redaction: Indexed, rows: list[Row]) -> list[Row]:
        """Derive the rows of the event `redaction` names again, its hidden text marked
        (`domain.redaction`), under the redaction's own position: those of this batch's
        `rows` are returned without it. An event without rows (passed over) gets none."""
        conversation, version = redaction.originator_id, redaction.event_version
        kept = [r for r in rows if not (r[1] == conversation and r[2] == version)]
        if len(kept) < len(rows):
            turn: tuple[str | None] | None = (next(r for r in rows if r not in kept)[3],)
        else:
            turn = self.dialect.version_turn(cursor, conversation, version)
        if turn is None:
            return rows
        self.dialect.delete(cursor, conversation, [(version, version)])
        target, redactions = None, [redaction]
        for at, state in self.recorder.select_states(conversation, gt=version - 1):
            if at >= redaction.originator_version:
                break
            event = self._read(state)
            if at == version:
                target = event
            elif event.type == "Redacted" and event.event_version == version:
                redactions.append(event)
        if target is None:
            return kept
        marked = redacted(target, [r.span for r in redactions])
        return [*kept, *_rows(position, marked, turn[0], pieces(marked))]

    def _drop_title(
        self,
        cursor: Any,
        conversation: UUID,
        titles: dict[UUID, tuple[int, int] | None],
        rows: list[Row],
    ) -> list[Row]:
        """Delete the conversation's title rows, stored or among this batch's `rows`
        (returned without them); `titles` then says it has none."""
        if conversation in titles:
            span = titles[conversation]
        else:
            span = self.dialect.title_span(cursor, conversation)
        titles[conversation] = None
        if span is None:
            return rows
        low, high = span
        self.dialect.delete_ids(cursor, low, high)
        return [r for r in rows if not low <= r[0] <= high]

    def _earlier_attempts(self, started: Indexed) -> tuple[str | None, list[tuple[int, int]]]:
        """The turn the first attempt of `started`'s response was in, and the versions
        (first, last) of each earlier attempt, read from the conversation's events."""
        turn: str | None = None
        first_turn: str | None = None
        spans: list[tuple[int, int]] = []
        open_from: int | None = None
        for version, state in self.recorder.select_states(started.originator_id):
            if version >= started.originator_version:
                break
            event = self._read(state)
            if event.type == "TurnStarted":
                turn = event.turn_id
            elif event.type == "TurnEnded":
                turn = None
            elif event.type == "ResponseStarted" and event.response_id == started.response_id:
                if not spans and open_from is None:
                    first_turn = turn
                open_from = version
            elif event.type == "ResponseEnded" and open_from is not None:
                spans.append((open_from, version))
                open_from = None
        if open_from is not None:
            spans.append((open_from, started.originator_version - 1))
        return first_turn, spans

    def _ensure_tables(self) -> bool:
        """Whether the tables exist, creating them unless the recorder only reads."""
        if not self._ready:
            if self.recorder.read_only:
                return self.recorder.has_table("search_rows")
            with self.recorder.view_transaction(self.name) as cursor:
                self.setup(cursor)
        return True

    def search(self, query: str, limit: int = 20) -> list[Hit]:
        """The best `limit` hits for a user query (see the module's query language).

        Raises SearchQueryError for a query with nothing to search for.
        """
        if not 1 <= limit <= MAX_LIMIT:
            raise SearchQueryError(f"limit must be between 1 and {MAX_LIMIT}, not {limit}")
        node = parse_query(query)
        if not self._ensure_tables():
            return []  # a reader of a store never indexed: nothing is indexed yet
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
        """Every row, FTS entry, open turn and title span in key order, one JSON array a
        line."""
        if not self._ensure_tables():
            return b""
        with self.recorder.view_reader() as cursor:
            return b"\n".join(self.dialect.dump(cursor))

    def count(self) -> int:
        """How many index rows there are."""
        if not self._ensure_tables():
            return 0
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
