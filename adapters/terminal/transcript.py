"""What `show` prints: a conversation's transcript as lines of text.

The transcript is the presentation model (`projections.presentation`: the same one the
Markdown export renders) drawn as lines: one per hosted activity with its outcome
(`⚒ web search: "q" → 3 results`), code and outputs as indented blocks, answers with
their markers and sources, typed notices, each turn's spend, tokens and stop reason.

Pure functions to unsanitized text and plain data; the `Renderer` sanitizes the lines and
`to_json` escapes the data. A ProviderPayload's value is never read here (only its size),
and a Display's content is never shown (only the links of its anchors).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from convstore.adapters.terminal.render import one_line, sanitize, shorten, to_json
from convstore.domain import Event
from convstore.projections.chain import ChainStatus
from convstore.projections.portable import Interpret, fold
from convstore.projections.presentation import (
    Activity,
    Answer,
    Call,
    Content,
    Response,
    Said,
    Thought,
    Transcript,
    TurnView,
    present,
)
from convstore.projections.wording import (
    activity_label,
    end_line,
    notice_lines,
    source_line,
    usage_counters,
    when,
)

__all__ = ["activity_label", "source_line", "when"]  # shared with the exports: one wording


def transcript(events: Iterable[Event], interpret: Interpret | None = None) -> Iterator[str]:
    """Events as readable lines (unsanitized: render them): their portable reading
    (`interpret` types what payloads hold: the adapters' `read_payload`), presented
    (`projections.presentation`); each response from its newest attempt."""
    return transcript_lines(present(fold(events, interpret)))


def transcript_lines(view: Transcript) -> Iterator[str]:
    """A presented conversation as readable lines (unsanitized: render them)."""
    if view.created is not None:
        yield f"conversation {view.id} — {one_line(view.title) or '(untitled)'}"
        labels = f" · labels: {', '.join(one_line(label) for label in view.labels)}"
        yield f"started {when(view.created)}{labels if view.labels else ''}"
    if view.chain is not None:
        yield from _chain(view.chain)
    for turn in view.turns:
        yield from _turn(turn)


def _chain(chain: ChainStatus) -> Iterator[str]:
    head = chain.head or "(none)"
    if chain.intact:
        yield f"chain: intact · head {head} at version {chain.version}"
        return
    yield (
        f"chain: DOES NOT VERIFY · breaks at version {chain.first_bad_version} · shown as"
        f" stored (head {head} at version {chain.version})"
    )
    for problem in chain.problems:
        where = "whole conversation" if problem.version is None else f"version {problem.version}"
        yield f"  {problem.conversation_id} {where}: {shorten(problem.problem, 300)}"


def _turn(turn: TurnView) -> Iterator[str]:
    pad = ""
    if turn.id is not None:
        pad = "  "
        yield ""
        started = f" · {when(turn.started)}" if turn.started is not None else ""
        yield f"turn {one_line(turn.id)} ({turn.trigger}){started}"
    for part in turn.parts:
        if isinstance(part, Said):
            label = "user" if part.role == "user" else f"context ({one_line(part.source)})"
            yield from _block(pad, label, part.text or "[no text]")
        elif isinstance(part, Response):
            yield from _response(pad, part)
        else:
            yield from _content(pad, part)
    if turn.state is not None:
        reason = f": {one_line(turn.reason)}" if turn.reason else ""
        summary = end_line(turn.spend, turn.usage, turn.stop_reason)
        yield f"turn {one_line(turn.id or '')} ended: {turn.state}{reason} · {summary}"


def _block(pad: str, label: str, text: str) -> Iterator[str]:
    first, *rest = sanitize(text).split("\n")
    yield f"{pad}{label}: {first}"
    for line in rest:
        yield f"{pad}  {line}" if line else ""


def _lines(pad: str, text: str) -> Iterator[str]:
    for line in sanitize(text).rstrip("\n").split("\n"):
        yield f"{pad}{line}" if line else ""


def _response(pad: str, response: Response) -> Iterator[str]:
    line = f"{pad}response {one_line(response.id)} · {one_line(response.provider)}"
    if response.model:
        line += f" {one_line(response.model)}"
    if response.started is not None:
        line += f" · {when(response.started)}"
    tools = [
        f"{one_line(tool.name)} (hosted)" if tool.hosted else one_line(tool.name)
        for tool in response.tools
    ]
    if tools:
        line += f" · tools: {', '.join(tools)}"
    if response.origin == "request":
        line += " · from request history"
    yield line
    inner = pad + "  "
    if response.system:
        yield f"{inner}system: {shorten(response.system, 100)}"
    for content in response.content:
        yield from _content(inner, content)
    yield from (f"{inner}{notice}" for notice in notice_lines(response.notices))
    yield _ended(inner, response)


def _ended(pad: str, response: Response) -> str:
    if response.state is None:
        return f"{pad}response still open"
    state = response.state + (f" ({one_line(response.end_reason)})" if response.end_reason else "")
    line = f"{pad}response ended: {state} · {response.finish_reason or 'other'}"
    if response.stop_reason and response.stop_reason != response.finish_reason:
        line += f" (provider: {one_line(response.stop_reason)})"
    counters = usage_counters(response.usage) if response.usage is not None else []
    if counters:
        line += f" · tokens {', '.join(counters)}"
    error = response.error
    if error is not None:
        status = f" (HTTP {error.status})" if error.status is not None else ""
        line += f" · error {one_line(error.type)}{status}: {shorten(error.message, 200)}"
    return line


def _content(pad: str, content: Content) -> Iterator[str]:
    if isinstance(content, Answer):
        yield from _answer(pad, content)
    elif isinstance(content, Thought):
        if content.redacted:
            yield f"{pad}reasoning: [redacted]"
        else:
            yield from _block(pad, "reasoning", content.text or "[no text]")
    elif isinstance(content, Activity):
        yield from _activity(pad, content)
    elif isinstance(content, Call):
        yield from _call(pad, content)
    else:
        yield (
            f"{pad}[unknown {one_line(content.provider)} artifact: "
            f"{one_line(content.format)}, {content.size} bytes]"
        )


def _call(pad: str, call: Call) -> Iterator[str]:
    result, shown = call.result, one_line(call.call_id)
    label = "tool error" if result is not None and result.is_error else "tool result"
    if result is not None and result.synthetic:
        label += " (synthetic)"
    if result is not None and not call.name:  # its call is not among the events shown
        yield from _block(pad, f"{label} for {shown}", result.content or "[empty]")
        return
    arguments = shorten(to_json(call.arguments), 300)
    yield f"{pad}tool call {one_line(call.name)} ({shown}): {arguments}"
    if result is None:
        yield f"{pad}  no result"
    else:
        yield from _block(pad + "  ", label, result.content or "[empty]")


def _answer(pad: str, answer: Answer) -> Iterator[str]:
    text = "".join(s.text + "".join(f"[{n}]" for n in s.marks) for s in answer.segments)
    yield from _block(pad, "assistant", text.strip("\n") or "[no text]")
    for ref in answer.sources:
        yield f"{pad}  {source_line(ref.number, ref.source)}"
        if ref.excerpt:
            yield f"{pad}      “{shorten(ref.excerpt, 100)}”"
    if not answer.complete:
        yield f"{pad}  (citations may be incomplete: the response broke off)"


def _activity(pad: str, activity: Activity) -> Iterator[str]:
    yield f"{pad}{activity.line}"
    if activity.code is not None:
        language = f" ({one_line(activity.language)})" if activity.language else ""
        yield f"{pad}  code{language}:"
        yield from _lines(pad + "    ", activity.code)
    for output in activity.outputs:
        yield f"{pad}  {one_line(output.channel)}:"
        yield from _lines(pad + "    ", output.text)
    kind = one_line(activity.display).replace("_", " ")
    for link in activity.links:
        yield f"{pad}  {kind}: {one_line(link.text)} — {one_line(link.url)}"
    if activity.display and not activity.links:
        yield f"{pad}  [{kind}: no links in it; the web viewer shows it]"
