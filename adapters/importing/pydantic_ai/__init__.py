"""pydantic-ai message histories (`ModelMessagesTypeAdapter` JSON): the import."""
