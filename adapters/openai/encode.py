"""Stored events → an OpenAI Responses API request body: the native projection.

`encode_request` rebuilds, from a conversation's events alone, the request that continues
it on OpenAI (`POST /v1/responses`, the whole history in `input`, never a
`previous_response_id`), and lists what it had to leave out (`Loss`). It reads only: it
never writes to the store.

Input items, in event order
    `UserMessage` → `{"role": "user", "content": [{"type": "input_text", …}]}`.
    `ContextInjected` → a user message whose one `input_text` is the tagged envelope
    `<context source="…">…</context>`, never a system or developer message. A user-side
    item captured from a request (`UnknownArtifact` of format `input_item`: a developer
    message, a message with images, an item reference) → the item as captured.
    `ToolCallResponded` → `{"type": "function_call_output", "call_id", "output"}`
    (`custom_tool_call_output` for a custom tool's call), or the item as captured from a
    request. OpenAI has no error flag on a result: `is_error` is listed as a loss.

A response is replayed natively when it is OpenAI's, ended `completed`, and every payload
of it holds for the target (below). Then every item is the stored payload byte for byte
(`msgspec.Raw`): reasoning items with their `id` and `encrypted_content` (OpenAI rejects
a re-minted id), message items (every AssistantText of one message carries the same
payload: it is sent once), `function_call` and the typed client calls with their `id`,
hosted call items (`web_search_call`, `file_search_call`, `code_interpreter_call`, …) from
their terminal transition, unknown output items. `partial` payloads (a stream cut) are
never replayed, nor are `response_fields` / `stream_event` artifacts (metadata, not
content).

Payloads hold when
    - bound to a model (`binding["model"]`), that model is the target model
      (`wire.models`): the model its request named counts as the same one (the
      recording shows what the alias resolved to), and so does a name the documented
      naming makes its alias (`binding.model_id`: `gpt-5.1` ~ `gpt-5.1-2025-11-13`; two
      snapshots differ; never across a `-latest` alias), listed as an `assumed same
      model` line; any other binding key is not understood and never matches;
    - a reasoning item has `encrypted_content`, or the request is sent with `store: true`
      (the item then lives on OpenAI's side and its id resolves).
    One reasoning item that cannot be replayed sends the whole response in portable form:
    OpenAI refuses an item of a stored response "provided without its required reasoning
    item", and a reasoning item without the item that followed it.

Portable form (other providers, and OpenAI responses that cannot be replayed natively)
    Assistant text → `{"role": "assistant", "content": "<text>"}`, plain-string content
    (consecutive texts of one response joined into one message). An output message of
    `output_text` parts needs its item's `type`, `id` and `status` (the SDK's types and
    the proxies validating with them refuse it without), and an item id is never
    invented: its citations cannot be carried and are listed as lost. A captured assistant
    message of `output_text` parts without an id (some clients send one) is sent this way
    too. Tool calls → `function_call` items with a fresh deterministic id
    (`fc_<sha256>`) and the call id (shortened deterministically past 64 characters, alike
    for the call and its output), arguments as JSON text, names made valid
    (`[A-Za-z0-9_-]{1,64}`) the same way in `tools`. Reasoning, hosted activities, unknown
    artifacts and other providers' payloads are left out and listed.

Hosted activities (OpenAI)
    The call and its result are one item on this wire, carried by the terminal transition.
    Pending (started in a response that ended `completed`, never finished): its started
    payload is replayed and its tool stays declared even if the configuration does not
    enable it. Abandoned explicitly, interrupted (started in a response that did not
    complete) or without a payload: left out, a loss.

Settings
    From the newest OpenAI `ResponseStarted` that carries its native request (the body
    without `input`; `stream` dropped: the client chooses; `previous_response_id` and
    `conversation` dropped: the whole history is sent), even when another provider
    answered since (its settings do not map onto OpenAI's); when the conversation holds
    none, from the newest `ResponseStarted` that carries settings, read portably (system
    prompt → `instructions`, client tools → `function` tools with `strict: false`, tool
    choice, max tokens). `model` (argument, then `config.model`) and
    `config.max_output_tokens` override; `store` is `config.store`, else the recorded
    request's, else what its response reported, else true when an OpenAI request was
    recorded without it (the API's default: that conversation is stored), else false;
    with `store: false` and reasoning replayed, `include` gains
    `reasoning.encrypted_content` so the next reasoning comes back replayable; a target
    model that does not reason (`config.NON_REASONING_FAMILIES`: GPT-4o, GPT-4.1, …) gets
    neither the recorded `reasoning` nor that include (a `settings` loss). Hosted tools
    need the configuration's consent (`wire.consent`): `enable = true` declares the tool
    with the adapter's native type and the configured knobs (image generation and MCP
    tools as recorded); a hosted tool it does not enable is not declared, whatever the
    recorded request declared (a `tool_declaration` loss), except that a pending activity
    keeps its tool declared as it began (a `kept_declared` loss, and
    `EncodedRequest.kept_declared`). Every hosted tool declared is validated against the
    model and endpoint (ConfigurationError).

tool_choice is never broadened to hosted tools
    A choice that demands a tool call (`required`, the portable `any`, `allowed_tools` in
    mode `required`) while hosted tools are declared is narrowed to the client tools with
    `{"type": "allowed_tools", "mode": "required", "tools": [client tools]}` (a hosted call
    could otherwise satisfy it), or left out when no client tool is declared. A choice
    naming a tool (a function, or a hosted tool type) is kept only while that tool is
    declared (OpenAI answers 400 "Tool choice … not found in 'tools'"). Each change is a
    loss of kind `tool_choice`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from convstore.adapters.openai.binding import ResponseScan
from convstore.adapters.openai.config import (
    OpenAIConfig,
    validate_hosted_tools,
)
from convstore.adapters.openai.inputs import (
    build_input,
    user_item,
)
from convstore.adapters.openai.settings import ResolvedSettings
from convstore.adapters.wire.consent import kept_declared_notes
from convstore.adapters.wire.encoding import ENCODER
from convstore.adapters.wire.providers import Loss
from convstore.domain.attempts import reading
from convstore.domain.events import Event

__all__ = ["EncodedRequest", "encode_request", "encode_request_bytes"]


@dataclass(frozen=True, slots=True)
class EncodedRequest:
    """A Responses API request body and what it leaves out."""

    body: dict[str, Any]
    """Builtins plus `msgspec.Raw` values; encode with `to_json` to keep payload bytes."""
    losses: list[Loss] = field(default_factory=list)
    kept_declared: tuple[str, ...] = ()
    """Hosted tools declared only because an activity of them is pending (each also a
    `kept_declared` loss): the configuration does not enable them."""

    @property
    def notes(self) -> list[str]:
        """One sentence per hosted tool kept declared for pending work, for a person."""
        return kept_declared_notes(self)

    def to_json(self) -> bytes:
        """The body as JSON, every stored payload embedded byte for byte."""
        return ENCODER.encode(self.body)

    def recorded_json(self) -> bytes:
        """The request as its recording keeps it: the body, which names its model."""
        return self.to_json()


# --- public API ------------------------------------------------------------------------------


def encode_request(
    events: Sequence[Event],
    *,
    config: OpenAIConfig,
    model: str | None = None,
    user: str | None = None,
) -> EncodedRequest:
    """The request continuing the conversation of `events` on OpenAI.

    `model` overrides `config.model`, which overrides the recorded model; `user` appends
    a final user message. Raises ConfigurationError when no model is known or a hosted
    tool cannot be served.
    """
    events = reading(events)  # each response from its newest attempt
    scan = ResponseScan(events)
    losses: list[Loss] = []
    settings = ResolvedSettings.resolve(scan, config, model, losses)
    built = build_input(events, model=settings.model, store=settings.store)
    losses.extend(built.losses)
    items = built.items
    if user is not None:
        items.append(user_item(user))
    consented = settings.tools(config, built.pending, losses)
    tools = consented.tools
    validate_hosted_tools(
        config,
        settings.model,
        [t.name for t in tools if t.hosted],
        reasoning_effort=settings.reasoning_effort(),
    )
    body = settings.body(tools, losses, reasoning_replayed=built.reasoning_replayed)
    body["input"] = items
    return EncodedRequest(body=body, losses=losses, kept_declared=tuple(consented.kept_declared))


def encode_request_bytes(
    events: Sequence[Event],
    *,
    config: OpenAIConfig,
    model: str | None = None,
    user: str | None = None,
) -> bytes:
    """`encode_request(...)` as JSON bytes, every stored payload embedded verbatim."""
    return encode_request(events, config=config, model=model, user=user).to_json()
