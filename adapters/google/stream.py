"""The state of one Gemini response, chunk by chunk.

Every transport hands this decoder whole `GenerateContentResponse` JSON documents: the
`data` of each SSE event (`alt=sse`), each element of the JSON array that
`streamGenerateContent` answers without `alt=sse`, or the single body of
`generateContent`. The first chunk opens the response (ResponseStarted); candidate 0's
parts go through the shared assembler (text runs) and the part mapper; the response ends
when the input does.

Gemini has no final event: `finishReason` can arrive on a chunk that is not the last
(verified: `STOP` mid-stream, on the chunk that hands code to the executor), so nothing
ends early: every chunk is read. An SSE stream that ends at a chunk boundary right after a
chunk carrying a `finishReason` (or a prompt `blockReason`), with no code run waiting for
its result, completed; a JSON array completed once its closing bracket arrived. A stream
that ends otherwise, or becomes unreadable, is abandoned under the partial-commit rules;
an `{"error": …}` chunk fails it. (A cut that lands exactly after a mid-stream `STOP`
with nothing pending cannot be told from the end by any reader of the wire.)

Grounding arrives last, so visible text is held (as `HeldText`) until the input ends,
unless the request declared no grounding tool. Held text and everything after it keep
their order; on a cut, held text is stored with the attributions that arrived and
`attributions_complete = False`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

from convstore.adapters.google.context import PROVIDER, RequestContext
from convstore.adapters.google.grounding import (
    TextSlot,
    search_display,
    search_queries,
    search_summary,
    text_attributions,
    url_context_outcome,
)
from convstore.adapters.google.notices import CANDIDATE_FIELDS_FORMAT, RESPONSE_FIELDS_FORMAT
from convstore.adapters.google.parts import Draft, HeldText, PartMapper, is_mergeable
from convstore.adapters.google.response import (
    RESPONSE_FIELDS,
    RESPONSE_KEYS,
    decode_field,
    derived_id,
    error_info,
    failed_response,
    finish_reason_of,
    usage_of,
)
from convstore.adapters.wire.assembler import AssembledBlock, OpenBlock, StreamAssembler
from convstore.adapters.wire.counts import UNREAD_USAGE
from convstore.domain.errors import DecodeError
from convstore.domain.events import (
    AssistantText,
    Event,
    HostedActivity,
    ResponseEnded,
    ResponseStarted,
)
from convstore.domain.vocabulary import ActivityId, EndState, ErrorInfo, ResponseId

__all__ = ["CANDIDATE_FIELDS", "ChunkDecoder"]

CANDIDATE_FIELDS: Final = frozenset(
    {"content", "finishReason", "index", "groundingMetadata", "urlContextMetadata"}
)
"""Candidate fields the events model; any other non-null one (`safetyRatings`,
`citationMetadata`, `finishMessage`, `avgLogprobs`, …; the last value of each) is kept in
an UnknownArtifact of format `candidate_fields`."""

_NOTHING: Final[Sequence[Event]] = ()
_FIELDS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_RAW_LIST: Final = msgspec.json.Decoder(list[msgspec.Raw])
_OBJECT: Final = msgspec.json.Decoder(dict[str, Any])
_NULL: Final = msgspec.Raw(b"null")
_EMPTY: Final = b"{}"
_WHITESPACE: Final = b" \t\r\n"
_TEXT: Final = "text"


class _PlainPart(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    text: str
    thought: bool = False


class _PlainContent(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    parts: list[_PlainPart] = []
    role: str | None = None


class _PlainCandidate(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    content: _PlainContent | None = None
    finishReason: str | None = None  # noqa: N815 (the wire's name)
    index: int = 0
    groundingMetadata: msgspec.Raw = msgspec.Raw()  # noqa: N815
    urlContextMetadata: msgspec.Raw = msgspec.Raw()  # noqa: N815


class _PlainChunk(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """The common chunk: any field beyond these fails the decode (the general path)."""

    candidates: list[_PlainCandidate] = []
    usageMetadata: msgspec.Raw = msgspec.Raw()  # noqa: N815 (its counters read at the end)
    modelVersion: str | None = None  # noqa: N815
    responseId: str | None = None  # noqa: N815


_PLAIN: Final = msgspec.json.Decoder(_PlainChunk)


class _RawContent(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    parts: list[msgspec.Raw] = []
    role: str | None = None


class _RawCandidate(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    content: _RawContent | None = None
    finishReason: str | None = None  # noqa: N815 (the wire's name)
    index: int = 0
    groundingMetadata: msgspec.Raw = msgspec.Raw()  # noqa: N815
    urlContextMetadata: msgspec.Raw = msgspec.Raw()  # noqa: N815


class _RawPartsChunk(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """The common chunk with parts of any kind (each kept raw, for the part mapper)."""

    candidates: list[_RawCandidate] = []
    usageMetadata: msgspec.Raw = msgspec.Raw()  # noqa: N815 (its counters read at the end)
    modelVersion: str | None = None  # noqa: N815
    responseId: str | None = None  # noqa: N815


_RAW_PARTS: Final = msgspec.json.Decoder(_RawPartsChunk)


def _append_text(block: OpenBlock, piece: str) -> bool:
    block.append_text("text", piece)
    return True


_DELTAS: Final = {_TEXT: _append_text}


class ChunkDecoder:
    """Turns each chunk of one response into drafts; `done` once the response ended."""

    mapper: PartMapper
    """The response's part mapper, from the chunk that opens it on (`response_id` set)."""
    assembler: StreamAssembler[Draft]
    """The text runs under assembly, from the chunk that opens the response on."""

    def __init__(
        self, context: RequestContext, *, whole: bool = False, status: int | None = None
    ) -> None:
        self.context = context
        self.whole = whole
        """True for a non-streamed body: it is complete once read."""
        self.status = status
        """The HTTP status, recorded with an error."""
        self.response_id: ResponseId | None = None
        self.model = context.model
        self.done = False
        """True once the response ended: later input is not read."""
        self._run = -1
        """The open run's index in the assembler (-1: none), and its `thought` flag."""
        self._run_thought = False
        self._runs = 0
        self._held: list[Draft] | None = None
        """Drafts kept until the end (from the first visible text on), or None."""
        self._grounding: list[tuple[bytes, dict[str, Any]]] = []
        self._url_context: list[tuple[bytes, dict[str, Any]]] = []
        self._usage: msgspec.Raw | None = None
        """The newest chunk's `usageMetadata`, raw (its counters are read at the end)."""
        self._stop_reason: str | None = None
        self._finished = False
        """Whether the latest chunk with candidate 0 carried a finishReason (chunks
        without it, e.g. usage only, leave it as it was), or the prompt was blocked."""
        self._blocked: str | None = None
        self._extras: dict[str, msgspec.Raw] = {}
        self._candidate_extras: dict[str, msgspec.Raw] = {}

    # --- input ---

    def feed(self, raw: bytes, *, cut: bool = False) -> Sequence[Event]:
        """The drafts one chunk completes (`cut`: the input ended inside this chunk)."""
        if self.done:
            return _NOTHING
        raw = raw.strip(_WHITESPACE)
        fast = self._fast(raw)
        if fast is not None:
            return fast
        try:
            fields = _FIELDS.decode(raw)
        except (msgspec.DecodeError, RecursionError) as error:
            if cut:
                return self.end("incomplete_stream", "the stream was cut inside a chunk")
            return self.end("malformed_stream", f"a chunk is not a JSON object: {error}")
        if not fields.keys() & RESPONSE_KEYS:
            if "error" in fields:
                return self._error(raw, fields)
            if self.response_id is None:
                raise DecodeError(
                    "not a Gemini response: a JSON object without candidates, usageMetadata, "
                    "responseId or promptFeedback"
                )
            out: list[Event] = []
            self._emit(out, [self.mapper.unknown_value(raw, "chunk")])
            return out
        out = []
        if self.response_id is None:
            out.append(self._start(raw, fields))
        for name, value in fields.items():
            if name not in RESPONSE_FIELDS and value != _NULL:
                self._extras[name] = value
        usage = fields.get("usageMetadata")
        if usage is not None and usage != _NULL:
            self._usage = usage
        feedback = decode_field(fields.get("promptFeedback"))
        if isinstance(feedback, dict) and isinstance(feedback.get("blockReason"), str):
            self._blocked = feedback["blockReason"]
            self._finished = True
        candidates = fields.get("candidates")
        if candidates is not None and candidates != _NULL:
            try:
                listed = _RAW_LIST.decode(candidates)
            except msgspec.DecodeError:
                listed = [candidates]
            for candidate in listed:
                self._emit(out, self._candidate(candidate))
        return out

    def finish(self, *, complete: bool = False) -> Sequence[Event]:
        """The input ended at a chunk boundary: completed if `complete` (the body is
        whole) or the response says it finished, else abandoned."""
        if self.done:
            return _NOTHING
        if self.response_id is None:
            raise DecodeError("not a Gemini response: the input holds no response chunk")
        if complete or self.whole or (self._finished and not self.mapper.open_code()):
            return self._close("completed")
        message = (
            "the stream ended with code running (its result never came)"
            if self._finished
            else "the stream ended before a chunk with a finish reason"
        )
        return self._close("abandoned", ErrorInfo(type="incomplete_stream", message=message))

    def end(self, kind: str, message: str) -> Sequence[Event]:
        """The input stopped mid-chunk or became unreadable: abandon the response
        (DecodeError if it never started)."""
        if self.done:
            return _NOTHING
        if self.response_id is None:
            raise DecodeError(f"not a Gemini response: {message}")
        return self._close("abandoned", ErrorInfo(type=kind, message=message))

    # --- chunks ---

    def _fast(self, raw: bytes) -> Sequence[Event] | None:
        """The common chunk (candidate 0's parts, usage, grounding, no other field) in one
        typed decode, two when a part is not plain text; None for any other shape, which
        the general path reads. (The same reading as the general path's: the structs
        forbid unknown fields, so nothing is left for `_extras` to keep.)"""
        chunk: _PlainChunk | _RawPartsChunk
        try:
            chunk = _PLAIN.decode(raw)
        except (msgspec.DecodeError, RecursionError):
            try:
                chunk = _RAW_PARTS.decode(raw)
            except (msgspec.DecodeError, RecursionError):
                return None
        candidates = chunk.candidates
        if len(candidates) > 1 or (candidates and candidates[0].index != 0):
            return None
        if not candidates and not chunk.usageMetadata and chunk.responseId is None:
            return None  # maybe no response chunk at all: the general path tells
        out: list[Event] = []
        if self.response_id is None:  # the first chunk: it has no other field to keep
            out.append(self._begin(raw, chunk.responseId, chunk.modelVersion))
        if chunk.usageMetadata and chunk.usageMetadata != _NULL:
            self._usage = chunk.usageMetadata
        if not candidates:
            return out or _NOTHING
        candidate = candidates[0]
        drafts: list[Draft] = []
        content = candidate.content
        if isinstance(content, _PlainContent):
            for part in content.parts:
                self._piece(drafts, part.text, part.thought)
        elif content is not None:
            self._parts(drafts, content.parts)
        if candidate.groundingMetadata:
            self._keep(candidate.groundingMetadata, self._grounding)
        if candidate.urlContextMetadata:
            self._keep(candidate.urlContextMetadata, self._url_context)
        self._finished = candidate.finishReason is not None
        if candidate.finishReason is not None:
            self._stop_reason = candidate.finishReason
        if drafts:
            self._emit(out, drafts)
        return out or _NOTHING

    def _start(self, raw: bytes, fields: dict[str, msgspec.Raw]) -> ResponseStarted:
        given = decode_field(fields.get("responseId"))
        model = decode_field(fields.get("modelVersion"))
        return self._begin(raw, given, model)

    def _begin(self, raw: bytes, given: Any, model: Any) -> ResponseStarted:
        """Open the response from its first chunk (`given`: its `responseId`, `model`: its
        `modelVersion`, as decoded)."""
        response_id = ResponseId(given) if isinstance(given, str) and given else derived_id(raw)
        self.response_id = response_id
        if isinstance(model, str) and model:
            self.model = model
        self.mapper = PartMapper(response_id, self.model, self.context)
        self.assembler = StreamAssembler(_DELTAS, self.mapper)
        return ResponseStarted(
            response_id=response_id,
            provider=PROVIDER,
            model=self.model,
            settings=self.context.settings,
        )

    def _error(self, raw: bytes, fields: dict[str, msgspec.Raw]) -> Sequence[Event]:
        info = error_info(decode_field(fields.get("error")), self.status)
        if self.response_id is None:
            self.done = True
            return failed_response(derived_id(raw, "error"), self.context, info)
        return self._close("failed", info)

    def _candidate(self, raw: msgspec.Raw) -> list[Draft]:
        try:
            fields = _FIELDS.decode(raw)
        except msgspec.DecodeError:
            return [self.mapper.unknown_value(bytes(raw), "candidate")]
        index = decode_field(fields.get("index"))
        if index not in (0, None):
            return [self.mapper.unknown_value(bytes(raw), "candidate")]
        out: list[Draft] = []
        content = fields.get("content")
        if content is not None and content != _NULL:
            out.extend(self._content(content))
        for name, value in fields.items():
            if name not in CANDIDATE_FIELDS and value != _NULL:
                self._candidate_extras[name] = value
        self._keep(fields.get("groundingMetadata"), self._grounding)
        self._keep(fields.get("urlContextMetadata"), self._url_context)
        reason = decode_field(fields.get("finishReason"))
        self._finished = isinstance(reason, str)
        if isinstance(reason, str):
            self._stop_reason = reason
        return out

    @staticmethod
    def _keep(raw: msgspec.Raw | None, kept: list[tuple[bytes, dict[str, Any]]]) -> None:
        """Remember a non-empty metadata block once (streams repeat `{}` on every chunk)."""
        if raw is None:
            return
        value = bytes(raw)
        if value != _EMPTY and all(v != value for v, _ in kept):
            decoded = decode_field(value)
            if isinstance(decoded, dict) and decoded:
                kept.append((value, decoded))

    def _content(self, content: msgspec.Raw) -> list[Draft]:
        try:
            parts = _RAW_LIST.decode(_FIELDS.decode(content).get("parts") or b"[]")
        except msgspec.DecodeError:
            return [self.mapper.unknown_value(bytes(content), "content")]
        out: list[Draft] = []
        self._parts(out, parts)
        return out

    def _parts(self, out: list[Draft], parts: list[msgspec.Raw]) -> None:
        """Add the drafts of a candidate's parts to `out`: plain text to the runs, any
        other part mapped whole, exactly as it came."""
        for raw in parts:
            value = bytes(raw)
            try:
                part = _OBJECT.decode(value)
            except (msgspec.DecodeError, RecursionError):
                out.extend(self._close_run())
                out.append(self.mapper.unknown_value(value, "part"))
                continue
            if is_mergeable(part):
                self._piece(out, part["text"], part.get("thought", False))
                continue
            out.extend(self._close_run())
            out.extend(self.mapper(AssembledBlock(-1, part, value)))

    def _piece(self, out: list[Draft], text: str, thought: bool) -> None:
        """Add a plain text part to the open run (closing one of the other kind)."""
        if not text:
            return  # an empty plain part says nothing (streams end with one)
        if self._run >= 0 and thought != self._run_thought:
            out.extend(self._close_run())
        if self._run < 0:
            self._run, self._run_thought = self._runs, thought
            self._runs += 1
            self.assembler.start(self._run, {"text": "", "thought": thought})
        self.assembler.delta(self._run, _TEXT, text)

    def _close_run(self) -> list[Draft]:
        if self._run < 0:
            return []
        run, self._run = self._run, -1
        return self.assembler.stop(run)

    # --- output ---

    def _emit(self, out: list[Event], drafts: list[Draft]) -> None:
        """Pass drafts on, or hold them (from the first visible text on) until the end."""
        held = self._held
        for draft in drafts:
            if held is not None:
                held.append(draft)
            elif isinstance(draft, HeldText):
                if self.context.grounding is False:
                    out.append(self._text(draft, [], complete=draft.complete))
                else:
                    held = self._held = [draft]
            else:
                out.append(draft)

    def _text(self, held: HeldText, attributions: list[Any], *, complete: bool) -> AssistantText:
        assert self.response_id is not None
        return AssistantText(
            response_id=self.response_id,
            text=held.text,
            attributions=tuple(attributions),
            attributions_complete=complete,
            payload=held.payload,
        )

    def _close(self, state: EndState, error: ErrorInfo | None = None) -> list[Event]:
        assert self.response_id is not None
        self.done = True
        out: list[Event] = []
        cut = state != "completed"
        self._emit(out, self.assembler.finish(cut=cut))
        self._emit(out, self.mapper.close(cut=cut))
        out.extend(self._activities())
        held = self._held or []
        cited: dict[int, list[Any]] = {}
        if held and self._grounding:
            texts = [d for d in held if isinstance(d, HeldText)]
            slots = [TextSlot(t.text, t.start) for t in texts]
            blocks = [block for _, block in self._grounding]
            cited = dict(zip(map(id, texts), text_attributions(slots, blocks), strict=True))
        for draft in held:
            if isinstance(draft, HeldText):
                complete = draft.complete and not cut
                out.append(self._text(draft, cited.get(id(draft), []), complete=complete))
            else:
                out.append(draft)
        mapper = self.mapper
        if self._extras:
            extras = msgspec.json.encode(self._extras)
            out.append(mapper.unknown_value(extras, RESPONSE_FIELDS_FORMAT))
        if self._candidate_extras:
            extras = msgspec.json.encode(self._candidate_extras)
            out.append(mapper.unknown_value(extras, CANDIDATE_FIELDS_FORMAT))
        usage, unread = usage_of(self._usage)
        if unread is not None:
            out.append(mapper.unknown_value(unread, UNREAD_USAGE))
        stop_reason = self._blocked or self._stop_reason
        out.append(
            ResponseEnded(
                response_id=self.response_id,
                state=state,
                finish_reason=finish_reason_of(
                    state, stop_reason, called=mapper.called, blocked=self._blocked is not None
                ),
                stop_reason=stop_reason,
                usage=usage,
                error=error,
            )
        )
        return out

    def _activities(self) -> list[Event]:
        """One hosted activity per grounding block, begun `completed`; a grounding block
        that is no web search is kept as an UnknownArtifact (`grounding_metadata`)."""
        assert self.response_id is not None
        out: list[Event] = []
        mapper = self.mapper
        searches = 0
        for value, block in self._grounding:
            queries = search_queries(block)
            if queries is None:
                out.append(mapper.unknown_value(value, "grounding_metadata"))
                continue
            out.append(
                HostedActivity(
                    activity_id=ActivityId(f"{self.response_id}:web_search:{searches}"),
                    name="web_search",
                    state="completed",
                    response_id=self.response_id,
                    input={"queries": queries},
                    summary=search_summary(block),
                    display=search_display(block),
                    payload=mapper.metadata(
                        value, "grounding_metadata", self.context.version_of("web_search")
                    ),
                )
            )
            searches += 1
        for n, (value, block) in enumerate(self._url_context):
            state, urls, summary = url_context_outcome(block)
            out.append(
                HostedActivity(
                    activity_id=ActivityId(f"{self.response_id}:url_context:{n}"),
                    name="url_context",
                    state="failed" if state == "failed" else "completed",
                    response_id=self.response_id,
                    input={"urls": urls},
                    summary=summary,
                    payload=mapper.metadata(
                        value, "url_context_metadata", self.context.version_of("url_context")
                    ),
                )
            )
        return out
