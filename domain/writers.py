"""Who is writing: this process's writer id, and whether another writer is still alive.

A ResponseStarted records its writer so that a response left open by a process that died
can be told from one still streaming. Liveness comes from a hold the writer keeps for its
life, one per writer process, keyed by its writer id (storage provides it: an OS file lock
beside an SQLite store, a session advisory lock on PostgreSQL), never from comparing
clocks, host names or pids, which another PID namespace or a skewed clock misjudge.

The rule (`judge`):
- a writer id: alive while its hold is held; gone once the hold is released (the
  process died, whatever its clock or namespace); unknown when the hold cannot be tested;
- no writer id (a response recorded before writer ids, `Writer(host, pid, started)`): a
  lease taken when the response opened and never renewed: alive for `stale_after`
  seconds after it opened, gone after that;
- no writer at all: unknown (left to `convstore repair`).
"""

from __future__ import annotations

import functools
import os
import socket
import uuid
from functools import cache
from pathlib import Path
from typing import Literal, Protocol

from convstore.domain.vocabulary import Writer

DEFAULT_STALE_AFTER = 15 * 60.0
"""Seconds after which a response of a writer without a writer id counts as abandoned."""

WriterStatus = Literal["alive", "gone", "unknown"]
"""What a liveness check says of a writer: `unknown` never closes a response."""


class Liveness(Protocol):
    """The holds writers keep, as storage provides them (one hold per writer process)."""

    def hold(self) -> str:
        """Take this process's hold (once; again if it was lost) and return its writer id."""
        ...

    def status(self, writer_id: str) -> WriterStatus:
        """Whether the writer holding `writer_id`'s hold is alive, gone or cannot be told."""
        ...


def process_writer_id() -> str:
    """This process's writer id: random, made once per process (anew after a fork)."""
    return _writer_id(os.getpid())


@cache
def _writer_id(pid: int) -> str:
    return uuid.uuid4().hex


class OwnProcessOnly:
    """A `Liveness` that knows only this process: any other writer is `unknown`.

    For a service without a store that keeps holds (an in-memory repository): its own
    responses stay open, and nobody else's is ever closed by guessing.
    """

    def hold(self) -> str:
        """This process's writer id (there is nothing to take)."""
        return process_writer_id()

    def status(self, writer_id: str) -> WriterStatus:
        """`alive` for this process, `unknown` for any other."""
        return "alive" if writer_id == process_writer_id() else "unknown"


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


def current_writer(writer_id: str) -> Writer:
    """This process as the writer holding `writer_id` (host and pid recorded for people)."""
    pid = os.getpid()
    host, started = _this_process(pid)
    return Writer(host=host, pid=pid, started=started, id=writer_id)


@functools.cache
def _this_process(pid: int) -> tuple[str, float]:
    """The host name and start time of this process, read once per process (`pid` keys
    it, so a forked child reads its own)."""
    return socket.gethostname(), process_start(pid)


def judge(
    writer: Writer | None,
    liveness: Liveness,
    *,
    opened_at: float,
    now: float,
    stale_after: float = DEFAULT_STALE_AFTER,
) -> WriterStatus:
    """The status of the writer of a response that opened at POSIX time `opened_at`.

    `now` is used only for a writer without a writer id (the lease rule above).
    """
    if writer is None:
        return "unknown"
    if writer.id:
        if writer.id == process_writer_id():
            return "alive"
        return liveness.status(writer.id)
    return "alive" if now - opened_at < stale_after else "gone"


def alive_because(writer: Writer | None, stale_after: float) -> str:
    """Why a response's writer counts as alive, for a person (a refusal's message)."""
    if writer is not None and writer.id:
        return (
            f"its writer (writer id {writer.id}, pid {writer.pid} on {writer.host}) holds its lock"
        )
    return (
        "its writer recorded no writer id (an earlier convstore), and the response opened "
        f"less than {stale_after / 60:g} minutes ago"
    )
