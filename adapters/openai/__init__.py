"""The openai wire format."""
