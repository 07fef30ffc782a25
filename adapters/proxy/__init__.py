"""The recording proxy: a reverse proxy in front of the providers' model endpoints that
records every exchange through the recording core (room for the proxy issue).

May import: `convstore.domain`, `convstore.storage`, and every adapters subpackage but
`cli`.
"""
