"""What a Gemini response said besides its content, read from its stored fields.

The decoder keeps the fields the events do not model in UnknownArtifacts of the response:
candidate 0's in format `candidate_fields` (`finishMessage`, `safetyRatings`,
`citationMetadata`, `avgLogprobs`, …), the response's in format `response_fields`
(`promptFeedback`, `modelStatus`, `createTime`, …), each the JSON object of those fields
with their last values, bytes as received. Every version of the decoder stored them so;
`interpret` reads such a payload into typed notices for the portable reading, never
rewriting it:

- `finishMessage`: kind `finish_message`, the message as Google wrote it;
- `safetyRatings` (candidate: about the response; `promptFeedback.safetyRatings`: about
  the prompt): one notice of kind `safety` per rating, its `category` as the code, and
  `probability`, `probabilityScore`, `severity`, `severityScore`, `blocked`,
  `overwrittenThreshold` with `subject` (`response` or `prompt`) in the details;
- `promptFeedback.blockReason`: kind `blocked`, the reason as the code, its
  `blockReasonMessage` as the message — kind `screening` when Model Armor blocked it
  (`MODEL_ARMOR`: the API reports Model Armor's verdict only this way, and as the
  `MODEL_ARMOR` finish reason with its `finishMessage`; the screening details go to Cloud
  Logging, not the response).

Other fields (`avgLogprobs`, `modelStatus`, …) have no notice kind: a payload giving no
notice reads as None and stays an unknown artifact.

A `web_search` activity's payload (format `grounding_metadata`, a block with
`webSearchQueries`) reads as the pages the search consulted: each `groundingChunks[].web`
as a source (cited or not), as google-genai lists them. A grounding block that is no web
search (kept as an unknown artifact) reads as None.

A `code_execution` activity's result payload (format `part`: one `codeExecutionResult`
part; `parts`: the JSON array of a run's result parts) reads as what the run wrote: each
result's `output` (stdout and stderr as Gemini mixes them). Any other part reads as None.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

import msgspec

from convstore.adapters.google.context import PROVIDER
from convstore.adapters.google.grounding import search_queries
from convstore.domain.vocabulary import (
    CodeOutput,
    Notice,
    PayloadReading,
    ProviderPayload,
    Source,
)

__all__ = ["CANDIDATE_FIELDS_FORMAT", "GROUNDING_FORMAT", "RESPONSE_FIELDS_FORMAT", "interpret"]

CANDIDATE_FIELDS_FORMAT: Final = "candidate_fields"
RESPONSE_FIELDS_FORMAT: Final = "response_fields"
"""The UnknownArtifact formats of a response's unmodelled candidate and response fields."""
GROUNDING_FORMAT: Final = "grounding_metadata"
"""The payload format of a grounding block (a `web_search` activity's, or an artifact's)."""

SCREENED: Final = frozenset({"MODEL_ARMOR"})
"""Block reasons that are a screening service's verdict."""

_RATING_DETAILS: Final = (
    "probability",
    "probabilityScore",
    "severity",
    "severityScore",
    "blocked",
    "overwrittenThreshold",
)
_FIELDS: Final = msgspec.json.Decoder(dict[str, Any])


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _detail(value: Any) -> str:
    """A rating value as text (`true`, `0.12`, `NEGLIGIBLE`); empty for other shapes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    return ""


def _ratings(ratings: Any, subject: str) -> Iterator[Notice]:
    for rating in ratings if isinstance(ratings, list) else ():
        if not isinstance(rating, Mapping):
            continue
        details = {name: _detail(rating.get(name)) for name in _RATING_DETAILS}
        details = {name: value for name, value in details.items() if value}
        yield Notice(
            kind="safety",
            code=_text(rating.get("category")),
            details={**details, "subject": subject},
        )


def _prompt_feedback(feedback: Any) -> Iterator[Notice]:
    if not isinstance(feedback, Mapping):
        return
    reason = _text(feedback.get("blockReason"))
    if reason:
        yield Notice(
            kind="screening" if reason in SCREENED else "blocked",
            code=reason,
            message=_text(feedback.get("blockReasonMessage")),
            details={"subject": "prompt"},
        )
    yield from _ratings(feedback.get("safetyRatings"), "prompt")


def _candidate_notices(fields: Mapping[str, Any]) -> Iterator[Notice]:
    message = _text(fields.get("finishMessage"))
    if message:
        yield Notice(kind="finish_message", message=message)
    yield from _ratings(fields.get("safetyRatings"), "response")


def _response_notices(fields: Mapping[str, Any]) -> Iterator[Notice]:
    yield from _prompt_feedback(fields.get("promptFeedback"))


def _search_sources(block: Mapping[str, Any]) -> Iterator[Source]:
    chunks = block.get("groundingChunks")
    for chunk in chunks if isinstance(chunks, list) else ():
        web = chunk.get("web") if isinstance(chunk, Mapping) else None
        if isinstance(web, Mapping):
            url, title = _text(web.get("uri")), _text(web.get("title"))
            yield Source(kind="web", url=url or None, title=title or None)


CODE_FORMATS: Final = frozenset({"part", "parts"})
"""The payload formats of a code run's result parts."""
_ANY: Final = msgspec.json.Decoder()


def _code_outputs(value: Any) -> PayloadReading | None:
    """The `output` of each `codeExecutionResult` part; None unless every part is one."""
    parts = value if isinstance(value, list) else [value]
    results = [
        part.get("codeExecutionResult") if isinstance(part, Mapping) else None for part in parts
    ]
    if not results or not all(isinstance(result, Mapping) for result in results):
        return None
    outputs = tuple(
        CodeOutput(channel="output", text=output)
        for result in results
        if isinstance(result, Mapping) and (output := _text(result.get("output")))
    )
    return PayloadReading(outputs=outputs) if outputs else None


_READERS: Final = {
    CANDIDATE_FIELDS_FORMAT: _candidate_notices,
    RESPONSE_FIELDS_FORMAT: _response_notices,
}


def interpret(payload: ProviderPayload) -> PayloadReading | None:
    """The notices (or a web search's sources, or a code run's outputs) a Gemini payload
    holds; None for any other payload, or one with none."""
    if payload.provider == PROVIDER and payload.format in CODE_FORMATS:
        try:
            return _code_outputs(_ANY.decode(payload.raw))
        except (msgspec.DecodeError, RecursionError):
            return None
    reader = _READERS.get(payload.format)
    known = reader is not None or payload.format == GROUNDING_FORMAT
    if payload.provider != PROVIDER or not known:
        return None
    try:
        fields = _FIELDS.decode(payload.raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    if reader is None:
        if search_queries(fields) is None:
            return None  # no web search: the block stays an unknown artifact
        sources = tuple(_search_sources(fields))
        return PayloadReading(sources=sources) if sources else None
    notices = tuple(reader(fields))
    return PayloadReading(notices=notices) if notices else None
