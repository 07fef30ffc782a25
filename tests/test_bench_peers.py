"""The peer benchmark (figure 11) at a small size: each tool stores the same responses,
and the family yields every figure. Speed is measured by `make bench`, never asserted here."""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import Sizes
from benchmarks.peers import TOOLS, Convstore, LangGraph, Llm, peers_figures, recorded
from convstore.domain import AssistantText, HostedActivity


def test_each_tool_stores_the_same_responses(tmp_path: Path) -> None:
    """Three responses in one conversation of each tool read back with the same question,
    the same text and the same hosted search, in the same order."""
    work = list(recorded(3))
    ours = Convstore(tmp_path / "convstore.db")
    logs = Llm(tmp_path / "llm.db", str(work[0].meta["model"]))
    graph = LangGraph(tmp_path / "langgraph.db")
    try:
        threads = [ours.start(work[0]), logs.start(work[0]), graph.start(work[0])]
        for one in work[1:]:
            ours.add(threads[0], one)
            logs.add(threads[1], one)
            graph.add(threads[2], one)
        events = ours.read(threads[0])
        texts = [e.text for e in events if isinstance(e, AssistantText)]
        searches = [e.activity_id for e in events if isinstance(e, HostedActivity)]
        messages = logs.read(threads[1])
        checkpoint = graph.read(threads[2])
    finally:
        ours.close()
        logs.close()
        graph.close()

    assert len(texts) == 3 * 8 and len(set(searches)) == 3
    llm_texts = [
        part.text
        for message in messages
        if message.role == "assistant"
        for part in message.parts
        if type(part).__name__ == "TextPart"
    ]
    assert llm_texts == texts
    assert [m.role for m in messages] == ["user", "assistant"] * 3
    assert checkpoint is not None
    graph_messages = checkpoint.checkpoint["channel_values"]["messages"]
    assert [m.type for m in graph_messages] == ["human", "ai"] * 3
    graph_texts = [
        block["text"]
        for m in graph_messages
        if m.type == "ai"
        for block in m.content
        if block["type"] == "text"
    ]
    assert graph_texts == texts
    assert {m.content for m in graph_messages if m.type == "human"} == {work[0].question}


def test_the_family_yields_every_figure(tmp_path: Path) -> None:
    """A quick run gives the eleven rows, each with a ratio; the reads carry issue 15's
    targets."""
    figures = peers_figures(Sizes.for_run(quick=True), tmp_path)
    assert [f.figure for f in figures] == [f"11{letter}" for letter in "abcdefghijk"]
    assert all(f.ratio is not None and f.ratio > 0 for f in figures)
    assert [f.target for f in figures if f.target] == [("<=", 0.8), ("<=", 0.6)]
    assert {f.title.split(" of ")[1].split(":")[0] for f in figures[4:7]} == set(TOOLS)
