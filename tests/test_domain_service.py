"""ConversationService over an in-memory repository: commands, queries, repairs, writers."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from convstore.domain import (
    ActivityId,
    AssistantText,
    CallId,
    Conversation,
    ConversationEvent,
    ConversationId,
    ConversationRepository,
    ConversationService,
    ConversationSummary,
    Event,
    HostedActivity,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    Started,
    ToolCallRequested,
    ToolCallResponded,
    TurnEnded,
    TurnId,
    TurnStarted,
    UserMessage,
    Writer,
    new_conversation_id,
)
from convstore.domain.chain import verify_stored
from convstore.domain.errors import (
    ConcurrencyConflict,
    ConversationNotFound,
    DuplicateId,
    ResponseStillOpen,
    WriterAlive,
)
from convstore.domain.service import INTERRUPTED_RESULT, ConversationFilter
from convstore.domain.vocabulary import Lifecycle
from convstore.domain.writers import WriterStatus, process_writer_id

_decode = msgspec.json.Decoder(ConversationEvent).decode


class InMemoryRepository:
    """A `ConversationRepository` keeping each conversation's encoded events in a list."""

    def __init__(self) -> None:
        self.stored: dict[ConversationId, list[bytes]] = {}
        self.saves = 0

    def load(self, conversation_id: ConversationId) -> Conversation:
        return Conversation.replay(conversation_id, self.events(conversation_id))

    def save(self, conversation: Conversation) -> None:
        pending = conversation.pending
        if not pending:
            return
        stored = self.stored.get(conversation.id, [])
        if pending[0].originator_version != len(stored) + 1:
            raise ConcurrencyConflict(
                f"conversation {conversation.id} is at version {len(stored)}, "
                f"not {pending[0].originator_version - 1}; reload and retry"
            )
        self.stored.setdefault(conversation.id, []).extend(conversation.encoded)
        conversation.collect_events()
        self.saves += 1

    def events(self, conversation_id: ConversationId, *, after: int = 0) -> Iterator[Event]:
        try:
            stored = self.stored[conversation_id]
        except KeyError:
            raise ConversationNotFound(f"no conversation {conversation_id}") from None
        return iter([_decode(state) for state in stored[after:]])

    def summaries(
        self,
        *,
        offset: int = 0,
        limit: int = 50,
        newest_first: bool = False,
        where: ConversationFilter | None = None,
    ) -> list[ConversationSummary]:
        chosen = [s for s in self._all() if _lets_through(where or ConversationFilter(), s)]
        if newest_first:
            chosen.reverse()
        return chosen[offset : offset + limit]

    def count(self, where: ConversationFilter | None = None) -> int:
        return len(self.summaries(limit=len(self.stored), where=where))

    def matching(self, prefix: str, *, limit: int) -> list[ConversationId]:
        digits = prefix.replace("-", "").lower()
        return sorted(c for c in self.stored if c.hex.startswith(digits))[:limit]

    def _all(self) -> list[ConversationSummary]:
        out = []
        for conversation_id, stored in self.stored.items():
            first = _decode(stored[0])
            assert isinstance(first, Started)
            events = [_decode(state) for state in stored]
            responses = [e for e in events if isinstance(e, ResponseStarted)]
            out.append(
                ConversationSummary(
                    id=conversation_id,
                    title=first.title,
                    labels=first.labels,
                    created_on=first.timestamp,
                    events=len(stored),
                    provider=responses[-1].provider if responses else None,
                    model=responses[-1].model if responses else None,
                )
            )
        return out

    def verify(self, conversation_id: ConversationId) -> list[object]:
        stored = self.stored[conversation_id]
        return list(verify_stored((n, s) for n, s in enumerate(stored, start=1)))


def _lets_through(where: ConversationFilter, summary: ConversationSummary) -> bool:
    """The filter over what the fake repository keeps (every condition must hold)."""
    return (
        where.provider in (None, summary.provider)
        and where.model in (None, summary.model)
        and (where.since is None or summary.created_on >= where.since)
        and (where.until is None or summary.created_on < where.until)
        and (where.title is None or where.title.lower() in summary.title.lower())
        and set(where.labels) <= set(summary.labels)
    )


R1, R2 = ResponseId("msg_1"), ResponseId("msg_2")


@pytest.fixture
def repository() -> InMemoryRepository:
    return InMemoryRepository()


@pytest.fixture
def service(repository: InMemoryRepository) -> ConversationService:
    return ConversationService(repository)


def types(events: Sequence[Event]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_the_test_repository_satisfies_the_protocol(repository: InMemoryRepository) -> None:
    typed: ConversationRepository = repository
    assert typed is repository


# --- start, append, get, events -------------------------------------------------------------------


def test_start_append_get_and_events_in_order(
    service: ConversationService, repository: InMemoryRepository
) -> None:
    cid = service.start("Weather", ["demo", "de"])
    recorded = service.append(
        cid,
        [
            TurnStarted(turn_id=TurnId("t1")),
            UserMessage(blocks=("Wetter? 😀",)),
            ResponseStarted(response_id=R1, provider="anthropic"),
            AssistantText(response_id=R1, text="Sonnig."),
            ResponseEnded(response_id=R1, state="completed", finish_reason="stop"),
        ],
    )
    assert [e.originator_version for e in recorded] == [2, 3, 4, 5, 6]
    assert all(e.originator_id == cid for e in recorded)
    recorded += service.append(cid, [TurnEnded(turn_id=TurnId("t1"))])

    conversation = service.get(cid)
    assert (conversation.id, conversation.version) == (cid, 7)
    assert conversation.pending == ()
    events = list(service.events(cid))
    assert [e.originator_version for e in events] == list(range(1, 8))
    assert types(events) == [
        "Started",
        "TurnStarted",
        "UserMessage",
        "ResponseStarted",
        "AssistantText",
        "ResponseEnded",
        "TurnEnded",
    ]
    assert events[1:] == recorded
    first = events[0]
    assert isinstance(first, Started)
    assert (first.title, first.labels) == ("Weather", ("demo", "de"))
    assert [e.originator_version for e in service.events(cid, after=5)] == [6, 7]
    assert list(service.events(cid, after=7)) == []
    assert repository.verify(cid) == []


def test_a_refused_batch_writes_nothing(
    service: ConversationService, repository: InMemoryRepository
) -> None:
    cid = service.start()
    service.append(cid, [ResponseStarted(response_id=R1, provider="openai")])
    before = list(repository.stored[cid])
    with pytest.raises(DuplicateId):
        service.append(
            cid,
            [
                ToolCallRequested(response_id=R1, call_id=CallId("c"), name="f"),
                ToolCallRequested(response_id=R1, call_id=CallId("c"), name="f"),
            ],
        )
    assert repository.stored[cid] == before
    assert service.get(cid).open_calls() == []


def test_unknown_conversations_are_not_found(service: ConversationService) -> None:
    missing = new_conversation_id()
    with pytest.raises(ConversationNotFound, match=str(missing)):
        service.get(missing)
    with pytest.raises(ConversationNotFound):
        service.append(missing, [UserMessage(blocks=("x",))])
    with pytest.raises(ConversationNotFound):
        service.repair(missing)


def test_list_pages_in_start_order(service: ConversationService) -> None:
    ids = [service.start(f"c{n}", [f"n{n}"]) for n in range(5)]
    service.append(ids[3], [UserMessage(blocks=("a",)), UserMessage(blocks=("b",))])
    pages = [service.list(offset=o, limit=2) for o in (0, 2, 4, 6)]
    assert [len(p) for p in pages] == [2, 2, 1, 0]
    flat = [s for page in pages for s in page]
    assert [s.id for s in flat] == ids
    assert [s.title for s in flat] == [f"c{n}" for n in range(5)]
    assert [s.labels for s in flat] == [(f"n{n}",) for n in range(5)]
    assert [s.events for s in flat] == [1, 1, 1, 3, 1]
    assert [s.created_on for s in flat] == sorted(s.created_on for s in flat)
    assert service.list() == flat
    assert service.list(newest_first=True) == flat[::-1]
    assert service.list(where=ConversationFilter(labels=("n3",))) == [flat[3]]
    assert service.count(ConversationFilter(title="C")) == 5
    assert service.matching(str(ids[2])[:13]) == [ids[2]]


def test_racing_writers_get_one_success_and_one_conflict(
    service: ConversationService, repository: InMemoryRepository
) -> None:
    cid = service.start()
    first, second = repository.load(cid), repository.load(cid)
    first.record(UserMessage(blocks=("first",)))
    second.record(UserMessage(blocks=("second",)))
    repository.save(first)
    with pytest.raises(ConcurrencyConflict):
        repository.save(second)
    events = list(service.events(cid))
    assert types(events) == ["Started", "UserMessage"]
    assert isinstance(events[1], UserMessage)
    assert events[1].blocks == ("first",)
    # the loser reloads and retries
    service.append(cid, [UserMessage(blocks=("second",))])
    assert service.get(cid).version == 3
    assert repository.verify(cid) == []


# --- repair --------------------------------------------------------------------------------------


def _interrupted(service: ConversationService) -> ConversationId:
    """Turn 1: r1 asked for c1 and c2 and ran a1 (still pending); c1 was answered.
    Then r2 asked for c3 and the writer died: r2 is open, c2 and c3 are orphans."""
    cid = service.start()
    service.append(
        cid,
        [
            TurnStarted(turn_id=TurnId("t1")),
            UserMessage(blocks=("go",)),
            ResponseStarted(response_id=R1, provider="anthropic"),
            ToolCallRequested(response_id=R1, call_id=CallId("c1"), name="f"),
            ToolCallRequested(response_id=R1, call_id=CallId("c2"), name="f"),
            HostedActivity(
                activity_id=ActivityId("a1"),
                name="web_search",
                state="started",
                response_id=R1,
            ),
            ResponseEnded(response_id=R1, state="completed", finish_reason="tool_use"),
            ToolCallResponded(call_id=CallId("c1"), content="42"),
            ResponseStarted(response_id=R2, provider="anthropic", writer=another_writer()),
            ToolCallRequested(response_id=R2, call_id=CallId("c3"), name="g"),
        ],
    )
    return cid


def test_repair_closes_the_open_response_and_answers_orphaned_calls(
    service: ConversationService, repository: InMemoryRepository
) -> None:
    cid = _interrupted(service)
    version = service.get(cid).version
    repaired = service.repair(cid)

    assert types(repaired) == ["ResponseEnded", "ToolCallResponded", "ToolCallResponded"]
    ended = repaired[0]
    assert isinstance(ended, ResponseEnded)
    assert (ended.response_id, ended.state) == (R2, "abandoned")
    answers = [e for e in repaired if isinstance(e, ToolCallResponded)]
    assert [a.call_id for a in answers] == ["c2", "c3"]  # oldest first, c1 left alone
    for answer in answers:
        assert (answer.is_error, answer.synthetic, answer.content) == (
            True,
            True,
            INTERRUPTED_RESULT,
        )
    assert [e.originator_version for e in repaired] == [version + 1, version + 2, version + 3]

    conversation = service.get(cid)
    assert conversation.state.open_response is None
    assert conversation.open_calls() == []
    # hosted work is invisible to the repair: still pending, nothing fabricated for it
    assert list(conversation.pending_activities()) == ["a1"]
    assert not any(isinstance(e, HostedActivity) for e in repaired)
    assert not any(
        isinstance(e, ToolCallResponded) and e.call_id == "a1" for e in service.events(cid)
    )
    # appended, never rewritten; and a second repair has nothing to do
    assert repository.verify(cid) == []
    saves = repository.saves
    assert service.repair(cid) == []
    assert repository.saves == saves


def test_repair_of_a_healthy_conversation_writes_nothing(
    service: ConversationService, repository: InMemoryRepository
) -> None:
    cid = service.start()
    service.append(cid, [UserMessage(blocks=("hi",))])
    saves = repository.saves
    assert service.repair(cid) == []
    assert repository.saves == saves


# --- abandoning hosted activities ----------------------------------------------------------------


def test_abandon_activities_by_provider_then_by_id_then_all(service: ConversationService) -> None:
    cid = service.start()

    def response(rid: str, provider: str, *activities: tuple[str, Lifecycle]) -> list[Event]:
        return [
            ResponseStarted(response_id=ResponseId(rid), provider=provider),
            *(
                HostedActivity(
                    activity_id=ActivityId(aid),
                    name="web_search",
                    state=state,
                    response_id=ResponseId(rid),
                )
                for aid, state in activities
            ),
            ResponseEnded(response_id=ResponseId(rid), state="completed", finish_reason="pause"),
        ]

    service.append(cid, response("r1", "anthropic", ("a1", "started"), ("a2", "started")))
    service.append(cid, response("r2", "openai", ("o1", "started"), ("o2", "completed")))
    service.append(cid, response("r3", "google", ("g1", "completed")))

    abandoned = service.abandon_activities(cid, provider="anthropic")
    assert types(abandoned) == ["HostedActivity", "HostedActivity"]
    assert [
        (e.activity_id, e.name, e.state, e.response_id)
        for e in abandoned
        if isinstance(e, HostedActivity)
    ] == [("a1", "web_search", "abandoned", None), ("a2", "web_search", "abandoned", None)]
    assert sorted(service.get(cid).pending_activities()) == ["o1"]
    assert service.abandon_activities(cid, provider="anthropic") == []
    assert service.abandon_activities(cid, provider="google") == []  # g1 was already done
    assert service.abandon_activities(cid, activity_ids=[ActivityId("nope")]) == []
    by_id = service.abandon_activities(cid, activity_ids=[ActivityId("o1")])
    assert [e.activity_id for e in by_id if isinstance(e, HostedActivity)] == ["o1"]
    assert service.get(cid).pending_activities() == {}
    states = {e.activity_id: e.state for e in service.events(cid) if isinstance(e, HostedActivity)}
    assert states == {
        "a1": "abandoned",
        "a2": "abandoned",
        "o1": "abandoned",
        "o2": "completed",
        "g1": "completed",
    }


# --- writers that went away --------------------------------------------------------------------


class Holds:
    """A `Liveness` whose holds the test sets: writer id → status (`gone` when unset)."""

    def __init__(self) -> None:
        self.statuses: dict[str, WriterStatus] = {}

    def hold(self) -> str:
        return process_writer_id()

    def status(self, writer_id: str) -> WriterStatus:
        return self.statuses.get(writer_id, "gone")


def another_writer(*, host: str | None = None, pid: int | None = None) -> Writer:
    """A writer of another process (a fresh writer id), by default on this host."""
    return Writer(
        host=host or socket.gethostname(),
        pid=os.getpid() if pid is None else pid,
        started=1.0,
        id=uuid.uuid4().hex,
    )


@pytest.fixture
def holds() -> Holds:
    return Holds()


@pytest.fixture
def held(repository: InMemoryRepository, holds: Holds) -> ConversationService:
    """A service whose writers' holds the test sets."""
    return ConversationService(repository, liveness=holds)


@pytest.fixture
def dead_writer() -> Writer:
    """A writer whose hold is released (unset in `holds`)."""
    return another_writer()


@pytest.fixture
def live_writer(holds: Holds) -> Writer:
    """Another process's writer that holds its lock."""
    writer = another_writer()
    holds.statuses[writer.id] = "alive"
    return writer


def _open_response(service: ConversationService, writer: Writer) -> ConversationId:
    cid = service.start()
    service.append(
        cid,
        [
            ResponseStarted(response_id=R1, provider="anthropic", writer=writer),
            ToolCallRequested(response_id=R1, call_id=CallId("c1"), name="f"),
        ],
    )
    return cid


def _assert_closed_before(
    service: ConversationService, cid: ConversationId, recorded: list[Event]
) -> None:
    """The response was closed `abandoned` just before `recorded` (in the same save).

    `append` returns only the drafts' events; the closing event is found in the store.
    """
    assert types(recorded) == ["UserMessage"]
    *_, ended, message = service.events(cid)
    assert message == recorded[0]
    assert isinstance(ended, ResponseEnded)
    assert (ended.response_id, ended.state, ended.stop_reason) == (R1, "abandoned", "writer_gone")
    assert ended.originator_version == message.originator_version - 1


def test_a_response_left_open_by_a_dead_writer_is_closed_before_the_next_append(
    held: ConversationService, dead_writer: Writer
) -> None:
    cid = _open_response(held, dead_writer)
    recorded = held.append(cid, [UserMessage(blocks=("still there?",))])
    _assert_closed_before(held, cid, recorded)
    conversation = held.get(cid)
    assert conversation.state.open_response is None
    assert conversation.open_calls() == ["c1"]  # orphaned, for `repair` to answer


def test_a_response_whose_writer_holds_its_lock_stays_open(
    held: ConversationService, live_writer: Writer
) -> None:
    cid = _open_response(held, live_writer)
    version = held.get(cid).version
    with pytest.raises(ResponseStillOpen):
        held.append(cid, [UserMessage(blocks=("too early",))])
    assert held.get(cid).version == version
    # its own events still go in
    held.append(cid, [AssistantText(response_id=R1, text="streaming")])
    assert held.get(cid).state.open_response is not None


def test_a_live_writer_that_releases_its_hold_is_then_closed(
    held: ConversationService, holds: Holds, live_writer: Writer
) -> None:
    cid = _open_response(held, live_writer)
    with pytest.raises(ResponseStillOpen):
        held.append(cid, [UserMessage(blocks=("x",))])
    holds.statuses[live_writer.id] = "gone"  # its process died: the kernel released the lock
    _assert_closed_before(held, cid, held.append(cid, [UserMessage(blocks=("x",))]))


@pytest.mark.parametrize(
    "writer",
    [
        another_writer(pid=os.getpid()),  # our own pid: another PID namespace, or a reused pid
        another_writer(host="elsewhere.invalid", pid=1),  # another host, whatever its clock
    ],
    ids=["our-pid", "another-host"],
)
def test_only_the_hold_decides_never_the_host_or_the_pid(
    held: ConversationService, holds: Holds, writer: Writer
) -> None:
    """Scenario 30: host names, pids and clocks are recorded for people, never judged."""
    holds.statuses[writer.id] = "alive"
    cid = _open_response(held, writer)
    with pytest.raises(ResponseStillOpen):
        held.append(cid, [UserMessage(blocks=("x",))])
    holds.statuses[writer.id] = "gone"
    _assert_closed_before(held, cid, held.append(cid, [UserMessage(blocks=("x",))]))


def test_a_hold_that_cannot_be_tested_closes_nothing(
    held: ConversationService, holds: Holds, dead_writer: Writer
) -> None:
    holds.statuses[dead_writer.id] = "unknown"
    cid = _open_response(held, dead_writer)
    with pytest.raises(ResponseStillOpen):
        held.append(cid, [UserMessage(blocks=("x",))])
    assert types(held.repair(cid)) == ["ResponseEnded", "ToolCallResponded"]  # no --force


def test_the_services_own_open_response_is_never_closed(held: ConversationService) -> None:
    cid = _open_response(held, held.writer)
    assert held.writer.id == process_writer_id()
    with pytest.raises(ResponseStillOpen):
        held.append(cid, [UserMessage(blocks=("x",))])
    assert held.get(cid).state.open_response is not None


def test_another_writer_is_unknown_without_holds(
    service: ConversationService, dead_writer: Writer
) -> None:
    """A service given no `Liveness` knows only its own process: it closes nobody's."""
    cid = _open_response(service, dead_writer)
    with pytest.raises(ResponseStillOpen):
        service.append(cid, [UserMessage(blocks=("x",))])


def test_a_response_without_a_writer_is_left_to_repair(held: ConversationService) -> None:
    cid = held.start()
    held.append(cid, [ResponseStarted(response_id=R1, provider="openai")])
    with pytest.raises(ResponseStillOpen):
        held.append(cid, [UserMessage(blocks=("x",))])
    assert types(held.repair(cid)) == ["ResponseEnded"]


def test_repair_refuses_a_live_writers_response_unless_forced(
    held: ConversationService, live_writer: Writer
) -> None:
    cid = _open_response(held, live_writer)
    version = held.get(cid).version
    with pytest.raises(WriterAlive, match=f"holds its lock.*repair {cid} --force"):
        held.repair(cid)
    assert held.get(cid).version == version  # nothing written
    ended, answered = held.repair(cid, force=True)
    assert isinstance(ended, ResponseEnded) and ended.stop_reason == "repaired"
    assert isinstance(answered, ToolCallResponded) and answered.synthetic


def _legacy_response(repository: InMemoryRepository, opened: datetime) -> ConversationId:
    """A response recorded before writer ids: `Writer(host, pid, started)`, at `opened`."""
    legacy = Writer(host="elsewhere.invalid", pid=os.getpid(), started=1.0)
    cid = new_conversation_id()
    conversation = Conversation.start(conversation_id=cid)
    conversation.clock = lambda: opened
    conversation.record(ResponseStarted(response_id=R1, provider="anthropic", writer=legacy))
    repository.save(conversation)
    return cid


def test_a_legacy_writer_is_a_lease_that_lapses_after_stale_after(
    repository: InMemoryRepository, held: ConversationService
) -> None:
    """A writer without a writer id (an earlier convstore) held nothing: its response
    counts as a lease taken when it opened, never renewed."""
    fresh = _legacy_response(repository, datetime.now(UTC))
    with pytest.raises(ResponseStillOpen):  # opened just now: it may still be streaming
        held.append(fresh, [UserMessage(blocks=("x",))])
    with pytest.raises(WriterAlive, match="no writer id"):
        held.repair(fresh)

    old = _legacy_response(repository, datetime.now(UTC) - timedelta(hours=2))
    patient = ConversationService(repository, liveness=Holds(), stale_after=3 * 3600)
    with pytest.raises(ResponseStillOpen):
        patient.append(old, [UserMessage(blocks=("x",))])
    _assert_closed_before(held, old, held.append(old, [UserMessage(blocks=("x",))]))


def test_old_writer_records_read_and_encode_as_stored() -> None:
    """A stored `Writer(host, pid, started)` decodes with no writer id and encodes back
    byte for byte (the new field is left out when empty)."""
    stored = b'{"host":"h","pid":7,"started":12.0}'
    writer = msgspec.json.decode(stored, type=Writer)
    assert writer.id == ""
    assert msgspec.json.encode(writer) == stored


def test_abandon_activities_also_closes_a_dead_writers_response(
    held: ConversationService, dead_writer: Writer
) -> None:
    cid = held.start()
    held.append(
        cid,
        [
            ResponseStarted(response_id=R1, provider="anthropic", writer=dead_writer),
            HostedActivity(
                activity_id=ActivityId("a1"), name="web_search", state="started", response_id=R1
            ),
        ],
    )
    recorded = held.abandon_activities(cid)
    assert types(recorded) == ["ResponseEnded", "HostedActivity"]
    assert held.get(cid).state.open_response is None
    assert held.get(cid).pending_activities() == {}
