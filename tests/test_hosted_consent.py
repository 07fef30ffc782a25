"""Consent for hosted tools, end to end through the command line, for every provider.

A recorded conversation that used a hosted search is continued (`ask --conversation`
against a real HTTP server on 127.0.0.1, and `replay`) under a configuration that does not
enable the search: the request declares no hosted tool, and `replay --dry-run` names the
key that would. Enabled by `--cfg`, it is declared. While a search is pending (a mixed
batch stopped for a client call), it stays declared, and `replay --dry-run` says so.
Expectations are read from the captures with plain `json`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convstore.adapters import cli
from convstore.adapters.anthropic.context import RequestContext
from convstore.adapters.anthropic.decode import detect_and_decode
from convstore.adapters.anthropic.history import history_drafts
from convstore.adapters.wire.consent import kept_declared_notes
from convstore.adapters.wire.providers import adapter
from convstore.domain import Conversation
from tests.replay_server import ReplayServer, Reply

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

RECORDED = {
    "anthropic": "web_search_citations",
    "openai": "web_search_citations",
    "google": "grounding_search_stream",
}
"""An example per provider whose first exchange declared and ran a hosted search."""
ANSWER = {
    "anthropic": "thinking_tool_roundtrip/1.response.sse",
    "openai": "reasoning_function_roundtrip/1.response.sse",
    "google": "thinking_function_roundtrip/1.response.sse",
}
"""What the server answers `ask` with (any streamed response of the provider)."""
SEARCH = {
    "anthropic": "providers.anthropic.hosted_tools.web_search",
    "openai": "providers.openai.hosted_tools.web_search",
    "google": "providers.google.hosted_tools.google_search",
}
"""The key whose `enable = true` consents to each provider's search."""
KEYS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY", "google": "GEMINI_API_KEY"}
BASE = {"anthropic": "", "openai": "/v1", "google": "/v1beta"}


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("CONVSTORE_URL", "CONVSTORE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # no user config file
    for name in KEYS.values():
        monkeypatch.setenv(name, "test-key-not-a-secret")


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    with ReplayServer() as replay:
        yield replay


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def ingested(capsys: pytest.CaptureFixture[str], url: str, provider: str, folder: str) -> str:
    """Exchange 1 of an example, ingested with its request: the conversation."""
    capture = EXAMPLES / provider / folder
    [response] = capture.glob("1.response.*")
    code, out, err = run(
        capsys,
        *("--db", url, "ingest", "--provider", provider, "--json"),
        *("--request", capture / "1.request.json", response),
    )
    assert code == 0, err
    conversation: str = json.loads(out)["conversation_id"]
    return conversation


def hosted_tools(provider: str, body: dict[str, Any]) -> list[str]:
    """The hosted tools a request body declares, read with plain `json`."""
    tools = body.get("tools", [])
    if provider == "anthropic":
        return [t["name"] for t in tools if "_20" in t.get("type", "")]
    if provider == "openai":
        return [t["type"] for t in tools if t.get("type", "").startswith("web_search")]
    return [key for t in tools for key in t if key == "googleSearch"]


def recorded_tools(provider: str) -> list[str]:
    request = EXAMPLES / provider / RECORDED[provider] / "1.request.json"
    return hosted_tools(provider, json.loads(request.read_bytes()))


@pytest.mark.parametrize("provider", sorted(RECORDED))
def test_a_recorded_hosted_tool_is_no_consent(
    provider: str, capsys: pytest.CaptureFixture[str], sqlite_url: str, server: ReplayServer
) -> None:
    assert recorded_tools(provider)  # the recording declared the search, and ran it
    conversation = ingested(capsys, sqlite_url, provider, RECORDED[provider])
    # replay: no hosted tool, and the dry run names the key that would declare it.
    replay = ("--db", sqlite_url, "replay", conversation, "--to", provider)
    code, out, _ = run(capsys, *replay)
    assert code == 0 and hosted_tools(provider, json.loads(out)) == []
    code, out, _ = run(capsys, *replay, "--dry-run", "--json")
    declarations = [loss for loss in json.loads(out) if loss["kind"] == "tool_declaration"]
    assert declarations and f"{SEARCH[provider]}.enable = true" in declarations[0]["reason"]
    # With the configuration's consent, it is declared.
    code, out, _ = run(capsys, *replay, "--cfg", f"{SEARCH[provider]}.enable=true")
    assert code == 0 and hosted_tools(provider, json.loads(out)) == recorded_tools(provider)[:1]
    code, out, _ = run(
        capsys, *replay, "--dry-run", "--json", "--cfg", f"{SEARCH[provider]}.enable=true"
    )
    assert [loss for loss in json.loads(out) if loss["kind"] == "tool_declaration"] == []
    # ask, continuing it: the request it sends declares no hosted tool either.
    base = ("--cfg", f"providers.{provider}.base_url={server.url}{BASE[provider]}")
    server.enqueue(
        Reply(
            body=(EXAMPLES / provider / ANSWER[provider]).read_bytes(),
            content_type="text/event-stream",
        )
    )
    code, out, err = run(
        capsys,
        *("--db", sqlite_url, "ask", "And tomorrow?", "--conversation", conversation),
        *("--provider", provider, *base, "--json"),
    )
    assert code == 0, err
    [received] = server.requests
    sent = json.loads(received.body)
    assert hosted_tools(provider, sent) == []  # continued without consent: no search


def test_a_pending_search_keeps_its_tool_declared_and_says_so(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, server: ReplayServer
) -> None:
    conversation = ingested(capsys, sqlite_url, "anthropic", "mixed_batch")
    calls = [
        item
        for item in json.loads(
            run(
                capsys,
                *("--db", sqlite_url, "replay", conversation, "--to", "anthropic"),
                *("--dry-run", "--json"),
            )[1]
        )
        if item["kind"] == "unanswered_call"
    ]
    for call in calls:  # the client's part of the batch, answered as a client would
        code, _, err = run(
            capsys, "--db", sqlite_url, "answer", conversation, call["call_id"], "--text", "ok"
        )
        assert code == 0, err
    code, out, _ = run(
        capsys, "--db", sqlite_url, "replay", conversation, "--to", "anthropic", "--dry-run"
    )
    assert code == 0
    [kept] = [line for line in out.splitlines() if "kept declared" in line]
    assert "hosted tool web_search stays declared" in kept
    assert "providers.anthropic.hosted_tools.web_search.enable" in kept
    server.enqueue(
        Reply(
            body=(EXAMPLES / "anthropic" / "mixed_batch" / "2.response.json").read_bytes(),
        )
    )
    code, out, err = run(
        capsys,
        *("--db", sqlite_url, "ask", "And the search?", "--conversation", conversation),
        *("--cfg", f"providers.anthropic.base_url={server.url}", "--json"),
    )
    assert code == 0, err
    [note] = [line for line in err.splitlines() if "stays declared" in line]  # said so
    assert note.startswith("convstore: note: hosted tool web_search stays declared")
    [received] = server.requests
    sent = json.loads(received.body)
    recorded = json.loads((EXAMPLES / "anthropic" / "mixed_batch" / "1.request.json").read_bytes())
    assert hosted_tools("anthropic", sent) == ["web_search"]
    assert [t for t in sent["tools"] if t["name"] == "web_search"] == [
        t for t in recorded["tools"] if t["name"] == "web_search"
    ]  # as the pending search began under


def test_the_notes_a_caller_prints_name_each_tool_kept_declared() -> None:
    folder = EXAMPLES / "anthropic" / "mixed_batch"
    request = (folder / "1.request.json").read_bytes()
    conversation = Conversation.start()
    for message in history_drafts(request):
        conversation.record_all(message.drafts)
    body = (folder / "1.response.sse").read_bytes()
    conversation.record_all(detect_and_decode(body, request=RequestContext.from_body(request)))
    encoded = adapter("anthropic").need_encode()(list(conversation.pending), {}, None, None)
    assert list(encoded.kept_declared) == ["web_search"]
    [note] = kept_declared_notes(encoded)
    assert note.startswith("hosted tool web_search stays declared")
    assert list(encoded.notes) == [note]
    consented = {"providers": {"anthropic": {"hosted_tools": {"web_search": {"enable": True}}}}}
    encoded = adapter("anthropic").need_encode()(list(conversation.pending), consented, None, None)
    assert list(encoded.kept_declared) == [] and list(encoded.notes) == []
