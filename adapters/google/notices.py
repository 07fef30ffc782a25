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
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

import msgspec

from convstore.adapters.google.context import PROVIDER
from convstore.domain.vocabulary import Notice, PayloadReading, ProviderPayload

__all__ = ["CANDIDATE_FIELDS_FORMAT", "RESPONSE_FIELDS_FORMAT", "interpret"]

CANDIDATE_FIELDS_FORMAT: Final = "candidate_fields"
RESPONSE_FIELDS_FORMAT: Final = "response_fields"
"""The UnknownArtifact formats of a response's unmodelled candidate and response fields."""

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


_READERS: Final = {
    CANDIDATE_FIELDS_FORMAT: _candidate_notices,
    RESPONSE_FIELDS_FORMAT: _response_notices,
}


def interpret(payload: ProviderPayload) -> PayloadReading | None:
    """The notices a Gemini payload holds; None for any other payload, or one with none."""
    reader = _READERS.get(payload.format)
    if payload.provider != PROVIDER or reader is None:
        return None
    try:
        fields = _FIELDS.decode(payload.raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    notices = tuple(reader(fields))
    return PayloadReading(notices=notices) if notices else None
