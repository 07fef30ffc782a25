"""What every command is built from: the session, the registry, argument types, and
the terminal helpers (a progress line, log records on stderr)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

from convstore.adapters.terminal import render
from convstore.adapters.terminal.render import Renderer
from convstore.adapters.wire.names import PROVIDER_ALIASES, PROVIDERS
from convstore.domain.errors import ConfigurationError

if TYPE_CHECKING:
    from pathlib import Path

    from convstore.domain import ConversationService
    from convstore.domain.vocabulary import ConversationId
    from convstore.storage import Store

PROG = "convstore"
ENV_URL = "CONVSTORE_URL"
ENV_DEBUG = "CONVSTORE_DEBUG"
MAX_EVENT_BYTES = "limits.max_event_bytes"
"""The configuration key of the largest event a store accepts (DESIGN.md)."""
STORE_ENCRYPT = "store.encrypt"
"""The configuration key that creates a store encrypted (issue 19)."""


class Session:
    """What a command runs with: the two renderers, and the store opened on first use."""

    def __init__(
        self, url: str | None, out: Renderer, err: Renderer, cfg: Sequence[str] = ()
    ) -> None:
        self.url = url
        self.out = out
        self.err = err
        self.cfg = cfg
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        """The store at `--db` opened to write (once, on first use), with the configured
        limits: it is created if missing and migrated if behind."""
        if self._store is not None and self._store.recorder.read_only:
            self.close()  # a reader cannot write: reopen the store as a writer
        if self._store is None:
            self._store = self._open(read_only=False)
        return self._store

    @property
    def service(self) -> ConversationService:
        """The application service of the store at `--db`, opened to write."""
        return self.store.service

    @property
    def reader(self) -> Store:
        """The store at `--db` opened to read (once, on first use): it takes no write lock,
        runs no DDL and creates nothing, so it reads beside a writer and on read-only
        media; a missing store is a `StoreNotFound` (exit 2). A command that opened the
        store to write reads through that."""
        if self._store is None:
            self._store = self._open(read_only=True)
        return self._store

    def _open(self, *, read_only: bool) -> Store:
        from convstore.adapters.config.loading import load_config, lookup
        from convstore.storage import open_store  # here: `--help` needs no database
        from convstore.storage.mapper import DEFAULT_MAX_EVENT_BYTES

        config = load_config(list(self.cfg))
        limit = lookup(config, MAX_EVENT_BYTES, DEFAULT_MAX_EVENT_BYTES)
        if type(limit) is not int or limit < 1:
            raise ConfigurationError(
                f"{MAX_EVENT_BYTES} must be a positive number of bytes, not {limit!r}"
            )
        encrypt = lookup(config, STORE_ENCRYPT, False)
        if type(encrypt) is not bool:
            raise ConfigurationError(f"{STORE_ENCRYPT} must be true or false, not {encrypt!r}")
        from convstore.projections.search import SearchIndex  # forgetting purges its rows

        return open_store(
            self.url,
            max_event_bytes=limit,
            read_only=read_only,
            encrypt=encrypt,
            purges=(SearchIndex.purge,),
        )

    def close(self) -> None:
        """Close the store if a command opened it."""
        if self._store is not None:
            self._store.close()
            self._store = None


ERROR_FACTS = ("conversation_id", "status", "attempts", "received")
"""What an error may know beside its type and message, given in `error_detail` when it
does (e.g. the conversation holding a response, a provider's HTTP status)."""


def error_detail(error: BaseException) -> dict[str, object]:
    """`error_detail` of a command's `--json` failure: the error's `type` (its class) and
    `message`, then what else it knows (`ERROR_FACTS`)."""
    detail: dict[str, object] = {"type": type(error).__name__, "message": str(error)}
    for name in ERROR_FACTS:
        value = getattr(error, name, None)
        if isinstance(value, int | str) and not isinstance(value, bool):
            detail[name] = value
        elif value is not None:
            detail[name] = str(value)
    return detail


Run = Callable[[argparse.Namespace, Session], int]


class Command(NamedTuple):
    """One subcommand: its help line, its arguments, and the function that runs it."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Run


COMMANDS: dict[str, Command] = {}
"""Every subcommand by name, in the order `--help` lists them."""


def command(
    name: str, help: str, arguments: Callable[[argparse.ArgumentParser], None]
) -> Callable[[Run], Run]:
    """Register the decorated function as the subcommand `name`."""

    def register(run: Run) -> Run:
        COMMANDS[name] = Command(name, help, arguments, run)
        return run

    return register


# --- argument types ---------------------------------------------------------------------------


MAX_NUMBER = (1 << 63) - 1
"""The largest count an option takes: what both databases hold in a 64-bit integer."""


def whole_number(text: str) -> int:
    """A count of 0 to `MAX_NUMBER`, written in decimal digits (`1e20` is not one)."""
    shown = render.shorten(text, 40)
    try:
        value = int(text)
    except ValueError:  # also a number of more than 4300 digits
        raise argparse.ArgumentTypeError(f"{shown!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{shown} is negative")
    if value > MAX_NUMBER:
        raise argparse.ArgumentTypeError(f"{shown} is out of range (at most {MAX_NUMBER})")
    return value


def positive_number(text: str) -> int:
    value = whole_number(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def path(text: str) -> Path:
    """A path argument (pathlib is loaded only when one is given: `--help` needs none)."""
    from pathlib import Path

    return Path(text)


def listen_flag(parser: argparse.ArgumentParser, default: str) -> None:
    """A server's `--listen HOST:PORT` (port 0: any free port)."""
    parser.add_argument(
        "--listen",
        default=default,
        metavar="HOST:PORT",
        help=f"where to listen (default {default}; port 0: any free port)",
    )


def json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


PROVIDER_METAVAR = "{" + ",".join(PROVIDERS) + "}"
"""How `--help` names a provider argument: its choices."""


def provider_name(text: str) -> str:
    """A provider's name (or an alias of one: `gemini` is `google`)."""
    name = PROVIDER_ALIASES.get(text, text)
    if name not in PROVIDERS:
        aliases = ", ".join(f"{alias} for {real}" for alias, real in PROVIDER_ALIASES.items())
        raise argparse.ArgumentTypeError(
            f"{render.shorten(text, 40)!r} is not one of {', '.join(PROVIDERS)} ({aliases})"
        )
    return name


def cfg_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cfg",
        action="append",
        default=[],
        metavar="KEY=VALUE|NAME",
        help="a configuration override (providers.anthropic.model=…) or a fragment NAME.toml",
    )


class Progress:
    """`what: phase done/total` on one stderr line, only when stderr is a terminal.

    The line is redrawn in place: the carriage returns are written here, around text that
    went through the sanitizer.
    """

    def __init__(self, err: Renderer, what: str) -> None:
        self.stream = err.stream
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self.what = what
        self.width = 0
        self.shown_at = 0.0

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or (done < total and now - self.shown_at < 0.1):
            return
        self.shown_at = now
        text = render.one_line(f"{self.what}: {phase} {done}/{total}")
        self.stream.write("\r" + text.ljust(self.width))
        self.width = max(self.width, len(text))

    def clear(self) -> None:
        """Remove the progress line."""
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.width = 0


class LogLines:
    """Routes `convstore.*` log records (gaps, retries) to stderr through the sanitizer."""

    def __init__(self, err: Renderer) -> None:
        import logging

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                err.line(f"{PROG}: {render.one_line(record.getMessage())}")

        self.logger = logging.getLogger("convstore")
        self.handler = Handler(logging.INFO)
        self.saved = self.logger.level

    def __enter__(self) -> None:
        self.logger.addHandler(self.handler)
        if self.logger.level == 0 or self.logger.level > self.handler.level:
            self.logger.setLevel(self.handler.level)

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.saved)


SHOWN_CANDIDATES = 10
"""How many conversations an ambiguous short id names."""


def resolve_id(store: Store, text: str) -> ConversationId:
    """The conversation `text` names: its full id, or a unique prefix of at least four hex
    digits (dashes as printed allowed), as git takes commits; found in the store's
    catalogue. An ambiguous prefix raises AmbiguousId naming the candidates, one that
    matches nothing ConversationNotFound (exit 2 either way, nothing done)."""
    from uuid import UUID

    from convstore.domain.errors import AmbiguousId, ConversationNotFound
    from convstore.domain.vocabulary import ConversationId

    shown = render.one_line(text)
    try:
        return ConversationId(UUID(text.strip()))
    except ValueError:
        pass
    found = store.service.matching(text, limit=SHOWN_CANDIDATES + 1)
    if not found:
        raise ConversationNotFound(
            f"no conversation's id starts with {shown!r} (`{PROG} list` shows them)"
        )
    if len(found) > 1:
        more = " and more" if len(found) > SHOWN_CANDIDATES else ""
        names = ", ".join(str(c) for c in found[:SHOWN_CANDIDATES])
        raise AmbiguousId(
            f"{shown!r} is the start of more than one conversation's id: {names}{more};"
            " give more of it"
        )
    return found[0]


def all_ids(store: Store) -> Iterator[ConversationId]:
    """Every conversation's id, in the order they started, without decoding an event: one
    whose first event this version cannot read is listed too (`--all` names it, and goes on)."""
    from convstore.domain.vocabulary import ConversationId

    offset = 0
    while page := store.recorder.select_first_events(offset=offset, limit=500):
        yield from (ConversationId(first.originator_id) for first in page)
        offset += len(page)


def read_file(path: Path, *, max_bytes: int | None = None) -> bytes:
    """A file's bytes (a pipe's or a device's too; gzip expanded), bounded like a capture
    (`max_bytes`, else `jobs.MAX_CAPTURE_BYTES`); a missing, unreadable or oversized file,
    or a folder, is a DecodeError naming it (exit 2)."""
    from convstore.adapters.recording.jobs import read_body  # here: `--help` loads no adapter

    return read_body(path, max_bytes=max_bytes)
