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
non-streamed copy agree; a call with no `args` has no arguments). A call whose arguments
are streamed in pieces (`willContinue`, `partialArgs`: see `streamed_calls`) is assembled
into one whole part and becomes one ToolCallRequested when its last piece arrives (or a
part of another kind, or the response completes); a call still open at a cut, a piece that
cannot be applied, or an end marker (`functionCall: {}`) with no call open is an
UnknownArtifact of format `partial`, never a ToolCallRequested.

`executableCode` → a `code_execution` HostedActivity `started`
(`<responseId>:code_execution:<k>` unless the part has an `id`); its
`codeExecutionResult` parts (the one naming its `id`, else the next result while it is the
oldest open run; results right after a result belong to the same run) end it with one
terminal transition, made once a part of another kind arrives or the response ends: its
outcome is the last result's (`completed` on `OUTCOME_OK`, else `failed`), its payload the
result part (format `part`), or every result part in order as one JSON array (format
`parts`) — thought-time runs (`"thought": true`) included; at a cut, results whose run
may have had more are kept as a `partial` artifact and the run stays `started`.
`toolCall` / `toolResponse` (server-side tool invocations) are hosted activities too (see
`server_tools`). Any other part is an UnknownArtifact (format `part`).

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
from convstore.adapters.google.server_tools import ServerTools
from convstore.adapters.google.streamed_calls import MalformedPiece, StreamedCall
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
        self._results: dict[str, list[AssembledBlock]] = {}
        """Code runs whose results arrived, by activity id, until a part of another kind."""
        self._streamed: StreamedCall | None = None
        """The function call being streamed in pieces, if any."""
        self._server = ServerTools(response_id)

    def __call__(self, assembled: AssembledBlock) -> list[Draft]:
        """The drafts of one closed run (raw None) or one whole part."""
        block = assembled.block
        if assembled.raw is None:
            return (
                [*self._end_results(), *self._run(assembled)]
                if self._results
                else self._run(assembled)
            )
        out: list[Draft] = []
        if "functionCall" not in block:
            out.extend(self._end_call())
        if "codeExecutionResult" not in block:
            out.extend(self._end_results())
        for key, handler in _PARTS.items():
            if key in block:
                try:
                    out.extend(handler(self, assembled))
                    return out
                except _Malformed:
                    break
        out.append(self.unknown(assembled))
        return out

    def close(self, *, cut: bool) -> list[Draft]:
        """The drafts still held when the response ends: code results, a streamed call
        (whole, unless the response was `cut`: more results or pieces may have been on
        their way, so they are kept as `partial` artifacts and their run stays open)."""
        if not cut:
            return [*self._end_results(), *self._end_call()]
        version = self.context.version_of("code_execution")
        kept: list[Draft] = [
            UnknownArtifact(
                payload=self._results_payload(results, version, fmt="partial"),
                response_id=self.response_id,
            )
            for results in self._results.values()
        ]
        self._results.clear()
        return [*kept, *self._end_call(cut=True)]

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
        return ProviderPayload.parsed(  # the part was parsed from these bytes, or encoded
            PROVIDER,
            fmt,
            value,
            version=version,
            binding=dict(self._binding) if bound or signed else {},
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
        if not assembled.complete:
            return [self.unknown(assembled, "partial")]  # never a ToolCallRequested for a piece
        out: list[Draft] = []
        name = call.get("name")
        if self._streamed is not None and isinstance(name, str) and name:
            out.extend(self._end_call())  # a new call: the open one ended without its marker
        streamed = self._streamed
        if streamed is None:
            if call.get("willContinue") is not True and "partialArgs" not in call:
                if not call:
                    return [self.unknown(assembled, "partial")]  # an end marker, nothing open
                return self._whole_call(assembled)
            streamed = self._streamed = StreamedCall(block)
        try:
            streamed.add(call)
        except MalformedPiece:
            self._streamed = None
            broken = AssembledBlock(-1, streamed.part(), None, complete=False)
            return [*out, self.unknown(broken, "partial"), self.unknown(assembled, "partial")]
        if call.get("willContinue") is not True:
            out.extend(self._end_call())
        return out

    def _end_call(self, *, cut: bool = False) -> list[Draft]:
        """The streamed call, if one is open, as a whole call (a `partial` artifact when
        `cut` or nameless)."""
        streamed, self._streamed = self._streamed, None
        if streamed is None:
            return []
        assembled = AssembledBlock(-1, streamed.part(), None, complete=not cut)
        if not cut:
            try:
                return self._whole_call(assembled)
            except _Malformed:
                pass
        return [self.unknown(assembled, "partial")]

    def _whole_call(self, assembled: AssembledBlock) -> list[Draft]:
        call = _dict(assembled.block, "functionCall")
        name, arguments, given = call.get("name"), call.get("args", {}), call.get("id")
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
        named = given if isinstance(given, str) and given else None
        if named is not None and named in self._results:
            self._results[named].append(assembled)  # a further result of a run
            return []
        activity_id: str
        if named is not None and named in self._open_code:
            self._open_code.remove(named)
            activity_id = named
        elif self._open_code:
            activity_id = self._open_code.popleft()
        elif self._results and named is None:
            self._results[next(reversed(self._results))].append(assembled)
            return []
        else:
            # Its code is in no part of this response: the terminal transition alone.
            activity_id = self._activity_id(given)
            self._activities.add(activity_id)
        self._results[activity_id] = [assembled]
        return []

    def _end_results(self) -> list[Draft]:
        """One terminal transition per code run whose results arrived: the last result's
        outcome, every result part in its payload."""
        if not self._results:
            return []  # the common case, at every run and at the end of every response
        out: list[Draft] = []
        version = self.context.version_of("code_execution")
        for activity_id, results in self._results.items():
            state, summary = code_summary(results[-1].block["codeExecutionResult"])
            out.append(
                HostedActivity(
                    activity_id=ActivityId(activity_id),
                    name="code_execution",
                    state="failed" if state == "failed" else "completed",
                    response_id=self.response_id,
                    summary=summary,
                    payload=self._results_payload(results, version),
                )
            )
        self._results.clear()
        return out

    def _results_payload(
        self, results: list[AssembledBlock], version: str, fmt: str = ""
    ) -> ProviderPayload:
        if len(results) == 1:
            return self.payload(results[0], fmt=fmt or "part", version=version)
        parts = [
            bytes(r.raw) if r.raw is not None else msgspec.json.encode(r.block) for r in results
        ]
        signed = any(isinstance(r.block.get("thoughtSignature"), str) for r in results)
        return ProviderPayload(
            provider=PROVIDER,
            format=fmt or "parts",
            version=version,
            binding=dict(self._binding) if signed else {},
            value=msgspec.Raw(b"[" + b",".join(parts) + b"]"),
        )

    # --- server-side tool invocations ---

    def _tool_call(self, assembled: AssembledBlock) -> list[Draft]:
        call = _dict(assembled.block, "toolCall")
        return [self._server.call(call, self._activities, self.payload(assembled))]

    def _tool_response(self, assembled: AssembledBlock) -> list[Draft]:
        response = _dict(assembled.block, "toolResponse")
        return [self._server.response(response, self._activities, self.payload(assembled))]

    def open_code(self) -> int:
        """Code runs started without a result (they stay `started`)."""
        return len(self._open_code)


_PARTS: Final[Mapping[str, Callable[[PartMapper, AssembledBlock], list[Draft]]]] = {
    "functionCall": PartMapper._function_call,
    "executableCode": PartMapper._code,
    "codeExecutionResult": PartMapper._code_result,
    "toolCall": PartMapper._tool_call,
    "toolResponse": PartMapper._tool_response,
    "text": PartMapper._text,
}
"""Part field → its mapping, first match wins (a part holds one kind of data)."""
