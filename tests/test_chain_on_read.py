"""`show`, `export` and `audit` verify the chain as they read (issue 13, item 7).

A real store is tampered with outside convstore (SQL on the events table, as in
`test_verify`): a stored event's bytes are edited so that they still decode. Each reader
must still show what is stored, warn on stderr, say where the chain breaks (`--json`:
`chain: {intact, first_bad_version, …}`) and exit 5; an untouched conversation in the
same store reads as before (exit 0). A fork reads its parent up to the fork point: a
change there breaks the fork's reading, a change after it does not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

from convstore.adapters import cli
from convstore.adapters.cli.integrity import EXIT_BROKEN
from convstore.domain import ConversationId, UserMessage
from convstore.storage import Store, open_store
from tests.test_verify import Tamperer, record

QUESTION_WORD = b"matcha"
"""A word of the stored question, edited in its bytes."""


@pytest.fixture
def tampered(store_url: str) -> Iterator[tuple[str, UUID, UUID, int]]:
    """A store with two conversations: the first's user message edited in its stored bytes
    (it still decodes); the second untouched. Yields (url, tampered, intact, version)."""
    with open_store(store_url) as store:
        broken = record(store.service, "web_search_citations", (1,))
        intact = record(store.service, "pause_turn", (1,))
        version = _user_version(store, broken)
        tamperer = Tamperer(store)
        state = tamperer.state(broken, version)
        assert QUESTION_WORD in state
        tamperer.set_state(broken, version, state.replace(QUESTION_WORD, b"coffee"))
        tamperer.close()
    yield store_url, broken, intact, version


def _user_version(store: Store, conversation: UUID) -> int:
    return next(
        e.originator_version
        for e in store.service.events(ConversationId(conversation))
        if isinstance(e, UserMessage)
    )


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_show_warns_shows_what_is_stored_and_exits_5(
    tampered: tuple[str, UUID, UUID, int], capsys: pytest.CaptureFixture[str]
) -> None:
    url, broken, intact, version = tampered
    code, out, err = _run(capsys, "--db", url, "show", str(broken))
    assert code == EXIT_BROKEN
    assert "coffee" in out and "matcha cafés" in out  # the edited question, as stored
    assert f"chain: DOES NOT VERIFY · breaks at version {version} · shown as stored" in out
    assert f"conversation {broken} does not verify" in err
    assert f"breaks at version {version}" in err and "convstore verify" in err
    code, out, err = _run(capsys, "--db", url, "show", str(intact))
    assert (code, err) == (0, "") and "chain: intact · head " in out


def test_show_json_stays_an_array_and_chain_is_opt_in(
    tampered: tuple[str, UUID, UUID, int], capsys: pytest.CaptureFixture[str]
) -> None:
    url, broken, _, version = tampered
    code, out, err = _run(capsys, "--db", url, "show", str(broken), "--json")
    events = json.loads(out)
    assert code == EXIT_BROKEN and isinstance(events, list) and "does not verify" in err
    assert any("coffee" in json.dumps(e) for e in events)
    code, out, _ = _run(capsys, "--db", url, "show", str(broken), "--json", "--chain")
    data = json.loads(out)
    assert code == EXIT_BROKEN and data["events"] == events
    chain = data["chain"]
    assert (chain["intact"], chain["first_bad_version"]) == (False, version)
    assert chain["problems"][0] == {
        "conversation_id": str(broken),
        "version": version,
        "problem": chain["problems"][0]["problem"],
    }
    assert chain["head"] == events[-1]["hash"]
    code, _, err = _run(capsys, "--db", url, "show", str(broken), "--chain")
    assert code == 2 and "--json" in err


def test_export_warns_says_so_at_the_top_and_exits_5(
    tampered: tuple[str, UUID, UUID, int], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url, broken, intact, version = tampered
    code, out, err = _run(capsys, "--db", url, "export", str(broken), "--format", "md")
    assert code == EXIT_BROKEN and "does not verify" in err
    top = out.split("\n## ", 1)[0]
    assert f"**does not verify**: it breaks at version {version}" in top and "coffee" in out
    target = tmp_path / "one.md"
    argv = ["--db", url, "export", str(broken), "--format", "md", "-o", str(target), "--json"]
    code, out, err = _run(capsys, *argv)
    summary = json.loads(out)
    assert code == EXIT_BROKEN and target.exists()
    assert summary["chain"] == {
        "intact": False,
        "first_bad_version": version,
        "broken": [{"conversation_id": str(broken), "first_bad_version": version}],
    }
    argv = ["--db", url, "export", "--all", "--format", "md", "-o", str(tmp_path / "all"), "--json"]
    code, out, err = _run(capsys, *argv)
    summary = json.loads(out)
    assert code == EXIT_BROKEN and summary["conversations"] == 2  # both exported
    assert summary["chain"]["broken"] == [
        {"conversation_id": str(broken), "first_bad_version": version}
    ]
    assert summary["chain"]["first_bad_version"] is None and err.count("does not verify") == 1
    code, out, err = _run(capsys, "--db", url, "export", str(intact), "--format", "md")
    assert (code, err) == (0, "") and ", verified intact\n" in out


def test_audit_reports_the_chain_and_exits_5(
    tampered: tuple[str, UUID, UUID, int], capsys: pytest.CaptureFixture[str]
) -> None:
    url, broken, intact, version = tampered
    code, out, err = _run(capsys, "--db", url, "audit", str(broken), "--json")
    report = json.loads(out)
    assert code == EXIT_BROKEN and "does not verify" in err
    assert (report["chain"]["intact"], report["chain"]["first_bad_version"]) == (False, version)
    code, out, _ = _run(capsys, "--db", url, "audit", str(broken))
    assert code == EXIT_BROKEN
    assert f"chain DOES NOT VERIFY: it breaks at version {version}" in out
    code, out, err = _run(capsys, "--db", url, "audit", "--all", "--json")
    reports = {r["conversation_id"]: r["chain"]["intact"] for r in json.loads(out)}
    assert code == EXIT_BROKEN and reports == {str(broken): False, str(intact): True}
    code, out, err = _run(capsys, "--db", url, "audit", str(intact))
    assert (code, err) == (0, "") and "chain verified: intact" in out


def test_a_fork_reads_its_parents_chain_up_to_the_fork_point(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_store(store_url) as store:
        parent = record(store.service, "web_search_citations", (1,))
        newest = list(store.service.events(ConversationId(parent)))[-1].originator_version
        at = newest - 1  # before the TurnEnded: the whole response is in the fork's reading
        fork = store.service.fork(ConversationId(parent), at=at)
        tamperer = Tamperer(store)
        last = tamperer.state(parent, newest)
        assert b'"turn-1"' in last
        tamperer.set_state(parent, newest, last.replace(b'"turn-1"', b'"turn-9"'))
    code, out, err = _run(capsys, "--db", store_url, "show", str(fork))
    assert (code, err) == (0, "")  # a change after the fork point: not in the fork's reading
    assert cli.main(["--db", store_url, "show", str(parent)]) == EXIT_BROKEN
    capsys.readouterr()
    with open_store(store_url) as store:
        version = _user_version(store, parent)
        state = tamperer.state(parent, version)
        tamperer.set_state(parent, version, state.replace(QUESTION_WORD, b"coffee"))
        tamperer.close()
    code, out, err = _run(capsys, "--db", store_url, "show", str(fork), "--json", "--chain")
    chain = json.loads(out)["chain"]
    assert code == EXIT_BROKEN and f"conversation {fork} does not verify" in err
    assert (chain["intact"], chain["first_bad_version"]) == (False, version)
    assert {p["conversation_id"] for p in chain["problems"]} == {str(parent)}
    code, out, err = _run(capsys, "--db", store_url, "audit", str(fork))
    assert (code, err) == (0, "")  # `audit` covers the fork's own events, which hold


def test_bytes_that_are_no_event_cannot_be_shown_and_exit_5(
    tampered: tuple[str, UUID, UUID, int], capsys: pytest.CaptureFixture[str]
) -> None:
    url, broken, _, version = tampered
    with open_store(url) as store:
        tamperer = Tamperer(store)
        tamperer.set_state(broken, version, b"\x00 not an event")
        tamperer.close()
    for argv in (["show", str(broken)], ["export", str(broken), "--format", "md"]):
        code, out, err = _run(capsys, "--db", url, *argv)
        assert code == EXIT_BROKEN and out == "", argv
        assert "does not verify" in err and "cannot be read" in err, argv


def test_replay_builds_what_is_stored_warns_and_exits_5(
    tampered: tuple[str, UUID, UUID, int], capsys: pytest.CaptureFixture[str]
) -> None:
    url, broken, intact, version = tampered
    code, out, err = _run(capsys, "--db", url, "replay", str(broken), "--to", "anthropic")
    assert code == EXIT_BROKEN and "coffee" in json.dumps(json.loads(out))  # as stored
    assert f"conversation {broken} does not verify" in err and f"version {version}" in err
    argv = ["--db", url, "replay", str(broken), "--to", "anthropic", "--dry-run", "--json"]
    code, out, err = _run(capsys, *argv)
    assert code == EXIT_BROKEN and isinstance(json.loads(out), list) and "does not verify" in err
    code, out, err = _run(capsys, "--db", url, "replay", str(intact), "--to", "anthropic")
    assert (code, err) == (0, "") and json.loads(out)["messages"]
