"""Figures 10f, 10g and 10h: what threading a request costs the proxy's recording.

A conversation grows turn by turn, each request carrying the whole history (as a client
sends it), placed and recorded as the proxy records it (`threads.place`, then
`ingest_exchange`), in SQLite (WAL):

- 10f: placing the request that continues a long conversation (the prefix index caught
  up, its digests looked up, the conversation read to confirm it), against the
  provider's own reading of that request's messages (the decoding any recording of it
  does): both grow with the request, so the ratio stays put as the conversation grows;
- 10g: folding one exchange into the prefix index at the long conversation's end,
  against the same at a short one's: the index reads only the new events, so the ratio
  is about 1 however long the conversation;
- 10h: the same fold at the long conversation's end, against what the index did before
  after each exchange: read the whole conversation and hash its chain again.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import Figure, Sizes, timed
from convstore.adapters.proxy.prefixes import Chain, PrefixIndex
from convstore.adapters.proxy.threads import place
from convstore.adapters.wire.providers import adapter
from convstore.domain.vocabulary import ConversationId
from convstore.storage import Store, open_store

MODEL = "claude-sonnet-4-5"
WORDS = " ".join(["the tea garden by the river"] * 8)


class _Conversation:
    """One conversation grown through `place` and `ingest_exchange`."""

    def __init__(self, store: Store, index: PrefixIndex, name: str) -> None:
        self.store, self.index, self.name = store, index, name
        self.messages: list[dict[str, str]] = []
        self.turns = 0
        self.conversation: ConversationId | None = None

    def request(self) -> bytes:
        """The next request: the history, then a new question."""
        question = {"role": "user", "content": f"{self.name} question {self.turns}: {WORDS}"}
        body = {"model": MODEL, "max_tokens": 64, "messages": [*self.messages, question]}
        return json.dumps(body).encode()

    def record(self) -> None:
        """One more exchange, placed and recorded as the proxy does it."""
        request = self.request()
        text = f"{self.name} answer {self.turns}: {WORDS}"
        placed = place(self.store.service, self.index, "anthropic", request, pinned=None)
        self.conversation, _ = self.store.service.ingest_exchange(
            placed.conversation_id,
            placed.history,
            adapter("anthropic").decode(_message(f"{self.name}_{self.turns}", text), request, 200),
            at_version=placed.version,
            title=placed.title,
        )
        self.messages = [
            *json.loads(request)["messages"],
            {"role": "assistant", "content": text},
        ]
        self.turns += 1


def _message(response_id: str, text: str) -> bytes:
    return json.dumps(
        {
            "id": f"msg_{response_id}",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 3},
        }
    ).encode()


def threading_figures(sizes: Sizes, folder: Path) -> list[Figure]:
    """Figures 10f, 10g and 10h."""
    long_turns, short_turns = (40, 5) if sizes.quick else (300, 10)
    rounds = 5 if sizes.quick else 21
    with open_store(f"sqlite:///{folder / 'threading.db'}") as store:
        index = PrefixIndex(store)
        long, short = _Conversation(store, index, "long"), _Conversation(store, index, "short")
        for conversation, turns in ((long, long_turns), (short, short_turns)):
            for _ in range(turns):
                conversation.record()
        history = adapter("anthropic").need_history()
        placing: dict[str, list[float]] = {"place": [], "read": []}
        folding: dict[str, list[float]] = {"long": [], "short": [], "again": []}
        for i in range(rounds):
            body = long.request()
            pair: list[tuple[str, Callable[[], object]]] = [
                ("place", lambda b=body: place(store.service, index, "anthropic", b, pinned=None)),
                ("read", lambda b=body: history([], b)),
            ]
            for name, call in pair if i % 2 == 0 else pair[::-1]:
                placing[name].append(timed(call))
            for conversation in (long, short) if i % 2 == 0 else (short, long):
                conversation.record()  # placed (caught up before), recorded, not folded yet
                folding[conversation.name].append(timed(index.catch_up))
            folding["again"].append(timed(lambda: _rehashed(store, long.conversation)))
    place_ratios = [p / r for p, r in zip(placing["place"], placing["read"], strict=True)]
    fold_ratios = [lo / sh for lo, sh in zip(folding["long"], folding["short"], strict=True)]
    again_ratios = [lo / ag for lo, ag in zip(folding["long"], folding["again"], strict=True)]
    return [
        Figure(
            "10f",
            f"placing a request continuing a {long_turns}-turn conversation",
            "threads.place: the prefix index caught up, looked up, the conversation confirmed",
            "the provider's reading of the same request's messages",
            "time",
            statistics.median(placing["place"]),
            statistics.median(placing["read"]),
            ratio=statistics.median(place_ratios),
            target=("<=", 4.0),
            note=f"median of {rounds} interleaved rounds; the request carries "
            f"{2 * long_turns + 1} messages",
        ).judge(),
        Figure(
            "10g",
            f"indexing an exchange at turn {long_turns} against at turn {short_turns}",
            f"PrefixIndex.catch_up after an exchange of a {long_turns}-turn conversation",
            f"the same after an exchange of a {short_turns}-turn conversation",
            "time",
            statistics.median(folding["long"]),
            statistics.median(folding["short"]),
            ratio=statistics.median(fold_ratios),
            target=("<=", 1.5),
            note=f"median of {rounds} interleaved rounds; each folds one exchange's events",
        ).judge(),
        Figure(
            "10h",
            f"indexing an exchange at turn {long_turns} against re-reading the conversation",
            f"PrefixIndex.catch_up after an exchange of a {long_turns}-turn conversation",
            "reading the whole conversation and hashing its chain again (the index before)",
            "time",
            statistics.median(folding["long"]),
            statistics.median(folding["again"]),
            ratio=statistics.median(again_ratios),
            target=("<=", 0.5),
            note=f"median of {rounds} rounds; the baseline leaves out the insert the index "
            "then made",
        ).judge(),
    ]


def _rehashed(store: Store, conversation: ConversationId | None) -> Chain:
    """The conversation's chain hashed again from its whole reading (the old index's work
    after each exchange, less its insert)."""
    assert conversation is not None
    key, chain = store.recorder.prefix_key(), Chain()
    for event in store.service.history(conversation):
        chain = chain.fold(key, event)
    return chain


__all__ = ["threading_figures"]
