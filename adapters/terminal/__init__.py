"""What reaches a terminal: the one sanitizer and the renderer (`render`, standard library
only, so the projections' Markdown export uses the same sanitizer), and domain values as
lines and JSON data (`transcript`).

May import: `convstore.domain` and `convstore.projections`.
"""
