"""The configuration of the person who sent captured requests, for tests that continue
them: every hosted tool the requests declare enabled, with the knobs they declare.

A recorded request is no consent (`adapters.wire.consent`): a test that wants the next
captured request rebuilt, hosted tools included, consents to them as that person's
configuration did. The knobs are read from the requests with plain `json`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from convstore.adapters.anthropic.config import NATIVE_TOOL_VERSIONS, AnthropicConfig, tool_name_of
from convstore.adapters.google.config import GoogleConfig, config_name
from convstore.adapters.google.context import HOSTED_TOOLS
from convstore.adapters.openai.config import NATIVE_TOOL_TYPES, OpenAIConfig
from convstore.adapters.openai.context import hosted_name_of

Request = bytes | dict[str, Any] | None


def _bodies(requests: Iterable[Request]) -> list[dict[str, Any]]:
    out = []
    for request in requests:
        if request is not None:
            out.append(json.loads(request) if isinstance(request, bytes) else request)
    return out


def requests_of(folder: Path) -> list[bytes]:
    """Every captured request of an example folder."""
    return [p.read_bytes() for p in sorted(folder.glob("*.request.json"))]


def anthropic_consent(*requests: Request) -> AnthropicConfig:
    """Every hosted tool `requests` declare enabled: web search, web fetch and code
    execution with their knobs (the adapter's own version), tool search and MCP as
    recorded."""
    blocks: dict[str, dict[str, Any]] = {}
    for body in _bodies(requests):
        if body.get("mcp_servers"):
            blocks["mcp"] = {"enable": True}
        for tool in body.get("tools", []):
            kind, name = tool.get("type", ""), tool.get("name", "")
            if kind.startswith("tool_search_tool_"):
                blocks["tool_search"] = {"enable": True}
            elif name in NATIVE_TOOL_VERSIONS and tool_name_of(kind) == name:
                knobs = {k: v for k, v in tool.items() if k not in ("type", "name")}
                blocks[name] = {"enable": True, **knobs}
    return AnthropicConfig.from_block({"hosted_tools": blocks})


_OPENAI_KNOBS = {
    "web_search": ("search_context_size", "user_location"),
    "file_search": ("vector_store_ids", "max_num_results"),
    "code_interpreter": (),
}


def openai_consent(*requests: Request, store: bool | None = None) -> OpenAIConfig:
    """Every hosted tool `requests` declare enabled, with their knobs (image generation and
    MCP as recorded); `store` as given."""
    blocks: dict[str, dict[str, Any]] = {}
    for body in _bodies(requests):
        for tool in body.get("tools", []):
            name = hosted_name_of(tool.get("type", ""))
            if name is None:
                continue
            block: dict[str, Any] = {"enable": True}
            block.update((k, tool[k]) for k in _OPENAI_KNOBS.get(name, ()) if k in tool)
            domains = tool.get("filters", {}).get("allowed_domains")
            if name == "web_search" and domains is not None:
                block["allowed_domains"] = domains
            container = tool.get("container")
            if name == "code_interpreter" and container is not None:
                block["container"] = "auto" if container == {"type": "auto"} else container
            blocks[name] = block
    assert set(blocks) <= {*NATIVE_TOOL_TYPES, "mcp", "image_generation"}
    return OpenAIConfig.from_block({"hosted_tools": blocks, "store": store})


def google_consent(*requests: Request) -> GoogleConfig:
    """Every hosted tool `requests` declare enabled."""
    blocks: dict[str, dict[str, Any]] = {}
    for body in _bodies(requests):
        for tool in body.get("tools", []):
            for key in tool:
                if key in HOSTED_TOOLS:
                    blocks[config_name(key)] = {"enable": True}
    return GoogleConfig.from_block({"hosted_tools": blocks})
