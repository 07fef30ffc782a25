"""The import formats: each one's name and its importer."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from convstore.domain.errors import ConfigurationError

if TYPE_CHECKING:  # `--help` lists the formats without loading a reader
    from convstore.adapters.importing.source import Importer

__all__ = ["FORMATS", "importer"]


def _importers() -> dict[str, Callable[[], Importer]]:
    """Each format's importer, built on use (a format's reader loads only when asked)."""
    return {
        "llm": _llm,
        "openai-conversation": _openai_conversation,
        "pydantic-ai": _pydantic_ai,
    }


def _openai_conversation() -> Importer:
    from convstore.adapters.importing.openai_conversation import ConversationItemsImporter

    return ConversationItemsImporter()


def _pydantic_ai() -> Importer:
    from convstore.adapters.importing.pydantic_ai.importer import PydanticAIImporter

    return PydanticAIImporter()


def _llm() -> Importer:
    from convstore.adapters.importing.llm.importer import LlmImporter

    return LlmImporter()


FORMATS: Final[tuple[str, ...]] = tuple(sorted(_importers()))
"""Every format `convstore import` reads."""


def importer(fmt: str) -> Importer:
    """The importer of `fmt`; raises ConfigurationError naming the formats for another."""
    found = _importers().get(fmt)
    if found is None:
        raise ConfigurationError(
            f"there is no import format {fmt!r}; the formats are: {', '.join(FORMATS)}"
        )
    return found()
