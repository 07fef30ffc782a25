"""What ties a Gemini payload to a model, and the names the API accepts: model names
(stable `-NNN` versions and their alias), thought signatures, function names.

Part of the Gemini encoder (see `encode` for the rules).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import Final

from convstore.adapters.google.config import normalized_model
from convstore.adapters.wire.models import ModelId, ModelNames

SKIP_SIGNATURE: Final = "skip_thought_signature_validator"
"""The placeholder `thoughtSignature` Google documents for function calls that no Gemini 3
model produced (a trace transferred from another model)."""


_STABLE: Final = re.compile(r"^(.*)-(\d{3})$")


def model_id(model: str) -> ModelId:
    """A Gemini model name as its naming reads it, its resource prefix dropped: a stable
    version and its alias (`gemini-2.0-flash-001` ~ `gemini-2.0-flash`); a `-latest`
    alias (`gemini-flash-latest`) moves between versions; a preview or experimental
    snapshot (`gemini-2.5-flash-preview-05-20`) is a model of its own."""
    name = normalized_model(model).lower()
    if name.endswith("-latest"):
        return ModelId(base=name, moving=True)
    stable = _STABLE.match(name)
    return ModelId(base=stable.group(1), snapshot=stable.group(2)) if stable else ModelId(base=name)


def model_names() -> ModelNames:
    """A conversation's model names, read the Gemini way."""
    return ModelNames(model_id)


def signature_bytes(signature: str) -> bytes | str:
    """A thought signature's bytes: standard or URL-safe base64, padded or not, read alike
    (clients may re-send a signature in either alphabet); the text itself if it is not
    base64."""
    text = signature.strip()
    try:
        return base64.b64decode(
            text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4), validate=True
        )
    except (binascii.Error, ValueError):
        return text


_FUNCTION_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}")
_FUNCTION_NAME_BAD: Final = re.compile(r"[^A-Za-z0-9_.:-]")


def function_name(name: str) -> str:
    """A function name Gemini accepts (`[A-Za-z_][A-Za-z0-9_.:-]{0,63}`): the name itself
    when valid, else a deterministic valid one (its valid characters and a digest)."""
    if _FUNCTION_NAME.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    stem = _FUNCTION_NAME_BAD.sub("_", name)[:48]
    if not stem or not (stem[0].isalpha() or stem[0] == "_"):
        stem = f"_{stem}"[:48]
    return f"{stem}_{digest}"
