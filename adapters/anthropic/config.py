"""The Anthropic block of the configuration (`providers.anthropic`), typed and validated.

```toml
[providers.anthropic]
model = "claude-sonnet-4-5"
max_tokens = 4096
base_url = "https://api.anthropic.com"

[providers.anthropic.hosted_tools.web_search]
enable = true
max_uses = 5
blocked_domains = ["reddit.com"]
user_location = { city = "Lyon", country = "FR", timezone = "Europe/Paris" }
```

Hosted tools (web search, web fetch, code execution, tool search, MCP connectors) run on
Anthropic's side; they are disabled by default, and `enable = true` is blanket consent for
their network access and spend, the only consent there is (`adapters.wire.consent`): a
tool the configuration does not enable is not declared, whatever a recorded request
declared, except while an activity of it is pending. Web search, web fetch and code
execution are declared with the knobs given here, their native tool version chosen by the
adapter (`NATIVE_TOOL_VERSIONS`), never by the user, and recorded in every payload. Tool
search (`tool_search`: the `tool_search_tool_*` tools) and MCP connectors (`mcp`: the
request's `mcp_servers` and their `mcp_toolset` tools) are declared only as a recorded
request declared them: `enable = true` consents to those (`RecordedHostedTool`).

Validation (`validate_hosted_tools`), before any request is sent, is a ConfigurationError
when:

- a hosted tool is declared for a model that cannot serve it (`HOSTED_TOOL_SUPPORT`: model
  family → the oldest version that serves each tool; Claude 3 Haiku/Sonnet/Opus and Claude
  2 / Instant serve none; a model name the table cannot read is refused too, rather than
  guessed);
- a hosted tool is declared for an endpoint that cannot serve it: hosted tools need the
  first-party Messages API, so `base_url` must be `api.anthropic.com` or a loopback host
  (a local test server or proxy). Amazon Bedrock, Google Vertex AI, Microsoft Foundry and
  any other host are refused, unless `endpoint_serves_hosted_tools = true` says the
  endpoint (e.g. a gateway in front of the first-party API) forwards them;
- `allowed_domains` and `blocked_domains` are both set on one tool.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Final
from urllib.parse import urlsplit

import msgspec

from convstore.adapters.config.provider import (
    ConfigBlock,
    HostedTool,
    HostedToolsBlock,
    PositiveInt,
    ProviderConfig,
    RecordedHostedTool,
    UserLocation,
    check_http_url,
    is_loopback,
)
from convstore.domain.errors import ConfigurationError

__all__ = [
    "DEFAULT_BASE_URL",
    "HOSTED_TOOL_SUPPORT",
    "LEGACY_MCP_BETA",
    "NATIVE_TOOL_BETAS",
    "NATIVE_TOOL_VERSIONS",
    "AnthropicConfig",
    "CodeExecutionConfig",
    "HostedToolsConfig",
    "UserLocation",
    "WebFetchCitations",
    "WebFetchConfig",
    "WebSearchConfig",
    "config_name",
    "endpoint_kind",
    "hosted_tool_declarations",
    "model_generation",
    "tool_name_of",
    "validate_hosted_tools",
]

DEFAULT_BASE_URL: Final = "https://api.anthropic.com"

NATIVE_TOOL_VERSIONS: Final[Mapping[str, str]] = {
    "web_search": "web_search_20250305",
    "web_fetch": "web_fetch_20250910",
    "code_execution": "code_execution_20250825",
}
"""Hosted tool → the native tool type this adapter declares for new work. A pending
activity keeps the version it began under (its payload and its recorded declaration)."""

NATIVE_TOOL_BETAS: Final[Mapping[str, str]] = {
    "web_fetch_20250910": "web-fetch-2025-09-10",
    "code_execution_20250825": "code-execution-2025-08-25",
    "mcp_toolset": "mcp-client-2025-11-20",
}
"""Native tool type → the `anthropic-beta` header value it needs (none for web search)."""

LEGACY_MCP_BETA: Final = "mcp-client-2025-04-04"
"""The header an `mcp_servers` request without any `mcp_toolset` needs (the connector's
first version, where a server definition alone enables its tools)."""

Domain = Annotated[str, msgspec.Meta(min_length=1)]


class WebSearchConfig(HostedTool, frozen=True, kw_only=True):
    """`hosted_tools.web_search`."""

    max_uses: PositiveInt | None = None
    allowed_domains: list[Domain] | None = None
    blocked_domains: list[Domain] | None = None
    user_location: UserLocation | None = None


class WebFetchCitations(ConfigBlock, frozen=True, kw_only=True):
    """`hosted_tools.web_fetch.citations`."""

    enabled: bool = False


class WebFetchConfig(HostedTool, frozen=True, kw_only=True):
    """`hosted_tools.web_fetch`."""

    max_uses: PositiveInt | None = None
    allowed_domains: list[Domain] | None = None
    blocked_domains: list[Domain] | None = None
    citations: WebFetchCitations | None = None
    max_content_tokens: PositiveInt | None = None


class CodeExecutionConfig(HostedTool, frozen=True, kw_only=True):
    """`hosted_tools.code_execution`."""


class HostedToolsConfig(HostedToolsBlock, frozen=True, kw_only=True):
    """`hosted_tools`: each disabled unless `enable = true`."""

    web_search: WebSearchConfig = WebSearchConfig()
    web_fetch: WebFetchConfig = WebFetchConfig()
    code_execution: CodeExecutionConfig = CodeExecutionConfig()
    tool_search: RecordedHostedTool = RecordedHostedTool()
    mcp: RecordedHostedTool = RecordedHostedTool()


class AnthropicConfig(ProviderConfig, frozen=True, kw_only=True):
    """`providers.anthropic`. API keys never live here: `ANTHROPIC_API_KEY` only."""

    provider = "anthropic"

    model: str | None = None
    max_tokens: PositiveInt | None = None
    base_url: str = DEFAULT_BASE_URL
    endpoint_serves_hosted_tools: bool | None = None
    """None: decided by `base_url`'s host; True/False overrides that rule."""
    hosted_tools: HostedToolsConfig = HostedToolsConfig()

    def check(self) -> None:
        """One of `allowed_domains` and `blocked_domains` per tool; an http(s) base URL."""
        for name in ("web_search", "web_fetch"):
            tool = getattr(self.hosted_tools, name)
            if tool.allowed_domains is not None and tool.blocked_domains is not None:
                raise ConfigurationError(
                    f"providers.anthropic.hosted_tools.{name}: allowed_domains and "
                    "blocked_domains cannot both be set; use one of them"
                )
        check_http_url(self.base_url, "providers.anthropic.base_url")


# --- declarations ----------------------------------------------------------------------------


def hosted_tool_declarations(config: AnthropicConfig) -> dict[str, dict[str, Any]]:
    """Tool name → the native tool declaration of each hosted tool `config` enables."""
    tools = config.hosted_tools
    out: dict[str, dict[str, Any]] = {}
    if tools.web_search.enable:
        search = tools.web_search
        out["web_search"] = _declaration(
            "web_search",
            max_uses=search.max_uses,
            allowed_domains=search.allowed_domains,
            blocked_domains=search.blocked_domains,
            user_location=_present(search.user_location),
        )
    if tools.web_fetch.enable:
        fetch = tools.web_fetch
        out["web_fetch"] = _declaration(
            "web_fetch",
            max_uses=fetch.max_uses,
            allowed_domains=fetch.allowed_domains,
            blocked_domains=fetch.blocked_domains,
            citations=_present(fetch.citations),
            max_content_tokens=fetch.max_content_tokens,
        )
    if tools.code_execution.enable:
        out["code_execution"] = _declaration("code_execution")
    return out


def _present(table: ConfigBlock | None) -> dict[str, Any] | None:
    """A sub-table as builtins, without its unset (None) keys."""
    if table is None:
        return None
    return {k: v for k, v in msgspec.to_builtins(table).items() if v is not None}


def _declaration(name: str, **knobs: Any) -> dict[str, Any]:
    declaration: dict[str, Any] = {"type": NATIVE_TOOL_VERSIONS[name], "name": name}
    declaration.update((k, v) for k, v in knobs.items() if v is not None)
    return declaration


_DATED: Final = re.compile(r"^(.*)_(\d{8})$")


def tool_name_of(native_type: str) -> str:
    """The tool a native type declares: `web_search_20250305` → `web_search`."""
    dated = _DATED.match(native_type)
    return dated.group(1) if dated else native_type


def config_name(tool_name: str) -> str:
    """The `hosted_tools` key that consents to a declared hosted tool: `web_search` as it
    is, `tool_search_tool_regex` → `tool_search`, `mcp:<server>` → `mcp`."""
    if tool_name.startswith("mcp:"):
        return "mcp"
    if tool_name.startswith("tool_search_tool_"):
        return "tool_search"
    return tool_name


# --- validation ------------------------------------------------------------------------------

Generation = tuple[str, tuple[int, int]]

HOSTED_TOOL_SUPPORT: Final[Mapping[str, Mapping[str, tuple[int, int]]]] = {
    "web_search": {"opus": (4, 0), "sonnet": (3, 5), "haiku": (3, 5), "*": (4, 0)},
    "web_fetch": {"opus": (4, 0), "sonnet": (3, 7), "haiku": (3, 5), "*": (4, 0)},
    "code_execution": {"opus": (4, 0), "sonnet": (3, 7), "haiku": (3, 5), "*": (4, 0)},
}
"""Hosted tool → model family → the oldest generation that serves it (`*`: any other
family named like the current models, e.g. a new family at generation 4 or later). So
`claude-3-haiku-20240307`, `claude-3-opus-*` and `claude-2.1` serve none of them,
`claude-3-5-sonnet-*` serves web search only, and every Claude 4 model serves all three."""

_OLD_NAME: Final = re.compile(r"claude-(\d+)(?:[-.](\d))?-([a-z]+)")
_NEW_NAME: Final = re.compile(r"claude-([a-z]+)-(\d+)(?:[-.](\d{1,2}))?(?=$|[-@:.])")
_LEGACY: Final = re.compile(r"claude-(?:instant|2|1)(?:$|[-.@:v])")


def model_generation(model: str) -> Generation | None:
    """(family, (major, minor)) of a Claude model name, or None when it cannot be read.

    Reads both naming schemes (`claude-3-5-sonnet-20241022`, `claude-sonnet-4-5-20250929`)
    and platform prefixes and suffixes (`us.anthropic.…-v1:0`, `…@20250929`).
    """
    name = model.lower()
    start = name.find("claude-")
    if start < 0:
        return None
    name = name[start:]
    if _LEGACY.match(name):
        return ("legacy", (2, 0))
    old = _OLD_NAME.match(name)
    if old:
        return (old.group(3), (int(old.group(1)), int(old.group(2) or 0)))
    new = _NEW_NAME.match(name)
    if new:
        return (new.group(1), (int(new.group(2)), int(new.group(3) or 0)))
    return None


def endpoint_kind(base_url: str) -> str:
    """`first_party`, `loopback`, `bedrock`, `vertex`, `foundry` or `other`."""
    host = (urlsplit(base_url).hostname or "").lower()
    if host == "api.anthropic.com":
        return "first_party"
    if is_loopback(host):
        return "loopback"
    if "bedrock" in host or host.endswith(".amazonaws.com"):
        return "bedrock"
    if host.endswith("googleapis.com") or "aiplatform" in host:
        return "vertex"
    if "azure" in host or "microsoft" in host or "foundry" in host:
        return "foundry"
    return "other"


_PLATFORMS: Final = {
    "bedrock": "an Amazon Bedrock endpoint",
    "vertex": "a Google Vertex AI endpoint",
    "foundry": "a Microsoft Foundry endpoint",
    "other": "not the first-party Anthropic API",
}


def validate_hosted_tools(config: AnthropicConfig, model: str, tools: Iterable[str]) -> None:
    """Raise ConfigurationError unless `model` at `config.base_url` can serve every hosted
    tool named in `tools` (tool names such as `web_search`; unknown names are checked
    against the endpoint only)."""
    names = list(dict.fromkeys(tools))
    if not names:
        return
    serves = config.endpoint_serves_hosted_tools
    kind = endpoint_kind(config.base_url)
    if serves is False or (serves is None and kind not in ("first_party", "loopback")):
        why = (
            "endpoint_serves_hosted_tools = false"
            if serves is False
            else f"{config.base_url} is {_PLATFORMS[kind]}"
        )
        raise ConfigurationError(
            f"hosted tool {names[0]} cannot be served: {why}. Hosted tools need the "
            "first-party Messages API (https://api.anthropic.com); disable "
            f"providers.anthropic.hosted_tools.{names[0]}, or set "
            "providers.anthropic.endpoint_serves_hosted_tools = true if this endpoint "
            "forwards to it"
        )
    generation = model_generation(model)
    for name in names:
        support = HOSTED_TOOL_SUPPORT.get(name)
        if support is None:
            continue
        if generation is None:
            raise ConfigurationError(
                f"hosted tool {name}: cannot tell whether model {model!r} serves it (not a "
                "Claude model name this adapter can read); use a Claude model id such as "
                f"claude-sonnet-4-5, or disable providers.anthropic.hosted_tools.{name}"
            )
        family, version = generation
        oldest = support.get(family, support["*"] if family != "legacy" else None)
        if oldest is None or version < oldest:
            raise ConfigurationError(
                f"hosted tool {name} is not available on model {model!r}; it needs a newer "
                f"model (e.g. claude-sonnet-4-5); disable "
                f"providers.anthropic.hosted_tools.{name} or choose another model"
            )
