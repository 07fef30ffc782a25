"""The configuration's own tables beside `providers`, and the check of the whole
configuration that a command makes before its first write.

- `limits.max_event_bytes`: the largest event a store accepts (DESIGN.md).
- `store.encrypt`: create the store encrypted (issue 19; recorded in the store, so it
  matters only when the store is created).
- `ask.max_continuations`: how many times `ask` continues a paused turn (`pause_turn`),
  or a response cut at its token limit under `--continue-on-length`, by itself (5).

Every table is strict: an unknown key anywhere is a ConfigurationError naming it, so a
typo is refused before anything is sent or written, never ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final

import msgspec

from convstore.adapters.config.provider import ConfigBlock, PositiveInt, explain
from convstore.domain.errors import ConfigurationError

__all__ = [
    "DEFAULT_MAX_CONTINUATIONS",
    "AppConfig",
    "AskConfig",
    "LimitsConfig",
    "StoreConfig",
    "checked",
]

DEFAULT_MAX_CONTINUATIONS: Final = 5


class LimitsConfig(ConfigBlock, frozen=True, kw_only=True):
    """`limits`: the store's bounds."""

    max_event_bytes: PositiveInt | None = None
    """The largest stored event; None: the store's default (64 MiB)."""


class StoreConfig(ConfigBlock, frozen=True, kw_only=True):
    """`store`: how a store is created."""

    encrypt: bool = False
    """Seal each conversation's content under its own key (`forget` needs it); read
    only when the store is created, then recorded in it."""


class AskConfig(ConfigBlock, frozen=True, kw_only=True):
    """`ask`: how `ask` goes on by itself."""

    max_continuations: Annotated[int, msgspec.Meta(ge=0)] = DEFAULT_MAX_CONTINUATIONS
    """Continuations of one question at most (0: never continue)."""


class AppConfig(ConfigBlock, frozen=True, kw_only=True):
    """The whole configuration: the providers' blocks (each read by its adapter) and ours."""

    providers: dict[str, dict[str, Any]] = {}
    limits: LimitsConfig = LimitsConfig()
    store: StoreConfig = StoreConfig()
    ask: AskConfig = AskConfig()


def checked(
    config: Mapping[str, Any], providers: Mapping[str, Callable[[Mapping[str, Any]], object]]
) -> AppConfig:
    """The typed configuration; ConfigurationError for an unknown key or a bad value
    anywhere, `providers.<name>` included: a provider not in `providers` (name → its
    adapter's check of the whole configuration) is unknown."""
    try:
        typed = msgspec.convert(dict(config), AppConfig)
    except msgspec.ValidationError as error:
        raise ConfigurationError(explain(str(error), "")) from None
    for name in typed.providers:
        check = providers.get(name)
        if check is None:
            raise ConfigurationError(
                f"providers.{name}: unknown provider (expected one of {', '.join(providers)})"
            )
        check(config)
    return typed
