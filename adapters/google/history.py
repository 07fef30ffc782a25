"""A captured `generateContent` request → drafts of the history it carries (`ingest --request`).

`history` records the request's `contents` that the conversation does not hold yet, by
position (`recorded_prefix` tells how many it holds; `history_drafts` makes the drafts):

- a `user` content (`function`, the legacy role of function results, and a missing role
  read as `user`): each run of text parts → one `UserMessage` (a block per part); each
  `functionResponse` part → `ToolCallResponded` (its `response` as the content: the value
  of a one-string-field object such as `{"result": "15"}`, else the object as JSON;
  `is_error` for `{"error": …}`; the part itself as a `part` payload, so replay sends it
  back unchanged); any other part (inline data, a file) → an `UnknownArtifact` of format
  `user_part`, replayed in a user content. Field names a client spelled in snake_case
  (`function_response`, …) are camelCased, their values keeping their bytes.
- a `model` content: a response of origin `request` (it has no provider response id) with
  the id `request:<sha256(body)[:16]>:<index>`, its parts decoded by the response
  decoder itself (`stream.ChunkDecoder`, fed the content as one chunk of candidate 0): the
  same part mapping, the same derived ids, signed parts kept byte for byte. Parts spelled
  in snake_case by the client (`function_call`, …) have their field names camelCased
  first (their values keep their bytes), as the API reads both.

Which call a `functionResponse` answers: the call whose id is the part's `id` when one of
the conversation's unanswered calls has it; otherwise the oldest unanswered call with the
part's `name` (calls of the request's own model contents included, in order) — clients
assign ids of their own (`pyd_ai_…`) to calls Gemini sent without one, and some send no
id at all. A result that answers no call is kept as a `user_part` artifact.

The model the request's signed parts are bound to: the body's `model` field when a client
put one there, else the newest Gemini response's model in the conversation (the request
continues it), else none (unbound). A `generateContent` body does not name its model (the
URL does), and the `History` interface receives the body alone.

Matching a conversation against a request compares parts, not bytes: text by its text
(a model content's consecutive plain text parts joined, as the decoder joins them), a
function call by name, arguments and thought signature (its bytes: standard and URL-safe
base64 read alike; ids are left out, since clients add their own), a function result by
name, code and its result by their fields; empty text parts and unsigned thought parts
(thought summaries, thought-time code) are ignored, as clients often drop them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from convstore.adapters.google.binding import signature_bytes
from convstore.adapters.google.contents import USER_PART, build_contents
from convstore.adapters.google.context import PROVIDER, RequestContext, camel
from convstore.adapters.google.stream import ChunkDecoder
from convstore.adapters.wire.captured import held_prefix
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
from convstore.domain.vocabulary import CallId, ProviderPayload, RequestSettings, ResponseId

__all__ = [
    "HistoryMismatch",
    "content_keys",
    "history",
    "history_drafts",
    "recorded_prefix",
    "request_model",
]


class HistoryMismatch(DecodeError):
    """The conversation's recorded contents are not a prefix of the request's."""


class _Content(msgspec.Struct):
    role: str = ""
    parts: list[msgspec.Raw] = []


class _Request(msgspec.Struct):
    contents: list[_Content]
    """Required: a body without it (another provider's request) is refused, not read as empty."""


_REQUEST: Final = msgspec.json.Decoder(_Request)
_RAW_FIELDS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY: Final = msgspec.json.Decoder()
_ROLES: Final = {"user": "user", "function": "user", "": "user", "model": "model"}


def _contents(request_body: bytes) -> list[_Content]:
    try:
        contents = _REQUEST.decode(request_body).contents
    except (msgspec.DecodeError, RecursionError) as error:
        raise DecodeError(f"not a Gemini request body: {error}") from None
    for index, content in enumerate(contents):
        if content.role not in _ROLES:
            raise DecodeError(f"contents[{index}]: unknown role {content.role!r}")
    return contents


def _part(raw: msgspec.Raw) -> dict[str, Any] | None:
    try:
        value = _ANY.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    return {camel(k): v for k, v in value.items()} if isinstance(value, dict) else None


def _camel_bytes(raw: msgspec.Raw) -> bytes:
    """A part with its field names camelCased; its values (signatures above all) keep
    their bytes. Unchanged when already camelCase."""
    value = bytes(raw)
    try:
        fields = _RAW_FIELDS.decode(value)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return value
    if all("_" not in key for key in fields):
        return value
    renamed: dict[str, msgspec.Raw] = {}
    for key, field in fields.items():
        renamed.setdefault(camel(key), field)
    return msgspec.json.encode(renamed)


# --- the model ---------------------------------------------------------------------------------


def request_model(request_body: bytes, events: Sequence[Event] = ()) -> str:
    """The model the request's model contents are bound to: the body's `model` field, else
    the newest Gemini response's model in `events`, else '' (unbound)."""
    named = RequestContext.from_body(request_body).model
    if named:
        return named
    for event in reversed(events):
        if isinstance(event, ResponseStarted) and event.provider == PROVIDER and event.model:
            return event.model
    return ""


# --- drafts ------------------------------------------------------------------------------------


def history(events: Sequence[Event], request_body: bytes) -> list[MessageDrafts]:
    """Drafts of the request's contents the conversation of `events` does not hold yet;
    raises HistoryMismatch when its contents are not a prefix of the request's."""
    start = recorded_prefix(events, request_body)
    return history_drafts(request_body, start=start, events=events)


def history_drafts(
    request_body: bytes,
    *,
    start: int = 0,
    events: Sequence[Event] = (),
    model: str | None = None,
) -> list[MessageDrafts]:
    """Drafts for the request's contents from position `start` on (earlier ones are
    recorded already, in `events`). Raises DecodeError for a body that is not a
    `generateContent` request."""
    contents = _contents(request_body)
    bound = request_model(request_body, events) if model is None else model
    context = RequestContext.from_body(request_body, model=bound)
    digest = hashlib.sha256(request_body).hexdigest()[:16]
    calls = _Calls(events)
    out: list[MessageDrafts] = []
    for index, content in enumerate(contents):
        if index < start:
            continue
        if _ROLES[content.role] == "model":
            if not content.parts:
                continue
            response_id = ResponseId(f"request:{digest}:{index}")
            drafts = _model(content, response_id, context)
            calls.add(d for d in drafts if isinstance(d, ToolCallRequested))
            out.append(MessageDrafts(index=index, role="assistant", drafts=tuple(drafts)))
        else:
            drafts = _user(content, calls)
            if drafts:
                out.append(MessageDrafts(index=index, role="user", drafts=tuple(drafts)))
    return out


class _Calls:
    """The unanswered calls, oldest first: those recorded, then the request's own."""

    def __init__(self, events: Sequence[Event]) -> None:
        self.open: dict[str, str] = {}
        for event in events:
            if isinstance(event, ToolCallRequested):
                self.open[event.call_id] = event.name
            elif isinstance(event, ToolCallResponded):
                self.open.pop(event.call_id, None)

    def add(self, calls: Any) -> None:
        for call in calls:
            self.open[call.call_id] = call.name

    def answer(self, given: Any, name: Any) -> str | None:
        """The call a result answers (see the module documentation), now answered."""
        if isinstance(given, str) and given in self.open:
            del self.open[given]
            return given
        for call_id, call_name in self.open.items():
            if call_name == name:
                del self.open[call_id]
                return call_id
        return None


_CHUNK_HEAD: Final = b'{"responseId":'
_CANDIDATE_HEAD: Final = b',"candidates":[{"index":0,"content":{"role":"model","parts":['
_CHUNK_TAIL: Final = b"]}}]}"


def _model(content: _Content, response_id: ResponseId, context: RequestContext) -> list[Event]:
    """A model content through the response decoder, as one chunk of candidate 0."""
    parts = b",".join(_camel_bytes(raw) for raw in content.parts)
    chunk = _CHUNK_HEAD + msgspec.json.encode(response_id) + _CANDIDATE_HEAD + parts + _CHUNK_TAIL
    decoder = ChunkDecoder(context, whole=True)
    drafts = [*decoder.feed(chunk), *decoder.finish()]
    out: list[Event] = []
    for draft in drafts:
        if isinstance(draft, ResponseStarted):
            out.append(msgspec.structs.replace(draft, origin="request", settings=RequestSettings()))
        elif isinstance(draft, ResponseEnded):
            out.append(msgspec.structs.replace(draft, usage=None))
        else:
            out.append(draft)
    return out


def _user(content: _Content, calls: _Calls) -> list[Event]:
    drafts: list[Event] = []
    texts: list[str] = []

    def flush() -> None:
        if texts:
            drafts.append(UserMessage(blocks=tuple(texts)))
            texts.clear()

    for raw in content.parts:
        part = _part(raw)
        if part is not None and part.keys() <= {"text"} and isinstance(part.get("text"), str):
            if part["text"]:
                texts.append(part["text"])
            continue
        flush()
        value = msgspec.Raw(_camel_bytes(raw))
        result = part.get("functionResponse") if part is not None else None
        call_id = (
            calls.answer(result.get("id"), result.get("name")) if isinstance(result, dict) else None
        )
        if call_id is not None:
            assert isinstance(result, dict)
            content_text, is_error = _result_content(result.get("response"))
            drafts.append(
                ToolCallResponded(
                    call_id=CallId(call_id),
                    content=content_text,
                    is_error=is_error,
                    payload=ProviderPayload(provider=PROVIDER, format="part", value=value),
                )
            )
        else:
            payload = ProviderPayload(provider=PROVIDER, format=USER_PART, value=value)
            drafts.append(UnknownArtifact(payload=payload))
    flush()
    return drafts


def _result_content(response: Any) -> tuple[str, bool]:
    """(content, is_error) of a `functionResponse.response` object."""
    if isinstance(response, dict):
        is_error = set(response) == {"error"}
        if len(response) == 1:
            (value,) = response.values()
            if isinstance(value, str):
                return value, is_error
        return msgspec.json.encode(response).decode(), is_error
    if isinstance(response, str):
        return response, False
    return "" if response is None else msgspec.json.encode(response).decode(), False


# --- matching a conversation against a request -----------------------------------------------


def _canonical(value: Any) -> str:
    return msgspec.json.encode(value, order="sorted").decode()


def _signature(part: dict[str, Any]) -> bytes | str | None:
    signature = part.get("thoughtSignature")
    return signature_bytes(signature) if isinstance(signature, str) else None


def content_keys(role: str, parts: Sequence[Any]) -> list[tuple[Any, ...]]:
    """What identifies each part of a content when a conversation is matched against a
    request (see the module documentation)."""
    keys: list[tuple[Any, ...]] = []
    joinable = False
    for value in parts:
        part = {camel(k): v for k, v in value.items()} if isinstance(value, dict) else None
        if part is None:
            keys.append(("?",))
            joinable = False
            continue
        signature = _signature(part)
        thought = part.get("thought") is True
        text = part.get("text")
        if signature is None and thought:
            continue  # an unsigned thought part: a summary, or thought-time code
        if isinstance(text, str) and part.keys() <= {"text", "thought"}:
            if not text:
                continue
            if role == "model" and joinable:
                keys[-1] = ("text", keys[-1][1] + text)
            else:
                keys.append(("text", text))
            joinable = True
            continue
        joinable = False
        if isinstance(call := part.get("functionCall"), dict):
            arguments = call.get("args") or {}
            keys.append(("functionCall", call.get("name"), _canonical(arguments), signature))
        elif isinstance(result := part.get("functionResponse"), dict):
            keys.append(("functionResponse", result.get("name")))
        elif isinstance(code := part.get("executableCode"), dict):
            keys.append(("executableCode", code.get("code"), signature))
        elif isinstance(outcome := part.get("codeExecutionResult"), dict):
            keys.append(
                ("codeExecutionResult", outcome.get("outcome"), outcome.get("output"), signature)
            )
        elif isinstance(text, str):
            keys.append(("text", text, thought, signature))
        else:
            rest = {k: v for k, v in part.items() if k != "thoughtSignature"}
            keys.append(("part", _canonical(rest), signature))
    return keys


def _request_keys(contents: Sequence[_Content]) -> list[tuple[int, str, tuple[Any, ...]]]:
    keys: list[tuple[int, str, tuple[Any, ...]]] = []
    for index, content in enumerate(contents):
        role = _ROLES[content.role]
        try:
            parts = [_ANY.decode(raw) for raw in content.parts]
        except (msgspec.DecodeError, RecursionError) as error:
            raise DecodeError(f"contents[{index}]: unreadable part: {error}") from None
        keys.extend((index, role, key) for key in content_keys(role, parts))
    return keys


def recorded_prefix(events: Sequence[Event], request_body: bytes) -> int:
    """How many of the request's contents the conversation of `events` already holds.

    The conversation's contents (as the encoder builds them, every stored part included)
    must be a prefix of the request's, part by part and ending on a content boundary;
    otherwise HistoryMismatch says where they part.
    """
    contents = _contents(request_body)
    wanted = _request_keys(contents)
    built = build_contents(events, model=None).contents
    held = [(c.role, key) for c in built for key in content_keys(c.role, c.json_parts())]
    return held_prefix(
        held, wanted, len(contents), turns="contents", unit="part", mismatch=HistoryMismatch
    )
