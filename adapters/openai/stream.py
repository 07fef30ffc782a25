"""The state of one Responses API SSE stream, event by event.

`response.created` (or the first event that carries the response object) opens the
response. Output items are the shared assembler's blocks, keyed by `output_index`:
`response.output_item.added` starts one, the delta events of `wire.DELTAS` assemble it,
and `response.output_item.done` closes it. That event carries the item whole, so the item
is mapped exactly as it came (its bytes kept) instead of the assembly, which only serves a
stream cut before the item closed. `response.completed` and `response.incomplete`
complete the response, `response.failed` or an `error` event fail it, and `end()`
abandons it when the stream stops early or becomes unreadable. At a final event, an item
still open is closed with its copy in the final response's `output` when there is one,
and items the stream never announced are mapped from there too; what is left open is
handed to the mapper as cut, which applies the partial-commit rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec

from convstore.adapters.openai.context import RequestContext
from convstore.adapters.openai.response import (
    ResponseHead,
    decode_field,
    derived_id,
    error_info,
    failed_response,
    map_whole,
    output_items,
)
from convstore.adapters.openai.wire import (
    DELTAS,
    EVENT,
    PIECES,
    STATUS_EVENTS,
    StreamEvent,
    aimed,
)
from convstore.adapters.wire.assembler import AssembledBlock, StreamAssembler
from convstore.domain.errors import DecodeError
from convstore.domain.events import Event
from convstore.domain.vocabulary import EndState, ErrorInfo

__all__ = ["MAX_EARLY_EVENTS", "TERMINAL_STATUS", "StreamDecoder"]

_NOTHING: Final[Sequence[Event]] = ()
_OBJECT: Final = msgspec.json.Decoder(dict[str, Any])
_FIELDS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_VALID: Final = msgspec.json.Decoder(msgspec.Raw)

TERMINAL_STATUS: Final[Mapping[str, str]] = {
    "response.completed": "completed",
    "response.incomplete": "incomplete",
    "response.failed": "failed",
}
"""Final event type → the status its response object has (used when it names none)."""

MAX_EARLY_EVENTS: Final = 64
"""Unknown events kept before the response opens; past that, the input is no stream."""

_OPENING: Final = frozenset({"response.created", "response.in_progress", "response.queued"})
_IGNORED: Final = frozenset({"keepalive"})
"""Events that carry nothing to keep."""


def _utf8(data: bytes | str) -> bytes:
    """An event's data as bytes. Stripped, the same bytes either way: data that decodes is
    JSON, so whatever surrounds it is JSON whitespace, which both strips remove."""
    return data if isinstance(data, bytes) else data.encode()


class StreamDecoder:
    """Turns the `data` of each SSE event into drafts; `done` once the response ended."""

    def __init__(self, context: RequestContext) -> None:
        self.context = context
        self.head: ResponseHead | None = None
        self.assembler: StreamAssembler[Event] = StreamAssembler(DELTAS, self._map)
        self.done = False
        """True once the response ended: later input is not read."""
        self._early: list[bytes] = []
        """Unknown events before the response opened, kept until it does."""
        self._open: set[int] = set()
        """Output indexes of the items under assembly."""
        self._final: dict[int, tuple[dict[str, Any], bytes]] = {}
        """Items that came whole (`output_item.done`, a final `output`), waiting to close
        their block in place of its assembly."""
        self._mapped: set[int] = set()
        """Output indexes already mapped."""
        self._copy: msgspec.Raw | None = None
        """The response object taken in last, raw: the same copy again changes nothing."""

    def _map(self, assembled: AssembledBlock) -> list[Event]:
        assert self.head is not None  # items open only once the response is open
        index = assembled.index
        self._open.discard(index)
        self._mapped.add(index)
        final = self._final.pop(index, None)
        if final is not None:
            assembled = AssembledBlock(index, final[0], final[1], True)
        return self.head.mapper(assembled)

    def feed(self, data: bytes | str) -> Sequence[Event]:
        """The drafts one event's data completes."""
        if self.done:
            return _NOTHING
        try:
            event = EVENT.decode(data)
        except msgspec.ValidationError:
            # An unexpected shape, if the data is JSON at all (validation can stop before
            # a syntax error further on).
            try:
                _VALID.decode(data)
            except (msgspec.DecodeError, RecursionError) as error:
                return self._malformed(data, error)
            return self._unknown(data)
        except (msgspec.DecodeError, RecursionError) as error:
            return self._malformed(data, error)
        return self._event(event, data)

    def feed_all(self, datas: Iterable[bytes]) -> list[Event]:
        """The drafts the data of these events complete, in order, as `feed` of each
        would give them; the events after the response ended (`done`) are not read.

        The hot path: a piece of text (`wire.PIECES`) is appended straight to its field's
        piece list in the item under assembly, which stays at hand while the pieces go to
        the same item, part and field. Anything else goes through `feed`'s handlers.
        """
        out: list[Event] = []
        decode = EVENT.decode
        # The piece list the last piece went to, and the event fields that chose it.
        pieces: list[str] = []
        kind: str | None = None
        at: int | None = None
        part: int | None = None
        summary: int | None = None
        item: str | None = None
        for data in datas:
            if self.done:
                break
            try:
                event = decode(data)
            except (msgspec.DecodeError, RecursionError):
                drafts = self.feed(data)
            else:
                piece = event.delta
                if (
                    type(piece) is str
                    and event.type == kind
                    and event.output_index == at
                    and event.content_index == part
                    and event.summary_index == summary
                    and event.item_id == item
                ):
                    if piece:
                        pieces.append(piece)
                    continue
                found = self._piece(event) if event.type in PIECES else None
                if found is not None:
                    pieces, kind, at = found, event.type, event.output_index
                    part, summary, item = event.content_index, event.summary_index, event.item_id
                    continue
                drafts = self._event(event, data)
            # Any other event may open or close items: the piece list is looked up again.
            kind = None
            if drafts:
                out.extend(drafts)
        return out

    def _piece(self, event: StreamEvent) -> list[str] | None:
        """Append a piece of text (a `wire.PIECES` event) the way its `DELTAS` applier
        would; return the piece list it went to, or None when it is not applied here (no
        item open there, not a string, another item's, an empty piece): `_event` reads it.
        """
        index, piece = event.output_index, event.delta
        if self.head is None or index is None or type(piece) is not str or not piece:
            return None
        block = self.assembler.block(index)
        if block is None or not aimed(block, event):
            return None
        name = PIECES[event.type](event)
        if name is None:
            return None
        pieces = block.text_pieces(name)
        pieces.append(piece)
        return pieces

    def _event(self, event: StreamEvent, data: bytes | str) -> Sequence[Event]:
        """The drafts of one decoded event."""
        kind = event.type
        head = self.head
        if head is not None:
            index = event.output_index
            if kind in DELTAS and index is not None:  # the hot path
                if self.assembler.delta(index, kind, event):
                    return _NOTHING
                return self._stray(event, data)
            handler = _HANDLERS.get(kind)
            if handler is not None:
                return handler(self, event, data)
            if kind in _IGNORED:
                return _NOTHING
            return self._unknown(data)
        return self._before_start(event, data)

    def end(self, kind: str, message: str) -> Sequence[Event]:
        """The stream stopped without a final event: abandon the response (DecodeError if
        it never started)."""
        if self.done:
            return _NOTHING
        if self.head is None:
            raise DecodeError(f"not an OpenAI response: {message} before response.created")
        return self._close("abandoned", None, ErrorInfo(type=kind, message=message))

    # --- outside the items ---

    def _malformed(self, data: bytes | str, error: Exception) -> Sequence[Event]:
        text = data if isinstance(data, str) else str(data, "utf-8", "replace")
        if text.strip() == "[DONE]":
            return self.end("incomplete_stream", "the stream ended ([DONE]) before its final event")
        return self.end("malformed_stream", f"malformed JSON in an event's data: {error}")

    def _unknown(self, data: bytes | str) -> Sequence[Event]:
        if self.head is None:
            if len(self._early) >= MAX_EARLY_EVENTS:
                raise DecodeError(
                    f"not an OpenAI stream: no response.created in its first {MAX_EARLY_EVENTS} "
                    "events"
                )
            self._early.append(_utf8(data).strip())
            return _NOTHING
        return [self.head.mapper.unknown_value(_utf8(data).strip(), "stream_event")]

    def _before_start(self, event: StreamEvent, data: bytes | str) -> Sequence[Event]:
        kind = event.type
        if kind in _OPENING or kind in TERMINAL_STATUS:
            out = self._open_response(event)
            if kind in TERMINAL_STATUS:
                out.extend(self._terminal(event, data))
            return out
        if kind == "error":
            self.done = True
            return failed_response(
                derived_id(_utf8(data).strip()), self.context, self._error_info(event)
            )
        if kind in DELTAS or kind in _HANDLERS:
            raise DecodeError(f"not an OpenAI stream: {kind} before response.created")
        if kind in _IGNORED:
            return _NOTHING
        return self._unknown(data)

    def _open_response(self, event: StreamEvent) -> list[Event]:
        try:
            fields = _FIELDS.decode(event.response) if event.response else None
        except msgspec.DecodeError:
            fields = None
        response_id = decode_field(fields.get("id")) if fields is not None else None
        if fields is None or not isinstance(response_id, str) or not response_id:
            raise DecodeError(f"not an OpenAI stream: {event.type} without a response id")
        head = self.head = ResponseHead(response_id, fields, self.context)
        self._copy = event.response
        out: list[Event] = [head.started()]
        out.extend(head.mapper.unknown_value(early, "stream_event") for early in self._early)
        self._early = []
        return out

    def _response_update(self, event: StreamEvent, data: bytes | str) -> Sequence[Event]:
        assert self.head is not None
        raw = event.response
        if raw and raw == self._copy:
            # `response.in_progress` repeats `response.created`'s copy: taking in the same
            # fields again would change nothing.
            return _NOTHING
        fields = self._fields(event)
        if fields is None:
            return self._unknown(data)
        self.head.update(fields)
        self._copy = raw
        return _NOTHING

    def _fields(self, event: StreamEvent) -> dict[str, msgspec.Raw] | None:
        try:
            return _FIELDS.decode(event.response) if event.response else None
        except msgspec.DecodeError:
            return None

    # --- items ---

    def _item_added(self, event: StreamEvent, data: bytes | str) -> Sequence[Event]:
        index, raw = event.output_index, bytes(event.item)
        item = self._item(raw)
        if index is None or item is None or index in self._mapped:
            return self._unknown(data)
        out = self.assembler.start(index, item, raw)
        self._open.add(index)
        return out

    def _item_done(self, event: StreamEvent, data: bytes | str) -> Sequence[Event]:
        assert self.head is not None
        index, raw = event.output_index, bytes(event.item)
        item = self._item(raw)
        if index is None or item is None or index in self._mapped:
            return self._unknown(data)
        if index not in self._open:  # never announced: mapped as it came
            self._mapped.add(index)
            return self.head.mapper(AssembledBlock(index, item, raw))
        return self._replace(index, item, raw)

    def _replace(self, index: int, item: dict[str, Any], raw: bytes) -> list[Event]:
        """Close the item under assembly at `index` with its whole copy: mapped as it
        came, its assembly dropped unread (never joined)."""
        assert self.head is not None
        self.assembler.drop(index)
        self._open.discard(index)
        self._mapped.add(index)
        return self.head.mapper(AssembledBlock(index, item, raw, True))

    def _item(self, raw: bytes) -> dict[str, Any] | None:
        if not raw:
            return None
        try:
            return _OBJECT.decode(raw)
        except msgspec.DecodeError:
            return None

    def _stray(self, event: StreamEvent, data: bytes | str) -> Sequence[Event]:
        """A delta no open item took: a progress event may announce its item (when
        `output_item.added` never came); anything else is kept as it came."""
        opens = STATUS_EVENTS.get(event.type)
        index = event.output_index
        if (
            opens is not None
            and index is not None
            and event.item_id
            and index not in self._open
            and index not in self._mapped
        ):
            item = {"id": event.item_id, "type": opens[0], "status": opens[1]}
            out = self.assembler.start(index, item)
            self._open.add(index)
            return out
        return self._unknown(data)

    # --- the end ---

    def _terminal(self, event: StreamEvent, data: bytes | str) -> Sequence[Event]:
        assert self.head is not None
        head = self.head
        fields = self._fields(event)
        if fields is not None:
            head.update(fields)
            if not isinstance(decode_field(fields.get("status")), str):
                head.status = TERMINAL_STATUS[event.type]
            try:
                items = output_items(fields.get("output"))
            except msgspec.DecodeError:
                items = []
            for index, raw in enumerate(items):
                if index in self._mapped:
                    continue  # mapped already: its copy here is not read
                value = bytes(raw)
                item = self._item(value)
                if item is not None:
                    self._final[index] = (item, value)
        else:
            head.status = TERMINAL_STATUS[event.type]
        state, stop_reason, error = head.outcome()
        return self._close(state, stop_reason, error)

    def _error(self, event: StreamEvent, data: bytes | str) -> Sequence[Event]:
        return self._close("failed", None, self._error_info(event))

    def _error_info(self, event: StreamEvent) -> ErrorInfo:
        if isinstance(event.error, dict):
            return error_info(event.error)
        return error_info({"code": event.code, "message": event.message})

    def _close(
        self, state: EndState, stop_reason: str | None, error: ErrorInfo | None
    ) -> list[Event]:
        assert self.head is not None
        self.done = True
        out: list[Event] = []
        # Items that came whole with the final event, in order: closing an open one
        # maps the whole copy; one never announced is mapped as it came.
        for index in sorted(self._final):
            if index in self._open:
                out.extend(self._replace(index, *self._final.pop(index)))
            else:
                _, raw = self._final.pop(index)
                self._mapped.add(index)
                out.extend(map_whole(self.head.mapper, index, raw))
        out.extend(self.assembler.finish(cut=True))
        out.extend(self.head.ended(state, stop_reason, error))
        return out


_HANDLERS: Final[
    Mapping[str, Callable[[StreamDecoder, StreamEvent, bytes | str], Sequence[Event]]]
] = {
    "response.created": StreamDecoder._response_update,
    "response.in_progress": StreamDecoder._response_update,
    "response.queued": StreamDecoder._response_update,
    "response.output_item.added": StreamDecoder._item_added,
    "response.output_item.done": StreamDecoder._item_done,
    "response.completed": StreamDecoder._terminal,
    "response.incomplete": StreamDecoder._terminal,
    "response.failed": StreamDecoder._terminal,
    "error": StreamDecoder._error,
}
"""Stream event type (outside `wire.DELTAS`) → its handler once the response is open."""
