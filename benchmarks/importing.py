"""Figure 12: importing another tool's history against ingesting the same responses.

12a (issue 17): N responses (10,000; `--quick`: 20) built once, each a copy of the example
capture `examples/anthropic/web_search_citations` (a user question, then a streamed web
search) with ids of its own, each in a conversation of its own (as figure 8i), kept two ways:

- (a) captured bodies: one capture folder per response (`1.request.json`,
  `1.response.sse`), as `convstore ingest` of their parent folder takes them;
- (b) an `llm` logs.db written by the real `llm` package (`Response.from_dict` +
  `log_to_db`, figure 11's writer), one thread per response.

Ours: `convstore import llm` (`LlmImporter.plan` + `read`, through `record_all`) of (b)
into a fresh SQLite store. Baseline: `convstore ingest`'s batch path (`batch.planned` +
`batch.run` in `store.grouped()`, as the CLI runs it) of (a) into another fresh store.
Both sides of a round run moments apart, in rotating order; the figure is import rate /
ingest rate (baseline time / our time), target 0.5x.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count
from pathlib import Path

from benchmarks.common import Figure, Sizes, interleave
from benchmarks.peers import CAPTURE, Llm, copies, recorded
from convstore.adapters.importing.llm.importer import LlmImporter
from convstore.adapters.importing.record import record_all
from convstore.adapters.recording import batch
from convstore.storage import open_store

PROVIDER = "anthropic"


@dataclass(frozen=True)
class Sources:
    """The same responses as capture folders (`captures`) and as an llm logs.db (`logs`)."""

    captures: Path
    logs: Path
    responses: int


def build_sources(folder: Path, responses: int) -> Sources:
    """Write `responses` copies of the capture, each a conversation of its own, both ways."""
    captures = folder / "import-captures"
    request = (CAPTURE / "1.request.json").read_bytes()
    for i, body in enumerate(copies((CAPTURE / "1.response.sse").read_bytes(), responses)):
        capture = captures / f"{i:06d}"
        capture.mkdir(parents=True)
        (capture / "1.request.json").write_bytes(request)
        (capture / "1.response.sse").write_bytes(body)
    logs = folder / "import-logs.db"
    work = recorded(responses)
    first = next(work)
    writer = Llm(logs, str(first.meta["model"]))
    writer.db.execute("PRAGMA synchronous=OFF")  # building the source: no commit is measured
    try:
        writer.start(first)
        for one in work:
            writer.start(one)
    finally:
        writer.close()
    return Sources(captures, logs, responses)


def imported(sources: Sources, store_path: Path) -> int:
    """`convstore import llm` of the logs.db into a fresh store: the responses recorded."""
    reader = LlmImporter()
    total = reader.plan(sources.logs)
    assert total == sources.responses, f"{total} threads planned"
    with open_store(f"sqlite:///{store_path}") as store:
        report = record_all(store.service, "llm", reader.read(sources.logs))
    assert not report.failed
    return sum(c.responses for c in report.conversations)


def ingested(sources: Sources, store_path: Path) -> int:
    """`convstore ingest` (batch) of the capture folders into a fresh store: the responses
    recorded."""
    with (
        open_store(f"sqlite:///{store_path}") as store,
        batch.planned(PROVIDER, [sources.captures]) as captures,
    ):
        report = batch.run(store.service, PROVIDER, captures, grouped=store.grouped())
    counts = report.summary(len(captures))
    assert counts["failed"] == 0
    return counts["recorded"]


def import_figure(sizes: Sizes, folder: Path) -> Figure:
    """12a: import of an llm logs.db against batch ingest of the same responses' captures."""
    responses = 20 if sizes.quick else 10_000
    rounds = 1 if sizes.quick else 3
    sources = build_sources(folder, responses)
    stores = count()

    def fresh(side: str) -> Path:
        return folder / f"import-{side}-{next(stores)}.db"

    def ours() -> None:
        assert imported(sources, fresh("llm")) == responses

    def baseline() -> None:
        assert ingested(sources, fresh("ingest")) == responses

    timings = interleave({"import": ours, "ingest": baseline}, rounds=rounds, warmup=0)
    return Figure(
        "12a",
        f"import of an llm logs.db ({responses:,} responses)",
        "convstore import llm (LlmImporter plan + read, record_all) into a fresh SQLite store",
        "convstore ingest (batch.run in store.grouped()) of the same responses' captures",
        "throughput",
        timings.median("import"),
        timings.median("ingest"),
        ratio=timings.throughput_ratio("import", "ingest"),
        target=(">=", 0.5),
        note=f"per {responses:,} responses, each a conversation of its own (one user "
        f"question, a streamed web search: {CAPTURE.relative_to(CAPTURE.parents[2])}); "
        f"median of {rounds} interleaved rounds",
        extra={"timings": timings.summary(), "responses": responses},
    ).judge()


def importing_figures(sizes: Sizes, folder: Path) -> list[Figure]:
    """Figure 12: import against ingest of the same responses."""
    return [import_figure(sizes, folder)]
