"""Domain values as the command line prints them, beside the transcript: JSON data
(`--json`: a ProviderPayload only as its metadata, never its value) and one-line
listings (`list`, `ingest`, `replay --dry-run`). Light on purpose: `list` loads none
of the projections.

Pure functions to unsanitized text and plain data; the `Renderer` sanitizes the lines and
`to_json` escapes the data.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec

from convstore.adapters.terminal.render import one_line, shorten
from convstore.domain.events import Event
from convstore.domain.responses import ResponseOutcome
from convstore.domain.service import ConversationSummary
from convstore.domain.vocabulary import ProviderPayload
from convstore.projections.wording import when


def payload_data(payload: ProviderPayload) -> dict[str, Any]:
    """A payload's metadata (provider, format, version, size): never its value."""
    return {
        "provider": payload.provider,
        "format": payload.format,
        "version": payload.version,
        "size": len(payload.raw),
    }


def to_data(value: Any) -> Any:
    """Plain JSON data for a domain value, every ProviderPayload reduced to its metadata;
    an event's conversation is also named `conversation_id` (beside `originator_id`), as
    every command names it."""
    if isinstance(value, ProviderPayload):
        return payload_data(value)
    if isinstance(value, msgspec.Struct):
        config = value.__struct_config__
        data: dict[str, Any] = {}
        if config.tag_field is not None:
            data[config.tag_field] = config.tag
        for name in value.__struct_fields__:
            data[name] = to_data(getattr(value, name))
            if name == "originator_id" and isinstance(value, Event):
                data["conversation_id"] = data[name]
        return data
    if isinstance(value, dict):
        return {str(key): to_data(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_data(item) for item in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, msgspec.Raw | bytes):
        return {"size": len(value)}  # opaque bytes are never shown
    return value


def summary_line(summary: ConversationSummary) -> str:
    """One listing line: short id (8), started, provider/model (28), turns (5), title
    (`adapters.cli.conversations.LIST_HEADER` names the columns)."""
    title = one_line(summary.title) or "(untitled)"
    made = "/".join(one_line(part) for part in (summary.provider, summary.model) if part)
    made = made if len(made) <= 28 else made[:27] + "…"
    turns = "-" if summary.turns is None else str(summary.turns)
    return (
        f"{str(summary.id)[:8]}  {when(summary.created_on)}  {made or '-':<28}  {turns:>5}  {title}"
    )


def outcome_line(outcome: ResponseOutcome, conversation: object = None) -> str:
    """One line per ingested response (`conversation`: the one it is stored in)."""
    if outcome.already_stored:
        where = f" in conversation {conversation}" if conversation is not None else ""
        return f"response {outcome.response_id}: already stored{where}, nothing written"
    attempt = (
        f" (attempt {outcome.attempt}: the whole copy of one stored cut short)"
        if outcome.attempt > 1
        else ""
    )
    return f"response {outcome.response_id}: {outcome.ended}, {outcome.events} events{attempt}"


def loss_line(loss: Any) -> str:
    """One line of a loss report (a `providers.Loss`)."""
    where = f"event {loss.version} ({loss.event})" if loss.version else loss.event
    if loss.kind == "assumed same model":  # nothing is left out: an assumption is listed
        return f"{where}: {loss.kind}: {loss.reason}"
    return f"{where}: {loss.kind} left out: {loss.reason}"


def note_line(version: int, event: str, text: str) -> str:
    """A line of a dry-run report that is not a loss."""
    return f"event {version} ({event}): {text}" if version else f"{event}: {text}"


def kept_line(loss: Any) -> str:
    """A dry-run line for a hosted tool kept declared for pending work (a `providers.Loss`
    of kind `kept_declared`)."""
    return note_line(loss.version, loss.event, f"kept declared: {loss.reason}")


def unanswered_line(call: Any) -> str:
    """A dry-run line for a client tool call without a result (an `UnansweredCall`)."""
    return note_line(
        call.version,
        "ToolCallRequested",
        f"no result: client tool call {call.call_id} ({call.name}); the provider refuses "
        "the request until it has one",
    )


def moment(text: str) -> datetime:
    """An ISO 8601 date or date and time, in UTC unless it names its offset; ValueError
    saying what was expected otherwise."""
    from datetime import UTC

    try:
        found = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{shorten(text, 40)!r} is not an ISO 8601 date or time (such as 2026-01-31 or "
            "2026-01-31T12:00)"
        ) from None
    return found if found.tzinfo is not None else found.replace(tzinfo=UTC)


def until(text: str) -> datetime:
    """An upper bound (`--until`): a date reaches to the end of that day; a time is the
    bound itself."""
    from datetime import timedelta

    bound = moment(text)
    return bound + timedelta(days=1) if len(text.strip()) == 10 else bound
