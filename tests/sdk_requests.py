"""The providers' own SDKs as the oracle of a rebuilt request body.

`assert_valid_openai_request`, `assert_valid_anthropic_request` and
`assert_valid_google_request` check a request body (the JSON the project sends, as
builtins) against the official SDK's request types: `openai`'s `ResponseCreateParams`,
`anthropic`'s `MessageCreateParams` (or its beta twin), `google-genai`'s `Content` and
`GenerateContentConfig` models. A pydantic `TypeAdapter` over a TypedDict silently drops
keys it does not know, and coerces values (`"1"` to `1`), so a body passes only when it
validates *and* the validated value equals it, key for key and value for value.

`exempt` names parts that leave the check, as paths into the body (`("input", 3)`,
`("messages", 1, "content", 2)`): those of provider items the project does not type,
replayed byte-identical. `verbatim_paths` finds them: the paths of the body's values equal
to one of the given raw JSON payloads.

Failures name where the body disagrees with the SDK (paths, field names and pydantic's
error kinds), never a payload value.
"""

from __future__ import annotations

import base64
import binascii
import copy
import enum
import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, get_args

import pydantic
from pydantic import TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel
from typing_extensions import is_typeddict

__all__ = [
    "Path",
    "assert_valid_anthropic_request",
    "assert_valid_chat_request",
    "assert_valid_google_request",
    "assert_valid_openai_request",
    "verbatim_paths",
]

Path = tuple[str | int, ...]
"""Where a part sits in a body: keys and list indexes from the top."""

_MAX_PROBLEMS = 12
"""A failure lists at most this many problems (the rest are counted)."""


@dataclass(frozen=True)
class _Checker:
    """How one SDK type checks a value."""

    validate: Callable[[Any], Any]
    """value → the validated value (raises ValidationError)."""
    members: Mapping[str, frozenset[str]]
    """When the type is a union of TypedDicts: each member's name and keys (to tell which
    member a refused value came closest to)."""


@dataclass(frozen=True)
class _Part:
    """One part of a body checked on its own, so a failure points at it."""

    path: Path
    value: Any
    checker: _Checker


def verbatim_paths(body: Any, payloads: Iterable[bytes]) -> list[Path]:
    """The paths of `body`'s values equal to one of `payloads` (raw JSON) parsed."""
    wanted = [json.loads(raw) for raw in payloads]
    if not wanted:
        return []
    found: list[Path] = []

    def walk(value: Any, path: Path) -> None:
        if any(_same(value, each) for each in wanted):
            found.append(path)
            return
        if isinstance(value, Mapping):
            for key, inner in value.items():
                walk(inner, (*path, key))
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                walk(inner, (*path, index))

    walk(body, ())
    return found


def assert_valid_openai_request(body: Mapping[str, Any], *, exempt: Collection[Path] = ()) -> None:
    """Fail unless `body` is a Responses API request the `openai` SDK's types accept
    unchanged (`ResponseCreateParams`; each input item as a `ResponseInputItemParam`,
    each tool as a `ToolParam`)."""
    from openai.types.responses import ResponseCreateParams, ResponseInputItemParam, ToolParam

    checked = _without(body, exempt)
    parts = [
        *_items(checked, "input", _validator(ResponseInputItemParam)),
        *_items(checked, "tools", _validator(ToolParam)),
    ]
    _assert_parts("openai", parts, _Part((), checked, _validator(ResponseCreateParams)))


def assert_valid_chat_request(body: Mapping[str, Any], *, exempt: Collection[Path] = ()) -> None:
    """Fail unless `body` is a Chat Completions request the `openai` SDK's types accept
    unchanged (`CompletionCreateParamsBase`; each message as a `ChatCompletionMessageParam`,
    each tool as a `ChatCompletionToolUnionParam`)."""
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam
    from openai.types.chat.completion_create_params import CompletionCreateParamsBase

    checked = _without(body, exempt)
    parts = [
        *_items(checked, "messages", _validator(ChatCompletionMessageParam)),
        *_items(checked, "tools", _validator(ChatCompletionToolUnionParam)),
    ]
    _assert_parts("openai", parts, _Part((), checked, _validator(CompletionCreateParamsBase)))


def assert_valid_anthropic_request(
    body: Mapping[str, Any], *, exempt: Collection[Path] = ()
) -> None:
    """Fail unless `body` is a Messages API request the `anthropic` SDK's types accept
    unchanged: `anthropic.types.MessageCreateParams`, or the beta
    `anthropic.types.beta.MessageCreateParams` (beta features: MCP servers, containers,
    newer tool versions) when the first refuses it.

    Each content block is checked as a `ContentBlockParam` on its own: a message's
    content also accepts the SDK's response models (`ContentBlock`), which pydantic
    builds from a dict that fits them, keeping keys they do not know."""
    from anthropic.types import ContentBlockParam, MessageCreateParams, ToolUnionParam
    from anthropic.types.beta import BetaContentBlockParam, BetaToolUnionParam
    from anthropic.types.beta import MessageCreateParams as BetaMessageCreateParams

    checked = _without(body, exempt)
    ga = [
        *_blocks(checked, _validator(ContentBlockParam)),
        *_items(checked, "tools", _validator(ToolUnionParam)),
    ]
    ga_problems = _problems(ga, _Part((), checked, _validator(MessageCreateParams)))
    if not ga_problems:
        return
    beta = [
        *_blocks(checked, _validator(BetaContentBlockParam)),
        *_items(checked, "tools", _validator(BetaToolUnionParam)),
    ]
    beta_problems = _problems(beta, _Part((), checked, _validator(BetaMessageCreateParams)))
    if beta_problems:
        raise AssertionError(
            "anthropic SDK refuses the request (MessageCreateParams):\n"
            + _listed(ga_problems)
            + "\nand its beta MessageCreateParams:\n"
            + _listed(beta_problems)
        )


_GOOGLE_TOP_CONFIG: frozenset[str] = frozenset(
    {
        "systemInstruction",
        "tools",
        "toolConfig",
        "safetySettings",
        "cachedContent",
        "labels",
        "serviceTier",
        "store",
    }
)
"""`GenerateContentConfig` fields the SDK sends at the body's top level (its
`_GenerateContentConfig_to_mldev`), not inside `generationConfig`."""

_GOOGLE_CLIENT_ONLY: frozenset[str] = frozenset(
    {
        "httpOptions",
        "automaticFunctionCalling",
        "automaticContinuation",
        "shouldReturnHttpResponse",
    }
)
"""`GenerateContentConfig` fields the SDK keeps to itself (never on the wire)."""


def assert_valid_google_request(body: Mapping[str, Any], *, exempt: Collection[Path] = ()) -> None:
    """Fail unless `body` is a `generateContent` REST body the `google-genai` SDK's models
    accept unchanged: every `contents` entry a `Content`, and `generationConfig` together
    with the top-level config fields (`systemInstruction`, `tools`, `toolConfig`,
    `safetySettings`, …) a `GenerateContentConfig`, in the REST camelCase spelling."""
    from google.genai import types

    checked = _without(body, exempt)
    problems: list[str] = []
    unknown = sorted(set(checked) - _GOOGLE_TOP_CONFIG - {"contents", "generationConfig"})
    problems.extend(f"{key}: not a field of a generateContent body" for key in unknown)
    generation = checked.get("generationConfig", {})
    if not isinstance(generation, Mapping):
        problems.append("generationConfig: not an object")
        generation = {}
    misplaced = sorted(set(generation) & (_GOOGLE_TOP_CONFIG | _GOOGLE_CLIENT_ONLY))
    problems.extend(
        f"generationConfig.{key}: not sent inside generationConfig" for key in misplaced
    )
    config = {**generation, **{k: v for k, v in checked.items() if k in _GOOGLE_TOP_CONFIG}}
    parts = [
        *_items(checked, "contents", _model_validator(types.Content)),
        *_items(checked, "tools", _model_validator(types.Tool)),
        _Part(("config",), config, _model_validator(types.GenerateContentConfig)),
    ]
    problems.extend(_problems(parts, None))
    if problems:
        raise AssertionError("google-genai SDK refuses the request:\n" + _listed(problems))


def _assert_parts(sdk: str, parts: Sequence[_Part], whole: _Part) -> None:
    problems = _problems(parts, whole)
    if problems:
        raise AssertionError(f"{sdk} SDK refuses the request:\n" + _listed(problems))


def _problems(parts: Sequence[_Part], whole: _Part | None) -> list[str]:
    """What each part gets wrong; the whole body is checked only when every part passes
    (its errors would repeat theirs, less precisely)."""
    problems = [problem for part in parts for problem in _check(part)]
    if not problems and whole is not None:
        problems = _check(whole)
    return problems


def _check(part: _Part) -> list[str]:
    where = _dotted(part.path) or "(body)"
    try:
        validated = _materialized(part.checker.validate(part.value))
    except ValidationError as error:
        return [f"{where}: {line}" for line in _errors(error, part.checker, part.value)]
    return [
        f"{_dotted((*part.path, *path)) or '(body)'}: {what}"
        for path, what in _diff(part.value, validated, ())
    ]


@cache
def _type_adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def _validator(kind: Any) -> _Checker:
    """`kind` (a TypedDict, or a union of them) as pydantic validates it."""
    members = {
        member.__name__: frozenset(member.__required_keys__ | member.__optional_keys__)
        for member in get_args(kind)
        if is_typeddict(member)
    }
    return _Checker(_type_adapter(kind).validate_python, members)


def _model_validator(model: type[pydantic.BaseModel]) -> _Checker:
    """`model` validated from its fields' names or aliases and dumped back by alias."""

    def validate(value: Any) -> Any:
        return model.model_validate(value).model_dump(by_alias=True, exclude_unset=True)

    return _Checker(validate, {})


def _items(body: Mapping[str, Any], key: str, checker: _Checker) -> Iterator[_Part]:
    values = body.get(key)
    if isinstance(values, list):
        for index, value in enumerate(values):
            yield _Part((key, index), value, checker)


def _blocks(body: Mapping[str, Any], checker: _Checker) -> Iterator[_Part]:
    """Each content block of each message of an Anthropic body."""
    for message in _items(body, "messages", checker):
        content = message.value.get("content") if isinstance(message.value, Mapping) else None
        if isinstance(content, list):
            for index, block in enumerate(content):
                yield _Part((*message.path, "content", index), block, checker)


def _materialized(value: Any) -> Any:
    """`value` with pydantic's lazy `Iterable` validators consumed (validating their items),
    and response models a union built from a dict dumped back to one."""
    if isinstance(value, pydantic.BaseModel):
        return _materialized(value.model_dump(exclude_unset=True))
    if isinstance(value, Mapping):
        return {key: _materialized(inner) for key, inner in value.items()}
    if isinstance(value, (str, bytes)):
        return value
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ValidatorIterator":
        return [_materialized(inner) for inner in value]
    return value


def _diff(given: Any, validated: Any, path: Path) -> Iterator[tuple[Path, str]]:
    """Where the validated value differs from the given one. A snake_case key the model
    dumped in camelCase is the same field (proto JSON accepts both spellings, and so do
    the google-genai models)."""
    if isinstance(given, Mapping) and isinstance(validated, Mapping):
        seen: set[str] = set()
        for key in given:
            name = key if key in validated else to_camel(key)
            if name not in validated:
                yield (*path, key), "not a field the SDK knows (dropped by its types)"
            else:
                seen.add(name)
                yield from _diff(given[key], validated[name], (*path, key))
        for key in validated:
            if key not in seen:
                yield (*path, key), "added by the SDK's types"
        return
    if isinstance(given, list) and isinstance(validated, list) and len(given) == len(validated):
        for index, (one, other) in enumerate(zip(given, validated, strict=True)):
            yield from _diff(one, other, (*path, index))
        return
    if not _same(given, validated):
        yield (
            path,
            f"changed by the SDK's types ({type(given).__name__} → {type(validated).__name__})",
        )


def _same(given: Any, validated: Any) -> bool:
    """Equal as JSON values: a bool is not a number, a base64 string equals the bytes it
    spells (the google-genai models keep bytes fields as bytes), and an enum's name
    equals it in any case."""
    if isinstance(validated, bytes):
        return isinstance(given, str) and _base64(given) == validated
    if isinstance(given, bool) or isinstance(validated, bool):
        return type(given) is type(validated) and given == validated
    if isinstance(given, Mapping) and isinstance(validated, Mapping):
        return given.keys() == validated.keys() and all(
            _same(given[key], validated[key]) for key in given
        )
    if isinstance(given, list) and isinstance(validated, list):
        return len(given) == len(validated) and all(
            _same(one, other) for one, other in zip(given, validated, strict=True)
        )
    if isinstance(given, (int, float)) and isinstance(validated, (int, float)):
        return given == validated
    if isinstance(validated, enum.Enum):
        # google-genai's enums read their names in any case ("string" is Type.STRING)
        return isinstance(given, str) and given.upper() == str(validated.value).upper()
    return type(given) is type(validated) and bool(given == validated)


def _base64(text: str) -> bytes | None:
    """The bytes of standard or URL-safe base64 text, or None."""
    try:
        return base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return None


def _errors(error: ValidationError, checker: _Checker, value: Any) -> list[str]:
    """pydantic's errors, locations and kinds only (never the input values); for a union,
    those of the member that came closest: it knows the value's keys, its `type` and
    `role` fit, it has the fewest errors."""
    by_member: dict[str, list[str]] = {}
    for each in error.errors(include_input=False, include_url=False):
        loc = tuple(str(step) for step in each["loc"])
        member = loc[0] if loc and loc[0][:1].isupper() else ""
        inner = loc[1:] if member else loc
        by_member.setdefault(member, []).append(
            f"{'.'.join(inner) or '(value)'}: {each['type']} ({each['msg']})"
        )

    def distance(member: str) -> tuple[int, bool, int]:
        lines = by_member[member]
        keys = checker.members.get(member)
        unknown = len(set(value) - keys) if keys is not None and isinstance(value, Mapping) else 0
        tagged = any(line.split(":")[0] in {"type", "role"} for line in lines)
        return unknown, tagged, len(lines)

    closest = min(by_member, key=distance)
    lines = by_member[closest]
    return [f"as {closest}: {line}" if closest else line for line in lines]


def _without(body: Mapping[str, Any], exempt: Collection[Path]) -> dict[str, Any]:
    """A copy of `body` without the exempt parts (list items removed, keys deleted)."""
    copied: dict[str, Any] = copy.deepcopy(dict(body))
    for path in sorted(
        exempt,
        key=lambda p: [str(s) if isinstance(s, str) else f"{s:09d}" for s in p],
        reverse=True,
    ):
        holder: Any = copied
        for step in path[:-1]:
            holder = holder[step]
        del holder[path[-1]]
    return copied


def _dotted(path: Path) -> str:
    text = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path)
    return text.removeprefix(".")


def _listed(problems: Sequence[str]) -> str:
    shown = [f"  {problem}" for problem in problems[:_MAX_PROBLEMS]]
    if len(problems) > _MAX_PROBLEMS:
        shown.append(f"  … and {len(problems) - _MAX_PROBLEMS} more")
    return "\n".join(shown)
