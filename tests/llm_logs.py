"""A `logs.db` written by the real `llm` package (the version in this venv) through its
own API and migrations, offline: its OpenAI-compatible model pointed at a
`ReplayServer` on 127.0.0.1 that answers from the Chat Completions examples, and an echo
model plugin registered here.

`write_logs(path, server)` logs one `local-chat` conversation (a question with a tool,
the streamed answer calling it twice, the results sent back by `llm`'s own tool loop, a
non-streamed answer; then a non-streamed follow-up answered with citations) and one
`echo` conversation (a system prompt, a fragment, an attachment).
`log_reply(path, conversation, text)` logs one more response of a conversation.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import llm
import sqlite_utils

from tests.replay_server import ReplayServer, Reply

EXAMPLES = Path(__file__).parents[1] / "examples" / "openai-chat"
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452")


class Echo(llm.Model):
    """Answers with the prompt it was given."""

    model_id = "echo"
    can_stream = True
    attachment_types = {"image/png"}

    def execute(self, prompt: Any, stream: Any, response: Any, conversation: Any) -> Iterator[str]:
        response.set_usage(input=len((prompt.prompt or "").split()), output=3)
        yield f"echo: {prompt.prompt}"


class EchoPlugin:
    """Registers `Echo`."""

    @llm.hookimpl
    def register_models(self, register: Any) -> None:
        register(Echo())


@contextmanager
def llm_models(user_dir: Path, server: ReplayServer) -> Iterator[None]:
    """`llm` configured here: `local-chat` at `server`, `echo` registered."""
    saved = {k: os.environ.get(k) for k in ("LLM_USER_PATH", "OPENAI_API_KEY")}
    user_dir.mkdir(parents=True, exist_ok=True)
    (user_dir / "extra-openai-models.yaml").write_text(
        "- model_id: local-chat\n"
        "  model_name: gpt-4.1\n"
        "  supports_tools: true\n"
        f"  api_base: {server.url}/v1\n"
    )
    os.environ["LLM_USER_PATH"] = str(user_dir)
    os.environ["OPENAI_API_KEY"] = "sk-not-a-real-key"
    plugin = EchoPlugin()
    llm.plugins.pm.register(plugin, name="convstore-test-echo")
    try:
        yield
    finally:
        llm.plugins.pm.unregister(name="convstore-test-echo")
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def get_weather(city: str) -> str:
    """The weather in a city."""
    return json.dumps({"city": city, "temperature_c": 4})


def _reply(name: str) -> Reply:
    path = EXAMPLES / name
    sse = path.suffix == ".sse"
    return Reply(
        body=path.read_bytes(), content_type="text/event-stream" if sse else "application/json"
    )


def write_logs(path: Path, server: ReplayServer) -> dict[str, llm.Conversation]:
    """Log the two conversations into `path`; the conversations by model."""
    server.enqueue(
        _reply("tool_call_stream/1.response.sse"),
        _reply("tool_call_stream/2.response.json"),
        _reply("citations_refusal/1.response.json"),
    )
    db = sqlite_utils.Database(path)
    chat = llm.get_model("local-chat").conversation()
    first = chat.prompt("What is the weather in Zürich and Kraków?", tools=[get_weather])
    first.text()
    first.log_to_db(db)
    answer = chat.prompt(tool_results=first.execute_tool_calls(), stream=False, tools=[get_weather])
    answer.text()
    answer.log_to_db(db)
    follow = chat.prompt("Where does the Rhône rise?", stream=False)
    follow.text()
    follow.log_to_db(db)

    echo = llm.get_model("echo").conversation()
    said = echo.prompt(
        "describe this",
        system="Be brief.",
        attachments=[llm.Attachment(content=PNG)],
        fragments=["a fragment of some length"],
    )
    said.text()
    said.log_to_db(db)
    db.close()
    return {"local-chat": chat, "echo": echo}


def log_reply(path: Path, conversation: llm.Conversation, text: str) -> None:
    """One more response of `conversation`, logged into `path`."""
    db = sqlite_utils.Database(path)
    response = conversation.prompt(text)
    response.text()
    response.log_to_db(db)
    db.close()
