"""The recording core: every way into the store goes through it (`ingest` of captured
traffic, `ask` of a live provider, and the proxy and importers that follow), as does
`replay`'s request building. It reads and writes only through the domain's service.

May import: `convstore.domain`, `convstore.adapters.wire`, `convstore.adapters.config`
and `convstore.adapters.http`; provider packages only through the registry.
"""
