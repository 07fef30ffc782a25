"""Model binding through aliases: a payload is bound to the model its response reported.

Requests name aliases, responses report the snapshot the alias resolved to. A request's
model and its response's are recorded together, so they are one model for binding: a
replay to the recorded alias carries every opaque value, exactly as a replay to the
snapshot does. Names never recorded together are one model only where the provider's
documented naming makes them an alias and its snapshot; the dry run lists that as
`assumed same model`. A `-latest` alias moves between snapshots: never assumed.

Each provider's case rewrites one of the project's example conversations to an alias
pair, records it through the adapters, and compares the rebuilt request with the one
rebuilt from the same conversation recorded under snapshot names only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from convstore.adapters.anthropic.binding import model_id as anthropic_model
from convstore.adapters.google.binding import model_id as google_model
from convstore.adapters.google.context import model_from_path
from convstore.adapters.google.decode import context_for, detect_and_decode
from convstore.adapters.openai.binding import model_id as openai_model
from convstore.adapters.wire.models import ModelId, ModelNames, Verdict
from convstore.adapters.wire.providers import Loss, adapter
from convstore.domain import Conversation, Event, ResponseStarted

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


# --- naming -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("read", "a", "b", "verdict"),
    [
        (anthropic_model, "claude-sonnet-4-5", "claude-sonnet-4-5-20250929", "assumed"),
        (anthropic_model, "claude-sonnet-4-0", "claude-sonnet-4-20250514", "assumed"),
        (anthropic_model, "claude-opus-4-1", "claude-opus-4-1-20250805", "assumed"),
        (anthropic_model, "claude-sonnet-4-5@20250929", "claude-sonnet-4-5-20250929", "same"),
        (
            anthropic_model,
            "us.anthropic.claude-3-5-sonnet-20240620-v1:0",
            "claude-3-5-sonnet-20240620",
            "same",
        ),
        (anthropic_model, "claude-3-7-sonnet-latest", "claude-3-7-sonnet-20250219", "different"),
        (anthropic_model, "claude-3-5-sonnet-20240620", "claude-3-5-sonnet-20241022", "different"),
        (anthropic_model, "claude-sonnet-4", "claude-sonnet-4-5", "different"),
        (anthropic_model, "claude-sonnet-4-5", "claude-sonnet-4-20250514", "different"),
        (openai_model, "gpt-5.1", "gpt-5.1-2025-11-13", "assumed"),
        (openai_model, "GPT-5.1-2025-11-13", "gpt-5.1-2025-11-13", "same"),
        (openai_model, "gpt-4", "gpt-4-0613", "assumed"),
        (openai_model, "gpt-5.1-2025-11-13", "gpt-5.1-2026-01-01", "different"),
        (openai_model, "gpt-4o", "gpt-4o-mini", "different"),
        (openai_model, "chatgpt-4o-latest", "chatgpt-4o-2024-11-20", "different"),
        (openai_model, "ft:gpt-4o-mini-2024-07-18:org::abc", "gpt-4o-mini", "different"),
        (google_model, "models/gemini-2.5-flash", "gemini-2.5-flash", "same"),
        (google_model, "gemini-2.0-flash", "gemini-2.0-flash-001", "assumed"),
        (google_model, "gemini-2.0-flash-001", "gemini-2.0-flash-002", "different"),
        (google_model, "gemini-flash-latest", "gemini-2.5-flash", "different"),
        (google_model, "gemini-2.5-flash-preview-05-20", "gemini-2.5-flash", "different"),
        (
            google_model,
            "projects/p/locations/l/publishers/google/models/gemini-2.5-pro",
            "gemini-2.5-pro",
            "same",
        ),
    ],
)
def test_documented_naming(read: Any, a: str, b: str, verdict: Verdict) -> None:
    names = ModelNames(read)
    assert names.verdict(a, b) == verdict
    assert names.verdict(b, a) == verdict


def test_names_recorded_together_are_one_model_transitively() -> None:
    names = ModelNames(anthropic_model)
    names.record("claude-3-7-sonnet-latest", "claude-3-7-sonnet-20250219")
    names.record("claude-3-7-sonnet-20250219", "us.anthropic.claude-3-7-sonnet-20250219-v1:0")
    assert names.verdict("claude-3-7-sonnet-latest", "claude-3-7-sonnet-20250219") == "same"
    assert names.verdict("us.anthropic.claude-3-7-sonnet-20250219-v1:0", "claude-3-7-sonnet-latest")
    assert names.verdict("claude-3-7-sonnet-latest", "claude-3-5-sonnet-20241022") == "different"
    assert names.assumed() == []


def test_an_assumption_is_listed_once_and_a_moving_alias_is_never_assumed() -> None:
    names = ModelNames(openai_model)
    assert names.same("gpt-5.1-2025-11-13", "gpt-5.1")
    assert names.same("gpt-5.1-2025-11-13", "gpt-5.1")
    assert not names.same("chatgpt-4o-2024-11-20", "chatgpt-4o-latest")
    assert not names.same("", "gpt-5.1")
    [line] = names.assumed()
    assert line.kind == "assumed same model"
    assert "'gpt-5.1-2025-11-13'" in line.reason and "'gpt-5.1'" in line.reason


def test_a_binding_key_it_cannot_verify_never_holds() -> None:
    from convstore.domain import ProviderPayload

    names = ModelNames(google_model)
    other = ProviderPayload.of("google", "part", b"{}", binding={"system": "sha256:abc"})
    assert "cannot verify" in (names.mismatch(other, "gemini-2.5-flash") or "")
    bound = ProviderPayload.of("google", "part", b"{}", binding={"model": "gemini-2.5-pro"})
    assert "gemini-2.5-flash" in (names.mismatch(bound, "gemini-2.5-flash") or "")
    assert names.mismatch(ProviderPayload.of("google", "part", b"{}"), "x") is None


def test_every_model_id_is_total() -> None:
    for read in (anthropic_model, openai_model, google_model):
        for name in ("", "-", "@", "models/", "x-latest", "-20250101", "ft:"):
            assert isinstance(read(name), ModelId)


# --- replay through an alias, per provider ----------------------------------------------------


EXAMPLE = {
    "anthropic": "anthropic/thinking_tool_roundtrip",
    "openai": "openai/reasoning_function_roundtrip",
    "google": "google/thinking_function_roundtrip",
}
"""A conversation of each provider with opaque values: thinking signatures, encrypted
reasoning, thought signatures on function calls."""

ALIASES = {
    "anthropic": ("claude-sonnet-4-0", "claude-sonnet-4-20250514"),
    "openai": ("gpt-5.1-codex-latest", "gpt-5.1-codex-2025-11-13"),
    "google": ("gemini-pro-latest", "gemini-3-pro-preview"),
}
"""(the alias the requests name, the snapshot the responses report)."""


def _rewrite(provider: str, text: str, *, aliased: bool, request: bool) -> str:
    alias, snapshot = ALIASES[provider]
    original = {
        "anthropic": ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929"),
        "openai": ("gpt-5.1", "gpt-5.1-2025-11-13"),
        "google": ("gemini-3-pro-preview", "gemini-3-pro-preview"),
    }[provider]
    text = text.replace(f'"{original[1]}"', f'"{snapshot}"')
    if request:
        text = text.replace(f'"{original[0]}"', f'"{alias if aliased else snapshot}"')
    return text


def _conversation(provider: str, *, aliased: bool) -> list[Event]:
    """The example conversation of `provider`, its requests naming the alias (`aliased`)
    or the snapshot, its responses reporting the snapshot."""
    folder = EXAMPLES / EXAMPLE[provider]
    alias, snapshot = ALIASES[provider]
    provider_adapter = adapter(provider)
    conversation = Conversation.start()
    for n in (1, 2):
        request = _rewrite(
            provider, (folder / f"{n}.request.json").read_text(), aliased=aliased, request=True
        ).encode()
        for message in provider_adapter.need_history()(list(conversation.pending), request):
            conversation.record_all(message.drafts)
        [response] = folder.glob(f"{n}.response.*")
        body = _rewrite(provider, response.read_text(), aliased=aliased, request=False).encode()
        if provider == "google":
            meta = json.loads((folder / f"{n}.meta.json").read_text())
            assert model_from_path(meta["path"]) == "gemini-3-pro-preview"
            context = context_for(request, model=alias if aliased else snapshot)
            drafts = list(detect_and_decode(body, request=context, status=200))
        else:
            drafts = list(provider_adapter.decode(body, request, 200))
        conversation.record_all(drafts)
    return list(conversation.pending)


def _replay(provider: str, events: list[Event], model: str | None) -> tuple[Any, list[Loss]]:
    config: Mapping[str, Any] = {}
    encoded = adapter(provider).need_encode()(events, config, model, None)
    return json.loads(encoded.to_json()), list(encoded.losses)


def _without_model(body: Any) -> Any:
    return {key: value for key, value in body.items() if key != "model"}


@pytest.mark.parametrize("provider", sorted(ALIASES))
def test_a_replay_to_the_recorded_alias_carries_every_opaque_value(provider: str) -> None:
    alias, snapshot = ALIASES[provider]
    aliased = _conversation(provider, aliased=True)
    [first, *_] = [e for e in aliased if isinstance(e, ResponseStarted)]
    assert first.model == snapshot  # the response reported the snapshot
    reference, reference_losses = _replay(provider, _conversation(provider, aliased=False), None)
    body, losses = _replay(provider, aliased, None)  # the recorded model: the alias
    assert body.get("model", alias) == alias
    assert _without_model(body) == _without_model(reference)
    assert losses == reference_losses
    assert not [loss for loss in losses if "model" in loss.reason]
    opaque = {"anthropic": '"signature"', "openai": '"encrypted_content"', "google": "Signature"}
    assert opaque[provider] in json.dumps(body)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_documented_alias_never_recorded_is_assumed_and_listed(provider: str) -> None:
    snapshots = _conversation(provider, aliased=False)
    documented = {"anthropic": "claude-sonnet-4-0", "openai": "gpt-5.1-codex"}[provider]
    reference, reference_losses = _replay(provider, snapshots, None)
    body, losses = _replay(provider, snapshots, documented)
    assert _without_model(body) == _without_model(reference)
    [assumed] = [loss for loss in losses if loss.kind == "assumed same model"]
    assert documented in assumed.reason and ALIASES[provider][1] in assumed.reason
    assert [loss for loss in losses if loss is not assumed] == reference_losses


@pytest.mark.parametrize("provider", sorted(ALIASES))
def test_a_moving_alias_never_recorded_is_another_model(provider: str) -> None:
    moving = {
        "anthropic": "claude-sonnet-4-latest",
        "openai": "gpt-5.1-codex-latest",
        "google": "gemini-pro-latest",
    }[provider]
    _, losses = _replay(provider, _conversation(provider, aliased=False), moving)
    assert any("bound to model" in loss.reason for loss in losses)
    assert not [loss for loss in losses if loss.kind == "assumed same model"]


def test_ask_records_the_gemini_model_its_url_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Gemini's model is in the URL, not the body: `ask` records it with the response's
    `modelVersion`, so a `-latest` alias it asked for binds the signatures that came back."""
    from convstore.adapters import cli
    from convstore.domain import parse_conversation_id
    from convstore.storage import open_store
    from tests.replay_server import ReplayServer, Reply

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", "AIzaSyTEST-model-binding")
    monkeypatch.setenv("CONVSTORE_CONFIG", "/dev/null")
    url = f"sqlite:///{tmp_path / 'convstore.db'}"
    alias, snapshot = ALIASES["google"]
    body = (EXAMPLES / EXAMPLE["google"] / "1.response.sse").read_bytes()
    assert f'"modelVersion": "{snapshot}"'.encode() in body
    with ReplayServer() as server:
        server.enqueue(Reply(body=body, content_type="text/event-stream"))
        base = f"providers.google.base_url={server.url}/v1beta"
        argv = ["--db", url, "ask", "--provider", "google", "Wetter?", "--cfg", base]
        assert cli.main([*argv, "--model", alias, "--json"]) == 0
        assert f"/models/{alias}:" in server.requests[-1].path
    with open_store(url) as store:
        [summary] = store.service.list()
        events = list(store.service.events(parse_conversation_id(str(summary.id))))
    [started] = [e for e in events if isinstance(e, ResponseStarted)]
    assert started.model == snapshot
    _, losses = _replay("google", events, alias)
    assert losses == []
    _, losses = _replay("google", events, "gemini-flash-latest")
    assert any("bound to model" in loss.reason for loss in losses)
