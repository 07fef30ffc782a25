"""The providers' names, in the standard library only: `--help` lists them without
loading an adapter."""

from __future__ import annotations

PROVIDERS: tuple[str, ...] = ("anthropic", "openai", "google", "openai-chat")
"""Every provider name the commands accept."""
PROVIDER_ALIASES: dict[str, str] = {"gemini": "google"}
"""Other names people use for a provider."""
