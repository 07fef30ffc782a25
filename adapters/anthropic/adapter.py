"""The Anthropic Messages API as a `ProviderAdapter` for the commands."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from convstore.adapters.anthropic.client import AnthropicClient
from convstore.adapters.anthropic.config import AnthropicConfig
from convstore.adapters.anthropic.context import RequestContext
from convstore.adapters.anthropic.decode import detect_and_decode
from convstore.adapters.anthropic.encode import EncodedRequest, encode_request
from convstore.adapters.anthropic.history import history_drafts, recorded_prefix
from convstore.adapters.anthropic.notices import interpret
from convstore.adapters.anthropic.preview import preview
from convstore.adapters.wire.providers import EncodedRequest as AnyEncodedRequest
from convstore.adapters.wire.providers import (
    MessageDrafts,
    ProviderAdapter,
    decode_with_request,
    encode_with_config,
)
from convstore.adapters.wire.redacted import signed_by
from convstore.domain.events import Event


def _history(events: Sequence[Event], request: bytes) -> list[MessageDrafts]:
    return history_drafts(request, start=recorded_prefix(events, request))


@contextmanager
def _send(request: AnyEncodedRequest, config: Mapping[str, Any]) -> Iterator[Iterable[bytes]]:
    settings = AnthropicConfig.from_config(config)
    betas = request.betas if isinstance(request, EncodedRequest) else ()
    with (
        AnthropicClient(settings.base_url, betas=betas) as client,
        client.stream_message(request.to_json()) as stream,
    ):
        yield stream


ADAPTER = ProviderAdapter(
    name="anthropic",
    decode=decode_with_request(RequestContext.from_body, detect_and_decode),
    history=_history,
    encode=encode_with_config(AnthropicConfig.from_config, encode_request),
    send=_send,
    interpret=interpret,
    preview=preview,
    configure=AnthropicConfig.from_config,
    signed=signed_by("anthropic", ("signature",)),
    continues_prefill=True,
)
