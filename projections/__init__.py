"""convstore.projections: readings of the event log: the portable reading and its exports,
the presentation model a person reads (`presentation`, rendered by `show` and the
Markdown export) with its shared wording, the search index and its follower, the audit,
the chain verification (`verify`; `chain`, the status a reader checks as it reads), and
the OpenTelemetry spans (`otel`) with their OTLP file and HTTP encodings (`otlp`).
Each is imported by its full name: no re-exports here, so a command loads only what it
reads with.

May import: `convstore.domain`, `convstore.storage` (the index and `verify` read the
recorders), and the one sanitizer (`convstore.adapters.terminal.render`,
standard library only) for what the exports write; `otel` and `otlp` import the `otel`
extra's OpenTelemetry SDK, OTLP exporter and protobuf, and only they do.
"""
