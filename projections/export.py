"""Exports of the portable reading: JSON, JSONL and a Markdown transcript, and where they go.

- **JSON**: one document per conversation, the `PortableConversation` of schema
  `convstore.portable/1` (see `portable` for its rule of evolution); `portable.DECODER`
  reads it back.
- **JSONL**: one record a line, for indexing pipelines. Every line is self-describing:
  `schema`, `conversation_id`, `turn_id` (null outside a turn), then `kind` and the event
  `version` it comes from, then the fields of that kind: a `conversation` line first, a
  `turn` line before each turn's items, and one line per item (`RECORD_DECODER` reads
  any line; the envelope's extra keys are ignored there).
- **Markdown**: a transcript with a heading per turn, activity lines such as
  `web search: "query" — 3 results`, citation markers `[1]` in the answer and a Sources
  list after each answer (cited text never appears without its sources; a cut answer
  says its citations are incomplete).

Every output is inert, on a terminal and in a Markdown viewer alike. JSON escapes every
character the sanitizer forbids as `\\uXXXX` (`render.inert_json`: lossless). Markdown
passes every stored string through `render.sanitize` *and then* escapes what would form
markup: the order matters, since removing an escape sequence after escaping could eat an
escaping backslash (`ESC \\[` is a whole sequence). That is why this module imports the
sanitizer from `adapters.terminal.render`, a leaf module of the standard library only, rather than
leaving it to the command line. The escaping (`md_text`): a backslash before
`` \\ ` * _ [ ] < > | ~ & @ `` everywhere, before `:` of `://` and `.` before a letter
(no autolink, extended or fuzzy), and before a block marker at a line's start (`#`, `-`,
`+`, `=`, `1.`); after our own `[n]` markers a stored `(` or `:` is escaped too, so no
stored text ever becomes a link, an image, HTML, a heading or a list. URLs in Sources
are text, shown as `<url>` with both brackets escaped.

Files are written by `projections.files` (never through a link: a temporary file in the
folder, renamed into place); names come from `file_name` (an ASCII slug of the title,
then the id).

The wording (timestamps, activity labels, source lines, citation markers) is
`projections.wording`, shared with the terminal transcript and the audit.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias
from uuid import UUID

import msgspec

from convstore.adapters.terminal.render import inert_json, one_line, sanitize, shorten, to_json
from convstore.domain.vocabulary import EndState, TurnTrigger
from convstore.projections.files import OutputFolder, write_file
from convstore.projections.portable import (
    SCHEMA,
    ActivityItem,
    AnyItem,
    CitedSource,
    ContextItem,
    PortableConversation,
    ReasoningItem,
    ResponseItem,
    Schema,
    TextItem,
    ToolCallItem,
    Turn,
    UnknownItem,
    UserItem,
)
from convstore.projections.wording import activity_label, cite, source_line, usage_counters, when

Format: TypeAlias = Literal["json", "jsonl", "md"]
FORMATS: Final[tuple[Format, ...]] = ("json", "jsonl", "md")
"""Every export format; each is also its files' extension."""

# --- Markdown -------------------------------------------------------------------------------

_MD_INLINE: Final = re.compile(r"[\\`*_\[\]<>|~&@]|:(?=//)|\.(?=[A-Za-z])")
_MD_LINE_START: Final = re.compile(r"^([ \t]*)(?:([#+=-])|(\d{1,9})([.)]))", re.MULTILINE)
_AFTER_MARK: Final = re.compile(r"(\[\d+\])([(:])")
"""Our `[n]` followed by a stored `(` or `:` would be a link or a link definition."""


def _line_start(match: re.Match[str]) -> str:
    indent, marker, digits, dot = match.groups()
    return f"{indent}\\{marker}" if marker else f"{indent}{digits}\\{dot}"


def md_text(text: str) -> str:
    """Stored text as inert Markdown: sanitized, then every markup character escaped."""
    escaped = _MD_INLINE.sub(r"\\\g<0>", sanitize(text))
    return _MD_LINE_START.sub(_line_start, escaped)


def md_inline(text: str, width: int | None = None) -> str:
    """Stored text as inert Markdown on one line, cut to `width` characters if given."""
    return md_text(one_line(text) if width is None else shorten(text, width)).strip()


def _md_url(url: str) -> str:
    return f"\\<{md_inline(url)}\\>"


def _quote(label: str, text: str, indent: str = "") -> Iterator[str]:
    yield f"{indent}> **{label}**"
    yield f"{indent}>"
    for line in md_text(text).split("\n"):
        yield f"{indent}> {line}" if line else f"{indent}>"


def markdown(conversation: PortableConversation) -> Iterator[str]:
    """The conversation as a Markdown transcript, line by line (inert; see the module)."""
    yield f"# {md_inline(conversation.title) or '(untitled)'}"
    yield ""
    yield f"- conversation: {conversation.id}"
    if conversation.created is not None:
        yield f"- started: {when(conversation.created)}"
    if conversation.labels:
        yield f"- labels: {', '.join(md_inline(label) for label in conversation.labels)}"
    yield f"- schema: {SCHEMA}, as of event {conversation.version}"
    writer = _Markdown()
    for turn in conversation.turns:
        yield from writer.turn(turn)


_CONTENT: Final = (TextItem, ReasoningItem, ToolCallItem, ActivityItem, UnknownItem)


class _Markdown:
    """The Markdown writer's state: the response being shown, the last system prompt."""

    def __init__(self) -> None:
        self.response: ResponseItem | None = None
        self.system: str | None = None

    def turn(self, turn: Turn) -> Iterator[str]:
        yield ""
        if turn.id is None:
            yield "## Outside a turn"
        else:
            trigger = f" · {md_inline(turn.trigger)}" if turn.trigger else ""
            yield f"## Turn {md_inline(turn.id)}{trigger}"
        texts: list[TextItem] = []
        for item in turn.items:
            if isinstance(item, TextItem) and (
                not texts or texts[0].response_id == item.response_id
            ):
                texts.append(item)  # Anthropic sends one block per cited passage: join them
                continue
            if texts:
                yield from self.answer(texts)
                texts = []
            if isinstance(item, TextItem):
                texts.append(item)
                continue
            yield from self.item(item)
        if texts:
            yield from self.answer(texts)
        yield from self.close_response()
        if turn.state is not None:
            reason = f": {md_inline(turn.reason)}" if turn.reason else ""
            yield ""
            yield f"*Turn ended: {turn.state}{reason}*"

    def item(self, item: AnyItem) -> Iterator[str]:
        current = self.response
        if current is not None and not (
            isinstance(item, _CONTENT) and item.response_id == current.id
        ):
            yield from self.close_response()
        yield ""
        if isinstance(item, UserItem):
            yield "**User**"
            yield ""
            yield md_text("\n\n".join(item.blocks)) if any(item.blocks) else "*(no text)*"
        elif isinstance(item, ContextItem):
            yield from _quote(f"Context ({md_inline(item.source)})", item.text)
        elif isinstance(item, ResponseItem):
            yield from self.open_response(item)
        elif isinstance(item, ReasoningItem):
            if item.redacted:
                yield "*Reasoning: redacted*"
            else:
                yield from _quote("Reasoning", item.text)
        elif isinstance(item, ActivityItem):
            yield from _activity(item)
        elif isinstance(item, ToolCallItem):
            yield from _tool_call(item)
        elif isinstance(item, UnknownItem):
            provider, form = md_inline(item.provider), md_inline(item.format)
            yield f"- unknown {provider} artifact: {form}, {item.size} bytes (kept, not shown)"

    def open_response(self, item: ResponseItem) -> Iterator[str]:
        self.response = item
        line = f"**Assistant** · {md_inline(item.provider)}"
        if item.model:
            line += f" {md_inline(item.model)}"
        line += f" · response {md_inline(item.id)}"
        tools = [
            f"{md_inline(tool.name)} (hosted)" if tool.hosted else md_inline(tool.name)
            for tool in item.tools
        ]
        if tools:
            line += f" · tools: {', '.join(tools)}"
        if item.origin == "request":
            line += " · from request history"
        yield line
        if item.system and item.system != self.system:
            yield ""
            yield from _quote("System prompt", item.system)
        self.system = item.system or self.system

    def close_response(self) -> Iterator[str]:
        item, self.response = self.response, None
        if item is None:
            return
        yield ""
        if item.state is None:
            yield "*Response still open.*"
            return
        line = f"Response {item.state} · {md_inline(item.finish_reason or 'other')}"
        if item.stop_reason and item.stop_reason != item.finish_reason:
            line += f" (provider: {md_inline(item.stop_reason)})"
        counters = usage_counters(item.usage, md_inline) if item.usage is not None else []
        if counters:
            line += f" · tokens {', '.join(counters)}"
        error = item.error
        if error is not None:
            status = f" (HTTP {error.status})" if error.status is not None else ""
            line += f" · error {md_inline(error.type)}{status}: {md_inline(error.message, 300)}"
        yield f"*{line}*"

    def answer(self, texts: list[TextItem]) -> Iterator[str]:
        current = self.response
        if current is not None and texts[0].response_id != current.id:
            yield from self.close_response()
        numbers: dict[CitedSource, int] = {}
        cited: dict[int, tuple[CitedSource, str | None]] = {}

        def number(source: CitedSource) -> int:
            return numbers.setdefault(source, len(numbers) + 1)

        for text in texts:
            for citation in text.citations:
                cited.setdefault(number(citation.source), (citation.source, citation.excerpt))
        body = cite(((t.text, t.citations) for t in texts), number, md_text)
        body = _AFTER_MARK.sub(r"\1\\\2", body).strip("\n")
        yield ""
        yield body if body.strip() else "*(no text)*"
        if cited:
            yield ""
            yield "Sources:"
            yield ""
            for n, (source, excerpt) in sorted(cited.items(), key=lambda pair: pair[0]):
                yield f"- {source_line(n, source, text=md_inline, url=_md_url)}"
                if excerpt and excerpt.strip():
                    yield f"  “{md_inline(excerpt.strip(), 200)}”"
        if not all(text.citations_complete for text in texts):
            yield ""
            yield "*Citations incomplete: the stream was cut.*"


def _activity(item: ActivityItem) -> Iterator[str]:
    if item.state == "completed":
        outcome = md_inline(item.summary) if item.summary else "completed"
    else:
        outcome = f"{item.state}: {md_inline(item.summary)}" if item.summary else item.state
    yield f"- {md_text(activity_label(item.name, item.input))} — {outcome}"
    display = item.display
    if display is not None:
        kind = md_inline(display.kind.replace("_", " "))
        yield f"  - {kind} ({md_inline(display.content_type)}): not shown"


def _tool_call(item: ToolCallItem) -> Iterator[str]:
    arguments = md_inline(to_json(item.arguments), 500)
    yield f"- tool call {md_inline(item.name)} ({md_inline(item.call_id)}): {arguments}"
    result = item.result
    yield ""
    if result is None:
        yield "  *no result*"
        return
    flags = [
        word for word, on in (("error", result.is_error), ("synthetic", result.synthetic)) if on
    ]
    label = f"result ({', '.join(flags)})" if flags else "result"
    yield from _quote(label, result.content or "(empty)", indent="  ")


# --- JSON and JSONL -------------------------------------------------------------------------

_ENCODER: Final = msgspec.json.Encoder()


class ConversationLine(msgspec.Struct, kw_only=True, tag_field="kind", tag="conversation"):
    """The first JSONL record of a conversation."""

    version: int
    """The version of its first event."""
    title: str
    """Its title."""
    labels: list[str]
    """Its labels."""
    created: datetime | None
    """When it started."""
    head: int
    """The newest event folded: the export is as of this version."""


class TurnLine(msgspec.Struct, kw_only=True, tag_field="kind", tag="turn"):
    """The JSONL record opening a turn (its items follow)."""

    version: int
    """The version of the event that opened it."""
    trigger: TurnTrigger | None
    """What opened it; None outside a turn."""
    state: EndState | None
    """How it ended; None while open."""
    reason: str
    """Why it ended, where recorded."""


class Envelope(msgspec.Struct, kw_only=True):
    """The keys every JSONL record starts with."""

    schema: Schema
    """The schema name and version."""
    conversation_id: UUID
    """The conversation the record belongs to."""
    turn_id: str | None
    """The turn it belongs to; None outside a turn (and for the `conversation` record)."""
    kind: str
    """What the record is: `conversation`, `turn`, or an item kind."""
    version: int
    """The version of the event the record comes from."""


RECORD_DECODER: Final = msgspec.json.Decoder(ConversationLine | TurnLine | AnyItem)
"""Decodes one JSONL record's body (the envelope's keys are ignored)."""
ENVELOPE_DECODER: Final = msgspec.json.Decoder(Envelope)
"""Decodes one JSONL record's envelope."""


def json_document(conversation: PortableConversation) -> str:
    """The conversation as one inert JSON document (no newline)."""
    return inert_json(_ENCODER.encode(conversation).decode())


def jsonl_records(conversation: PortableConversation) -> Iterator[str]:
    """The conversation as inert JSONL records, one a string (no newlines)."""
    conversation_id = str(conversation.id)

    def record(turn_id: str | None, body: msgspec.Struct) -> str:
        data: dict[str, Any] = {
            "schema": SCHEMA,
            "conversation_id": conversation_id,
            "turn_id": turn_id,
        }
        data.update(msgspec.to_builtins(body))
        return inert_json(_ENCODER.encode(data).decode())

    first = conversation.turns[0].version if conversation.turns else conversation.version
    head = ConversationLine(
        version=1 if conversation.created is not None else first,
        title=conversation.title,
        labels=conversation.labels,
        created=conversation.created,
        head=conversation.version,
    )
    yield record(None, head)
    for turn in conversation.turns:
        line = TurnLine(
            version=turn.version, trigger=turn.trigger, state=turn.state, reason=turn.reason
        )
        yield record(turn.id, line)
        for item in turn.items:
            yield record(turn.id, item)


def render(conversation: PortableConversation, format: Format) -> Iterator[str]:
    """The conversation in `format`, as inert text chunks, each ending in a newline."""
    if format == "json":
        yield json_document(conversation) + "\n"
    elif format == "jsonl":
        for record in jsonl_records(conversation):
            yield record + "\n"
    else:
        for line in markdown(conversation):
            yield line + "\n"


MD_SEPARATOR: Final = "\n---\n\n"
"""Between two Markdown transcripts written to one stream."""

# --- files ----------------------------------------------------------------------------------

_SLUG_WORDS: Final = re.compile(r"[a-z0-9]+")
_RESERVED: Final = frozenset(
    ["con", "prn", "aux", "nul"] + [f"com{i}" for i in range(10)] + [f"lpt{i}" for i in range(10)]
)
"""Device names Windows reserves, with any extension."""


def slug(title: str, limit: int = 60) -> str:
    """An ASCII slug of `title` (lowercase words joined by `-`, at most `limit` characters)."""
    ascii_title = unicodedata.normalize("NFKD", title[: limit * 4]).encode("ascii", "ignore")
    words = _SLUG_WORDS.findall(ascii_title.decode().lower())
    return "-".join(words)[:limit].strip("-")


def file_name(conversation: PortableConversation, format: Format) -> str:
    """`slug-of-the-title-<id>.<format>`: unique by the id, safe on every filesystem."""
    stem = slug(conversation.title)
    stem = f"{stem}-{conversation.id}" if stem else str(conversation.id)
    if stem.split(".")[0] in _RESERVED:  # unreachable with the id appended; kept as a guard
        stem = f"_{stem}"
    return f"{stem}.{format}"


def write_one(path: Path, conversation: PortableConversation, format: Format) -> Path:
    """Write one conversation to the file `path`, or into `path` when it is a folder.

    A link at `path` is refused, never followed (`files.write_file`).
    """
    chunks = render(conversation, format)
    return write_file(path, chunks, folder_name=file_name(conversation, format))


def write_all(
    conversations: Iterable[PortableConversation],
    path: Path,
    format: Format,
    *,
    progress: Callable[[int], None] | None = None,
) -> list[Path]:
    """Write each conversation to its own file in the folder `path` (created if missing;
    a link there is refused); `progress` gets the count after each file."""
    written: list[Path] = []
    with OutputFolder(path, create=True) as folder:
        for conversation in conversations:
            written.append(
                folder.write(file_name(conversation, format), render(conversation, format))
            )
            if progress is not None:
                progress(len(written))
    return written
