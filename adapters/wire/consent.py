"""Which hosted tools a request declares: consent is the current configuration's alone.

A hosted tool runs on the provider's side (its network access, its spend, its execution)
before anyone could approve a call, so `enable = true` in the provider's block
(`providers.<provider>.hosted_tools.<tool>`) is blanket consent, and the only one:

- a hosted tool the configuration does not enable is not declared, even when the recorded
  request the settings come from declared it: continuing a conversation never re-enables
  a tool because the recording had it. Each one left out is a `tool_declaration` loss;
- the one exception (seed 001, "same provider, declaration changed"): while an activity of
  the tool is pending (started in a response that completed, with no terminal transition
  yet: a `pause_turn`, a mixed batch), the tool stays declared under the declaration it
  began with, since the provider's transcript depends on it. Each tool kept so is a loss
  of kind `kept_declared` (so `replay --dry-run` shows it) and is named in the request's
  `kept_declared` (so `ask` can say so on stderr).

The providers' settings modules call `consented_tools` with what they read: the recorded
declarations, the ones their configuration makes, and the pending activities.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from convstore.adapters.wire.providers import DeclaredTool, EncodedRequest, Loss
from convstore.domain.events import HostedActivity, ResponseStarted

__all__ = [
    "KEPT_DECLARED",
    "ConsentedTools",
    "PendingTool",
    "consented_tools",
    "kept_declared_notes",
    "kept_loss",
]

KEPT_DECLARED: Final = "kept_declared"
"""The loss kind of a hosted tool declared only because an activity of it is pending."""


@dataclass(frozen=True, slots=True)
class PendingTool:
    """A hosted tool a pending activity needs declared."""

    activity: HostedActivity
    """The activity's `started` transition."""
    declaration: DeclaredTool | None = None
    """What to declare when the recorded request does not declare the tool (None: nothing,
    e.g. an MCP server that stays in its own list)."""


@dataclass(slots=True)
class ConsentedTools:
    """The tools a request declares, and the hosted ones kept only for pending work."""

    tools: list[DeclaredTool]
    kept_declared: list[str] = field(default_factory=list)
    """Hosted tools the configuration does not enable, declared for a pending activity."""


def consented_tools(
    recorded: Sequence[DeclaredTool],
    *,
    configured: Mapping[str, DeclaredTool],
    enables: Callable[[str], bool],
    pending: Mapping[str, PendingTool],
    key: Callable[[str], str],
    source: ResponseStarted | None,
    losses: list[Loss],
) -> ConsentedTools:
    """The request's tools: the recorded client tools, and the hosted tools consented to.

    `configured`: tool name → the declaration the configuration makes (tools it enables
    and the adapter declares itself); `enables(name)`: whether the configuration enables
    hosted tool `name` at all (a recorded-only tool such as an MCP server is declared as
    recorded); `pending`: tool name → what a pending activity needs; `key(name)`: the
    configuration key that enables it, for the losses.
    """
    out = ConsentedTools([])
    seen: set[str] = set()

    def keep(tool: DeclaredTool) -> None:
        out.tools.append(tool)
        seen.add(tool.name)
        if not enables(tool.name) and tool.name not in out.kept_declared:
            out.kept_declared.append(tool.name)
            losses.append(kept_loss(tool.name, pending[tool.name].activity, key(tool.name)))

    for tool in recorded:
        name = tool.name
        if not tool.hosted:
            out.tools.append(tool)
        elif name in pending:
            keep(tool)  # the declaration its pending work began under
        elif name in configured:
            if name not in seen:
                out.tools.append(configured[name])
                seen.add(name)
        elif enables(name):
            out.tools.append(tool)
            seen.add(name)
        elif name not in seen:
            seen.add(name)
            losses.append(
                Loss(
                    version=source.originator_version if source is not None else 0,
                    event="ResponseStarted" if source is not None else "settings",
                    kind="tool_declaration",
                    reason=(
                        f"hosted tool {name} is not declared: the configuration does not "
                        f"enable it (a recorded request is no consent; set {key(name)}"
                        ".enable = true)"
                    ),
                )
            )
    for name, declaration in configured.items():
        if name not in seen:
            out.tools.append(declaration)
            seen.add(name)
    for name, needed in pending.items():
        if name not in seen and needed.declaration is not None:
            keep(needed.declaration)
    return out


def kept_loss(name: str, activity: HostedActivity, key: str) -> Loss:
    """The `kept_declared` loss of hosted tool `name`, declared for pending `activity`."""
    return Loss(
        version=activity.originator_version,
        event="HostedActivity",
        kind=KEPT_DECLARED,
        reason=(
            f"hosted tool {name} stays declared although the configuration does not enable "
            f"it ({key}.enable): activity {activity.activity_id} is pending, and the "
            "provider continues it only while the tool is declared"
        ),
    )


def kept_declared_notes(request: EncodedRequest) -> list[str]:
    """One sentence per hosted tool `request` keeps declared for pending work, for a
    person (unsanitized: render them), e.g. on stderr before the request is sent."""
    return [loss.reason for loss in request.losses if loss.kind == KEPT_DECLARED]
