"""What an Anthropic response said besides its content, and the pages its searches
consulted, read from its stored payloads.

The decoder keeps the message fields the events do not model in an UnknownArtifact of
format `message_fields` (bytes as received, so replay can use them: the container a
continuation runs in). `interpret` reads such a payload, whichever version stored it, into
typed notices for the portable reading, never rewriting it:

- `stop_details` (a refusal): kind `refusal`, its `category` as the code, its
  `explanation` as the message, `recommended_model` in the details. The fallback credit
  token is an opaque value and is never read out;
- `container`: kind `container`, its id as the code, `expires_at` and the skills loaded
  (`skills`, their ids joined) in the details;
- `context_management`: one notice of kind `context_management` per applied edit, its
  type as the code and its counters (`cleared_input_tokens`, …) in the details.

- `stop_sequence`: kind `stop_sequence`, the custom sequence that ended the answer as the
  code.

Other fields (`diagnostics`, …) have no notice kind: a payload giving no notice reads as
None and stays an unknown artifact.

A `web_search_tool_result` block (a hosted activity's result payload) reads as the pages
the search consulted: one web `Source` (url, title) per result, cited or not. A code
execution result block (`code_execution_tool_result`, `bash_code_execution_tool_result`,
`text_editor_code_execution_tool_result`) reads as what the run wrote: its `stdout` and
`stderr`, a viewed file's `content` (`file`), an edit's `lines` (`diff`), an error's
`error_message` (`error`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

import msgspec

from convstore.adapters.anthropic.context import PROVIDER
from convstore.domain.vocabulary import (
    CodeOutput,
    Notice,
    PayloadReading,
    ProviderPayload,
    Source,
)

__all__ = ["MESSAGE_FIELDS_FORMAT", "interpret"]

MESSAGE_FIELDS_FORMAT: Final = "message_fields"
"""The UnknownArtifact format of a response's unmodelled message fields."""

CONTENT_BLOCK: Final = "content_block"
_READ: Final = frozenset({MESSAGE_FIELDS_FORMAT, CONTENT_BLOCK})
_FIELDS: Final = msgspec.json.Decoder(dict[str, Any])


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _refusal(details: Any) -> Iterator[Notice]:
    if not isinstance(details, Mapping):
        return
    extra = {"recommended_model": _text(details.get("recommended_model"))}
    yield Notice(
        kind="refusal",
        code=_text(details.get("category")),
        message=_text(details.get("explanation")),
        details={k: v for k, v in extra.items() if v},
    )


def _container(container: Any) -> Iterator[Notice]:
    if isinstance(container, str) and container:  # an early form: the id alone
        yield Notice(kind="container", code=container)
        return
    if not isinstance(container, Mapping) or not isinstance(container.get("id"), str):
        return
    skills = container.get("skills")
    names = [
        s["skill_id"]
        for s in (skills if isinstance(skills, list) else ())
        if isinstance(s, Mapping) and isinstance(s.get("skill_id"), str)
    ]
    details = {"expires_at": _text(container.get("expires_at")), "skills": ", ".join(names)}
    yield Notice(
        kind="container", code=container["id"], details={k: v for k, v in details.items() if v}
    )


def _context_management(management: Any) -> Iterator[Notice]:
    edits = management.get("applied_edits") if isinstance(management, Mapping) else None
    for edit in edits if isinstance(edits, list) else ():
        if not isinstance(edit, Mapping):
            continue
        counters = {
            name: str(value)
            for name, value in edit.items()
            if type(value) is int or (isinstance(value, str) and name != "type")
        }
        yield Notice(kind="context_management", code=_text(edit.get("type")), details=counters)


def _consulted(block: Mapping[str, Any]) -> PayloadReading | None:
    """The pages a web search result block lists; None for any other block."""
    results = block.get("content")
    if block.get("type") != "web_search_tool_result" or not isinstance(results, list):
        return None
    sources = tuple(
        Source(kind="web", url=result["url"], title=_text(result.get("title")) or None)
        for result in results
        if isinstance(result, Mapping) and isinstance(result.get("url"), str)
    )
    return PayloadReading(sources=sources) if sources else None


CODE_RESULTS: Final = frozenset(
    {
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
    }
)
"""The result block types of hosted code runs."""

_CHANNELS: Final = (("stdout", "stdout"), ("stderr", "stderr"), ("content", "file"))
"""A code result's text fields → the output channel each is shown as."""


def _code_outputs(block: Mapping[str, Any]) -> PayloadReading | None:
    """What a code execution result block says the run wrote; None for any other block."""
    content = block.get("content")
    if block.get("type") not in CODE_RESULTS or not isinstance(content, Mapping):
        return None
    outputs = [
        CodeOutput(channel=channel, text=text)
        for key, channel in _CHANNELS
        if (text := _text(content.get(key)))
    ]
    lines = content.get("lines")
    if isinstance(lines, list) and all(isinstance(line, str) for line in lines) and lines:
        outputs.append(CodeOutput(channel="diff", text="\n".join(lines)))
    if message := _text(content.get("error_message")):
        outputs.append(CodeOutput(channel="error", text=message))
    return PayloadReading(outputs=tuple(outputs)) if outputs else None


def interpret(payload: ProviderPayload) -> PayloadReading | None:
    """The notices of an Anthropic `message_fields` payload, the sources of a web search
    result block, or the outputs of a code result block; None for any other payload, or
    one that types nothing."""
    if payload.provider != PROVIDER or payload.format not in _READ:
        return None
    try:
        fields = _FIELDS.decode(payload.raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    if payload.format == CONTENT_BLOCK:
        return _consulted(fields) or _code_outputs(fields)
    stop = fields.get("stop_sequence")
    notices = (
        *([Notice(kind="stop_sequence", code=stop)] if isinstance(stop, str) and stop else []),
        *_refusal(fields.get("stop_details")),
        *_container(fields.get("container")),
        *_context_management(fields.get("context_management")),
    )
    return PayloadReading(notices=notices) if notices else None
