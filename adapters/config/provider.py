"""What the providers' configuration blocks (`providers.<name>`) share.

Strict tables (an unknown key is an error naming it), reading a provider's block out of
the whole configuration with validation errors spelled as configuration keys, the base
URL rule, the user location of web search, and the `enable` of hosted tools: the only
consent a request's hosted tools have (see `adapters.wire.consent`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Final, Literal, Self
from urllib.parse import urlsplit

import msgspec

from convstore.domain.errors import ConfigurationError

__all__ = [
    "ConfigBlock",
    "HostedTool",
    "HostedToolsBlock",
    "PositiveInt",
    "ProviderConfig",
    "RecordedHostedTool",
    "UserLocation",
    "check_http_url",
    "explain",
    "is_loopback",
]

PositiveInt = Annotated[int, msgspec.Meta(ge=1)]


class ConfigBlock(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A configuration table: unknown keys are errors, never ignored."""


class UserLocation(ConfigBlock, frozen=True, kw_only=True):
    """Where the user is, to localize web search results."""

    type: Literal["approximate"] = "approximate"
    city: str | None = None
    region: str | None = None
    country: str | None = None
    """ISO 3166-1 alpha-2 code, e.g. `FR`."""
    timezone: str | None = None
    """IANA time zone, e.g. `Europe/Paris`."""


class HostedTool(ConfigBlock, frozen=True, kw_only=True):
    """`hosted_tools.<tool>`: `enable` (`true` declares the tool with the knobs given here;
    absent or `false`, it is not declared, whatever a recorded request declared), then the
    tool's own knobs."""

    enable: bool = False


class RecordedHostedTool(HostedTool, frozen=True, kw_only=True):
    """`hosted_tools.<tool>` of a hosted tool the adapter does not declare by itself (its
    declaration carries what only the recording knows: an MCP server's URL, an image
    size): `enable = true` consents to the declarations of it the recorded request made,
    and declares none when it made none."""


class HostedToolsBlock(ConfigBlock, frozen=True, kw_only=True):
    """`hosted_tools`: one table per hosted tool, each disabled unless `enable = true`.

    A provider's subclass declares each tool as a `HostedTool` field."""

    def enables(self, name: str) -> bool:
        """Whether `enable = true` for hosted tool `name` (False for a name it lacks)."""
        tool = getattr(self, name) if name in self.__struct_fields__ else None
        return isinstance(tool, HostedTool) and tool.enable

    def enabled(self) -> list[str]:
        """The hosted tools enabled, in declaration order."""
        return [name for name in self.__struct_fields__ if self.enables(name)]


class ProviderConfig(ConfigBlock, frozen=True, kw_only=True):
    """A provider's block, `providers.<provider>`; a subclass declares its keys and
    `check`s the rules its types cannot say."""

    provider: ClassVar[str]

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        """The typed view of `config["providers"][provider]` (defaults when absent)."""
        providers = config.get("providers", {})
        if not isinstance(providers, Mapping):
            raise ConfigurationError("providers must be a table")
        block = providers.get(cls.provider, {})
        if not isinstance(block, Mapping):
            raise ConfigurationError(f"providers.{cls.provider} must be a table")
        return cls.from_block(block)

    @classmethod
    def from_block(cls, block: Mapping[str, Any]) -> Self:
        """The typed view of the `providers.<provider>` table itself; ConfigurationError
        naming the key that does not fit."""
        try:
            config = msgspec.convert(dict(block), cls)
        except msgspec.ValidationError as error:
            raise ConfigurationError(explain(str(error), f"providers.{cls.provider}")) from None
        config.check()
        return config

    def check(self) -> None:
        """Raise ConfigurationError for what the keys' types cannot say."""


_UNKNOWN_FIELD: Final = re.compile(r"Object contains unknown field `([^`]*)`(?: - at `\$(.*)`)?")
_AT: Final = re.compile(r"^(.*) - at `\$(.*)`$")


def explain(message: str, key: str) -> str:
    """A msgspec validation message, with its `$…` path spelled as the config key under
    `key` (empty: the top of the configuration)."""
    unknown = _UNKNOWN_FIELD.match(message)
    if unknown:
        field, path = unknown.group(1), unknown.group(2) or ""
        if not key:
            dotted = f"{path.lstrip('.')}.{field}".lstrip(".")
            return f"unknown configuration key {dotted!r}"
        return f"{key}{path}: unknown key {field!r} (see the {key} reference)"
    located = _AT.match(message)
    if located:
        what, path = located.group(1), located.group(2)
        return f"{f'{key}{path}'.lstrip('.')}: {what}"
    return f"{key or 'the configuration'}: {message}"


def check_http_url(url: str, key: str) -> None:
    """Raise ConfigurationError unless `url` (the value of `key`) is http(s) with a host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(f"{key}: {url!r} is not an http(s) URL with a host")


def is_loopback(host: str) -> bool:
    """True for a loopback host name or address (a local test server or proxy)."""
    return host in ("localhost", "::1") or host.startswith("127.")
