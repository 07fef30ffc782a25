"""The OpenAI Responses API as a `ProviderAdapter` for the commands."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from convstore.adapters.openai.client import OpenAIClient
from convstore.adapters.openai.config import OpenAIConfig
from convstore.adapters.openai.context import RequestContext
from convstore.adapters.openai.decode import detect_and_decode
from convstore.adapters.openai.encode import encode_request
from convstore.adapters.openai.history import history
from convstore.adapters.openai.notices import interpret
from convstore.adapters.openai.preview import preview
from convstore.adapters.wire.providers import (
    EncodedRequest,
    ProviderAdapter,
    decode_with_request,
    encode_with_config,
)
from convstore.adapters.wire.redacted import signed_by


@contextmanager
def _send(request: EncodedRequest, config: Mapping[str, Any]) -> Iterator[Iterable[bytes]]:
    settings = OpenAIConfig.from_config(config)
    with (
        OpenAIClient(settings.base_url) as client,
        client.stream_response(request.to_json()) as stream,
    ):
        yield stream


ADAPTER = ProviderAdapter(
    name="openai",
    decode=decode_with_request(RequestContext.from_body, detect_and_decode),
    history=history,
    encode=encode_with_config(OpenAIConfig.from_config, encode_request),
    send=_send,
    interpret=interpret,
    preview=preview,
    configure=OpenAIConfig.from_config,
    signed=signed_by("openai", ("encrypted_content",)),
)
