"""A writer that keeps a response open until it is killed (RELIABILITY scenario 30).

Run as `python -m tests.liveness_child --db URL [--conversation ID] [--clock-offset
SECONDS] [--host NAME]`. It starts a conversation (or goes on in conversation ID) and
ingests one Anthropic response through the service of `open_store`, as `convstore
ingest` does, whose drafts come from a generator: after
`BLOCKS` text blocks (past the recorder's buffer bound, so they are committed and the
store shows the response open) it prints `open <conversation id> <response id>`, flushed,
and waits for ever. `--clock-offset` moves this process's clock (the time its events are
stamped with, and `time.time`); `--host` is the host name it records, as a writer on
another host with a skewed clock would.
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

from convstore.domain import (
    AssistantText,
    ConversationId,
    Event,
    ResponseId,
    ResponseStarted,
    parse_conversation_id,
)
from convstore.domain import conversation as conversation_module
from convstore.domain.responses import DEFAULT_FLUSH_BYTES
from convstore.storage import open_store

BLOCK_BYTES = 1024 * 1024
BLOCKS = DEFAULT_FLUSH_BYTES // BLOCK_BYTES
"""Enough blocks to fill the buffer: they are committed before the next one is asked for."""


def skew(offset: float) -> None:
    """Move this process's clocks by `offset` seconds."""
    real_time = time.time
    delta = timedelta(seconds=offset)
    time.time = lambda: real_time() + offset
    conversation_module._now = lambda: datetime.now(UTC) + delta  # stamps every event


def drafts(conversation_id: ConversationId, response_id: ResponseId) -> Iterator[Event]:
    """A response that never ends: its blocks, then a wait for ever once they are stored."""
    yield ResponseStarted(response_id=response_id, provider="anthropic", model="claude-test")
    for number in range(BLOCKS):
        yield AssistantText(response_id=response_id, text=f"block {number} " + "x" * BLOCK_BYTES)
    print(f"open {conversation_id} {response_id}", flush=True)
    threading.Event().wait()  # streaming, slowly: until killed


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the arguments and write until killed."""
    parser = argparse.ArgumentParser(prog="liveness_child", description=__doc__)
    parser.add_argument("--db", required=True, help="the store URL")
    parser.add_argument("--clock-offset", type=float, default=0.0, help="seconds to add")
    parser.add_argument("--host", default="", help="the host name to record")
    parser.add_argument("--conversation", default="", help="write in this conversation")
    args = parser.parse_args(argv)
    if args.clock_offset:
        skew(args.clock_offset)
    if args.host:
        host: str = args.host
        socket.gethostname = lambda: host
    with open_store(args.db) as store:
        conversation_id = (
            parse_conversation_id(args.conversation)
            if args.conversation
            else store.service.start("a live writer")
        )
        response_id = ResponseId(f"msg_live_{conversation_id.hex[:12]}")
        store.service.ingest(conversation_id, drafts(conversation_id, response_id))


if __name__ == "__main__":
    sys.exit(main())
