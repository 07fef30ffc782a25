"""Who is writing: the identity of this process, and whether another writer is still alive.

A ResponseStarted records its writer so that a response left open by a process that died
can be told from one still streaming: on the same host the process must be gone (a reused
pid is told apart by its start time); on another host the response must be older than a
timeout.
"""

from __future__ import annotations

import os
import socket
from functools import cache
from pathlib import Path

from convstore.domain.vocabulary import Writer

DEFAULT_STALE_AFTER = 15 * 60.0
"""Seconds after which a response opened on another host counts as abandoned."""


def process_start(pid: int) -> float:
    """The start time of process `pid` in clock ticks since boot (0.0 where unknown)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return 0.0
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return float(fields[19])
    except (IndexError, ValueError):
        return 0.0


def current_writer() -> Writer:
    """This process as a writer (looked up again after a fork)."""
    return _writer(os.getpid())


@cache
def _writer(pid: int) -> Writer:
    return Writer(host=socket.gethostname(), pid=pid, started=process_start(pid))


def writer_alive(
    writer: Writer, *, opened_at: float, now: float, stale_after: float = DEFAULT_STALE_AFTER
) -> bool:
    """Whether the writer that opened a response at POSIX time `opened_at` may still write."""
    if writer.host != socket.gethostname():
        return now - opened_at < stale_after
    if writer.pid == os.getpid():
        return writer.started == current_writer().started
    try:
        os.kill(writer.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by someone else
    return process_start(writer.pid) == writer.started
