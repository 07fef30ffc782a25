"""HTTP to the providers: the transport (streamed bodies, bounded decompression, retries
with backoff), the typed errors, and the part every provider's client shares. Keys are
never stored, logged or shown.

May import: `convstore.domain`.
"""
