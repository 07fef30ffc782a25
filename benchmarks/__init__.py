"""Reproducible performance runs of convstore against named baselines measured in the same run.

`python -m benchmarks` (or `make bench`) runs every family and prints one table;
`--quick` is a smoke run with small sizes; `--json FILE` writes the figures. Speed is
measured here, never asserted by tests.

- `common`: timing (interleaved rounds, gc off while timed) and the results table
- `workload`: realistic conversation events built with the domain vocabulary
- `append`: the append contest shared by SQLite and PostgreSQL
- `storage`: SQLite append, replay with and without snapshots, bytes and memory
- `mapper`: the mapper's round trip against msgspec's typed one
- `postgres`: PostgreSQL append, skipped (saying why) without the module or the server
- `reference`: plain eventsourcing's replay, for reference
- `peers`: the `llm` package and a LangGraph app on `SqliteSaver`, fed the same recorded
  responses (`--only peers`, or `make bench-peers`)
- `importing`: `convstore import llm` of an `llm` logs.db against batch ingest of the same
  responses' captures (`--only import`)
"""
