"""A captured Responses API request → drafts of the history it carries (`ingest --request`).

`history_drafts` turns the request's `input` (a string, or a list of items) into drafts,
item by item, by position:

- a user message whose content is text only (a string, or `input_text` parts) → one
  `UserMessage`; any other user-side item (a `system` / `developer` message, a message
  with images or files, an `item_reference`, …) → an `UnknownArtifact` of format
  `input_item`, replayed to OpenAI as captured, in its place;
- a call output (`function_call_output`, `custom_tool_call_output`, `computer_call_output`,
  `local_shell_call_output`, `shell_call_output`, `apply_patch_call_output`, a client-run
  `tool_search_output`) answering a call the conversation holds open → `ToolCallResponded`
  (its text as `content`, the item as an `input_item` payload so replay sends it back
  unchanged); one answering nothing known → an `UnknownArtifact` `input_item`;
- consecutive assistant-side items (assistant messages, `reasoning`, `function_call` and
  the typed client calls, hosted call items, unknown output item types) → one response of
  origin `request`: `ResponseStarted(origin="request")` with the id
  `request:<sha256(body)[:16]>:<index of its first item>`, its items decoded by the
  response decoder's own item mapper (`items.ItemMapper`, bound to the request's model),
  then `ResponseEnded(completed, finish_reason="other")`. An assistant message in the
  short form (`{"role": "assistant", "content": "…"}`) is read as a message item with one
  `output_text` part, its payload the item exactly as captured. An assistant message
  without text and without id (some clients send `{"role": "assistant", "content": ""}`
  before a call) carries nothing and is skipped.

`recorded_prefix` tells how many of the request's items a conversation already holds,
refusing (`HistoryMismatch`) a conversation that is not a prefix of them. Items are
compared by what identifies them (role and texts for a message, call id for a call or its
output, id for reasoning and hosted items), so a client's spelling (string or parts, with
or without ids and status) does not matter; reasoning and hosted call items the
conversation holds may be missing from the request (clients leave them out, e.g. with
`store: true`).

A request that continues a stored response by `previous_response_id` holds only the items
it adds; they are all recorded (no prefix check), and one with no `input` at all holds no
history: `history` returns nothing and says so in the log (never an error).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from typing import Any, Final

import msgspec

from convstore.adapters.openai.context import PROVIDER, RequestContext
from convstore.adapters.openai.hosted_items import HOSTED_ITEMS
from convstore.adapters.openai.inputs import INPUT_ITEM, build_input
from convstore.adapters.openai.item_fields import str_field
from convstore.adapters.openai.items import ItemMapper
from convstore.adapters.wire.assembler import AssembledBlock
from convstore.adapters.wire.captured import open_calls
from convstore.adapters.wire.providers import MessageDrafts
from convstore.domain.errors import DecodeError
from convstore.domain.events import (
    Event,
    ResponseEnded,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.vocabulary import CallId, ProviderPayload, ResponseId

__all__ = [
    "HistoryMismatch",
    "MessageDrafts",
    "history",
    "history_drafts",
    "item_key",
    "recorded_prefix",
    "request_model",
]

log = logging.getLogger("convstore.adapters.openai")


class HistoryMismatch(DecodeError):
    """The conversation's recorded items are not a prefix of the request's `input`."""


class _Request(msgspec.Struct):
    input: str | list[msgspec.Raw] | None = None
    model: str | None = None
    store: bool | None = None
    previous_response_id: str | None = None


_REQUEST: Final = msgspec.json.Decoder(_Request)
_OBJECT: Final = msgspec.json.Decoder(dict[str, Any])

_OUTPUTS: Final = frozenset(
    {
        "function_call_output",
        "custom_tool_call_output",
        "computer_call_output",
        "local_shell_call_output",
        "shell_call_output",
        "apply_patch_call_output",
    }
)
"""Input item types that answer a client call by its `call_id`."""

_CALLS: Final = frozenset(
    {
        "function_call",
        "custom_tool_call",
        "computer_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
    }
)

_USER_SIDE: Final = frozenset({"item_reference", "mcp_approval_response"})
"""Item types (besides messages and call outputs) the client adds on the user side."""

_OPTIONAL: Final = frozenset({"reasoning", *HOSTED_ITEMS})
"""Item types a request may leave out of the history the conversation holds."""


def _request(body: bytes) -> _Request:
    try:
        return _REQUEST.decode(body)
    except (msgspec.DecodeError, RecursionError) as error:
        raise DecodeError(f"not an OpenAI Responses request body: {error}") from None


def request_model(request_body: bytes) -> str:
    """The model the request names (empty when it names none)."""
    return _request(request_body).model or ""


def _items(request: _Request) -> list[tuple[bytes, dict[str, Any]]]:
    """The `input` items, each as (bytes, object); a string input is one user message."""
    value = request.input
    if value is None:
        return []
    if isinstance(value, str):
        item = {"role": "user", "content": value}
        return [(msgspec.json.encode(item), item)]
    out = []
    for index, raw in enumerate(value):
        try:
            item = _OBJECT.decode(raw)
        except msgspec.ValidationError:
            raise DecodeError(f"input[{index}] is not an object") from None
        out.append((bytes(raw), item))
    return out


# --- classifying items ---------------------------------------------------------------------------


def _is_message(item: dict[str, Any]) -> bool:
    return "role" in item and item.get("type") in (None, "message")


def _side(item: dict[str, Any]) -> str:
    """`user` or `assistant`: which side of the conversation added the item."""
    if _is_message(item):
        return "assistant" if item.get("role") == "assistant" else "user"
    kind = str_field(item, "type")  # a `type` that is not a string names no kind
    if kind in _OUTPUTS or kind in _USER_SIDE or _client_search_output(item):
        return "user"
    return "assistant"


def _client_search_output(item: dict[str, Any]) -> bool:
    """A `tool_search_output` the client ran (a server-run one is the provider's item)."""
    return item.get("type") == "tool_search_output" and item.get("execution") == "client"


def _texts(content: Any) -> tuple[str, ...] | None:
    """The texts of a message's content; None when it holds anything but text."""
    if isinstance(content, str):
        return (content,)
    if not isinstance(content, list):
        return None
    texts = []
    for part in content:
        if not isinstance(part, dict):
            return None
        text = part.get("text") if part.get("type") in ("input_text", "output_text") else None
        if not isinstance(text, str):
            return None
        texts.append(text)
    return tuple(texts)


def _is_empty_assistant(item: dict[str, Any]) -> bool:
    """An assistant message with no text and no id: it carries nothing."""
    if not _is_message(item) or item.get("role") != "assistant" or item.get("id"):
        return False
    texts = _texts(item.get("content"))
    return texts is not None and not "".join(texts)


def _as_message_item(item: dict[str, Any]) -> dict[str, Any]:
    """An assistant message in any spelling, as the message item the mapper reads."""
    content = item.get("content")
    if isinstance(content, str):
        content = [{"type": "output_text", "text": content, "annotations": []}]
    return {**item, "type": "message", "content": content}


def item_key(item: Any) -> tuple[Any, ...]:
    """What identifies an input item when a conversation is matched against a request."""
    if not isinstance(item, dict):
        return ("?",)
    kind = str_field(item, "type")  # a `type` that is not a string names no kind
    if _is_message(item):
        content = item.get("content")
        texts = _texts(content)
        if texts is None:
            return ("message", item.get("role"), msgspec.json.encode(content))
        return ("message", item.get("role"), tuple(t for t in texts if t))
    if kind in _CALLS or (kind == "tool_search_call" and item.get("execution") == "client"):
        return ("call", item.get("call_id"))
    if kind in _OUTPUTS or _client_search_output(item):
        return ("output", item.get("call_id"))
    if kind == "reasoning":
        return (kind, item.get("id") or item.get("encrypted_content"))
    if isinstance(item.get("id"), str):
        return (kind, item["id"])
    return (kind, msgspec.json.encode(item, order="sorted"))


def _is_optional(key: tuple[Any, ...]) -> bool:
    return key[0] in _OPTIONAL


# --- drafts ------------------------------------------------------------------------------------


def history(events: Sequence[Event], request_body: bytes) -> list[MessageDrafts]:
    """Drafts of the request's items the conversation of `events` does not hold yet.

    Raises HistoryMismatch when the conversation is not a prefix of the request, and
    DecodeError for a body that is not a Responses API request.
    """
    request = _request(request_body)
    if request.input is None and request.previous_response_id is None:
        raise DecodeError(  # another provider's request, say: refused, not read as empty
            "not an OpenAI Responses request body: it has neither `input` nor "
            "`previous_response_id`"
        )
    if request.previous_response_id is not None:
        held = {e.response_id for e in events if isinstance(e, ResponseStarted)}
        if request.input is None or request.input == []:
            log.info(
                "the request continues response %s by previous_response_id and holds no "
                "input: it carries no history to record",
                request.previous_response_id,
            )
            return []
        if request.previous_response_id not in held:
            log.info(
                "the request continues response %s, which the conversation does not hold: "
                "the history before it lives on OpenAI's side; only the request's own input "
                "items are recorded",
                request.previous_response_id,
            )
        return history_drafts(request_body, unanswered=open_calls(events))
    return history_drafts(
        request_body,
        start=recorded_prefix(events, request_body),
        unanswered=open_calls(events),
    )


def history_drafts(
    request_body: bytes, *, start: int = 0, unanswered: Iterable[str] = ()
) -> list[MessageDrafts]:
    """Drafts for the request's items from position `start` on (earlier ones are already
    recorded: see `recorded_prefix`). `unanswered` are the call ids the conversation holds
    unanswered. Raises DecodeError for a body that is not a Responses API request."""
    request = _request(request_body)
    items = _items(request)
    context = RequestContext.from_body(request_body)
    digest = hashlib.sha256(request_body).hexdigest()[:16]
    calls = set(unanswered)
    out: list[MessageDrafts] = []
    group: list[tuple[int, bytes, dict[str, Any]]] = []

    def flush() -> None:
        if group:
            drafts = _assistant(group, digest, context)
            if drafts:
                calls.update(d.call_id for d in drafts if isinstance(d, ToolCallRequested))
                out.append(MessageDrafts(index=group[0][0], role="assistant", drafts=drafts))
            group.clear()

    for index, (raw, item) in enumerate(items):
        if index < start:
            continue
        if _side(item) == "assistant":
            if not _is_empty_assistant(item):
                group.append((index, raw, item))
            continue
        flush()
        out.append(MessageDrafts(index=index, role="user", drafts=(_user(raw, item, calls),)))
    flush()
    return out


def _payload(raw: bytes) -> ProviderPayload:
    return ProviderPayload(provider=PROVIDER, format=INPUT_ITEM, value=msgspec.Raw(raw))


def _user(raw: bytes, item: dict[str, Any], calls: set[str]) -> Event:
    if _is_message(item):
        texts = _texts(item.get("content"))
        if item.get("role") == "user" and texts is not None and texts:
            return UserMessage(blocks=texts)
        return UnknownArtifact(payload=_payload(raw))
    call_id = item.get("call_id")
    answers = str_field(item, "type") in _OUTPUTS or _client_search_output(item)
    if answers and isinstance(call_id, str) and call_id in calls:
        calls.discard(call_id)
        return ToolCallResponded(
            call_id=CallId(call_id), content=_output_text(item.get("output")), payload=_payload(raw)
        )
    return UnknownArtifact(payload=_payload(raw))


def _output_text(output: Any) -> str:
    """A call output's text: a string, or its parts' texts (a shell output's stdout and
    stderr), one a line."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(
            text
            for part in output
            if isinstance(part, dict)
            for text in (part.get("text"), part.get("stdout"), part.get("stderr"))
            if isinstance(text, str) and (text or "text" in part)
        )
    return ""


def _assistant(
    group: Sequence[tuple[int, bytes, dict[str, Any]]], digest: str, context: RequestContext
) -> tuple[Event, ...]:
    response_id = ResponseId(f"request:{digest}:{group[0][0]}")
    mapper = ItemMapper(response_id, context.model, context)
    drafts: list[Event] = []
    for position, (_, raw, item) in enumerate(group):
        block = _as_message_item(item) if _is_message(item) else item
        drafts.extend(mapper(AssembledBlock(position, block, raw)))
    if not drafts:
        return ()
    return (
        ResponseStarted(
            response_id=response_id, provider=PROVIDER, model=context.model, origin="request"
        ),
        *drafts,
        ResponseEnded(response_id=response_id, state="completed", finish_reason="other"),
    )


# --- matching a conversation against a request ------------------------------------------------


def recorded_prefix(events: Sequence[Event], request_body: bytes) -> int:
    """How many of the request's `input` items the conversation of `events` already holds.

    The conversation's items (as the encoder builds them, bindings checked against the
    request's model) must be a prefix of the request's, item by item; reasoning and hosted
    call items the request leaves out are passed over. Otherwise HistoryMismatch says
    where they part.
    """
    request = _request(request_body)
    items = _items(request)
    wanted = [
        (index, item_key(item))
        for index, (_, item) in enumerate(items)
        if not _is_empty_assistant(item)
    ]
    built = build_input(events, model=request.model or "", store=True)
    held = [item_key(_json(item)) for item in built.items]
    if not held:
        return 0
    matched = 0
    for key in held:
        if matched < len(wanted) and wanted[matched][1] == key:
            matched += 1
        elif not _is_optional(key):
            if matched >= len(wanted):
                raise HistoryMismatch(
                    "the conversation holds more than the request's input: the request is "
                    "not a continuation of it"
                )
            index, expected = wanted[matched]
            raise HistoryMismatch(
                f"the conversation differs from the request at input[{index}] ({expected[0]} "
                f"item): its recorded items must be a prefix of the request's"
            )
    if matched == len(wanted):
        return len(items)
    return wanted[matched][0]


def _json(item: Any) -> Any:
    if isinstance(item, msgspec.Raw):
        return msgspec.json.decode(item)
    return msgspec.json.decode(msgspec.json.encode(item))
