"""Scenario 9 (RELIABILITY.md): the domain's state machine persisted in a real store.

The machine of tests/test_domain_stateful.py appends every event kind. After every
accepted command the aggregate is saved through the repository and loaded back (with a
snapshot every few versions, so loads are snapshot + tail); a `reopen` rule closes the
store and opens it again. The machine's invariants then compare what was loaded with the
model, with a full replay of the stored events (snapshot + tail equals full replay) and
check the hash chain over the bytes as the recorder holds them. Runs on SQLite and
PostgreSQL, with fewer examples on PostgreSQL.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import settings
from hypothesis.stateful import rule, run_state_machine_as_test

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
    """The machine's persistence hook over a repository of a store it can reopen."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.recorder = _recorder(url)
        self.repository = EventRepository(self.recorder, snapshot_every=SNAPSHOT_EVERY)

    def reopen(self) -> None:
        """Close the store and open it again: nothing of the old one is kept."""
        self.recorder.close()
        self.recorder = _recorder(self.url)
        self.repository = EventRepository(self.recorder, snapshot_every=SNAPSHOT_EVERY)

    def persist_and_reload(self, conversation: Conversation) -> Conversation:
        self.repository.save(conversation)
        return self.repository.load(conversation.id)

    def stored_events(self, conversation_id: ConversationId) -> list[Event]:
        return list(self.repository.events(conversation_id))

    def stored_records(self, conversation_id: ConversationId) -> list[tuple[int, bytes]]:
        return self.recorder.select_states(conversation_id)

    def close(self) -> None:
        self.recorder.close()  # every example starts a new conversation in the shared store


def _recorder(url: str) -> ConversationRecorder:
    location = parse_location(url)
    if isinstance(location, SQLiteLocation):
        # Durability is not under test here: no fsync per commit keeps the run short.
        return SQLiteRecorder(location.path, synchronous="OFF")
    return open_recorder(location)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_state_machine_on_a_real_store(backend: str, request: pytest.FixtureRequest) -> None:
    """Scenario 9: the store keeps equal to the model through appends of every kind,
    reopenings and snapshots; a snapshot + tail load equals a full replay."""
    url = request.getfixturevalue(f"{backend}_url")

    class StoreMachine(ConversationMachine):
        backend: StoreBackend

        def make_backend(self) -> Backend:
            return StoreBackend(url)

        def new_id(self, prefix: str) -> str:
            """Ids of this example's own: every example shares the store, and a response
            id is stored once per store."""
            tag = self.__dict__.setdefault("tag", uuid.uuid4().hex[:8])
            return f"{super().new_id(prefix)}_{tag}"

        @rule()
        def reopen(self) -> None:
            """Close and reopen the store, then carry on with the conversation it loads."""
            self.backend.reopen()
            self.conversation = self.backend.repository.load(self.conversation.id)

    recorder = _recorder(url)
    try:
        run_state_machine_as_test(
            StoreMachine, settings=settings(SETTINGS, max_examples=EXAMPLES[backend])
        )
        snapshotted = recorder.select_first_events(limit=1000)
        assert any(recorder.select_snapshot(f.originator_id) for f in snapshotted)
    finally:
        recorder.close()
