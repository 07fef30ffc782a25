"""The wording every reader shares: timestamps, hosted activity lines and outcomes, hosted
spend, usage counters, notices, source lines and citation markers, so one conversation
reads alike in `show`, in the Markdown export, in the audit and while `ask` streams.

The helpers take plain values (a name, an input dict, a state, a summary) or structural
types (`SourceLike`, `CitationLike`, `UsageLike`, `NoticeLike`): the domain's events and
the portable reading both fit. Stored strings come out flattened to one line
(`render.one_line`, which also makes controls visible) and shortened where a line could
grow without bound; each caller then renders them for its output (sanitized on a
terminal, escaped in Markdown).

The activity wording, in one form for every provider: `⚒ web search: "kyoto ryokan" →
3 results`, `⚒ web search: "q" → failed: max_uses_exceeded`, `⚒ web search (no query
recorded) → 3 results`, `⚒ web fetch: https://… → fetched`, `⚒ code execution (python)
→ exit 0` (the code and its output are blocks of their own). The adapters' summaries,
as every version recorded them, are read into that form by `activity_outcome`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, Protocol, TypeAlias

from convstore.adapters.terminal.render import one_line, shorten, to_json

ACTIVITY_MARK: Final = "⚒"
"""What opens a hosted activity's line."""
OUTCOME_ARROW: Final = "→"
"""What joins an activity's line to its outcome."""


def when(moment: datetime) -> str:
    """A timestamp as people read it, in UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """`1 search`, `2 searches`: a count with its noun."""
    return f"{n} {singular if n == 1 else (plural or singular + 's')}"


# --- hosted activities -----------------------------------------------------------------------

CODE_INPUTS: Final[Mapping[str, tuple[str, str]]] = {
    "code_execution": ("code", ""),
    "code_interpreter": ("code", "python"),
    "bash_code_execution": ("command", "bash"),
}
"""Activity name → (the input field holding the code it ran, the language when the input
names none): Anthropic's and Gemini's `code_execution`, OpenAI's `code_interpreter`,
Anthropic's `bash_code_execution`."""

_UNRECORDED: Final[Mapping[str, str]] = {
    "web_search": "no query recorded",
    "web_fetch": "no URL recorded",
    "url_context": "no URL recorded",
}
"""What a label says of an activity recorded without its input (its call was in an
earlier response, or the provider reported only the result)."""


def _strings(value: Any) -> list[str] | None:
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    return None


def _quoted(values: Iterable[str], width: int = 200) -> str:
    return shorten(", ".join(f'"{v}"' for v in values), width)


def code_of(name: str, input: Mapping[str, Any]) -> tuple[str, str] | None:
    """(code, language) a hosted code run was given, from its input; None for an activity
    that runs no code, or one whose code was not recorded."""
    known = CODE_INPUTS.get(name)
    if known is None:
        return None
    field, default = known
    code, language = input.get(field), input.get("language")
    if not isinstance(code, str) or not code:
        return None
    return code, (language.lower() if isinstance(language, str) and language else default)


def activity_label(name: str, input: Mapping[str, Any]) -> str:
    """`web search: "query"`: a hosted activity's name and what it was asked, one line (a
    code run's code is not in it: see `code_of`)."""
    label = one_line(name).replace("_", " ")
    query, queries, url = input.get("query"), _strings(input.get("queries")), input.get("url")
    if isinstance(query, str) and query:
        return f"{label}: {_quoted([query])}"
    if queries is not None:
        return f"{label}: {_quoted(queries)}"
    if name in CODE_INPUTS:
        code = code_of(name, input)
        if code is None:
            return f"{label} (no code recorded)"
        language = one_line(code[1])
        return f"{label} ({language})" if language and language not in label else label
    if isinstance(url, str) and url:
        pattern = input.get("pattern")
        if isinstance(pattern, str) and pattern:
            return f"{label}: find {_quoted([pattern], 100)} in {shorten(url, 200)}"
        verb = "open " if name == "web_search" else ""  # OpenAI's `open_page` action
        return f"{label}: {verb}{shorten(url, 200)}"
    urls = _strings(input.get("urls"))
    if urls is not None:
        return f"{label}: {shorten(', '.join(urls), 200)}"
    command, path = input.get("command"), input.get("path")
    if isinstance(command, str) and isinstance(path, str):  # Anthropic's text editor
        return f"{label}: {shorten(command, 40)} {shorten(path, 200)}"
    if not input:
        return f"{label} ({_UNRECORDED.get(name, 'no input recorded')})"
    return f"{label}: {shorten(to_json(dict(input)), 200)}"


_COUNTS: Final = (
    re.compile(r"(\d+) (?:result|source)s?"),  # Anthropic's `3 results`, Gemini's `3 sources`
    re.compile(r"searched .*\((\d+) sources?\)"),  # OpenAI's, with `action.sources` included
)
_WORDS: Final = (
    re.compile(r"(searched)(?: .*)?"),  # OpenAI's, without sources: no count recorded
    re.compile(r"(opened|found|fetched) .*"),  # the address is in the activity's line
)


def _completed(summary: str) -> str:
    for pattern in _COUNTS:
        match = pattern.fullmatch(summary)
        if match:
            return counted(int(match.group(1)), "result")
    for pattern in _WORDS:
        match = pattern.fullmatch(summary)
        if match:
            return "done" if match.group(1) == "searched" else match.group(1)
    return shorten(summary, 200) if summary else "done"


def activity_outcome(state: str, summary: str = "", response_state: str | None = None) -> str:
    """`3 results`, `failed: max_uses_exceeded`, `exit 0`: how a hosted activity ended, from
    its newest state and summary. Still `started`, it is `pending` when the response that
    reported it completed (a continuation carries it on), `interrupted` when that response
    failed or was abandoned, else `unfinished`."""
    if state == "completed":
        return _completed(summary)
    if state == "started":
        if response_state == "completed":
            return "pending"
        return "interrupted" if response_state in ("failed", "abandoned") else "unfinished"
    shown = one_line(state)
    detail = shorten(summary, 200).removeprefix(f"{shown}: ")  # Gemini's `failed: <line>`
    return f"{shown}: {detail}" if detail and detail != shown else shown


def activity_line(
    name: str,
    input: Mapping[str, Any],
    state: str | None = None,
    summary: str = "",
    response_state: str | None = None,
) -> str:
    """`⚒ web search: "query"`, and with a state, its outcome: `⚒ web search: "query" →
    3 results` (one line; unsanitized)."""
    line = f"{ACTIVITY_MARK} {activity_label(name, input)}"
    if state is None:
        return line
    return f"{line} {OUTCOME_ARROW} {activity_outcome(state, summary, response_state)}"


# --- hosted spend ----------------------------------------------------------------------------

SPEND_NOUNS: Final[Mapping[str, tuple[str, str]]] = {
    "web_search": ("search", "searches"),
    "web_fetch": ("fetch", "fetches"),
    "url_context": ("URL fetch", "URL fetches"),
    "code_execution": ("code run", "code runs"),
    "code_interpreter": ("code run", "code runs"),
    "bash_code_execution": ("code run", "code runs"),
    "text_editor_code_execution": ("file operation", "file operations"),
    "file_search": ("file search", "file searches"),
    "image_generation": ("image", "images"),
    "tool_search_tool_regex": ("tool search", "tool searches"),
    "tool_search_tool_bm25": ("tool search", "tool searches"),
}
"""Activity name → the noun its count is given in."""


def spend_noun(name: str, input: Mapping[str, Any]) -> tuple[str, str]:
    """(singular, plural) of what one activity counts as: a `web_search` that opened or
    searched a page (a URL, no query: OpenAI's `open_page` and `find`) is a page visit;
    MCP calls are MCP calls; other unknown names are `<name> call`s."""
    if name == "web_search" and "url" in input and not ("query" in input or "queries" in input):
        return "page visit", "page visits"
    if name in SPEND_NOUNS:
        return SPEND_NOUNS[name]
    if name.startswith("mcp:"):
        return "MCP call", "MCP calls"
    label = one_line(name).replace("_", " ")
    return f"{label} call", f"{label} calls"


Spent: TypeAlias = tuple[str, Mapping[str, Any]] | tuple[str, Mapping[str, Any], str]
"""One activity as `hosted_spend` counts it: (name, input), or (name, input, newest state)."""


def hosted_spend(activities: Iterable[Spent]) -> list[str]:
    """`2 searches (1 failed)`, `1 code run`: the hosted work of the activities, counted by
    what they are (`spend_noun`), in the order first met; failures are counted where the
    state is given."""
    tally: dict[tuple[str, str], list[int]] = {}
    for activity in activities:
        name, input = activity[0], activity[1]
        counts = tally.setdefault(spend_noun(name, input), [0, 0])
        counts[0] += 1
        counts[1] += len(activity) == 3 and activity[2] == "failed"
    return [
        counted(n, *noun) + (f" ({failed} failed)" if failed else "")
        for noun, (n, failed) in tally.items()
    ]


# --- usage and the end of a turn -------------------------------------------------------------


class UsageLike(Protocol):
    """A response's usage counters (domain `Usage`, portable `UsageInfo`)."""

    @property
    def input_tokens(self) -> int | None: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def cache_read_tokens(self) -> int | None: ...
    @property
    def cache_write_tokens(self) -> int | None: ...
    @property
    def reasoning_tokens(self) -> int | None: ...
    @property
    def hosted(self) -> Mapping[str, int]: ...


def usage_counters(
    usage: UsageLike, name: Callable[[str], str] = one_line, *, hosted: bool = True
) -> list[str]:
    """`in 12`, `out 40`, `cache read 3`, …: each counter `usage` has, the token counters
    first, then (unless not `hosted`) the hosted ones with their names rendered by `name`."""
    counters = [
        f"{label} {count}"
        for label, count in (
            ("in", usage.input_tokens),
            ("out", usage.output_tokens),
            ("cache read", usage.cache_read_tokens),
            ("cache write", usage.cache_write_tokens),
            ("reasoning", usage.reasoning_tokens),
        )
        if count is not None
    ]
    if hosted:
        counters += [f"{name(counter)} {count}" for counter, count in usage.hosted.items()]
    return counters


def tokens(usage: UsageLike | None) -> str:
    """`tokens in 12, out 40, cache read 3`: the token counters, no hosted ones ("" when
    none was reported)."""
    shown = usage_counters(usage, hosted=False) if usage is not None else []
    return f"tokens {', '.join(shown)}" if shown else ""


def end_line(spend: Iterable[str], usage: UsageLike | None, stop_reason: str | None) -> str:
    """`2 searches · tokens in 12, out 40 · end_turn`: what a turn spent and how it stopped,
    on one line (`no hosted work` when it ran none)."""
    parts = [", ".join(spend) or "no hosted work", tokens(usage)]
    if stop_reason:
        parts.append(one_line(stop_reason))
    return " · ".join(part for part in parts if part)


# --- notices ---------------------------------------------------------------------------------


class NoticeLike(Protocol):
    """A notice (domain `Notice`, portable `NoticeInfo`)."""

    @property
    def kind(self) -> str: ...
    @property
    def code(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def details(self) -> Mapping[str, str]: ...


_RATING: Final = ("probability", "severity")


def _rating(notice: NoticeLike) -> str:
    shown = [one_line(notice.code) or "(no category)"]
    shown += [one_line(notice.details[key]) for key in _RATING if notice.details.get(key)]
    if notice.details.get("blocked") == "true":
        shown.append("BLOCKED")
    return " ".join(shown)


def notice_line(notice: NoticeLike) -> str:
    """`refusal cyber: <explanation> (recommended_model: …)`: one notice on one line."""
    line = one_line(notice.kind).replace("_", " ")
    if notice.code:
        code = one_line(notice.code)
        line += f' "{code}"' if notice.kind == "stop_sequence" else f" {code}"
    if notice.message:
        line += f": {shorten(notice.message, 500)}"
    details = [f"{one_line(k)}: {shorten(v, 200)}" for k, v in notice.details.items()]
    if details:
        line += f" ({', '.join(details)})"
    return line


def notice_lines(notices: Iterable[NoticeLike]) -> list[str]:
    """One line per notice, each side's safety ratings together on one line, where the
    first of them stood (`safety ratings of the response: HARM_CATEGORY_HATE_SPEECH
    NEGLIGIBLE, …`)."""
    order: list[tuple[str, str]] = []  # ("line", text) or ("safety", subject)
    ratings: dict[str, list[str]] = {}
    for notice in notices:
        if notice.kind != "safety":
            order.append(("line", notice_line(notice)))
            continue
        subject = one_line(notice.details.get("subject") or "response")
        if subject not in ratings:
            ratings[subject] = []
            order.append(("safety", subject))
        ratings[subject].append(_rating(notice))
    return [
        f"safety ratings of the {value}: {', '.join(ratings[value])}" if what == "safety" else value
        for what, value in order
    ]


# --- sources and citation markers ------------------------------------------------------------


class LocationLike(Protocol):
    """A cited location (domain `Location`, portable `CitedLocation`)."""

    @property
    def unit(self) -> str: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def document_index(self) -> int | None: ...


class SourceLike(Protocol):
    """A cited source (domain `Source`, portable `CitedSource`)."""

    @property
    def kind(self) -> str: ...
    @property
    def url(self) -> str | None: ...
    @property
    def title(self) -> str | None: ...
    @property
    def id(self) -> str | None: ...
    @property
    def location(self) -> LocationLike | None: ...


class SpanLike(Protocol):
    """A cited span (domain `TextRange`, portable `Span`)."""

    @property
    def end(self) -> int: ...


class CitationLike(Protocol):
    """A citation (domain `Attribution`, portable `Citation`)."""

    @property
    def source(self) -> SourceLike: ...
    @property
    def range(self) -> SpanLike | None: ...


def location_words(location: LocationLike | None) -> str:
    """`(pages 1-2 of document 0)`: where in a document a citation points ("" if nowhere)."""
    if location is None:
        return ""
    words = f"({location.unit}s {location.start}-{location.end}"
    if location.document_index is not None:
        words += f" of document {location.document_index}"
    return words + ")"


def source_line(
    n: int,
    source: SourceLike,
    *,
    text: Callable[[str], str] = one_line,
    url: Callable[[str], str] | None = None,
) -> str:
    """`[n] kind: title — url (location)`; `text` renders stored strings, `url` the URL."""
    kind = "" if source.kind == "web" else f"{source.kind.replace('_', ' ')}: "
    line = f"[{n}] {kind}{text(source.title or '') or '(untitled)'}"
    if source.url:
        line += f" — {(url or text)(source.url)}"
    elif source.id:
        line += f" — {text(source.id)}"
    where = location_words(source.location)
    return f"{line} {where}" if where else line


def citation_marks(
    texts: Iterable[tuple[str, Iterable[CitationLike]]], number: Callable[[Any], int]
) -> list[tuple[str, list[int]]]:
    """The texts joined and cut after each cited span (its range's end, else the text's
    end): (text, the markers `[n]` that follow it) pieces; `number` numbers a source."""
    parts: list[str] = []
    marks: dict[int, list[int]] = {}
    offset = 0
    for text, citations in texts:
        for citation in citations:
            span = citation.range
            end = span.end if span is not None else len(text.rstrip())
            at = offset + min(max(end, 0), len(text))
            n = number(citation.source)
            if n not in marks.setdefault(at, []):
                marks[at].append(n)
        parts.append(text)
        offset += len(text)
    whole = "".join(parts)
    pieces: list[tuple[str, list[int]]] = []
    start = 0
    for at in sorted(marks):
        pieces.append((whole[start:at], sorted(marks[at])))
        start = at
    if start < len(whole) or not pieces:
        pieces.append((whole[start:], []))
    return pieces


def forgotten_line(conversation_id: object, on: datetime) -> str:
    """`conversation ID was forgotten on DATE`: all any reading says of a forgotten one."""
    return f"conversation {conversation_id} was forgotten on {on:%Y-%m-%d}"
