"""`convstore import pydantic-ai`: histories written by the real pydantic-ai-slim."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.test import TestModel

from convstore.adapters import cli
from convstore.adapters.importing.pydantic_ai.importer import PydanticAIImporter
from convstore.adapters.importing.record import conversation_id
from convstore.adapters.importing.source import ImportedConversation
from convstore.domain import (
    AssistantText,
    ContextInjected,
    Event,
    HostedActivity,
    Reasoning,
    ResponseEnded,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    UserMessage,
)
from convstore.domain.errors import ConvstoreError
from convstore.storage import open_store
from tests import pydantic_ai_histories as histories

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[1] / "adapters/cli/schemas/import.schema.json").read_text()
)
SUMMARY_KEYS = {
    "format",
    "conversations",
    "started",
    "responses",
    "already_stored",
    "failed",
    "losses",
    "interrupted",
    "items",
}


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("CONVSTORE_URL", "CONVSTORE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'convstore.db'}"


def run(capsys: pytest.CaptureFixture[str], db: str, *argv: str | Path) -> tuple[int, str, str]:
    code = cli.main(["--db", db, *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def imported(capsys: pytest.CaptureFixture[str], db: str, path: Path) -> dict[str, Any]:
    code, out, err = run(capsys, db, "import", "pydantic-ai", path, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    jsonschema.Draft202012Validator(
        SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    ).validate(data)
    return data


def stored(db: str) -> dict[str, list[Event]]:
    with open_store(db) as store:
        return {str(s.id): list(store.service.events(s.id)) for s in store.service.list()}


def test_every_part_kind_becomes_its_event(
    capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path
) -> None:
    path = histories.write(tmp_path / "every.json", histories.every_kind())
    data = imported(capsys, db, path)
    assert set(data) == SUMMARY_KEYS
    assert (data["conversations"], data["started"], data["responses"]) == (1, 1, 4)
    [events] = stored(db).values()

    started = [e for e in events if isinstance(e, ResponseStarted)]
    assert [(s.response_id[:13], s.provider, s.model) for s in started] == [
        ("msg_01PydAiEv", "anthropic", "claude-sonnet-4-5-20250929"),
        ("resp_02PydAi", "openai", "gpt-5.1"),
        (started[2].response_id[:13], "google", "gemini-2.5-flash"),
        (started[3].response_id[:13], "google", "gemini-2.5-flash"),
    ]
    assert started[2].response_id.startswith("pydantic-ai-")
    assert started[0].settings.system == "You are a concise travel assistant."

    [user] = [e for e in events if isinstance(e, UserMessage)]
    assert user.blocks == ("What is the weather in Paris, and what should I pack?",)

    reasoning = [e for e in events if isinstance(e, Reasoning)]
    signed, redacted, openai, google = reasoning
    assert signed.payload is not None and signed.payload.provider == "anthropic"
    assert json.loads(signed.payload.raw) == {
        "type": "thinking",
        "thinking": "I should search for the forecast first.",
        "signature": histories.ANTHROPIC_SIGNATURE,
    }
    assert signed.payload.binding == {"model": "claude-sonnet-4-5-20250929"}
    assert redacted.redacted and redacted.payload is not None
    assert json.loads(redacted.payload.raw) == {
        "type": "redacted_thinking",
        "data": histories.REDACTED_DATA,
    }
    assert openai.payload is not None and openai.payload.format == "output_item"
    item = json.loads(openai.payload.raw)
    assert (item["id"], item["encrypted_content"]) == ("rs_01", histories.OPENAI_ENCRYPTED)
    assert google.text == "Answer plainly." and google.payload is None

    activities = [e for e in events if isinstance(e, HostedActivity)]
    assert [(a.activity_id, a.name, a.state, a.input, a.summary) for a in activities] == [
        ("srvtoolu_01", "web_search", "started", {"query": "Paris weather forecast"}, ""),
        ("srvtoolu_01", "web_search", "completed", {}, "2 results"),
    ]
    calls = [e for e in events if isinstance(e, ToolCallRequested)]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        ("toolu_01", "get_temperature", {"city": "Paris"}),
        ("call_02", "packing_list", {"weather": "rain"}),
    ]
    results = [e for e in events if isinstance(e, ToolCallResponded)]
    assert [(r.call_id, r.content, r.is_error) for r in results] == [
        ("toolu_01", '{"celsius":14}', False),
        ("call_02", "unknown weather kind", True),
    ]
    [feedback] = [e for e in events if isinstance(e, ContextInjected)]
    assert (feedback.source, feedback.text) == ("retry", "Please answer in one sentence.")
    texts = [e.text for e in events if isinstance(e, AssistantText)]
    assert texts[-1] == "Rain and 14 °C: a raincoat and layers."

    ended = [e for e in events if isinstance(e, ResponseEnded)]
    assert [(e.finish_reason, e.stop_reason) for e in ended] == [
        ("tool_use", "tool_use"),
        ("tool_use", "tool_call"),
        ("stop", "stop"),
        ("stop", "stop"),
    ]
    usage = ended[0].usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (120, 48, 100)
    assert (usage.cache_write_tokens, usage.hosted) == (20, {"web_search_requests": 1})
    assert ended[1].usage is not None and ended[1].usage.reasoning_tokens == 12

    [item_report] = data["items"]
    kinds = {(loss["event"], loss["kind"]) for loss in item_report["losses"]}
    assert kinds == {
        ("user-prompt", "media"),
        ("builtin-tool-return", "hosted_result"),
        ("thinking", "signature"),
        ("history", "timestamps"),
    }
    assert data["losses"] == len(item_report["losses"])


def test_importing_twice_records_nothing_the_second_time(
    capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path
) -> None:
    path = histories.write(tmp_path / "every.json", histories.every_kind())
    first = imported(capsys, db, path)
    before = stored(db)
    again = imported(capsys, db, path)
    assert (again["responses"], again["already_stored"], again["started"]) == (0, 4, 0)
    assert again["items"][0]["conversation_id"] == first["items"][0]["conversation_id"]
    assert stored(db) == before


def test_an_agent_run_and_its_continuation_land_in_one_conversation(
    capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path
) -> None:
    run1 = histories.agent_run()
    run2 = histories.continued(run1)
    first = imported(capsys, db, histories.write(tmp_path / "run.json", run1))
    assert first["responses"] == 3
    [(conversation, events)] = stored(db).items()
    source = run1[0].conversation_id
    assert source and first["items"][0]["source_id"] == source
    assert conversation == str(conversation_id("pydantic-ai", source))

    grown = imported(capsys, db, histories.write(tmp_path / "run.json", run2))
    assert (grown["responses"], grown["already_stored"]) == (3, 3)
    [(same, longer)] = stored(db).items()
    assert same == conversation and longer[: len(events)] == events
    users = [e.blocks for e in longer if isinstance(e, UserMessage)]
    assert users == [("Weather in Paris?",), ("And tomorrow?",)]
    results = [(e.content, e.is_error) for e in longer if isinstance(e, ToolCallResponded)]
    assert results == [("name the country too", True), ("sunny", False)] * 2


def test_a_history_without_a_conversation_id_is_named_by_its_first_message(
    capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path
) -> None:
    messages = histories.every_kind()
    data = imported(capsys, db, histories.write(tmp_path / "a.json", messages))
    source = data["items"][0]["source_id"]
    assert source.startswith("sha256:")
    longer = imported(capsys, db, histories.write(tmp_path / "b.json", messages[:4]))
    assert longer["items"][0]["source_id"] == source
    assert (longer["responses"], longer["already_stored"]) == (0, 2)


def test_a_folder_holds_one_history_a_file(
    capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path
) -> None:
    folder = tmp_path / "histories"
    folder.mkdir()
    histories.write(folder / "1.json", histories.every_kind())
    histories.write(folder / "2.json", histories.agent_run())
    tested = Agent(TestModel()).run_sync("Hello").all_messages()  # pydantic-ai's TestModel
    histories.write(folder / "3.json", tested)
    data = imported(capsys, db, folder)
    assert (data["conversations"], data["started"], data["responses"]) == (3, 3, 8)
    assert len(stored(db)) == 3
    assert [i["source_id"] for i in data["items"]][1:] == [
        json.loads((folder / name).read_text())[0]["conversation_id"]
        for name in ("2.json", "3.json")
    ]


def test_the_text_report_names_each_loss(
    capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path
) -> None:
    path = histories.write(tmp_path / "every.json", histories.every_kind())
    code, out, _ = run(capsys, db, "import", "pydantic-ai", path)
    assert code == 0
    assert "4 response(s) recorded, 0 already stored, 4 loss(es)" in out
    assert "lost: thinking: signature: message 5, part 0" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        (b"not json", "is not JSON"),
        (b'{"kind": "request"}', "is not a pydantic-ai message history"),
        (b'[{"kind": "question", "parts": []}]', "is not a pydantic-ai message history"),
        (b'[{"kind": "request", "parts": [{"part_kind": "user-prompt"}]}]', "history"),
        (b"[]", "empty message history"),
    ],
)
def test_a_source_that_is_no_history_is_refused_and_nothing_written(
    capsys: pytest.CaptureFixture[str],
    db: str,
    tmp_path: Path,
    content: bytes | None,
    message: str,
) -> None:
    folder = tmp_path / "histories"
    folder.mkdir()
    histories.write(folder / "1.json", histories.every_kind())
    if content is None:
        target = tmp_path / "missing.json"
    else:
        (folder / "2.json").write_bytes(content)
        target = folder
    code, out, err = run(capsys, db, "import", "pydantic-ai", target)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1
    assert stored(db) == {}


def test_an_imported_conversation_exports_searches_audits_and_replays(
    capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path
) -> None:
    path = histories.write(tmp_path / "every.json", histories.every_kind())
    conversation = imported(capsys, db, path)["items"][0]["conversation_id"]

    code, out, _ = run(capsys, db, "export", conversation, "--format", "json")
    assert code == 0
    document = json.loads(out)
    assert document["title"] == "What is the weather in Paris, and what should I pack?"
    kinds = [item["kind"] for turn in document["turns"] for item in turn["items"]]
    assert {"user", "response", "reasoning", "activity", "text", "tool_call", "context"} <= set(
        kinds
    )

    code, out, _ = run(capsys, db, "search", "raincoat", "--json")
    assert code == 0 and conversation in out

    code, out, _ = run(capsys, db, "audit", conversation, "--json")
    assert code == 0
    audit = json.loads(out)
    assert "web_search" in json.dumps(audit)

    for provider, model in [
        ("anthropic", "claude-sonnet-4-5-20250929"),
        ("openai", "gpt-5.1"),
        ("google", "gemini-2.5-flash"),
        ("openai-chat", "gpt-4.1"),
    ]:
        code, out, err = run(
            capsys, db, "replay", conversation, "--to", provider, "--model", model, "--dry-run"
        )
        assert code == 0, err
        code, out, err = run(capsys, db, "replay", conversation, "--to", provider, "--model", model)
        assert code == 0, err
        assert json.loads(out)
    code, out, _ = run(
        capsys,
        db,
        "replay",
        conversation,
        "--to",
        "anthropic",
        "--model",
        "claude-sonnet-4-5-20250929",
    )
    assert histories.ANTHROPIC_SIGNATURE in out  # the signed thinking replays to its provider


def test_a_history_ending_in_a_request_grows_without_recording_it_twice(
    capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path
) -> None:
    messages = histories.every_kind()
    path = tmp_path / "h.json"
    short = imported(capsys, db, histories.write(path, messages[:3]))  # ends in a tool return
    assert short["responses"] == 1
    [events] = stored(db).values()
    assert any(isinstance(e, ToolCallResponded) for e in events)  # recorded as trailing
    grown = imported(capsys, db, histories.write(path, messages))
    assert (grown["responses"], grown["already_stored"], grown["failed"]) == (3, 1, 0)
    [longer] = stored(db).values()
    assert longer[: len(events)] == events
    answered = [e.call_id for e in longer if isinstance(e, ToolCallResponded)]
    assert answered == ["toolu_01", "call_02"]
    again = imported(capsys, db, histories.write(path, messages[:3]))
    assert (again["responses"], again["already_stored"]) == (0, 1)
    assert list(stored(db).values()) == [longer]


def test_hostile_text_reaches_the_terminal_inert(
    capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path
) -> None:
    escape = "\x1b]0;owned\x07\x1b[2J"
    messages = [
        ModelRequest(parts=[UserPromptPart(content=f"hi{escape}")], conversation_id=escape),
        ModelResponse(parts=[TextPart(content=f"answer{escape}")], provider_name=escape),
    ]
    path = histories.write(tmp_path / "h.json", messages)
    code, out, err = run(capsys, db, "import", "pydantic-ai", path)
    assert code == 0 and "\x1b" not in out + err and "\x07" not in out + err
    [events] = stored(db).values()
    assert [e.text for e in events if isinstance(e, AssistantText)] == [f"answer{escape}"]
    conversation = str(events[0].originator_id)
    code, out, _ = run(capsys, db, "export", conversation, "--format", "pydantic-ai")
    assert code == 0 and "\x1b" not in out and "\\u001b" in out


def test_an_agent_run_without_a_provider_shows_audits_and_replays(
    capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path
) -> None:
    path = histories.write(tmp_path / "run.json", histories.agent_run())
    conversation = imported(capsys, db, path)["items"][0]["conversation_id"]
    [events] = stored(db).values()
    assert {e.provider for e in events if isinstance(e, ResponseStarted)} == {"pydantic-ai"}
    code, out, _ = run(capsys, db, "show", conversation)
    assert code == 0 and "It is sunny." in out and "name the country too" in out
    code, out, _ = run(capsys, db, "audit", conversation, "--json")
    assert code == 0 and json.loads(out)
    code, out, err = run(
        capsys, db, "replay", conversation, "--to", "anthropic", "--model", "claude-sonnet-4-5"
    )
    assert code == 0, err
    request = json.loads(out)
    assert request["system"] and request["messages"][0]["content"][0]["text"] == (
        "Weather in Paris?"
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
part_kinds = st.sampled_from(
    [
        "user-prompt",
        "system-prompt",
        "tool-return",
        "retry-prompt",
        "retry-feedback",
        "text",
        "thinking",
        "tool-call",
        "builtin-tool-call",
        "builtin-tool-return",
        "file",
        None,
    ]
)
parts = st.builds(
    lambda kind, fields: {**fields, "part_kind": kind} if kind else fields,
    part_kinds,
    st.dictionaries(
        st.sampled_from(
            [
                "content",
                "tool_name",
                "tool_call_id",
                "args",
                "signature",
                "provider_name",
                "id",
                "outcome",
            ]
        ),
        json_values,
        max_size=5,
    ),
)
messages = st.builds(
    lambda kind, body, fields: {"kind": kind, "parts": body, **fields},
    st.sampled_from(["request", "response"]),
    st.lists(parts, max_size=4),
    st.dictionaries(
        st.sampled_from(["conversation_id", "provider_name", "model_name", "finish_reason"]),
        json_values,
        max_size=2,
    ),
)


@settings(max_examples=200, deadline=None)
@given(document=st.lists(messages, max_size=5) | json_values)
def test_any_json_is_imported_or_refused_with_a_typed_error(document: Any) -> None:
    """The reader never fails but with a ConvstoreError before the first write: whatever
    `plan` accepts, `read` turns into drafts."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "h.json"
        path.write_bytes(json.dumps(document).encode())
        reader = PydanticAIImporter()
        try:
            assert reader.plan(path) == 1
        except ConvstoreError:
            return
        [conversation] = list(reader.read(path))
        assert isinstance(conversation, ImportedConversation)
        for exchange in conversation.exchanges:
            assert isinstance(exchange.response[0], ResponseStarted)
            assert isinstance(exchange.response[-1], ResponseEnded)
