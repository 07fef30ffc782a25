"""The domain: the vocabulary, the Conversation aggregate and its invariants, the service.

Imports nothing of convstore outside itself; persistence is handed to the service.

Its names are loaded on first use (PEP 562), from the modules `_HOMES` lists: importing
`convstore.domain.errors` alone, as the command line's `--help` does, loads no third-party
module.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from convstore.domain.conversation import (
        Conversation,
        new_conversation_id,
        parse_conversation_id,
    )
    from convstore.domain.events import (
        EVENT_TYPES,
        AssistantText,
        ContextInjected,
        ConversationEvent,
        Event,
        Forgotten,
        HostedActivity,
        Reasoning,
        Redacted,
        Relabelled,
        ResponseEnded,
        ResponseStarted,
        Retitled,
        Started,
        ToolCallRequested,
        ToolCallResponded,
        TurnEnded,
        TurnStarted,
        UnknownArtifact,
        UserMessage,
    )
    from convstore.domain.service import (
        ConversationFilter,
        ConversationRepository,
        ConversationService,
        ConversationSummary,
        MetadataOutcome,
    )
    from convstore.domain.state import ConversationState
    from convstore.domain.vocabulary import (
        ActivityId,
        Attribution,
        CallId,
        CodeOutput,
        ConversationId,
        Display,
        ErrorInfo,
        Location,
        Notice,
        NoticeKind,
        PayloadReading,
        ProviderPayload,
        RequestSettings,
        ResponseId,
        Source,
        TextRange,
        ToolDeclaration,
        TurnId,
        Usage,
        Writer,
    )

__all__ = [
    "EVENT_TYPES",
    "ActivityId",
    "AssistantText",
    "Attribution",
    "CallId",
    "CodeOutput",
    "ContextInjected",
    "Conversation",
    "ConversationEvent",
    "ConversationFilter",
    "ConversationId",
    "ConversationRepository",
    "ConversationService",
    "ConversationState",
    "ConversationSummary",
    "Display",
    "ErrorInfo",
    "Event",
    "Forgotten",
    "HostedActivity",
    "Location",
    "MetadataOutcome",
    "Notice",
    "NoticeKind",
    "PayloadReading",
    "ProviderPayload",
    "Reasoning",
    "Redacted",
    "Relabelled",
    "RequestSettings",
    "ResponseEnded",
    "ResponseId",
    "ResponseStarted",
    "Retitled",
    "Source",
    "Started",
    "TextRange",
    "ToolCallRequested",
    "ToolCallResponded",
    "ToolDeclaration",
    "TurnEnded",
    "TurnId",
    "TurnStarted",
    "UnknownArtifact",
    "Usage",
    "UserMessage",
    "Writer",
    "new_conversation_id",
    "parse_conversation_id",
]

_HOMES = ("events", "vocabulary", "state", "conversation", "service")
"""The modules that define the names above, searched in this order."""


def __getattr__(name: str) -> object:
    """A public name, imported from its module on first use."""
    if name in __all__:
        for home in _HOMES:
            module = import_module(f"{__name__}.{home}")
            if hasattr(module, name):
                value = getattr(module, name)
                globals()[name] = value
                return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
