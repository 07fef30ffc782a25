"""The `openai-conversation` import format: the items of an OpenAI Conversations API list
(`GET /v1/conversations/{id}/items`), see `reader`."""

from convstore.adapters.importing.openai_conversation.reader import ConversationItemsImporter

__all__ = ["ConversationItemsImporter"]
