"""`convstore import openai-conversation`: the items of an OpenAI Conversations API list,
every fixture validated by the `openai` SDK's own `ConversationItemList` type first (the
documented format, not our reading of it); the import's contract (idempotent on the
source's ids, growth recorded alone, refusals before the first write, the `--json`
schema) and the readings of what it recorded."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.conversations import ConversationItemList

from convstore.adapters import cli
from convstore.adapters.importing.record import conversation_id
from convstore.domain import (
    AssistantText,
    Reasoning,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    UserMessage,
)
from convstore.storage import open_store

SCHEMA = Path(__file__).parents[1] / "adapters" / "cli" / "schemas" / "import.schema.json"

ITEMS: list[dict[str, Any]] = [
    {
        "type": "message",
        "id": "msg_u1",
        "status": "completed",
        "role": "user",
        "content": [{"type": "input_text", "text": "What is the weather in Paris?"}],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Look the weather up."}],
        "encrypted_content": "gAAAAB-opaque-reasoning==",
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
        "status": "completed",
    },
    {
        "type": "function_call_output",
        "id": "fco_1",
        "call_id": "call_1",
        "output": '{"temp":18}',
        "status": "completed",
    },
    {
        "type": "message",
        "id": "msg_a1",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "It is 18 °C in Paris.", "annotations": []}],
    },
]
MORE: list[dict[str, Any]] = [
    {
        "type": "message",
        "id": "msg_u2",
        "status": "completed",
        "role": "user",
        "content": [{"type": "input_text", "text": "And tomorrow?"}],
    },
    {
        "type": "message",
        "id": "msg_a2",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Rain.", "annotations": []}],
    },
]


def page(items: list[dict[str, Any]], *, newest_first: bool, more: bool = False) -> Any:
    """A list page as the API returns it, checked by the SDK's type."""
    data = items[::-1] if newest_first else list(items)
    value = {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"],
        "last_id": data[-1]["id"],
        "has_more": more,
    }
    ConversationItemList.model_validate(value)  # the documented format, by the SDK
    return value


def write(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def imported(capsys: pytest.CaptureFixture[str], url: str, source: Path) -> dict[str, Any]:
    code, out, err = run(capsys, "--db", url, "import", "openai-conversation", source, "--json")
    assert (code, err) == (0, "")
    summary: dict[str, Any] = json.loads(out)
    jsonschema.validate(summary, json.loads(SCHEMA.read_text()))
    return summary


def events_of(url: str, source_id: str) -> list[Any]:
    with open_store(url) as store:
        return list(store.service.events(conversation_id("openai-conversation", source_id)))


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.mark.parametrize("newest_first", [True, False], ids=["desc", "asc"])
def test_a_list_in_either_order_becomes_the_same_conversation(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path, newest_first: bool
) -> None:
    source = write(tmp_path / "conv.json", page(ITEMS, newest_first=newest_first))
    summary = imported(capsys, url, source)
    assert (summary["conversations"], summary["started"], summary["responses"]) == (1, 1, 2)
    events = events_of(url, "msg_u1")
    kinds = [type(e) for e in events]
    assert kinds.index(UserMessage) < kinds.index(Reasoning) < kinds.index(ToolCallRequested)
    assert kinds.index(ToolCallRequested) < kinds.index(ToolCallResponded)
    assert kinds.index(ToolCallResponded) < kinds.index(AssistantText)
    responses = [e.response_id for e in events if isinstance(e, ResponseStarted)]
    assert responses == ["openai-conversation:rs_1", "openai-conversation:msg_a1"]
    [reasoning] = [e for e in events if isinstance(e, Reasoning)]
    assert reasoning.payload is not None and b"gAAAAB-opaque-reasoning==" in reasoning.payload.raw
    kinds_lost = {loss["kind"] for loss in summary["items"][0]["losses"]}
    assert kinds_lost == {"model", "usage"}


def test_importing_twice_records_nothing_and_a_longer_list_only_what_is_new(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    source = write(tmp_path / "conv.json", page(ITEMS, newest_first=True))
    imported(capsys, url, source)
    before = events_of(url, "msg_u1")
    again = imported(capsys, url, source)
    assert (again["responses"], again["already_stored"], again["started"]) == (0, 2, 0)
    assert events_of(url, "msg_u1") == before
    write(source, page(ITEMS + MORE, newest_first=True))
    grown = imported(capsys, url, source)
    assert (grown["responses"], grown["already_stored"]) == (1, 2)
    after = events_of(url, "msg_u1")
    assert after[: len(before)] == before
    new = after[len(before) :]
    assert [e.blocks for e in new if isinstance(e, UserMessage)] == [("And tomorrow?",)]
    assert [e.text for e in new if isinstance(e, AssistantText)] == ["Rain."]


def test_pages_a_named_conversation_and_a_folder_of_them(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "lists"
    folder.mkdir()
    newest = ITEMS + MORE
    pages = [
        page(newest[::-1][:3], newest_first=False, more=True),
        page(newest[::-1][3:], newest_first=False),
    ]
    write(folder / "a.json", pages)  # an array of pages, newest first, as fetched
    named = {
        "id": "conv_0123",
        "object": "conversation",
        "created_at": 1,
        "items": page(MORE, newest_first=False, more=True),
    }
    write(folder / "b.json", named)
    summary = imported(capsys, url, folder)
    assert summary["conversations"] == 2 and summary["failed"] == 0
    first = events_of(url, "msg_u1")
    assert [e.text for e in first if isinstance(e, AssistantText)] == [
        "It is 18 °C in Paris.",
        "Rain.",
    ]
    second = events_of(url, "conv_0123")
    assert [e.blocks for e in second if isinstance(e, UserMessage)] == [("And tomorrow?",)]
    lost = {item["source_id"]: {x["kind"] for x in item["losses"]} for item in summary["items"]}
    assert lost["conv_0123"] == {"model", "usage", "items"}  # has_more: the rest is not here
    assert lost["msg_u1"] == {"model", "usage"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "neither a file nor a folder"),
        ("{not json", "is not JSON"),
        ('{"object": "list", "items": []}', "holds no Conversations API items list"),
        ('{"object": "list", "data": [{"id": "x"}]}', r"data\[0\] is not an item"),
    ],
    ids=["missing", "not-json", "not-a-list", "not-an-item"],
)
def test_a_source_it_cannot_read_is_refused_and_nothing_is_written(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path, content: str | None, message: str
) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    write(folder / "good.json", page(ITEMS, newest_first=True))
    if content is not None:
        (folder / "bad.json").write_text(content, encoding="utf-8")
    source = folder if content is not None else tmp_path / "nowhere.json"
    code, out, err = run(capsys, "--db", url, "import", "openai-conversation", source)
    assert code == 2 and out == ""
    assert re.search(message, err), err
    with open_store(url) as store:
        assert store.service.count() == 0  # the good file was not imported either


def test_an_imported_conversation_reads_as_any_other(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    source = write(tmp_path / "conv.json", page(ITEMS + MORE, newest_first=True))
    imported(capsys, url, source)
    target = str(conversation_id("openai-conversation", "msg_u1"))
    db = ("--db", url)
    code, out, _ = run(capsys, *db, "show", target)
    assert code == 0 and "It is 18 °C in Paris." in out and "get_weather" in out
    code, out, _ = run(capsys, *db, "search", "Paris", "--json")
    assert code == 0 and {hit["conversation_id"] for hit in json.loads(out)} == {target}
    code, out, _ = run(capsys, *db, "audit", target, "--json")
    assert code == 0 and json.loads(out)["chain"]["intact"]
    code, out, _ = run(capsys, *db, "export", target, "--format", "json")
    assert code == 0 and json.loads(out)["id"] == target
    replay = ("replay", target, "--dry-run", "--json")
    for to, model in [("openai", "gpt-5.1"), ("anthropic", "claude-sonnet-4-5")]:
        code, out, err = run(capsys, *db, *replay, "--to", to, "--model", model)
        assert code == 0, err
        assert isinstance(json.loads(out), list)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Turns of a user message, maybe a call and its output, then an answer."""
    items: list[dict[str, Any]] = []
    for turn in range(draw(st.integers(1, 4))):
        text = draw(st.text(st.characters(categories=["L", "N", "Zs"]), min_size=1, max_size=12))
        items.append(
            {"type": "message", "id": f"msg_u{turn}", "status": "completed", "role": "user",
             "content": [{"type": "input_text", "text": f"q {text}"}]}
        )  # fmt: skip
        if draw(st.booleans()):
            call = {"call_id": f"call_{turn}", "status": "completed"}
            items.append(
                {
                    "type": "function_call",
                    "id": f"fc_{turn}",
                    "name": "f",
                    "arguments": "{}",
                    **call,
                }
            )
            items.append(
                {"type": "function_call_output", "id": f"fco_{turn}", "output": "1", **call}
            )
        items.append(
            {"type": "message", "id": f"msg_a{turn}", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": f"a {text}", "annotations": []}]}
        )  # fmt: skip
    return items


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(items=conversations())
def test_either_order_of_any_conversation_reads_the_same(
    tmp_path_factory: pytest.TempPathFactory, items: list[dict[str, Any]]
) -> None:
    """The order is read from the items: a list newest first and one oldest first give
    the same drafts (the one exception, a list of one kind of item, is read newest first)."""
    from convstore.adapters.importing.openai_conversation import ConversationItemsImporter

    folder = tmp_path_factory.mktemp("orders")
    read = ConversationItemsImporter().read
    desc = list(read(write(folder / "desc.json", page(items, newest_first=True))))
    asc = list(read(write(folder / "asc.json", page(items, newest_first=False))))
    assert desc == asc
