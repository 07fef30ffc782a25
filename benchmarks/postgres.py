"""Figure 5: appending to PostgreSQL, ours against psycopg inserting the same rows.

Each side lives in a schema of its own, created for the run and dropped afterwards. The
baseline table has the shape of convstore's `events`: an identity bigint notification id,
the conversation's uuid, the version, a topic id, the state, unique on (conversation,
version), the partial index of first events; psycopg inserts one call's rows with
`executemany` (pipelined: one round trip) in one transaction. It takes no table lock:
the recorder's `LOCK TABLE … IN EXCLUSIVE MODE`, which keeps notification ids in commit
order, is part of what is measured on our side.
Skipped, saying why, while `convstore.storage.postgres` is missing or the server does not
answer. The server is `CONVSTORE_BENCH_POSTGRES`, else the local test database.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from typing import Any

from benchmarks import append
from benchmarks.common import Figure, Sizes, skipped

DSN = os.environ.get("CONVSTORE_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")

_RAW_SCHEMA = (
    "CREATE TABLE {schema}.events ("
    " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " originator_id uuid NOT NULL,"
    " originator_version bigint NOT NULL,"
    " topic integer NOT NULL,"
    " state bytea NOT NULL,"
    " UNIQUE (originator_id, originator_version))",
    "CREATE INDEX events_first ON {schema}.events (id) WHERE originator_version = 1",
)
_RAW_INSERT = (
    "INSERT INTO {schema}.events (originator_id, originator_version, topic, state)"
    " VALUES (%s, %s, %s, %s)"
)


def _unavailable() -> str | None:
    """Why the figure cannot run here, or None."""
    if importlib.util.find_spec("convstore.storage.postgres") is None:
        return "convstore.storage.postgres (storage/postgres.py) is not in this tree yet"
    try:
        import psycopg
    except ImportError as error:
        return f"psycopg is not installed ({error})"
    try:
        psycopg.connect(DSN, connect_timeout=3).close()
    except psycopg.Error as error:
        return f"the PostgreSQL server at {DSN} does not answer: {' '.join(str(error).split())}"
    return None


def postgres_figures(sizes: Sizes) -> list[Figure]:
    """Figure 5, or skipped rows saying why."""
    why = _unavailable()
    if why is not None:
        return [
            skipped(
                f"5{part}",
                f"append 1 response, PostgreSQL, {how}",
                subject=how,
                baseline="raw psycopg executemany of the same rows",
                kind="throughput",
                why=why,
            )
            for part, how in (
                ("a", "repository.save"),
                ("b", "service.append"),
                ("c", "service.append, no cache"),
            )
        ]
    return _run(sizes)


def _run(sizes: Sizes) -> list[Figure]:
    import psycopg

    from convstore.storage import Store, open_store
    from convstore.storage.repository import DEFAULT_CACHE_SIZE

    suffix = f"{os.getpid()}"
    schemas = {
        name: f"convstore_bench_{name}_{suffix}"
        for name in ("raw", "raw_apart", "save", "append", "fresh")
    }
    admin = psycopg.connect(DSN, autocommit=True)
    stores: list[Store] = []
    try:
        for schema in schemas.values():
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            admin.execute(f"CREATE SCHEMA {schema}")
        for statement in _RAW_SCHEMA:
            admin.execute(statement.format(schema=schemas["raw"]))
            admin.execute(statement.format(schema=schemas["raw_apart"]))
        for name in ("save", "append", "fresh"):
            stores.append(
                open_store(
                    f"{DSN}?schema={schemas[name]}",
                    snapshot_every=append.SNAPSHOT_EVERY,
                    cache_size=0 if name == "fresh" else DEFAULT_CACHE_SIZE,
                )
            )
        raw = psycopg.connect(DSN, autocommit=True)
        insert_sql = _RAW_INSERT.format(schema=schemas["raw"])
        apart_sql = _RAW_INSERT.format(schema=schemas["raw_apart"])

        def insert(rows: Sequence[tuple[Any, ...]]) -> None:
            with raw.transaction(), raw.cursor() as cursor:
                cursor.executemany(insert_sql, rows)

        def insert_apart(rows: Sequence[tuple[Any, ...]]) -> None:
            with raw.transaction(), raw.cursor() as cursor:
                cursor.executemany(apart_sql, rows)

        work = append.append_workload(sizes, seed=5)
        topics = append.topic_ids(work)
        try:
            timings = append.contest(
                stores[0],
                appended=stores[1],
                fresh=stores[2],
                insert=insert,
                fresh_insert=insert_apart,
                params=lambda rows: [
                    (r.originator_id, r.originator_version, topics[r.topic], r.state) for r in rows
                ],
                work=work,
                sizes=sizes,
            )
        finally:
            raw.close()
    finally:
        for store in stores:
            store.close()
        for schema in schemas.values():
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.close()
    baseline = (
        f"raw psycopg: executemany of the same {work.events_per_call:.0f} encoded rows into "
        "an equivalent table in its own schema, one transaction"
    )
    return append.figures(
        "5", "PostgreSQL", baseline=baseline, target=0.5, timings=timings, work=work, sizes=sizes
    )
