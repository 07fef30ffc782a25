"""Scenario 34: every input is bounded, on SQLite and PostgreSQL.

A capture (`ingest FILE`) and a request body (`--request`) are read by
`jobs.read_capture` under one cap, `jobs.MAX_CAPTURE_BYTES` (1 GiB; the tests inject a
few MiB): a plain file is measured before it is read, a pipe or a device is copied into
an anonymous temporary file up to the cap, a gzip file is expanded once to the end
(every member) before its first byte is decoded. So whatever is refused (past the cap,
a truncated or fake gzip) is a typed error, exit 2, with nothing written to the store,
and memory stays flat: it does not grow with the input.
"""

from __future__ import annotations

import gzip
import os
import threading
import tracemalloc
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convstore.adapters import cli
from convstore.adapters.recording import jobs
from convstore.adapters.wire.providers import adapter
from convstore.domain import AssistantText
from convstore.domain.errors import DecodeError
from convstore.storage import open_store

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CAPTURE = EXAMPLES / "anthropic" / "web_search_citations" / "1.response.sse"
REQUEST = EXAMPLES / "anthropic" / "web_search_citations" / "1.request.json"
SMALL_CAP = 4 * 1024 * 1024


def _ingest(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["--db", url, "ingest", "--provider", "anthropic", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _refused(code: int, err: str, url: str, expected: str) -> None:
    """Exit 2, one sanitized error line saying `expected`, and nothing in the store."""
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("convstore: error: "), err
    assert expected in lines[0]
    with open_store(url) as store:
        assert store.service.list(limit=10) == []


@contextmanager
def _pipe(data: bytes) -> Iterator[Path]:
    """A pipe that a thread fills with `data`, as `/dev/fd/N` (a path `ingest` reads)."""
    read_end, write_end = os.pipe()

    def fill() -> None:
        with suppress(BrokenPipeError), open(write_end, "wb") as out:  # the reader may stop
            out.write(data)

    writer = threading.Thread(target=fill, daemon=True)
    writer.start()
    try:
        yield Path(f"/dev/fd/{read_end}")
    finally:
        os.close(read_end)
        writer.join(timeout=30)


def _members(body: bytes, cuts: list[int]) -> bytes:
    """`body` as a multi-member gzip file, a member between consecutive cut points."""
    points = [0, *sorted(cuts), len(body)]
    return b"".join(gzip.compress(body[a:b]) for a, b in pairwise(points))


# --- caps on plain files, pipes, devices and --request ---------------------------------------


def test_ingest_of_dev_zero_is_a_clean_error_with_flat_memory(
    capsys: pytest.CaptureFixture[str], store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scenario 34: `ingest /dev/zero` (endless, never a response) stops at the cap with a
    typed error, exit 2, nothing written; the traced memory peak is the same for a cap
    four times larger (the bytes go to a temporary file in 64 KiB chunks)."""
    peaks = []
    for cap in (SMALL_CAP, 4 * SMALL_CAP):
        monkeypatch.setattr(jobs, "MAX_CAPTURE_BYTES", cap)
        tracemalloc.start()
        try:
            code, _, err = _ingest(capsys, store_url, "/dev/zero")
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        _refused(code, err, store_url, f"/dev/zero: is larger than {cap} bytes")
    assert peaks[1] < peaks[0] + 1024 * 1024, f"traced peaks {peaks} grew with the cap"


def test_a_request_body_from_a_device_is_capped(
    capsys: pytest.CaptureFixture[str], store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scenario 34: `--request /dev/zero` is refused at the cap before any write."""
    monkeypatch.setattr(jobs, "MAX_CAPTURE_BYTES", SMALL_CAP)
    code, _, err = _ingest(capsys, store_url, "--request", "/dev/zero", str(CAPTURE))
    _refused(code, err, store_url, f"/dev/zero: is larger than {SMALL_CAP} bytes")


def test_a_response_past_the_cap_writes_nothing(
    capsys: pytest.CaptureFixture[str],
    store_url: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Scenario 34: a real response larger than the cap, as a plain file, a gzip file and
    through a pipe, is refused whole: not one event of it is stored (before the cap, it
    would have been recorded up to the cap and ended `failed`)."""
    body = CAPTURE.read_bytes()
    cap = len(body) - 1
    monkeypatch.setattr(jobs, "MAX_CAPTURE_BYTES", cap)
    packed = tmp_path / "1.response.sse.gz"
    packed.write_bytes(gzip.compress(body))
    code, _, err = _ingest(capsys, store_url, str(CAPTURE))
    _refused(code, err, store_url, f"is larger than {cap} bytes")
    code, _, err = _ingest(capsys, store_url, str(packed))
    _refused(code, err, store_url, f"expands past {cap} bytes")
    with _pipe(body) as pipe:
        code, _, err = _ingest(capsys, store_url, str(pipe))
    _refused(code, err, store_url, f"is larger than {cap} bytes")


def test_a_capture_through_a_pipe_and_a_gzip_request_are_read_whole(
    capsys: pytest.CaptureFixture[str], store_url: str, tmp_path: Path
) -> None:
    """Scenario 34 (the other side of the caps): a capture read from a pipe, with its
    request gzip-compressed, records the same response as the plain files do."""
    packed_request = tmp_path / "1.request.json.gz"
    packed_request.write_bytes(gzip.compress(REQUEST.read_bytes()))
    with _pipe(CAPTURE.read_bytes()) as pipe:
        code, out, err = _ingest(capsys, store_url, "--request", str(packed_request), str(pipe))
    assert (code, err) == (0, ""), err
    assert "1 request message recorded first" in out
    assert "completed" in out
    with open_store(store_url) as store:
        (summary,) = store.service.list(limit=10)
        texts = [e.text for e in store.service.events(summary.id) if isinstance(e, AssistantText)]
    drafts = adapter("anthropic").decode(jobs.read_capture(CAPTURE), None, None)
    assert texts == [d.text for d in drafts if isinstance(d, AssistantText)]


# --- gzip: every member, and nothing that is not whole -----------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(CAPTURE.read_bytes())), max_size=6))
def test_multi_member_gzip_is_read_to_the_end(cuts: list[int]) -> None:
    """Scenario 34 (backend-independent: reading precedes any store): a capture split
    into gzip members anywhere (empty members included) reads back byte for byte."""
    import tempfile

    body = CAPTURE.read_bytes()
    with tempfile.TemporaryDirectory() as folder:
        packed = Path(folder) / "1.response.sse.gz"
        packed.write_bytes(_members(body, cuts))
        read = list(jobs.read_capture(packed))
    assert b"".join(read) == body
    assert all(len(chunk) <= jobs.CHUNK_BYTES for chunk in read)


def test_a_multi_member_gzip_capture_ingests_whole(
    capsys: pytest.CaptureFixture[str], store_url: str, tmp_path: Path
) -> None:
    """Scenario 34: a three-member gzip capture records the whole response (the decoder
    sees every member, not only the first)."""
    body = CAPTURE.read_bytes()
    packed = tmp_path / "1.response.sse.gz"
    packed.write_bytes(_members(body, [len(body) // 3, 2 * len(body) // 3]))
    code, out, err = _ingest(capsys, store_url, str(packed))
    assert (code, err) == (0, ""), err
    assert "completed" in out


def _broken_gzips() -> dict[str, bytes]:
    body = CAPTURE.read_bytes()
    packed = gzip.compress(body)
    bad_crc = bytearray(packed)
    bad_crc[-8] ^= 0xFF  # the trailer's CRC-32
    cases = {f"cut at {n}/8": packed[: len(packed) * n // 8] for n in range(1, 8)}
    cases["cut before the trailer"] = packed[:-1]
    cases["only the magic"] = packed[:2]
    cases["fake: magic then text"] = b"\x1f\x8b" + body
    cases["trailing garbage after a member"] = packed + b"not gzip"
    cases["bad CRC"] = bytes(bad_crc)
    cases["raw deflate behind a gzip header"] = packed[:10] + zlib.compress(body)[2:]
    return cases


BROKEN = _broken_gzips()


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_truncated_or_fake_gzip_is_a_typed_error_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], store_url: str, tmp_path: Path, case: str
) -> None:
    """Scenario 34: a gzip capture cut anywhere, faked, corrupted or followed by garbage
    is exit 2 with one line, and nothing of the response it partly holds is stored."""
    packed = tmp_path / "1.response.sse.gz"
    packed.write_bytes(BROKEN[case])
    with pytest.raises(DecodeError):
        for _ in jobs.read_capture(packed):
            pass
    code, _, err = _ingest(capsys, store_url, str(packed))
    _refused(code, err, store_url, str(packed))
