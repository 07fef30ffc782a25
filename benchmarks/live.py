"""Figure 9a: the cost of the live recording core (`adapters/recording/live.py`).

`ask` records a response on a writer thread that commits at each block boundary where no
further draft is ready, so that what a person watches is stored while it streams. Its
cost is measured against the batch path on the same body: `ConversationService.ingest` of
the decoded drafts in one transaction (what `ingest` does), each response into a
conversation of its own, SQLite in WAL with `synchronous=FULL`.

Two workloads, interleaved round by round with their baseline:

- `live, all at once`: the whole body is available at once (the writer falls behind, so it
  groups blocks): the core's own overhead, a thread hand-off per draft;
- `live, paced`: a chunk every 2 ms, slower than a commit, as a provider streams: every
  block is committed as it closes. The extra row count says how many commits that costs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import Figure, Sizes, interleave, skipped
from benchmarks.decoding import ROOT, WEB_SEARCH, renamed
from convstore.adapters.anthropic import decode as anthropic
from convstore.adapters.recording.live import RecordingThread
from convstore.domain import Conversation, ConversationId, ConversationService
from convstore.domain.responses import ResponseOutcome
from convstore.domain.service import ConversationRepository
from convstore.storage import open_store

CHUNK = 512
PACE = 0.002
"""Seconds between two chunks of the paced stream."""


def _chunks(body: bytes, pace: float) -> Iterator[bytes]:
    for start in range(0, len(body), CHUNK):
        if pace:
            time.sleep(pace)
        yield body[start : start + CHUNK]


class _Counted:
    """A repository that counts its commits (everything else is the store's own)."""

    def __init__(self, repository: ConversationRepository) -> None:
        self.repository = repository
        self.saves = 0

    def save(self, conversation: Conversation) -> Sequence[int]:
        self.saves += 1
        return self.repository.save(conversation)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.repository, name)


def _live(
    service: ConversationService, conversation: ConversationId, body: bytes, pace: float
) -> None:
    """Record the body through the live core, as `ask` does."""
    thread: RecordingThread[ResponseOutcome] = RecordingThread(
        lambda queued, ready: service.ingest(conversation, queued, ready=ready)
    )
    for draft in anthropic.decode_stream(_chunks(body, pace)):
        thread.put(draft)
    assert thread.close().ended == "completed"


def live_figures(sizes: Sizes, folder: Path) -> list[Figure]:
    """Figures 9a (all at once) and 9b (paced)."""
    path = WEB_SEARCH[0]
    if not path.is_file():
        why = f"no capture at {path}"
        return [
            skipped(f"9{letter}", "live recording", subject="", baseline="", kind="time", why=why)
            for letter in "ab"
        ]
    return [_figure("a", path, sizes, folder, 0.0), _figure("b", path, sizes, folder, PACE)]


def _figure(letter: str, path: Path, sizes: Sizes, folder: Path, pace: float) -> Figure:
    body = path.read_bytes()
    rounds = max(sizes.append_rounds // 4, 10)
    warmup = sizes.warmup
    commits: list[int] = []
    with open_store(f"sqlite:///{folder / f'live-{letter}.db'}") as store:
        counted = _Counted(store.service.repository)
        service = ConversationService(counted, liveness=store.service.liveness)
        conversations = iter([service.start() for _ in range(2 * (rounds + warmup))])
        bodies = renamed(body, 2 * (rounds + warmup))

        def live() -> None:
            before = counted.saves
            _live(service, next(conversations), next(bodies), pace)
            commits.append(counted.saves - before)

        def batch() -> None:
            drafts = anthropic.decode_stream(_chunks(next(bodies), pace))
            assert service.ingest(next(conversations), drafts).ended == "completed"

        timings = interleave({"live": live, "batch": batch}, rounds=rounds, warmup=warmup)
    how = "a chunk every 2 ms" if pace else "the whole body at once"
    return Figure(
        f"9{letter}",
        f"live recording of a web search stream, {how}",
        "the live core: decode on the caller, record on a writer thread committing at idle "
        "block boundaries",
        "ConversationService.ingest of the same drafts, one commit",
        "time",
        timings.median("live"),
        timings.median("batch"),
        ratio=timings.time_ratio("live", "batch"),
        note=f"{path.relative_to(ROOT.parent)}, {len(body):,} bytes in {CHUNK}-byte chunks; "
        f"median {sorted(commits)[len(commits) // 2]} commits per live response (batch: 1); "
        f"median of {rounds} interleaved rounds",
        extra={"timings": timings.summary(), "commits": commits},
    ).judge()


__all__ = ["live_figures"]
