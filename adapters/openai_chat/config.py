"""The `providers.openai-chat` configuration block.

```toml
[providers.openai-chat]
model = "gpt-4.1"                       # the model a replay names when none is given
base_url = "https://api.openai.com/v1"  # an OpenAI-compatible server: its host is the
                                        # server its payloads are bound to
```
"""

from __future__ import annotations

from typing import ClassVar, Final

from convstore.adapters.config.provider import ProviderConfig, check_http_url
from convstore.adapters.openai_chat.context import PROVIDER, server_host

__all__ = ["DEFAULT_BASE_URL", "ChatConfig"]

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"


class ChatConfig(ProviderConfig, frozen=True, kw_only=True):
    """`providers.openai-chat`: the model and the server a request goes to."""

    provider: ClassVar[str] = PROVIDER
    model: str | None = None
    base_url: str = DEFAULT_BASE_URL

    def check(self) -> None:
        check_http_url(self.base_url, f"providers.{PROVIDER}.base_url")

    @property
    def server(self) -> str:
        """The host (and port) of `base_url`: what payloads are bound to."""
        return server_host(self.base_url)
