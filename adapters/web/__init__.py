"""The web viewer: browse, search and audit conversations in a browser, from the same
presentation the terminal uses, escaped for HTML (room for the web viewer issue).

May import: `convstore.domain`, `convstore.storage`, `convstore.projections`,
`convstore.adapters.config` and `convstore.adapters.terminal`.
"""
