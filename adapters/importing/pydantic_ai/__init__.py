"""pydantic-ai message histories (`ModelMessagesTypeAdapter` JSON): the import
(`importer`, `history`) and the export (`export`), over one wire vocabulary (`wire`)."""
