"""The providers' official SDKs as test oracles for convstore's readings.

A capture's bytes are read twice: by convstore (the provider adapter's `decode`, recorded
in a store, folded by `portable.fold`) and by the provider's SDK (`sdk_readers`), and
both readings are put in one comparable shape, `Reading`. `differences` lists every field
where they disagree, one readable line each. What is compared: text blocks; citations
(source, title, and the text the provider's offsets point at); client tool calls (id,
name, arguments); hosted activities (id, name, finished or not) and the sources they
list; reasoning (its text and a digest of its opaque value, never the value); the stop
reason; usage counters under the provider's own names; and the error of a failed
response.

Where the SDK offers no id (Gemini calls and code execution) or no arguments worth
comparing, the SDK side holds None and that part is not compared.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import msgspec
import pytest

from convstore.adapters.wire.providers import adapter, read_payload
from convstore.domain import Event, Reasoning
from convstore.projections import portable
from convstore.projections.portable import (
    ActivityItem,
    Citation,
    ReasoningItem,
    ResponseItem,
    TextItem,
    ToolCallItem,
    UsageInfo,
)
from convstore.storage import open_store
from tests.replay_server import EXAMPLES, WIRE, Capture, captures

# --- the shape both readings share ------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Cite:
    """One citation of a text block."""

    block: int
    """The text block's position (Gemini: 0, its text parts being one text)."""
    source: str | None
    """The cited page's URL, or a file's id."""
    title: str | None
    text: str | None
    """The text the provider's offsets point at in the answer (`@N` for a point), or,
    for Anthropic, which gives no answer offsets, the source-side `cited_text`; None when
    the offsets do not fit the text."""


@dataclass(frozen=True)
class Call:
    """A client tool call."""

    id: str | None
    name: str
    arguments: Any = None
    """None on the SDK side: not compared."""


@dataclass(frozen=True)
class Hosted:
    """Provider-run work: a tool use and whether its result arrived."""

    id: str | None
    name: str | None
    """None on the SDK side where it does not say (an MCP result without its use)."""
    finished: bool


@dataclass(frozen=True)
class Consulted:
    """A source a hosted activity consulted, as the provider listed it (cited or not)."""

    activity: str | None
    """The activity's id; None on the SDK side where the provider gives none (Gemini)."""
    url: str | None
    title: str | None


@dataclass(frozen=True)
class Thought:
    """A reasoning item: its readable text and a digest of its opaque value."""

    text: str
    opaque: str | None = None
    """`sha256:<12 hex>/<length>` of the signature or encrypted content; None on the SDK
    side where it is not compared."""


@dataclass
class Reading:
    """What one reader makes of one response."""

    texts: list[str] = field(default_factory=list)
    citations: list[Cite] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    hosted: list[Hosted] = field(default_factory=list)
    sources: list[Consulted] = field(default_factory=list)
    reasoning: list[Thought] = field(default_factory=list)
    stop_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    error: tuple[str, str] | None = None
    """(the provider's error type or code, its message)."""


def digest(value: str | bytes | None) -> str | None:
    """A short fingerprint of an opaque value (never the value itself)."""
    if value is None:
        return None
    data = value.encode() if isinstance(value, str) else value
    return f"sha256:{hashlib.sha256(data).hexdigest()[:12]}/{len(data)}"


def flat_counters(values: Mapping[str, Any], prefix: str = "") -> dict[str, int]:
    """Integer counters of a nested usage object under dotted names (`a.b`); lists of
    `{modality, tokenCount}` (Gemini's details) as `name.MODALITY`."""
    out: dict[str, int] = {}
    for name, value in values.items():
        key = prefix + name
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int):
            out[key] = value
        elif isinstance(value, Mapping):
            out.update(flat_counters(value, key + "."))
        elif isinstance(value, list):
            for detail in value:
                if isinstance(detail, Mapping) and isinstance(detail.get("tokenCount"), int):
                    out[f"{key}.{detail.get('modality')}"] = detail["tokenCount"]
    return out


# --- comparing ----------------------------------------------------------------------------------


def _show(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _wild_call(ours: Call, sdk: Call) -> Call:
    return Call(
        id=None if sdk.id is None else ours.id,
        name=ours.name,
        arguments=None if sdk.arguments is None else ours.arguments,
    )


def _wild_hosted(ours: Hosted, sdk: Hosted) -> Hosted:
    return Hosted(
        id=None if sdk.id is None else ours.id,
        name=None if sdk.name is None else ours.name,
        finished=ours.finished,
    )


def _wild_thought(ours: Thought, sdk: Thought) -> Thought:
    return Thought(text=ours.text, opaque=None if sdk.opaque is None else ours.opaque)


def _wild_source(ours: Consulted, sdk: Consulted) -> Consulted:
    return Consulted(None if sdk.activity is None else ours.activity, ours.url, ours.title)


_WILDCARDS: Mapping[str, Any] = {
    "calls": _wild_call,
    "hosted": _wild_hosted,
    "sources": _wild_source,
    "reasoning": _wild_thought,
}


def _list_differences(name: str, ours: Sequence[Any], sdk: Sequence[Any]) -> Iterator[str]:
    wildcard = _WILDCARDS.get(name)
    if wildcard is not None and len(ours) == len(sdk):
        ours = [wildcard(o, s) for o, s in zip(ours, sdk, strict=True)]
    if list(ours) == list(sdk):
        return
    if len(ours) != len(sdk):
        yield f"{name}: {len(ours)} in ours, {len(sdk)} in the SDK's"
        missing = [s for s in sdk if s not in ours]
        extra = [o for o in ours if o not in sdk]
        for value in missing:
            yield f"  {name}: only the SDK has {_show(value)}"
        for value in extra:
            yield f"  {name}: only ours has {_show(value)}"
        return
    for index, (o, s) in enumerate(zip(ours, sdk, strict=True)):
        if o != s:
            yield f"{name}[{index}]: ours {_show(o)} ≠ SDK {_show(s)}"


def _usage_differences(ours: Mapping[str, int], sdk: Mapping[str, int]) -> Iterator[str]:
    for name in sorted(ours.keys() | sdk.keys()):
        if ours.get(name) != sdk.get(name):
            yield f"usage.{name}: ours {ours.get(name)} ≠ SDK {sdk.get(name)}"


def differences(ours: Reading, sdk: Reading) -> list[str]:
    """Every disagreement between convstore's reading and the SDK's, one line each."""
    found: list[str] = []
    for spec in fields(Reading):
        mine, theirs = getattr(ours, spec.name), getattr(sdk, spec.name)
        if spec.name == "usage":
            found.extend(_usage_differences(mine, theirs))
        elif isinstance(mine, list):
            found.extend(_list_differences(spec.name, mine, theirs))
        elif mine != theirs:
            found.append(f"{spec.name}: ours {_show(mine)} ≠ SDK {_show(theirs)}")
    return found


# --- convstore's reading --------------------------------------------------------------------------

PORTABLE_USAGE: Mapping[str, Mapping[str, str]] = {
    "anthropic": {
        "input_tokens": "input_tokens",
        "output_tokens": "output_tokens",
        "cache_read_tokens": "cache_read_input_tokens",
        "cache_write_tokens": "cache_creation_input_tokens",
        "reasoning_tokens": "output_tokens_details.thinking_tokens",
    },
    "openai": {
        "input_tokens": "input_tokens",
        "output_tokens": "output_tokens",
        "cache_read_tokens": "input_tokens_details.cached_tokens",
        "cache_write_tokens": "input_tokens_details.cache_write_tokens",
        "reasoning_tokens": "output_tokens_details.reasoning_tokens",
    },
    "openai-chat": {
        "input_tokens": "prompt_tokens",
        "output_tokens": "completion_tokens",
        "cache_read_tokens": "prompt_tokens_details.cached_tokens",
        "cache_write_tokens": "prompt_tokens_details.cache_write_tokens",
        "reasoning_tokens": "completion_tokens_details.reasoning_tokens",
    },
    "google": {
        "input_tokens": "promptTokenCount",
        "output_tokens": "candidatesTokenCount",
        "cache_read_tokens": "cachedContentTokenCount",
        "reasoning_tokens": "thoughtsTokenCount",
    },
}
"""The provider's counter behind each portable usage field (the documented meaning)."""

HOSTED_USAGE: Mapping[str, Mapping[str, str]] = {
    "anthropic": {"": "server_tool_use."},
    "openai": {"web_search_requests": "tool_usage.web_search.num_requests", "": "tool_usage."},
    "google": {"": ""},
    "openai-chat": {"": ""},
}
"""Where a portable hosted counter comes from: its provider name, or the prefix (key "")."""


def _provider_usage(provider: str, usage: UsageInfo | None) -> dict[str, int]:
    if usage is None:
        return {}
    names = PORTABLE_USAGE[provider]
    portable_fields = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    out = {
        names.get(name, f"(portable {name}: no such {provider} counter)"): value
        for name in (*portable_fields, "reasoning_tokens")
        if (value := getattr(usage, name)) is not None
    }
    hosted = HOSTED_USAGE[provider]
    out.update({hosted.get(name, hosted[""] + name): value for name, value in usage.hosted.items()})
    out.update(usage.other)
    return out


def _opaque(provider: str, event: Reasoning) -> str | None:
    if event.payload is None:
        return None
    value = msgspec.json.decode(event.payload.value)
    if not isinstance(value, dict):
        return None
    key = {"anthropic": "signature" if "signature" in value else "data"}.get(
        provider, "encrypted_content"
    )
    found = value.get(key)
    return digest(found) if isinstance(found, str) else None


def _pointed(provider: str, citation: Citation, text: str) -> str | None:
    if provider == "anthropic":
        return citation.excerpt
    span = citation.range
    if span is None:
        return None
    return f"@{span.start}" if span.start == span.end else text[span.start : span.end]


def _block_citations(provider: str, texts: Sequence[TextItem]) -> list[Cite]:
    return [
        Cite(block, c.source.url or c.source.id, c.source.title, _pointed(provider, c, item.text))
        for block, item in enumerate(texts)
        for c in item.citations
    ]


def _joined_citations(texts: Sequence[TextItem]) -> list[Cite]:
    """Gemini: citations over the text blocks joined, a range cut at a block boundary (one
    support split across two blocks) joined back."""
    whole = "".join(item.text for item in texts)
    starts, offset = set(), 0
    pieces: list[tuple[str | None, str | None, int, int]] = []
    unplaced: list[Cite] = []
    for item in texts:
        starts.add(offset)
        for c in item.citations:
            source = c.source.url or c.source.id
            if c.range is None:
                unplaced.append(Cite(0, source, c.source.title, None))
                continue
            start, end = offset + c.range.start, offset + c.range.end
            joined = next(
                (
                    n
                    for n, p in enumerate(pieces)
                    if p[:2] == (source, c.source.title) and p[3] == start
                ),
                None,
            )
            if joined is not None and start in starts:
                pieces[joined] = (source, c.source.title, pieces[joined][2], end)
            else:
                pieces.append((source, c.source.title, start, end))
        offset += len(item.text)
    placed = [Cite(0, source, title, whole[start:end]) for source, title, start, end in pieces]
    return sorted(placed + unplaced, key=repr)


def recorded(provider: str, capture: Capture) -> list[Event]:
    """The capture's response decoded by convstore and recorded in a fresh store."""
    decode = adapter(provider).decode
    with open_store("sqlite:///:memory:") as store:
        conversation = store.service.start("oracle")
        store.service.ingest(conversation, decode(capture.body, capture.request, capture.status))
        return list(store.service.events(conversation))


def our_reading(provider: str, capture: Capture) -> Reading:
    """convstore's portable reading of the capture's response."""
    events = recorded(provider, capture)
    reading = portable.fold(events, read_payload)
    items = [item for turn in reading.turns for item in turn.items]
    response = next(i for i in items if isinstance(i, ResponseItem) and i.origin == "provider")
    mine = [i for i in items if getattr(i, "response_id", None) == response.id]
    texts = [i for i in mine if isinstance(i, TextItem)]
    thoughts = [i for i in mine if isinstance(i, ReasoningItem)]
    opaque = [_opaque(provider, e) for e in events if isinstance(e, Reasoning)]
    ours = Reading(
        calls=[Call(i.call_id, i.name, i.arguments) for i in mine if isinstance(i, ToolCallItem)],
        hosted=[
            Hosted(i.activity_id, i.name, i.state != "started")
            for i in mine
            if isinstance(i, ActivityItem)
        ],
        sources=[
            Consulted(i.activity_id, s.url, s.title)
            for i in mine
            if isinstance(i, ActivityItem)
            for s in i.sources
        ],
        stop_reason=response.stop_reason,
        usage=_provider_usage(provider, response.usage),
        error=None if response.error is None else (response.error.type, response.error.message),
    )
    if provider == "google":
        whole, thought = "".join(i.text for i in texts), "".join(i.text for i in thoughts)
        ours.texts = [whole] if whole else []
        ours.citations = _joined_citations(texts)
        ours.reasoning = [Thought(thought)] if thought else []
    else:
        ours.texts = [i.text for i in texts]
        ours.citations = _block_citations(provider, texts)
        ours.reasoning = [Thought(i.text, o) for i, o in zip(thoughts, opaque, strict=True)]
    return ours


# --- the captures ---------------------------------------------------------------------------------

MODEL_PATHS = (
    "/v1/messages",
    "/v1/responses",
    ":generateContent",
    ":streamGenerateContent",
    "/chat/completions",
)
"""Paths of model exchanges (the corpus's other exchanges set up files and vector stores)."""

CORPORA: Mapping[str, tuple[tuple[Path, str], ...]] = {
    "anthropic": (
        (EXAMPLES / "anthropic", "examples/anthropic"),
        (WIRE / "anthropic", "wire/anthropic"),
    ),
    "openai": ((EXAMPLES / "openai", "examples/openai"), (WIRE / "openai", "wire/openai")),
    "google": ((EXAMPLES / "google", "examples/google"), (WIRE / "gemini", "wire/gemini")),
    "openai-chat": (
        (EXAMPLES / "openai-chat", "examples/openai-chat"),
        (WIRE / "openai-chat", "wire/openai-chat"),
    ),
}


def model_exchanges() -> list[tuple[str, Capture]]:
    """Every model exchange of the examples and of `../shared/wire` (where present)."""
    found = []
    for provider, corpora in CORPORA.items():
        for root, corpus in corpora:
            if root.is_dir():
                found.extend(
                    (provider, capture)
                    for capture in captures(root, corpus)
                    if not capture.path or capture.path.endswith(MODEL_PATHS)
                )
    return found


def cases() -> list[Any]:
    """Test parameters, one per capture (its name as id), and a skipped stand-in for the
    corpus when `../shared/wire` is absent."""
    found = [pytest.param(p, c, id=c.name) for p, c in model_exchanges()]
    if not WIRE.is_dir():
        reason = f"{WIRE} is absent: no recorded traffic to compare"
        found.append(pytest.param(None, None, id="wire", marks=pytest.mark.skip(reason=reason)))
    return found
