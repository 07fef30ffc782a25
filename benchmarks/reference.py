"""The informative reference: plain eventsourcing replaying an aggregate of its own.

An `eventsourcing.domain.Aggregate` with one `@event` method taking a text argument,
persisted by eventsourcing's own SQLite module (its JSON transcoder, its recorder), read
back with `Application.repository.get`. Each event's text is sized so its stored state is
about as long as the mean convstore event of the same run.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event

from benchmarks import workload


class Notebook(Aggregate):
    """A simple aggregate: a title, and notes added one event at a time."""

    @event("Started")
    def __init__(self, title: str) -> None:
        self.title = title
        self.notes = 0

    @event("NoteAdded")
    def add(self, text: str) -> None:
        """Add one note."""
        self.notes += 1


class Notebooks(Application[UUID]):
    """The eventsourcing application holding the notebook."""


def build(path: Path, events: int, state_bytes: float) -> tuple[Callable[[], object], float]:
    """A notebook of `events` events in a fresh SQLite file: a call reading it back, and
    the mean length of its stored states."""
    app = Notebooks(
        env={
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": str(path),
            "IS_SNAPSHOTTING_ENABLED": "n",
        }
    )
    rng = random.Random(5)
    notebook = Notebook("benchmark")
    # The stored state carries about 190 bytes besides the text (ids, timestamp, topic).
    size = max(int(state_bytes) - 190, 20)
    for i in range(1, events):
        text = ""
        while len(text) < size:
            text += workload.paragraph(rng, 1) + " "
        notebook.add(text[:size])
        if i % 10 == 0:
            app.save(notebook)
    app.save(notebook)
    stored = app.recorder.select_events(notebook.id, limit=events)  # type: ignore[attr-defined]
    mean = sum(len(s.state) for s in stored) / len(stored)
    notebook_id = notebook.id

    def get() -> Notebook:
        got = app.repository.get(notebook_id)
        assert got.version == events
        return got

    return get, mean
