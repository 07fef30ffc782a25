"""Gemini's server-side tool invocations (`toolCall` / `toolResponse` parts) → hosted activities.

With `toolConfig.includeServerSideToolInvocations` (built-in tools combined with function
calling), a response shows the built-in tools it ran as parts: `{"toolCall": {"id",
"toolType", "args"}}` and then `{"toolResponse": {"id", "toolType", "response"}}`, either
possibly with a `thoughtSignature`. Google runs them, so they are never client tool
calls; the client must send both parts back, unchanged and where they stood, in the
history of the next request (which the encoder does from the payloads).

`toolCall` → a HostedActivity `started` (its id the part's `id`, else
`<responseId>:server_tool:<k>`; its name from `toolType`: `GOOGLE_SEARCH_WEB` →
`web_search` and so on, any other type lowercased; its input the `args`); `toolResponse`
→ its terminal transition (the call whose `id` it names, else the oldest open one), `failed`
when the response object holds an `error`, else `completed`. Each transition's payload is
its part byte for byte (format `part`). A response naming no open call is the terminal
transition alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, Final

from convstore.domain.events import HostedActivity
from convstore.domain.vocabulary import ActivityId, ProviderPayload, ResponseId

__all__ = ["TOOL_TYPES", "ServerTools", "activity_name"]

TOOL_TYPES: Final[Mapping[str, str]] = {
    "GOOGLE_SEARCH_WEB": "web_search",
    "GOOGLE_SEARCH_IMAGE": "image_search",
    "URL_CONTEXT": "url_context",
    "GOOGLE_MAPS": "google_maps",
    "FILE_SEARCH": "file_search",
    "MEDIA_PROCESSING": "media_processing",
}
"""google-genai's `ToolType` values → hosted activity names."""

_SUMMARY_KEYS: Final = ("error", "status", "message")


def activity_name(tool_type: Any) -> str:
    """The activity name of a `toolType` (`server_tool` when it names none)."""
    if not isinstance(tool_type, str) or not tool_type:
        return "server_tool"
    return TOOL_TYPES.get(tool_type, tool_type.lower())


def _summary(response: Mapping[str, Any]) -> tuple[bool, str]:
    """(failed, summary) of a `toolResponse.response` object."""
    error = response.get("error")
    if error is not None:
        message = error.get("message") if isinstance(error, Mapping) else error
        return True, f"error: {message}" if isinstance(message, str) and message else "error"
    keys = [k for k in response if k not in _SUMMARY_KEYS]
    return False, f"{len(keys)} field" if len(keys) == 1 else f"{len(keys)} fields"


class ServerTools:
    """The server-side tool invocations of one response, in order."""

    __slots__ = ("_count", "_open", "response_id")

    def __init__(self, response_id: ResponseId) -> None:
        self.response_id = response_id
        self._count = 0
        self._open: deque[tuple[str, str]] = deque()
        """Calls without their response yet: (activity id, name)."""

    def _new_id(self, given: Any, taken: set[str]) -> str:
        ordinal = self._count
        self._count += 1
        if isinstance(given, str) and given and given not in taken:
            return given
        return f"{self.response_id}:server_tool:{ordinal}"

    def call(
        self, call: Mapping[str, Any], taken: set[str], payload: ProviderPayload
    ) -> HostedActivity:
        """The `started` transition of a `toolCall` (`taken`: activity ids in use)."""
        args = call.get("args")
        activity_id = self._new_id(call.get("id"), taken)
        name = activity_name(call.get("toolType"))
        taken.add(activity_id)
        self._open.append((activity_id, name))
        return HostedActivity(
            activity_id=ActivityId(activity_id),
            name=name,
            state="started",
            response_id=self.response_id,
            input=args if isinstance(args, dict) else {},
            payload=payload,
        )

    def response(
        self, response: Mapping[str, Any], taken: set[str], payload: ProviderPayload
    ) -> HostedActivity:
        """The terminal transition of a `toolResponse`."""
        given = response.get("id")
        match = next((entry for entry in self._open if entry[0] == given), None)
        if match is None and self._open and not (isinstance(given, str) and given):
            match = self._open[0]
        if match is not None:
            self._open.remove(match)
            activity_id, name = match
        else:
            activity_id = self._new_id(given, taken)
            taken.add(activity_id)
            name = activity_name(response.get("toolType"))
        value = response.get("response")
        failed, summary = _summary(value if isinstance(value, dict) else {})
        return HostedActivity(
            activity_id=ActivityId(activity_id),
            name=name,
            state="failed" if failed else "completed",
            response_id=self.response_id,
            summary=summary,
            payload=payload,
        )
