"""Liveness that cannot misjudge (RELIABILITY scenario 30) on SQLite and PostgreSQL.

A writer child (`tests/liveness_child.py`) keeps a response open, its blocks committed, in
two settings that fooled the old rule (same host name: is the pid alive; else: is the
response older than 15 minutes): in another PID namespace (`unshare --pid --fork`; its
pid means nothing here) and with its clock an hour behind on another host name. While it
lives, no write of another process closes its response and `repair` refuses without
`--force`; once it is killed (SIGKILL), the next write closes the response `abandoned`
(`writer_gone`) and keeps every committed block. Beside it, the SQLite holds' files:
private, never through a link, removed by a writer that exits and by the tester that
finds a killed writer's lock released; and the PostgreSQL holds' sessions: one per
database, taken again when the server ends it.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from convstore.adapters.cli import main
from convstore.domain import (
    AssistantText,
    ConversationId,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    UserMessage,
)
from convstore.domain.errors import ResponseBeingWritten, ResponseStillOpen
from convstore.domain.writers import process_writer_id
from convstore.storage import PostgresLocation, SQLiteLocation, open_store, parse_location
from convstore.storage.errors import OperationalError
from convstore.storage.holds import AdvisoryHolds, FileHolds, advisory_key
from tests.liveness_child import BLOCKS

ROOT = Path(__file__).resolve().parents[1]
WAIT = 60.0
"""Seconds to wait for the child's line (a generous bound, not a timing assertion)."""
OFFSET = -3600.0
"""The skewed writer's clock: an hour behind."""


def _unshare() -> list[str]:
    """The command prefix that runs a child in a new PID namespace, or a skip."""
    if os.geteuid() != 0:
        pytest.skip("a new PID namespace needs root (unshare --pid)")
    try:
        subprocess.run(["unshare", "--pid", "--fork", "true"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"unshare --pid --fork is not permitted here: {error}")
    return ["unshare", "--pid", "--fork", "--kill-child"]


class Writer:
    """The child writer: its first stdout line, and a SIGKILL for the writing process."""

    def __init__(self, prefix: list[str], url: str, extra: list[str], log: Path) -> None:
        argv = [*prefix, sys.executable, "-m", "tests.liveness_child", "--db", url, *extra]
        with log.open("ab") as stderr:
            self.process = subprocess.Popen(
                argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True
            )
        self.log = log
        self.namespaced = bool(prefix)
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put("")

    def opened(self) -> tuple[ConversationId, ResponseId]:
        """The conversation and response it keeps open, once its blocks are committed."""
        try:
            line = self._lines.get(timeout=WAIT)
        except queue.Empty:
            line = ""
        assert line.startswith("open "), f"the writer said {line!r}: {self.log.read_text()}"
        _, conversation, response = line.split()
        return ConversationId(uuid.UUID(conversation)), ResponseId(response)

    def writing_pid(self) -> int:
        """The pid of the Python process that writes (inside the namespace: unshare's child)."""
        if not self.namespaced:
            return self.process.pid
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        (pid,) = children.read_text().split()
        return int(pid)

    def kill(self) -> None:
        """SIGKILL the writing process, and wait for it."""
        os.kill(self.writing_pid(), signal.SIGKILL)
        self.process.wait(timeout=WAIT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def writers(tmp_path: Path) -> Iterator[list[Writer]]:
    started: list[Writer] = []
    yield started
    for writer in started:
        writer.stop()


@pytest.mark.parametrize("setting", ["pid_namespace", "skewed_clock"])
def test_a_live_writer_is_never_judged_gone_and_a_killed_one_is(
    setting: str,
    store_url: str,
    tmp_path: Path,
    writers: list[Writer],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Scenario 30: liveness comes from the writer's hold, never from pids or clocks.

    In another PID namespace, and an hour behind on another host name: its open response
    survives every other process's write and a `repair` without `--force`; killed, the next
    write closes it `writer_gone`, keeping its committed blocks.
    """
    if setting == "pid_namespace":
        prefix, extra = _unshare(), []
    else:
        prefix, extra = [], ["--clock-offset", str(OFFSET), "--host", "elsewhere.invalid"]
    with open_store(store_url):  # the store exists before the writer opens it
        pass
    writer = Writer(prefix, store_url, extra, tmp_path / "writer.log")
    writers.append(writer)
    conversation, response = writer.opened()

    with open_store(store_url) as store:
        service = store.service
        opened = next(e for e in service.events(conversation) if isinstance(e, ResponseStarted))
        assert opened.writer is not None and opened.writer.id
        assert opened.writer.id != process_writer_id()
        if setting == "pid_namespace":  # its pid is one of the namespace's, not ours
            assert opened.writer.pid != writer.writing_pid()
        else:
            assert opened.writer.host == "elsewhere.invalid"
            behind = datetime.now(UTC) - opened.timestamp
            assert behind > timedelta(minutes=50)  # past the old 15-minute rule
        version = service.get(conversation).version

        # every kind of write from this process leaves the live response open
        with pytest.raises(ResponseStillOpen):
            service.append(conversation, [UserMessage(blocks=("are you done?",))])
        with pytest.raises(ResponseStillOpen):
            service.add_user_input(conversation, [UserMessage(blocks=("hello?",))])
        with pytest.raises(ResponseStillOpen):
            service.ingest(
                conversation,
                iter(
                    [
                        ResponseStarted(response_id=ResponseId("msg_other"), provider="anthropic"),
                        ResponseEnded(response_id=ResponseId("msg_other"), state="completed"),
                    ]
                ),
            )
        with pytest.raises(ResponseBeingWritten, match="still being written"):
            service.abandon_activities(conversation)
        assert service.get(conversation).state.open_response is not None
        assert service.get(conversation).version == version

    # and so does `convstore repair` without --force: exit 2, nothing written
    capsys.readouterr()
    assert main(["--db", store_url, "repair", str(conversation)]) == 2
    err = capsys.readouterr().err
    assert "still being written" in err and "holds its lock" in err
    assert f"convstore repair {conversation} --force" in err
    with open_store(store_url) as store:
        assert store.service.get(conversation).version == version

    writer.kill()  # SIGKILL: the kernel (or the server) releases its hold

    with open_store(store_url) as store:
        recorded = store.service.append(conversation, [UserMessage(blocks=("still there?",))])
        events = list(store.service.events(conversation))
    *_, ended, message = events
    assert message == recorded[0]
    assert isinstance(ended, ResponseEnded)
    assert (ended.response_id, ended.state, ended.stop_reason) == (
        response,
        "abandoned",
        "writer_gone",
    )
    texts = [e for e in events if isinstance(e, AssistantText) and e.response_id == response]
    assert len(texts) >= BLOCKS - 1  # what was committed stays (the last may have been pending)


def test_repair_force_closes_a_live_writers_response(
    store_url: str,
    tmp_path: Path,
    writers: list[Writer],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Scenario 30: `repair --force` closes it anyway (exit 0), `repaired`."""
    with open_store(store_url):
        pass
    writer = Writer([], store_url, [], tmp_path / "writer.log")
    writers.append(writer)
    conversation, response = writer.opened()
    capsys.readouterr()
    assert main(["--db", store_url, "repair", str(conversation), "--force"]) == 0
    with open_store(store_url) as store:
        *_, ended = store.service.events(conversation)
    assert isinstance(ended, ResponseEnded)
    assert (ended.response_id, ended.state, ended.stop_reason) == (
        response,
        "abandoned",
        "repaired",
    )


# --- the SQLite holds' files ---------------------------------------------------------------------


def _path(url: str) -> Path:
    location = parse_location(url)
    assert isinstance(location, SQLiteLocation)
    return location.path


def _folder(url: str) -> Path:
    return Path(f"{_path(url)}.writers")


def test_a_writer_that_exits_leaves_no_lock_file(sqlite_url: str) -> None:
    """Scenario 30: the folder is 0700, the file 0600 while held, and gone at exit."""
    code = (
        "import os, sys\n"
        "from convstore.storage import open_store\n"
        "with open_store(sys.argv[1]) as store:\n"
        "    writer = store.service.writer\n"
        "    folder = sys.argv[2]\n"
        "    print(oct(os.stat(folder).st_mode & 0o777),"
        " oct(os.stat(f'{folder}/{writer.id}.lock').st_mode & 0o777))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, sqlite_url, str(_folder(sqlite_url))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.stdout.split() == ["0o700", "0o600"]
    assert list(_folder(sqlite_url).iterdir()) == []


def test_a_killed_writers_lock_file_is_removed_by_the_tester(
    sqlite_url: str, tmp_path: Path, writers: list[Writer]
) -> None:
    """Scenario 30: unlocked means gone, and the tester removes what the writer left."""
    with open_store(sqlite_url):
        pass
    writer = Writer([], sqlite_url, [], tmp_path / "writer.log")
    writers.append(writer)
    conversation, _ = writer.opened()
    with open_store(sqlite_url) as store:
        opened = next(
            e for e in store.service.events(conversation) if isinstance(e, ResponseStarted)
        )
    assert opened.writer is not None
    holds = FileHolds(_path(sqlite_url))
    lock_file = _folder(sqlite_url) / f"{opened.writer.id}.lock"
    assert holds.status(opened.writer.id) == "alive" and lock_file.exists()
    writer.kill()
    assert lock_file.exists()  # SIGKILL: nothing ran
    assert holds.status(opened.writer.id) == "gone"
    assert not lock_file.exists()
    assert holds.status(opened.writer.id) == "gone"  # and stays so


def test_a_link_planted_as_the_lock_folder_is_refused(sqlite_url: str, tmp_path: Path) -> None:
    """Scenario 30 (and 35): the hold is never taken through a link."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _folder(sqlite_url).symlink_to(elsewhere)
    holds = FileHolds(_path(sqlite_url))
    with pytest.raises(OperationalError, match="cannot take this writer's lock"):
        holds.hold()
    assert list(elsewhere.iterdir()) == []
    assert holds.status("0" * 32) == "unknown"  # a link is no evidence either way


def test_a_writer_id_that_is_not_ours_is_never_a_path(sqlite_url: str) -> None:
    """Scenario 30: a stored writer id is tested only when it has the form we make."""
    holds = FileHolds(_path(sqlite_url))
    for hostile in ("../../etc/passwd", "", "A" * 32, "0" * 31 + "/"):
        assert holds.status(hostile) == "unknown"


def test_only_recording_a_response_takes_a_hold(sqlite_url: str) -> None:
    """Scenario 30 (and 32): a store that never recorded a response has no lock folder."""
    with open_store(sqlite_url) as store:
        store.service.start("nothing streamed")
    assert not _folder(sqlite_url).exists()


# --- the PostgreSQL holds' sessions --------------------------------------------------------------


def _dsn(url: str) -> str:
    location = parse_location(url)
    assert isinstance(location, PostgresLocation)
    return location.dsn


def _holder(dsn: str, writer_id: str) -> int | None:
    """The backend pid holding a writer's advisory lock, seen from a session of the test."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as admin:
        row = admin.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND ((classid::bigint << 32) | objid::bigint) = %s AND objsubid = 1",
            (advisory_key(writer_id),),
        ).fetchone()
    return None if row is None else int(row[0])


@pytest.mark.postgres
def test_two_urls_of_one_database_share_one_hold(postgres_url: str) -> None:
    """Scenario 30: advisory locks are the database's; a second URL of it reuses the hold."""
    dsn = _dsn(postgres_url)
    other = f"{dsn}{'&' if '?' in dsn else '?'}application_name=another_url"
    first, second = AdvisoryHolds(dsn).hold(), AdvisoryHolds(other).hold()
    assert first == second == process_writer_id()
    assert _holder(dsn, first) is not None


@pytest.mark.postgres
def test_a_lost_hold_session_is_taken_again(postgres_url: str) -> None:
    """Scenario 30: the server ending the hold's session (a restart, a terminated backend)
    releases the lock; the next response this process records takes it again."""
    import psycopg

    dsn = _dsn(postgres_url)
    holds = AdvisoryHolds(dsn)
    writer_id = holds.hold()
    before = _holder(dsn, writer_id)
    assert before is not None
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 10000)", (before,))
    assert _holder(dsn, writer_id) is None
    assert holds.hold() == writer_id
    after = _holder(dsn, writer_id)
    assert after is not None and after != before
