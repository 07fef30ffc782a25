"""What each page of the viewer shows, read from the store (opened read-only: nothing here
writes). Plain data for the templates: the listing, a transcript (`presentation.present`
with its chain status), an audit, search hits with the index's lag, a replay preview, and
a Search Suggestion's content, the one piece of provider markup the viewer displays.

Bad input (a malformed id, a date that is not one, a query with nothing to search for) is
a `PageError` with the status and the message the page shows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final
from urllib.parse import urlencode
from uuid import UUID

from convstore.adapters.recording import jobs
from convstore.adapters.terminal import values
from convstore.adapters.terminal.render import shorten
from convstore.adapters.terminal.values import kept_line, loss_line, unanswered_line
from convstore.adapters.wire.consent import KEPT_DECLARED
from convstore.adapters.wire.names import PROVIDER_ALIASES, PROVIDERS
from convstore.adapters.wire.providers import read_payload
from convstore.domain import ConversationFilter, ConversationId, ConversationSummary
from convstore.domain.calls import unanswered_calls
from convstore.domain.errors import (
    ConversationNotFound,
    ConvstoreError,
    IntegrityError,
)
from convstore.domain.events import HostedActivity, ResponseStarted, Started
from convstore.projections import audit, chain, portable, presentation, search
from convstore.projections.query import SearchQueryError
from convstore.storage import Store

PAGE_SIZE: Final = 50
MAX_PAGE_SIZE: Final = 500
SEARCH_LIMIT: Final = 50
MIN_PREFIX: Final = 4
"""The fewest hex digits of an id the viewer takes (as the command line does)."""


class PageError(Exception):
    """A request the viewer cannot answer: its HTTP status and what the page says."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# --- the listing ------------------------------------------------------------------------


@dataclass(frozen=True)
class Listing:
    """One page of the conversation list."""

    rows: list[ConversationSummary]
    total: int
    offset: int
    limit: int
    filters: dict[str, str]
    """The filters as given (for the form and the page links)."""
    labels: list[str]

    @property
    def previous(self) -> int | None:
        """The previous page's offset (None on the first)."""
        return max(self.offset - self.limit, 0) if self.offset else None

    @property
    def next(self) -> int | None:
        """The next page's offset (None on the last)."""
        following = self.offset + self.limit
        return following if following < self.total else None

    def page_query(self, offset: int) -> str:
        """The query string of the page at `offset`, with these filters."""
        pairs = [*self.filters.items(), *(("label", label) for label in self.labels)]
        if self.limit != PAGE_SIZE:
            pairs.append(("limit", str(self.limit)))
        return urlencode([*pairs, ("offset", str(offset))])


def listing(store: Store, query: Mapping[str, str], labels: Sequence[str]) -> Listing:
    """The conversations the filters in `query` let through, newest first, one page."""
    offset = _number(query.get("offset", ""), "offset", default=0, low=0)
    limit = _number(query.get("limit", ""), "limit", default=PAGE_SIZE, low=1)
    limit = min(limit, MAX_PAGE_SIZE)
    given = {
        key: query.get(key, "").strip()
        for key in ("provider", "model", "since", "until", "title")
        if query.get(key, "").strip()
    }
    wanted = [label.strip() for label in labels if label.strip()]
    where = ConversationFilter(
        provider=given.get("provider"),
        model=given.get("model"),
        since=_bound(values.moment, given, "since"),
        until=_bound(values.until, given, "until"),
        title=given.get("title"),
        labels=tuple(wanted),
    )
    service = store.service
    rows = service.list(offset=offset, limit=limit, newest_first=True, where=where)
    return Listing(
        rows=rows,
        total=service.count(where),
        offset=offset,
        limit=limit,
        filters=given,
        labels=wanted,
    )


def _number(text: str, name: str, *, default: int, low: int) -> int:
    if not text.strip():
        return default
    if not text.strip().isdigit() or int(text) < low:
        raise PageError(400, f"{name} must be a whole number of at least {low}, not {text!r}")
    return int(text)


def _bound(read: Callable[[str], datetime], given: Mapping[str, str], name: str) -> datetime | None:
    """The filter's date `name`, if given (`values.moment` / `values.until`)."""
    if name not in given:
        return None
    try:
        return read(given[name])
    except ValueError as error:
        raise PageError(400, f"{name}: {error}") from None


# --- one conversation ---------------------------------------------------------------------


def conversation_id(store: Store, text: str) -> ConversationId:
    """The conversation `text` names: its full id, or a unique prefix of at least four hex
    digits. PageError 404 when none matches, 400 when the prefix is ambiguous or short."""
    try:
        return ConversationId(UUID(text.strip()))
    except ValueError:
        pass
    digits = text.replace("-", "")
    if len(digits) < MIN_PREFIX or any(c not in "0123456789abcdefABCDEF" for c in digits):
        raise PageError(400, f"{shorten(text, 40)!r} is not a conversation id")
    found = store.service.matching(text, limit=2)
    if not found:
        raise PageError(404, f"no conversation's id starts with {shorten(text, 40)!r}")
    if len(found) > 1:
        raise PageError(400, f"{shorten(text, 40)!r} starts more than one id: give more of it")
    return found[0]


@dataclass(frozen=True)
class TranscriptPage:
    """A conversation's transcript, and where it came from."""

    transcript: presentation.Transcript
    chain: chain.ChainStatus
    forked_from: UUID | None = None
    forked_at: int = 0
    displays: set[str] = field(default_factory=set)
    """The activities whose display obligation has content to show (their iframes)."""


def transcript(store: Store, conversation: ConversationId) -> TranscriptPage:
    """The transcript of `conversation` (a fork's parent's prefix included), as `show`
    reads it, with its chain verified as it is read."""
    events = _history(store, conversation)
    status = chain.chain_status(store, conversation)
    reading = portable.fold(events, read_payload)
    origin = next(
        (e for e in events if isinstance(e, Started) and e.originator_id == conversation),
        None,
    )
    return TranscriptPage(
        transcript=presentation.present(reading, status),
        chain=status,
        forked_from=None if origin is None else origin.forked_from,
        forked_at=0 if origin is None else origin.forked_at,
        displays={e.activity_id for e in events if isinstance(e, HostedActivity) and e.display},
    )


def _history(store: Store, conversation: ConversationId) -> list[Any]:
    try:
        return store.service.history(conversation)
    except ConversationNotFound:
        raise PageError(404, f"conversation {conversation} is not in this store") from None
    except IntegrityError as error:
        raise PageError(
            500,
            f"conversation {conversation} cannot be read: {shorten(str(error), 300)} (run"
            " `convstore verify`)",
        ) from None


def audited(store: Store, conversation: ConversationId) -> audit.ConversationAudit:
    """The audit `convstore audit ID` prints, its chain verified."""
    import msgspec

    _history(store, conversation)  # a missing or unreadable conversation: its page says so
    report = audit.audit(store.service.events(conversation), store.repository.placed)
    status = chain.chain_status(store, conversation, lineage=False)
    return msgspec.structs.replace(report, chain=status)


def display_content(store: Store, conversation: ConversationId, activity_id: str) -> str:
    """The newest display content recorded for the activity (provider HTML, untrusted:
    served only from its own route, under its own CSP, in a sandboxed iframe)."""
    content: str | None = None
    for event in _history(store, conversation):
        shown = isinstance(event, HostedActivity) and event.activity_id == activity_id
        if shown and event.display is not None and event.display.content:
            content = event.display.content
    if content is None:
        raise PageError(404, "no display content is recorded for this activity")
    return content


# --- search -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """A search's hits, and how far the index is behind the log."""

    query: str
    hits: list[search.Hit]
    lag: int


def found(store: Store, query: str) -> Found:
    """The best hits for `query`, from the index as it stands (the viewer never indexes)."""
    keeper = search.follower(store)
    if not query.strip():
        return Found(query="", hits=[], lag=keeper.lag())
    try:
        hits = search.search(store, query, SEARCH_LIMIT, catch_up=False)
    except SearchQueryError as error:
        raise PageError(400, str(error)) from None
    return Found(query=query, hits=hits, lag=keeper.lag())


# --- replay preview -----------------------------------------------------------------------


@dataclass(frozen=True)
class Preview:
    """What `replay --to PROVIDER --dry-run` reports, as lines."""

    provider: str
    model: str
    providers: tuple[str, ...]
    left_out: list[str]
    kept: list[str]
    unanswered: list[str]
    problem: str = ""
    """Why no request could be built (a configuration or encoding error)."""


def preview(
    store: Store, conversation: ConversationId, provider: str | None, model: str | None
) -> Preview:
    """The loss report of continuing `conversation` on `provider` (default: its newest
    response's), for the recorded model or `model`. Building the request never writes."""
    events = _history(store, conversation)
    provider = PROVIDER_ALIASES.get(provider or "", provider) or recorded_provider(events)
    if provider not in PROVIDERS:
        raise PageError(400, f"{shorten(provider, 40)!r} is not one of {', '.join(PROVIDERS)}")
    base = Preview(
        provider=provider,
        model=model or "",
        providers=PROVIDERS,
        left_out=[],
        kept=[],
        unanswered=[],
    )
    try:
        request = jobs.replay(
            store.service, conversation, provider, model=model or None, events=events
        )
    except ConvstoreError as error:  # a configuration the request cannot be built from
        return dataclasses.replace(base, problem=shorten(str(error), 500))
    calls = unanswered_calls(events)
    return dataclasses.replace(
        base,
        left_out=[loss_line(loss) for loss in request.losses if loss.kind != KEPT_DECLARED],
        kept=[kept_line(loss) for loss in request.losses if loss.kind == KEPT_DECLARED],
        unanswered=[unanswered_line(call) for call in calls],
    )


def recorded_provider(events: Sequence[Any]) -> str:
    """The provider of the conversation's newest response (the preview's default)."""
    for event in reversed(events):
        if isinstance(event, ResponseStarted):
            return str(event.provider)
    return PROVIDERS[0]


__all__ = [
    "Found",
    "Listing",
    "PageError",
    "Preview",
    "TranscriptPage",
    "audited",
    "conversation_id",
    "display_content",
    "found",
    "listing",
    "preview",
    "recorded_provider",
    "transcript",
]
