"""What ties an Anthropic payload to a model: Anthropic's model names.

An alias names a model without its snapshot date (`claude-sonnet-4-5` for
`claude-sonnet-4-5-20250929`); a `.0` minor version is written `-0` in the alias
(`claude-sonnet-4-0` for `claude-sonnet-4-20250514`); `-latest` aliases move between
snapshots. Vertex AI writes the date after `@`, Bedrock adds a region and `anthropic.`
prefix and a `-v1:0` suffix. The rules that use these names are `wire.models`'.

Part of the Anthropic encoder (see `encode` for the rules).
"""

from __future__ import annotations

import re
from typing import Final

from convstore.adapters.wire.models import ModelId, ModelNames

_PREFIX: Final = re.compile(r"^(?:[a-z]{2,4}\.)?anthropic\.")
_PLATFORM: Final = re.compile(r"-v\d+(?::\d+)?$")
_SNAPSHOT: Final = re.compile(r"^(.*?)[-@](\d{8})$")
_MINOR_ZERO: Final = re.compile(r"-0$")


def model_id(model: str) -> ModelId:
    """An Anthropic model name as its naming reads it."""
    name = _PLATFORM.sub("", _PREFIX.sub("", model.strip().lower()))
    if name.endswith("-latest"):
        return ModelId(base=name, moving=True)
    dated = _SNAPSHOT.match(name)
    base, snapshot = (dated.group(1), dated.group(2)) if dated else (name, "")
    return ModelId(base=_MINOR_ZERO.sub("", base), snapshot=snapshot)


def model_names() -> ModelNames:
    """A conversation's model names, read the Anthropic way."""
    return ModelNames(model_id)
