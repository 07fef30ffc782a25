"""The OpenAI block of the configuration (`providers.openai`), typed and validated.

```toml
[providers.openai]
model = "gpt-5.1"
max_output_tokens = 4096
base_url = "https://api.openai.com/v1"
store = false

[providers.openai.hosted_tools.web_search]
enable = true
search_context_size = "medium"
allowed_domains = ["example.org"]
user_location = { city = "Lyon", country = "FR", timezone = "Europe/Paris" }

[providers.openai.hosted_tools.file_search]
enable = true
vector_store_ids = ["vs_123"]
max_num_results = 8

[providers.openai.hosted_tools.code_interpreter]
enable = true
container = "auto"
```

Keys
    `model` and `max_output_tokens` override the recorded request's. `store` (the Responses
    API's own flag: whether OpenAI keeps the response and its items) is three-valued: absent
    keeps the recorded request's value, and falls back to `false` when nothing is recorded
    (OpenAI's own default is `true`; this store keeps the conversation itself, so the
    provider does not need to). Unknown keys are errors naming the key.

Hosted tools (web search, file search, code interpreter, image generation, MCP connectors)
run on OpenAI's side; they are disabled by default, and `enable = true` is blanket consent
for their network access and spend, the only consent there is (`adapters.wire.consent`):
a tool the configuration does not enable is not declared, whatever a recorded request
declared, except while an activity of it is pending. Web search, file search and code
interpreter are declared with the knobs given here; image generation (`image_generation`)
and MCP connectors (`mcp`: every `mcp` tool, by its server label) only as a recorded
request declared them: `enable = true` consents to those (`RecordedHostedTool`).

Native tool types (`NATIVE_TOOL_TYPES`)
    `web_search` → `web_search` (the generally available tool; `web_search_preview` is never
    chosen for new work: every model of `HOSTED_TOOL_SUPPORT` that serves web search serves
    the GA type, so the preview one is only kept where a recorded request or a pending
    activity names it), `file_search` → `file_search`, `code_interpreter` →
    `code_interpreter`. `web_search.allowed_domains` becomes the tool's
    `filters.allowed_domains`; `code_interpreter.container` is `"auto"` (a fresh container:
    `{"type": "auto"}`) or the id of an existing container (`cntr_…`), sent as is.

Validation (`validate_hosted_tools`), before any request is sent, is a ConfigurationError
when:

- a hosted tool is declared for a model that cannot serve it (`HOSTED_TOOL_SUPPORT`: model
  family → the hosted tools it serves). This adapter's table: GPT-3.5, GPT-4 (non-o:
  `gpt-4`, `gpt-4-turbo`, `gpt-4-32k`, dated `gpt-4-0613`…), the `*-search-*`, audio and
  realtime variants and `o1-mini` / `o1-preview` serve none; `gpt-4.1-nano`, `o1` and
  `o3-mini` serve file search and code interpreter but not web search; GPT-4o, GPT-4.1,
  o3, o4-mini and every GPT-5 model serve all three. A GPT-5 request with
  `reasoning.effort = "minimal"` cannot use web search. A model name the table cannot read
  is refused too, rather than guessed;
- a hosted tool is declared for an endpoint that cannot serve it: `base_url` must be
  `api.openai.com` or a loopback host, unless `endpoint_serves_hosted_tools = true` says the
  endpoint (a gateway in front of the first-party API) forwards them;
- `file_search` is enabled without `vector_store_ids` (checked when the block is read).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit

import msgspec

from convstore.adapters.config.provider import (
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
    "NATIVE_TOOL_TYPES",
    "NON_REASONING_FAMILIES",
    "CodeInterpreterConfig",
    "FileSearchConfig",
    "HostedToolsConfig",
    "OpenAIConfig",
    "UserLocation",
    "WebSearchConfig",
    "config_name",
    "endpoint_kind",
    "hosted_tool_declarations",
    "model_family",
    "validate_hosted_tools",
]

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"

NATIVE_TOOL_TYPES: Final[Mapping[str, str]] = {
    "web_search": "web_search",
    "file_search": "file_search",
    "code_interpreter": "code_interpreter",
}
"""Hosted tool (the activity name) → the native tool type this adapter declares for new
work. A pending activity keeps the type it began under (its recorded declaration)."""

Domain = Annotated[str, msgspec.Meta(min_length=1, pattern=r"^(?!https?://)[^\s/]+$")]
"""A domain without scheme or path (OpenAI wants `example.org`, not `https://…`)."""
VectorStoreId = Annotated[str, msgspec.Meta(min_length=1)]


class WebSearchConfig(HostedTool, frozen=True, kw_only=True):
    """`hosted_tools.web_search`."""

    search_context_size: Literal["low", "medium", "high"] | None = None
    user_location: UserLocation | None = None
    allowed_domains: list[Domain] | None = None
    """Sent as the tool's `filters.allowed_domains`."""


class FileSearchConfig(HostedTool, frozen=True, kw_only=True):
    """`hosted_tools.file_search`."""

    vector_store_ids: list[VectorStoreId] | None = None
    """Required when enabled."""
    max_num_results: Annotated[int, msgspec.Meta(ge=1, le=50)] | None = None


class CodeInterpreterConfig(HostedTool, frozen=True, kw_only=True):
    """`hosted_tools.code_interpreter`."""

    container: Annotated[str, msgspec.Meta(min_length=1)] = "auto"
    """`auto` (a fresh container) or an existing container's id."""


class HostedToolsConfig(HostedToolsBlock, frozen=True, kw_only=True):
    """`hosted_tools`: each disabled unless `enable = true`."""

    web_search: WebSearchConfig = WebSearchConfig()
    file_search: FileSearchConfig = FileSearchConfig()
    code_interpreter: CodeInterpreterConfig = CodeInterpreterConfig()
    image_generation: RecordedHostedTool = RecordedHostedTool()
    mcp: RecordedHostedTool = RecordedHostedTool()


class OpenAIConfig(ProviderConfig, frozen=True, kw_only=True):
    """`providers.openai`. API keys never live here: `OPENAI_API_KEY` only."""

    provider = "openai"

    model: str | None = None
    max_output_tokens: PositiveInt | None = None
    base_url: str = DEFAULT_BASE_URL
    store: bool | None = None
    """None: the recorded request's `store`, else false."""
    endpoint_serves_hosted_tools: bool | None = None
    """None: decided by `base_url`'s host; True/False overrides that rule."""
    hosted_tools: HostedToolsConfig = HostedToolsConfig()

    def check(self) -> None:
        """File search names its vector stores; an http(s) base URL."""
        search = self.hosted_tools.file_search
        if search.enable and not search.vector_store_ids:
            raise ConfigurationError(
                "providers.openai.hosted_tools.file_search: vector_store_ids is required "
                'when file search is enabled (e.g. vector_store_ids = ["vs_…"])'
            )
        check_http_url(self.base_url, "providers.openai.base_url")


# --- declarations ----------------------------------------------------------------------------


def config_name(tool_name: str) -> str:
    """The `hosted_tools` key that consents to a declared hosted tool (`mcp:<label>` →
    `mcp`; the others by their activity name)."""
    return "mcp" if tool_name.startswith("mcp:") else tool_name


def hosted_tool_declarations(config: OpenAIConfig) -> dict[str, dict[str, Any]]:
    """Tool name → the native tool declaration of each hosted tool `config` enables."""
    tools = config.hosted_tools
    out: dict[str, dict[str, Any]] = {}
    if tools.web_search.enable:
        search = tools.web_search
        declaration: dict[str, Any] = {"type": NATIVE_TOOL_TYPES["web_search"]}
        if search.search_context_size is not None:
            declaration["search_context_size"] = search.search_context_size
        if search.user_location is not None:
            declaration["user_location"] = {
                k: v for k, v in msgspec.to_builtins(search.user_location).items() if v is not None
            }
        if search.allowed_domains is not None:
            declaration["filters"] = {"allowed_domains": list(search.allowed_domains)}
        out["web_search"] = declaration
    if tools.file_search.enable:
        files = tools.file_search
        declaration = {
            "type": NATIVE_TOOL_TYPES["file_search"],
            "vector_store_ids": list(files.vector_store_ids or ()),
        }
        if files.max_num_results is not None:
            declaration["max_num_results"] = files.max_num_results
        out["file_search"] = declaration
    if tools.code_interpreter.enable:
        container = tools.code_interpreter.container
        out["code_interpreter"] = {
            "type": NATIVE_TOOL_TYPES["code_interpreter"],
            "container": {"type": "auto"} if container == "auto" else container,
        }
    return out


# --- validation ------------------------------------------------------------------------------

_ALL: Final = frozenset({"web_search", "file_search", "code_interpreter"})
_NO_WEB: Final = frozenset({"file_search", "code_interpreter"})

HOSTED_TOOL_SUPPORT: Final[Mapping[str, frozenset[str]]] = {
    "gpt-5": _ALL,
    "gpt-4.1": _ALL,
    "gpt-4.1-nano": _NO_WEB,
    "gpt-4o": _ALL,
    "o3": _ALL,
    "o4-mini": _ALL,
    "o3-mini": _NO_WEB,
    "o1": _NO_WEB,
    "o1-mini": frozenset(),
    "special": frozenset(),
    "gpt-4": frozenset(),
    "gpt-3.5": frozenset(),
}
"""Model family (`model_family`) → the hosted tools (activity names) it serves."""

NON_REASONING_FAMILIES: Final = frozenset({"gpt-4.1", "gpt-4.1-nano", "gpt-4o", "gpt-4", "gpt-3.5"})
"""Families that take no `reasoning` settings and return no encrypted reasoning: a recorded
request's `reasoning` (and its `reasoning.encrypted_content` include) is left out when one
of them is the target."""

_FAMILIES: Final[tuple[tuple[re.Pattern[str], str], ...]] = tuple(
    (re.compile(pattern), family)
    for pattern, family in (
        (r"-(?:search|audio|realtime|transcribe|tts)(?:$|-)", "special"),
        (r"^gpt-3\.5", "gpt-3.5"),
        (r"^gpt-5(?:$|[-.])", "gpt-5"),
        (r"^gpt-4\.1-nano(?:$|-)", "gpt-4.1-nano"),
        (r"^gpt-4\.1(?:$|-)", "gpt-4.1"),
        (r"^(?:chatgpt-)?gpt-4o(?:$|-)|^chatgpt-4o(?:$|-)", "gpt-4o"),
        (r"^gpt-4(?:$|-(?:turbo|32k|vision|\d{4}))", "gpt-4"),
        (r"^o1-(?:mini|preview)(?:$|-)", "o1-mini"),
        (r"^o1(?:$|-)", "o1"),
        (r"^o3-mini(?:$|-)", "o3-mini"),
        (r"^o3(?:$|-)", "o3"),
        (r"^o4-mini(?:$|-)", "o4-mini"),
    )
)
_FINE_TUNED: Final = re.compile(r"^ft:([^:]+)")


def model_family(model: str) -> str | None:
    """The `HOSTED_TOOL_SUPPORT` family of an OpenAI model name, None when it cannot be
    read. Reads dated snapshots (`gpt-4o-2024-08-06`) and fine-tunes
    (`ft:gpt-4o-mini-…:org::id`)."""
    name = model.strip().lower()
    tuned = _FINE_TUNED.match(name)
    if tuned:
        name = tuned.group(1)
    name = name.removeprefix("openai/")
    for pattern, family in _FAMILIES:
        if pattern.search(name):
            return family
    return None


def endpoint_kind(base_url: str) -> str:
    """`first_party`, `loopback`, `azure` or `other`."""
    host = (urlsplit(base_url).hostname or "").lower()
    if host == "api.openai.com":
        return "first_party"
    if is_loopback(host):
        return "loopback"
    if "azure" in host or host.endswith(".microsoft.com"):
        return "azure"
    return "other"


def validate_hosted_tools(
    config: OpenAIConfig,
    model: str,
    tools: Iterable[str],
    *,
    reasoning_effort: str | None = None,
) -> None:
    """Raise ConfigurationError unless `model` at `config.base_url` can serve every hosted
    tool named in `tools` (activity names such as `web_search`; names outside the table,
    e.g. `mcp` or `image_generation`, are checked against the endpoint only)."""
    names = list(dict.fromkeys(tools))
    if not names:
        return
    serves = config.endpoint_serves_hosted_tools
    kind = endpoint_kind(config.base_url)
    if serves is False or (serves is None and kind not in ("first_party", "loopback")):
        why = (
            "endpoint_serves_hosted_tools = false"
            if serves is False
            else f"{config.base_url} is not the first-party OpenAI API"
        )
        raise ConfigurationError(
            f"hosted tool {names[0]} cannot be served: {why}. Hosted tools need "
            f"{DEFAULT_BASE_URL}; disable providers.openai.hosted_tools.{names[0]}, or set "
            "providers.openai.endpoint_serves_hosted_tools = true if this endpoint forwards "
            "to it"
        )
    family = model_family(model)
    for name in names:
        if name not in _ALL:
            continue
        if family is None:
            raise ConfigurationError(
                f"hosted tool {name}: cannot tell whether model {model!r} serves it (not an "
                "OpenAI model name this adapter can read); use a model id such as gpt-5.1, "
                f"or disable providers.openai.hosted_tools.{name}"
            )
        if name not in HOSTED_TOOL_SUPPORT[family]:
            raise ConfigurationError(
                f"hosted tool {name} is not available on model {model!r}; it needs a newer "
                f"model (e.g. gpt-5.1 or gpt-4.1); disable providers.openai.hosted_tools.{name} "
                "or choose another model"
            )
        if name == "web_search" and family == "gpt-5" and reasoning_effort == "minimal":
            raise ConfigurationError(
                f"hosted tool web_search is not available on {model!r} with reasoning effort "
                "'minimal'; raise the effort or disable providers.openai.hosted_tools.web_search"
            )
