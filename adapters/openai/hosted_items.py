"""Hosted tool output items (`web_search_call`, `file_search_call`, `code_interpreter_call`,
`image_generation_call`, `mcp_call`, `mcp_list_tools`) → their activity: its name, its
normalized input, the summary of a successful run, and the terminal state its `status`
reports (a failed one summarized by its `error`: a string, or an MCP error object's
message). Work that comes as a call item and a result item is in `paired_items`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from convstore.adapters.openai.item_fields import as_list, counted, need_str, str_field
from convstore.domain.vocabulary import Lifecycle

__all__ = ["ACTIVITY_INPUTS", "ACTIVITY_SUMMARIES", "HOSTED_ITEMS", "mcp_name", "terminal_state"]


def _web_search_input(item: Mapping[str, Any]) -> dict[str, Any]:
    action = item.get("action")
    if not isinstance(action, dict):
        return {}
    kind = action.get("type")
    keys = {
        "search": ("query", "queries"),
        "open_page": ("url",),
        "find": ("url", "pattern"),
        "find_in_page": ("url", "pattern"),
    }
    wanted = keys.get(kind) if isinstance(kind, str) else None
    if wanted is None:
        return {k: v for k, v in action.items() if k != "sources"}
    return {k: action[k] for k in wanted if action.get(k) is not None}


def _web_search_summary(item: Mapping[str, Any]) -> str:
    action = item.get("action")
    if not isinstance(action, dict):
        return "done"
    kind = action.get("type")
    if kind == "open_page":
        return f"opened {str_field(action, 'url') or 'a page'}"
    if kind in ("find", "find_in_page"):
        pattern, url = str_field(action, "pattern") or "", str_field(action, "url") or "a page"
        return f'found "{pattern}" in {url}'
    query = str_field(action, "query")
    queries = [q for q in as_list(action.get("queries")) if isinstance(q, str)]
    shown = ", ".join(f'"{q}"' for q in (queries or ([query] if query else [])))
    summary = f"searched {shown}" if shown else "searched"
    sources = action.get("sources")
    return (
        f"{summary} ({counted(len(sources), 'source')})" if isinstance(sources, list) else summary
    )


def _file_search_summary(item: Mapping[str, Any]) -> str:
    results = item.get("results")
    return counted(len(results), "result") if isinstance(results, list) else "done"


def _code_summary(item: Mapping[str, Any]) -> str:
    outputs = item.get("outputs")
    if not isinstance(outputs, list):
        return "done"
    kinds = [o.get("type") for o in outputs if isinstance(o, dict)]
    shown = [
        counted(kinds.count(kind), noun)
        for kind, noun in (("logs", "log"), ("image", "image"))
        if kind in kinds
    ]
    return ", ".join(shown) or "no output"


def _tools_listed(item: Mapping[str, Any]) -> str:
    tools = item.get("tools")
    return counted(len(tools), "tool") if isinstance(tools, list) else "done"


def _arguments(item: Mapping[str, Any]) -> dict[str, Any]:
    text = item.get("arguments")
    if not isinstance(text, str):
        return {}
    try:
        value = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return {"arguments": text}
    return value if isinstance(value, dict) else {"arguments": text}


def _kept(key: str, name: str, kind: type) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """The input `{name: item[key]}` when the item has one of type `kind`, else `{}`."""

    def normalized(item: Mapping[str, Any]) -> dict[str, Any]:
        value = item.get(key)
        return {name: value} if isinstance(value, kind) else {}

    return normalized


ACTIVITY_INPUTS: Final[Mapping[str, Callable[[Mapping[str, Any]], dict[str, Any]]]] = {
    "web_search_call": _web_search_input,
    "file_search_call": _kept("queries", "queries", list),
    "code_interpreter_call": _kept("code", "code", str),
    "image_generation_call": _kept("revised_prompt", "prompt", str),
    "mcp_call": _arguments,
    "mcp_list_tools": _kept("server_label", "server_label", str),
}
"""Hosted item type → its normalized input."""

ACTIVITY_SUMMARIES: Final[Mapping[str, Callable[[Mapping[str, Any]], str]]] = {
    "web_search_call": _web_search_summary,
    "file_search_call": _file_search_summary,
    "code_interpreter_call": _code_summary,
    "image_generation_call": lambda i: "1 image" if isinstance(i.get("result"), str) else "done",
    "mcp_call": lambda i: "done",
    "mcp_list_tools": _tools_listed,
}
"""Hosted item type → the summary of a successful run."""


def mcp_name(item: Mapping[str, Any]) -> str:
    """`mcp:<server>/<tool>`, the activity name of an MCP tool call (as for Anthropic)."""
    return f"mcp:{str_field(item, 'server_label') or ''}/{need_str(item, 'name')}"


HOSTED_ITEMS: Final[Mapping[str, Callable[[Mapping[str, Any]], str]]] = {
    "web_search_call": lambda i: "web_search",
    "file_search_call": lambda i: "file_search",
    "code_interpreter_call": lambda i: "code_interpreter",
    "image_generation_call": lambda i: "image_generation",
    "mcp_call": mcp_name,
    "mcp_list_tools": lambda i: f"mcp:{str_field(i, 'server_label') or ''}/tools/list",
}
"""Hosted item type → the activity name (`mcp:<server>/<tool>` as for Anthropic)."""

_TERMINAL: Final[Mapping[str, Lifecycle]] = {
    "completed": "completed",
    "failed": "failed",
    "incomplete": "failed",
}


def _failure(error: Any, fallback: str) -> str:
    """A short summary of an item's `error`: a string one, or an error object's message
    (an MCP call's `mcp_protocol_error` / `http_error`), else its type."""
    message = error if isinstance(error, str) else None
    if isinstance(error, dict):
        message = str_field(error, "message") or str_field(error, "type")
    if not message:
        return fallback
    return message if len(message) <= 80 else fallback


def terminal_state(item: Mapping[str, Any]) -> tuple[Lifecycle, str] | None:
    """(state, summary-if-failed) from the item's status; None while it still runs."""
    status = item.get("status")
    error = item.get("error")
    if status is None or status == "completed":
        if error not in (None, "", {}):
            return "failed", _failure(error, "error")
        return "completed", ""
    if isinstance(status, str) and status in _TERMINAL:
        state = _TERMINAL[status]
        return state, _failure(error, status) if state == "failed" else status
    return None
