"""The Markdown transcript: the presentation model (`presentation.Transcript`) rendered as
clean CommonMark an auditor can hand on.

At the top, the conversation's chain head and whether it verifies. Each turn carries its
times, its responses (model, response id, stop reason, usage) and its hosted spend; in
it, the user's text, the answers with citation markers `[n]` and a per-answer source
list (`[title](url)` links for http and https only; any other address is shown as text),
one line per hosted activity with its outcome (`⚒ web search: "q" → 3 results`), code
and outputs in fenced blocks, Google's Search Suggestions as a list of links, reasoning
and tool results quoted, and the typed notices of each response.

Stored text is untrusted. It is sanitized first (`render.sanitize`: no control character
or escape sequence reaches the file), then written one of two ways.

The text of messages (the user's, the answers, reasoning, tool results, system prompts,
injected context) is Markdown as the model or the user wrote it (`md_body`), and renders:
headings, emphasis, lists, code spans and fences, tables, block quotes, links to http and
https. It is contained: each such text sits in a block quote of ours (`> `, every line),
so nothing in it can close it or pass for the export's own structure (our `## Turn`
headings, `**User**` labels, bullets are outside any quote); its ATX headings go two
levels down (`#` becomes `###`), and a setext underline is set apart from its line (a
rule or text), so its headings are h3 to h6. And it is inert; made text, each with one
backslash where it would form:

- raw HTML, inline or block (`<` before a letter, `/`, `!` or `?`), and autolinks other
  than `<http(s)://…>`;
- every `]` before `(` or `:` but the one of a one-line `[text](http(s)://…)` link whose
  text holds no bracket, backtick, `<` or backslash: so links to any other scheme and
  link definitions stay text, and with no definition no reference link forms; an image's
  `!` (it shows as its link: a remote image is a tracking pixel);
- a backtick run with no run of its length later on its line, or whose span holds `|` (a
  table cell could split it): no code span crosses a line, so no code span hides what the
  scan has taken for text, or the reverse;
- an entity (`&amp;` reads as stored).

Fenced code blocks pass as they are, when a line scan is sure of them (a fence at most
three spaces in, its lines indented at least as far); when any fence sits where it is
not (in a list item or a quote of the text, four spaces in), no line is taken for code
and all are made inert as text. Prose that forms none of this keeps no backslash
(`6544 * 65464`, `3 < 5`, `AT&T`). Our citation markers `[n]` go where the cited span
ends, but after any code span, link, autolink or code block it ends in; an `(` or `:`
right after one is escaped, and a `!` before one (no marker becomes a link, a definition
or an image). A marker can still land in code the scan does not track (an indented code
block), shown there as text.

Short texts on lines of ours (titles, labels, ids, a source's title) are plain text
(`md_inline`, `md_text`): escaped only where CommonMark would read markup into it:

- anywhere: `` ` ``, `*` and `[` (code spans, emphasis, links and images of any kind,
  link reference definitions); `_` unless inside a word (`snake_case` stays); `<` before a
  letter, `/`, `!` or `?` (raw HTML, autolinks); `&` that would read as an entity; `\\`
  before punctuation or at a line's end;
- at a line's start (after up to three spaces): an ATX heading's `#`, a block quote's
  `>`, a bullet (`-`, `+` then a space), an ordered list's `1.` / `1)`, a `~~~` fence, a
  setext underline or thematic break of `-` or `=`.

Code and outputs of hosted runs go in fences longer than any backtick run they hold. URLs
in link destinations are percent-encoded where CommonMark would end or reinterpret them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Final
from urllib.parse import quote

from convstore.adapters.terminal.render import one_line, sanitize, shorten, to_json
from convstore.projections.portable import SCHEMA, CitedSource, ToolResult
from convstore.projections.presentation import (
    Activity,
    Answer,
    Call,
    Content,
    Part,
    Response,
    Said,
    Thought,
    Transcript,
    TurnView,
    Unknown,
)
from convstore.projections.wording import (
    end_line,
    location_words,
    notice_lines,
    usage_counters,
    when,
)

# --- escaping -------------------------------------------------------------------------------

_INLINE: Final = re.compile(
    r"""
      \\(?=[!-/:-@\[-`{-~]|$)          # a backslash that would escape or break a line
    | [`*\[]                            # code spans, emphasis, links, images, definitions
    | (?<![^\W_])_ | _(?![^\W_])        # an underscore not inside a word
    | <(?=[A-Za-z/!?])                  # raw HTML, autolinks
    | &(?=\#[0-9]{1,7};|\#[xX][0-9a-fA-F]{1,6};|[A-Za-z][A-Za-z0-9]{1,31};)  # entities
    """,
    re.VERBOSE | re.MULTILINE,
)
_BLOCK: Final = re.compile(
    r"""
    ^[ ]{0,3}(?:
        (?P<heading>\#)\#{0,5}(?=[ \t]|$)
      | (?P<quote>>)
      | (?P<bullet>[-+])(?=[ \t]|$)
      | \d{1,9}(?P<ordered>[.)])(?=[ \t]|$)
      | (?P<fence>~)(?=~~)
      | (?P<rule>[-=])(?=(?:[ \t]*(?P=rule))*[ \t]*$)
    )
    """,
    re.VERBOSE,
)
_HEADING_END: Final = re.compile(r"(?<=[ \t])#+[ \t]*$")


def _inline(text: str) -> str:
    return _INLINE.sub(r"\\\g<0>", text)


def _line(line: str) -> str:
    match = _BLOCK.match(line)
    if match is None or match.lastgroup is None:
        return _inline(line)
    at = match.start(match.lastgroup)
    return line[:at] + "\\" + _inline(line[at:])


def md_text(text: str) -> str:
    """Plain stored text (no Markdown of its own) on lines of ours: sanitized, then escaped
    where CommonMark would read markup into it (see the module)."""
    return "\n".join(map(_line, sanitize(text).split("\n")))


def md_inline(text: str, width: int | None = None) -> str:
    """Stored text on one line (cut to `width` characters if given), escaped for a place
    inside a line of ours (never at a line's start)."""
    return _inline(one_line(text) if width is None else shorten(text, width)).strip()


def md_link_text(text: str) -> str:
    """Stored text as a link's text: one line, `]` escaped too."""
    return md_inline(text).replace("]", "\\]")


_SCHEME: Final = re.compile(r"https?://[^/?#\s]", re.IGNORECASE)
_UNSAFE_IN_URL: Final = re.compile(r"[\x00-\x20\x7f<>()\\`\"\[\]]|&(?=[A-Za-z#][A-Za-z0-9]*;)")


def md_url(url: str) -> str | None:
    """A link destination for an http or https URL (its scheme in lowercase, percent-encoded
    where CommonMark would end or reread it); None for any other scheme, which is shown as
    text instead."""
    url = sanitize(url).strip()
    if not _SCHEME.match(url):
        return None
    scheme, rest = url.split(":", 1)
    return scheme.lower() + ":" + _UNSAFE_IN_URL.sub(lambda m: quote(m.group(), safe=""), rest)


def md_link(text: str, url: str) -> str:
    """`[text](url)` for an http or https URL, else the text and the address as text."""
    destination = md_url(url)
    label = md_link_text(text) or md_link_text(url)
    if destination is None:
        return f"{label} — {md_inline(url)}" if text else md_inline(url)
    return f"[{label}]({destination})"


def fenced(content: str, info: str = "") -> list[str]:
    """Lines of a fenced code block holding `content` as it is (sanitized), behind a fence
    of backticks longer than any run inside it."""
    body = sanitize(content).rstrip("\n")
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    lines = body.split("\n") if body else []
    return [fence + re.sub(r"[^A-Za-z0-9_+.-]", "", info)[:40], *lines, fence]


# --- stored Markdown, contained ----------------------------------------------------------------

_FENCE_OPEN: Final = re.compile(r"^( {0,3})(`{3,}(?=[^`]*$)|~{3,})")
_FENCE_ANY: Final = re.compile(r"^(?:[ \t>]|[-*+][ \t]|\d{1,9}[.)][ \t])*(?:`{3}|~{3})")
_ATX: Final = re.compile(
    r"((?: {0,3}(?:> ?|[-*+][ \t]|\d{1,9}[.)][ \t]))* {0,3})(#{1,6})(?=[ \t]|$)"
)
_SETEXT: Final = re.compile(r" {0,3}(?:=+|-+)[ \t]*")
_TICKS: Final = re.compile(r"`+")
_AUTOLINK: Final = re.compile(r"<https?://[^\x00-\x20<>]*>")
_LINK: Final = re.compile(
    r"\[([^\[\]`<\\\n]*)\]\((https?://(?:[^\s()<>\\`]|\([^\s()<>\\`]*\))+)\)", re.IGNORECASE
)
_ENTITY: Final = re.compile(r"&(?:\#[0-9]{1,7}|\#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_PUNCT: Final = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def md_body(segments: Iterable[tuple[str, Iterable[int]]]) -> list[str]:
    """Stored text (pieces, each with the citation markers that follow it) as the lines of
    the Markdown it holds, inert (see the module): sanitized; raw HTML, images, links other
    than http(s) and link definitions left as text; ATX headings two levels down; our
    markers `[n]` after any code span, link or code block they would fall in; a setext
    underline apart from the line above it (a rule or text, never a heading)."""
    text, marks = "", dict[int, list[int]]()
    for piece, numbers in segments:
        text += sanitize(piece)
        marks.setdefault(len(text), []).extend(numbers)
    lines = text.split("\n")
    fences = _fences(lines) or {}
    out: list[str] = []
    pending: list[int] = []
    start = number = 0
    while number < len(lines):
        last = fences.get(number)
        if last is None:
            if _SETEXT.fullmatch(lines[number]) and out and out[-1].strip():
                out.append("")  # an underline would make a heading: a rule or text instead
            out.append(_line_md(lines[number], start, marks, pending))
            start += len(lines[number]) + 1
            number += 1
            continue
        block = lines[number : last + 1]
        stop = start + sum(len(line) + 1 for line in block)
        for offset in [o for o in marks if start <= o < stop]:
            pending.extend(marks.pop(offset))
        out.extend(block)
        if last >= len(lines):  # unclosed: closed here, before our markers
            out.append(_FENCE_OPEN.match(block[0]).group(2))  # type: ignore[union-attr]
        if pending:
            out.append(_markers(pending))
        start, number = stop, last + 1
    if pending:
        out[-1] += _markers(pending)
    return out


def _fences(lines: list[str]) -> dict[int, int] | None:
    """Fenced code blocks as {opening line: closing line} (past the text when unclosed);
    None where a fence sits where a line scan cannot be sure of it (in a list item or a
    quote, indented four or more, or with a line less indented than its opening): then no
    line is taken for code, and all are made inert as text."""
    found: dict[int, int] = {}
    at = 0
    while at < len(lines):
        match = _FENCE_OPEN.match(lines[at])
        if match is None:
            if _FENCE_ANY.match(lines[at]):
                return None
            at += 1
            continue
        indent, run = len(match.group(1)), match.group(2)
        close = re.compile(rf" {{0,3}}{re.escape(run[0])}{{{len(run)},}}[ \t]*")
        end = at + 1
        while end < len(lines) and not close.fullmatch(lines[end]):
            content = lines[end]
            if content.strip() and len(content) - len(content.lstrip(" ")) < indent:
                return None
            end += 1
        found[at] = end
        at = end + 1
    return found


def _closing(line: str, run: re.Match[str]) -> re.Match[str] | None:
    """The backtick run closing the code span `run` opens on `line`, if any."""
    return re.compile(rf"(?<!`){run.group()}(?!`)").search(line, run.end())


def _markers(pending: list[int]) -> str:
    shown = "".join(f"[{n}]" for n in pending)
    pending.clear()
    return shown


def _line_md(
    line: str,
    start: int,
    marks: dict[int, list[int]],
    pending: list[int],
) -> str:
    """One line of stored text outside code blocks (it starts at offset `start` of the
    text), with the markers due in it (see `md_body`)."""
    out: list[str] = []
    at = 0
    heading = _ATX.match(line)
    if heading:
        out.append(heading.group(1) + "#" * min(6, len(heading.group(2)) + 2))
        at = heading.end()
        for offset in range(start, start + at):  # due before the heading's text
            pending.extend(marks.pop(offset, ()))
    after_marker = False
    while True:
        pending.extend(marks.pop(start + at, ()))
        if pending:
            if out and out[-1] == "!":
                out[-1] = "\\!"  # `![n]` would open an image
            out.append(_markers(pending))
            after_marker = True
        if at >= len(line):
            return "".join(out)
        unit, shown = _unit(line, at)
        for inner in range(start + at + 1, start + at + len(unit)):
            pending.extend(marks.pop(inner, ()))
        if after_marker and shown[0] in "(:":
            shown = "\\" + shown  # `[n](` would be a link, `[n]:` a definition
        out.append(shown)
        after_marker = False
        at += len(unit)


def _unit(line: str, at: int) -> tuple[str, str]:
    """The unit of `line` at `at` (a character, an escape, a code span, an http(s) autolink
    or link) and its Markdown."""
    char, rest = line[at], line[at + 1 : at + 2]
    if char == "\\" and rest in _PUNCT:
        return line[at : at + 2], line[at : at + 2]
    if char == "`":  # a code span closed on its line and holding no `|` (a table cell
        run = _TICKS.match(line, at)  # could split it), else backticks shown as text
        assert run is not None
        closing = _closing(line, run)
        if closing and "|" not in line[at : closing.end()]:
            return line[at : closing.end()], line[at : closing.end()]
        return run.group(), "\\`" * len(run.group())
    if char == "<":
        autolink = _AUTOLINK.match(line, at)
        if autolink:
            return autolink.group(), autolink.group()
        return char, "\\<" if re.match(r"[A-Za-z/!?]", rest) else char
    if char == "!" and _LINK.match(line, at + 1):
        return char, "\\!"  # an image: shown as its link
    link = _LINK.match(line, at) if char == "[" else None
    destination = md_url(link.group(2)) if link else None
    if link and destination:
        return link.group(), f"[{link.group(1)}]({destination})"
    if char == "]" and rest in ("(", ":"):
        return char, "\\]"  # no other inline link, no definition (so no reference link)
    entity = _ENTITY.match(line, at) if char == "&" else None
    if entity:
        return entity.group(), "\\" + entity.group()
    return char, char


# --- the document ---------------------------------------------------------------------------


def markdown(transcript: Transcript) -> Iterator[str]:
    """The transcript as Markdown, line by line (inert; see the module)."""
    title = _HEADING_END.sub(r"\\\g<0>", md_inline(transcript.title))  # no closing `#`s
    yield f"# {title or '(untitled)'}"
    yield ""
    yield f"- conversation: {transcript.id}"
    if transcript.created is not None:
        yield f"- started: {when(transcript.created)}"
    if transcript.labels:
        yield f"- labels: {', '.join(md_inline(label) for label in transcript.labels)}"
    yield from _chain(transcript)
    yield f"- schema: {SCHEMA}, as of event {transcript.version}"
    for turn in transcript.turns:
        yield from _turn(turn)


def _chain(transcript: Transcript) -> Iterator[str]:
    chain = transcript.chain
    if chain is None:
        return
    head = f"`{chain.head}`" if chain.head else "(none)"
    if chain.intact:
        yield f"- chain: head {head} at version {chain.version}, verified intact"
        return
    yield (
        f"- chain: head {head} at version {chain.version}, **does not verify**: it breaks at"
        f" version {chain.first_bad_version}; what follows is what is stored"
    )
    for problem in chain.problems:
        where = "whole conversation" if problem.version is None else f"version {problem.version}"
        yield f"  - {problem.conversation_id} {where}: {md_inline(problem.problem)}"


def _turn(turn: TurnView) -> Iterator[str]:
    yield ""
    if turn.id is None:
        yield "## Outside a turn"
    else:
        trigger = f" · {md_inline(turn.trigger)}" if turn.trigger else ""
        yield f"## Turn {md_inline(turn.id)}{trigger}"
    yield ""
    if turn.started is not None:
        ended = f", ended {when(turn.ended)}" if turn.ended is not None else ""
        yield f"- time: {when(turn.started)}{ended}"
    for response in turn.responses:
        yield f"- response {md_inline(response.id)}: {_response_facts(response)}"
    yield f"- hosted spend: {md_inline(', '.join(turn.spend)) or 'none'}"
    for part in turn.parts:
        yield from _part(part)
    if turn.state is not None:
        reason = f": {md_inline(turn.reason)}" if turn.reason else ""
        summary = end_line(turn.spend, turn.usage, turn.stop_reason)
        yield ""
        yield f"*Turn ended: {turn.state}{reason} · {md_inline(summary)}*"


def _response_facts(response: Response) -> str:
    facts = [md_inline(f"{response.provider} {response.model}".strip()) or "(no provider)"]
    if response.origin == "request":
        facts.append("from request history")
    if response.state is None:
        facts.append("still open")
    else:
        stop = md_inline(response.finish_reason or "other")
        if response.stop_reason and response.stop_reason != response.finish_reason:
            stop += f" ({md_inline(response.stop_reason)})"
        facts.append(f"{response.state}, {stop}")
    counters = usage_counters(response.usage, md_inline) if response.usage is not None else []
    if counters:
        facts.append(f"tokens {', '.join(counters)}")
    return " · ".join(facts)


def _part(part: Part) -> Iterator[str]:
    if isinstance(part, Said):
        yield ""
        if part.role == "user":
            yield "**User**"
            yield ""
            if part.text.strip():
                yield from _contained(md_body([(part.text, ())]))
            else:
                yield "*(no text)*"
        else:
            yield from _quote(f"Context ({md_inline(part.source)})", part.text)
    elif isinstance(part, Response):
        yield from _response(part)
    else:
        yield from _content(part)


def _response(response: Response) -> Iterator[str]:
    yield ""
    line = f"**Assistant** · {md_inline(response.provider)}"
    if response.model:
        line += f" {md_inline(response.model)}"
    line += f" · response {md_inline(response.id)}"
    if response.started is not None:
        line += f" · {when(response.started)}"
    tools = [
        f"{md_inline(tool.name)} (hosted)" if tool.hosted else md_inline(tool.name)
        for tool in response.tools
    ]
    if tools:
        line += f" · tools: {', '.join(tools)}"
    yield line
    if response.system:
        yield ""
        yield from _quote("System prompt", response.system)
    for content in response.content:
        yield from _content(content)
    yield ""
    if response.state is None:
        yield "*Response still open.*"
    else:
        why = f" ({md_inline(response.end_reason)})" if response.end_reason else ""
        stop = md_inline(response.finish_reason or "other")
        line = f"Response {response.state}{why} · {stop}"
        if response.stop_reason and response.stop_reason != response.finish_reason:
            line += f" (provider: {md_inline(response.stop_reason)})"
        error = response.error
        if error is not None:
            status = f" (HTTP {error.status})" if error.status is not None else ""
            line += f" · error {md_inline(error.type)}{status}: {md_inline(error.message, 300)}"
        yield f"*{line}*"
    notices = notice_lines(response.notices)
    if notices:
        yield ""
        yield from (f"- {md_inline(notice)}" for notice in notices)


def _content(content: Content) -> Iterator[str]:
    if isinstance(content, Answer):
        yield from _answer(content)
    elif isinstance(content, Thought):
        yield ""
        if content.redacted:
            yield "*Reasoning: redacted*"
        else:
            yield from _quote("Reasoning", content.text or "(no text)")
    elif isinstance(content, Activity):
        yield from _activity(content)
    elif isinstance(content, Call):
        yield from _call(content)
    elif isinstance(content, Unknown):
        yield ""
        provider, form = md_inline(content.provider), md_inline(content.format)
        yield f"- unknown {provider} artifact: {form}, {content.size} bytes (kept, not shown)"


def _quote(label: str, text: str, indent: str = "") -> Iterator[str]:
    yield f"{indent}> **{label}**"
    yield f"{indent}>"
    yield from _contained(md_body([(text, ())]), indent)


def _contained(lines: Iterable[str], indent: str = "") -> Iterator[str]:
    """Lines of stored Markdown inside a block quote of ours."""
    for line in lines:
        yield f"{indent}> {line}" if line.strip() else f"{indent}>"


def _answer(answer: Answer) -> Iterator[str]:
    yield ""
    if answer.text.strip():
        lines = md_body((segment.text, segment.marks) for segment in answer.segments)
        while not lines[0].strip():  # the text has some
            del lines[0]
        while not lines[-1].strip():
            del lines[-1]
        yield from _contained(lines)
    else:
        yield "*(no text)*"
    if answer.sources:
        yield ""
        yield "Sources:"
        yield ""
        for ref in answer.sources:
            yield f"- [{ref.number}] {_source(ref.source)}"
            if ref.excerpt and ref.excerpt.strip():
                yield f"  “{md_inline(ref.excerpt.strip(), 200)}”"
    if not answer.complete:
        yield ""
        yield "*Citations incomplete: the stream was cut.*"


def _source(source: CitedSource) -> str:
    kind = "" if source.kind == "web" else f"{source.kind.replace('_', ' ')}: "
    title = source.title or ""
    if source.url:
        shown = md_link(title or source.url, source.url)
    else:
        shown = md_inline(title) or "(untitled)"
        if source.id:
            shown += f" — {md_inline(source.id)}"
    where = location_words(source.location)
    return f"{kind}{shown} {where}".rstrip()


def _activity(activity: Activity) -> Iterator[str]:
    yield ""
    yield f"- {md_inline(activity.line)}"
    if activity.code is not None:
        yield ""
        yield from fenced(activity.code, activity.language)
    for output in activity.outputs:
        yield ""
        yield f"Output ({md_inline(output.channel)}):"
        yield ""
        yield from fenced(output.text)
    kind = one_line(activity.display).replace("_", " ")
    if activity.links:
        yield ""
        yield md_text(f"{kind.capitalize()}s:")
        yield ""
        for link in activity.links:
            shown = md_link(link.text, link.url)
            yield f"- {shown}" if shown.startswith("[") else f"- not a web address: {shown}"
    elif activity.display:
        yield ""
        yield f"*Display obligation ({md_inline(kind)}): no links to list; the web viewer shows it*"


def _call(call: Call) -> Iterator[str]:
    yield ""
    arguments = md_inline(to_json(call.arguments), 500)
    yield f"- tool call {md_inline(call.name)} ({md_inline(call.call_id)}): {arguments}"
    yield from _result(call.result)


def _result(result: ToolResult | None) -> Iterator[str]:
    yield ""
    if result is None:
        yield "  *no result*"
        return
    flags = [
        word for word, on in (("error", result.is_error), ("synthetic", result.synthetic)) if on
    ]
    label = f"result ({', '.join(flags)})" if flags else "result"
    yield from _quote(label, result.content or "(empty)", indent="  ")
