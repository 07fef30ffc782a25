"""Which model names denote one model, for the binding of opaque values.

A payload (a signature, encrypted content, an encrypted index) is bound to the model its
response reported. Requests mostly name an alias (`claude-sonnet-4-0`, `gpt-4o`,
`gemini-2.0-flash`) and responses report the snapshot it resolved to
(`claude-sonnet-4-20250514`, `gpt-4o-2024-08-06`, `gemini-2.0-flash-001`). So:

- a request's model and the model its response reported are recorded together, and are
  one model for binding: the recording is the evidence of what the alias resolved to
  (`ModelNames.record`; names joined this way stay joined, transitively);
- two names never recorded together, but which the provider's documented naming makes an
  alias and its snapshot, are assumed to be one model, and the assumption is reported
  (`ModelNames.assumed`);
- a moving alias (`-latest`) points at different snapshots over time, so naming never
  joins it to anything; only a recording does;
- anything else is two models.

Each provider reads its own names into a `ModelId` (its prefixes, snapshot suffixes and
moving aliases); the rules above are the same for all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

import msgspec

from convstore.adapters.wire.providers import Loss
from convstore.domain.events import ResponseStarted
from convstore.domain.vocabulary import ProviderPayload

__all__ = ["ModelId", "ModelNames", "Verdict", "requested_model"]

Verdict = Literal["same", "assumed", "different"]
"""One model by name or recording; one model by documented naming only; two models."""


@dataclass(frozen=True, slots=True)
class ModelId:
    """A model name as its provider's naming reads it."""

    base: str
    """The name without its snapshot suffix and platform decorations."""
    snapshot: str = ""
    """The snapshot it pins (a date, a version number); empty for an alias."""
    moving: bool = False
    """True for an alias documented to move between snapshots (`-latest`)."""

    def versus(self, other: ModelId) -> Verdict:
        """What the documented naming alone says of `self` and `other`."""
        if self == other:
            return "same"
        if self.moving or other.moving or self.base != other.base:
            return "different"
        if not self.snapshot or not other.snapshot:
            return "assumed"  # an alias and a snapshot of it
        return "different"  # two snapshots


class _Model(msgspec.Struct):
    model: str = ""


_MODEL_FIELD: Final = msgspec.json.Decoder(_Model)


def requested_model(started: ResponseStarted) -> str:
    """The model the request named, as its recorded native settings hold it ('' when they
    name none); `started.model` is the one the response reported."""
    native = started.settings.native
    if native is None or native.provider != started.provider:
        return ""
    try:
        return _MODEL_FIELD.decode(native.raw).model
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ""


class ModelNames:
    """The model names of one conversation for binding checks: the pairs its recording
    holds together, and the provider's naming for the rest (see the module docstring)."""

    def __init__(self, read: Callable[[str], ModelId]) -> None:
        self._read = read
        self._parent: dict[ModelId, ModelId] = {}
        self._assumed: dict[tuple[str, str], None] = {}

    def _root(self, model: ModelId) -> ModelId:
        parent = self._parent.get(model, model)
        while parent != model:
            grand = self._parent.get(parent, parent)
            self._parent[model] = grand
            model, parent = parent, grand
        return model

    def record(self, requested: str, reported: str) -> None:
        """A request named `requested` and its response reported `reported`: one model."""
        if not requested or not reported:
            return
        a, b = self._root(self._read(requested)), self._root(self._read(reported))
        if a != b:
            self._parent[a] = b

    def note(self, started: ResponseStarted) -> None:
        """Record the pair a recorded response holds (its request's model and its own)."""
        self.record(requested_model(started), started.model)

    def verdict(self, bound: str, target: str) -> Verdict:
        """Whether a value bound to `bound` holds for a request to `target`."""
        if bound == target:
            return "same"
        a, b = self._read(bound), self._read(target)
        if self._root(a) == self._root(b):
            return "same"
        return a.versus(b)

    def same(self, bound: str, target: str) -> bool:
        """True unless `bound` and `target` are two models; an assumption is remembered
        for `assumed`."""
        if bound == target:
            return True
        if not bound or not target:
            return False
        verdict = self.verdict(bound, target)
        if verdict == "assumed":
            self._assumed[(bound, target)] = None
        return verdict != "different"

    def mismatch(self, payload: ProviderPayload, target: str) -> str | None:
        """Why `payload`'s binding does not hold for a request to `target` (None: it holds).
        A `model` binding holds when `same` says so; any other binding key is not
        understood, and so never holds."""
        for key, value in payload.binding.items():
            if key == "model":
                if value and not self.same(value, target):
                    return f"bound to model {value!r}, not {target!r}"
            else:
                return f"bound to {key} {value!r}, which this adapter cannot verify"
        return None

    def assumed(self) -> list[Loss]:
        """The dry run's lines for each pair assumed to be one model by naming only."""
        return [
            Loss(
                version=0,
                event="model",
                kind="assumed same model",
                reason=f"values bound to {bound!r} are sent to {target!r}, an alias and "
                "its snapshot by the provider's naming, never recorded together",
            )
            for bound, target in self._assumed
        ]
