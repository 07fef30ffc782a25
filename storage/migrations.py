"""Named, append-only store migrations: the store's schema, one step at a time.

`MIGRATIONS` lists every change ever made to the store's tables, oldest first. Each has a
name that never changes and the statements of both backends; a store records the ones
applied, in order, in its `migrations` table, so the store itself says which version of
the schema it holds. The rules, as well-kept SQLite tools have them:

- **Append-only.** A migration, once released, is never edited or removed: a correction
  is a new migration after it. `tests/test_migrations.py` pins the released names.
- **A writer migrates.** Opening a store to write applies what is missing, each migration
  in a transaction of its own (its statements and its `migrations` row commit together),
  re-checked under the lock so concurrent writers apply each exactly once.
- **A reader never migrates.** A read-only reader reads a store that lacks only
  migrations that say readers can do without them (`readable_without`: `0002_responses`,
  `0003_catalogue`, `0004_settled`, `0005_prefixes` and `0006_prefix_heads` each add a
  table the reader does without); otherwise
  it refuses,
  naming the migrations and `convstore migrate`.
- **A newer store is refused.** A store that has applied a migration this version does not
  know (or another history) was written by a newer convstore: it is refused by name,
  before anything is read or written.

A store created before migrations existed has the tables of `0001_initial` and no
`migrations` table: it holds `0001_initial`, and the first writer records it.

PostgreSQL statements are formatted with `{s}` (the schema), `{channel}` (the channel
appends notify), `{append}` (the first append function's name), `{append_v2}` (the
one `0002_responses` made, which also indexes provider responses) and `{append_v3}` (the
one `0003_catalogue` made, which also writes the conversation's catalogue row).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from convstore.storage.errors import MigrationRequired, NewerSchema, StoreNotFound


@dataclass(frozen=True, slots=True)
class Migration:
    """One named change of the store's tables, on both backends."""

    name: str
    """`NNNN_what_it_does`; never changes once released."""
    sqlite: tuple[str, ...]
    postgres: tuple[str, ...]
    readable_without: bool = False
    """Whether a reader of this version can still read a store that lacks this migration
    (an index, say, but not a table or column the reader selects)."""


_INITIAL_SQLITE: Final = (
    "CREATE TABLE IF NOT EXISTS topics (id INTEGER PRIMARY KEY, topic TEXT NOT NULL UNIQUE)",
    "CREATE TABLE IF NOT EXISTS events ("
    " id INTEGER PRIMARY KEY,"
    " originator_id BLOB NOT NULL,"
    " originator_version INTEGER NOT NULL,"
    " topic INTEGER NOT NULL,"
    " state BLOB NOT NULL,"
    " UNIQUE (originator_id, originator_version))",
    "CREATE INDEX IF NOT EXISTS events_first ON events (id) WHERE originator_version = 1",
    "CREATE TABLE IF NOT EXISTS snapshots ("
    " originator_id BLOB PRIMARY KEY, version INTEGER NOT NULL, state BLOB NOT NULL)"
    " WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS tracking ("
    " application_name TEXT NOT NULL, notification_id INTEGER NOT NULL,"
    " PRIMARY KEY (application_name, notification_id)) WITHOUT ROWID",
)

_APPEND_TAIL: Final = (
    "  IF p_snapshot_id IS NOT NULL THEN\n"
    "    INSERT INTO {s}.snapshots VALUES (p_snapshot_id, p_snapshot_version, p_snapshot_state)\n"
    "    ON CONFLICT (originator_id) DO UPDATE\n"
    "    SET version = EXCLUDED.version, state = EXCLUDED.state;\n"
    "  END IF;\n"
    "  IF p_tracking_name IS NOT NULL THEN\n"
    "    INSERT INTO {s}.tracking VALUES (p_tracking_name, p_tracking_id)\n"
    "    ON CONFLICT (application_name) DO UPDATE SET notification_id = EXCLUDED.notification_id\n"
    "    WHERE tracking.notification_id < EXCLUDED.notification_id;\n"
    "    IF NOT FOUND THEN\n"
    "      RAISE unique_violation USING MESSAGE = format('%s already processed a'\n"
    "        ' notification at or after %s', p_tracking_name, p_tracking_id);\n"
    "    END IF;\n"
    "  END IF;\n"
    "END\n"
    "$$"
)
"""The append functions' end: the snapshot and the tracking record (both versions')."""

_INITIAL_POSTGRES: Final = (
    "CREATE TABLE IF NOT EXISTS {s}.topics ("
    " id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY, topic text NOT NULL UNIQUE)",
    "CREATE TABLE IF NOT EXISTS {s}.events ("
    " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " originator_id uuid NOT NULL,"
    " originator_version bigint NOT NULL,"
    " topic integer NOT NULL,"
    " state bytea NOT NULL,"
    " UNIQUE (originator_id, originator_version))",
    "CREATE INDEX IF NOT EXISTS events_first ON {s}.events (id) WHERE originator_version = 1",
    "CREATE TABLE IF NOT EXISTS {s}.snapshots ("
    " originator_id uuid PRIMARY KEY, version bigint NOT NULL, state bytea NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {s}.tracking ("
    " application_name text PRIMARY KEY, notification_id bigint NOT NULL)",
    "CREATE OR REPLACE FUNCTION {s}.{append}("
    " p_ids uuid[], p_versions bigint[], p_topics integer[], p_states bytea[],"
    " p_snapshot_id uuid, p_snapshot_version bigint, p_snapshot_state bytea,"
    " p_tracking_name text, p_tracking_id bigint)"
    " RETURNS SETOF bigint LANGUAGE plpgsql AS $$\n"
    "BEGIN\n"
    # Taken first, so every writer queues here before holding any other lock.
    "  LOCK TABLE {s}.events IN EXCLUSIVE MODE;\n"
    "  PERFORM pg_notify({channel}, '');\n"
    "  RETURN QUERY INSERT INTO {s}.events (originator_id, originator_version, topic, state)\n"
    "    SELECT * FROM unnest(p_ids, p_versions, p_topics, p_states) RETURNING id;\n"
    + _APPEND_TAIL,
)

_RESPONSE_STARTED: Final = "'convstore.domain.events:ResponseStarted'"

_RESPONSES_SQLITE: Final = (
    "CREATE TABLE IF NOT EXISTS responses ("
    " provider TEXT NOT NULL, server TEXT NOT NULL, response_id TEXT NOT NULL,"
    " attempt INTEGER NOT NULL, originator_id BLOB NOT NULL, originator_version INTEGER NOT NULL,"
    " PRIMARY KEY (provider, server, response_id, attempt)) WITHOUT ROWID",
    # Every provider response stored so far is attempt 1 (attempts came with this
    # migration); the first copy in the log is indexed, later copies are left as they are
    # (`audit` lists them as duplicates). An event that is not JSON is passed over.
    "INSERT OR IGNORE INTO responses"
    " SELECT json_extract(x.j, '$.provider'), '', json_extract(x.j, '$.response_id'), 1,"
    " x.originator_id, x.originator_version"
    " FROM (SELECT e.id, e.originator_id, e.originator_version, CAST(e.state AS TEXT) AS j"
    f"  FROM events e JOIN topics t ON t.id = e.topic WHERE t.topic = {_RESPONSE_STARTED}) x"
    " WHERE CASE WHEN json_valid(x.j) THEN"
    "  json_type(x.j, '$.provider') = 'text' AND json_type(x.j, '$.response_id') = 'text'"
    "  AND coalesce(json_extract(x.j, '$.origin'), 'provider') = 'provider' ELSE 0 END"
    " ORDER BY x.id",
)

_RESPONSES_POSTGRES: Final = (
    "CREATE TABLE IF NOT EXISTS {s}.responses ("
    " provider text NOT NULL, server text NOT NULL, response_id text NOT NULL,"
    " attempt integer NOT NULL, originator_id uuid NOT NULL, originator_version bigint NOT NULL,"
    " CONSTRAINT responses_pkey PRIMARY KEY (provider, server, response_id, attempt))",
    "CREATE FUNCTION pg_temp.convstore_json(b bytea) RETURNS jsonb LANGUAGE plpgsql AS $$\n"
    "BEGIN\n"
    "  RETURN convert_from(b, 'UTF8')::jsonb;\n"
    "EXCEPTION WHEN others THEN\n"
    "  RETURN NULL;\n"
    "END\n"
    "$$",
    "INSERT INTO {s}.responses"
    " SELECT DISTINCT ON (x.j->>'provider', x.j->>'response_id')"
    " x.j->>'provider', '', x.j->>'response_id', 1, x.originator_id, x.originator_version"
    " FROM (SELECT e.id, e.originator_id, e.originator_version, pg_temp.convstore_json(e.state) j"
    "  FROM {s}.events e JOIN {s}.topics t ON t.id = e.topic"
    f"  WHERE t.topic = {_RESPONSE_STARTED}) x"
    " WHERE jsonb_typeof(x.j->'provider') = 'string'"
    " AND jsonb_typeof(x.j->'response_id') = 'string'"
    " AND coalesce(x.j->>'origin', 'provider') = 'provider'"
    " ORDER BY x.j->>'provider', x.j->>'response_id', x.id",
    "DROP FUNCTION pg_temp.convstore_json(bytea)",
    # The append function gains the responses' rows: a new name (see `storage.postgres`).
    "DROP FUNCTION IF EXISTS {s}.{append}("
    " uuid[], bigint[], integer[], bytea[], uuid, bigint, bytea, text, bigint)",
    "CREATE OR REPLACE FUNCTION {s}.{append_v2}("
    " p_ids uuid[], p_versions bigint[], p_topics integer[], p_states bytea[],"
    " p_snapshot_id uuid, p_snapshot_version bigint, p_snapshot_state bytea,"
    " p_tracking_name text, p_tracking_id bigint,"
    " p_r_providers text[], p_r_servers text[], p_r_ids text[], p_r_attempts integer[],"
    " p_r_originators uuid[], p_r_versions bigint[])"
    " RETURNS SETOF bigint LANGUAGE plpgsql AS $$\n"
    "BEGIN\n"
    "  LOCK TABLE {s}.events IN EXCLUSIVE MODE;\n"
    "  PERFORM pg_notify({channel}, '');\n"
    "  IF cardinality(p_r_ids) > 0 THEN\n"
    "    INSERT INTO {s}.responses\n"
    "      SELECT * FROM unnest(p_r_providers, p_r_servers, p_r_ids, p_r_attempts,"
    " p_r_originators, p_r_versions);\n"
    "  END IF;\n"
    "  RETURN QUERY INSERT INTO {s}.events (originator_id, originator_version, topic, state)\n"
    "    SELECT * FROM unnest(p_ids, p_versions, p_topics, p_states) RETURNING id;\n"
    + _APPEND_TAIL,
)

_TURN_STARTED: Final = "'convstore.domain.events:TurnStarted'"
_JSON: Final = "CASE WHEN json_valid(CAST({e}.state AS TEXT)) THEN CAST({e}.state AS TEXT) END"
_STAMP: Final = "strftime('%Y-%m-%dT%H:%M:%fZ', json_extract({j}, '$.timestamp'))"
_EPOCH: Final = "'1970-01-01T00:00:00.000Z'"

_CATALOGUE_SQLITE: Final = (
    "CREATE TABLE IF NOT EXISTS catalogue ("
    " id BLOB PRIMARY KEY, position INTEGER NOT NULL, created_at TEXT, last_activity_at TEXT,"
    " provider TEXT, model TEXT, turns INTEGER NOT NULL, events INTEGER NOT NULL, title TEXT,"
    " labels TEXT, forked_from TEXT) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS catalogue_position ON catalogue (position)",
    "CREATE INDEX IF NOT EXISTS catalogue_created ON catalogue (created_at)",
    # Every conversation from its events: an event that is not JSON gives NULLs (its
    # conversation is listed as before the catalogue, from its first event).
    "INSERT OR IGNORE INTO catalogue"
    " SELECT f.originator_id, f.id,"
    f" coalesce({_STAMP.format(j='f.j')}, {_EPOCH}),"
    f" coalesce((SELECT {_STAMP.format(j=_JSON.format(e='l'))} FROM events l"
    "  WHERE l.originator_id = f.originator_id ORDER BY l.originator_version DESC LIMIT 1),"
    f"  {_STAMP.format(j='f.j')}, {_EPOCH}),"
    + ",".join(
        f" (SELECT json_extract({_JSON.format(e='r')}, '$.{field}') FROM events r"
        f"  JOIN topics t ON t.id = r.topic WHERE t.topic = {_RESPONSE_STARTED}"
        "  AND r.originator_id = f.originator_id ORDER BY r.originator_version DESC LIMIT 1)"
        for field in ("provider", "model")
    )
    + ", (SELECT count(*) FROM events r JOIN topics t ON t.id = r.topic"
    f"  WHERE t.topic = {_TURN_STARTED} AND r.originator_id = f.originator_id),"
    " (SELECT max(r.originator_version) FROM events r WHERE r.originator_id = f.originator_id),"
    " CASE WHEN json_extract(f.j, '$.type') = 'Started'"
    "  THEN coalesce(json_extract(f.j, '$.title'), '') END,"
    " coalesce(json_extract(f.j, '$.labels'), '[]'), json_extract(f.j, '$.forked_from')"
    f" FROM (SELECT e.id, e.originator_id, {_JSON.format(e='e')} AS j FROM events e"
    "  WHERE e.originator_version = 1) f",
    # A fork reads as its parent up to the fork point: its turns count the parent's
    # there, and without a response of its own it has its parent's provider and model.
    "UPDATE catalogue SET"
    " turns = turns + (SELECT count(*) FROM events r JOIN topics t ON t.id = r.topic"
    f"  WHERE t.topic = {_TURN_STARTED} AND r.originator_id = (SELECT p.id FROM catalogue p"
    "   WHERE lower(hex(p.id)) = replace(catalogue.forked_from, '-', ''))"
    "  AND r.originator_version <= (SELECT json_extract(CAST(f.state AS TEXT), '$.forked_at')"
    "   FROM events f WHERE f.originator_id = catalogue.id AND f.originator_version = 1)),"
    " provider = coalesce(provider, (SELECT p.provider FROM catalogue p"
    "  WHERE lower(hex(p.id)) = replace(catalogue.forked_from, '-', ''))),"
    " model = coalesce(model, (SELECT p.model FROM catalogue p"
    "  WHERE lower(hex(p.id)) = replace(catalogue.forked_from, '-', '')))"
    " WHERE forked_from IS NOT NULL",
)

_CATALOGUE_POSTGRES: Final = (
    "CREATE TABLE IF NOT EXISTS {s}.catalogue ("
    " id uuid PRIMARY KEY, position bigint NOT NULL, created_at timestamptz,"
    " last_activity_at timestamptz, provider text, model text, turns bigint NOT NULL,"
    " events bigint NOT NULL, title text, labels jsonb, forked_from uuid)",
    "CREATE INDEX IF NOT EXISTS catalogue_position ON {s}.catalogue (position)",
    "CREATE INDEX IF NOT EXISTS catalogue_created ON {s}.catalogue (created_at)",
    "CREATE FUNCTION pg_temp.convstore_json(b bytea) RETURNS jsonb LANGUAGE plpgsql AS $$\n"
    "BEGIN\n"
    "  RETURN convert_from(b, 'UTF8')::jsonb;\n"
    "EXCEPTION WHEN others THEN\n"
    "  RETURN NULL;\n"
    "END\n"
    "$$",
    "CREATE FUNCTION pg_temp.convstore_uuid(t text) RETURNS uuid LANGUAGE plpgsql AS $$\n"
    "BEGIN\n"
    "  RETURN t::uuid;\n"
    "EXCEPTION WHEN others THEN\n"
    "  RETURN NULL;\n"
    "END\n"
    "$$",
    "INSERT INTO {s}.catalogue"
    " SELECT f.originator_id, f.id, coalesce((f.j->>'timestamp')::timestamptz, 'epoch'),"
    " coalesce((SELECT (pg_temp.convstore_json(l.state)->>'timestamp')::timestamptz"
    "  FROM {s}.events l WHERE l.originator_id = f.originator_id"
    "  ORDER BY l.originator_version DESC LIMIT 1), (f.j->>'timestamp')::timestamptz, 'epoch'),"
    " r.j->>'provider', r.j->>'model',"
    " (SELECT count(*) FROM {s}.events r JOIN {s}.topics t ON t.id = r.topic"
    f"  WHERE t.topic = {_TURN_STARTED} AND r.originator_id = f.originator_id),"
    " (SELECT max(r.originator_version) FROM {s}.events r WHERE r.originator_id = f.originator_id),"
    " CASE WHEN f.j->>'type' = 'Started' THEN coalesce(f.j->>'title', '') END,"
    " coalesce(f.j->'labels', '[]'::jsonb), pg_temp.convstore_uuid(f.j->>'forked_from')"
    " FROM (SELECT e.id, e.originator_id, pg_temp.convstore_json(e.state) j FROM {s}.events e"
    "  WHERE e.originator_version = 1) f"
    " LEFT JOIN LATERAL (SELECT pg_temp.convstore_json(r.state) j FROM {s}.events r"
    "  JOIN {s}.topics t ON t.id = r.topic"
    f"  WHERE t.topic = {_RESPONSE_STARTED} AND r.originator_id = f.originator_id"
    "  ORDER BY r.originator_version DESC LIMIT 1) r ON true"
    " ON CONFLICT (id) DO NOTHING",
    "UPDATE {s}.catalogue c SET"
    " turns = c.turns + (SELECT count(*) FROM {s}.events r JOIN {s}.topics t ON t.id = r.topic"
    f"  WHERE t.topic = {_TURN_STARTED} AND r.originator_id = c.forked_from"
    "  AND r.originator_version <= (SELECT (pg_temp.convstore_json(f.state)->>'forked_at')::bigint"
    "   FROM {s}.events f WHERE f.originator_id = c.id AND f.originator_version = 1)),"
    " provider = coalesce(c.provider, p.provider), model = coalesce(c.model, p.model)"
    " FROM {s}.catalogue p WHERE p.id = c.forked_from",
    "DROP FUNCTION pg_temp.convstore_json(bytea)",
    "DROP FUNCTION pg_temp.convstore_uuid(text)",
    # The append function gains the catalogue's row: a new name (see `storage.postgres`).
    "DROP FUNCTION IF EXISTS {s}.{append_v2}("
    " uuid[], bigint[], integer[], bytea[], uuid, bigint, bytea, text, bigint,"
    " text[], text[], text[], integer[], uuid[], bigint[])",
    "CREATE OR REPLACE FUNCTION {s}.{append_v3}("
    " p_ids uuid[], p_versions bigint[], p_topics integer[], p_states bytea[],"
    " p_snapshot_id uuid, p_snapshot_version bigint, p_snapshot_state bytea,"
    " p_tracking_name text, p_tracking_id bigint,"
    " p_r_providers text[], p_r_servers text[], p_r_ids text[], p_r_attempts integer[],"
    " p_r_originators uuid[], p_r_versions bigint[],"
    " p_c_id uuid, p_c_created timestamptz, p_c_last timestamptz, p_c_provider text,"
    " p_c_model text, p_c_turns bigint, p_c_events bigint, p_c_title text, p_c_labels jsonb,"
    " p_c_forked_from uuid)"
    " RETURNS SETOF bigint LANGUAGE plpgsql AS $$\n"
    "BEGIN\n"
    "  LOCK TABLE {s}.events IN EXCLUSIVE MODE;\n"
    "  PERFORM pg_notify({channel}, '');\n"
    "  IF cardinality(p_r_ids) > 0 THEN\n"
    "    INSERT INTO {s}.responses\n"
    "      SELECT * FROM unnest(p_r_providers, p_r_servers, p_r_ids, p_r_attempts,"
    " p_r_originators, p_r_versions);\n"
    "  END IF;\n"
    "  RETURN QUERY INSERT INTO {s}.events (originator_id, originator_version, topic, state)\n"
    "    SELECT * FROM unnest(p_ids, p_versions, p_topics, p_states) RETURNING id;\n"
    "  INSERT INTO {s}.catalogue (id, position, turns, events)\n"
    "    SELECT e.originator_id, e.id, 0, 1 FROM {s}.events e\n"
    "    WHERE e.originator_id = ANY(p_ids) AND e.originator_version = 1\n"
    "    ON CONFLICT (id) DO NOTHING;\n"
    "  IF p_c_id IS NOT NULL THEN\n"
    "    UPDATE {s}.catalogue c SET created_at = coalesce(c.created_at, p_c_created),\n"
    "      last_activity_at = p_c_last,\n"
    "      provider = CASE WHEN p_c_provider IS NULL THEN c.provider ELSE p_c_provider END,\n"
    "      model = CASE WHEN p_c_provider IS NULL THEN c.model ELSE p_c_model END,\n"
    "      turns = p_c_turns, events = p_c_events, title = coalesce(p_c_title, c.title),\n"
    "      labels = coalesce(p_c_labels, c.labels),\n"
    "      forked_from = coalesce(p_c_forked_from, c.forked_from)\n"
    "    WHERE c.id = p_c_id;\n"
    "  END IF;\n" + _APPEND_TAIL,
)

_SETTLED_SQLITE: Final = (
    "CREATE TABLE IF NOT EXISTS settled ("
    " originator_id BLOB NOT NULL, key TEXT NOT NULL, version INTEGER NOT NULL,"
    " value BLOB NOT NULL, PRIMARY KEY (originator_id, key, version)) WITHOUT ROWID",
)
_SETTLED_POSTGRES: Final = (
    "CREATE TABLE IF NOT EXISTS {s}.settled ("
    " originator_id uuid NOT NULL, key text NOT NULL, version bigint NOT NULL,"
    " value bytea NOT NULL, PRIMARY KEY (originator_id, key, version))",
)
"""The items a snapshot's state let go (`domain.settled`), at the snapshot's version. The
table starts empty: a conversation's snapshots written before it hold every item."""

_PREFIXES_SQLITE: Final = (
    "CREATE TABLE IF NOT EXISTS prefix_key ("
    " id INTEGER PRIMARY KEY CHECK (id = 1), key BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS prefixes ("
    " position INTEGER PRIMARY KEY, digest BLOB NOT NULL, opaque BLOB NOT NULL,"
    " originator_id BLOB NOT NULL, version INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS prefixes_digest ON prefixes (digest)",
)
_PREFIXES_POSTGRES: Final = (
    "CREATE TABLE IF NOT EXISTS {s}.prefix_key ("
    " id integer PRIMARY KEY CHECK (id = 1), key bytea NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {s}.prefixes ("
    " position bigserial PRIMARY KEY, digest bytea NOT NULL, opaque bytea NOT NULL,"
    " originator_id uuid NOT NULL, version bigint NOT NULL)",
    "CREATE INDEX IF NOT EXISTS prefixes_digest ON {s}.prefixes (digest)",
)
"""Keyed digests of recorded conversations' message sequences (`storage.prefixes`), so a
request continuing one is found by its prefixes' digests, never by a scan; `prefix_key`
holds the store's key (made on first use), so a digest confirms no guessed content."""

_PREFIX_HEADS_SQLITE: Final = (
    "CREATE TABLE IF NOT EXISTS prefix_heads ("
    " originator_id BLOB NOT NULL, version INTEGER NOT NULL, shift INTEGER NOT NULL,"
    " digest BLOB NOT NULL, opaque BLOB NOT NULL, tail BLOB NOT NULL, provider TEXT NOT NULL,"
    " PRIMARY KEY (originator_id, version)) WITHOUT ROWID",
    "DELETE FROM prefixes",
)
_PREFIX_HEADS_POSTGRES: Final = (
    "CREATE TABLE IF NOT EXISTS {s}.prefix_heads ("
    " originator_id uuid NOT NULL, version bigint NOT NULL, shift bigint NOT NULL,"
    " digest bytea NOT NULL, opaque bytea NOT NULL, tail bytea NOT NULL, provider text NOT NULL,"
    " PRIMARY KEY (originator_id, version))",
    "DELETE FROM {s}.prefixes",
)
"""Where the prefix index (`adapters.proxy.prefixes`, a projection following the log under
the tracking name `prefixes`) keeps each conversation's digest chain as of a version, so it
extends the chain with new events only. The `prefixes` rows of `0005_prefixes` are deleted:
their digests were not bound to a provider, and the index derives the new ones from the
log."""

_FORGETTING_SQLITE: Final = (
    "CREATE TABLE IF NOT EXISTS store_options (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS forgetting (originator_id BLOB PRIMARY KEY) WITHOUT ROWID",
)
_FORGETTING_POSTGRES: Final = (
    "CREATE TABLE IF NOT EXISTS {s}.store_options (name text PRIMARY KEY, value text NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {s}.forgetting (originator_id uuid PRIMARY KEY)",
)
"""`store_options` records what a store was created with (`encrypt`), so encryption
cannot be half on; `forgetting` lists the conversations a `forget` is under way for (its
intent, written before the Forgotten event), so the next forget or writer finishes it."""

MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration("0001_initial", sqlite=_INITIAL_SQLITE, postgres=_INITIAL_POSTGRES),
    Migration(
        "0002_responses",
        sqlite=_RESPONSES_SQLITE,
        postgres=_RESPONSES_POSTGRES,
        readable_without=True,
    ),
    Migration(
        "0003_catalogue",
        sqlite=_CATALOGUE_SQLITE,
        postgres=_CATALOGUE_POSTGRES,
        readable_without=True,
    ),
    # Readable without: a store lacking it holds no settled snapshot to look items up for.
    Migration(
        "0004_settled",
        sqlite=_SETTLED_SQLITE,
        postgres=_SETTLED_POSTGRES,
        readable_without=True,
    ),
    # Readable without: only the proxy's threading reads it.
    Migration(
        "0005_prefixes",
        sqlite=_PREFIXES_SQLITE,
        postgres=_PREFIXES_POSTGRES,
        readable_without=True,
    ),
    # Readable without: only the proxy's threading reads it.
    Migration(
        "0006_prefix_heads",
        sqlite=_PREFIX_HEADS_SQLITE,
        postgres=_PREFIX_HEADS_POSTGRES,
        readable_without=True,
    ),
    # Readable without: a store lacking it is a plain one with nothing forgotten.
    Migration(
        "0007_forgetting",
        sqlite=_FORGETTING_SQLITE,
        postgres=_FORGETTING_POSTGRES,
        readable_without=True,
    ),
)
"""Every migration, oldest first. Append only."""

LEGACY: Final = ("0001_initial",)
"""What a store without a `migrations` table holds, when it has the `events` table."""

SQLITE_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS migrations ("
    " position INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
    " applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))"
)
POSTGRES_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS {s}.migrations ("
    " position integer PRIMARY KEY, name text NOT NULL UNIQUE,"
    " applied_at timestamptz NOT NULL DEFAULT now())"
)


def held(recorded: Sequence[str] | None, *, has_events: bool) -> list[str]:
    """What a store holds: the names its `migrations` table records (`recorded`), or for a
    store without that table, `LEGACY` when it has the events table and nothing else."""
    if recorded is not None:
        return list(recorded)
    return list(LEGACY) if has_events else []


def missing(applied: Sequence[str], known: Sequence[Migration], *, where: str) -> list[Migration]:
    """The migrations of `known` a store that applied `applied` lacks, in order.

    Raises NewerSchema when `applied` is not a prefix of `known`'s names: the store was
    written by a newer convstore (or by another history), and nothing may touch it.
    """
    names = [migration.name for migration in known]
    for position, name in enumerate(applied):
        if position < len(names) and names[position] == name:
            continue
        ours = f" (this version has {names[position]} there)" if position < len(names) else ""
        raise NewerSchema(
            f"the store at {where} has migration {name!r} at position {position + 1},"
            f" which this convstore does not know{ours}: it was written by a newer"
            " convstore; upgrade convstore to open it"
        )
    return list(known[len(applied) :])


def check_readable(applied: Sequence[str], known: Sequence[Migration], *, where: str) -> None:
    """Raise MigrationRequired unless a read-only reader can read a store at `applied`.

    Up to date is readable; so is a store lacking only migrations that are
    `readable_without`. Raises NewerSchema for a newer store.
    """
    lacking = missing(applied, known, where=where)
    if all(migration.readable_without for migration in lacking):
        return
    if not applied:
        raise StoreNotFound(
            f"there is no convstore store at {where} (a read command creates none; "
            "check --db, or record into it first)"
        )
    names = ", ".join(migration.name for migration in lacking)
    raise MigrationRequired(
        f"the store at {where} needs migration{'s' if len(lacking) > 1 else ''} {names}, which"
        f" a read-only reader does not apply: run `convstore --db URL migrate` (it applies"
        " them in place), then read again"
    )
