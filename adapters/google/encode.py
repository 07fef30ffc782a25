"""Stored events → a Gemini `generateContent` request body: the native projection.

`encode_request` rebuilds, from a conversation's events alone, the request that continues
it on Gemini (`EncodedRequest`: the body, the model, which goes in the URL path, and the
`Loss`es). It reads only: it never writes to the store.

Contents
    `UserMessage` → text parts of a `user` content. `ContextInjected` → a text part
    `<context source="…">…</context>` in a `user` content, never `systemInstruction`.
    `ToolCallResponded` → a `functionResponse` part in a `user` content. Every event of one
    response → parts of one `model` content, in order. Consecutive contents of one role are
    merged, and in a `user` content the `functionResponse` parts come first.

Same provider (`payload.provider == "google"`, format `part`) and a matching binding
    Every stored part is embedded byte for byte (`msgspec.Raw`), where it stood: signed
    text and thought parts (a signed empty final part too), `functionCall` parts with their
    `thoughtSignature`, `executableCode` / `codeExecutionResult` parts (thought-time runs
    included), unknown parts, `functionResponse` parts captured from a request. Text and
    thought runs that carry no payload (unsigned) are rebuilt as `{"text": …}` and
    `{"text": …, "thought": true}`.

Binding
    A payload bound to a model (`binding["model"]`, the `modelVersion` that produced it) is
    replayed only to that model (`wire.models`): the model its request named counts as
    the same one (the recording shows what the alias resolved to), and so does a name the
    documented naming makes its alias (`binding.model_id`: `models/` and Vertex resource
    prefixes ignored; `gemini-2.0-flash` ~ `gemini-2.0-flash-001`, never across a
    `-latest` alias), listed as an `assumed same model` line; any other binding key is not
    understood and never matches. Left out otherwise: a signed
    text part becomes plain text and a function call a portable one (each a loss of kind
    `payload`); signed reasoning is left out (`reasoning`).

Function results
    `functionResponse` = `{name, response}`: the stored part when it came from a Gemini
    request and its `id` agrees with its call's; otherwise built from the portable content:
    a JSON object is sent as the `response` object, plain text wrapped as
    `{"result": text}` (`{"error": text}` when `is_error`). `id` is sent only when the
    call's stored part had one — never a derived id.

Other providers
    Portable parts only: text (citations left out: Gemini cannot carry them), function
    calls with their arguments (names made valid for Gemini deterministically, no ids),
    function results. Foreign reasoning, hosted activities, payloads and unknown artifacts
    are left out and listed. For a Gemini 3 target, the first function call of a model
    content that has no signature bound to the target model carries Google's documented
    placeholder `thoughtSignature` (`SKIP_SIGNATURE`), which Gemini 3 accepts for calls
    transferred from another model.

Hosted work
    Gemini's grounding (`web_search`, `url_context` activities; their payloads are
    metadata, not content) is never sent back and is no loss. Its Search Suggestion (a
    `display` obligation) is never replayed as content: each is listed as a loss of kind
    `display`. Code execution is replayed as its two parts when both can be; a run whose
    result never came, abandoned, or bound to another model is left out with a loss.

Settings
    From the newest `ResponseStarted` that carries settings: its native request (the body
    without `contents`) when it is Google's, else the portable settings (system →
    `systemInstruction`, client tools → `functionDeclarations` with `parametersJsonSchema`,
    max tokens → `generationConfig.maxOutputTokens`, tool choice → `toolConfig`). `model`
    (argument, then `config.model`, then the newest Gemini response's model) goes in the
    URL path, never the body. `config.max_output_tokens` and `config.thinking` override
    `generationConfig`. Hosted tools need the configuration's consent (`wire.consent`):
    `enable = true` declares `googleSearch` / `urlContext` / `codeExecution` (a recorded
    entry of it as recorded; the other hosted keys only as recorded); a hosted tool it
    does not enable is not declared, whatever the recorded request declared (a
    `tool_declaration` loss). No Gemini hosted work stays pending across responses, so
    none keeps its tool declared (`kept_declared` is always empty). Every hosted tool
    declared is validated against the model and endpoint (ConfigurationError).
    A recorded `thinkingConfig` sent to a model that does not think is left out (a loss).

toolConfig is never broadened to hosted tools
    Gemini's `ANY` mode forces a function call, which only declared functions satisfy, so
    hosted tools never satisfy it; `allowedFunctionNames` keeps only declared functions (a
    name of a hosted tool, which cannot be forced, or an undeclared one is removed), and a
    forcing mode with no function left to force is left out. Each change is a loss of kind
    `tool_choice`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from convstore.adapters.google.config import (
    GoogleConfig,
    model_path,
)
from convstore.adapters.google.contents import (
    ContentScan,
    Part,
    append_part,
    build_contents,
)
from convstore.adapters.google.settings import ResolvedSettings
from convstore.adapters.wire.consent import kept_declared_notes
from convstore.adapters.wire.encoding import ENCODER
from convstore.adapters.wire.providers import Loss
from convstore.domain.attempts import reading
from convstore.domain.events import Event

__all__ = ["EncodedRequest", "encode_request"]


@dataclass(frozen=True, slots=True)
class EncodedRequest:
    """A `generateContent` request: its body, the model the URL names, and what it leaves
    out."""

    body: dict[str, Any]
    """Builtins plus `msgspec.Raw` values; encode with `to_json` to keep payload bytes."""
    model: str
    """The model the request goes to (it is in the URL path, never in the body)."""
    losses: list[Loss] = field(default_factory=list)
    kept_declared: tuple[str, ...] = ()
    """Hosted tools declared only for pending work: none on Gemini (see `encode`)."""

    @property
    def notes(self) -> list[str]:
        """One sentence per hosted tool kept declared for pending work, for a person."""
        return kept_declared_notes(self)

    def to_json(self) -> bytes:
        """The body as JSON, every stored payload embedded byte for byte."""
        return ENCODER.encode(self.body)

    def recorded_json(self) -> bytes:
        """The request as its recording keeps it: the body with the model the URL names
        (`model`, which the decoder records with the response's `modelVersion`)."""
        return ENCODER.encode({**self.body, "model": self.model})

    def path(self, *, stream: bool = True) -> str:
        """The method's path relative to the base URL, e.g.
        `models/gemini-2.5-flash:streamGenerateContent?alt=sse`."""
        return model_path(self.model, stream=stream)


# --- public API ------------------------------------------------------------------------------


def encode_request(
    events: Sequence[Event],
    *,
    config: GoogleConfig,
    model: str | None = None,
    user: str | None = None,
) -> EncodedRequest:
    """The request continuing the conversation of `events` on Gemini.

    `model` overrides `config.model`, which overrides the newest Gemini response's model;
    `user` appends a final user content. Raises ConfigurationError when no model is known,
    or a hosted tool or the thinking settings cannot be served.
    """
    events = reading(events)  # each response from its newest attempt
    scan = ContentScan(events)
    losses: list[Loss] = []
    settings = ResolvedSettings.resolve(scan, config, model, losses)
    built = build_contents(events, model=settings.model, scan=scan)
    losses.extend(built.losses)
    contents = built.contents
    if user is not None and user:
        append_part(contents, "user", Part("text", {"text": user}))
    body: dict[str, Any] = {"contents": [c.wire() for c in contents]}
    body.update(settings.body(config, losses))
    return EncodedRequest(body=body, model=settings.model, losses=losses)
