"""One response, one place (scenario 27), on both backends.

A provider response is stored once in the whole store, enforced by the store's unique
index on (provider, server, response id, attempt) (migration `0002_responses`), not by a
per-conversation check: ingesting it again without `--conversation`, by one process or by
eight at once, reports it already stored and names its conversation; into another
conversation it is refused (exit 4), nothing written. A store that already held copies
before the index keeps its log as it is: the migration indexes the first copy, and
`audit` lists the others as duplicates.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from convstore.adapters.cli import main as cli
from convstore.domain import ResponseStarted, parse_conversation_id
from convstore.domain.errors import ResponseStoredElsewhere
from convstore.storage import open_store
from convstore.storage.migrations import MIGRATIONS

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "anthropic" / "web_search_citations"
CAPTURE = EXAMPLE / "1.response.sse"
WRITERS = 8


def _ingest(store_url: str, *extra: str) -> subprocess.CompletedProcess[bytes]:
    argv = [sys.executable, "-m", "convstore.adapters.cli", "--db", store_url, "ingest"]
    argv += ["--provider", "anthropic", "--json", *extra, str(CAPTURE)]
    return subprocess.run(argv, capture_output=True, check=False, timeout=120)


def _json(run: subprocess.CompletedProcess[bytes]) -> Any:
    return json.loads(run.stdout)


def _audit(store_url: str, conversation: str) -> Any:
    argv = [sys.executable, "-m", "convstore.adapters.cli", "--db", store_url, "audit", "--json"]
    audited = subprocess.run([*argv, conversation], capture_output=True, check=False)
    assert audited.returncode == 0, audited.stderr.decode()
    return json.loads(audited.stdout)


def _sql(store_url: str, *statements: str) -> None:
    with open_store(store_url) as store, store.recorder.view_transaction("test") as cursor:
        for statement in statements:
            cursor.execute(statement)


def test_ingesting_again_without_a_conversation_names_the_one_that_holds_it(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Scenario 27: the second ingest of a capture, without --conversation, reports the
    response already stored and names its conversation; no conversation is added."""
    first = _ingest(store_url)
    assert first.returncode == 0, first.stderr.decode()
    home = _json(first)["conversation_id"]
    assert cli(["--db", store_url, "ingest", "--provider", "anthropic", str(CAPTURE)]) == 0
    out = capsys.readouterr().out
    assert f"conversation {home}" in out
    assert f"already stored in conversation {home}, nothing written" in out
    again = _json(_ingest(store_url))
    assert again["conversation_id"] == home
    assert [r["already_stored"] for r in again["responses"]] == [True]
    with open_store(store_url, read_only=True) as store:
        assert [str(s.id) for s in store.service.list()] == [home]


def test_eight_ingests_at_once_store_one_copy(store_url: str) -> None:
    """Scenario 27: 8 processes ingest one capture at once, without --conversation: one
    conversation holds one copy; every run names it; the losers report "already stored"
    and leave no empty conversation behind."""
    argv = [sys.executable, "-m", "convstore.adapters.cli", "--db", store_url, "ingest"]
    argv += ["--provider", "anthropic", "--json", str(CAPTURE)]
    open_store(store_url).close()  # the store exists: the race is over the response alone
    pipe = subprocess.PIPE
    runs = [subprocess.Popen(argv, stdout=pipe, stderr=pipe) for _ in range(WRITERS)]
    results = [(run.wait(timeout=180), *run.communicate()) for run in runs]
    for code, _, err in results:
        assert code == 0, err.decode()
    reports = [json.loads(out) for _, out, _ in results]
    homes = {report["conversation_id"] for report in reports}
    assert len(homes) == 1
    stored = [report["responses"][0]["already_stored"] for report in reports]
    assert sorted(stored) == [False] + [True] * (WRITERS - 1)
    with open_store(store_url, read_only=True) as store:
        [summary] = store.service.list()
        assert str(summary.id) in homes
        events = list(store.service.events(summary.id))
    assert sum(isinstance(e, ResponseStarted) for e in events) == 1


def test_another_conversation_cannot_take_a_stored_response(store_url: str) -> None:
    """Scenario 27: with --conversation naming another conversation, the ingest is
    refused (exit 4) naming the one that holds it, and nothing is written; the service
    alone (no lookup first) is refused by the store's index all the same."""
    home = _json(_ingest(store_url))["conversation_id"]
    with open_store(store_url) as store:
        other = store.service.start("another")
        before = list(store.service.events(other))
    refused = _ingest(store_url, "--conversation", str(other))
    assert refused.returncode == 4
    assert f"already stored in conversation {home}" in refused.stderr.decode()
    with open_store(store_url) as store:
        assert list(store.service.events(other)) == before
        from convstore.adapters.wire.providers import adapter

        drafts = adapter("anthropic").decode(iter([CAPTURE.read_bytes()]), None, None)
        with pytest.raises(ResponseStoredElsewhere, match=home) as raised:
            store.service.ingest(other, drafts)
        assert str(raised.value.conversation_id) == home
        assert list(store.service.events(other)) == before


def test_the_migration_indexes_the_first_copy_and_audit_lists_the_others(
    store_url: str,
) -> None:
    """Scenario 27, existing stores: a store written before the index holds two copies of
    one response in two conversations. Migrating it keeps both in the log, indexes the
    first, and `audit` lists the second as a duplicate of the first; ingesting the capture
    again names the first's conversation."""
    first = _json(_ingest(store_url))["conversation_id"]
    _sql(store_url, "DELETE FROM responses")  # as if the index did not exist yet
    second = _json(_ingest(store_url))["conversation_id"]
    assert second != first
    _sql(
        store_url,
        "DROP TABLE responses",
        "DROP TABLE catalogue",
        "DROP TABLE settled",
        "DELETE FROM migrations WHERE name <> '0001_initial'",
    )
    with open_store(store_url) as store:
        assert store.recorder.migrated == tuple(m.name for m in MIGRATIONS[1:])
    report = _audit(store_url, second)
    [duplicate] = report["duplicates"]
    assert (duplicate["stored_in"], duplicate["attempt"]) == (first, 1)
    assert "response_duplicate" in report["flags"]
    assert _audit(store_url, first)["duplicates"] == []
    again = _json(_ingest(store_url))
    assert again["conversation_id"] == first
    with open_store(store_url, read_only=True) as store:
        for conversation in (first, second):
            events = list(store.service.events(parse_conversation_id(conversation)))
            assert sum(isinstance(e, ResponseStarted) for e in events) == 1
