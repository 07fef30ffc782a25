"""Where a store lives: parse `--db` / `CONVSTORE_URL` values into a location.

Accepted forms: a plain path; `sqlite:///relative.db`; `sqlite:////absolute.db`;
`postgresql://user@host:port/db` or `postgres://…`, with `?schema=name` choosing the
PostgreSQL schema. Nothing given: `CONVSTORE_URL`, else an SQLite file in the user data
folder.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import platformdirs

from convstore.domain.errors import ConfigurationError

ENV_VAR = "CONVSTORE_URL"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


@dataclass(frozen=True)
class SQLiteLocation:
    """An SQLite database file."""

    path: Path
    default: bool = False
    """True for the default location, whose folder a writer creates; an explicit path
    must name an existing folder."""

    def __str__(self) -> str:
        return f"sqlite:///{self.path}"


@dataclass(frozen=True)
class PostgresLocation:
    """A PostgreSQL database and the schema convstore's tables live in."""

    dsn: str
    """A libpq connection URI without the `schema` parameter."""
    schema: str = "public"

    def __str__(self) -> str:
        parts = urlsplit(self.dsn)
        netloc = parts.netloc.rsplit("@", 1)[-1]  # never show a password
        return f"postgresql://{netloc}{parts.path} (schema {self.schema})"


StoreLocation = SQLiteLocation | PostgresLocation


def default_path() -> Path:
    """The embedded default: `convstore.db` in the user data folder."""
    return Path(platformdirs.user_data_dir("convstore", appauthor=False)) / "convstore.db"


def parse_location(url: str | None = None) -> StoreLocation:
    """Resolve a store URL or path (None: `CONVSTORE_URL`, then the default)."""
    if url is None or not url.strip():
        url = os.environ.get(ENV_VAR, "").strip() or None
    if url is None:
        return SQLiteLocation(default_path(), default=True)
    scheme = url.lower()  # a URL's scheme is case-insensitive (RFC 3986)
    if scheme.startswith(("postgresql://", "postgres://")):
        return _postgres(url)
    if scheme.startswith("sqlite:"):
        if not scheme.startswith("sqlite:///"):
            raise ConfigurationError(
                f"cannot read store URL {redacted(url)!r}: write sqlite:///relative.db or "
                "sqlite:////absolute/path.db"
            )
        rest = url[len("sqlite:///") :]
        if not rest:
            raise ConfigurationError(f"store URL {redacted(url)!r} names no file")
        return SQLiteLocation(Path(rest).expanduser())
    if "://" in url:
        raise ConfigurationError(
            f"unsupported store URL {redacted(url)!r}: use a path, sqlite:///…, or postgresql://…"
        )
    return SQLiteLocation(Path(url).expanduser())


_PASSWORD_PARAMETER = re.compile(r"(?i)((?:^|[?&;])password=)[^&;#]*")


def redacted(url: str) -> str:
    """`url` with any password hidden: the userinfo after `user:` up to the last `@`, and
    a `password=` parameter; for messages, which must never echo a secret. It needs no
    well-formed URL (it is what a malformed one is shown as)."""
    start = url.find("://")
    if start >= 0:
        authority = start + 3
        at = url.rfind("@", authority)
        colon = url.find(":", authority, at)
        if at >= 0 and colon >= 0:
            url = f"{url[: colon + 1]}***{url[at:]}"
    return _PASSWORD_PARAMETER.sub(r"\1***", url)


def _postgres(url: str) -> PostgresLocation:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - urlsplit checks a port only when asked for it
    except ValueError as error:  # an unclosed IPv6 bracket, a port that is no number
        raise ConfigurationError(f"cannot read store URL {redacted(url)!r}: {error}") from None
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = "public"
    kept = []
    for key, value in query:
        if key == "schema":
            schema = value
        else:
            kept.append((key, value))
    if not _IDENTIFIER.fullmatch(schema):
        raise ConfigurationError(
            f"schema {schema!r} is not a plain identifier (letters, digits, underscore)"
        )
    # Not urlunsplit: it drops an empty host, and `postgresql:///db` (the local socket,
    # libpq's default) would become `postgresql:/db`, which libpq cannot read.
    dsn = f"postgresql://{parts.netloc}{parts.path}"
    if kept:
        dsn += f"?{urlencode(kept)}"
    return PostgresLocation(dsn=dsn, schema=schema)
