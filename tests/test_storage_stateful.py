"""The domain's state machine (tests/test_domain_stateful.py) persisted in a real store.

After every accepted command the aggregate is saved through the repository and loaded
back (with a snapshot every few versions, so loads fold snapshots too); the machine's
invariants then compare it with the model, a replay of the stored events and the hash
chain over the bytes as the recorder holds them. Runs on SQLite and PostgreSQL, with
fewer examples on PostgreSQL.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from convstore.domain import Conversation, ConversationId, Event
from convstore.storage import SQLiteLocation, open_recorder, parse_location
from convstore.storage.recorder import ConversationRecorder
from convstore.storage.repository import EventRepository
from convstore.storage.sqlite import SQLiteRecorder
from tests.conftest import BACKENDS
from tests.test_domain_stateful import SETTINGS, Backend, ConversationMachine

SNAPSHOT_EVERY = 4
EXAMPLES = {"sqlite": 15, "postgres": 8}


class StoreBackend:
    """The machine's persistence hook over a repository; the store outlives the examples."""

    def __init__(self, recorder: ConversationRecorder) -> None:
        self.recorder = recorder
        self.repository = EventRepository(recorder, snapshot_every=SNAPSHOT_EVERY)

    def persist_and_reload(self, conversation: Conversation) -> Conversation:
        self.repository.save(conversation)
        return self.repository.load(conversation.id)

    def stored_events(self, conversation_id: ConversationId) -> list[Event]:
        return list(self.repository.events(conversation_id))

    def stored_records(self, conversation_id: ConversationId) -> list[tuple[int, bytes]]:
        return self.recorder.select_states(conversation_id)

    def close(self) -> None:
        pass  # every example starts a new conversation in the shared store


def _recorder(url: str) -> ConversationRecorder:
    location = parse_location(url)
    if isinstance(location, SQLiteLocation):
        # Durability is not under test here: no fsync per commit keeps the run short.
        return SQLiteRecorder(location.path, synchronous="OFF")
    return open_recorder(location)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_state_machine_on_a_real_store(backend: str, request: pytest.FixtureRequest) -> None:
    recorder = _recorder(request.getfixturevalue(f"{backend}_url"))

    class StoreMachine(ConversationMachine):
        def make_backend(self) -> Backend:
            return StoreBackend(recorder)

    try:
        run_state_machine_as_test(
            StoreMachine, settings=settings(SETTINGS, max_examples=EXAMPLES[backend])
        )
        snapshotted = recorder.select_first_events(limit=1000)
        assert any(recorder.select_snapshot(f.originator_id) for f in snapshotted)
    finally:
        recorder.close()
