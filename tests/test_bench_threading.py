"""The threading benchmark (figures 10f to 10h) at a small size: the workload threads each
request into its conversation, and the family yields its figures. Speed is measured by
`make bench`, never asserted here."""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import Sizes
from benchmarks.placing import threading_figures
from convstore.domain import ResponseStarted
from convstore.storage import open_store


def test_the_family_threads_its_workload_and_yields_its_figures(tmp_path: Path) -> None:
    """A quick run gives 10f, 10g and 10h with ratios and targets, and leaves two
    conversations, each of every exchange it recorded in it (none forked, none new)."""
    figures = threading_figures(Sizes.for_run(quick=True), tmp_path)
    assert [f.figure for f in figures] == ["10f", "10g", "10h"]
    assert all(f.ratio is not None and f.ratio > 0 and f.target is not None for f in figures)
    with open_store(f"sqlite:///{tmp_path / 'threading.db'}") as store:
        summaries = store.service.list()
        responses = sorted(
            sum(isinstance(e, ResponseStarted) for e in store.service.events(s.id))
            for s in summaries
        )
    assert all(s.forked_from is None for s in summaries)
    assert responses == [5 + 5, 40 + 5]  # the turns built, then one more each round
