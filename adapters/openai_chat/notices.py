"""openai-chat payloads → what the portable reading shows of them (`interpret`).

- `response_fields`: Azure OpenAI's `prompt_filter_results` → one `screening` notice per
  prompt (code `content_filter.prompt`), saying whether anything was filtered and, per
  category, its severity or whether it was detected;
- `choice_fields`: Azure's `content_filter_results` on the answer → a `screening` notice
  (code `content_filter.completion`), read the same way (in a stream, each chunk's
  results, the last one read).

Anything else is None: it stays an unknown artifact (Perplexity's `citations`, `logprobs`,
…). Provider values are read, never rendered or logged here; nothing raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from convstore.adapters.openai_chat.context import PROVIDER
from convstore.domain.vocabulary import Notice, PayloadReading, ProviderPayload

__all__ = ["interpret"]

_ANY: Final = msgspec.json.Decoder()


def interpret(payload: ProviderPayload) -> PayloadReading | None:
    """The notices of an openai-chat payload; None for a kind it does not type."""
    if payload.provider != PROVIDER or payload.format not in ("response_fields", "choice_fields"):
        return None
    try:
        fields = _ANY.decode(payload.raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(fields, dict):
        return None
    notices: list[Notice] = []
    if payload.format == "response_fields":
        for result in _list(fields.get("prompt_filter_results")):
            if isinstance(result, dict) and isinstance(result.get("content_filter_results"), dict):
                notices.append(_screening("prompt", result["content_filter_results"], result))
    else:
        results = fields.get("content_filter_results")
        if isinstance(results, list):  # one value per streamed chunk: the last one is read
            results = next((r for r in reversed(results) if isinstance(r, dict) and r), None)
        if isinstance(results, dict) and results:
            notices.append(_screening("completion", results, {}))
    return PayloadReading(notices=tuple(notices)) if notices else None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _screening(side: str, results: Mapping[str, Any], around: Mapping[str, Any]) -> Notice:
    details: dict[str, str] = {}
    filtered = []
    for category, result in results.items():
        if not isinstance(result, dict):
            continue
        if result.get("filtered") is True:
            filtered.append(category)
        if isinstance(result.get("severity"), str):
            details[category] = result["severity"]
        elif isinstance(result.get("detected"), bool):
            details[category] = "detected" if result["detected"] else "not detected"
    details["filtered"] = ", ".join(sorted(filtered)) if filtered else "none"
    index = around.get("prompt_index")
    if type(index) is int:
        details["prompt_index"] = str(index)
    return Notice(kind="screening", code=f"content_filter.{side}", details=details)
