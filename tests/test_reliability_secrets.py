"""Scenario 18 (RELIABILITY.md): no stored credentials, on SQLite and PostgreSQL.

Each provider's key travels in its own header (`x-api-key`, `Authorization: Bearer`,
`x-goog-api-key`) to a real HTTP server on 127.0.0.1 through `convstore ask`: one answer
that streams, then an HTTP 401 whose error body echoes the key back. Then
every reading is taken (`show`, `show --json`, `audit`, `export --all` in each format)
with every log record captured. The key is in none of them, nor in any exception text,
nor in the store: on SQLite the bytes of the database file and its `-wal` (kept alive by
a connection held open meanwhile, so it is not checkpointed away); on PostgreSQL every
column of every table of the test's schema, searched with SQL. A positive control (the
question's text) shows each search does find what is there.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import pytest

from convstore.adapters import cli
from convstore.domain import ResponseEnded, parse_conversation_id
from convstore.storage import PostgresLocation, open_store, parse_location
from tests.replay_server import ReplayServer, Reply

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
QUESTION = "Which umbrella survives the Zurich wind tomorrow"
KEY_VARIABLES = (
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "OPENAI_CHAT_API_KEY",
)


@dataclass(frozen=True)
class Provider:
    """How one provider is asked, and where its key travels."""

    name: str
    variable: str
    key: str
    header: str
    sent_as: str
    """The header's value carrying the key."""
    base_path: str
    model: str
    answer: str
    """The example whose streamed answer the server replays."""


PROVIDERS = [
    Provider(
        "anthropic",
        "ANTHROPIC_API_KEY",
        "sk-ant-api03-SECRET18anthropicKEY0123456789abcdef",
        "x-api-key",
        "{key}",
        "",
        "claude-sonnet-4-5",
        "anthropic/thinking_tool_roundtrip/1.response.sse",
    ),
    Provider(
        "openai",
        "OPENAI_API_KEY",
        "sk-proj-SECRET18openaiKEY0123456789abcdefghijkl",
        "authorization",
        "Bearer {key}",
        "/v1",
        "gpt-5.1",
        "openai/reasoning_function_roundtrip/1.response.sse",
    ),
    Provider(
        "google",
        "GEMINI_API_KEY",
        "AIzaSySECRET18googleKEY0123456789abcdefgh",
        "x-goog-api-key",
        "{key}",
        "/v1beta",
        "gemini-3-pro-preview",
        "google/thinking_function_roundtrip/2.response.sse",
    ),
    Provider(
        "openai-chat",
        "OPENAI_CHAT_API_KEY",
        "sk-SECRET18chatKEY0123456789abcdefghijklmnop",
        "authorization",
        "Bearer {key}",
        "/v1",
        "gpt-4.1",
        "openai-chat/tool_call_stream/1.response.sse",
    ),
]


def _echoing_401(key: str) -> Reply:
    """An error answer whose body quotes the key back."""
    body = json.dumps(
        {"error": {"type": "authentication_error", "message": f"invalid key {key}", "key": key}}
    ).encode()
    return Reply(status=401, body=body)


@pytest.fixture(params=PROVIDERS, ids=[p.name for p in PROVIDERS])
def provider(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Provider:
    """Each provider in turn, its key (only) in the environment, no proxy or user config."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("CONVSTORE_URL", *KEY_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CONVSTORE_CONFIG", "/dev/null")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    chosen: Provider = request.param
    monkeypatch.setenv(chosen.variable, chosen.key)
    return chosen


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """`convstore ARGV`: its exit status and everything it printed (stdout and stderr)."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out + err


def _stored_files(url: str) -> bytes:
    """The SQLite database file and its -wal and -shm, as they are on disk now (and any
    other file beside them named after the store, or in a folder so named)."""
    path = Path(url.removeprefix("sqlite:///"))
    wal = path.with_name(path.name + "-wal")
    assert wal.exists() and wal.stat().st_size > 0, "the WAL must be part of what is searched"
    found = sorted(path.parent.glob(path.name + "*"))
    files = [f for p in found for f in ([p] if p.is_file() else sorted(p.rglob("*")))]
    return b"".join(f.read_bytes() for f in files if f.is_file())


def _postgres_hits(url: str, needle: str) -> dict[str, int]:
    """Rows holding `needle` (any case) per `table.column` of the URL's schema."""
    import psycopg
    from psycopg import sql

    location = parse_location(url)
    assert isinstance(location, PostgresLocation)
    hits: dict[str, int] = {}
    with psycopg.connect(location.dsn, autocommit=True) as connection:
        columns = connection.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = %s ORDER BY 1, 2",
            (location.schema,),
        ).fetchall()
        assert {table for table, _, _ in columns} >= {"events", "snapshots", "tracking"}
        for table, column, data_type in columns:
            target = sql.Identifier(location.schema, table)
            if data_type == "bytea":
                condition = sql.SQL("position(%s::bytea in {}) > 0").format(sql.Identifier(column))
                parameter: bytes | str = needle.encode()
            else:
                condition = sql.SQL("strpos(lower({}::text), lower(%s)) > 0").format(
                    sql.Identifier(column)
                )
                parameter = needle
            row = connection.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE {}").format(target, condition),
                (parameter,),
            ).fetchone()
            assert row is not None
            if row[0]:
                hits[f"{table}.{column}"] = row[0]
    return hits


def test_no_key_in_the_store_exports_logs_or_errors(
    provider: Provider,
    store_url: str,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    """Scenario 18: a key in its provider's header is sent, and stored or shown nowhere."""
    key = provider.key
    answer = (EXAMPLES / provider.answer).read_bytes()
    printed: list[str] = []
    caplog.set_level(logging.DEBUG)
    # The store held open keeps SQLite's WAL from being checkpointed away.
    with ReplayServer() as server, open_store(store_url) as held_open:
        server.enqueue(Reply(body=answer, content_type="text/event-stream"), _echoing_401(key))
        cfg = [
            "--cfg",
            f"providers.{provider.name}.base_url={server.url}{provider.base_path}",
            "--cfg",
            f"providers.{provider.name}.model={provider.model}",
        ]
        code, out = _run(
            capsys, "--db", store_url, "ask", QUESTION, "--provider", provider.name, *cfg, "--json"
        )
        assert code == 0, out
        printed.append(out)
        conversation = json.loads(out)["conversation_id"]
        code, out = _run(
            capsys,
            "--db",
            store_url,
            "ask",
            "And the day after?",
            "--provider",
            provider.name,
            "--conversation",
            conversation,
            *cfg,
        )
        assert code == 3, out  # the 401 is recorded as a failed response
        printed.append(out)
        assert [r.headers[provider.header] for r in server.requests] == [
            provider.sent_as.format(key=key)
        ] * 2

        readings = [
            ["show", conversation],
            ["show", conversation, "--json"],
            ["audit", conversation, "--json"],
            ["list", "--json"],
        ]
        for argv in readings:
            code, out = _run(capsys, "--db", store_url, *argv)
            assert code == 0, out
            printed.append(out)
        exported = tmp_path / "exports"
        for format in ("json", "jsonl", "md", "pydantic-ai"):
            code, out = _run(
                capsys,
                "--db",
                store_url,
                "export",
                "--all",
                "--format",
                format,
                "-o",
                str(exported / format),
            )
            assert code == 0, out
            printed.append(out)
        printed.extend(p.read_text() for p in sorted(exported.rglob("*")) if p.is_file())
        assert len(printed) > 9

        events = held_open.service.events(parse_conversation_id(conversation))
        errors = [str(e.error) for e in events if isinstance(e, ResponseEnded) and e.error]
        assert errors, "the 401 is kept as the failed response's error"
        if store_url.startswith("sqlite"):
            stored = _stored_files(store_url)
            assert QUESTION.encode() in stored  # the search finds what is there
            assert key.encode() not in stored
        else:
            assert "events.state" in _postgres_hits(store_url, QUESTION)
            assert _postgres_hits(store_url, key) == {}

    assert key not in "".join(printed)
    assert key not in "".join(errors)
    assert key not in caplog.text
    assert all(key not in str(record.args) for record in caplog.records)
