"""The `llm` package's `logs.db` (`convstore import llm PATH`).

Both layouts `llm` has written: the current one (0.32 on: `threads`, `turns`, a
content-addressed `messages` / `parts` tree, tools, fragments) and the older
`conversations` / `responses` tables (tool calls and results, attachments, fragments). A
file migrated from the one to the other holds both: each is read. `logs` reads a file
into `LlmThread`s of `LlmTurn`s, `drafts` turns one turn into the drafts of an exchange
and what it could not carry, `importer` is the format's `Importer`."""
