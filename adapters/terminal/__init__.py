"""What reaches a terminal: the one sanitizer and the renderer (`render`, standard library
only, so the projections' Markdown export uses the same sanitizer), a conversation as
`show` prints it (`transcript`), domain values as JSON data and listing lines (`values`),
and the live view of `ask` (`live`).

May import: `convstore.domain` and `convstore.projections`.
"""
