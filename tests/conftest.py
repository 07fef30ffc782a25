"""Shared fixtures: a store URL on each backend, and an opened store.

PostgreSQL tests use the server at `CONVSTORE_TEST_POSTGRES` (default: the local `test`
database) and get a schema of their own, `t_<random>`, dropped afterwards. When the
server is unreachable they skip with a one-line reason, unless
`CONVSTORE_REQUIRE_POSTGRES=1` (CI sets it): then they fail.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, LiteralString
from uuid import uuid4

import pytest

from convstore.storage import Store, open_store

POSTGRES_DSN = os.environ.get(
    "CONVSTORE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)
"""The PostgreSQL database tests create their schemas in."""

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
"""Parameters for a test that runs on every backend (see `store_url`)."""


@functools.cache
def _postgres_problem() -> str | None:
    """Why PostgreSQL cannot be used (checked once per session), or None."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install '.[postgres]')"
    try:
        psycopg.connect(POSTGRES_DSN, connect_timeout=3).close()
    except psycopg.Error as error:
        return f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
    return None


def require_postgres() -> str:
    """The test database's DSN; skips the test (fails it under CI) when it is unreachable."""
    problem = _postgres_problem()
    if problem is not None:
        message = f"PostgreSQL at {POSTGRES_DSN} unreachable: {problem}"
        if os.environ.get("CONVSTORE_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"{message} (CONVSTORE_REQUIRE_POSTGRES=1)", pytrace=False)
        pytest.skip(message)
    return POSTGRES_DSN


def _on_schema(statement: LiteralString, schema: str) -> None:
    """Run `statement` with `{}` replaced by the quoted schema name."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as connection:
        connection.execute("SET lock_timeout = '10s'")
        connection.execute(sql.SQL(statement).format(sql.Identifier(schema)))


def drop_postgres_schema(schema: str) -> None:
    """Drop a schema of the test database with everything in it."""
    _on_schema("DROP SCHEMA IF EXISTS {} CASCADE", schema)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """An SQLite store URL (absolute form) in the test's temporary folder."""
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A PostgreSQL store URL naming a fresh schema, dropped after the test."""
    dsn = require_postgres()
    schema = f"t_{uuid4().hex[:16]}"
    _on_schema("CREATE SCHEMA {}", schema)
    try:
        yield f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
    finally:
        drop_postgres_schema(schema)


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest) -> str:
    """A store URL on each backend in turn."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """An opened store on each backend in turn, closed after the test."""
    with open_store(store_url) as opened:
        yield opened


# --- the test-time budget -------------------------------------------------------------------

BUDGET_SECONDS = {"not soak": 12 * 60, "soak": 20 * 60}
"""`make test` (the default `-m 'not soak'`) and `make soak` on the 2-core CI machine; CI's
90 minutes must hold both with room for later work. Move slow cases to soak before the
budget is hit."""

_MODULE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase's time to its test module's total."""
    module = report.nodeid.split("::", 1)[0]
    _MODULE_SECONDS[module] = _MODULE_SECONDS.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Print the time of each test module, slowest first, against the run's budget."""
    if not _MODULE_SECONDS:
        return
    total = sum(_MODULE_SECONDS.values())
    budget = BUDGET_SECONDS.get(config.option.markexpr)
    terminalreporter.section("time per test module")
    for module, seconds in sorted(_MODULE_SECONDS.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{seconds:8.1f}s  {module}")
    line = f"{total:8.1f}s  in all"
    if budget is not None:
        line += f" ({total / budget:.0%} of the {budget // 60}-minute budget)"
        if total > 0.8 * budget:
            line += ": move slow cases to soak"
    terminalreporter.write_line(line)
