"""Every conversation the test suite can build from captures, for any provider.

`recorded_conversations()` walks the project's examples (`examples/<provider>/`) and,
when present, the conformance corpus (`../shared/wire/<provider>/`): in each folder, the
model exchanges in order, each request's history recorded through the provider's adapter
(`history`, as `ingest` does; a request that does not continue the conversation starts a
new one) and each response decoded with its request (`decode`). Every conversation is
given as it stands after each response, so a replay test sees every prefix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from convstore.adapters.recording.jobs import read_capture
from convstore.adapters.wire.names import PROVIDERS
from convstore.adapters.wire.providers import adapter
from convstore.domain.conversation import Conversation
from convstore.domain.errors import DecodeError
from convstore.domain.events import Event, UnknownArtifact
from tests.replay_server import EXAMPLES, WIRE

__all__ = ["Recorded", "recorded_conversations"]

_WIRE_FOLDER: Final = {
    "anthropic": "anthropic",
    "openai": "openai",
    "google": "gemini",
    "openai-chat": "openai-chat",
}
"""Each provider's folder in the conformance corpus."""

_MODEL_PATHS: Final = {
    "anthropic": ("/v1/messages",),
    "openai": ("/v1/responses",),
    "google": (":generateContent", ":streamGenerateContent"),
    "openai-chat": ("/chat/completions",),
}
"""How a model exchange's path ends, per provider (other exchanges are set-up calls)."""


@dataclass(frozen=True)
class Recorded:
    """A conversation recorded from captures, as it stands after one response."""

    name: str
    """`<corpus>/<provider>/<folder>/<N>`: the capture of the last response recorded."""
    provider: str
    events: tuple[Event, ...]

    def __str__(self) -> str:
        return self.name

    def unknown_payloads(self) -> list[bytes]:
        """The raw payloads of its unknown artifacts (replayed byte-identical to their
        provider, exempt from the SDK request check)."""
        return [e.payload.raw for e in self.events if isinstance(e, UnknownArtifact)]


def recorded_conversations() -> list[Recorded]:
    """Every conversation of every capture folder, after each of its responses."""
    found: list[Recorded] = []
    for provider in PROVIDERS:
        roots = [("examples", EXAMPLES / provider), ("wire", WIRE / _WIRE_FOLDER[provider])]
        for corpus, root in roots:
            for folder in sorted(root.iterdir()) if root.is_dir() else []:
                if folder.is_dir():
                    found.extend(_folder(corpus, provider, folder))
    return found


def _numbers(folder: Path) -> list[int]:
    return sorted(int(path.name.split(".")[0]) for path in folder.glob("*.meta.json"))


def _folder(corpus: str, provider: str, folder: Path) -> Iterator[Recorded]:
    provider_adapter = adapter(provider)
    conversation = Conversation.start()
    for n in _numbers(folder):
        meta = json.loads((folder / f"{n}.meta.json").read_text())
        responses = list(folder.glob(f"{n}.response.*"))
        if not responses or not str(meta.get("path", "")).endswith(_MODEL_PATHS[provider]):
            continue
        if int(meta.get("status", 200)) >= 400:
            continue
        request_path = folder / f"{n}.request.json"
        request = request_path.read_bytes() if request_path.exists() else None
        try:
            drafts = list(provider_adapter.decode(read_capture(responses[0]), request, None))
        except DecodeError:
            continue
        if request is not None and provider_adapter.history is not None:
            try:
                messages = provider_adapter.history(list(conversation.pending), request)
            except DecodeError:  # an exchange of its own: a new conversation
                conversation = Conversation.start()
                messages = provider_adapter.history([], request)
            for message in messages:
                conversation.record_all(message.drafts)
        conversation.record_all(drafts)
        yield Recorded(f"{corpus}/{provider}/{folder.name}/{n}", provider, conversation.pending)
