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
from convstore.adapters.wire.encoding import mismatched_binding
from convstore.domain.vocabulary import ProviderPayload

SKIP_SIGNATURE: Final = "skip_thought_signature_validator"
"""The placeholder `thoughtSignature` Google documents for function calls that no Gemini 3
model produced (a trace transferred from another model)."""


_STABLE_SUFFIX: Final = re.compile(r"-\d{3}$")


def same_model(a: str, b: str) -> bool:
    """True when two model names can denote one model: equal once their resource prefix is
    dropped, or one is the other's stable version (`gemini-2.0-flash` ~
    `gemini-2.0-flash-001`); two different versions differ."""
    if a == b:
        return True
    x, y = normalized_model(a), normalized_model(b)
    if not x or not y:
        return False
    if x == y:
        return True
    base_x, base_y = _STABLE_SUFFIX.sub("", x), _STABLE_SUFFIX.sub("", y)
    return base_x == base_y and (base_x == x or base_y == y)


def binding_mismatch(payload: ProviderPayload, model: str | None) -> str | None:
    """Why `payload`'s binding does not hold for a request to `model` (None: it holds, or
    `model` is None: bindings are not checked)."""
    if model is None:
        return None
    return mismatched_binding(payload, model, same_model)


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
