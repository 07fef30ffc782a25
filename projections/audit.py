"""The audit reading: what a conversation ran, spent and carried, per conversation and turn.

A pure fold of one conversation's events (`audit(events)`, or `AuditFold` event by event)
into a `ConversationAudit`:

- **turns**: trigger, end state, the responses in them, and what each turn spent on hosted
  work (`HostedSpend`: the activities recorded beside the provider's own counters);
- **responses**: id, provider, model, origin, end state, normalized finish reason beside the
  provider's stop reason, usage counters, error;
- **activities**: every hosted activity's lifecycle (each transition with its version),
  flagged when it never finished (`pending` or `interrupted`), failed or was abandoned;
- **tool calls**: client tool calls, flagged `orphaned` (never answered) or `synthetic`
  (answered by a repair);
- **unplaced citations**, per turn: citations kept without a range because the provider's
  offsets did not fit the text (`Attribution.unplaced`), with their source and the reason;
- **payloads**: an inventory of every ProviderPayload (provider, format, version, size in
  bytes): never its value;
- **copies passed over**: attempts cut short that a later attempt completed (the turns,
  responses and spend above read the later one, as every reading does), and copies of a
  provider response the store's index places in another conversation (`copies`);
- **head**: the newest event's hash and version, to anchor elsewhere (`convstore anchor`).
  The audit reads decoded events and reports the hash they claim; `projections.verify`
  checks the chain against the stored bytes, and `chain` holds that check's outcome when
  the caller made it (`chain.chain_status`: the command line always does).

Nothing here reads a payload's value, and no text the conversation holds (messages,
reasoning, tool results) enters the report: only ids, names, states, counters, and the
normalized input of hosted activities (e.g. a search query). Strings in the report are
untrusted: `audit_lines` returns them unsanitized, for the command line's Renderer.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, Final, Literal

import msgspec

from convstore.domain.attempts import Superseded, reading, superseded
from convstore.domain.events import (
    AssistantText,
    Event,
    HostedActivity,
    ResponseEnded,
    ResponseStarted,
    Retitled,
    Started,
    ToolCallRequested,
    ToolCallResponded,
    TurnEnded,
    TurnStarted,
)
from convstore.domain.vocabulary import (
    TERMINAL,
    ActivityId,
    CallId,
    ErrorInfo,
    FinishReason,
    Lifecycle,
    ProviderPayload,
    ResponseId,
    ResponseOrigin,
    SourceKind,
    TurnId,
    TurnTrigger,
    Usage,
)
from convstore.projections.chain import ChainStatus
from convstore.projections.copies import DuplicateCopy, Placed, copy_lines, duplicates
from convstore.projections.wording import usage_counters

AUDIT_SCHEMA: Final = "convstore.audit/1"
"""The report's schema: the name and major version of the shape below. Fields may be added
within a version; a field that is renamed, removed or changes meaning bumps it."""

COUNTER_SUFFIX: Final = "_requests"
"""A provider's hosted counter `X_requests` (e.g. Anthropic's and OpenAI's
`web_search_requests`) counts the activities named `X`; other hosted counters (Gemini's
`toolUsePromptTokenCount`) are reported with the usage but compared with nothing."""

ResponseState = Literal["completed", "failed", "abandoned", "open"]
TurnState = Literal["completed", "failed", "abandoned", "open"]

ActivityFlag = Literal["never_finished", "pending", "interrupted", "failed", "abandoned"]
CallFlag = Literal["orphaned", "synthetic"]
ResponseFlag = Literal["open", "failed", "abandoned"]
SpendFlag = Literal["hosted_count_differs"]


# --- the report ------------------------------------------------------------------------------


class ActivityTransition(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded transition of a hosted activity."""

    version: int
    """The version of the HostedActivity event that recorded it."""
    state: Lifecycle
    response_id: ResponseId | None
    """The response that reported it; None for an explicit abandonment."""


class ActivityAudit(msgspec.Struct, kw_only=True):
    """One hosted activity's lifecycle."""

    activity_id: ActivityId
    name: str
    """A capability name, e.g. `web_search`."""
    provider: str
    """The provider of the response that first reported it ("" if none did)."""
    turn_id: TurnId | None
    """The turn it was first recorded in (None outside any turn)."""
    response_id: ResponseId | None
    """The response that first reported it."""
    state: Lifecycle
    """Its newest state."""
    input: dict[str, Any]
    """Its normalized input (e.g. `{"query": ...}`), as first recorded: model text, untrusted."""
    transitions: list[ActivityTransition]
    """Every transition, oldest first."""
    flags: list[ActivityFlag]
    """`never_finished`: still `started`; then `pending` when the response that last
    reported it completed (hosted work a continuation carries on: a mixed batch, a
    `pause_turn`) or `interrupted` when that response failed, was abandoned or never ended.
    `failed` / `abandoned`: its terminal state."""


class ToolCallAudit(msgspec.Struct, kw_only=True):
    """One client tool call and its answer."""

    call_id: CallId
    name: str
    turn_id: TurnId | None
    response_id: ResponseId
    """The response that requested it."""
    requested_version: int
    responded_version: int | None
    """The version of its ToolCallResponded; None while unanswered."""
    is_error: bool
    synthetic: bool
    """Answered by a repair, not by a tool."""
    flags: list[CallFlag]
    """`orphaned`: requested and never answered; `synthetic`: answered by a repair after an
    interruption."""


class ResponseAudit(msgspec.Struct, kw_only=True):
    """One provider response."""

    response_id: ResponseId
    provider: str
    model: str
    origin: ResponseOrigin
    """`provider`: sent by the provider; `request`: assistant history found in a request."""
    turn_id: TurnId | None
    started_version: int
    ended_version: int | None
    """None while the response is open (its writer died or is still streaming)."""
    state: ResponseState
    finish_reason: FinishReason | None
    """The normalized finish reason; None while open."""
    stop_reason: str | None
    """The provider's own stop reason, verbatim."""
    usage: Usage | None
    """The provider's counters, hosted counters included."""
    error: ErrorInfo | None
    activities: dict[str, int]
    """Hosted activities first reported by this response, by name."""
    flags: list[ResponseFlag]
    """`open`, `failed`, `abandoned`: how it ended, where that is not `completed`."""


class HostedSpend(msgspec.Struct, frozen=True, kw_only=True):
    """What a turn (or the conversation) spent on one kind of hosted work."""

    name: str
    """The activity name, e.g. `web_search`."""
    recorded: int
    """Activities of this name recorded (first reported by a response in the scope)."""
    completed: int
    """Of those, how many completed."""
    requests: int
    """Of those, how many a provider's request counter counts: every one, except that a
    `web_search` activity without a query (`query` or `queries` in its input) is a page
    visit within a search (OpenAI's `open_page` and `find` actions), not a search request."""
    requests_completed: int
    """Of the `requests`, how many completed."""
    counter: str | None
    """The provider counter compared, e.g. `web_search_requests`; None when none reported."""
    reported: int | None
    """The provider counter summed over the responses in scope that reported it."""
    differs: bool
    """True when `reported` lies outside `requests_completed..requests`: an unfinished (or
    failed) activity may or may not have been counted, so either end of the range agrees."""


class UnplacedCitation(msgspec.Struct, frozen=True, kw_only=True):
    """A citation kept without a range: the provider's offsets did not fit its text."""

    event_version: int
    """The version of the AssistantText carrying it."""
    response_id: ResponseId | None
    kind: SourceKind
    url: str | None
    title: str | None
    reason: str
    """Why it has no range, e.g. that the offsets lie outside the text."""


class TurnAudit(msgspec.Struct, kw_only=True):
    """One turn: one user query and every round-trip until the assistant yielded."""

    turn_id: TurnId
    trigger: TurnTrigger
    started_version: int
    ended_version: int | None
    state: TurnState
    reason: str
    responses: list[ResponseId]
    activities: list[ActivityId]
    """Hosted activities first recorded in this turn."""
    tool_calls: list[CallId]
    """Client tool calls requested in this turn."""
    spend: list[HostedSpend]
    """Hosted work by name: recorded activities beside the provider's counters."""
    flags: list[str]
    """Every flag of the turn's parts, named by part, once each, sorted: `response_open`,
    `response_failed`, `response_abandoned`, `activity_never_finished`, `activity_pending`,
    `activity_interrupted`, `activity_failed`, `activity_abandoned`, `tool_call_orphaned`,
    `tool_call_synthetic`, `hosted_count_differs`."""
    unplaced: list[UnplacedCitation] = []
    """Citations of the turn's text kept without a range, in event order."""


class PayloadEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One provider payload's metadata: never its value."""

    event_version: int
    """The version of the event carrying it."""
    event: str
    """The event's type, e.g. `HostedActivity`."""
    field: str
    """Where in the event, e.g. `payload`, `attributions[2].replay`, `settings.native`."""
    provider: str
    format: str
    version: str
    """The payload's wire contract, e.g. `web_search_20250305` ("" when none)."""
    size: int
    """The value's size in bytes, exactly as stored."""


class ChainHead(msgspec.Struct, frozen=True, kw_only=True):
    """The newest event's hash: what an anchor records."""

    hash: str
    version: int


class ConversationAudit(msgspec.Struct, kw_only=True):
    """The audit of one conversation."""

    schema: str
    """`AUDIT_SCHEMA`."""
    conversation_id: str
    title: str
    created: datetime | None
    events: int
    """How many events were folded."""
    head: ChainHead
    """The chain head as the events claim it (`convstore verify` checks it)."""
    turns: list[TurnAudit]
    responses: list[ResponseAudit]
    activities: list[ActivityAudit]
    tool_calls: list[ToolCallAudit]
    payloads: list[PayloadEntry]
    payload_bytes: int
    """The sum of every payload's size."""
    spend: list[HostedSpend]
    """Hosted work over the whole conversation, by name."""
    flags: list[str]
    """Every flag raised anywhere in the conversation, named as in `TurnAudit.flags`."""
    superseded: list[Superseded] = []
    """Attempts cut short that a later attempt of their response completed."""
    duplicates: list[DuplicateCopy] = []
    """Copies of provider responses the store's index places in another conversation."""
    chain: ChainStatus | None = None
    """Whether the stored chain of its events holds (`chain.chain_status`, checked by the
    command line as it reads them); None when not checked."""


# --- the fold --------------------------------------------------------------------------------


class AuditFold:
    """Folds one conversation's events, in version order, into its audit."""

    def __init__(self) -> None:
        self.conversation_id = ""
        self.title = ""
        self.created: datetime | None = None
        self.events = 0
        self.head = ChainHead(hash="", version=0)
        self.turns: dict[TurnId, TurnAudit] = {}
        self.responses: dict[ResponseId, ResponseAudit] = {}
        self.activities: dict[ActivityId, ActivityAudit] = {}
        self.calls: dict[CallId, ToolCallAudit] = {}
        self.payloads: list[PayloadEntry] = []
        self.open_turn: TurnId | None = None
        self.open_response: ResponseId | None = None
        self.superseded: list[Superseded] = []

    def apply(self, event: Event) -> None:
        """Fold one event in."""
        self._count(event)
        self._read(event)

    def apply_all(self, events: Iterable[Event]) -> AuditFold:
        """Fold events in order; returns self. The counts, the head and the payload
        inventory cover every stored event; the turns, responses and spend read each
        response from its newest attempt (`domain.attempts`)."""
        log = list(events)
        for event in log:
            self._count(event)
        for event in reading(log):
            self._read(event)
        self.superseded.extend(superseded(log))
        return self

    def _count(self, event: Event) -> None:
        self.events += 1
        if not self.conversation_id:
            self.conversation_id = str(event.originator_id)
        self.head = ChainHead(hash=event.hash, version=event.originator_version)
        self.payloads.extend(_payloads(event))

    def _read(self, event: Event) -> None:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    # --- handlers -----------------------------------------------------------------------------

    def _started(self, event: Started) -> None:
        self.title = event.title
        self.created = event.timestamp

    def _retitled(self, event: Retitled) -> None:
        self.title = event.title

    def _turn_started(self, event: TurnStarted) -> None:
        self.open_turn = event.turn_id
        self.turns[event.turn_id] = TurnAudit(
            turn_id=event.turn_id,
            trigger=event.trigger,
            started_version=event.originator_version,
            ended_version=None,
            state="open",
            reason="",
            responses=[],
            activities=[],
            tool_calls=[],
            spend=[],
            flags=[],
        )

    def _text(self, event: AssistantText) -> None:
        turn = self.turns.get(self.open_turn) if self.open_turn is not None else None
        if turn is None:
            return
        turn.unplaced.extend(
            UnplacedCitation(
                event_version=event.originator_version,
                response_id=event.response_id,
                kind=a.source.kind,
                url=a.source.url,
                title=a.source.title,
                reason=a.unplaced,
            )
            for a in event.attributions
            if a.unplaced
        )

    def _turn_ended(self, event: TurnEnded) -> None:
        turn = self.turns.get(event.turn_id)
        if turn is not None:
            turn.ended_version = event.originator_version
            turn.state = event.state
            turn.reason = event.reason
        if self.open_turn == event.turn_id:
            self.open_turn = None

    def _open(
        self,
        response_id: ResponseId,
        version: int,
        *,
        provider: str = "",
        model: str = "",
        origin: ResponseOrigin = "provider",
    ) -> ResponseAudit:
        """A response's audit, open from event `version` on, in the open turn."""
        response = self.responses[response_id] = ResponseAudit(
            response_id=response_id,
            provider=provider,
            model=model,
            origin=origin,
            turn_id=self.open_turn,
            started_version=version,
            ended_version=None,
            state="open",
            finish_reason=None,
            stop_reason=None,
            usage=None,
            error=None,
            activities={},
            flags=[],
        )
        return response

    def _response_started(self, event: ResponseStarted) -> None:
        self.open_response = event.response_id
        self._open(
            event.response_id,
            event.originator_version,
            provider=event.provider,
            model=event.model,
            origin=event.origin,
        )
        turn = self.turns.get(self.open_turn) if self.open_turn is not None else None
        if turn is not None:
            turn.responses.append(event.response_id)

    def _response_ended(self, event: ResponseEnded) -> None:
        response = self.responses.get(event.response_id)
        if response is None:  # tolerated: the audit reads what is there
            response = self._open(event.response_id, event.originator_version)
        response.ended_version = event.originator_version
        response.state = event.state
        response.finish_reason = event.finish_reason
        response.stop_reason = event.stop_reason
        response.usage = event.usage
        response.error = event.error
        if self.open_response == event.response_id:
            self.open_response = None

    def _activity(self, event: HostedActivity) -> None:
        transition = ActivityTransition(
            version=event.originator_version, state=event.state, response_id=event.response_id
        )
        activity = self.activities.get(event.activity_id)
        if activity is not None:
            activity.transitions.append(transition)
            activity.state = event.state
            return
        response = self.responses.get(event.response_id) if event.response_id else None
        turn_id = response.turn_id if response is not None else self.open_turn
        self.activities[event.activity_id] = ActivityAudit(
            activity_id=event.activity_id,
            name=event.name,
            provider=response.provider if response is not None else "",
            turn_id=turn_id,
            response_id=event.response_id,
            state=event.state,
            input=event.input,
            transitions=[transition],
            flags=[],
        )
        if response is not None:
            response.activities[event.name] = response.activities.get(event.name, 0) + 1
        turn = self.turns.get(turn_id) if turn_id is not None else None
        if turn is not None:
            turn.activities.append(event.activity_id)

    def _call_requested(self, event: ToolCallRequested) -> None:
        response = self.responses.get(event.response_id)
        turn_id = response.turn_id if response is not None else self.open_turn
        self.calls[event.call_id] = ToolCallAudit(
            call_id=event.call_id,
            name=event.name,
            turn_id=turn_id,
            response_id=event.response_id,
            requested_version=event.originator_version,
            responded_version=None,
            is_error=False,
            synthetic=False,
            flags=[],
        )
        turn = self.turns.get(turn_id) if turn_id is not None else None
        if turn is not None:
            turn.tool_calls.append(event.call_id)

    def _call_responded(self, event: ToolCallResponded) -> None:
        call = self.calls.get(event.call_id)
        if call is None:
            return  # the aggregate refuses this; a tolerant reading skips it
        call.responded_version = event.originator_version
        call.is_error = event.is_error
        call.synthetic = event.synthetic

    # --- the report ---------------------------------------------------------------------------

    def report(self) -> ConversationAudit:
        """The audit of everything folded so far (the fold can go on afterwards)."""
        responses = [_flag_response(r) for r in self.responses.values()]
        activities = [_flag_activity(a, self.responses) for a in self.activities.values()]
        calls = [_flag_call(c) for c in self.calls.values()]
        turns = [self._turn_report(turn) for turn in self.turns.values()]
        spend = _spend(list(self.responses.values()), activities)
        flags = _rollup(responses, activities, calls, spend)
        flags = sorted({*flags, *(flag for turn in turns for flag in turn.flags)})
        if self.superseded:
            flags = sorted({*flags, "response_superseded"})
        return ConversationAudit(
            schema=AUDIT_SCHEMA,
            conversation_id=self.conversation_id,
            title=self.title,
            created=self.created,
            events=self.events,
            head=self.head,
            turns=turns,
            responses=responses,
            activities=activities,
            tool_calls=calls,
            payloads=list(self.payloads),
            payload_bytes=sum(p.size for p in self.payloads),
            spend=spend,
            flags=flags,
            superseded=list(self.superseded),
        )

    def _turn_report(self, turn: TurnAudit) -> TurnAudit:
        responses = [self.responses[r] for r in turn.responses if r in self.responses]
        activities = [self.activities[a] for a in turn.activities if a in self.activities]
        spend = _spend(responses, activities)
        calls = [self.calls[c] for c in turn.tool_calls if c in self.calls]
        flags = _rollup(
            [_flag_response(r) for r in responses],
            [_flag_activity(a, self.responses) for a in activities],
            [_flag_call(c) for c in calls],
            spend,
        )
        return msgspec.structs.replace(
            turn,
            responses=list(turn.responses),
            activities=list(turn.activities),
            tool_calls=list(turn.tool_calls),
            spend=spend,
            flags=flags,
        )


_HANDLERS: Final[dict[type[Event], Any]] = {
    Started: AuditFold._started,
    Retitled: AuditFold._retitled,
    TurnStarted: AuditFold._turn_started,
    TurnEnded: AuditFold._turn_ended,
    AssistantText: AuditFold._text,
    ResponseStarted: AuditFold._response_started,
    ResponseEnded: AuditFold._response_ended,
    HostedActivity: AuditFold._activity,
    ToolCallRequested: AuditFold._call_requested,
    ToolCallResponded: AuditFold._call_responded,
}


def audit(events: Iterable[Event], placed: Placed | None = None) -> ConversationAudit:
    """The audit of one conversation's events, in version order; with `placed` (the
    repository's), it also lists the provider responses stored in another conversation."""
    log = list(events)
    report = AuditFold().apply_all(log).report()
    if placed is not None:
        report.duplicates = duplicates(log, placed)
        if report.duplicates:
            report.flags = sorted({*report.flags, "response_duplicate"})
    return report


# --- flags and spend -------------------------------------------------------------------------


def _rollup(
    responses: list[ResponseAudit],
    activities: list[ActivityAudit],
    calls: list[ToolCallAudit],
    spend: list[HostedSpend],
) -> list[str]:
    """Flags of the parts, named by part: `response_failed`, `activity_pending`, ..."""
    flags = {f"response_{flag}" for response in responses for flag in response.flags}
    flags.update(f"activity_{flag}" for activity in activities for flag in activity.flags)
    flags.update(f"tool_call_{flag}" for call in calls for flag in call.flags)
    if any(s.differs for s in spend):
        flags.add("hosted_count_differs")
    return sorted(flags)


def _flag_response(response: ResponseAudit) -> ResponseAudit:
    flags: list[ResponseFlag] = []
    if response.state == "open":
        flags.append("open")
    elif response.state == "failed":
        flags.append("failed")
    elif response.state == "abandoned":
        flags.append("abandoned")
    return msgspec.structs.replace(response, activities=dict(response.activities), flags=flags)


def _flag_activity(
    activity: ActivityAudit, responses: dict[ResponseId, ResponseAudit]
) -> ActivityAudit:
    flags: list[ActivityFlag] = []
    if activity.state not in TERMINAL:
        flags.append("never_finished")
        last = activity.transitions[-1].response_id
        reporter = responses.get(last) if last is not None else None
        completed = reporter is not None and reporter.state == "completed"
        flags.append("pending" if completed else "interrupted")
    elif activity.state == "failed":
        flags.append("failed")
    elif activity.state == "abandoned":
        flags.append("abandoned")
    return msgspec.structs.replace(activity, transitions=list(activity.transitions), flags=flags)


def _flag_call(call: ToolCallAudit) -> ToolCallAudit:
    flags: list[CallFlag] = []
    if call.responded_version is None:
        flags.append("orphaned")
    elif call.synthetic:
        flags.append("synthetic")
    return msgspec.structs.replace(call, flags=flags)


def _is_request(activity: ActivityAudit) -> bool:
    """Whether a provider's `<name>_requests` counter counts this activity."""
    if activity.name != "web_search":
        return True
    return "query" in activity.input or "queries" in activity.input


def _spend(responses: list[ResponseAudit], activities: list[ActivityAudit]) -> list[HostedSpend]:
    counts: dict[str, list[int]] = {}  # name → [recorded, completed, requests, completed]
    for activity in activities:
        tally = counts.setdefault(activity.name, [0, 0, 0, 0])
        done = activity.state == "completed"
        tally[0] += 1
        tally[1] += done
        if _is_request(activity):
            tally[2] += 1
            tally[3] += done
    reported: dict[str, tuple[str, int]] = {}
    for response in responses:
        if response.usage is None:
            continue
        for key, value in response.usage.hosted.items():
            if key.endswith(COUNTER_SUFFIX) and len(key) > len(COUNTER_SUFFIX):
                name = key[: -len(COUNTER_SUFFIX)]
                _, total = reported.get(name, (key, 0))
                reported[name] = (key, total + value)
    spend: list[HostedSpend] = []
    for name in sorted(counts.keys() | reported.keys()):
        counter: str | None = None
        count: int | None = None
        if name in reported:
            counter, count = reported[name]
        recorded, completed, requests, requests_completed = counts.get(name, [0, 0, 0, 0])
        spend.append(
            HostedSpend(
                name=name,
                recorded=recorded,
                completed=completed,
                requests=requests,
                requests_completed=requests_completed,
                counter=counter,
                reported=count,
                differs=count is not None and not requests_completed <= count <= requests,
            )
        )
    return spend


# --- payloads --------------------------------------------------------------------------------


def _payloads(event: Event) -> Iterator[PayloadEntry]:
    """Every ProviderPayload an event carries, wherever it sits, as metadata."""
    kind = type(event).__name__
    for field, payload in _walk(event, ""):
        yield PayloadEntry(
            event_version=event.originator_version,
            event=kind,
            field=field,
            provider=payload.provider,
            format=payload.format,
            version=payload.version,
            size=len(payload.raw),
        )


def _walk(value: object, path: str) -> Iterator[tuple[str, ProviderPayload]]:
    if isinstance(value, ProviderPayload):
        yield path, value
    elif isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            item = getattr(value, name)
            if isinstance(item, msgspec.Struct | tuple | list):
                yield from _walk(item, f"{path}.{name}" if path else name)
    elif isinstance(value, tuple | list):
        for index, item in enumerate(value):
            if isinstance(item, msgspec.Struct | tuple | list):
                yield from _walk(item, f"{path}[{index}]")


# --- as text ---------------------------------------------------------------------------------


def to_data(report: ConversationAudit) -> Any:
    """The report as plain JSON data (render it with `render.to_json`)."""
    return msgspec.to_builtins(report)


def audit_lines(report: ConversationAudit) -> Iterator[str]:
    """The report as readable lines (unsanitized: the command line's Renderer cleans them)."""
    title = _one(report.title) or "(untitled)"
    yield f"conversation {report.conversation_id} — {title}"
    head = report.head
    yield f"  chain head {head.hash or '(none)'} at version {head.version} ({report.events} events)"
    chain = report.chain
    if chain is not None and chain.intact:
        yield "  chain verified: intact"
    elif chain is not None:
        yield f"  chain DOES NOT VERIFY: it breaks at version {chain.first_bad_version}"
        for problem in chain.problems:
            where = "whole conversation" if problem.version is None else f"v{problem.version}"
            yield f"    {where}: {_one(problem.problem)}"
    if report.flags:
        yield f"  flags: {', '.join(report.flags)}"
    by_turn: dict[TurnId | None, list[ResponseAudit]] = {}
    for response in report.responses:
        by_turn.setdefault(response.turn_id, []).append(response)
    activities: dict[TurnId | None, list[ActivityAudit]] = {}
    for activity in report.activities:
        activities.setdefault(activity.turn_id, []).append(activity)
    for turn in report.turns:
        end = turn.state if turn.ended_version is not None else "open"
        reason = f": {_one(turn.reason)}" if turn.reason else ""
        yield f"  turn {_one(turn.turn_id)} ({turn.trigger}) · {end}{reason}"
        yield from _turn_body(by_turn.get(turn.turn_id, []), activities.get(turn.turn_id, []))
        for spend in turn.spend:
            yield f"    {_spend_line(spend)}"
        for citation in turn.unplaced:
            source = _one(citation.url or citation.title or citation.kind)
            title = f' "{_one(citation.title)}"' if citation.title and citation.url else ""
            yield (
                f"    citation without a range v{citation.event_version}: {source}{title}"
                f" · {_one(citation.reason)}"
            )
    outside = by_turn.get(None, []), activities.get(None, [])
    if outside[0] or outside[1]:
        yield "  outside any turn"
        yield from _turn_body(*outside)
    if report.tool_calls:
        yield "  tool calls"
        for call in report.tool_calls:
            yield f"    {_call_line(call)}"
    if report.spend:
        yield "  hosted work, whole conversation"
        for spend in report.spend:
            yield f"    {_spend_line(spend)}"
    yield from copy_lines(report.superseded, report.duplicates, _one)
    yield from _payload_lines(report)


def _turn_body(responses: list[ResponseAudit], activities: list[ActivityAudit]) -> Iterator[str]:
    for response in responses:
        yield f"    {_response_line(response)}"
        for activity in activities:
            if activity.response_id == response.response_id:
                yield f"      {_activity_line(activity)}"
    for activity in activities:
        if activity.response_id is None or activity.response_id not in {
            r.response_id for r in responses
        }:
            yield f"      {_activity_line(activity)}"


def _one(text: str) -> str:
    return " ".join(text.split())


def _response_line(response: ResponseAudit) -> str:
    line = f"response {_one(response.response_id)} · {_one(response.provider) or '?'}"
    if response.model:
        line += f" {_one(response.model)}"
    if response.origin == "request":
        line += " · from request history"
    if response.state == "open":
        line += " · open (never ended)"
    else:
        line += f" · {response.state} · {response.finish_reason}"
        if response.stop_reason and response.stop_reason != response.finish_reason:
            line += f" (provider: {_one(response.stop_reason)})"
    counters = usage_counters(response.usage, _one) if response.usage is not None else []
    if counters:
        line += f" · {', '.join(counters)}"
    if response.error is not None:
        status = f" (HTTP {response.error.status})" if response.error.status is not None else ""
        message = _one(response.error.message)
        if len(message) > 200:
            message = message[:199] + "…"
        line += f" · error {_one(response.error.type)}{status}: {message}"
    return line


def _activity_line(activity: ActivityAudit) -> str:
    states = ", ".join(f"v{t.version} {t.state}" for t in activity.transitions)
    line = f"activity {_one(activity.name)} {_one(activity.activity_id)}"
    query = activity.input.get("query") or activity.input.get("url")
    if isinstance(query, str) and query:
        shown = _one(query)
        line += f' "{shown[:119] + "…" if len(shown) > 120 else shown}"'
    line += f" · {states}"
    if activity.flags:
        line += f" · {', '.join(activity.flags).replace('_', ' ').upper()}"
    return line


def _call_line(call: ToolCallAudit) -> str:
    line = f"{_one(call.name)} {_one(call.call_id)}"
    if call.turn_id is not None:
        line += f" ({_one(call.turn_id)})"
    line += f" · requested v{call.requested_version}"
    if call.responded_version is None:
        line += " · never answered · ORPHANED"
    else:
        error = " (error)" if call.is_error else ""
        line += f" · answered v{call.responded_version}{error}"
        if call.synthetic:
            line += " · SYNTHETIC (a repair)"
    return line


def _spend_line(spend: HostedSpend) -> str:
    name = _one(spend.name)
    line = f"hosted {name}: {spend.recorded} recorded, {spend.completed} completed"
    if spend.requests != spend.recorded:
        line += f", {spend.requests} of them search requests"
    if spend.reported is None:
        line += ", provider reports no counter"
    else:
        line += f", provider reports {spend.reported} ({_one(spend.counter or '')})"
    if spend.differs:
        line += " · DIFFERS"
    return line


def _payload_lines(report: ConversationAudit) -> Iterator[str]:
    if not report.payloads:
        yield "  payloads: none"
        return
    yield f"  payloads: {len(report.payloads)}, {report.payload_bytes} bytes"
    groups: dict[tuple[str, str, str], list[int]] = {}
    for entry in report.payloads:
        groups.setdefault((entry.provider, entry.format, entry.version), []).append(entry.size)
    for (provider, format, version), sizes in sorted(groups.items()):
        kind = f"{_one(provider)} {_one(format)}" + (f" {_one(version)}" if version else "")
        yield f"    {kind}: {len(sizes)}, {sum(sizes)} bytes"
