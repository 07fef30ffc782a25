"""Provider-run work that arrives as two output items: a call, then its result.

An *opener* starts the activity and carries the call item as the `started` transition's
payload; its *closer* ends it, carrying the result item as the terminal transition's
payload, so replay sends both, each in its place. The pairs:

`shell_call` run in a hosted container (`environment.type` is `container_reference`)
    → `shell_call_output`: activity `shell`, id = `call_id`, input = the commands; the
    summary gives each command's outcome (`exit 0`, `timed out`). A `shell_call` in a
    local environment (or naming none) is the client's to run: a tool call.
`tool_search_call` with `execution: server` → `tool_search_output`: activity
    `tool_search`, id = `call_id` (else the call item's id), input = the arguments,
    summary = the number of tools loaded. With `execution: client` it is a tool call.
`mcp_approval_request` → the `mcp_call` whose `approval_request_id` names it, in the
    response after the client's `mcp_approval_response`: activity `mcp:<server>/<tool>`,
    id = the approval request's id; it stays `started` (awaiting approval) until then.

A closer whose opener is not in its response (the approval case, or a request's history)
is a terminal transition alone: it closes the activity where the conversation holds its
start, and begins terminal otherwise (the lifecycle allows both).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from convstore.adapters.openai.hosted_items import ACTIVITY_INPUTS, ACTIVITY_SUMMARIES, mcp_name
from convstore.adapters.openai.item_fields import as_list, counted, need_str, str_field

__all__ = ["CLOSERS", "OPENERS", "Closer", "Opener", "is_hosted"]


def _call_id(item: Mapping[str, Any]) -> str:
    return need_str(item, "call_id")


def _call_or_item_id(item: Mapping[str, Any]) -> str:
    return str_field(item, "call_id") or need_str(item, "id")


def _commands(item: Mapping[str, Any]) -> dict[str, Any]:
    action = item.get("action")
    commands = action.get("commands") if isinstance(action, dict) else None
    return {"commands": commands} if isinstance(commands, list) else {}


def _search_arguments(item: Mapping[str, Any]) -> dict[str, Any]:
    arguments = item.get("arguments")
    if isinstance(arguments, dict):
        return arguments
    return {} if arguments is None else {"arguments": arguments}


def _shell_outcomes(item: Mapping[str, Any]) -> str:
    shown: list[str] = []
    for chunk in as_list(item.get("output")):
        outcome = chunk.get("outcome") if isinstance(chunk, dict) else None
        if not isinstance(outcome, dict):
            continue
        if outcome.get("type") == "timeout":
            shown.append("timed out")
        elif type(outcome.get("exit_code")) is int:
            shown.append(f"exit {outcome['exit_code']}")
    return ", ".join(shown) or "done"


def _tools_loaded(item: Mapping[str, Any]) -> str:
    tools = item.get("tools")
    return counted(len(tools), "tool") if isinstance(tools, list) else "done"


class Opener:
    """How a call item starts its activity."""

    def __init__(
        self,
        activity_id: Callable[[Mapping[str, Any]], str],
        name: Callable[[Mapping[str, Any]], str],
        normalized: Callable[[Mapping[str, Any]], dict[str, Any]],
        pending: str,
    ) -> None:
        self.activity_id = activity_id
        self.name = name
        self.normalized = normalized
        self.pending = pending
        """The summary while it waits for its result (e.g. `awaiting approval`)."""


class Closer:
    """How a result item ends the activity its call started."""

    def __init__(
        self,
        opener: str,
        activity_id: Callable[[Mapping[str, Any]], str | None],
        name: Callable[[Mapping[str, Any]], str],
        normalized: Callable[[Mapping[str, Any]], dict[str, Any]],
        summary: Callable[[Mapping[str, Any]], str],
    ) -> None:
        self.opener = opener
        """The item type of its call."""
        self.activity_id = activity_id
        """The activity it ends; None: the last one its opener kind left open."""
        self.name = name
        self.normalized = normalized
        """Its input when its call is not in the same response."""
        self.summary = summary


OPENERS: Final[Mapping[str, Opener]] = {
    "shell_call": Opener(_call_id, lambda i: "shell", _commands, "running"),
    "tool_search_call": Opener(
        _call_or_item_id, lambda i: "tool_search", _search_arguments, "searching"
    ),
    "mcp_approval_request": Opener(
        lambda i: need_str(i, "id"), mcp_name, ACTIVITY_INPUTS["mcp_call"], "awaiting approval"
    ),
}
"""Call item type → how it opens its activity (when `is_hosted`)."""

CLOSERS: Final[Mapping[str, Closer]] = {
    "shell_call_output": Closer(
        "shell_call", _call_id, lambda i: "shell", lambda i: {}, _shell_outcomes
    ),
    "tool_search_output": Closer(
        "tool_search_call",
        lambda i: str_field(i, "call_id"),
        lambda i: "tool_search",
        lambda i: {},
        _tools_loaded,
    ),
    "mcp_call": Closer(
        "mcp_approval_request",
        lambda i: need_str(i, "approval_request_id"),
        mcp_name,
        ACTIVITY_INPUTS["mcp_call"],
        ACTIVITY_SUMMARIES["mcp_call"],
    ),
}
"""Result item type → how it closes its activity (when `is_hosted`)."""


def is_hosted(item: Mapping[str, Any]) -> bool:
    """Whether a paired kind's item is the provider's work (else: a client call, or, for
    `mcp_call`, the single-item hosted call with no approval)."""
    kind = item.get("type")
    if kind in ("shell_call", "shell_call_output"):
        if kind == "shell_call_output":
            return True  # in a response's output: only the provider runs a shell there
        environment = item.get("environment")
        return isinstance(environment, dict) and environment.get("type") == "container_reference"
    if kind in ("tool_search_call", "tool_search_output"):
        return item.get("execution") != "client"
    if kind == "mcp_call":
        return isinstance(item.get("approval_request_id"), str)
    return kind == "mcp_approval_request"
