"""HTTP to the providers: the transport (streamed bodies, bounded decompression, retries
with backoff), the typed errors, and the part every provider's client shares. Keys are
never stored, logged or shown. And serving: the listen address and the uvicorn server the
proxy and the web viewer share (`serving`).

May import: `convstore.domain`.
"""
