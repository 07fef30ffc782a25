"""Stored events → an Anthropic Messages API request body: the native projection.

`encode_request` rebuilds, from a conversation's events alone, the request that continues
it on Anthropic, and lists what it had to leave out (`Loss`). It reads only: it never
writes to the store (recording an abandonment is the caller's decision).

Messages
    `UserMessage` → text blocks in a user message. `ContextInjected` → a text block
    `<context source="…">…</context>` in a user message, never a system prompt or a new
    role. `ToolCallResponded` → a `tool_result` block (`is_error` kept) in a user
    message. Every event of one response → blocks of one assistant message, in order.
    Consecutive messages of one role are merged (a `pause_turn` continuation and the
    response that continued it become one assistant message), and in a user message the
    `tool_result` blocks come first, as the API requires.

Same provider (`payload.provider == "anthropic"`) and a matching binding
    Every payload is embedded byte for byte (`msgspec.Raw`): thinking and redacted
    thinking, `tool_use`, both native blocks of each hosted activity (`server_tool_use` /
    `mcp_tool_use` and its `*_tool_result`), unknown content blocks as stored, `tool_result`
    blocks captured from a request. Text is rebuilt as `{"type": "text", "text": …}` with
    each citation's stored replay value (so `encrypted_index` round-trips).

Binding
    A payload bound to a model (`binding["model"]`) is replayed only when that model is
    the target model (`wire.models`): the model its request named counts as the same
    one (the recording shows what the alias resolved to), and so does a name the
    documented naming makes its alias (`binding.model_id`: `claude-sonnet-4-5` ~
    `claude-sonnet-4-5-20250929`, `claude-sonnet-4-0` ~ `claude-sonnet-4-20250514`,
    `…@20250929`, Bedrock's `anthropic.…-v1:0`; never across a `-latest` alias), listed
    as an `assumed same model` line; any other binding key is not understood and so never
    matches. Citations of a response whose model does not match are left out with it,
    since they point into the search results left out.

Hosted activities
    Replayed as a pair only when both blocks can be: the call payload, and the result
    payload or (pending work) none. Pending = started in a response that ended
    `completed` (a mixed batch stopped with `tool_use`, a `pause_turn`) with no terminal
    transition yet: its call block is replayed and its tool stays declared even if the
    configuration does not enable it. Started in a response that was `abandoned` or
    `failed` (interrupted), abandoned explicitly, foreign, without a payload, cut
    (`partial`) or bound to another model: neither block, and a loss.

Other providers
    Portable content only: text (citations left out), tool calls as `tool_use` with the
    portable arguments (ids made valid for Anthropic, deterministically), tool results.
    Foreign reasoning, hosted activities, unknown artifacts and payloads are left out and
    listed.

Settings
    From the newest `ResponseStarted` that carries settings: its native request (the body
    without messages, `stream` dropped: the client chooses) when it is Anthropic's, else
    the portable settings. `model` (argument, then `config.model`) and `config.max_tokens`
    override. Hosted tools need the configuration's consent (`wire.consent`): `enable =
    true` declares the tool with this adapter's native version and the configured knobs;
    a hosted tool it does not enable is not declared, whatever the recorded request
    declared (a `tool_declaration` loss), except that a pending activity keeps its tool
    declared as it began (a `kept_declared` loss, and `EncodedRequest.kept_declared`).
    Every hosted tool declared is validated against the model and endpoint
    (ConfigurationError). MCP servers (`mcp_servers`, `mcp_toolset` tools) are hosted
    declarations `mcp:<server>` and tool search tools (`tool_search_tool_*`) hosted
    declarations of their own: declared as recorded when `hosted_tools.mcp` /
    `hosted_tools.tool_search` is enabled (or a pending activity needs them), with the
    connector's beta header (`mcp-client-2025-11-20`, or `mcp-client-2025-04-04` for
    servers no toolset configures).

tool_choice is never broadened to hosted tools
    `any` with hosted tools declared becomes `{"type": "tool"}` naming the only client
    tool when there is exactly one, else `auto` (no way to say "any client tool"); a
    choice naming a hosted tool (forcing one is unsupported) or an undeclared tool is left
    out. Each such change is listed as a loss of kind `tool_choice`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from convstore.adapters.anthropic.config import (
    LEGACY_MCP_BETA,
    NATIVE_TOOL_BETAS,
    AnthropicConfig,
    validate_hosted_tools,
)
from convstore.adapters.anthropic.messages import (
    MessageBlock,
    MessageScan,
    append_block,
    build_messages,
)
from convstore.adapters.anthropic.settings import ResolvedSettings
from convstore.adapters.wire.consent import kept_declared_notes
from convstore.adapters.wire.encoding import ENCODER
from convstore.adapters.wire.providers import Loss
from convstore.domain.attempts import reading
from convstore.domain.events import Event

__all__ = ["EncodedRequest", "encode_request", "encode_request_bytes"]


@dataclass(frozen=True, slots=True)
class EncodedRequest:
    """A Messages API request body and what it leaves out."""

    body: dict[str, Any]
    """Builtins plus `msgspec.Raw` values; encode with `to_json` to keep payload bytes."""
    losses: list[Loss] = field(default_factory=list)
    betas: tuple[str, ...] = ()
    """`anthropic-beta` header values the declared tools need."""
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
    config: AnthropicConfig,
    model: str | None = None,
    user: str | None = None,
) -> EncodedRequest:
    """The request continuing the conversation of `events` on Anthropic.

    `model` overrides `config.model`, which overrides the recorded model; `user` appends
    a final user message. Raises ConfigurationError when no model is known or a hosted
    tool cannot be served.
    """
    events = reading(events)  # each response from its newest attempt
    scan = MessageScan(events)
    losses: list[Loss] = []
    settings = ResolvedSettings.resolve(scan, config, model, losses)
    built = build_messages(events, model=settings.model)
    losses.extend(built.losses)
    messages = built.messages
    if user is not None:
        append_block(
            messages, "user", MessageBlock(type="text", value={"type": "text", "text": user})
        )
    consented = settings.tools(config, built.pending, losses)
    tools = consented.tools
    validate_hosted_tools(config, settings.model, [t.name for t in tools if t.hosted])
    body = settings.body(tools, losses)
    if built.container and "container" not in body:
        body["container"] = built.container
    body["messages"] = [m.wire() for m in messages]
    betas = [NATIVE_TOOL_BETAS[t.type] for t in tools if t.type in NATIVE_TOOL_BETAS]
    if "mcp_servers" in body and not any(t.type == "mcp_toolset" for t in tools):
        betas.append(LEGACY_MCP_BETA)
    return EncodedRequest(
        body=body,
        losses=losses,
        betas=tuple(dict.fromkeys(betas)),
        kept_declared=tuple(consented.kept_declared),
    )


def encode_request_bytes(
    events: Sequence[Event],
    *,
    config: AnthropicConfig,
    model: str | None = None,
    user: str | None = None,
) -> bytes:
    """`encode_request(...)` as JSON bytes, every stored payload embedded verbatim."""
    return encode_request(events, config=config, model=model, user=user).to_json()
