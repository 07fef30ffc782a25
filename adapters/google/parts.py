"""Gemini content parts → domain drafts: the mapping tables.

Gemini streams whole parts, one or a few per chunk, never index-addressed deltas. Text is
the only thing split across parts, so the shared assembler holds exactly one kind of open
block: a *run* of consecutive plain text parts of one candidate with the same `thought`
flag. Pieces append to the open run (joined once, at close); the run closes when a part of
another kind arrives, a text part with the other `thought` flag, or the stream ends. A
visible run becomes one AssistantText, a thought run one Reasoning.

A text part that carries anything beyond `text` and `thought` (a `thoughtSignature`
above all) is never merged with its neighbours: Google requires a signed part to go back
exactly as it came ("don't merge a part with a signature with one without"). It closes the
open run and stands alone, its payload the part byte for byte (format `part`, bound to the
model): visible text as its own AssistantText; thought text as its own Reasoning; and a
signature on an empty text part (streamed Gemini 3 ends with one) as a Reasoning with no
text, `redacted` (the reasoning exists only in encrypted form). So the encoder replays
every signed part where and as it arrived, and a foreign encoder sees only reasoning to
leave out.

Other parts come whole and map as they are: `functionCall` → ToolCallRequested (its `id`,
else `<responseId>:call:<k>` for the k-th call of the response, so a streamed and a
non-streamed copy agree); `executableCode` → a `code_execution` HostedActivity `started`
(`<responseId>:code_execution:<k>` unless the part has an `id`), and the next
`codeExecutionResult` ends the oldest open one, `completed` on `OUTCOME_OK`, else `failed`
— thought-time runs (`"thought": true`) included. Any other part is an UnknownArtifact
(format `part`); a function call streamed in pieces (`partialArgs`, `willContinue`) is
one of format `partial`, never a ToolCallRequested.

Visible text is not turned into events here: it becomes a `HeldText`, which the stream
decoder completes into an AssistantText once the candidate's grounding is known.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import msgspec

from convstore.adapters.google.context import PROVIDER, RequestContext
from convstore.adapters.wire.assembler import AssembledBlock
from convstore.domain.events import (
    Event,
    HostedActivity,
    Reasoning,
    ToolCallRequested,
    UnknownArtifact,
)
from convstore.domain.vocabulary import ActivityId, CallId, ProviderPayload, ResponseId

__all__ = ["MERGEABLE", "Draft", "HeldText", "PartMapper", "is_mergeable"]

MERGEABLE: Final = frozenset({"text", "thought"})
"""The only fields a text part may have to merge into a run."""

CODE_OK: Final = "OUTCOME_OK"
SUMMARY_CHARS: Final = 80


@dataclass(slots=True)
class HeldText:
    """Visible text waiting for the candidate's grounding before it becomes AssistantText."""

    text: str
    start: int
    """Its first byte's offset in the candidate's concatenated visible text."""
    complete: bool = True
    payload: ProviderPayload | None = None


Draft: TypeAlias = Event | HeldText


def is_mergeable(part: Mapping[str, Any]) -> bool:
    """True for a plain text part that may join a run (no signature, nothing else)."""
    thought = part.get("thought", False)
    return (
        isinstance(part.get("text"), str) and isinstance(thought, bool) and part.keys() <= MERGEABLE
    )


class _Malformed(Exception):
    """A known part kind with an unexpected shape: kept as an UnknownArtifact."""


def _dict(d: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = d.get(key)
    if not isinstance(value, dict):
        raise _Malformed(key)
    return value


def _first_line(text: str, *, last: bool = False) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1] if last else lines[0]
    return line if len(line) <= SUMMARY_CHARS else line[: SUMMARY_CHARS - 1] + "…"


def code_summary(result: Mapping[str, Any]) -> tuple[str, str]:
    """(`completed` | `failed`, summary) of a `codeExecutionResult`."""
    outcome, output = result.get("outcome"), result.get("output")
    output = output if isinstance(output, str) else ""
    if outcome == CODE_OK:
        return "completed", _first_line(output) or "no output"
    if outcome == "OUTCOME_DEADLINE_EXCEEDED":
        return "failed", "deadline exceeded"
    line = _first_line(output, last=True)
    label = "failed" if outcome == "OUTCOME_FAILED" or not isinstance(outcome, str) else outcome
    return "failed", f"{label}: {line}" if line else label


class PartMapper:
    """Maps the parts of one response's candidate (whole, or text runs) to drafts."""

    def __init__(self, response_id: ResponseId, model: str, context: RequestContext) -> None:
        self.response_id = response_id
        self.model = model
        self.context = context
        self._binding = {"model": model} if model else {}
        self.visible_bytes = 0
        """UTF-8 bytes of visible text mapped so far: the next text's offset."""
        self.called = False
        """True once a ToolCallRequested was made."""
        self._calls: set[str] = set()
        self._call_count = 0
        self._code_count = 0
        self._open_code: deque[str] = deque()
        self._activities: set[str] = set()

    def __call__(self, assembled: AssembledBlock) -> list[Draft]:
        """The drafts of one closed run (raw None) or one whole part."""
        block = assembled.block
        if assembled.raw is None:
            return self._run(assembled)
        for key, handler in _PARTS.items():
            if key in block:
                try:
                    return handler(self, assembled)
                except _Malformed:
                    break
        return [self.unknown(assembled)]

    # --- payloads ---

    def payload(
        self,
        assembled: AssembledBlock,
        *,
        fmt: str = "part",
        version: str = "",
        bound: bool = False,
    ) -> ProviderPayload:
        """The part exactly as received; bound to the model when it carries a signature."""
        raw = assembled.raw
        value = bytes(raw) if raw is not None else msgspec.json.encode(assembled.block)
        signed = isinstance(assembled.block.get("thoughtSignature"), str)
        return ProviderPayload(
            provider=PROVIDER,
            format=fmt,
            version=version,
            binding=dict(self._binding) if bound or signed else {},
            value=msgspec.Raw(value),
        )

    def unknown(self, assembled: AssembledBlock, fmt: str = "part") -> UnknownArtifact:
        """A part kept as it came: replayed to Google, ignored by everyone else."""
        return UnknownArtifact(
            payload=self.payload(assembled, fmt=fmt), response_id=self.response_id
        )

    def unknown_value(self, value: bytes, fmt: str) -> UnknownArtifact:
        """Any other JSON the adapter does not model (a candidate, response fields)."""
        payload = ProviderPayload(provider=PROVIDER, format=fmt, value=msgspec.Raw(value))
        return UnknownArtifact(payload=payload, response_id=self.response_id)

    def metadata(self, value: bytes, fmt: str, version: str = "") -> ProviderPayload:
        """The payload of a metadata block (`grounding_metadata`, `url_context_metadata`)."""
        return ProviderPayload(
            provider=PROVIDER, format=fmt, version=version, value=msgspec.Raw(value)
        )

    # --- text ---

    def _held(self, text: str, complete: bool, payload: ProviderPayload | None) -> HeldText:
        held = HeldText(text=text, start=self.visible_bytes, complete=complete, payload=payload)
        self.visible_bytes += len(text) if text.isascii() else len(text.encode())
        return held

    def _run(self, assembled: AssembledBlock) -> list[Draft]:
        text = assembled.block["text"]
        if assembled.block.get("thought") is True:
            # Unsigned: a run never holds a signed part, so partial reasoning is unsigned too.
            return [Reasoning(response_id=self.response_id, text=text)]
        return [self._held(text, assembled.complete, None)]

    def _text(self, assembled: AssembledBlock) -> list[Draft]:
        """A text part that stands alone: signed, or with fields beyond text and thought."""
        block = assembled.block
        text, thought = block["text"], block.get("thought", False)
        if not isinstance(text, str) or not isinstance(thought, bool):
            raise _Malformed("text")
        signed = isinstance(block.get("thoughtSignature"), str)
        if thought or (signed and not text):
            payload = self.payload(assembled, bound=True)
            return [
                Reasoning(
                    response_id=self.response_id, text=text, redacted=not text, payload=payload
                )
            ]
        if not text:
            return [self.unknown(assembled)]
        return [self._held(text, True, self.payload(assembled))]

    # --- function calls ---

    def _function_call(self, assembled: AssembledBlock) -> list[Draft]:
        block = assembled.block
        call = _dict(block, "functionCall")
        name, arguments, given = call.get("name"), call.get("args", {}), call.get("id")
        if call.get("willContinue") is True or "partialArgs" in call or not assembled.complete:
            return [self.unknown(assembled, "partial")]  # never a ToolCallRequested for a piece
        if not isinstance(name, str) or not name or not isinstance(arguments, dict | None):
            raise _Malformed("functionCall")
        ordinal = self._call_count
        self._call_count += 1
        if isinstance(given, str) and given:
            call_id = given
        else:
            call_id = f"{self.response_id}:call:{ordinal}"
        if call_id in self._calls:
            raise _Malformed("a second call with one id")
        self._calls.add(call_id)
        self.called = True
        return [
            ToolCallRequested(
                response_id=self.response_id,
                call_id=CallId(call_id),
                name=name,
                arguments=arguments or {},
                payload=self.payload(assembled),
            )
        ]

    # --- code execution ---

    def _activity_id(self, given: Any) -> str:
        ordinal = self._code_count
        self._code_count += 1
        if isinstance(given, str) and given and given not in self._activities:
            return given
        return f"{self.response_id}:code_execution:{ordinal}"

    def _code(self, assembled: AssembledBlock) -> list[Draft]:
        code = _dict(assembled.block, "executableCode")
        language, source = code.get("language"), code.get("code")
        if not isinstance(source, str) or not isinstance(language, str | None):
            raise _Malformed("executableCode")
        activity_id = self._activity_id(code.get("id"))
        self._activities.add(activity_id)
        self._open_code.append(activity_id)
        normalized = {"language": language, "code": source} if language else {"code": source}
        return [
            HostedActivity(
                activity_id=ActivityId(activity_id),
                name="code_execution",
                state="started",
                response_id=self.response_id,
                input=normalized,
                payload=self.payload(assembled, version=self.context.version_of("code_execution")),
            )
        ]

    def _code_result(self, assembled: AssembledBlock) -> list[Draft]:
        result = _dict(assembled.block, "codeExecutionResult")
        given = result.get("id")
        if isinstance(given, str) and given in self._open_code:
            self._open_code.remove(given)
            activity_id = given
        elif self._open_code:
            activity_id = self._open_code.popleft()
        else:
            # Its code is in no part of this response: the terminal transition alone.
            activity_id = self._activity_id(given)
            self._activities.add(activity_id)
        state, summary = code_summary(result)
        return [
            HostedActivity(
                activity_id=ActivityId(activity_id),
                name="code_execution",
                state="failed" if state == "failed" else "completed",
                response_id=self.response_id,
                summary=summary,
                payload=self.payload(assembled, version=self.context.version_of("code_execution")),
            )
        ]

    def open_code(self) -> int:
        """Code runs started without a result (they stay `started`)."""
        return len(self._open_code)


_PARTS: Final[Mapping[str, Callable[[PartMapper, AssembledBlock], list[Draft]]]] = {
    "functionCall": PartMapper._function_call,
    "executableCode": PartMapper._code,
    "codeExecutionResult": PartMapper._code_result,
    "text": PartMapper._text,
}
"""Part field → its mapping, first match wins (a part holds one kind of data)."""
