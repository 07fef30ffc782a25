"""The recording proxy: a reverse proxy in front of the providers' model endpoints that
records every exchange through the recording core, and the recording httpx transport
that does the same inside an application (`recording_transport`).

May import: `convstore.domain`, `convstore.storage`, and every adapters subpackage but
`cli`.
"""
