"""Figure 11: the tools people pick instead, fed the same recorded responses.

Every response is the example capture `examples/anthropic/web_search_citations` (a user
question, then a streamed web search with three results and cited text), decoded once by
convstore's Anthropic decoder, each copy with a response id of its own. What each tool
stores is that content in its own vocabulary:

- convstore: `ConversationService.ingest_exchange` of the request's new user message and
  the response's drafts, one transaction (what `convstore ingest` does); the conversation
  starts in the first response's transaction.
- `llm` (its `logs.db`, through its own API): `Response.log_to_db` of a response rebuilt
  with `Response.from_dict` (no model is called: the model is a registered-nowhere
  `llm.Model` whose `execute` refuses), its prompt the whole chain, as `llm`'s
  `Conversation` sends it; the assistant message holds reasoning, text (citations in
  `provider_metadata`), the hosted search as a server-executed tool call and result.
  Read: `LogStore.thread_messages`.
- LangGraph: a `StateGraph(MessagesState)` app with one node returning the response as an
  `AIMessage` (the Anthropic content blocks, as `ChatAnthropic` holds them), compiled with
  `SqliteSaver`; each response is one `invoke` of the question as a `HumanMessage`, with
  `durability="exit"`: one checkpoint (the thread's whole message list, one AIMessage
  longer), committed before `invoke` returns. (The default, `"async"`, writes each step's
  checkpoint on a background thread; `"sync"` writes three checkpoints per `invoke`.)
  Read: `SqliteSaver.get_tuple` of the thread's newest checkpoint.

Durability: all three write SQLite in WAL mode with `synchronous=FULL`. convstore sets it
itself. `SqliteSaver.setup` sets WAL and leaves `synchronous` at SQLite's default (FULL);
it is set explicitly here. `llm` opens `logs.db` through sqlite-utils, whose default is a
rollback journal with SQLite's default `synchronous` (FULL); WAL and FULL are set here so
that each commit costs the same fsync (checked before any measurement). Each tool commits
once per response.

Writes are measured interleaved, round by round, all six in every round: each tool at 1
response (each call the first response of a new conversation, in a file of its own) and
at 1,000 (each call one more response into a conversation of 1,000; convstore's call
first asks its repository the conversation's version, as a caller of `ingest_exchange`
must). Each tool keeps what it keeps between calls by its own design: convstore its
repository cache, `llm` the conversation's chain in memory (as its `Conversation` does),
LangGraph nothing (each `invoke` reads the newest checkpoint). Growth is each tool's cost
at 1,000 over its cost at 1, paired round by round. Bytes (each file after a WAL
checkpoint and VACUUM) and the read are measured on conversations of exactly 1,000
responses, before the rounds at 1,000 add to them. `--quick` uses 50 responses.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from importlib.metadata import version
from itertools import count
from pathlib import Path
from typing import Any

import llm
import msgspec
import sqlite_utils
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from llm.logs import LogStore
from llm.parts import Message, ReasoningPart, TextPart, ToolCallPart, ToolResultPart

from benchmarks.common import Figure, Sizes, Timings, interleave, skipped
from benchmarks.decoding import EXAMPLES
from benchmarks.storage import file_bytes
from convstore.adapters.anthropic import decode as anthropic
from convstore.adapters.anthropic.history import history_drafts
from convstore.domain import (
    AssistantText,
    ConversationId,
    Event,
    HostedActivity,
    Reasoning,
    ResponseEnded,
    ResponseStarted,
    ToolCallRequested,
    UserMessage,
)
from convstore.storage import Store, open_store

CAPTURE = EXAMPLES / "anthropic" / "web_search_citations"
TOOLS = ("convstore", "llm", "langgraph")


class Recorded(msgspec.Struct, frozen=True):
    """One recorded exchange: the new user message and the response, as each tool takes it."""

    history: Sequence[tuple[str, Sequence[Event]]]
    """convstore: the request's new message, as (role, drafts)."""
    drafts: list[Event]
    """convstore: the response's drafts, as decoded."""
    question: str
    blocks: list[str | dict[Any, Any]]
    """The response's content blocks, rebuilt from the drafts (LangGraph's AIMessage)."""
    parts: list[Any]
    """The assistant message's parts (`llm`)."""
    meta: dict[str, Any]
    """Model, stop reason and usage."""


def _block(event: Event) -> dict[str, Any] | None:
    if isinstance(event, AssistantText):
        block: dict[str, Any] = {"type": "text", "text": event.text}
        citations = [msgspec.json.decode(a.replay.value) for a in event.attributions if a.replay]
        if citations:
            block["citations"] = citations
        return block
    if isinstance(event, HostedActivity | Reasoning | ToolCallRequested) and event.payload:
        decoded: dict[str, Any] = msgspec.json.decode(event.payload.value)
        return decoded
    return None


def _part(event: Event, block: dict[str, Any]) -> Any:
    if isinstance(event, Reasoning):
        return ReasoningPart(
            text=event.text, provider_metadata={"signature": block.get("signature", "")}
        )
    if isinstance(event, HostedActivity):
        if event.state == "started":
            return ToolCallPart(
                name=event.name,
                arguments=dict(event.input),
                tool_call_id=event.activity_id,
                server_executed=True,
            )
        return ToolResultPart(
            name=event.name,
            output=msgspec.json.encode(block.get("content")).decode(),
            tool_call_id=event.activity_id,
            server_executed=True,
        )
    if isinstance(event, ToolCallRequested):
        return ToolCallPart(
            name=event.name, arguments=dict(event.arguments), tool_call_id=event.call_id
        )
    citations = block.get("citations")
    return TextPart(
        text=block["text"], provider_metadata={"citations": citations} if citations else None
    )


_IDS = re.compile(rb'"((?:msg|srvtoolu|toolu)_[A-Za-z0-9]+)"')


def copies(body: bytes, count_: int) -> Iterator[bytes]:
    """Copies of an Anthropic body, each with response and activity ids of its own: a
    conversation holds a response, a hosted activity and a tool call once."""
    originals = sorted(set(_IDS.findall(body)))
    assert originals, "no ids in the body"
    for i in range(count_):
        copy = body
        for original in originals:
            copy = copy.replace(b'"' + original + b'"', b'"%s-%06d"' % (original, i))
        yield copy


def recorded(count_: int) -> Iterator[Recorded]:
    """`count_` copies of the capture's exchange, each response with an id of its own."""
    request = (CAPTURE / "1.request.json").read_bytes()
    history = [(m.role, m.drafts) for m in history_drafts(request)]
    question = "\n".join(
        block
        for _, drafts in history
        for d in drafts
        if isinstance(d, UserMessage)
        for block in d.blocks
        if isinstance(block, str)
    )
    for body in copies((CAPTURE / "1.response.sse").read_bytes(), count_):
        drafts = list(anthropic.decode_stream(iter([body])))
        started = next(d for d in drafts if isinstance(d, ResponseStarted))
        ended = next(d for d in drafts if isinstance(d, ResponseEnded))
        blocks: list[str | dict[Any, Any]] = []
        parts: list[Any] = []
        for event in drafts:
            block = _block(event)
            if block is not None:
                blocks.append(block)
                parts.append(_part(event, block))
        meta = {
            "id": started.response_id,
            "model": started.model,
            "stop_reason": ended.stop_reason,
            "input_tokens": ended.usage.input_tokens if ended.usage else 0,
            "output_tokens": ended.usage.output_tokens if ended.usage else 0,
        }
        yield Recorded(history, drafts, question, blocks, parts, meta)


# --- the three writers ----------------------------------------------------------------------


def _check_durability(connection: sqlite3.Connection) -> None:
    """Refuse to measure a peer whose commits are not WAL + synchronous=FULL, as ours are."""
    mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
    synchronous = connection.execute("PRAGMA synchronous").fetchone()[0]
    assert (mode, synchronous) == ("wal", 2), f"peer at {mode}, synchronous={synchronous}"


class Convstore:
    """convstore's SQLite store: one `ingest_exchange` per response."""

    def __init__(self, path: Path) -> None:
        self.store: Store = open_store(f"sqlite:///{path}")

    def start(self, first: Recorded) -> ConversationId:
        """A new conversation holding its first response."""
        cid, outcome = self.store.service.ingest_exchange(None, first.history, first.drafts)
        assert outcome.ended == "completed"
        return cid

    def add(self, cid: ConversationId, one: Recorded) -> None:
        """One more response in the conversation."""
        version = self.store.repository.load(cid).version
        _, outcome = self.store.service.ingest_exchange(
            cid, one.history, one.drafts, at_version=version
        )
        assert outcome.ended == "completed"

    def read(self, cid: ConversationId) -> list[Event]:
        """The conversation as typed events."""
        return list(self.store.service.events(cid))

    def close(self) -> None:
        """Close the store."""
        self.store.close()


class _Replayed(llm.Model):
    """The model a recorded response is attributed to; it is never called."""

    can_stream = False

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id

    def execute(self, prompt: Any, stream: Any, response: Any, conversation: Any) -> Iterator[str]:
        raise RuntimeError("a recorded response is logged, never executed")


class Llm:
    """`llm`'s logs.db: `Response.log_to_db` of each response, its prompt the whole chain."""

    def __init__(self, path: Path, model: str) -> None:
        self.db = sqlite_utils.Database(path)
        self.db.enable_wal()
        self.db.execute("PRAGMA synchronous=FULL")
        _check_durability(self.db.conn)
        self.logs = LogStore(self.db)
        self.model = _Replayed(model)
        self.conversations: dict[str, tuple[llm.Conversation, list[Message]]] = {}

    def _log(self, conversation: llm.Conversation, chain: list[Message], one: Recorded) -> None:
        user = Message(role="user", parts=[TextPart(text=one.question)])
        assistant = Message(role="assistant", parts=one.parts)
        response = llm.Response.from_dict(
            {
                "model": self.model.model_id,
                "prompt": {"messages": []},
                "messages": [assistant.to_dict()],
                "usage": {"input": one.meta["input_tokens"], "output": one.meta["output_tokens"]},
            },
            model=self.model,
        )
        response.prompt = llm.Prompt(None, model=self.model, messages=[*chain, user])
        response.response_json = {k: one.meta[k] for k in ("id", "model", "stop_reason")}
        response.conversation = conversation
        response.log_to_db(self.db)
        chain.extend((user, assistant))

    def start(self, first: Recorded) -> str:
        """A new thread holding its first response."""
        conversation = llm.Conversation(model=self.model)
        chain: list[Message] = []
        self.conversations[conversation.id] = (conversation, chain)
        self._log(conversation, chain, first)
        return conversation.id

    def add(self, thread: str, one: Recorded) -> None:
        """One more response in the thread."""
        self._log(*self.conversations[thread], one)

    def read(self, thread: str) -> list[Message]:
        """The thread's messages."""
        return self.logs.thread_messages(thread)

    def close(self) -> None:
        """Close the database."""
        self.db.close()


class LangGraph:
    """A `StateGraph(MessagesState)` app on `SqliteSaver`: one `invoke` per response."""

    def __init__(self, path: Path) -> None:
        self.connection = sqlite3.connect(path, check_same_thread=False)
        self.saver = SqliteSaver(self.connection)
        self.saver.setup()
        self.connection.execute("PRAGMA synchronous=FULL")
        _check_durability(self.connection)
        self.pending: list[AIMessage] = []
        graph = StateGraph(MessagesState)
        graph.add_node("model", lambda _state: {"messages": [self.pending.pop()]})
        graph.add_edge(START, "model")
        graph.add_edge("model", END)
        self.app = graph.compile(checkpointer=self.saver)
        self.threads = (f"thread-{i}" for i in count())

    def _invoke(self, thread: str, one: Recorded) -> None:
        self.pending.append(
            AIMessage(
                content=one.blocks,
                id=one.meta["id"],
                response_metadata={k: one.meta[k] for k in ("id", "model", "stop_reason")},
                usage_metadata={
                    "input_tokens": one.meta["input_tokens"],
                    "output_tokens": one.meta["output_tokens"],
                    "total_tokens": one.meta["input_tokens"] + one.meta["output_tokens"],
                },
            )
        )
        self.app.invoke(
            {"messages": [HumanMessage(content=one.question)]},
            _config(thread),
            durability="exit",
        )
        assert not self.pending

    def start(self, first: Recorded) -> str:
        """A new thread holding its first response."""
        thread = next(self.threads)
        self._invoke(thread, first)
        return thread

    def add(self, thread: str, one: Recorded) -> None:
        """One more response in the thread."""
        self._invoke(thread, one)

    def read(self, thread: str) -> CheckpointTuple | None:
        """The thread's newest checkpoint (its messages included)."""
        return self.saver.get_tuple(_config(thread))

    def close(self) -> None:
        """Close the connection."""
        self.connection.close()


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


# --- the figures ----------------------------------------------------------------------------

Writer = Convstore | Llm | LangGraph
"""One of the three tools."""


@dataclass(frozen=True)
class _Tools:
    """The three tools, each on a fresh file of its own."""

    convstore: Convstore
    llm: Llm
    langgraph: LangGraph

    @classmethod
    def open(cls, folder: Path, name: str, model: str) -> _Tools:
        """Open the three on fresh files named after `name`."""
        return cls(
            Convstore(folder / f"peers-{name}-convstore.db"),
            Llm(folder / f"peers-{name}-llm.db", model),
            LangGraph(folder / f"peers-{name}-langgraph.db"),
        )

    def items(self) -> list[tuple[str, Writer]]:
        """(name, tool) in the order of `TOOLS`."""
        return [(name, getattr(self, name)) for name in TOOLS]

    def close(self) -> None:
        """Close the three."""
        for _, writer in self.items():
            writer.close()


def _writes(
    calls: dict[str, Callable[[Recorded], object]],
    work: Sequence[Recorded],
    *,
    rounds: int,
    warmup: int,
) -> Timings:
    """Each tool records the same responses, one per call, interleaved."""

    def contestant(call: Callable[[Recorded], object]) -> Callable[[], object]:
        items = iter(work)
        return lambda: call(next(items))

    return interleave(
        {name: contestant(call) for name, call in calls.items()}, rounds=rounds, warmup=warmup
    )


def peers_figures(sizes: Sizes, folder: Path) -> list[Figure]:
    """Figure 11: write at 1 and at N responses, growth, bytes and read, against `llm` and
    LangGraph."""
    if not (CAPTURE / "1.response.sse").is_file():
        return [skipped("11", "peers", subject="", baseline="", kind="time", why=f"no {CAPTURE}")]
    n = 50 if sizes.quick else 1_000
    rounds, warmup = (5, 2) if sizes.quick else (15, 3)
    work = list(recorded(n + rounds + warmup))
    long_work, more_work = work[:n], work[n:]
    model = str(work[0].meta["model"])

    first = _Tools.open(folder, "first", model)
    long = _Tools.open(folder, "long", model)
    threads: dict[str, Any] = {}
    for name, writer in long.items():
        threads[name] = writer.start(long_work[0])
        for one in long_work[1:]:
            writer.add(threads[name], one)
    stored = {name: file_bytes(folder / f"peers-long-{name}.db") for name in TOOLS}
    events = len(long.convstore.read(threads["convstore"]))
    assert len(long.llm.read(threads["llm"])) == 2 * n
    checkpoint = long.langgraph.read(threads["langgraph"])
    assert checkpoint is not None
    assert len(checkpoint.checkpoint["channel_values"]["messages"]) == 2 * n
    reads = interleave(
        {name: partial(writer.read, threads[name]) for name, writer in long.items()},
        rounds=sizes.replay_rounds,
        warmup=2,
    )
    # At 1 and at N in the same rounds, so that growth is a paired ratio too.
    writes = _writes(
        {
            **{f"{name}@1": writer.start for name, writer in first.items()},
            **{f"{name}@n": partial(writer.add, threads[name]) for name, writer in long.items()},
        },
        more_work,
        rounds=rounds,
        warmup=warmup,
    )
    first.close()
    long.close()
    return [f.judge() for f in _figures(n, events, writes=writes, reads=reads, stored=stored)]


_BASELINES = {
    "llm": f"llm {version('llm')}",
    "langgraph": f"LangGraph {version('langgraph')} StateGraph(MessagesState) + SqliteSaver",
}
_SUBJECTS = {
    "write": "ConversationService.ingest_exchange (the user message + the response's drafts, "
    "one transaction)",
    "llm": "Response.log_to_db (prompt = the whole chain), WAL, synchronous=FULL",
    "langgraph": "app.invoke(HumanMessage) → node returns the AIMessage; durability=exit",
}


def _figures(
    n: int,
    events: int,
    *,
    writes: Timings,
    reads: Timings,
    stored: dict[str, int],
) -> list[Figure]:
    rows: list[Figure] = []
    letters = iter("abcdefghijklmnop")
    note = "median of interleaved rounds; the same recorded responses (web_search_citations)"
    for label, at, where in (
        ("1", "@1", "the first response of a new conversation"),
        (f"{n:,}", "@n", f"one more response into a conversation of {n:,}"),
    ):
        for peer in ("llm", "langgraph"):
            rows.append(
                Figure(
                    f"11{next(letters)}",
                    f"write 1 response at {label}, vs {peer}",
                    _SUBJECTS["write"],
                    f"{_BASELINES[peer]}: {_SUBJECTS[peer]}",
                    "time",
                    writes.median(f"convstore{at}"),
                    writes.median(f"{peer}{at}"),
                    ratio=writes.time_ratio(f"convstore{at}", f"{peer}{at}"),
                    note=f"informative; each call is {where}; {note}",
                    extra={"timings": writes.summary()},
                )
            )
    for tool in TOOLS:
        rows.append(
            Figure(
                f"11{next(letters)}",
                f"growth of {tool}: write at {n:,} / at 1",
                f"{tool}, one more response into a conversation of {n:,}",
                f"{tool}, the first response of a conversation",
                "time",
                writes.median(f"{tool}@n"),
                writes.median(f"{tool}@1"),
                ratio=writes.time_ratio(f"{tool}@n", f"{tool}@1"),
                note="informative; median of the per-round ratios (both in every round)",
            )
        )
    for peer in ("llm", "langgraph"):
        rows.append(
            Figure(
                f"11{next(letters)}",
                f"bytes stored after {n:,} responses, vs {peer}",
                "convstore's SQLite file after checkpoint + VACUUM",
                f"{_BASELINES[peer]}'s SQLite file, the same",
                "size",
                float(stored["convstore"]),
                float(stored[peer]),
                unit="B",
                ratio=stored["convstore"] / stored[peer],
                note=f"informative; one conversation of {n:,} responses in each file",
            )
        )
    for peer, read, target in (
        ("langgraph", "SqliteSaver.get_tuple (the newest checkpoint)", 0.8),
        ("llm", "LogStore.thread_messages", 0.6),
    ):
        rows.append(
            Figure(
                f"11{next(letters)}",
                f"read a {n:,}-response conversation, vs {peer}",
                f"list(service.events): {events:,} typed events",
                f"{_BASELINES[peer]}: {read}, {2 * n:,} messages",
                "time",
                reads.median("convstore"),
                reads.median(peer),
                ratio=reads.time_ratio("convstore", peer),
                target=("<=", target),
                note="median of interleaved rounds; stores of one conversation each",
                extra={"timings": reads.summary()},
            )
        )
    return rows


__all__ = ["peers_figures"]
