"""How pydantic-ai names our providers, and how it carries each one's signed reasoning.

pydantic-ai's models keep a provider's opaque reasoning value in `ThinkingPart.signature`
(with `provider_name`): Anthropic's `signature` of a `thinking` block, or the `data` of a
`redacted_thinking` block (the part's `id` is then `redacted_thinking`); OpenAI's
`encrypted_content` of a Responses `reasoning` item (the part's `id` is the item's id).
Those values become, and come back from, the provider's own payload (the block or item
its adapter stores), byte for byte. Google's thought signatures ride on other parts in
pydantic-ai and are not carried.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from convstore.domain.vocabulary import Provider, ProviderPayload

__all__ = ["OURS", "THEIRS", "reasoning_payload", "signature_of"]

OURS: Final[Mapping[str, Provider]] = {
    "anthropic": "anthropic",
    "openai": "openai",
    "google-gla": "google",
    "google-vertex": "google",
    "google": "google",
}
"""pydantic-ai's provider name → ours (every other name is kept as it is)."""

THEIRS: Final[Mapping[Provider, str]] = {
    "anthropic": "anthropic",
    "openai": "openai",
    "google": "google-gla",
    "openai-chat": "openai",
}
"""Our provider name → pydantic-ai's, for the export (another name is written as it is)."""

REDACTED: Final = "redacted_thinking"
"""The `id` pydantic-ai gives a ThinkingPart holding Anthropic's redacted thinking."""


def _anthropic(text: str, signature: str, part_id: str | None) -> tuple[str, dict[str, Any]]:
    if part_id == REDACTED:
        return "content_block", {"type": REDACTED, "data": signature}
    return "content_block", {"type": "thinking", "thinking": text, "signature": signature}


def _openai(text: str, signature: str, part_id: str | None) -> tuple[str, dict[str, Any]]:
    summary = [{"type": "summary_text", "text": text}] if text else []
    item: dict[str, Any] = {"type": "reasoning", "summary": summary}
    if part_id:
        item["id"] = part_id
    item["encrypted_content"] = signature
    return "output_item", item


_BUILD: Final[Mapping[Provider, Callable[[str, str, str | None], tuple[str, dict[str, Any]]]]] = {
    "anthropic": _anthropic,
    "openai": _openai,
}


def reasoning_payload(
    provider: Provider, text: str, signature: str, part_id: str | None, model: str
) -> ProviderPayload | None:
    """The payload `provider`'s adapter stores for reasoning pydantic-ai signed so, bound to
    `model`; None for a provider whose signatures are not carried."""
    build = _BUILD.get(provider)
    if build is None:
        return None
    fmt, value = build(text, signature, part_id)
    return ProviderPayload.parsed(
        provider,
        fmt,
        msgspec.json.encode(value),
        binding={"model": model} if model else {},
    )


class _Signed(msgspec.Struct):
    type: str = ""
    id: str | None = None
    signature: str | None = None
    data: str | None = None
    encrypted_content: str | None = None


_SIGNED: Final = msgspec.json.Decoder(_Signed)


def signature_of(payload: ProviderPayload) -> tuple[str, str | None] | None:
    """(signature, part id) pydantic-ai carries for a reasoning payload, or None when it
    holds none pydantic-ai carries."""
    if (payload.provider, payload.format) not in {
        ("anthropic", "content_block"),
        ("openai", "output_item"),
    }:
        return None
    try:
        signed = _SIGNED.decode(payload.raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if signed.type == "thinking" and signed.signature:
        return signed.signature, None
    if signed.type == REDACTED and signed.data:
        return signed.data, REDACTED
    if signed.type == "reasoning" and signed.encrypted_content:
        return signed.encrypted_content, signed.id
    return None
