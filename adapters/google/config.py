"""The Google block of the configuration (`providers.google`), typed and validated.

```toml
[providers.google]
model = "gemini-2.5-flash"
max_output_tokens = 2048
base_url = "https://generativelanguage.googleapis.com/v1beta"

[providers.google.thinking]
include_thoughts = true
thinking_budget = 1024          # -1: dynamic, 0: off (where the model allows it)

[providers.google.hosted_tools.google_search]
enable = true
```

Hosted tools (`google_search` → `googleSearch`, `url_context` → `urlContext`,
`code_execution` → `codeExecution`) run on Google's side; they are disabled by default and
`enable = true` is blanket consent for their network access and spend, the only consent
there is (`adapters.wire.consent`): a tool the configuration does not enable is not
declared, whatever a recorded request declared. The tool key is the adapter's choice
(`NATIVE_TOOLS`), never the user's; a recorded entry of an enabled tool is kept as
recorded. The hosted tools this adapter does not declare by itself (`RECORDED_TOOLS`:
Google Maps, file search, enterprise web search, the legacy search retrieval and
retrieval) are declared only as a recorded request declared them, with `enable = true`
(`RecordedHostedTool`).

Validation, before any request is sent, is a ConfigurationError when:

- a hosted tool is declared for a model that cannot serve it. `HOSTED_TOOL_SUPPORT` reads
  the Gemini generation from the model name (`model_generation`):

  | tool           | 1.0 | 1.5 | 2.0 flash | 2.0 flash-lite | 2.5 (all) | 3 and later |
  |----------------|-----|-----|-----------|----------------|-----------|-------------|
  | google_search  | no  | no¹ | yes       | no             | yes       | yes         |
  | url_context    | no  | no  | yes       | no             | yes       | yes         |
  | code_execution | no  | yes | yes       | no             | yes       | yes         |

  ¹ Gemini 1.5 grounds with the legacy `googleSearchRetrieval` tool, which this adapter
  does not declare. Speech (`-tts`), embedding and Gemma models serve none; image models
  of generation 2 serve none. The `-latest` aliases (`gemini-flash-latest`, …) name the
  current generation. A name the table cannot read (a tuned model, another vendor's) is
  refused rather than guessed.
- a hosted tool is declared for an endpoint that cannot serve it: `base_url` must be the
  Gemini API (`generativelanguage.googleapis.com`), Vertex AI (`*aiplatform.googleapis.com`)
  or a loopback host (a local test server or proxy); any other host is refused unless
  `endpoint_serves_hosted_tools = true`.
- `thinking` is set for a model that does not think (generation 1 and 2.0), or
  `thinking_budget = 0` for a Pro model (2.5 Pro and later cannot turn thinking off).

A Vertex-style base URL decides one more rule, checked when the configuration is read:
Vertex AI addresses a model as `…/publishers/google/models/<model>`, so its `base_url`
must end in `/v1/projects/<project>/locations/<location>/publishers/google` (or the
express-mode `/v1/publishers/google`; `v1beta1` also allowed): the client appends
`/models/<model>:generateContent` to it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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
    check_http_url,
    is_loopback,
)
from convstore.domain.errors import ConfigurationError

__all__ = [
    "DEFAULT_BASE_URL",
    "HOSTED_TOOL_SUPPORT",
    "NATIVE_TOOLS",
    "RECORDED_TOOLS",
    "CodeExecutionConfig",
    "GoogleConfig",
    "GoogleSearchConfig",
    "HostedToolsConfig",
    "ModelGeneration",
    "ThinkingConfig",
    "UrlContextConfig",
    "check_base_url",
    "config_name",
    "endpoint_kind",
    "model_generation",
    "model_path",
    "model_resource",
    "normalized_model",
    "serves",
    "tool_name_of",
    "validate_hosted_tools",
    "validate_thinking",
]

DEFAULT_BASE_URL: Final = "https://generativelanguage.googleapis.com/v1beta"

NATIVE_TOOLS: Final[Mapping[str, str]] = {
    "google_search": "googleSearch",
    "url_context": "urlContext",
    "code_execution": "codeExecution",
}
"""Configured hosted tool → the `tools[]` key this adapter declares it with."""

RECORDED_TOOLS: Final[Mapping[str, str]] = {
    "google_maps": "googleMaps",
    "file_search": "fileSearch",
    "enterprise_web_search": "enterpriseWebSearch",
    "google_search_retrieval": "googleSearchRetrieval",
    "retrieval": "retrieval",
}
"""Hosted tool → its `tools[]` key, for those declared only as a recorded request did."""

_TOOL_NAMES: Final[Mapping[str, str]] = {
    **{key: name for name, key in NATIVE_TOOLS.items()},
    "google_search": "google_search",
    "url_context": "url_context",
    "code_execution": "code_execution",
}

Budget = Annotated[int, msgspec.Meta(ge=-1)]


class GoogleSearchConfig(HostedTool, frozen=True, kw_only=True):
    """`hosted_tools.google_search`."""


class UrlContextConfig(HostedTool, frozen=True, kw_only=True):
    """`hosted_tools.url_context`."""


class CodeExecutionConfig(HostedTool, frozen=True, kw_only=True):
    """`hosted_tools.code_execution`."""


class HostedToolsConfig(HostedToolsBlock, frozen=True, kw_only=True):
    """`hosted_tools`: each disabled unless `enable = true`."""

    google_search: GoogleSearchConfig = GoogleSearchConfig()
    url_context: UrlContextConfig = UrlContextConfig()
    code_execution: CodeExecutionConfig = CodeExecutionConfig()
    google_maps: RecordedHostedTool = RecordedHostedTool()
    file_search: RecordedHostedTool = RecordedHostedTool()
    enterprise_web_search: RecordedHostedTool = RecordedHostedTool()
    google_search_retrieval: RecordedHostedTool = RecordedHostedTool()
    retrieval: RecordedHostedTool = RecordedHostedTool()


class ThinkingConfig(ConfigBlock, frozen=True, kw_only=True):
    """`thinking` → `generationConfig.thinkingConfig`."""

    include_thoughts: bool | None = None
    """Ask for thought summaries (`includeThoughts`)."""
    thinking_budget: Budget | None = None
    """Thinking tokens (`thinkingBudget`): -1 dynamic, 0 off where the model allows it."""

    def wire(self) -> dict[str, Any]:
        """The `thinkingConfig` object (only the keys set)."""
        out: dict[str, Any] = {}
        if self.include_thoughts is not None:
            out["includeThoughts"] = self.include_thoughts
        if self.thinking_budget is not None:
            out["thinkingBudget"] = self.thinking_budget
        return out


class GoogleConfig(ProviderConfig, frozen=True, kw_only=True):
    """`providers.google`. API keys never live here: `GEMINI_API_KEY` or `GOOGLE_API_KEY`."""

    provider = "google"

    model: str | None = None
    max_output_tokens: PositiveInt | None = None
    base_url: str = DEFAULT_BASE_URL
    endpoint_serves_hosted_tools: bool | None = None
    """None: decided by `base_url`'s host; True/False overrides that rule."""
    thinking: ThinkingConfig | None = None
    hosted_tools: HostedToolsConfig = HostedToolsConfig()

    def check(self) -> None:
        """A base URL requests can be built on; a model name, when given, not blank."""
        check_base_url(self.base_url)
        if self.model is not None and not self.model.strip():
            raise ConfigurationError("providers.google.model: the model name is empty")


# --- endpoints -------------------------------------------------------------------------------

_VERTEX_PATH: Final = re.compile(
    r"^/v1(?:beta1)?/(?:projects/[^/]+/locations/[^/]+/)?publishers/google$"
)


def endpoint_kind(base_url: str) -> str:
    """`gemini_api`, `vertex`, `loopback` or `other`."""
    host = (urlsplit(base_url).hostname or "").lower()
    if host == "generativelanguage.googleapis.com":
        return "gemini_api"
    if host == "aiplatform.googleapis.com" or host.endswith("-aiplatform.googleapis.com"):
        return "vertex"
    if is_loopback(host):
        return "loopback"
    return "other"


def check_base_url(url: str) -> None:
    """Raise ConfigurationError for a base URL requests cannot be built on."""
    check_http_url(url, "providers.google.base_url")
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ConfigurationError(
            f"providers.google.base_url: {url!r} must not carry a query or fragment "
            "(the API key travels in the x-goog-api-key header, never in the URL)"
        )
    if endpoint_kind(url) == "vertex" and not _VERTEX_PATH.match(parts.path.rstrip("/")):
        raise ConfigurationError(
            f"providers.google.base_url: {url!r} is a Vertex AI host, whose models live under "
            "/v1/projects/<project>/locations/<location>/publishers/google (or /v1/publishers/"
            "google in express mode); end base_url there"
        )


# --- models ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelGeneration:
    """What a Gemini model name says: its generation and variant."""

    family: str
    """`gemini` or `gemma`."""
    version: tuple[int, int]
    variant: str
    """What follows the version, e.g. `flash-lite-preview-06-17`."""

    @property
    def serves_no_tools(self) -> bool:
        variant = self.variant
        if self.family != "gemini" or "tts" in variant or "embedding" in variant:
            return True
        return "image" in variant and self.version < (3, 0)


CURRENT: Final = (3, 0)
"""The generation a `-latest` alias stands for."""

_GEMINI: Final = re.compile(r"^gemini-(\d+)(?:\.(\d+))?-([a-z0-9][a-z0-9.-]*)$")
_GEMINI_ALIAS: Final = re.compile(r"^gemini-((?:pro|flash|flash-lite)(?:-[a-z]+)?)-latest$")
_GEMINI_1: Final = re.compile(r"^gemini-(pro|ultra)(?:-vision)?(?:-\d+)?$")
_GEMMA: Final = re.compile(r"^gemma-?(\d+)?")


def normalized_model(model: str) -> str:
    """A model name without its resource path (`models/`, `…/publishers/google/models/`)
    or Vertex version (`@001`), lower-cased."""
    name = model.strip().lower()
    name = name.rsplit("/models/", 1)[-1].removeprefix("models/")
    return name.split("@", 1)[0]


def model_generation(model: str) -> ModelGeneration | None:
    """The generation of a Gemini (or Gemma) model name; None when it cannot be read."""
    name = normalized_model(model)
    found = _GEMINI.match(name)
    if found:
        version = (int(found.group(1)), int(found.group(2) or 0))
        return ModelGeneration("gemini", version, found.group(3))
    alias = _GEMINI_ALIAS.match(name)
    if alias:
        return ModelGeneration("gemini", CURRENT, alias.group(1))
    legacy = _GEMINI_1.match(name)
    if legacy:
        return ModelGeneration("gemini", (1, 0), legacy.group(1))
    if name.startswith("gemini-embedding") or name.startswith("embedding-"):
        return ModelGeneration("gemini", (1, 0), "embedding")
    gemma = _GEMMA.match(name)
    if gemma:
        return ModelGeneration("gemma", (int(gemma.group(1) or 1), 0), name)
    return None


HOSTED_TOOL_SUPPORT: Final[Mapping[str, tuple[tuple[int, int], Mapping[tuple[int, int], str]]]] = {
    "google_search": ((2, 0), {(2, 0): "flash-lite"}),
    "url_context": ((2, 0), {(2, 0): "flash-lite"}),
    "code_execution": ((1, 5), {(2, 0): "flash-lite"}),
}
"""Hosted tool → (the oldest generation that serves it, {generation: the variant prefix
that does not}). See the table in the module documentation."""


def config_name(key: str) -> str:
    """The `hosted_tools` key that consents to a hosted `tools[]` key (`googleSearch` →
    `google_search`, `googleMaps` → `google_maps`)."""
    for names in (NATIVE_TOOLS, RECORDED_TOOLS):
        for name, native in names.items():
            if native == key:
                return name
    return key


def tool_name_of(key: str) -> str:
    """The configured name of a hosted tool key (`googleSearch` → `google_search`); other
    keys are returned unchanged."""
    return _TOOL_NAMES.get(key, key)


def serves(model: str, tool: str) -> bool | None:
    """Whether `model` serves hosted tool `tool` (a configured name); None when the model
    name cannot be read. Tools outside the table are not judged (True)."""
    support = HOSTED_TOOL_SUPPORT.get(tool)
    generation = model_generation(model)
    if generation is None:
        return None if support is not None else True
    if support is None:
        return True
    if generation.serves_no_tools:
        return False
    oldest, excluded = support
    if generation.version < oldest:
        return False
    variant = excluded.get(generation.version)
    return not (variant is not None and generation.variant.startswith(variant))


def validate_hosted_tools(config: GoogleConfig, model: str, tools: Iterable[str]) -> None:
    """Raise ConfigurationError unless `model` at `config.base_url` serves every hosted
    tool in `tools` (configured names such as `google_search`, or tool keys such as
    `googleSearch`; keys outside the table are checked against the endpoint only)."""
    names = list(dict.fromkeys(tool_name_of(t) for t in tools))
    if not names:
        return
    allowed = config.endpoint_serves_hosted_tools
    kind = endpoint_kind(config.base_url)
    if allowed is False or (allowed is None and kind == "other"):
        why = (
            "endpoint_serves_hosted_tools = false"
            if allowed is False
            else f"{config.base_url} is neither the Gemini API nor Vertex AI"
        )
        raise ConfigurationError(
            f"hosted tool {names[0]} cannot be served: {why}; disable "
            f"providers.google.hosted_tools.{names[0]}, or set "
            "providers.google.endpoint_serves_hosted_tools = true if this endpoint forwards "
            "to Google"
        )
    for name in names:
        served = serves(model, name)
        if served is None:
            raise ConfigurationError(
                f"hosted tool {name}: cannot tell whether model {model!r} serves it (not a "
                "Gemini model name this adapter can read); use a model id such as "
                f"gemini-2.5-flash, or disable providers.google.hosted_tools.{name}"
            )
        if not served:
            raise ConfigurationError(
                f"hosted tool {name} is not available on model {model!r}; choose a model "
                f"that serves it (e.g. gemini-2.5-flash) or disable "
                f"providers.google.hosted_tools.{name}"
            )


def validate_thinking(thinking: Mapping[str, Any] | None, model: str) -> None:
    """Raise ConfigurationError when a `thinkingConfig` cannot be sent to `model` (models
    the table cannot read are not judged)."""
    if not thinking:
        return
    generation = model_generation(model)
    if generation is None:
        return
    if generation.family != "gemini" or generation.version < (2, 5):
        raise ConfigurationError(
            f"providers.google.thinking: model {model!r} does not think; remove the "
            "thinking settings or choose a Gemini 2.5 or later model"
        )
    budget = thinking.get("thinkingBudget", thinking.get("thinking_budget"))
    if budget == 0 and generation.variant.startswith("pro"):
        raise ConfigurationError(
            f"providers.google.thinking.thinking_budget = 0: model {model!r} cannot turn "
            "thinking off; use -1 (dynamic) or a budget of at least 128"
        )


# --- request paths ---------------------------------------------------------------------------

_MODEL_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def model_resource(model: str) -> str:
    """The resource a model name addresses: `models/<name>`, or `tunedModels/<name>`.

    Raises ConfigurationError for a name that is empty or holds anything but letters,
    digits, `.`, `_` and `-` (it goes into the URL path)."""
    name = model.strip()
    collection = "models"
    if name.startswith("tunedModels/"):
        collection, name = "tunedModels", name.removeprefix("tunedModels/")
    else:
        name = name.removeprefix("models/")
    if not _MODEL_NAME.fullmatch(name):
        raise ConfigurationError(
            f"model {model!r} is not a Gemini model name (letters, digits, '.', '_', '-'; "
            "e.g. gemini-2.5-flash)"
        )
    return f"{collection}/{name}"


def model_path(model: str, *, stream: bool = True) -> str:
    """The path of a model's method relative to `base_url`:
    `models/<model>:streamGenerateContent?alt=sse`, or `models/<model>:generateContent`."""
    resource = model_resource(model)
    if stream:
        return f"{resource}:streamGenerateContent?alt=sse"
    return f"{resource}:generateContent"
