"""A paced upstream for the proxy benchmark: `python -m benchmarks.paced_upstream EVENTS`.

An HTTP/1.1 server on 127.0.0.1 (a free port, printed as `port N`) in a process of its
own, answering every POST with an Anthropic Messages stream as a provider paces it: its
head and first event at once, then `EVENTS` text deltas 10 to 20 ms apart (a fixed
pattern), each stamped with `time.monotonic_ns()` when it is sent (the clock every process
of the machine shares), so a client measures each event's latency. Keep-alive, chunked.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Final

PACES_MS: Final = (10, 17, 13, 20, 11, 15, 19, 12, 16, 14, 18)
"""The gaps between two events, in turn: 10 to 20 ms."""


def _event(kind: str, data: dict[str, object]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _answer(writer: asyncio.StreamWriter, events: int, serial: int) -> None:
    message = {
        "id": f"msg_paced_{time.monotonic_ns()}_{serial}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 9, "output_tokens": 1},
    }
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    block = {"index": 0, "content_block": {"type": "text", "text": ""}}
    writer.write(_chunk(_event("message_start", {"message": message})))
    writer.write(_chunk(_event("content_block_start", block)))
    await writer.drain()
    for i in range(events):
        await asyncio.sleep(PACES_MS[i % len(PACES_MS)] / 1000)
        delta = {"type": "text_delta", "text": f"t={time.monotonic_ns()} "}
        writer.write(_chunk(_event("content_block_delta", {"index": 0, "delta": delta})))
        await writer.drain()
    writer.write(_chunk(_event("content_block_stop", {"index": 0})))
    ended = {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": events}}
    writer.write(_chunk(_event("message_delta", ended)))
    writer.write(_chunk(_event("message_stop", {})))
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def _serve(events: int) -> None:
    serial = 0

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal serial
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                serial += 1
                await _answer(writer, events, serial)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", 0, backlog=1024)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_serve(int(sys.argv[1])))
