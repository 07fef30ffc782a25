"""A conversation's title and labels, recorded as Retitled and Relabelled events.

On both backends: the events, the aggregate's state (through a snapshot too), the
catalogue row written in the events' transaction (a read-only reader sees it), `list`'s
filters, search over titles, the readings (`show`, `export`), refusals that write nothing,
short ids and forks. A hypothesis property holds any sequence of label changes to a
plain set model.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore.adapters import cli
from convstore.adapters.cli import program  # noqa: F401  (registers the commands)
from convstore.domain import (
    Conversation,
    ConversationFilter,
    ConversationId,
    Relabelled,
    ResponseId,
    ResponseStarted,
    Retitled,
    TurnId,
    TurnStarted,
    UserMessage,
)
from convstore.domain import metadata as rules
from convstore.domain.errors import InvalidMetadata, ResponseBeingWritten, ResponseStillOpen
from convstore.projections import audit, portable, search
from convstore.storage import Store, open_store


def _run(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["--db", url, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _versions(store: Store, cid: ConversationId) -> int:
    return sum(1 for _ in store.service.events(cid))


# --- the service and the aggregate, on both backends ------------------------------------------


def test_retitle_and_relabel_append_events_and_keep_the_state(store: Store) -> None:
    service = store.service
    cid = service.start(title="first", labels=["a"])
    outcome = service.retitle(cid, "  second title  ")
    assert (outcome.title, outcome.changed) == ("second title", True)
    outcome = service.relabel(cid, add=["b", "c", "b"], remove=["a"])
    assert (outcome.labels, outcome.changed) == (("b", "c"), True)
    events = list(service.events(cid))
    assert [type(e).__name__ for e in events] == ["Started", "Retitled", "Relabelled"]
    assert events[1] == Retitled(title="second title", **_envelope(events[1]))
    assert events[2] == Relabelled(added=("b", "c"), removed=("a",), **_envelope(events[2]))
    state = service.get(cid).state
    assert (state.title, state.labels) == ("second title", ("b", "c"))
    reading = portable.load(service, cid)
    assert (reading.title, reading.labels) == ("second title", ["b", "c"])
    assert audit.audit(service.events(cid)).title == "second title"


def _envelope(event: Any) -> dict[str, Any]:
    return {
        name: getattr(event, name)
        for name in ("originator_id", "originator_version", "timestamp", "prev_hash", "hash")
    }


def test_a_change_to_what_it_has_writes_nothing(store: Store) -> None:
    service = store.service
    cid = service.start(title="same", labels=["x"])
    assert not service.retitle(cid, " same ").changed
    outcome = service.relabel(cid, add=["x"], remove=["never-there"])
    assert (outcome.labels, outcome.changed) == (("x",), False)
    assert _versions(store, cid) == 1


@pytest.mark.parametrize(
    ("title", "add", "remove"),
    [
        ("two\nlines", (), ()),
        ("x" * (rules.MAX_TITLE + 1), (), ()),
        (None, ("",), ()),
        (None, ("two words",), ()),
        (None, ("tab\there",), ()),
        (None, ("zero\u200bwidth",), ()),
        (None, ("bell\x07",), ()),
        (None, ("l" * (rules.MAX_LABEL + 1),), ()),
        (None, ("both",), ("both",)),
        (None, ("fine",), ("bad label",)),
    ],
)
def test_bad_metadata_is_refused_and_nothing_is_written(
    store: Store, title: str | None, add: tuple[str, ...], remove: tuple[str, ...]
) -> None:
    service = store.service
    cid = service.start(title="kept", labels=["both"])
    with pytest.raises(InvalidMetadata) as info:
        if title is not None:
            service.retitle(cid, title)
        else:
            service.relabel(cid, add=add, remove=remove)
    assert str(info.value)  # a message a person can act on
    assert _versions(store, cid) == 1
    state = service.get(cid).state
    assert (state.title, state.labels) == ("kept", ("both",))


def test_a_label_a_start_gave_unchecked_can_be_removed(store: Store) -> None:
    service = store.service
    cid = service.start(title="t", labels=["two words", "ok"])
    assert service.relabel(cid, remove=["two words"]).labels == ("ok",)
    with pytest.raises(InvalidMetadata):
        service.relabel(cid, remove=["two words"])  # no longer there: checked, and invalid


def test_an_empty_title_clears_it(store: Store) -> None:
    service = store.service
    cid = service.start(title="something")
    assert service.retitle(cid, "   ").title == ""
    assert service.get(cid).state.title == ""
    [summary] = [s for s in service.list(limit=1000) if s.id == cid]
    assert summary.title == ""


def test_refused_inside_a_response_a_live_writer_holds_but_fine_inside_a_turn(
    store: Store,
) -> None:
    service = store.service
    cid = service.start(title="t")
    service.append(cid, [TurnStarted(turn_id=TurnId("turn-1")), UserMessage(blocks=("hi",))])
    assert service.retitle(cid, "inside a turn").changed
    service.append(
        cid,
        [
            ResponseStarted(
                response_id=ResponseId("r1"), provider="anthropic", writer=service.writer
            )
        ],
    )
    before = _versions(store, cid)
    with pytest.raises(ResponseBeingWritten):
        service.retitle(cid, "during a response")
    with pytest.raises(ResponseBeingWritten):
        service.relabel(cid, add=["during"])
    assert _versions(store, cid) == before


def test_the_aggregate_refuses_metadata_events_that_change_nothing_or_sit_in_a_response() -> None:
    conversation = Conversation.start("t", ["a"])
    for draft in (
        Retitled(title="t"),
        Retitled(title=" untrimmed "),
        Relabelled(added=("a",)),
        Relabelled(removed=("b",)),
        Relabelled(),
    ):
        with pytest.raises(InvalidMetadata):
            conversation.record(draft)
    conversation.record(ResponseStarted(response_id=ResponseId("r"), provider="openai"))
    with pytest.raises(ResponseStillOpen):
        conversation.record(Retitled(title="new"))
    assert conversation.version == 2


def test_the_state_survives_a_snapshot_and_an_earlier_layout_is_passed_over(
    store_url: str,
) -> None:
    from convstore.storage.repository import decode_snapshot

    with open_store(store_url, snapshot_every=2, cache_size=0) as store:
        service = store.service
        cid = service.start(title="snap", labels=["one"])
        service.relabel(cid, add=["two"])  # version 2: a snapshot
        service.retitle(cid, "after the snapshot")
        snapshot = store.recorder.select_snapshot(cid)
        assert snapshot is not None and snapshot.version == 2
        decoded = decode_snapshot(snapshot.state)
        assert decoded is not None and decoded.labels == ("one", "two")
        state = service.get(cid).state
        assert (state.title, state.labels) == ("after the snapshot", ("one", "two"))
    # A tag-3 snapshot (written before the state kept title and labels) is not read.
    import msgspec

    tag3 = msgspec.msgpack.encode([3, {}, [], b"", []])
    assert decode_snapshot(tag3) is None


def test_the_catalogue_follows_in_the_same_transaction(store_url: str) -> None:
    with open_store(store_url) as writer:
        service = writer.service
        cid = service.start(title="Old name", labels=["keep", "drop"])
        service.retitle(cid, "Brand new name")
        service.relabel(cid, add=["fresh"], remove=["drop"])
        with open_store(store_url, read_only=True) as reader:
            found = reader.service.list(where=ConversationFilter(title="brand NEW"))
            assert [s.id for s in found] == [cid]
            assert found[0].labels == ("keep", "fresh")
            assert reader.service.list(where=ConversationFilter(title="Old name")) == []
            both = ConversationFilter(labels=("keep", "fresh"))
            assert [s.id for s in reader.service.list(where=both)] == [cid]
            assert reader.service.list(where=ConversationFilter(labels=("drop",))) == []


def test_search_finds_the_current_title_only_and_a_rebuild_agrees(store: Store) -> None:
    service = store.service
    cid = service.start(title="Quokka migration plan")
    other = service.start(title="unrelated")
    hits = search.search(store, "quokka")
    assert [(h.conversation_id, h.kind, h.turn_id) for h in hits] == [(cid, "title", None)]
    service.retitle(cid, "Wombat budget")
    service.retitle(other, "")  # cleared: no title rows
    assert search.search(store, "quokka") == []
    assert [h.conversation_id for h in search.search(store, "wombat")] == [cid]
    assert search.search(store, "unrelated") == []
    follower = search.follower(store)
    index = follower.projection
    assert isinstance(index, search.SearchIndex)
    before = index.dump()
    follower.rebuild()
    assert index.dump() == before


def test_a_fork_takes_the_parents_current_title_and_keeps_its_own(store: Store) -> None:
    service = store.service
    parent = service.start(title="parent")
    service.append(parent, [TurnStarted(turn_id=TurnId("turn-1"))])
    service.retitle(parent, "parent renamed")
    service.relabel(parent, add=["p"])
    fork = service.fork(parent, at=3)
    assert service.get(fork).state.title == "parent renamed"
    reading = portable.load(service, fork)
    assert (reading.title, reading.labels) == ("parent renamed", [])
    service.retitle(parent, "parent again")
    assert portable.load(service, fork).title == "parent renamed"
    assert service.relabel(fork, add=["f"]).labels == ("f",)


# --- the command line, on both backends ---------------------------------------------------------


def test_title_and_label_commands_with_short_ids(
    capsys: pytest.CaptureFixture[str], store_url: str
) -> None:
    with open_store(store_url) as store:
        cid = store.service.start(title="from start")
    short = str(cid)[:8]
    code, out, _ = _run(capsys, store_url, "title", short, "A better title", "--json")
    assert code == 0
    assert json.loads(out) == {
        "conversation_id": str(cid),
        "title": "A better title",
        "changed": True,
    }
    code, out, _ = _run(
        capsys, store_url, "label", short, "--add", "work", "--add", "urgent", "--json"
    )
    assert (code, json.loads(out)["labels"]) == (0, ["work", "urgent"])
    code, out, _ = _run(capsys, store_url, "label", short, "--add", "work", "--json")
    assert json.loads(out) == {
        "conversation_id": str(cid),
        "labels": ["work", "urgent"],
        "changed": False,
    }
    code, out, _ = _run(capsys, store_url, "label", short, "--remove", "urgent")
    assert code == 0 and "labels: work" in out
    code, out, _ = _run(capsys, store_url, "list", "--title", "better", "--json")
    [row] = json.loads(out)
    assert (row["conversation_id"], row["title"], row["labels"]) == (
        str(cid),
        "A better title",
        ["work"],
    )
    _, out, _ = _run(capsys, store_url, "list", "--label", "work", "--json")
    assert [r["conversation_id"] for r in json.loads(out)] == [str(cid)]
    _, out, _ = _run(capsys, store_url, "list", "--label", "urgent", "--json")
    assert json.loads(out) == []
    _, out, _ = _run(capsys, store_url, "search", "better", "--json")
    assert [(h["conversation_id"], h["kind"]) for h in json.loads(out)] == [(str(cid), "title")]
    _, out, _ = _run(capsys, store_url, "search", "start", "--json")
    assert json.loads(out) == []
    _, out, _ = _run(capsys, store_url, "show", short)
    assert "A better title" in out and "labels: work" in out
    _, out, _ = _run(capsys, store_url, "export", short, "--format", "json")
    document = json.loads(out)
    assert (document["title"], document["labels"]) == ("A better title", ["work"])
    _, out, _ = _run(capsys, store_url, "export", short, "--format", "md")
    assert out.startswith("# A better title") and "- labels: work" in out


def test_command_refusals_exit_2_and_write_nothing(
    capsys: pytest.CaptureFixture[str], store_url: str
) -> None:
    with open_store(store_url) as store:
        cid = store.service.start(title="kept")
    for argv in (
        ("label", str(cid)),
        ("label", str(cid), "--add", "two words"),
        ("label", str(cid), "--add", "x", "--remove", "x"),
        ("title", str(cid), "line\nbreak"),
    ):
        code, out, err = _run(capsys, store_url, *argv, "--json")
        assert code == 2, argv
        failure = json.loads(out)
        assert failure["error"] and failure["error_detail"]["type"], argv
    code, _, err = _run(capsys, store_url, "title", "0000", "x")
    assert code == 2 and "0000" in err
    with open_store(store_url) as store:
        assert _versions(store, cid) == 1


# --- the property ---------------------------------------------------------------------------------

names = st.sampled_from(["a", "b", "c", "d", "ünï", "x-y"])
changes = st.lists(st.tuples(st.lists(names, max_size=3), st.lists(names, max_size=3)), max_size=12)


@settings(max_examples=150, deadline=None)
@given(start=st.lists(names, max_size=3), steps=changes)
def test_any_sequence_of_label_changes_equals_a_set_model(
    start: list[str], steps: list[tuple[list[str], list[str]]]
) -> None:
    """Labels after any adds and removes equal a set model; each step records at most one
    event, none when it changes nothing; a replay and the portable reading agree."""
    conversation = Conversation.start("t", start)
    model = set(start)
    for add, remove in steps:
        if set(add) & set(remove):
            with pytest.raises(InvalidMetadata):
                rules.label_change(conversation.state.labels, add, remove)
            continue
        version = conversation.version
        added, removed = rules.label_change(conversation.state.labels, add, remove)
        if added or removed:
            conversation.record(Relabelled(added=added, removed=removed))
        model = (model | set(add)) - set(remove)
        labels = conversation.state.labels
        assert set(labels) == model and len(labels) == len(model)
        assert conversation.version == version + (1 if added or removed else 0)
    events = conversation.collect_events()
    replayed = Conversation.replay(conversation.id, events)
    assert replayed.state.labels == conversation.state.labels
    assert set(portable.fold(events).labels) == model


def test_a_change_that_loses_a_race_reads_again(store_url: str) -> None:
    """Another writer appends between the change's read and its write: the write conflicts,
    the change reads the conversation again and is recorded after the other's event."""
    from convstore.domain import ContextInjected

    with open_store(store_url) as store, open_store(store_url) as other:
        service = store.service
        cid = service.start(title="race")
        save = store.repository.save
        raced = []

        def save_after_another_writer(conversation: Conversation) -> None:
            if not raced:
                raced.append(other.service.append(cid, [ContextInjected(source="x", text="y")]))
            save(conversation)

        store.repository.save = save_after_another_writer  # type: ignore[method-assign]
        assert service.relabel(cid, add=["won"]).changed
        names = [type(e).__name__ for e in service.events(cid)]
        assert names == ["Started", "ContextInjected", "Relabelled"]
        assert len(raced) == 1
        assert other.service.get(cid).state.labels == ("won",)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=changes)
def test_label_changes_through_the_store_equal_a_set_model(
    store: Store, steps: list[tuple[list[str], list[str]]]
) -> None:
    """Through the service on each backend: the state, the catalogue's row (its label
    filter) and the portable reading all hold the set model's labels."""
    service = store.service
    cid = service.start(title="property")
    model: set[str] = set()
    for add, remove in steps:
        if set(add) & set(remove) or not (add or remove):
            continue
        outcome = service.relabel(cid, add=add, remove=remove)
        new = (model | set(add)) - set(remove)
        assert outcome.changed == (new != model)
        model = new
    assert set(service.get(cid).state.labels) == model
    assert set(portable.load(service, cid).labels) == model
    for name in ("a", "ünï"):
        listed = {s.id for s in service.list(limit=1000, where=ConversationFilter(labels=(name,)))}
        assert (cid in listed) == (name in model)
