"""Which recorded responses a request to a model can replay: model names, and the scan
of a conversation's responses (their provider, model, end and encrypted content).

Part of the OpenAI encoder (see `encode` for the rules).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec

from convstore.adapters.openai.context import PROVIDER
from convstore.adapters.wire.encoding import ResponseSpan, Scan
from convstore.adapters.wire.models import ModelId, ModelNames
from convstore.adapters.wire.providers import payload_type
from convstore.domain.events import (
    Event,
    Reasoning,
    ResponseEnded,
    ResponseStarted,
    ToolCallRequested,
)
from convstore.domain.vocabulary import ProviderPayload

OUTPUT_ITEM: Final = "output_item"


_FINE_TUNED: Final = re.compile(r"^ft:")
_SNAPSHOT: Final = re.compile(r"^(.*?)-(\d{4}-\d{2}-\d{2}|\d{4})$")


def model_id(model: str) -> ModelId:
    """An OpenAI model name as its naming reads it: an alias and its dated snapshots
    (`gpt-5.1` ~ `gpt-5.1-2025-11-13`, `gpt-4` ~ `gpt-4-0613`); a fine-tune is its own
    model, and a `-latest` alias (`chatgpt-4o-latest`) moves between snapshots."""
    name = model.strip().lower().removeprefix("openai/")
    if _FINE_TUNED.match(name):
        return ModelId(base=name, snapshot=name)  # equal names only
    if name.endswith("-latest"):
        return ModelId(base=name, moving=True)
    dated = _SNAPSHOT.match(name)
    return ModelId(base=dated.group(1), snapshot=dated.group(2)) if dated else ModelId(base=name)


@dataclass(slots=True)
class _Response(ResponseSpan):
    reasoning: list[Reasoning] = field(default_factory=list)
    bound: list[tuple[Event, ProviderPayload]] = field(default_factory=list)
    """Every OpenAI payload of the response, with its event."""


class ResponseScan(Scan[_Response]):
    """The shared scan, with each response's reasoning and OpenAI payloads, and the call
    item type of each call."""

    def __init__(self, events: Sequence[Event]) -> None:
        super().__init__(_Response, ModelNames(model_id))
        self.newest_native: ResponseStarted | None = None
        """The newest OpenAI response whose settings hold its native request."""
        self.calls: dict[str, str] = {}
        """Call id → the OpenAI call item type (`function_call`, `custom_tool_call`, …)."""
        for event in events:
            self.note(event)
            if isinstance(event, ResponseStarted):
                native = event.settings.native
                if native is not None and native.provider == PROVIDER:
                    self.newest_native = event
                continue
            if isinstance(event, ResponseEnded):
                continue
            response_id = getattr(event, "response_id", None)
            response = self.responses.get(response_id or "")
            if response is None:
                continue
            if isinstance(event, Reasoning):
                response.reasoning.append(event)
            payload = getattr(event, "payload", None)
            if isinstance(payload, ProviderPayload) and payload.provider == PROVIDER:
                response.bound.append((event, payload))
                if isinstance(event, ToolCallRequested):
                    self.calls[event.call_id] = payload_type(payload)


class _Encrypted(msgspec.Struct):
    id: str | None = None
    encrypted_content: str | None = None


_ENCRYPTED: Final = msgspec.json.Decoder(_Encrypted)


def portable_reason(response: _Response, model: str, store: bool, models: ModelNames) -> str | None:
    """Why an OpenAI response cannot be replayed natively to `model` (None: it can)."""
    if response.ended is None:
        return "its response never ended (interrupted)"
    if response.ended.state != "completed":
        return f"its response ended {response.ended.state} (interrupted)"
    for event, payload in response.bound:
        if payload.format == "partial":
            return f"an item of its response was cut short ({type(event).__name__})"
        why = models.mismatch(payload, model)
        if why is not None:
            return f"its items are {why}"
    for reasoning in response.reasoning:
        signed = reasoning.payload
        if signed is None or signed.provider != PROVIDER:
            return "a reasoning item of its response was cut short (no encrypted content)"
        if signed.format != OUTPUT_ITEM:
            return f"a reasoning item of its response is a {signed.format} payload"
        if not store:
            try:
                item = _ENCRYPTED.decode(signed.raw)
            except (msgspec.DecodeError, msgspec.ValidationError):
                return "a reasoning item of its response is not an object"
            if not item.encrypted_content:
                return (
                    f"reasoning item {item.id or '?'} has no encrypted_content and the request "
                    "is sent with store=false, so OpenAI cannot resolve it"
                )
    return None
