"""What `ask` shows while a response streams: text as it arrives, reasoning dimmed (its
first line only, unless asked for all), a line per hosted activity when it starts and its
outcome when it ends, citation markers in the text with the sources after the answer,
and one closing line per response (hosted spend, tokens, stop reason).

Pieces of text come from the provider's preview (`wire.preview`) before their block
closes; the drafts, when the block closes, show what the preview did not (the rest of a
block, its citations, everything else). Everything goes through the `Renderer`, so it is
sanitized; styling is added on a terminal only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, Protocol

from convstore.adapters.terminal.render import Renderer, one_line, shorten, to_json
from convstore.domain.events import (
    AssistantText,
    Event,
    HostedActivity,
    Reasoning,
    ResponseEnded,
    ToolCallRequested,
)
from convstore.domain.vocabulary import Source
from convstore.projections.wording import (
    OUTCOME_ARROW,
    activity_line,
    activity_outcome,
    code_of,
    hosted_spend,
    source_line,
    usage_counters,
)

__all__ = ["LiveView"]

DIM: Final = "2"
"""The SGR parameter reasoning is shown in."""
CODE_LINES: Final = 8
"""Lines of a code run's code shown under its activity line."""


class Piece(Protocol):
    """A piece of a block still streaming (`wire.preview.Piece`)."""

    @property
    def kind(self) -> str:
        """`text` or `reasoning`."""
        ...

    @property
    def text(self) -> str:
        """What arrived."""
        ...


class LiveView:
    """Renders one `ask` (its responses, one after another) as it streams."""

    def __init__(
        self,
        out: Renderer,
        *,
        err: Renderer | None = None,
        show_reasoning: bool = False,
        quiet: bool = False,
    ):
        self.out = out
        self.err = err
        self.show_reasoning = show_reasoning
        self.quiet = quiet
        self._at_line_start = True
        self._conversation: object = None
        self._reset()

    def _reset(self) -> None:
        self._printed = 0
        """Characters of answer text shown so far in this response (pieces and drafts)."""
        self._drafted = 0
        """Characters of answer text the drafts of this response carried so far."""
        self._reasoning: str | None = None
        """`None` outside reasoning; else `open` (showing) or `cut` (first line shown)."""
        self._sources: dict[Source, int] = {}
        self._activities: dict[str, tuple[str, dict[str, Any], str]] = {}
        self._last_activity: str | None = None
        """The activity whose line was the last one shown, if any."""
        self._after_text = False
        """Whether the last thing shown was answer text (a marker may follow it)."""

    # --- output ----------------------------------------------------------------------------

    def _write(self, text: str, style: str | None = None) -> None:
        if not text:
            return
        if style is None:
            self.out.write(text)
        else:
            self.out.styled(text, style)
        self._at_line_start = text.endswith("\n")
        self._after_text = False
        self.out.flush()

    def _text(self, text: str) -> None:
        self._write(text)
        self._after_text = bool(text)

    def _line(self, text: str, style: str | None = None) -> None:
        """`text` on a line of its own."""
        if not self._at_line_start:
            self._write("\n")
        self._write(text + "\n", style)
        self._last_activity = None

    def _end_reasoning(self) -> None:
        if self._reasoning is not None:
            self._reasoning = None
            if not self._at_line_start:
                self._write("\n")

    # --- what arrives ----------------------------------------------------------------------

    def note(self, text: str) -> None:
        """Something to know before the request goes out: one line on `err` (none: out)."""
        if self.err is not None:
            self.err.line(f"convstore: note: {one_line(text)}")
        elif not self.quiet:
            self._line(f"note: {one_line(text)}")

    def begin(self, conversation_id: object) -> None:
        """The provider answered: say where the answer is recorded (once per `ask`)."""
        if not self.quiet and conversation_id != self._conversation:
            self._line(f"conversation {conversation_id}")
        self._conversation = conversation_id

    def piece(self, piece: Piece) -> None:
        """Show a piece of a block still streaming."""
        if piece.kind == "text":
            self._end_reasoning()
            self._printed += len(piece.text)
            self._text(piece.text)
        elif not self.quiet:
            self._reasoning_text(piece.text)

    def _reasoning_text(self, text: str) -> None:
        if self._reasoning is None:
            if not self._at_line_start:
                self._write("\n")
            self._write("reasoning: ", DIM)
            self._reasoning = "open"
        if self._reasoning == "cut":
            return
        if not self.show_reasoning and "\n" in text.lstrip("\n"):
            first = text.lstrip("\n").split("\n", 1)[0]
            self._write(first + " …\n", DIM)
            self._reasoning = "cut"
            return
        self._write(text, DIM)

    def draft(self, draft: Event) -> None:
        """Show what a closed block, or the response's end, adds (its start adds nothing:
        its first pieces may come before it, as Gemini's first chunk opens it)."""
        if isinstance(draft, AssistantText):
            self._answer(draft)
        elif self.quiet:
            if isinstance(draft, ResponseEnded):
                self._end_answer()
                self._reset()
        elif isinstance(draft, Reasoning):
            self._reasoning_draft(draft)
        elif isinstance(draft, HostedActivity):
            self._activity(draft)
        elif isinstance(draft, ToolCallRequested):
            self._end_reasoning()
            arguments = shorten(to_json(draft.arguments), 200)
            self._line(
                f"→ tool call {one_line(draft.name)} ({one_line(draft.call_id)}): {arguments}"
            )
        elif isinstance(draft, ResponseEnded):
            self._ended(draft)

    def _answer(self, draft: AssistantText) -> None:
        self._end_reasoning()
        self._drafted += len(draft.text)
        missing = self._drafted - self._printed
        if missing > 0:
            self._text(draft.text[len(draft.text) - missing :])
            self._printed = self._drafted
        if self.quiet:
            return
        marks = []
        for attribution in draft.attributions:
            n = self._sources.setdefault(attribution.source, len(self._sources) + 1)
            if f"[{n}]" not in marks:
                marks.append(f"[{n}]")
        if self._after_text:  # where the text it cites ends; elsewhere the sources suffice
            self._write("".join(marks))
            self._after_text = True

    def _reasoning_draft(self, draft: Reasoning) -> None:
        if self._reasoning is not None:  # its pieces were shown
            self._end_reasoning()
        elif draft.text:
            self._reasoning_text(draft.text)
            self._end_reasoning()
        # Reasoning without text (encrypted, or a bare signature) has nothing to show.

    def _activity(self, draft: HostedActivity) -> None:
        self._end_reasoning()
        known = self._activities.get(draft.activity_id)
        name, arguments = (known[0], known[1]) if known is not None else (draft.name, {})
        arguments = arguments or dict(draft.input)
        self._activities[draft.activity_id] = (name, arguments, draft.state)
        if draft.state == "started":
            if known is None or (not known[1] and arguments):
                self._show_activity(draft.activity_id, name, arguments)
            return
        outcome = activity_outcome(draft.state, draft.summary)
        if self._last_activity == draft.activity_id:
            self._line(f"  {OUTCOME_ARROW} {outcome}")
        else:  # another line came between: say whose outcome it is
            self._line(activity_line(name, arguments, draft.state, draft.summary))

    def _show_activity(self, activity_id: str, name: str, arguments: dict[str, Any]) -> None:
        self._line(activity_line(name, arguments))
        code = code_of(name, arguments)
        if code is not None:
            lines = code[0].strip("\n").split("\n")
            for line in lines[:CODE_LINES]:
                self._line(f"    {line}")
            if len(lines) > CODE_LINES:
                self._line(f"    … ({len(lines) - CODE_LINES} more lines)")
        self._last_activity = activity_id

    def _end_answer(self) -> None:
        if not self._at_line_start:
            self._write("\n")

    def _ended(self, end: ResponseEnded) -> None:
        self._end_reasoning()
        self._end_answer()
        for name, arguments, state in self._activities.values():
            if state == "started":  # never finished: say how the response left it
                self._line(activity_line(name, arguments, state, "", end.state))
        if self._sources:
            self._line("")
            self._line("Sources:")
            for source, n in self._sources.items():
                self._line(f"  {source_line(n, source)}")
        self._line(closing_line(end, self._activities.values()))
        self._reset()


def closing_line(end: ResponseEnded, activities: Iterable[tuple[str, dict[str, Any], str]]) -> str:
    """`— 2 searches · tokens in 12, out 40 · end_turn`: what one response spent and why
    it stopped (and how it ended, when not completed)."""
    parts = [", ".join(hosted_spend(activities))]
    if end.usage is not None:
        counters = usage_counters(end.usage, one_line, hosted=False)
        if counters:
            parts.append(f"tokens {', '.join(counters)}")
    if end.stop_reason or end.state == "completed":
        parts.append(one_line(end.stop_reason or end.finish_reason))
    if end.state != "completed":
        why = f" ({one_line(end.end_reason)})" if end.end_reason else ""
        parts.append(f"{end.state}{why}")
    if end.error is not None:
        status = f" (HTTP {end.error.status})" if end.error.status is not None else ""
        parts.append(f"error {one_line(end.error.type)}{status}: {shorten(end.error.message, 200)}")
    return "— " + " · ".join(part for part in parts if part)
