"""Scenario 19 (RELIABILITY.md): hostile search queries reach the database only as bound
parameters, on SQLite and PostgreSQL.

tests/test_search.py shows that no hostile query gives a database error and that a
quoted phrase finds its planted document; here every statement the search sends is
recorded on its way to the driver: whatever the query, the SQL text is one and the same
constant, the query travels, rendered, in the parameters only, and the planted document is
still found by a phrase made of its words.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from convstore.domain import UserMessage
from convstore.projections import search
from convstore.projections.query import SearchQueryError
from convstore.storage import Store
from tests.test_search import HOSTILE

PLANTED = "the koicha whisked at Uji near the bridge"


class Recording:
    """A cursor that notes each statement and its parameters, then runs it."""

    def __init__(self, cursor: Any, sent: list[tuple[str, Any]]) -> None:
        self.cursor = cursor
        self.sent = sent

    def execute(self, statement: Any, parameters: Any = None, **options: Any) -> Any:
        text = statement if isinstance(statement, str) else repr(statement)
        self.sent.append((text, parameters))
        return self.cursor.execute(statement, parameters, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cursor, name)


@pytest.fixture
def recorded(store: Store, monkeypatch: pytest.MonkeyPatch) -> tuple[Store, list[tuple[str, Any]]]:
    """The store with a planted conversation, indexed, and its search reads recorded."""
    conversation = store.service.start("planted")
    store.service.add_user_input(conversation, [UserMessage(blocks=(PLANTED,))])
    search.follower(store).catch_up()
    search.search(store, "koicha", catch_up=False)  # tables exist: only searches follow
    sent: list[tuple[str, Any]] = []
    reader = store.recorder.view_reader

    @contextmanager
    def recording_reader() -> Iterator[Recording]:
        with reader() as cursor:
            yield Recording(cursor, sent)

    monkeypatch.setattr(store.recorder, "view_reader", recording_reader)
    return store, sent


def _statements(sent: list[tuple[str, Any]]) -> set[str]:
    """The distinct SQL texts sent (PostgreSQL's per-transaction search_path set-up left out)."""
    return {text for text, _ in sent if "search_path" not in text}


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(query=HOSTILE)
def test_a_hostile_query_is_only_ever_a_bound_parameter(
    recorded: tuple[Store, list[tuple[str, Any]]], query: str
) -> None:
    """Scenario 19: one constant statement whatever the query, the query among its bound
    parameters."""
    store, sent = recorded
    sent.clear()
    search.search(store, '"koicha whisked"', catch_up=False)
    [reference] = _statements(sent)
    sent.clear()
    try:
        search.search(store, query, catch_up=False)
    except SearchQueryError:
        assert _statements(sent) == set()  # refused before any statement
        return
    assert _statements(sent) == {reference}  # the SQL of a benign query: nothing spliced in
    assert any(isinstance(v, str) and v for _, values in sent for v in values)


def test_a_quoted_phrase_among_hostile_noise_finds_the_planted_document(
    recorded: tuple[Store, list[tuple[str, Any]]],
) -> None:
    """Scenario 19: a quoted phrase finds the planted document, beside hostile syntax too."""
    store, _ = recorded
    for query in ('"koicha whisked"', '"near the bridge" -"col:" -(\x00', '("Uji near" OR ")'):
        hits = search.search(store, query, catch_up=False)
        assert [h.kind for h in hits] == ["user"], query
