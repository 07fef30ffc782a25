"""Every rebuilt request, to every provider, validates against that provider's SDK types.

Each conversation the captures build (every provider's examples, and `../shared/wire`
when present) is replayed to Anthropic and to Gemini, same-provider with the recorded
model and cross-provider with a named one, through the adapters' entry points; the body
must be one the official SDK's request types accept unchanged (`tests.sdk_requests`).
Exempt are exactly the unknown parts replayed byte-identical to their own provider, and
the fields listed in `SDK_LAGS`, which the wire carries and the SDK does not know yet.
The OpenAI target's sweep is in `test_openai_encode.py`
(`test_every_rebuilt_request_validates_against_the_sdk`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from convstore.adapters.wire.providers import adapter
from tests.recorded import Recorded, recorded_conversations
from tests.sdk_requests import (
    Path,
    assert_valid_anthropic_request,
    assert_valid_google_request,
    verbatim_paths,
)

TARGETS: dict[str, tuple[str, Callable[..., None]]] = {
    "anthropic": ("claude-sonnet-4-5", assert_valid_anthropic_request),
    "google": ("gemini-2.5-flash", assert_valid_google_request),
}
"""Target provider → (the model a cross-provider replay names, the SDK check)."""

SDK_LAGS: dict[str, set[tuple[str, str]]] = {
    # The API sends `abort_reason` (null) in code execution results and takes the block
    # back as sent; anthropic 2.15's types have no such field, response or request.
    "anthropic": {("code_execution_result", "abort_reason")},
    "google": set(),
}
"""Target provider → (block type, field) pairs the SDK does not know yet, exempt."""

RECORDED = recorded_conversations()


def _lagging(body: Any, lags: set[tuple[str, str]], path: Path = ()) -> Iterator[Path]:
    """The paths of fields in `lags` anywhere in `body`."""
    if isinstance(body, dict):
        for key, value in body.items():
            if (body.get("type"), key) in lags:
                yield (*path, key)
            else:
                yield from _lagging(value, lags, (*path, key))
    elif isinstance(body, list):
        for index, value in enumerate(body):
            yield from _lagging(value, lags, (*path, index))


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("recorded", RECORDED, ids=str)
def test_every_rebuilt_request_validates_against_the_target_sdk(
    recorded: Recorded, target: str
) -> None:
    model, check = TARGETS[target]
    encode = adapter(target).need_encode()
    same = recorded.provider == target
    for named in [None, model] if same else [model]:
        body = json.loads(encode(list(recorded.events), {}, named, "And then?").to_json())
        exempt = verbatim_paths(body, recorded.unknown_payloads()) if same else []
        exempt.extend(_lagging(body, SDK_LAGS[target]))
        check(body, exempt=exempt)
