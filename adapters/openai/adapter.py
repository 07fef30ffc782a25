"""The OpenAI Responses API as a `ProviderAdapter` for the commands."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from convstore.adapters.openai.client import OpenAIClient
from convstore.adapters.openai.config import OpenAIConfig
from convstore.adapters.openai.context import RequestContext
from convstore.adapters.openai.decode import detect_and_decode
from convstore.adapters.openai.encode import EncodedRequest, encode_request
from convstore.adapters.openai.history import history
from convstore.adapters.providers import EncodedRequest as AnyEncodedRequest
from convstore.adapters.providers import MessageDrafts, ProviderAdapter
from convstore.domain.events import Event


def _decode(
    body: bytes | Iterable[bytes], request: bytes | None, status: int | None
) -> Iterator[Event]:
    context = RequestContext.from_body(request) if request is not None else None
    return detect_and_decode(body, request=context, status=status)


def _history(events: Sequence[Event], request: bytes) -> list[MessageDrafts]:
    return history(events, request)


def _encode(
    events: Sequence[Event], config: Mapping[str, Any], model: str | None, user: str | None
) -> EncodedRequest:
    return encode_request(events, config=OpenAIConfig.from_config(config), model=model, user=user)


@contextmanager
def _send(request: AnyEncodedRequest, config: Mapping[str, Any]) -> Iterator[Iterable[bytes]]:
    settings = OpenAIConfig.from_config(config)
    with (
        OpenAIClient(settings.base_url) as client,
        client.stream_response(request.to_json()) as stream,
    ):
        yield stream


ADAPTER = ProviderAdapter(
    name="openai", decode=_decode, history=_history, encode=_encode, send=_send
)
