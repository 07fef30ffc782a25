"""One pydantic-ai message history → the drafts of the conversation it becomes.

Each `ModelResponse` is one exchange's response; the requests before it (system and
user prompts, tool returns, retry feedback) are its history. Ids come from the history,
so an import run again, or on a longer copy of the same history, lands in the same
conversation and records only what is new:

- the conversation's source id is the first message's `conversation_id` (pydantic-ai's
  agents set one), else `sha256:` and a digest of the first message's parts (their
  kinds, contents and times); a `conversation_id` of `convstore:ID` (a history
  `convstore export` wrote, which agents keep on the messages they add) names the
  conversation ID itself, so a history exported, continued and imported lands back in
  the conversation it came from;
- a response's id is its `provider_response_id`, else (or when the history repeats one)
  `pydantic-ai-` and a digest of the source id and the response (its time, model and
  parts).

What a history holds that the drafts do not carry is a loss (`Loss`, `version` 0, `event`
the part kind): media in prompts, signatures of providers whose signed reasoning is not
carried, the contents of built-in tools' returns (kept as a summary), citations, part
kinds this importer does not model, the source's times.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Final
from uuid import UUID

import msgspec

from convstore.adapters.importing.pydantic_ai import wire
from convstore.adapters.importing.pydantic_ai.providers import OURS, REDACTED, reasoning_payload
from convstore.adapters.importing.source import ImportedConversation, ImportedExchange, Message
from convstore.adapters.wire.providers import Loss
from convstore.domain.events import (
    AssistantText,
    ContextInjected,
    Event,
    HostedActivity,
    Reasoning,
    ResponseEnded,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    UserMessage,
)
from convstore.domain.vocabulary import (
    ActivityId,
    CallId,
    ConversationId,
    EndState,
    FinishReason,
    Lifecycle,
    Provider,
    RequestSettings,
    ResponseId,
    Usage,
)

__all__ = ["FORMAT", "OURS_PREFIX", "read_history", "source_id", "target"]

FORMAT: Final = "pydantic-ai"
UNNAMED: Final = "pydantic-ai"
"""The provider of a response whose history names none (a FunctionModel's)."""

FINISH: Final[dict[str, FinishReason]] = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content_filter",
    "tool_call": "tool_use",
    "error": "error",
}
"""pydantic-ai's finish reason (OpenTelemetry's values) → ours."""

END_STATE: Final[dict[str, EndState]] = {
    "complete": "completed",
    "suspended": "completed",  # paused for deferred tools: all of it arrived
    "incomplete": "abandoned",
    "interrupted": "abandoned",
}
"""A response's `state` → how it ended (another: `abandoned`)."""

OURS_PREFIX: Final = "convstore:"
"""The `conversation_id` of a history convstore exported: this prefix, then its id."""

RETRY_SOURCE: Final = "retry"
"""The `ContextInjected.source` of retry feedback that answers no tool call."""

_ENCODER: Final = msgspec.json.Encoder()


def _digest(*values: Any) -> str:
    return hashlib.sha256(_ENCODER.encode(values)).hexdigest()


def source_id(messages: Sequence[wire.Message]) -> str:
    """The history's source id (see the module's docstring)."""
    first = messages[0]
    if first.conversation_id:
        return first.conversation_id
    return "sha256:" + _digest(wire.parts(first))


def target(source: str) -> ConversationId | None:
    """The conversation a source id of the form `convstore:ID` names, else None."""
    if not source.startswith(OURS_PREFIX):
        return None
    try:
        return ConversationId(UUID(source.removeprefix(OURS_PREFIX)))
    except ValueError:
        return None


def _text(content: Any) -> str:
    """A tool's or a retry's content as text: a string as it is, else its JSON."""
    if isinstance(content, str):
        return str(content)
    return str(_ENCODER.encode(content), "utf-8")


def _summary(content: Any) -> str:
    if isinstance(content, list):
        return f"{len(content)} result{'s' if len(content) != 1 else ''}"
    if isinstance(content, dict) and isinstance(content.get("status"), str):
        return str(content["status"])
    return ""


def _arguments(args: str | dict[str, Any] | None) -> dict[str, Any] | None:
    """A call's arguments as an object (None when they are not one)."""
    if args is None or isinstance(args, dict):
        return args or {}
    try:
        value = msgspec.json.decode(args) if args.strip() else {}
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, dict) else None


class _Reader:
    """The fold over one history's messages."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.losses: list[Loss] = []
        self.system: list[str] = []
        self.instructions: str | None = None
        self.open_calls: set[str] = set()
        self.calls: set[str] = set()
        self.activities: dict[str, Lifecycle] = {}
        self.response_ids: set[str] = set()
        self.providers: set[str] = set()

    def loss(self, where: str, kind: str, part: str, reason: str) -> None:
        self.losses.append(Loss(version=0, event=part, kind=kind, reason=f"{where}: {reason}"))

    # --- requests ---

    def request(self, index: int, message: wire.Request) -> list[Event]:
        drafts: list[Event] = []
        if message.instructions is not None:
            self.instructions = message.instructions
        for number, part in enumerate(wire.parts(message)):
            where = f"message {index}, part {number}"
            if isinstance(part, str):
                self.loss(where, "part", part, f"a {part!r} part is not imported")
            elif isinstance(part, wire.SystemPrompt):
                self.system.append(part.content)
            elif isinstance(part, wire.UserPrompt):
                drafts.extend(self._prompt(where, part))
            elif isinstance(part, wire.ToolReturn):
                drafts.extend(
                    self._result(where, part.tool_call_id, part.content, part.outcome != "success")
                )
            elif isinstance(part, wire.RetryPrompt) and part.tool_call_id in self.open_calls:
                drafts.extend(self._result(where, part.tool_call_id or "", part.content, True))
            elif isinstance(part, wire.RetryPrompt | wire.RetryFeedback):
                drafts.append(ContextInjected(source=RETRY_SOURCE, text=_text(part.content)))
            else:
                self.loss(where, "part", wire.kind_of(part), "not a request's part")
        return drafts

    def _prompt(self, where: str, part: wire.UserPrompt) -> list[Event]:
        content = [part.content] if isinstance(part.content, str) else part.content
        blocks = tuple(item for item in content if isinstance(item, str))
        for item in content:
            if not isinstance(item, str):
                kind = item.get("kind", "?") if isinstance(item, dict) else "?"
                self.loss(where, "media", "user-prompt", f"{kind!r} content is not imported")
        return [UserMessage(blocks=blocks)] if blocks else []

    def _result(self, where: str, call_id: str, content: Any, is_error: bool) -> list[Event]:
        if call_id not in self.open_calls:
            self.loss(
                where,
                "tool_result",
                "tool-return",
                f"the result for {call_id!r} answers no open call of the history",
            )
            return []
        self.open_calls.discard(call_id)
        return [
            ToolCallResponded(call_id=CallId(call_id), content=_text(content), is_error=is_error)
        ]

    # --- responses ---

    def response(self, index: int, message: wire.Response) -> list[Event]:
        response_id = self._response_id(message)
        named = message.provider_name or ""
        provider: Provider = OURS.get(named) or named or UNNAMED
        if provider not in OURS.values() and provider not in self.providers:
            self.providers.add(provider)
            self.loss(
                f"message {index}",
                "provider",
                "response",
                f"provider {provider!r} is none of ours: kept by its name",
            )
        model = message.model_name or ""
        system = "\n\n".join([*self.system, *filter(None, [self.instructions])]) or None
        drafts: list[Event] = [
            ResponseStarted(
                response_id=response_id,
                provider=provider,
                model=model,
                settings=RequestSettings(system=system),
            )
        ]
        for number, part in enumerate(wire.parts(message)):
            where = f"message {index}, part {number}"
            drafts.extend(self._part(where, response_id, provider, model, part))
        finish = message.finish_reason
        details = message.provider_details or {}
        stop = details.get("finish_reason")
        drafts.append(
            ResponseEnded(
                response_id=response_id,
                state=END_STATE.get(message.state, "abandoned"),
                finish_reason=FINISH.get(finish or "", "other"),
                stop_reason=stop if isinstance(stop, str) else finish,
                usage=_usage(message.usage),
            )
        )
        return drafts

    def _response_id(self, message: wire.Response) -> ResponseId:
        given = message.provider_response_id
        if not given or given in self.response_ids:
            parts = wire.parts(message)
            given = (
                "pydantic-ai-"
                + _digest(self.source, message.timestamp, message.model_name, parts)[:32]
            )
        self.response_ids.add(given)
        return ResponseId(given)

    def _part(
        self,
        where: str,
        response_id: ResponseId,
        provider: Provider,
        model: str,
        part: wire.AnyPart | str,
    ) -> list[Event]:
        if isinstance(part, str):
            self.loss(where, "part", part, f"a {part!r} part is not imported")
            return []
        if isinstance(part, wire.Text):
            if part.citations:
                self.loss(where, "citations", "text", "the text's citations are not imported")
            return [AssistantText(response_id=response_id, text=part.content)]
        if isinstance(part, wire.Thinking):
            return [self._thinking(where, response_id, provider, model, part)]
        if isinstance(part, wire.ToolCall):
            return self._call(where, response_id, part)
        if isinstance(part, wire.BuiltinToolCall | wire.BuiltinToolReturn):
            return self._hosted(where, response_id, part)
        self.loss(where, "part", wire.kind_of(part), "not a response's part")
        return []

    def _thinking(
        self,
        where: str,
        response_id: ResponseId,
        provider: Provider,
        model: str,
        part: wire.Thinking,
    ) -> Reasoning:
        payload = None
        if part.signature:
            named = part.provider_name or ""
            signer = OURS.get(named, named) or provider
            payload = reasoning_payload(signer, part.content, part.signature, part.id, model)
            if payload is None:
                self.loss(
                    where,
                    "signature",
                    "thinking",
                    f"the signature of {signer!r} reasoning is not kept",
                )
        redacted = part.id == REDACTED and not part.content and payload is not None
        return Reasoning(
            response_id=response_id, text=part.content, redacted=redacted, payload=payload
        )

    def _call(self, where: str, response_id: ResponseId, part: wire.ToolCall) -> list[Event]:
        arguments = _arguments(part.args)
        if part.tool_call_id in self.calls or arguments is None:
            why = "its id is used twice" if arguments is not None else "its arguments are no object"
            self.loss(where, "tool_call", "tool-call", f"call {part.tool_call_id!r}: {why}")
            return []
        self.calls.add(part.tool_call_id)
        self.open_calls.add(part.tool_call_id)
        return [
            ToolCallRequested(
                response_id=response_id,
                call_id=CallId(part.tool_call_id),
                name=part.tool_name,
                arguments=arguments,
            )
        ]

    def _hosted(
        self,
        where: str,
        response_id: ResponseId,
        part: wire.BuiltinToolCall | wire.BuiltinToolReturn,
    ) -> list[Event]:
        activity = part.tool_call_id
        state = self.activities.get(activity)
        kind = wire.kind_of(part)
        if isinstance(part, wire.BuiltinToolCall):
            arguments = _arguments(part.args)
            if state is not None or arguments is None:
                why = "its id is used twice" if arguments is not None else "its input is no object"
                self.loss(where, "hosted_activity", kind, f"activity {activity!r}: {why}")
                return []
            self.activities[activity] = "started"
            return [
                HostedActivity(
                    activity_id=ActivityId(activity),
                    name=part.tool_name,
                    state="started",
                    response_id=response_id,
                    input=arguments,
                )
            ]
        if state not in (None, "started"):
            self.loss(where, "hosted_activity", kind, f"activity {activity!r} ended already")
            return []
        ended: Lifecycle = "completed" if part.outcome == "success" else "failed"
        self.activities[activity] = ended
        if part.content is not None:
            self.loss(
                where, "hosted_result", kind, f"{part.tool_name} result: kept as a summary only"
            )
        return [
            HostedActivity(
                activity_id=ActivityId(activity),
                name=part.tool_name,
                state=ended,
                response_id=response_id,
                summary=_summary(part.content),
            )
        ]


def _usage(usage: wire.Usage | None) -> Usage | None:
    if usage is None:
        return None
    details = usage.details
    return Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens or None,
        cache_write_tokens=usage.cache_write_tokens or None,
        reasoning_tokens=usage.output_reasoning_tokens or None,
        hosted={k: v for k, v in details.items() if k.endswith("_requests")},
        other={k: v for k, v in details.items() if not k.endswith("_requests")},
    )


def _title(messages: Sequence[wire.Message]) -> str:
    """The first line of the first user prompt's text (at most 80 characters)."""
    for message in messages:
        if not isinstance(message, wire.Request):
            continue
        for part in wire.parts(message):
            if isinstance(part, wire.UserPrompt):
                content = [part.content] if isinstance(part.content, str) else part.content
                for text in content:
                    line = text.strip().split("\n", 1)[0] if isinstance(text, str) else ""
                    if line:
                        return line[:80]
    return ""


def read_history(messages: Sequence[wire.Message]) -> ImportedConversation:
    """The conversation `messages` (a non-empty history) become; raises
    msgspec.ValidationError for a part of the wrong shape."""
    source = source_id(messages)
    reader = _Reader(source)
    exchanges: list[ImportedExchange] = []
    pending: list[Message] = []
    for index, message in enumerate(messages):
        if isinstance(message, wire.Request):
            drafts = reader.request(index, message)
            if drafts:
                pending.append(("user", drafts))
        else:
            exchanges.append(ImportedExchange(tuple(pending), reader.response(index, message)))
            pending = []
    reader.losses.append(
        Loss(
            version=0,
            event="history",
            kind="timestamps",
            reason="the history's times are not kept: events carry the time of the import",
        )
    )
    return ImportedConversation(
        source_id=source,
        title=_title(messages),
        exchanges=tuple(exchanges),
        trailing=tuple(pending),
        losses=tuple(reader.losses),
        target=target(source),
    )
