"""`convstore export --format pydantic-ai`: histories pydantic-ai's own
`ModelMessagesTypeAdapter` validates, and an agent continues from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from convstore.adapters import cli
from convstore.domain import AssistantText, ResponseStarted, UserMessage, parse_conversation_id
from convstore.storage import open_store
from tests import pydantic_ai_histories as histories

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DERIVED = "pydantic-ai-"
"""The prefix of a response id the import derived (the history gave none), which the
export writes back as the response's id."""
SIGNED_BY = {"anthropic", "openai"}
"""The providers whose signed reasoning the export carries."""


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("CONVSTORE_URL", "CONVSTORE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


def run(capsys: pytest.CaptureFixture[str], db: str, *argv: str | Path) -> tuple[int, str, str]:
    code = cli.main(["--db", db, *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def import_and_export(
    capsys: pytest.CaptureFixture[str], db: str, path: Path
) -> tuple[str, list[ModelMessage]]:
    code, out, err = run(capsys, db, "import", "pydantic-ai", path, "--json")
    assert code == 0, err
    conversation = json.loads(out)["items"][0]["conversation_id"]
    code, out, err = run(capsys, db, "export", conversation, "--format", "pydantic-ai")
    assert code == 0, err
    return conversation, ModelMessagesTypeAdapter.validate_json(out)


def _content(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def carried(messages: list[ModelMessage]) -> list[tuple[Any, ...]]:
    """What of each message the import carries and the export writes back."""
    out: list[tuple[Any, ...]] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    texts = [part.content] if isinstance(part.content, str) else part.content
                    out.append(("user", *(t for t in texts if isinstance(t, str))))
                elif isinstance(part, ToolReturnPart):
                    out.append(
                        ("return", part.tool_call_id, part.tool_name, _content(part.content))
                    )
            continue
        usage = message.usage
        given = message.provider_response_id
        out.append(
            (
                "response",
                message.model_name,
                None if given and given.startswith(DERIVED) else given,
                message.finish_reason,
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.cache_write_tokens,
            )
        )
        for part in message.parts:
            if isinstance(part, TextPart):
                out.append(("text", part.content))
            elif isinstance(part, ThinkingPart) and part.provider_name in SIGNED_BY:
                out.append(("thinking", part.content, part.signature, part.provider_name, part.id))
            elif isinstance(part, ThinkingPart):
                out.append(("thinking", part.content))
            elif isinstance(part, ToolCallPart):
                out.append(("call", part.tool_call_id, part.tool_name, part.args_as_dict()))
            elif isinstance(part, NativeToolCallPart):
                out.append(("hosted", part.tool_call_id, part.tool_name, part.args_as_dict()))
    return out


def test_every_part_kind_round_trips_through_the_type_adapter(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'convstore.db'}"
    original = histories.every_kind()
    _, exported = import_and_export(capsys, db, histories.write(tmp_path / "h.json", original))
    assert [m.kind for m in exported] == [m.kind for m in original]
    feedback = ("user", '<context source="retry">Please answer in one sentence.</context>')
    assert carried(exported) == [*carried(original)[:15], feedback, *carried(original)[15:]]
    first = exported[0]
    assert isinstance(first, ModelRequest)
    assert first.parts[0].part_kind == "system-prompt"
    assert first.parts[0].content == "You are a concise travel assistant."
    assert isinstance(exported[1], ModelResponse) and exported[1].provider_name == "anthropic"
    assert exported[1].provider_details == {"finish_reason": "tool_use"}
    redacted = exported[1].parts[1]
    assert isinstance(redacted, ThinkingPart) and redacted.id == "redacted_thinking"
    assert redacted.signature == histories.REDACTED_DATA
    retried = exported[4].parts[0]
    assert isinstance(retried, ToolReturnPart) and retried.outcome == "failed"
    assert ModelMessagesTypeAdapter.dump_json(exported)  # pydantic-ai writes it again


def test_a_provider_none_of_ours_keeps_its_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'convstore.db'}"
    messages: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(content="Hi")]),
        ModelResponse(parts=[TextPart("Hello!")], provider_name="groq", model_name="llama-3.3"),
    ]
    _, exported = import_and_export(capsys, db, histories.write(tmp_path / "h.json", messages))
    [_, response] = exported
    assert isinstance(response, ModelResponse)
    assert (response.provider_name, response.model_name) == ("groq", "llama-3.3")
    _, unnamed = import_and_export(
        capsys, db, histories.write(tmp_path / "run.json", histories.agent_run())
    )
    assert {m.provider_name for m in unnamed if isinstance(m, ModelResponse)} == {None}


def test_an_agent_continues_from_the_export(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'convstore.db'}"
    path = histories.write(tmp_path / "h.json", histories.agent_run())
    _, exported = import_and_export(capsys, db, path)
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart("Tomorrow too.")])

    result = Agent(FunctionModel(model)).run_sync("And tomorrow?", message_history=exported)
    assert result.output == "Tomorrow too."
    [sent] = seen
    assert carried(sent[: len(exported)]) == carried(exported)
    assert carried(sent[len(exported) :]) == [("user", "And tomorrow?")]
    prompts = [p.content for m in sent for p in m.parts if isinstance(p, UserPromptPart)]
    assert prompts == ["Weather in Paris?", "And tomorrow?"]


@pytest.mark.parametrize("provider", ["anthropic", "openai", "google", "openai-chat"])
def test_every_example_capture_exports_a_valid_history(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, provider: str
) -> None:
    db = f"sqlite:///{tmp_path / 'convstore.db'}"
    code, _, err = run(capsys, db, "ingest", "--provider", provider, EXAMPLES / provider)
    assert code in (0, 3), err  # the examples hold failed responses: the worst is 3
    out_dir = tmp_path / "out"
    code, out, err = run(
        capsys, db, "export", "--all", "--format", "pydantic-ai", "-o", out_dir, "--json"
    )
    assert code == 0, err
    summary = json.loads(out)
    files = [Path(f) for f in summary["files"]]
    assert summary["format"] == "pydantic-ai" and len(files) == summary["conversations"] > 0
    with open_store(db) as store:
        responses = {
            s.id: sum(isinstance(e, ResponseStarted) for e in store.service.history(s.id))
            for s in store.service.list()
        }
    for file in files:
        assert file.name.endswith(".pydantic-ai.json")
        messages = ModelMessagesTypeAdapter.validate_json(file.read_bytes())
        stored = next(n for c, n in responses.items() if str(c) in file.name)
        assert sum(isinstance(m, ModelResponse) for m in messages) == stored
    code, out, _ = run(capsys, db, "export", "--all", "--format", "pydantic-ai")
    lines = out.splitlines()
    assert code == 0 and len(lines) == len(files)
    for line in lines:
        ModelMessagesTypeAdapter.validate_json(line)


texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=30)


@st.composite
def conversations(draw: st.DrawFn) -> list[ModelMessage]:
    """Histories of prompts, answers, tool calls and their returns."""
    messages: list[ModelMessage] = []
    for turn in range(draw(st.integers(1, 4))):
        messages.append(ModelRequest(parts=[UserPromptPart(content=draw(texts))]))
        call = draw(st.booleans())
        parts: list[Any] = [TextPart(content=draw(texts))]
        if call:
            parts.append(ToolCallPart("lookup", {"q": draw(texts)}, tool_call_id=f"c{turn}"))
        messages.append(ModelResponse(parts=parts, model_name="function:m:"))
        if call:
            messages.append(
                ModelRequest(parts=[ToolReturnPart("lookup", draw(texts), tool_call_id=f"c{turn}")])
            )
            messages.append(ModelResponse(parts=[TextPart(content=draw(texts))]))
    return messages


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(history=conversations())
def test_import_then_export_keeps_every_prompt_answer_call_and_return(
    capsys: pytest.CaptureFixture[str],
    tmp_path_factory: pytest.TempPathFactory,
    history: list[ModelMessage],
) -> None:
    folder = tmp_path_factory.mktemp("round")
    db = f"sqlite:///{folder / 'convstore.db'}"
    _, exported = import_and_export(capsys, db, histories.write(folder / "h.json", history))
    assert carried(exported) == carried(history)


def test_an_export_continued_by_an_agent_imports_back_into_its_conversation(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'convstore.db'}"
    path = histories.write(tmp_path / "h.json", histories.every_kind())
    conversation, exported = import_and_export(capsys, db, path)
    assert {m.conversation_id for m in exported} == {f"convstore:{conversation}"}
    with open_store(db) as store:
        before = list(store.service.events(parse_conversation_id(conversation)))

    back = histories.write(tmp_path / "exported.json", exported)
    code, out, err = run(capsys, db, "import", "pydantic-ai", back, "--json")
    assert code == 0, err
    again = json.loads(out)
    assert (again["responses"], again["already_stored"]) == (0, 4)
    assert again["items"][0]["conversation_id"] == conversation

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("Take an umbrella as well.")])

    result = Agent(FunctionModel(model)).run_sync("Anything else?", message_history=exported)
    longer = histories.write(tmp_path / "longer.json", result.all_messages())
    code, out, err = run(capsys, db, "import", "pydantic-ai", longer, "--json")
    assert code == 0, err
    grown = json.loads(out)
    assert (grown["responses"], grown["already_stored"], grown["started"]) == (1, 4, 0)
    with open_store(db) as store:
        assert [s.id for s in store.service.list()] == [parse_conversation_id(conversation)]
        after = list(store.service.events(parse_conversation_id(conversation)))
    assert after[: len(before)] == before
    added = [e for e in after[len(before) :] if isinstance(e, UserMessage | AssistantText)]
    assert [getattr(e, "blocks", None) or getattr(e, "text", None) for e in added] == [
        ("Anything else?",),
        "Take an umbrella as well.",
    ]


@pytest.mark.parametrize("provider", ["anthropic", "openai", "google", "openai-chat"])
def test_an_ingested_conversation_exported_and_imported_back_records_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, provider: str
) -> None:
    db = f"sqlite:///{tmp_path / 'convstore.db'}"
    run(capsys, db, "ingest", "--provider", provider, EXAMPLES / provider)
    out_dir = tmp_path / "out"
    code, _, err = run(capsys, db, "export", "--all", "--format", "pydantic-ai", "-o", out_dir)
    assert code == 0, err
    with open_store(db) as store:
        before = {s.id: s.events for s in store.service.list()}
    code, out, err = run(capsys, db, "import", "pydantic-ai", out_dir, "--json")
    data = json.loads(out)
    assert code == 0, err
    assert (data["responses"], data["started"], data["failed"]) == (0, 0, 0)
    with open_store(db) as store:
        assert {s.id: s.events for s in store.service.list()} == before
