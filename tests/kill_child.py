"""The writer the kill -9 tests kill (RELIABILITY scenario 8): ingests captures for ever.

Run as `python -m tests.kill_child --db URL --work DIR --seed N [--snapshot-every K]
[--big-every M]`. It uses the library the way `convstore ingest` does
(`adapters.recording.jobs.ingest` over the service of `open_store`), with every example capture
in `examples/*/*/`, exchange after exchange: an exchange continues its folder's
conversation when its request extends it, and starts a new conversation otherwise. Each
round writes the captures again with the response ids made unique (`<id>-<seed>-<round>`),
so every response is new (a Gemini response that names no id is given one). Every
`--big-every` rounds it also ingests one long Anthropic response (a web search call,
then text blocks of 1 MiB, 8 MiB in all) into a conversation
it starts first, announced by a line `big <conversation id> <response id>`: the response
recorder commits it in several transactions, and a kill between them leaves it open.

After `ingest` returns (so after its commits), it prints one line per response, flushed:
`ack <conversation id> <response id> <ended> <already stored: 0|1>`. Nothing is printed
for a response before its commit has returned, so every printed response must be stored.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from convstore.adapters.recording import jobs
from convstore.adapters.wire.names import PROVIDERS
from convstore.adapters.wire.providers import adapter
from convstore.domain import ConversationId, ResponseStarted
from convstore.domain.service import ConversationService
from convstore.storage import open_store
from convstore.storage.repository import DEFAULT_SNAPSHOT_EVERY

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

BIG_BLOCKS = 8
"""Text blocks of the long response: 8 MiB, so the recorder commits it in three
transactions (at 4 MiB, at 8 MiB, then its end)."""
BIG_BLOCK_BYTES = 1024 * 1024
BIG_DELTA_BYTES = 64 * 1024


@dataclass(frozen=True)
class Exchange:
    """One captured model call: its request (if captured) and its response, as bytes."""

    name: str
    request: bytes | None
    response: bytes
    response_id: str


@dataclass(frozen=True)
class Capture:
    """A capture folder: its provider and its exchanges in order."""

    provider: str
    folder: str
    exchanges: tuple[Exchange, ...]


def load_captures() -> list[Capture]:
    """Every example folder whose responses the provider's adapter decodes."""
    found = []
    for provider in PROVIDERS:
        decode = adapter(provider).decode
        for folder in sorted((EXAMPLES / provider).glob("*/")):
            exchanges = []
            responses = sorted(folder.glob("*.response.*"), key=lambda p: int(p.name.split(".")[0]))
            for response in responses:
                number = response.name.split(".")[0]
                request_path = folder / f"{number}.request.json"
                request = request_path.read_bytes() if request_path.exists() else None
                body = response.read_bytes()
                first = next(decode(iter([body]), request, None), None)
                if isinstance(first, ResponseStarted):
                    exchanges.append(Exchange(response.name, request, body, first.response_id))
            if exchanges:
                found.append(Capture(provider, folder.name, tuple(exchanges)))
    return found


def _unique(data: bytes, ids: Sequence[str], suffix: str) -> bytes:
    """`data` with each quoted response id given `suffix`."""
    for response_id in ids:
        quoted = json.dumps(response_id).encode()
        data = data.replace(quoted, json.dumps(response_id + suffix).encode())
    return data


def _named(data: bytes, response_id: str, named: str) -> bytes:
    """A Gemini body whose response names no id (it is derived from its first chunk, so
    the same bytes are the same response): its first chunk given `"responseId": named`."""
    if json.dumps(response_id).encode() in data:
        return data
    return data.replace(b"{", b'{"responseId": ' + json.dumps(named).encode() + b", ", 1)


def _sse(event: dict[str, object]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def big_response(response_id: str, blocks: int = BIG_BLOCKS) -> bytes:
    """A long streamed Anthropic response: a web search call, then `blocks` text blocks of
    `BIG_BLOCK_BYTES`."""
    word = "matcha koicha Uji harvest whisk bowl ceremony river "
    delta = (word * (BIG_DELTA_BYTES // len(word) + 1))[:BIG_DELTA_BYTES]
    parts = [
        _sse(
            {
                "type": "message_start",
                "message": {
                    "id": response_id,
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-4-5-20250929",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            }
        ),
        _sse(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {
                    "type": "server_tool_use",
                    "id": f"srvtoolu_{response_id}",
                    "name": "web_search",
                    "input": {},
                },
            }
        ),
        _sse(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": '{"query": "uji matcha"}'},
            }
        ),
        _sse({"type": "content_block_stop", "index": 0}),
    ]
    for index in range(1, blocks + 1):
        parts.append(
            _sse(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                }
            )
        )
        text = {"type": "text_delta", "text": delta}
        event = _sse({"type": "content_block_delta", "index": index, "delta": text})
        parts.extend([event] * (BIG_BLOCK_BYTES // BIG_DELTA_BYTES))
        parts.append(_sse({"type": "content_block_stop", "index": index}))
    parts.append(
        _sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 100_000},
            }
        )
    )
    parts.append(_sse({"type": "message_stop"}))
    return b"".join(parts)


def _ack(conversation_id: ConversationId | None, report: jobs.IngestReport) -> None:
    for outcome in report.responses:
        stored = int(outcome.already_stored)
        print(f"ack {conversation_id} {outcome.response_id} {outcome.ended} {stored}", flush=True)


def _ingest(
    service: ConversationService,
    provider: str,
    response: Path,
    request: bytes | None,
    conversation_id: ConversationId | None,
) -> jobs.IngestReport:
    """`convstore ingest`: into the conversation when the request extends it, else anew."""
    report = jobs.ingest(
        service, provider, [response], request=request, conversation_id=conversation_id
    )
    if report.exit_code == 2 and conversation_id is not None:
        report = jobs.ingest(service, provider, [response], request=request)
    return report


def run(url: str, work: Path, seed: int, snapshot_every: int, big_every: int) -> None:
    """Ingest rounds of every capture (and the long response) until killed."""
    captures = load_captures()
    big = work / "big.response.sse"
    with open_store(url, snapshot_every=snapshot_every) as store:
        service = store.service
        for number in itertools.count():
            suffix = f"-{seed}-{number}"
            for capture in captures:
                ids = [exchange.response_id for exchange in capture.exchanges]
                conversation: ConversationId | None = None
                for exchange in capture.exchanges:
                    path = work / f"{capture.provider}-{capture.folder}-{exchange.name}"
                    body = _unique(exchange.response, ids, suffix)
                    path.write_bytes(
                        _named(body, exchange.response_id, exchange.response_id + suffix)
                    )
                    request = (
                        None if exchange.request is None else _unique(exchange.request, ids, suffix)
                    )
                    report = _ingest(service, capture.provider, path, request, conversation)
                    conversation = report.conversation_id
                    _ack(conversation, report)
            if big_every and number % big_every == 0:
                response_id = f"msg_big{suffix}"
                big.write_bytes(big_response(response_id))
                conversation = service.start("a long response")
                print(f"big {conversation} {response_id}", flush=True)
                report = jobs.ingest(service, "anthropic", [big], conversation_id=conversation)
                _ack(conversation, report)


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the arguments and ingest until killed."""
    parser = argparse.ArgumentParser(prog="kill_child", description=__doc__)
    parser.add_argument("--db", required=True, help="the store URL")
    parser.add_argument("--work", type=Path, required=True, help="a folder for capture files")
    parser.add_argument("--seed", type=int, default=0, help="made part of every response id")
    parser.add_argument("--snapshot-every", type=int, default=DEFAULT_SNAPSHOT_EVERY)
    parser.add_argument("--big-every", type=int, default=0, help="rounds between long responses")
    args = parser.parse_args(argv)
    run(args.db, args.work, args.seed, args.snapshot_every, args.big_every)


if __name__ == "__main__":
    sys.exit(main())
