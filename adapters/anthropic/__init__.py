"""The anthropic wire format."""
