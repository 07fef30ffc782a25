"""OpenAI Chat Completions as a `ProviderAdapter` for the commands.

The server a response came from is part of its payloads' binding: a captured body does
not name it, so the command line names it (`ingest --server HOST`, through
`providers.serving`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from convstore.adapters.openai_chat.client import ChatClient, api_key_for
from convstore.adapters.openai_chat.config import ChatConfig
from convstore.adapters.openai_chat.context import RequestContext
from convstore.adapters.openai_chat.decode import detect_and_decode
from convstore.adapters.openai_chat.encode import encode_request
from convstore.adapters.openai_chat.history import history
from convstore.adapters.openai_chat.notices import interpret
from convstore.adapters.wire.providers import (
    EncodedRequest,
    ProviderAdapter,
    current_server,
    encode_with_config,
)
from convstore.adapters.wire.secrets import scrub_request
from convstore.domain.events import Event


def decode(
    body: bytes | Iterable[bytes], request: bytes | None, status: int | None
) -> Iterator[Event]:
    """The drafts of a response body, read against its request (scrubbed of credentials)
    and the server `providers.serving` names."""
    server = current_server()
    if request is not None:
        context = RequestContext.from_body(scrub_request(request), server=server)
    else:
        context = RequestContext(server=server)
    return detect_and_decode(body, request=context, status=status)


@contextmanager
def _send(request: EncodedRequest, config: Mapping[str, Any]) -> Iterator[Iterable[bytes]]:
    settings = ChatConfig.from_config(config)
    key = api_key_for(settings.base_url)
    with (
        ChatClient(settings.base_url, key) as client,
        client.stream_response(request.to_json()) as stream,
    ):
        yield stream


ADAPTER = ProviderAdapter(
    name="openai-chat",
    decode=decode,
    history=history,
    encode=encode_with_config(ChatConfig.from_config, encode_request),
    send=_send,
    interpret=interpret,
    configure=ChatConfig.from_config,
)
