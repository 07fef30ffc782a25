"""Exports of the portable reading: JSON, JSONL and a Markdown transcript, and where they go.

- **JSON**: one document per conversation, the `PortableConversation` of schema
  `convstore.portable/1` (see `portable` for its rule of evolution); `portable.DECODER`
  reads it back.
- **JSONL**: one record a line, for indexing pipelines. Every line is self-describing:
  `schema`, `conversation_id`, `turn_id` (null outside a turn), then `kind` and the event
  `version` it comes from, then the fields of that kind: a `conversation` line first, a
  `turn` line before each turn's items, and one line per item (`RECORD_DECODER` reads
  any line; the envelope's extra keys are ignored there).
- **pydantic-ai**: the conversation as a pydantic-ai message history, built from its
  events by `adapters.importing.pydantic_ai.export`, which `render` is given as `native`.
- **Markdown**: the presentation model (`presentation.present`, with the chain status when
  given) rendered by `markdown`: clean CommonMark, escaped only where markup would form.

Every output is inert, on a terminal and in a Markdown viewer alike. JSON escapes every
character the sanitizer forbids as `\\uXXXX` (`render.inert_json`: lossless); Markdown
passes every stored string through `render.sanitize` before escaping it (see `markdown`).
That is why this module imports the sanitizer from `adapters.terminal.render`, a leaf
module of the standard library only, rather than leaving it to the command line.

Files are written by `projections.files` (never through a link: a temporary file in the
folder, renamed into place); names come from `file_name` (an ASCII slug of the title,
then the id). `write_document` and `write_documents` write any `Exportable` rendering the
same way (the OpenTelemetry export, `otel`, writes its OTLP JSON through them).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal, Protocol, TypeAlias, TypeVar
from uuid import UUID

import msgspec

from convstore.adapters.terminal.render import inert_json
from convstore.domain.vocabulary import EndState, TurnTrigger
from convstore.projections.chain import ChainStatus
from convstore.projections.files import OutputFolder, write_file
from convstore.projections.markdown import markdown
from convstore.projections.portable import (
    SCHEMA,
    AnyItem,
    PortableConversation,
    Schema,
)
from convstore.projections.presentation import present

Format: TypeAlias = Literal["json", "jsonl", "md", "pydantic-ai"]
FORMATS: Final[tuple[Format, ...]] = ("json", "jsonl", "md", "pydantic-ai")
"""Every export format; each is also its files' extension, but for `EXTENSIONS`."""
EXTENSIONS: Final[dict[str, str]] = {"pydantic-ai": "pydantic-ai.json"}

Native: TypeAlias = Callable[[PortableConversation], str]
"""A conversation as one document (no newline) of a format an adapter builds from its
stored events rather than from the portable reading (`pydantic-ai`)."""

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


def render(
    conversation: PortableConversation,
    format: Format,
    chain: ChainStatus | None = None,
    native: Native | None = None,
) -> Iterator[str]:
    """The conversation in `format`, as inert text chunks, each ending in a newline; the
    Markdown transcript opens with `chain`, the status of its stored chain, when given;
    `pydantic-ai` is what `native` writes (required for it)."""
    if format == "pydantic-ai":
        if native is None:
            raise TypeError("the pydantic-ai export is built by its adapter: pass native")
        yield native(conversation) + "\n"
    elif format == "json":
        yield json_document(conversation) + "\n"
    elif format == "jsonl":
        for record in jsonl_records(conversation):
            yield record + "\n"
    else:
        for line in markdown(present(conversation, chain)):
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


class Exportable(Protocol):
    """What a file of one conversation is named after."""

    @property
    def id(self) -> UUID:
        """The conversation's id."""
        ...

    @property
    def title(self) -> str:
        """Its title."""
        ...


Document = TypeVar("Document", bound=Exportable)


def file_name(conversation: Exportable, extension: str) -> str:
    """`slug-of-the-title-<id>.<extension>` (a format's extension is its name): unique by
    the id, safe on every filesystem."""
    stem = slug(conversation.title)
    stem = f"{stem}-{conversation.id}" if stem else str(conversation.id)
    if stem.split(".")[0] in _RESERVED:  # unreachable with the id appended; kept as a guard
        stem = f"_{stem}"
    return f"{stem}.{EXTENSIONS.get(extension, extension)}"


def write_one(
    path: Path,
    conversation: PortableConversation,
    format: Format,
    chain: ChainStatus | None = None,
    native: Native | None = None,
) -> Path:
    """Write one conversation to the file `path`, or into `path` when it is a folder.

    A link at `path` is refused, never followed (`files.write_file`).
    """
    return write_document(path, conversation, format, render(conversation, format, chain, native))


def write_document(path: Path, document: Exportable, extension: str, chunks: Iterable[str]) -> Path:
    """Write one conversation's rendering to the file `path`, or into `path` when it is a
    folder (named by `file_name`); a link at `path` is refused, never followed."""
    return write_file(path, chunks, folder_name=file_name(document, extension))


def write_all(
    conversations: Iterable[PortableConversation],
    path: Path,
    format: Format,
    *,
    progress: Callable[[int], None] | None = None,
    chain: Callable[[PortableConversation], ChainStatus | None] | None = None,
    native: Native | None = None,
) -> list[Path]:
    """Write each conversation to its own file in the folder `path` (created if missing;
    a link there is refused); `progress` gets the count after each file, `chain` gives
    each conversation's chain status, `native` writes the adapters' formats (see `render`)."""
    return write_documents(
        conversations,
        path,
        format,
        lambda conversation, status: render(conversation, format, status, native),
        progress=progress,
        chain=chain,
    )


def write_documents(
    documents: Iterable[Document],
    path: Path,
    extension: str,
    rendering: Callable[[Document, ChainStatus | None], Iterable[str]],
    *,
    progress: Callable[[int], None] | None = None,
    chain: Callable[[Document], ChainStatus | None] | None = None,
) -> list[Path]:
    """`write_all` for any rendering: each document's `rendering` (given its chain status)
    to its own file in the folder `path`, named by `file_name` with `extension`."""
    written: list[Path] = []
    with OutputFolder(path, create=True) as folder:
        for document in documents:
            status = chain(document) if chain is not None else None
            chunks = rendering(document, status)
            written.append(folder.write(file_name(document, extension), chunks))
            if progress is not None:
                progress(len(written))
    return written
