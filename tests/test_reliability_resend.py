"""Recovery by re-sending (scenario 26), on both backends.

A response cut short (a stream cut off, a writer killed, a `repair`) is completed by
ingesting the same capture again: the cut copy stays as recorded, the whole copy is
recorded as the next attempt, and every reading (portable, search, the audit's spend,
replay) reads it at the first attempt's place, exactly as a clean ingest of the whole
capture reads; the audit lists the superseded attempt. A cut copy that is a prefix of
what is stored, or arrives after the whole one, is "already stored". The write that finds
a dead writer's response closes it, even when the rest of that write is refused.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest

from convstore.adapters.recording import jobs
from convstore.adapters.terminal import transcript
from convstore.domain import ConversationId
from convstore.domain.errors import StorageError
from convstore.domain.events import Event, ResponseEnded, ResponseStarted
from convstore.domain.vocabulary import Writer
from convstore.projections import audit, portable, search
from convstore.storage import Store, open_store
from tests.kill_child import big_response

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CAPTURES = {
    "anthropic": EXAMPLES / "anthropic" / "web_search_citations",
    "openai": EXAMPLES / "openai" / "web_search_citations",
    "google": EXAMPLES / "google" / "grounding_search_stream",
}
"""A streamed response with hosted search and citations, per provider, with its request."""

_VOLATILE = frozenset({"id", "version", "end_version", "created", "timestamp", "started", "ended"})
_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


def _cut(data: bytes, fraction: float) -> bytes:
    """The first `fraction` of a stream's SSE events: a stream cut off at an event boundary."""
    events = [e for e in re.split(rb"\r?\n\r?\n", data) if e.strip()]
    return b"\n\n".join(events[: max(1, int(len(events) * fraction))]) + b"\n\n"


def _same(value: Any) -> Any:
    """A reading without what differs between two recordings of one conversation: ids of
    the conversation, versions, times."""
    if isinstance(value, dict):
        return {k: _same(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_same(v) for v in value]
    return value


def _reading(store: Store, conversation: ConversationId) -> Any:
    """The portable reading and what `show` prints, without what two recordings differ in."""
    shown = transcript.transcript(store.service.history(conversation))
    return (
        _same(msgspec.to_builtins(portable.load(store.service, conversation))),
        [
            _TIME.sub("<time>", line)
            for line in shown
            if not line.startswith(("conversation ", "started ", "chain: "))
        ],
    )


def _ingest(store: Store, provider: str, capture: Path, **options: Any) -> jobs.IngestReport:
    request = (CAPTURES[provider] / "1.request.json").read_bytes()
    return jobs.ingest(
        store.service, provider, [capture], request=request, title="resend", **options
    )


def _clean(tmp_path: Path, provider: str, whole: Path) -> tuple[Any, Any, Any, Any]:
    """The readings of a clean ingest of the whole capture, in a store of its own."""
    with open_store(str(tmp_path / "clean.db")) as store:
        report = _ingest(store, provider, whole)
        assert report.conversation_id is not None
        cid = report.conversation_id
        events = list(store.service.events(cid))
        return (
            _reading(store, cid),
            _same(msgspec.to_builtins(audit.audit(events).spend)),
            jobs.replay(store.service, cid, provider).body,
            sorted((h.kind, h.turn_id, h.snippet) for h in search.search(store, "the")),
        )


@pytest.mark.parametrize("provider", sorted(CAPTURES))
def test_a_copy_cut_short_is_completed_by_ingesting_it_again(
    store_url: str, tmp_path: Path, provider: str
) -> None:
    """Scenario 26: a stream cut off, then the whole capture ingested again (without
    --conversation): recorded as attempt 2 in the same conversation; the portable
    reading, search, the audit's spend and replay equal a clean ingest's; the audit lists
    attempt 1 as superseded. Ingesting the whole or the cut copy again is "already
    stored", and writes nothing."""
    whole = CAPTURES[provider] / "1.response.sse"
    cut = tmp_path / "cut.sse"
    cut.write_bytes(_cut(whole.read_bytes(), 0.5))
    clean = _clean(tmp_path, provider, whole)
    with open_store(store_url) as store:
        first = _ingest(store, provider, cut)
        assert [r.ended for r in first.responses] == ["abandoned"]
        assert first.conversation_id is not None
        cid = first.conversation_id
        again = _ingest(store, provider, whole)
        assert again.conversation_id == cid, "the response's own conversation"
        [outcome] = again.responses
        assert (again.exit_code, outcome.attempt, outcome.already_stored) == (0, 2, False)
        assert outcome.ended == "completed"
        version = list(store.service.events(cid))[-1].originator_version
        for copy in (whole, cut):
            repeated = _ingest(store, provider, copy)
            assert [r.already_stored for r in repeated.responses] == [True]
            assert repeated.exit_code == 0 and repeated.conversation_id == cid
        events = list(store.service.events(cid))
        assert events[-1].originator_version == version, "nothing written"
        report = audit.audit(events)
        assert [(s.attempt, s.read_attempt, s.state) for s in report.superseded] == [
            (1, 2, "abandoned")
        ]
        assert "response_superseded" in report.flags
        got = (
            _reading(store, cid),
            _same(msgspec.to_builtins(report.spend)),
            jobs.replay(store.service, cid, provider).body,
            sorted((h.kind, h.turn_id, h.snippet) for h in search.search(store, "the")),
        )
    assert got[0] == clean[0], "the portable reading and `show` equal a clean ingest's"
    assert got[1] == clean[1], "hosted spend counts the whole copy once"
    assert got[2] == clean[2], "replay rebuilds the same request"
    assert got[3] == clean[3], "search finds each piece once, in the first attempt's turn"


def _events(store: Store, cid: ConversationId) -> list[Event]:
    return list(store.service.events(cid))


def test_other_orders_of_copies(store_url: str, tmp_path: Path) -> None:
    """Scenario 26, other orders: a shorter cut copy after a longer one is "already
    stored"; a longer cut copy after a shorter one is the next attempt; the whole copy
    then completes it as attempt 3; a cut copy after it is "already stored"."""
    provider = "anthropic"
    whole = CAPTURES[provider] / "1.response.sse"
    data = whole.read_bytes()
    short, long = tmp_path / "short.sse", tmp_path / "long.sse"
    short.write_bytes(_cut(data, 0.3))
    long.write_bytes(_cut(data, 0.7))
    with open_store(store_url) as store:
        cid = _ingest(store, provider, long).conversation_id
        assert cid is not None
        assert [r.already_stored for r in _ingest(store, provider, short).responses] == [True]
        assert [r.attempt for r in _ingest(store, provider, long).responses] == [1]
        store_short = _ingest(store, provider, short)
        assert store_short.responses[0].already_stored
    with open_store(str(tmp_path / "other.db")) as store:
        cid = _ingest(store, provider, short).conversation_id
        assert cid is not None
        longer = _ingest(store, provider, long)
        assert [(r.attempt, r.already_stored) for r in longer.responses] == [(2, False)]
        completed = _ingest(store, provider, whole)
        assert [(r.attempt, r.ended) for r in completed.responses] == [(3, "completed")]
        assert [r.already_stored for r in _ingest(store, provider, short).responses] == [True]
        report = audit.audit(_events(store, cid))
        assert [(s.attempt, s.read_attempt) for s in report.superseded] == [(1, 3), (2, 3)]
        reading = portable.load(store.service, cid)
        assert [t.state for t in reading.turns] == ["completed"]


def test_another_response_under_the_same_id_is_refused(store_url: str, tmp_path: Path) -> None:
    """Scenario 26 (and 29): a cut copy whose blocks differ from the stored copy's before
    its last one is another response: the typed conflict (exit 4), nothing written."""
    provider = "anthropic"
    whole = CAPTURES[provider] / "1.response.sse"
    changed = tmp_path / "changed.sse"
    changed.write_bytes(whole.read_bytes().replace(b"Kyoto", b"Osaka", 1))
    with open_store(store_url) as store:
        cid = _ingest(store, provider, whole).conversation_id
        assert cid is not None
        before = _events(store, cid)
        refused = _ingest(store, provider, changed)
        assert refused.exit_code == 4 and "different content" in (refused.error or "")
        assert _events(store, cid) == before


def test_the_write_that_finds_a_dead_writer_closes_its_response(
    store_url: str, tmp_path: Path
) -> None:
    """Scenario 26, dead writers: a response left open by a writer that is gone is closed
    (`writer_gone`) by the next write, and stays closed although that write is refused."""
    provider = "anthropic"
    whole = CAPTURES[provider] / "1.response.sse"
    changed = tmp_path / "changed.sse"
    changed.write_bytes(whole.read_bytes().replace(b"Kyoto", b"Osaka", 1))
    gone = Writer(id=uuid.uuid4().hex, host="elsewhere", pid=1, started=0.0)
    with open_store(store_url) as store:
        cid = _ingest(store, provider, whole).conversation_id
        assert cid is not None
        store.service.append(
            cid,
            [ResponseStarted(response_id="msg_open", provider=provider, writer=gone)],
        )
        refused = _ingest(store, provider, changed)
        assert refused.exit_code == 4, refused.error
    with open_store(store_url) as store:
        events = _events(store, cid)
        ended = [e for e in events if isinstance(e, ResponseEnded) and e.response_id == "msg_open"]
        assert [e.stop_reason for e in ended] == ["writer_gone"]


def _wait_for(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def test_a_killed_ingest_is_recovered_by_ingesting_again_through_the_cli(
    store_url: str, tmp_path: Path
) -> None:
    """Scenario 26, the whole cycle through the command line: `convstore ingest` of a long
    streamed response (64 MiB, committed in 16 transactions) is killed (SIGKILL) after its
    first commit; the same command run again closes the dead writer's response and
    records the whole copy as attempt 2 (exit 0); the reading equals a clean ingest of the
    capture, and `verify` passes."""
    capture = tmp_path / "big.sse"
    capture.write_bytes(big_response("msg_big_resend", blocks=64))
    cli = [sys.executable, "-m", "convstore.adapters.cli", "--db", store_url]
    ingest = [*cli, "ingest", "--provider", "anthropic", "--title", "resend", str(capture)]
    child = subprocess.Popen(ingest, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def committed() -> bool:
        assert child.poll() is None, "the ingest ended before it could be killed"
        try:
            with open_store(store_url, read_only=True) as store:
                return bool(store.service.list())
        except StorageError:  # not created yet
            return False

    _wait_for(committed)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    with open_store(store_url, read_only=True) as store:
        [summary] = store.service.list()
        cid = summary.id
        assert store.service.get(cid).state.open_response is not None, "left open by the kill"
    again = subprocess.run(ingest, capture_output=True, check=False)
    assert again.returncode == 0, again.stderr.decode()
    assert f"conversation {cid}" in again.stdout.decode()
    assert "attempt 2" in again.stdout.decode()
    verified = subprocess.run([*cli, "verify", str(cid)], capture_output=True, check=False)
    assert verified.returncode == 0, verified.stderr.decode()
    with open_store(store_url) as store:
        events = _events(store, cid)
        assert [e.stop_reason for e in events if isinstance(e, ResponseEnded)] == [
            "writer_gone",
            "tool_use",
        ]
        resent = _reading(store, cid)
    with open_store(str(tmp_path / "clean.db")) as store:
        report = jobs.ingest(store.service, "anthropic", [capture], title="resend")
        assert report.conversation_id is not None
        assert _reading(store, report.conversation_id) == resent


def test_a_completed_copy_is_continued_like_a_clean_one(store_url: str, tmp_path: Path) -> None:
    """Scenario 26: after a cut copy is completed by re-sending, the next exchange's
    request is compared with the reading (not with the cut copy), so it ingests as it
    does after a clean ingest; a fork at the end of the completed response reads as the
    clean conversation there (its turn open, no empty turn); the fork already holds the
    response it inherited, and the whole reading is as of the log's newest event."""
    folder = EXAMPLES / "anthropic" / "thinking_tool_roundtrip"
    first, second = folder / "1.response.sse", folder / "2.response.json"
    requests = [(folder / f"{n}.request.json").read_bytes() for n in (1, 2)]
    cut = tmp_path / "cut.sse"
    cut.write_bytes(_cut(first.read_bytes(), 0.6))

    def exchanges(store: Store, captures: list[Path]) -> ConversationId:
        cid: ConversationId | None = None
        for capture, request in zip(
            captures, [requests[0]] * (len(captures) - 1) + [requests[1]], strict=True
        ):
            report = jobs.ingest(
                store.service, "anthropic", [capture], request=request, title="t",
                conversation_id=cid,
            )  # fmt: skip
            assert report.error is None or capture == cut, report.error
            cid = report.conversation_id
        assert cid is not None
        return cid

    with open_store(str(tmp_path / "clean.db")) as store:
        clean = _reading(store, exchanges(store, [first, second]))
    with open_store(store_url) as store:
        cid = exchanges(store, [cut, first, second])
        assert _reading(store, cid) == clean
        log = _events(store, cid)
        assert portable.load(store.service, cid).version == log[-1].originator_version
        ended = [e for e in log if isinstance(e, ResponseEnded) and e.state == "completed"]
        fork = store.service.fork(cid, at=ended[0].originator_version)
        turns = portable.load(store.service, fork).turns
        assert [(t.id, t.state) for t in turns] == [("turn-1", None)]
        inherited = jobs.ingest(
            store.service, "anthropic", [first], request=requests[0], conversation_id=fork
        )
        assert [r.already_stored for r in inherited.responses] == [True], inherited.error
