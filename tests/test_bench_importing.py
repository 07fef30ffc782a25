"""The import benchmark (figure 12) at a small size: both sides store the same responses,
and the family yields its figure. Speed is measured by `make bench`, never asserted here."""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import Sizes
from benchmarks.importing import build_sources, imported, importing_figures, ingested
from convstore.domain import AssistantText, ResponseStarted
from convstore.storage import open_store


def _stored(store_path: Path) -> list[tuple[str, int]]:
    """Each conversation's assistant text and responses (the hosted search is compared by
    tests/test_import_llm.py: llm keeps it as server-executed tool parts)."""
    with open_store(f"sqlite:///{store_path}") as store:
        service = store.service
        shapes = []
        for summary in service.list(limit=100):
            events = list(service.events(summary.id))
            text = "".join(e.text for e in events if isinstance(e, AssistantText))
            responses = sum(isinstance(e, ResponseStarted) for e in events)
            shapes.append((text, responses))
        return sorted(shapes)


def test_both_sides_store_the_same_responses(tmp_path: Path) -> None:
    """Import of the llm logs.db and batch ingest of the captures record the same five
    responses, each in a conversation of its own, with the same text."""
    sources = build_sources(tmp_path, 5)
    assert imported(sources, tmp_path / "llm.db") == 5
    assert ingested(sources, tmp_path / "ingest.db") == 5
    stored = _stored(tmp_path / "llm.db")
    assert len(stored) == 5 and all(shape[1] == 1 for shape in stored)
    assert stored == _stored(tmp_path / "ingest.db")


def test_the_family_yields_its_figure(tmp_path: Path) -> None:
    """A quick run gives figure 12a with a ratio and issue 17's target."""
    figures = importing_figures(Sizes.for_run(quick=True), tmp_path)
    assert [f.figure for f in figures] == ["12a"]
    assert figures[0].ratio is not None and figures[0].ratio > 0
    assert figures[0].target == (">=", 0.5)
    assert figures[0].extra["responses"] == 20
