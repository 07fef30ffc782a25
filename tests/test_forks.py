"""Forks (scenario 27): a conversation that goes on from another's version, on both backends.

`convstore fork ID --at VERSION` starts a conversation recorded as forked from (ID,
VERSION). It stores that reference and its own events, never a copy: its readings (show,
export, replay, the next ingest's history) fold the parent up to that version, then its
own events; the parent is untouched. A fork of a fork reads through both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from convstore.adapters.cli import main as cli
from convstore.adapters.recording import jobs
from convstore.adapters.wire.providers import adapter
from convstore.domain import ConversationId, parse_conversation_id
from convstore.domain.errors import InvariantViolation
from convstore.domain.events import ResponseEnded, ResponseStarted, Started, UserMessage
from convstore.projections import portable
from convstore.storage import Store, open_store

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "anthropic" / "thinking_tool_roundtrip"


def _exchanges(store: Store) -> ConversationId:
    """The example's exchanges 1 and 2 (a tool call, its result, the answer), recorded."""
    first = jobs.ingest(
        store.service,
        "anthropic",
        [EXAMPLE / "1.response.sse"],
        request=(EXAMPLE / "1.request.json").read_bytes(),
        title="parent",
    )
    assert first.conversation_id is not None and first.exit_code == 0
    second = jobs.ingest(
        store.service,
        "anthropic",
        [EXAMPLE / "2.response.json"],
        request=(EXAMPLE / "2.request.json").read_bytes(),
        conversation_id=first.conversation_id,
    )
    assert second.exit_code == 0, second.error
    return first.conversation_id


def _turns(reading: portable.PortableConversation) -> Any:
    return msgspec.to_builtins(reading.turns)


def _point(store: Store, cid: ConversationId) -> int:
    """The version the first response ended at (its turn goes on: it asked for a tool)."""
    return next(
        e.originator_version for e in store.service.events(cid) if isinstance(e, ResponseEnded)
    )


def test_a_fork_reads_its_parent_up_to_the_fork_point_then_its_own_events(
    store_url: str,
) -> None:
    """Scenario 27, forks: the fork stores one event (its Started, naming the parent and
    version); it reads as the parent up to that version; events recorded in it follow,
    numbered after the fork point; the parent is unchanged; replay of the fork at the
    fork point rebuilds the request the parent's prefix would."""
    with open_store(store_url) as store:
        parent = _exchanges(store)
        at = _point(store, parent)
        before = list(store.service.events(parent))
        fork = store.service.fork(parent, at=at, title="the fork")
        [started] = store.service.events(fork)
        assert isinstance(started, Started)
        assert (started.forked_from, started.forked_at, started.title) == (parent, at, "the fork")
        reading = portable.load(store.service, fork)
        prefix = portable.fold([e for e in before if e.originator_version <= at])
        assert reading.title == "the fork" and reading.version == at
        assert _turns(reading) == _turns(prefix)
        encode = adapter("anthropic").need_encode()
        at_prefix = encode([e for e in before if e.originator_version <= at], {}, None, None)
        assert jobs.replay(store.service, fork, "anthropic").body == at_prefix.body
        store.service.add_user_input(fork, [UserMessage(blocks=("and in the fork?",))])
        own = list(store.service.events(fork))
        assert [e.originator_version for e in own] == list(range(1, len(own) + 1))
        assert isinstance(own[0], Started) and isinstance(own[-1], UserMessage)
        history = store.service.history(fork)
        assert [e.originator_version for e in history] == list(range(1, at + len(own)))
        assert isinstance(history[-1], UserMessage)
        assert list(store.service.events(parent)) == before
        body = jobs.replay(store.service, fork, "anthropic").body
        assert body["messages"][-1]["content"][-1]["text"] == "and in the fork?"


def test_a_fork_of_a_fork_reads_through_both(store_url: str) -> None:
    """Scenario 27, forks: a fork of a fork folds the first parent, then the first fork's
    own events, then its own."""
    with open_store(store_url) as store:
        parent = _exchanges(store)
        at = _point(store, parent)
        fork = store.service.fork(parent, at=at)
        store.service.add_user_input(fork, [UserMessage(blocks=("first fork",))])
        newest = store.service.history(fork)[-1].originator_version
        again = store.service.fork(fork, at=newest)
        store.service.add_user_input(again, [UserMessage(blocks=("second fork",))])
        texts = [
            block
            for e in store.service.history(again)
            if isinstance(e, UserMessage)
            for block in e.blocks
        ]
        assert texts[-2:] == ["first fork", "second fork"]
        question = next(  # a version of the first parent's part, outside any response
            e.originator_version for e in store.service.events(parent) if isinstance(e, UserMessage)
        )
        earlier = store.service.fork(fork, at=question)
        assert portable.load(store.service, earlier).title == "parent"  # its parent's
        assert store.service.history(earlier)[-1].originator_version == question
        assert isinstance(store.service.history(earlier)[-1], UserMessage)


def test_a_fork_point_must_be_a_version_outside_a_response(store_url: str) -> None:
    """Scenario 27, forks: a version the conversation does not have, or one inside a
    response, is refused (InvariantViolation, exit 2) and nothing is written."""
    with open_store(store_url) as store:
        parent = _exchanges(store)
        start = next(
            e.originator_version
            for e in store.service.events(parent)
            if isinstance(e, ResponseStarted)
        )
        newest = list(store.service.events(parent))[-1].originator_version
        for at in (0, newest + 1, start):
            with pytest.raises(InvariantViolation):
                store.service.fork(parent, at=at)
        assert len(store.service.list()) == 1


def test_convstore_fork_json_and_show(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`convstore fork ID --at VERSION --json` names the new conversation; `show` of the
    fork prints the parent's part; `ingest --conversation FORK` goes on from it."""
    with open_store(store_url) as store:
        parent = _exchanges(store)
        at = _point(store, parent)
    assert cli(["--db", store_url, "fork", str(parent), "--at", str(at), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["forked_from"], data["forked_at"]) == (str(parent), at)
    fork = parse_conversation_id(data["conversation_id"])
    assert cli(["--db", store_url, "show", str(fork)]) == 0
    shown = capsys.readouterr().out
    assert cli(["--db", store_url, "show", str(parent)]) == 0
    whole = capsys.readouterr().out.splitlines()
    own = ("conversation", "started", "chain:")  # the fork's id, start and chain head
    body = [line for line in shown.splitlines() if not line.startswith(own)]
    assert 1 < len(body) < len(whole)
    # The parent's part, nothing else: at the fork point its tool call is not answered yet.
    assert set(body) - set(whole) <= {"      no result"}
    assert cli(["--db", store_url, "fork", str(parent), "--at", "0"]) == 2
    assert "error" in capsys.readouterr().err
