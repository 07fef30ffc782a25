"""The web viewer (`convstore serve`): browse, search and audit conversations in a
browser, read-only. Pages render the presentation model the terminal and the Markdown
export share (`projections.presentation`), through templates that escape every string.

`app` is the ASGI application (Starlette), `guard` its Host, token and header rules,
`views` what each page shows (read from the store, never written), `html` the template
environment and its filters, `server` serving it on uvicorn.

May import: `convstore.domain`, `convstore.storage`, `convstore.projections`,
`convstore.adapters.config`, `convstore.adapters.http`, `convstore.adapters.recording`
(the replay preview), `convstore.adapters.terminal` and `convstore.adapters.wire`.
"""
