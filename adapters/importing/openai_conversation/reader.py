"""Reading the items of an OpenAI Conversations API list into conversations.

PATH is a JSON file, or a folder of them (each file one conversation, in name order).
A file holds one conversation's items as the API lists them: a list page
(`{"object": "list", "data": [...], "first_id", "last_id", "has_more"}`), an array of
such pages in the order they were fetched, or an object that names the conversation and
holds its pages or items (`{"id": "conv_…", "object": "conversation", "items": …}`).

The API lists items newest first unless asked for `order=asc`, and a page does not say
which order it is in. It is read from the items themselves: a call output follows its
call, and a conversation's first message is the user's; when the items show neither
(one kind of item only), they are read in the API's default order, newest first. The
conversation's id is its `id` when the file names it, else its earliest item's id.

The items are the Responses API's own, so they are mapped as a captured Responses
request's `input` is (`adapters.openai.history`): user messages, call outputs answering
a call, and each run of assistant-side items (messages, reasoning, calls, hosted calls)
as one response of origin `request`, whose id is `openai-conversation:<its first item's
id>` (stable as the conversation grows). What the list does not carry is reported: the
model that answered (the items do not name it), usage, and the pages a file lacks when
its last page says `has_more`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from convstore.adapters.importing.source import (
    ImportedConversation,
    ImportedExchange,
    Message,
    Unreadable,
)
from convstore.adapters.openai.history import history_drafts
from convstore.adapters.wire.providers import Loss
from convstore.domain.errors import ConfigurationError, ConvstoreError, DecodeError
from convstore.domain.events import Event, ResponseStarted, UserMessage
from convstore.domain.vocabulary import ResponseId

__all__ = ["ConversationItemsImporter", "conversation_items"]

FORMAT: Final = "openai-conversation"
_OUTPUTS: Final = ("_call_output", "tool_search_output")
_MAX_FILE_BYTES: Final = 1024 * 1024 * 1024
_TITLE_CHARS: Final = 80


class ConversationItemsImporter:
    """The `openai-conversation` importer (see the module's docstring)."""

    def plan(self, path: Path) -> int:
        """Every file read and checked before the first write; their count."""
        files = _files(path)
        for file in files:
            conversation_items(file)
        return len(files)

    def read(self, path: Path) -> Iterator[ImportedConversation | Unreadable]:
        """One conversation per file."""
        for file in _files(path):
            try:
                yield _conversation(file)
            except ConvstoreError as error:
                yield Unreadable(source_id=str(file), reason=str(error))


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".json" and p.is_file())
        if not files:
            raise ConfigurationError(f"{path} holds no .json file of conversation items")
        return files
    if not path.is_file():
        raise ConfigurationError(f"{path} is neither a file nor a folder")
    return [path]


def conversation_items(file: Path) -> tuple[str | None, list[dict[str, Any]], bool]:
    """The conversation's id when the file names it, its items oldest first, and whether
    its last page says more items exist. Raises DecodeError for a file that holds no
    conversation items list."""
    try:
        if file.stat().st_size > _MAX_FILE_BYTES:
            raise DecodeError(f"{file} is larger than {_MAX_FILE_BYTES} bytes")
        value = msgspec.json.decode(file.read_bytes())
    except OSError as error:
        raise ConfigurationError(f"cannot read {file}: {error.strerror}") from None
    except (msgspec.DecodeError, RecursionError) as error:
        raise DecodeError(f"{file} is not JSON: {error}") from None
    name: str | None = None
    if isinstance(value, dict) and value.get("object") == "conversation":
        name = value.get("id") if isinstance(value.get("id"), str) else None
        value = value.get("items")
    pages = value if isinstance(value, list) and all(_is_page(p) for p in value) else [value]
    if not pages or not all(_is_page(p) for p in pages):
        raise DecodeError(
            f'{file} holds no Conversations API items list (an object with "object": '
            '"list" and a "data" array, or an array of them)'
        )
    items: list[dict[str, Any]] = []
    for number, page in enumerate(pages):
        for index, item in enumerate(page["data"]):
            if not isinstance(item, dict) or not isinstance(item.get("type"), str):
                raise DecodeError(f"{file}: page {number + 1}, data[{index}] is not an item")
            items.append(item)
    more = pages[-1].get("has_more") is True
    return name, _oldest_first(items), more


def _is_page(value: object) -> bool:
    return (
        isinstance(value, dict)
        and value.get("object") == "list"
        and isinstance(value.get("data"), list)
    )


def _oldest_first(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items oldest first, their order read from them (see the module's docstring)."""
    position: dict[str, int] = {}
    for at, item in enumerate(items):
        call = item.get("call_id")
        if isinstance(call, str) and not str(item["type"]).endswith(_OUTPUTS):
            position.setdefault(call, at)
    for at, item in enumerate(items):
        call = item.get("call_id")
        if isinstance(call, str) and str(item["type"]).endswith(_OUTPUTS) and call in position:
            return items if position[call] < at else items[::-1]
    messages = [i.get("role") for i in items if i["type"] == "message"]
    if messages and messages[0] == "user" and messages[-1] != "user":
        return items
    if messages and messages[-1] == "user" and messages[0] != "user":
        return items[::-1]
    return items[::-1]


def _conversation(file: Path) -> ImportedConversation:
    name, items, more = conversation_items(file)
    if not items:
        raise DecodeError(f"{file} lists no items")
    source_id = name or str(items[0].get("id") or "")
    if not source_id:
        raise DecodeError(f"{file} names no conversation and its first item has no id")
    body = msgspec.json.encode({"model": "", "input": items})
    messages = history_drafts(body)
    exchanges: list[ImportedExchange] = []
    pending: list[Message] = []
    for message in messages:
        if message.role != "assistant":
            pending.append((message.role, message.drafts))
            continue
        first = items[message.index].get("id")
        fresh = ResponseId(
            f"{FORMAT}:{first}"
            if isinstance(first, str) and first
            else f"{FORMAT}:{source_id}:{message.index}"
        )
        exchanges.append(ImportedExchange(tuple(pending), _renamed(message.drafts, fresh)))
        pending = []
    losses = (
        [
            Loss(
                version=0,
                event="response",
                kind="model",
                reason=f"{len(exchanges)} response(s): a Conversations items list names no model",
            ),
            Loss(version=0, event="response", kind="usage", reason="the items carry no usage"),
        ]
        if exchanges
        else []
    )
    if more:
        losses.append(
            Loss(
                version=0,
                event="list",
                kind="items",
                reason="the last page says has_more: the items after it are not in the file",
            )
        )
    return ImportedConversation(
        source_id=source_id,
        title=_title(_user_drafts(exchanges, pending)),
        exchanges=exchanges,
        trailing=tuple(pending),
        losses=tuple(losses),
    )


def _user_drafts(
    exchanges: Sequence[ImportedExchange], trailing: Sequence[Message]
) -> Iterator[Event]:
    """Every user-side draft, in order."""
    for exchange in exchanges:
        for _, drafts in exchange.history:
            yield from drafts
    for _, drafts in trailing:
        yield from drafts


def _title(drafts: Iterator[Event]) -> str:
    """The first user message's first line, shortened."""
    for draft in drafts:
        if isinstance(draft, UserMessage) and draft.blocks:
            line = draft.blocks[0].strip().splitlines()[0] if draft.blocks[0].strip() else ""
            return line[:_TITLE_CHARS]
    return ""


def _renamed(drafts: Sequence[Event], response_id: ResponseId) -> tuple[Event, ...]:
    """The drafts with the response's id (and every event's reference to it) replaced."""
    started = drafts[0]
    assert isinstance(started, ResponseStarted)  # a response's drafts begin with it
    old = started.response_id
    return tuple(
        msgspec.structs.replace(d, response_id=response_id)
        if getattr(d, "response_id", None) == old
        else d
        for d in drafts
    )
