"""The state of one Messages API SSE stream, event by event.

`message_start` opens the response; block events go through the shared assembler;
`message_stop` completes it, an `error` event fails it, and `end()` abandons it when the
stream stops early or becomes unreadable. Blocks still open at the end are handed to the
mapper as cut, which applies the partial-commit rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec

from convstore.adapters.anthropic.context import RequestContext
from convstore.adapters.anthropic.response import (
    ResponseHead,
    decode_field,
    derived_id,
    error_info,
    failed_response,
    whole_blocks,
)
from convstore.adapters.anthropic.wire import (
    DELTAS,
    EVENT,
    HOT_EVENT,
    PIECE_FIELDS,
    BlockDelta,
    BlockStart,
    BlockStop,
    CitationsDelta,
    Error,
    HotEvent,
    MessageDelta,
    MessageStart,
    MessageStop,
    Ping,
    PlainMessageDelta,
    StreamEvent,
    TypedBlockDelta,
)
from convstore.adapters.wire.assembler import AssembledBlock, OpenBlock, StreamAssembler
from convstore.adapters.wire.counts import fields_of
from convstore.domain.errors import DecodeError
from convstore.domain.events import Event
from convstore.domain.vocabulary import EndState, ErrorInfo

__all__ = ["StreamDecoder"]

MAX_EARLY_EVENTS: Final = 64
"""Unknown events kept before `message_start`; a stream with more is not a response."""

_NOTHING: Final[Sequence[Event]] = ()
_OBJECT: Final = msgspec.json.Decoder(dict[str, Any])
_VALID: Final = msgspec.json.Decoder(msgspec.Raw)
_DELTA_FIELDS: Final = frozenset({"stop_reason"})
_DELTA_EVENT_FIELDS: Final = frozenset({"type", "delta", "usage"})
_FIELDS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_NO_CONTENT: Final = msgspec.Raw(b"[]")
_EMPTY_TEXT: Final = msgspec.Raw(b'{"type":"text","text":""}')


def _utf8(data: bytes | str) -> bytes:
    """An event's data as bytes. Stripped, the same bytes either way: data that decodes is
    JSON, so whatever surrounds it is JSON whitespace, which both strips remove."""
    return data if isinstance(data, bytes) else data.encode()


def _cite(block: OpenBlock, delta: CitationsDelta) -> bool:
    """`wire.DELTAS`' citation applier, for the typed delta."""
    citation = delta.citation
    if not citation or bytes(citation)[:1] != b"{":
        return False
    block.append_item("citations", citation)
    return True


def _no_blocks(assembled: AssembledBlock) -> list[Event]:
    raise AssertionError("a block closed before message_start")  # pragma: no cover


class StreamDecoder:
    """Turns the `data` of each SSE event into drafts; `done` once the response ended."""

    __slots__ = ("_early", "assembler", "context", "done", "head", "stop_reason")

    def __init__(self, context: RequestContext) -> None:
        self.context = context
        self.head: ResponseHead | None = None
        # Replaced at message_start: no block can open before it.
        self.assembler: StreamAssembler[Event] = StreamAssembler(DELTAS, _no_blocks)
        self.stop_reason: str | None = None
        self.done = False
        """True once the response ended: later input is not read."""
        self._early: list[bytes] = []
        """Unknown events before message_start, kept until the response opens."""

    def feed(self, data: bytes | str) -> Sequence[Event]:
        """The drafts one event's data completes."""
        try:
            event = EVENT.decode(data)
        except msgspec.ValidationError:
            # An unknown type or shape, if the data is JSON at all (validation can stop
            # before a syntax error further on).
            try:
                _VALID.decode(data)
            except (msgspec.DecodeError, RecursionError) as error:
                return self.end("malformed_stream", f"malformed JSON in an event's data: {error}")
            return self._unknown(data)
        except (msgspec.DecodeError, RecursionError) as error:
            return self.end("malformed_stream", f"malformed JSON in an event's data: {error}")
        if isinstance(event, BlockDelta) and self.head is not None:
            delta = event.delta
            if self.assembler.delta(event.index, delta.type, delta):
                return _NOTHING
            return self._unknown(data)
        return self._event(event, data)

    def _event(self, event: StreamEvent, data: bytes | str) -> Sequence[Event]:
        """The drafts of a decoded event other than a block delta of an open response."""
        if self.head is None:
            return self._before_start(event, data)
        return _HANDLERS[type(event)](self, event, data)

    def feed_all(self, datas: Iterable[bytes]) -> list[Event]:
        """The drafts the data of these events complete, in order, as `feed` of each
        would give them; the events after the response ended (`done`) are not read.

        The hot path: a known delta, decoded as its own struct (`wire.HOT_EVENT`), has its
        piece appended straight to the open block's piece list, which stays at hand while
        deltas go to the same block and field. Anything else goes through `feed`'s
        handlers (an event `HOT_EVENT` rejects, through `feed` itself).
        """
        out: list[Event] = []
        decode = HOT_EVENT.decode
        # The piece list the last delta went to, and the (index, delta type) it serves
        # (None: none; never a number, which a wire index could be, -1 included).
        pieces: list[str] = []
        at: int | None = None
        kind: type | None = None
        for data in datas:
            try:
                event: HotEvent | None = decode(data)
            except (msgspec.DecodeError, RecursionError):
                event = None
            if type(event) is TypedBlockDelta:
                delta = event.delta
                if type(delta) is kind and event.index == at:
                    piece = delta.piece  # type: ignore[union-attr]
                    if piece:
                        pieces.append(piece)
                    continue
                found, drafts = self._delta(event, data)
                if found is not None:
                    pieces, at, kind = found, event.index, type(delta)
                    continue
                if not drafts:
                    continue
            elif event is None:
                drafts = self.feed(data)
            elif self.head is None:
                # (`feed` names an early message_delta as `EVENT` decodes it.)
                plain = type(event) is PlainMessageDelta
                drafts = self.feed(data) if plain else self._before_start(event, data)
            elif type(event) is BlockStop:
                drafts = self._block_stop(event, data)
            elif type(event) is BlockStart:
                drafts = self._block_start(event, data)
            elif type(event) is Ping:
                continue
            elif type(event) is PlainMessageDelta:
                drafts = self._plain_message_delta(event)
            else:
                drafts = _HANDLERS[type(event)](self, event, data)
            # Any other event may open or close blocks: the piece list is looked up again.
            at = None
            if drafts:
                out.extend(drafts)
            if self.done:
                break
        return out

    def _delta(
        self, event: TypedBlockDelta, data: bytes
    ) -> tuple[list[str] | None, Sequence[Event]]:
        """Apply a typed delta the hot path has no piece list at hand for: (the piece list
        it went to, to keep at hand, or None; the drafts it makes)."""
        if self.head is None:
            return None, self.feed(data)  # what feed makes of a delta this early
        block = self.assembler.block(event.index)
        delta = event.delta
        if block is None:  # no block open there
            return None, self._unknown(data)
        if isinstance(delta, CitationsDelta):
            return None, _NOTHING if _cite(block, delta) else self._unknown(data)
        piece = delta.piece
        if not piece:
            return None, _NOTHING
        name, fragments = PIECE_FIELDS[type(delta)]
        pieces = block.json_pieces(name) if fragments else block.text_pieces(name)
        pieces.append(piece)
        return pieces, _NOTHING

    def end(self, kind: str, message: str) -> Sequence[Event]:
        """The stream stopped without a final event: abandon the response (DecodeError if
        it never started)."""
        if self.done:
            return _NOTHING
        if self.head is None:
            raise DecodeError(f"not an Anthropic response: {message} before message_start")
        return self._close("abandoned", ErrorInfo(type=kind, message=message))

    # --- handlers ---

    def _before_start(self, event: StreamEvent | HotEvent, data: bytes | str) -> Sequence[Event]:
        if isinstance(event, MessageStart):
            return self._message_start(event, data)
        if isinstance(event, Ping):
            return _NOTHING
        if isinstance(event, Error):
            self.done = True
            info = error_info(event.error)
            return failed_response(derived_id(_utf8(data)), self.context, info)
        raise DecodeError(f"not an Anthropic stream: {type(event).__name__} before message_start")

    def _unknown(self, data: bytes | str) -> Sequence[Event]:
        if self.head is None:
            if len(self._early) >= MAX_EARLY_EVENTS:
                raise DecodeError(
                    f"not an Anthropic stream: no message_start in its first {MAX_EARLY_EVENTS} "
                    "events"
                )
            self._early.append(_utf8(data).strip())
            return _NOTHING
        return [self.head.mapper.unknown_value(_utf8(data).strip(), "stream_event")]

    def _message_start(self, event: MessageStart, data: bytes | str) -> Sequence[Event]:
        if self.head is not None:
            return self._unknown(data)
        fields = event.message
        message_id = decode_field(fields.get("id"))
        if not isinstance(message_id, str) or not message_id:
            raise DecodeError("not an Anthropic stream: message_start without a message id")
        head = self.head = ResponseHead(message_id, fields, self.context)
        self.assembler = StreamAssembler(DELTAS, head.mapper)
        out: list[Event] = [head.started()]
        if self._early:
            out.extend(head.mapper.unknown_value(early, "stream_event") for early in self._early)
            self._early = []
        content = fields.get("content")
        if content is not None and content != _NO_CONTENT:
            try:
                # Empty today; blocks that came whole with the message map as they are.
                out.extend(whole_blocks(head.mapper, content))
            except msgspec.ValidationError:
                out.append(head.mapper.unknown_value(_utf8(data).strip(), "stream_event"))
        return out

    def _block_start(self, event: BlockStart, data: bytes | str) -> Sequence[Event]:
        raw = event.content_block
        if raw == _EMPTY_TEXT:  # the common start, as its decode would give it
            return self.assembler.start(event.index, {"type": "text", "text": ""}, raw)
        try:
            block = _OBJECT.decode(raw)
        except msgspec.ValidationError:
            return self._unknown(data)
        return self.assembler.start(event.index, block, raw)

    def _block_delta(self, event: BlockDelta, data: bytes | str) -> Sequence[Event]:
        delta = event.delta
        if self.assembler.delta(event.index, delta.type, delta):
            return _NOTHING
        return self._unknown(data)

    def _block_stop(self, event: BlockStop, data: bytes | str) -> Sequence[Event]:
        assembler = self.assembler
        block = assembler.block(event.index)
        if block is not None and block.raw == _EMPTY_TEXT:
            # Plain text (no citations): the mapper's AssistantText, without assembling.
            pieces = block.only_text("text")
            if pieces is not None and self.head is not None:
                assembler.drop(event.index)
                text = "".join(pieces)
                pieces.clear()
                return self.head.mapper.plain_text(text)
        return assembler.stop(event.index)

    def _message_delta(self, event: MessageDelta, data: bytes | str) -> Sequence[Event]:
        assert self.head is not None
        delta = fields_of(event.delta)
        if delta is None:  # absent, null, or not an object: kept whole (unless null)
            delta = {"delta": event.delta} if event.delta else {}
        stop_reason = decode_field(delta.get("stop_reason"))
        if isinstance(stop_reason, str):
            self.stop_reason = stop_reason
        self.head.keep(delta, _DELTA_FIELDS)
        # Fields beside `delta` (`context_management`): kept as the message's own (the
        # data decoded as an event already, so it decodes as an object).
        self.head.keep(_FIELDS.decode(data), _DELTA_EVENT_FIELDS)
        self.head.take_usage(event.usage)
        return _NOTHING

    def _plain_message_delta(self, event: PlainMessageDelta) -> Sequence[Event]:
        """`_message_delta` of the common shape: no field of the delta or the event is
        left to keep, so neither is decoded again."""
        assert self.head is not None
        stop_reason = event.delta.stop_reason
        if stop_reason is not None:
            self.stop_reason = stop_reason
        self.head.take_usage(event.usage)
        return _NOTHING

    def _message_stop(self, event: MessageStop, data: bytes | str) -> Sequence[Event]:
        return self._close("completed")

    def _error(self, event: Error, data: bytes | str) -> Sequence[Event]:
        return self._close("failed", error_info(event.error))

    def _ping(self, event: Ping, data: bytes | str) -> Sequence[Event]:
        return _NOTHING

    def _close(self, state: EndState, error: ErrorInfo | None = None) -> list[Event]:
        assert self.head is not None
        self.done = True
        out = self.assembler.finish(cut=True)
        out.extend(self.head.ended(state, self.stop_reason, error))
        return out


_HANDLERS: Final[Mapping[type, Callable[[StreamDecoder, Any, bytes | str], Sequence[Event]]]] = {
    MessageStart: StreamDecoder._message_start,
    BlockStart: StreamDecoder._block_start,
    BlockDelta: StreamDecoder._block_delta,
    BlockStop: StreamDecoder._block_stop,
    MessageDelta: StreamDecoder._message_delta,
    MessageStop: StreamDecoder._message_stop,
    Error: StreamDecoder._error,
    Ping: StreamDecoder._ping,
}
"""Stream event type → its handler once the response is open."""
