"""The conversation catalogue, `list` and short ids, on a store of 2,000 conversations.

The store is built once per backend through the service in this process (a start, and
for every tenth a turn with a response, of one of two providers); `list` and the
commands taking an id then run through the command line as a person would run them.
The expected results are computed from the full listing (or from the events), never
written down.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from convstore.adapters import cli
from convstore.domain import ConversationId, ConversationService
from convstore.domain.events import (
    ResponseEnded,
    ResponseStarted,
    Started,
    TurnEnded,
    TurnStarted,
    UserMessage,
)
from convstore.domain.vocabulary import ResponseId, TurnId
from convstore.storage import open_store
from tests.conftest import BACKENDS

CONVERSATIONS = 2000
MODELS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-5"}


def _respond(service: ConversationService, cid: ConversationId, n: int, provider: str) -> None:
    service.append(
        cid,
        [
            TurnStarted(turn_id=TurnId(f"t{n}")),
            UserMessage(blocks=(f"question {n}",)),
            ResponseStarted(
                response_id=ResponseId(f"r{cid}-{n}"), provider=provider, model=MODELS[provider]
            ),
            ResponseEnded(response_id=ResponseId(f"r{cid}-{n}"), state="completed"),
            TurnEnded(turn_id=TurnId(f"t{n}")),
        ],
    )


def _build(service: ConversationService) -> None:
    for n in range(CONVERSATIONS):
        labels = [label for label, every in (("even", 2), ("third", 3)) if n % every == 0]
        cid = service.start(title=f"Trip number {n}", labels=labels)
        if n % 10 == 0:
            _respond(service, cid, n, "anthropic" if n % 20 == 0 else "openai")


@pytest.fixture(scope="module", params=BACKENDS)
def big(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A store URL holding `CONVERSATIONS` conversations (built once per backend)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('big') / 'store.db'}"
        with open_store(url) as store:
            _build(store.service)
        yield url
        return
    from uuid import uuid4

    from tests.conftest import drop_postgres_schema, require_postgres

    schema = f"t_{uuid4().hex[:12]}"
    url = f"{require_postgres()}?schema={schema}"
    with open_store(url) as store:
        _build(store.service)
    try:
        yield url
    finally:
        drop_postgres_schema(schema)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _listing(capsys: pytest.CaptureFixture[str], url: str, *options: str) -> list[dict[str, Any]]:
    code, out, err = _run(capsys, "--db", url, "list", "--json", *options)
    assert (code, err) == (0, "")
    listed: list[dict[str, Any]] = json.loads(out)
    return listed


def _everything(capsys: pytest.CaptureFixture[str], url: str) -> list[dict[str, Any]]:
    return _listing(capsys, url, "--oldest", "--limit", str(CONVERSATIONS * 2))


def test_list_is_newest_first_with_a_header_and_the_limit_line(
    capsys: pytest.CaptureFixture[str], big: str
) -> None:
    everything = _everything(capsys, big)
    assert len(everything) == CONVERSATIONS
    assert [c["title"] for c in everything[:2]] == ["Trip number 0", "Trip number 1"]
    newest = [c["id"] for c in reversed(everything)]
    assert [c["id"] for c in _listing(capsys, big)] == newest[:50]
    assert [c["id"] for c in _listing(capsys, big, "--offset", "50", "--limit", "7")] == newest[
        50:57
    ]
    code, out, err = _run(capsys, "--db", big, "list")
    lines = out.splitlines()
    assert (code, err) == (0, "")
    assert lines[0].split() == ["ID", "STARTED", "PROVIDER/MODEL", "TURNS", "TITLE"]
    assert [line[:8] for line in lines[1:-1]] == [cid[:8] for cid in newest[:50]]
    assert lines[-1] == f"50 of {CONVERSATIONS:,} shown"
    code, out, _ = _run(capsys, "--db", big, "list", "--offset", "1990", "--limit", "50")
    assert out.splitlines()[-1] == f"10 of {CONVERSATIONS:,} shown (from 1,991)"


def test_list_json_carries_every_field(capsys: pytest.CaptureFixture[str], big: str) -> None:
    everything = _everything(capsys, big)
    first, responded = everything[1], everything[10]
    assert first["conversation_id"] == first["id"]
    assert first["created_at"].endswith("Z")
    assert datetime.fromisoformat(first["created_at"]) == datetime.fromisoformat(
        first["created_on"]
    )
    assert (first["provider"], first["model"], first["turns"], first["events"]) == (
        None,
        None,
        0,
        1,
    )
    assert (responded["provider"], responded["model"], responded["turns"]) == (
        "openai",
        "gpt-5",
        1,
    )
    assert responded["events"] == 6 and responded["last_activity_at"] >= responded["created_at"]
    assert first["forked_from"] is None


@pytest.mark.parametrize(
    ("options", "keep"),
    [
        (("--provider", "anthropic"), lambda c: c["provider"] == "anthropic"),
        (("--model", "gpt-5"), lambda c: c["model"] == "gpt-5"),
        (("--title", "NUMBER 19"), lambda c: "number 19" in c["title"]),
        (("--label", "even"), lambda c: "even" in c["labels"]),
        (("--label", "even", "--label", "third"), lambda c: {"even", "third"} <= set(c["labels"])),
        (
            ("--provider", "openai", "--label", "third"),
            lambda c: c["provider"] == "openai" and "third" in c["labels"],
        ),
    ],
)
def test_each_filter(
    capsys: pytest.CaptureFixture[str], big: str, options: tuple[str, ...], keep: Any
) -> None:
    wanted = [c["id"] for c in _everything(capsys, big) if keep(c)]
    assert 0 < len(wanted) < CONVERSATIONS
    found = _listing(capsys, big, "--oldest", "--limit", "5000", *options)
    assert [c["id"] for c in found] == wanted
    code, out, _ = _run(capsys, "--db", big, "list", *options)
    assert code == 0 and out.splitlines()[-1] == f"{min(50, len(wanted))} of {len(wanted):,} shown"


def test_since_and_until(capsys: pytest.CaptureFixture[str], big: str) -> None:
    everything = _everything(capsys, big)
    middle = everything[CONVERSATIONS // 2]["created_at"]
    bound = datetime.fromisoformat(middle)
    since = [c["id"] for c in everything if datetime.fromisoformat(c["created_at"]) >= bound]
    until = [c["id"] for c in everything if datetime.fromisoformat(c["created_at"]) < bound]
    assert since and until
    found = _listing(capsys, big, "--oldest", "--limit", "5000", "--since", middle)
    assert [c["id"] for c in found] == since
    found = _listing(capsys, big, "--oldest", "--limit", "5000", "--until", middle)
    assert [c["id"] for c in found] == until
    day = middle[:10]  # a date: --until reaches to its end, --since from its start
    assert len(_listing(capsys, big, "--limit", "5000", "--until", day)) == CONVERSATIONS
    assert len(_listing(capsys, big, "--limit", "5000", "--since", day)) == CONVERSATIONS
    code, _, err = _run(capsys, "--db", big, "list", "--since", "last tuesday")
    assert code == 2 and "ISO 8601" in err


def _shortest_unique(ids: list[str], wanted: str) -> str:
    digits = [i.replace("-", "") for i in ids]
    mine = wanted.replace("-", "")
    for length in range(4, 33):
        if sum(d.startswith(mine[:length]) for d in digits) == 1:
            return mine[:length]
    raise AssertionError("ids are unique")


def test_short_ids_ambiguity_and_no_match(capsys: pytest.CaptureFixture[str], big: str) -> None:
    ids = [c["id"] for c in _everything(capsys, big)]
    target = ids[123]
    prefix = _shortest_unique(ids, target)
    code, out, err = _run(capsys, "--db", big, "show", prefix, "--json")
    assert (code, err) == (0, "") and json.loads(out)[0]["originator_id"] == target
    dashed = target[:13]  # as printed: '0b8f6c1e-1a2b'
    assert _run(capsys, "--db", big, "audit", dashed, "--json")[0] == 0
    assert _run(capsys, "--db", big, "show", target.upper())[0] == 0  # the full id
    # 2,000 ids share some four-digit prefix (all distinct would be a 1-in-10^13 chance)
    starts: dict[str, list[str]] = {}
    for cid in ids:
        starts.setdefault(cid[:4], []).append(cid)
    shared, candidates = next((k, v) for k, v in starts.items() if len(v) > 1)
    code, out, err = _run(capsys, "--db", big, "fork", shared, "--at", "1")
    assert (code, out) == (2, "")
    assert "more than one" in err and all(c in err for c in candidates)
    assert len(_everything(capsys, big)) == CONVERSATIONS  # nothing written
    free = next(p for p in (f"{n:04x}" for n in range(1 << 16)) if p not in starts)
    code, _, err = _run(capsys, "--db", big, "show", free)
    assert code == 2 and f"no conversation's id starts with '{free}'" in err
    for bad in ("abc", "zzzz-1234", "1234567g", "1" * 33):
        code, _, err = _run(capsys, "--db", big, "show", bad)
        assert code == 2 and "not a conversation id" in err, bad


def _reader_row(url: str, cid: ConversationId) -> dict[str, Any]:
    with open_store(url, read_only=True) as reader:
        entry = reader.recorder.select_catalogue_entry(cid)
        assert entry is not None
        return {
            "provider": entry.provider,
            "model": entry.model,
            "turns": entry.turns,
            "events": entry.events,
            "last": entry.last_activity_at,
            "forked_from": entry.forked_from,
        }


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_catalogue_stays_current_for_a_reader(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """Each write's row is committed with its events: a reader opened read-only after it
    (while the writer stays open) sees it."""
    url: str = request.getfixturevalue(f"{backend}_url")
    with open_store(url) as writer:
        service = writer.service
        cid = service.start(title="current")
        assert _reader_row(url, cid)["events"] == 1
        _respond(service, cid, 1, "openai")
        row = _reader_row(url, cid)
        assert (row["provider"], row["model"], row["turns"], row["events"]) == (
            "openai",
            "gpt-5",
            1,
            6,
        )
        fork = service.fork(cid, at=6, title="a fork")
        row = _reader_row(url, fork)
        assert (row["provider"], row["turns"], row["forked_from"]) == ("openai", 1, cid)
        _respond(service, fork, 2, "anthropic")
        assert _reader_row(url, fork)["provider"] == "anthropic"
        assert _reader_row(url, fork)["turns"] == 2
        assert _reader_row(url, cid)["provider"] == "openai"  # the parent's own row stays
        service.append(
            cid,
            [
                TurnStarted(turn_id=TurnId("t9")),
                ResponseStarted(response_id=ResponseId("open"), provider="anthropic"),
            ],
        )
        before = _reader_row(url, cid)
        repaired = service.repair(cid, force=True)
        assert repaired
        after = _reader_row(url, cid)
        assert after["events"] == before["events"] + len(repaired)
        assert after["last"] >= before["last"]
        assert (after["provider"], after["turns"]) == ("anthropic", 2)


def test_the_migration_backfills_an_old_store(store_url: str) -> None:
    """A store written before the catalogue: the migration makes every conversation's row
    from its events, the same as a replay of them gives."""
    from tests.test_migrations import _load_fixture

    _load_fixture(store_url)
    with open_store(store_url) as store:
        assert "0003_catalogue" in store.recorder.migrated
        service = store.service
        listed = service.list(limit=100)
        assert listed and service.count() == len(listed)
        for summary in listed:
            history = service.history(summary.id)
            own = list(service.events(summary.id))
            first = own[0]
            assert isinstance(first, Started)
            responses = [e for e in history if isinstance(e, ResponseStarted)]
            assert summary.title == first.title and summary.labels == first.labels
            assert summary.events == len(own)
            assert summary.turns == sum(isinstance(e, TurnStarted) for e in history)
            assert summary.provider == (responses[-1].provider if responses else None)
            assert summary.last_activity_at is not None
            assert abs((summary.last_activity_at - own[-1].timestamp).total_seconds()) < 0.001


def test_a_reader_lists_a_store_without_the_catalogue(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store from before the catalogue, read without migrating: `list` reads the first
    events (newest first, the count line too), a short id is found among the events, and
    a filter, which needs the catalogue, is refused with what to run."""
    from tests.test_migrations import _load_fixture, _snapshot_of

    _load_fixture(store_url)
    before = _snapshot_of(store_url)
    with open_store(store_url, read_only=True) as reader:
        oldest = [s.id for s in reader.service.list(limit=100)]
    code, out, err = _run(capsys, "--db", store_url, "list")
    lines = out.splitlines()
    assert (code, err) == (0, "")
    assert [line[:8] for line in lines[1:-1]] == [str(c)[:8] for c in reversed(oldest)]
    assert lines[-1] == f"{len(oldest)} of {len(oldest)} shown"
    code, out, _ = _run(capsys, "--db", store_url, "show", str(oldest[0])[:8], "--json")
    assert code == 0 and json.loads(out)[0]["originator_id"] == str(oldest[0])
    code, _, err = _run(capsys, "--db", store_url, "list", "--title", "x")
    assert code == 2 and "0003_catalogue" in err and "migrate" in err
    assert _snapshot_of(store_url) == before  # nothing written
