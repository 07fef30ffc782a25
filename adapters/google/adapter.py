"""The Gemini API as a `ProviderAdapter` for the commands.

The model a response is decoded against: a `generateContent` body does not name its model
(the URL path does), and `Decode` receives the body alone, so the decoder's
`RequestContext` takes the body's `model` field when a client put one there and otherwise
none; the response names the model that answered (`modelVersion`), which the decoder
records and binds signed parts to. The history of `ingest --request` binds to the body's
model, else the conversation's newest Gemini model (see `history`). Encoding resolves
the model from the argument, then `providers.google.model`, then the recorded one, and
`send` puts it in the URL.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from convstore.adapters.google.client import GeminiClient
from convstore.adapters.google.config import GoogleConfig
from convstore.adapters.google.context import RequestContext
from convstore.adapters.google.decode import detect_and_decode
from convstore.adapters.google.encode import EncodedRequest, encode_request
from convstore.adapters.google.history import history
from convstore.adapters.google.notices import interpret
from convstore.adapters.google.preview import preview
from convstore.adapters.wire.providers import EncodedRequest as AnyEncodedRequest
from convstore.adapters.wire.providers import (
    ProviderAdapter,
    decode_with_request,
    encode_with_config,
)
from convstore.adapters.wire.redacted import signed_by
from convstore.domain.errors import ConfigurationError


@contextmanager
def _send(request: AnyEncodedRequest, config: Mapping[str, Any]) -> Iterator[Iterable[bytes]]:
    settings = GoogleConfig.from_config(config)
    model = request.model if isinstance(request, EncodedRequest) else settings.model
    if not model:
        raise ConfigurationError("no model to send the request to: set providers.google.model")
    with (
        GeminiClient(settings.base_url) as client,
        client.stream_generate_content(model, request.to_json()) as stream,
    ):
        yield stream


ADAPTER = ProviderAdapter(
    name="google",
    decode=decode_with_request(RequestContext.from_body, detect_and_decode),
    history=history,
    encode=encode_with_config(GoogleConfig.from_config, encode_request),
    send=_send,
    interpret=interpret,
    preview=preview,
    configure=GoogleConfig.from_config,
    signed=signed_by("google", ("thoughtSignature",)),
)
