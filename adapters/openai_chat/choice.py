"""One choice of a Chat Completions response → domain drafts.

A choice, whole (`choices[i]` of a response body) or assembled from a stream's deltas,
becomes, in order:

- a Reasoning when the message carries reasoning: `reasoning_content` (DeepSeek, vLLM,
  llama.cpp), else `reasoning` (OpenRouter, Groq, Ollama). OpenRouter's
  `reasoning_details` (text, summaries, encrypted blocks with signatures) is its payload
  (format `reasoning_details`, bound to the model and server); reasoning that came only
  encrypted is `redacted`. Cut reasoning is stored unsigned (no payload);
- an AssistantText of the `content`, its `url_citation` annotations as attributions (the
  range, code points end-exclusive, is checked against the text: one that does not lie in
  it is dropped and logged, without the text), then one attribution per source of
  Perplexity's top-level `citations` (its `[n]` markers number them; the range is the
  point where `[n]` first stands, none where it does not), with the whole message as its
  payload (format `message`, bound);
- an AssistantText of the `refusal` (the response then ends `refusal`);
- a ToolCallRequested per `tool_calls` entry (its id, its function's name, the arguments
  parsed from their JSON string) with the tool call as payload (format `tool_call`). A
  call cut by the end of the stream, or whose arguments do not parse to an object, is an
  UnknownArtifact `partial`, never a ToolCallRequested;
- an UnknownArtifact `message_fields` of every other message field (`audio`, a legacy
  `function_call`, a server's own), and one `choice_fields` of every choice field beside
  `index`, `message` / `delta` and `finish_reason` (`logprobs`, Azure's
  `content_filter_results`, OpenRouter's `native_finish_reason`, vLLM's `stop_reason`).
  In a stream, a field that came in several chunks is kept as the list of its values in
  order, except `logprobs`, whose `content` and `refusal` lists are joined back into one.

Only the first choice (index 0) is the conversation's answer; with `n > 1`, every other
choice is kept whole as an UnknownArtifact `choice` (replayed to the same server, read by
nobody else).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from convstore.adapters.openai_chat.context import PROVIDER
from convstore.domain.events import (
    AssistantText,
    Event,
    Reasoning,
    ToolCallRequested,
    UnknownArtifact,
)
from convstore.domain.vocabulary import (
    Attribution,
    CallId,
    ProviderPayload,
    ResponseId,
    Source,
    TextRange,
)

__all__ = ["MESSAGE_FIELDS", "Choice", "ChoiceMapper", "ToolCall"]

log = logging.getLogger("convstore.adapters.openai_chat")

MESSAGE_FIELDS: Final = frozenset(
    {
        "role",
        "content",
        "refusal",
        "reasoning_content",
        "reasoning",
        "reasoning_details",
        "tool_calls",
        "annotations",
    }
)
"""Message (and delta) fields the events model; any other non-null one is kept raw."""

_encode: Final = msgspec.json.encode
_ANY: Final = msgspec.json.Decoder()
_NULL: Final = b"null"


@dataclass(slots=True)
class ToolCall:
    """One entry of a message's `tool_calls`: its native JSON and its bytes when whole."""

    value: dict[str, Any]
    raw: bytes | None = None
    complete: bool = True


@dataclass(slots=True)
class Choice:
    """A choice, whole or assembled: what `ChoiceMapper` reads."""

    index: int
    message: dict[str, Any]
    """The message's known fields (`MESSAGE_FIELDS` but `tool_calls`), decoded."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    raw: bytes | None = None
    """The message's bytes as received (a whole response), else None: encoded."""
    extras: dict[str, msgspec.Raw] = field(default_factory=dict)
    """The message's other fields, raw."""
    choice_extras: dict[str, msgspec.Raw] = field(default_factory=dict)
    """The choice's other fields, raw."""
    finish_reason: str | None = None
    complete: bool = True
    """False when the stream ended before the choice's `finish_reason`."""

    def native_message(self) -> dict[str, Any]:
        """The message as a whole response would hold it (for a streamed choice)."""
        message: dict[str, Any] = {"role": "assistant", **self.message}
        message.setdefault("content", None)
        message.update(self.extras)
        if self.tool_calls:
            message["tool_calls"] = [
                msgspec.Raw(c.raw) if c.raw is not None else c.value for c in self.tool_calls
            ]
        return message

    def native_choice(self) -> dict[str, Any]:
        """The choice as a whole response would hold it."""
        choice: dict[str, Any] = {"index": self.index}
        choice["message"] = msgspec.Raw(self.raw) if self.raw is not None else self.native_message()
        choice["finish_reason"] = self.finish_reason
        choice.update(self.choice_extras)
        return choice


class ChoiceMapper:
    """Maps the choices of one response to drafts."""

    def __init__(
        self,
        response_id: ResponseId,
        binding: Mapping[str, str],
        *,
        numbered: Sequence[Source] = (),
    ) -> None:
        self.response_id = response_id
        self.binding = dict(binding)
        self.numbered = numbered
        """Sources the text's `[n]` markers number (Perplexity's `citations`), read when a
        choice is mapped (a stream's chunks may bring them before it closes)."""
        self._calls: set[str] = set()
        self.client_calls = 0
        """ToolCallRequested drafts made: the response then ends `tool_use`."""
        self.refused = False
        """A refusal was mapped: the response then ends `refusal`."""
        self.dropped_ranges = 0
        """Citation ranges dropped because they did not lie in their text."""

    # --- payloads ---

    def payload(self, fmt: str, value: bytes, *, bound: bool = True) -> ProviderPayload:
        """A payload of these bytes (exactly one JSON value, as parsed or encoded)."""
        return ProviderPayload.parsed(PROVIDER, fmt, value, binding=self.binding if bound else {})

    def unknown_value(self, value: bytes, fmt: str) -> UnknownArtifact:
        """JSON the adapter does not model (response fields, a stream chunk), kept raw."""
        payload = ProviderPayload(provider=PROVIDER, format=fmt, value=msgspec.Raw(value))
        return UnknownArtifact(payload=payload, response_id=self.response_id)

    # --- a choice ---

    def __call__(self, choice: Choice) -> list[Event]:
        """The drafts of one closed (or cut) choice."""
        if choice.index != 0:
            return [self.unknown_value(_encode(choice.native_choice()), "choice")]
        message = choice.message
        out: list[Event] = []
        reasoning = self._reasoning(choice)
        if reasoning is not None:
            out.append(reasoning)
        content = message.get("content")
        text = content if isinstance(content, str) else _parts_text(content)
        if text:
            raw = choice.raw if choice.raw is not None else _encode(choice.native_message())
            out.append(
                AssistantText(
                    response_id=self.response_id,
                    text=text,
                    attributions=(
                        *self._attributions(message.get("annotations"), text),
                        *self._numbered(text),
                    ),
                    attributions_complete=choice.complete,
                    payload=self.payload("message" if choice.complete else "partial", raw),
                )
            )
        refusal = message.get("refusal")
        if isinstance(refusal, str) and refusal:
            self.refused = True
            out.append(AssistantText(response_id=self.response_id, text=refusal))
        for position, call in enumerate(choice.tool_calls):
            out.append(self._tool_call(call, position, complete=choice.complete))
        if choice.extras:
            out.append(self.unknown_value(_encode(choice.extras), "message_fields"))
        if choice.choice_extras:
            out.append(self.unknown_value(_encode(choice.choice_extras), "choice_fields"))
        return out

    def _reasoning(self, choice: Choice) -> Reasoning | None:
        message = choice.message
        text = message.get("reasoning_content")
        if not isinstance(text, str) or not text:
            text = message.get("reasoning")
        text = text if isinstance(text, str) else ""
        details = message.get("reasoning_details")
        details = details if isinstance(details, list) and details else None
        if not text and details is not None:
            text = "".join(
                d["text"] if isinstance(d.get("text"), str) else d.get("summary") or ""
                for d in details
                if isinstance(d, dict) and isinstance(d.get("text") or d.get("summary"), str)
            )
        if not text and details is None:
            return None
        if not choice.complete or details is None:
            return Reasoning(response_id=self.response_id, text=text)
        encrypted = any(
            isinstance(d, dict) and d.get("type") == "reasoning.encrypted" for d in details
        )
        return Reasoning(
            response_id=self.response_id,
            text=text,
            redacted=not text and encrypted,
            payload=self.payload("reasoning_details", _encode(details)),
        )

    def _attributions(self, annotations: Any, text: str) -> tuple[Attribution, ...]:
        out: list[Attribution] = []
        for note in annotations if isinstance(annotations, list) else ():
            if not isinstance(note, dict):
                continue
            kind = note.get("type")
            inner = note.get(kind) if isinstance(kind, str) else None
            cited = inner if isinstance(inner, dict) else note
            start, end = _int(cited.get("start_index")), _int(cited.get("end_index"))
            text_range, unplaced = None, ""
            if start is not None and end is not None:
                if 0 <= start <= end <= len(text):
                    text_range = TextRange(start, end)
                else:
                    unplaced = (
                        f"the server's range [{start}, {end}) does not lie in the text of "
                        f"{len(text)} code points"
                    )
                    self.dropped_ranges += 1
                    log.warning(
                        "response %s: %s range [%d, %d) does not lie in its text of %d code "
                        "points; dropped (the annotation stays in the payload)",
                        self.response_id,
                        kind,
                        start,
                        end,
                        len(text),
                    )
            source = Source(
                kind="web" if kind == "url_citation" else "document",
                url=_str(cited.get("url")),
                title=_str(cited.get("title")),
            )
            out.append(Attribution(source=source, range=text_range, unplaced=unplaced))
        return tuple(out)

    def _numbered(self, text: str) -> list[Attribution]:
        """One attribution per numbered source, at the point where its first `[n]` marker
        stands in the text (no range where the text has none: the server named no span)."""
        out = []
        for number, source in enumerate(self.numbered, start=1):
            at = text.find(f"[{number}]")
            point = TextRange(at, at) if at >= 0 else None
            unplaced = "" if point is not None else f"no [{number}] marker in the text"
            out.append(Attribution(source=source, range=point, unplaced=unplaced))
        return out

    def _tool_call(self, call: ToolCall, position: int, *, complete: bool) -> Event:
        value = call.value
        raw = call.raw if call.raw is not None else _encode(value)
        function = value.get("function")
        function = function if isinstance(function, dict) else {}
        call_id, name = value.get("id"), function.get("name")
        arguments_text = function.get("arguments")
        if isinstance(arguments_text, dict):  # some servers (Ollama's native shape) send an object
            arguments: Any = arguments_text
        else:
            arguments = _arguments(arguments_text)
        if not isinstance(call_id, str) or not call_id:
            call_id = (
                f"{self.response_id}:call:{position}"  # deterministic when the server names none
            )
        if (
            not (complete and call.complete)
            or not isinstance(name, str)
            or not isinstance(arguments, dict)
            or call_id in self._calls
        ):
            fmt = "tool_call" if complete and call.complete else "partial"
            return UnknownArtifact(payload=self.payload(fmt, raw), response_id=self.response_id)
        self._calls.add(call_id)
        self.client_calls += 1
        return ToolCallRequested(
            response_id=self.response_id,
            call_id=CallId(call_id),
            name=name,
            arguments=arguments,
            payload=self.payload("tool_call", raw),
        )


def _arguments(text: Any) -> Any:
    """The arguments a JSON string holds ({} for an empty one); None when unreadable."""
    if not isinstance(text, str):
        return None
    if not text.strip():
        return {}
    try:
        return _ANY.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None


def _parts_text(content: Any) -> str:
    """Text of a `content` given as parts (some servers answer with a list)."""
    if not isinstance(content, list):
        return ""
    return "".join(
        p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
    )


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def whole_tool_calls(raws: Sequence[msgspec.Raw]) -> list[ToolCall]:
    """A whole message's `tool_calls`, each with its bytes as received."""
    out = []
    for raw in raws:
        value = bytes(raw)
        try:
            decoded = _ANY.decode(value)
        except (msgspec.DecodeError, RecursionError):
            decoded = None
        out.append(ToolCall(decoded if isinstance(decoded, dict) else {}, value))
    return out
