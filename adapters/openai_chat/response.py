"""What streamed and non-streamed responses share: the response-level state."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from convstore.adapters.openai_chat.choice import ChoiceMapper
from convstore.adapters.openai_chat.context import PROVIDER, RequestContext
from convstore.adapters.wire.counts import (
    UNREAD_USAGE,
    Counters,
    encoded_unread,
    fields_of,
    read_counters,
)
from convstore.domain.events import Event, ResponseEnded, ResponseStarted
from convstore.domain.vocabulary import (
    EndState,
    ErrorInfo,
    FinishReason,
    ResponseId,
    Source,
    Usage,
)

__all__ = [
    "FINISH_REASONS",
    "RESPONSE_FIELDS",
    "USAGE_TOKENS",
    "ResponseHead",
    "derived_id",
    "error_info",
    "failed_response",
]

FINISH_REASONS: Final[Mapping[str, FinishReason]] = {
    "stop": "stop",
    "eos": "stop",
    "length": "length",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "content_filter",
}
"""The first choice's `finish_reason` → the normalized finish reason (anything else:
`other`; a refusal answered with `stop` ends `refusal`)."""

USAGE_TOKENS: Final[Mapping[str, str]] = {
    "prompt_tokens": "input_tokens",
    "completion_tokens": "output_tokens",
    "prompt_tokens_details.cached_tokens": "cache_read_tokens",
    "prompt_tokens_details.cache_write_tokens": "cache_write_tokens",
    "completion_tokens_details.reasoning_tokens": "reasoning_tokens",
}
"""Chat Completions `usage` counter → `Usage` field; every other count goes to `other`
under its dotted name (`total_tokens`, `completion_tokens_details.audio_tokens`,
DeepSeek's `prompt_cache_hit_tokens`, …)."""

RESPONSE_FIELDS: Final = frozenset({"id", "object", "model", "choices", "usage"})
"""Top-level fields the events model; any other non-null one (`created`,
`system_fingerprint`, `service_tier`, Perplexity's `citations` and `search_results`,
Azure's `prompt_filter_results`, OpenRouter's `provider`) is kept in an UnknownArtifact of
format `response_fields`, from the newest chunk that carried it."""

_ANY: Final = msgspec.json.Decoder()
_NULL: Final = b"null"


def derived_id(body: bytes) -> ResponseId:
    """A deterministic response id where the server names none: re-ingesting matches."""
    return ResponseId("chat_" + hashlib.sha256(body).hexdigest()[:24])


def error_info(error: Any, status: int | None = None) -> ErrorInfo:
    """The ErrorInfo of an error object (`type`, else `code`), whatever its shape: OpenAI's
    `{"message", "type", "code"}`, a bare string (Ollama), a numeric code (vLLM)."""
    if isinstance(error, str):
        return ErrorInfo(type="error", message=error, status=status)
    if not isinstance(error, dict):
        return ErrorInfo(type="error", status=status)
    kind, code, text = error.get("type"), error.get("code"), error.get("message")
    name = kind if isinstance(kind, str) and kind and kind != "error" else ""
    if not name and isinstance(code, str | int) and not isinstance(code, bool) and code != "":
        name = str(code)
    return ErrorInfo(
        type=name or "error", message=text if isinstance(text, str) else "", status=status
    )


def reported_error(fields: Mapping[str, msgspec.Raw]) -> Any:
    """The error a body or chunk reports (its `error`, or itself when its `object` is
    `error`, as vLLM sends it); None when it reports none."""
    raw = fields.get("error")
    if raw is not None and bytes(raw) != _NULL:
        try:
            return _ANY.decode(raw)
        except msgspec.DecodeError:
            return "unreadable error"
    if fields.get("object") is not None and bytes(fields["object"]) == b'"error"':
        return {
            name: value
            for name in ("message", "type", "code")
            if (value := _decode(fields.get(name))) is not None
        }
    return None


def _decode(raw: msgspec.Raw | None) -> Any:
    if raw is None:
        return None
    try:
        return _ANY.decode(raw)
    except msgspec.DecodeError:
        return None


def failed_response(
    response_id: ResponseId, context: RequestContext, info: ErrorInfo
) -> list[Event]:
    """A response that failed before any output: an HTTP error body or an early error."""
    return [
        ResponseStarted(
            response_id=response_id,
            provider=PROVIDER,
            model=context.model,
            settings=context.settings,
        ),
        ResponseEnded(response_id=response_id, state="failed", finish_reason="error", error=info),
    ]


def numbered_sources(citations: Any, results: Any) -> list[Source]:
    """Perplexity's `citations` (URLs, in the order its `[n]` markers number them) as web
    sources, titled from its `search_results` where one has the same URL."""
    if not isinstance(citations, list):
        return []
    titles = {
        r["url"]: r["title"]
        for r in (results if isinstance(results, list) else ())
        if isinstance(r, dict) and isinstance(r.get("url"), str) and isinstance(r.get("title"), str)
    }
    return [
        Source(kind="web", url=url, title=titles.get(url))
        for url in citations
        if isinstance(url, str)
    ]


class ResponseHead:
    """The response-level state of one response: id, model, usage, other fields."""

    def __init__(
        self, response_id: ResponseId, fields: Mapping[str, msgspec.Raw], context: RequestContext
    ) -> None:
        self.response_id = response_id
        self.context = context
        self.model = ""
        self.usage: msgspec.Raw | None = None
        self.extras: dict[str, msgspec.Raw] = {}
        self.finish_reason: str | None = None
        """The first choice's `finish_reason`."""
        self.numbered: list[Source] = []
        """Perplexity's top-level `citations`: the sources its `[n]` markers number."""
        self.update(fields)
        self.model = self.model or context.model
        binding = {"model": self.model} if self.model else {}
        self.mapper = ChoiceMapper(
            response_id, {**binding, **context.binding_base}, numbered=self.numbered
        )

    def update(self, fields: Mapping[str, msgspec.Raw]) -> None:
        """Take in a newer copy of the response-level fields (a later chunk's)."""
        for name, raw in fields.items():
            if name not in RESPONSE_FIELDS and bytes(raw) != _NULL:
                self.extras[name] = raw
        if not self.model:
            model = _decode(fields.get("model"))
            if isinstance(model, str) and model:
                self.model = model
        usage = fields.get("usage")
        if usage is not None and bytes(usage) != _NULL:
            self.usage = usage
        if "citations" in fields:
            self.numbered[:] = numbered_sources(
                _decode(fields["citations"]), _decode(fields.get("search_results"))
            )

    def started(self) -> ResponseStarted:
        """The response's ResponseStarted draft."""
        return ResponseStarted(
            response_id=self.response_id,
            provider=PROVIDER,
            model=self.model,
            settings=self.context.settings,
        )

    def ended(self, state: EndState, error: ErrorInfo | None = None) -> list[Event]:
        """The response fields kept (if any), unread usage, then ResponseEnded."""
        mapper = self.mapper
        out: list[Event] = []
        if self.extras:
            out.append(mapper.unknown_value(msgspec.json.encode(self.extras), "response_fields"))
        usage = None
        if self.usage is not None:
            fields = fields_of(self.usage)
            read = (
                read_counters(fields, USAGE_TOKENS)
                if fields is not None
                else Counters(whole=self.usage)
            )
            unread = encoded_unread({"usage": read})
            if unread is not None:
                out.append(mapper.unknown_value(unread, UNREAD_USAGE))
            usage = usage_of(read)
        finish: FinishReason = "other"
        if state == "failed":
            finish = "error"
        elif state == "completed":
            finish = FINISH_REASONS.get(self.finish_reason or "", "other")
            if self.finish_reason is None and mapper.client_calls:
                finish = "tool_use"
            elif finish == "stop" and mapper.refused:
                finish = "refusal"
            elif self.finish_reason is None:
                finish = "refusal" if mapper.refused else "stop"
        out.append(
            ResponseEnded(
                response_id=self.response_id,
                state=state,
                finish_reason=finish,
                stop_reason=self.finish_reason,
                usage=usage,
                error=error,
            )
        )
        return out


def usage_of(read: Counters) -> Usage:
    """Chat Completions usage counters (read by `read_counters`) as `Usage`."""
    counts = read.counts
    tokens = {USAGE_TOKENS[k]: v for k, v in counts.items() if k in USAGE_TOKENS}
    return Usage(
        input_tokens=tokens.get("input_tokens"),
        output_tokens=tokens.get("output_tokens"),
        cache_read_tokens=tokens.get("cache_read_tokens"),
        cache_write_tokens=tokens.get("cache_write_tokens"),
        reasoning_tokens=tokens.get("reasoning_tokens"),
        other={k: v for k, v in counts.items() if k not in USAGE_TOKENS},
    )
