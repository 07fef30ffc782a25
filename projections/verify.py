"""Tamper evidence: walk each conversation's hash chain in the stored bytes, and anchors.

`verify(store, conversation_id | None)` reads every stored event through the recorder's
`select_states` (the bytes as written, before any decoding or upcasting) and reports each
place the chain does not hold, by conversation and version:

- the hash check itself is the domain's (`domain.chain.verify_stored`): an event whose
  content changed, one that does not follow its predecessor (removed, inserted or moved),
  a gap in the versions, bytes that are not an event at all;
- beside it, each event's envelope must name the row it sits in: an event stored at another
  version, or under another conversation, than it was written for was moved (two swapped
  rows, a conversation copied under a new id);
- every event must be one this convstore can read (`Break.unreadable`): an event of a
  later schema version or of a type it does not know, whose hash may well hold, is
  reported as `audit` reports it, never passed as intact;
- with anchors (`export_anchors`, a JSON file `{conversation_id: {"head", "version"}}`
  kept elsewhere), the stored chain must still reach each anchored version with the
  anchored hash: removing the newest events, or a whole conversation, is caught too, as is
  a chain rewritten consistently after some point. Without an anchor, removing the newest
  events leaves a shorter chain that is valid: only an anchor can tell. A conversation whose
  newest event holds no readable hash is anchored without a head (`"head": ""` and why, in
  `"unreadable"`): the others are anchored as usual, and `verify` reports that one.

Reading is never writing: nothing here changes the store. Snapshots are not checked: they
are a cache of the events, rebuilt from them, never a source of truth.

Listing every conversation, including one whose first event was removed (it no longer
appears in `select_first_events`), takes one pass over the notification log; verifying
then reads each conversation's events once more.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, cast
from uuid import UUID

import msgspec

from convstore.domain.chain import canonical_from_stored, verify_stored
from convstore.domain.errors import ConfigurationError, ConversationNotFound, IntegrityError
from convstore.domain.sealing import sealed_kind
from convstore.domain.vocabulary import ConversationId
from convstore.storage.mapper import EventMapper
from convstore.storage.upcasting import CURRENT

if TYPE_CHECKING:
    from convstore.storage import Store
    from convstore.storage.recorder import ConversationRecorder

VERIFY_SCHEMA: Final = "convstore.verify/1"
"""The report's schema name and major version."""

PAGE: Final = 1000
"""Notifications read per page while listing conversations."""

Progress = Callable[[str, int, int], None]
"""Called as work advances with (what, done, total): `listing` counts notifications read,
`verifying` conversations checked."""

_HASH: Final = re.compile(r"[0-9a-f]{64}")

NO_HEAD: Final = (
    "the anchor holds no head for this version: its newest event could not be read when it"
    " was anchored, so the anchor cannot vouch for this conversation"
)
"""The problem reported for an anchor taken of a conversation whose newest event was
unreadable (`"head": ""`)."""

decode: Final = EventMapper.decode
"""How `verify` reads each event, exactly as `audit`, `show` and `export` do."""


class Anchor(msgspec.Struct, frozen=True, kw_only=True):
    """A chain head recorded elsewhere: the newest event's hash and version at that time."""

    head: str
    """The SHA-256 hash (hex) of the event at `version`."""
    version: int
    """The conversation's newest version when the anchor was taken."""


class Break(msgspec.Struct, frozen=True, kw_only=True):
    """One place where a stored conversation is not what was written."""

    conversation_id: str
    version: int | None
    """The version concerned; None when the whole conversation is (it was removed)."""
    problem: str
    """What is wrong, in words: changed, removed, moved, or unreadable."""
    unreadable: bool = False
    """True when this convstore cannot read the event (a later schema version, an unknown
    type, or no readable head in the anchor), whether or not its chain holds."""


class ConversationCheck(msgspec.Struct, frozen=True, kw_only=True):
    """The verification of one conversation."""

    conversation_id: str
    events: int
    """Events stored."""
    version: int
    """The newest stored version (0 when nothing is stored)."""
    head: str
    """The hash the newest stored event claims ("" when unreadable or none)."""
    anchor: Anchor | None
    """The anchor it was compared with, if any."""
    breaks: list[Break]
    """Every break found, by version."""
    intact: bool
    """True when no break was found."""


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """The verification of one conversation or of a whole store."""

    schema: str
    """`VERIFY_SCHEMA`."""
    intact: bool
    """True when every conversation checked is intact."""
    conversations: int
    """How many conversations were checked."""
    events: int
    """How many stored events were checked."""
    anchored: int
    """How many of them were compared with an anchor."""
    breaks: list[Break]
    """Every break, conversation by conversation."""
    checks: list[ConversationCheck]
    """One entry per conversation checked."""


class _Envelope(msgspec.Struct):
    originator_id: str | None = None
    originator_version: int | None = None


class _Hash(msgspec.Struct):
    hash: str = ""


_envelope = msgspec.json.Decoder(_Envelope).decode
_own_hash = msgspec.json.Decoder(_Hash).decode


def _recorder(store: Store | ConversationRecorder) -> ConversationRecorder:
    recorder: ConversationRecorder | None = getattr(store, "recorder", None)
    return recorder if recorder is not None else cast("ConversationRecorder", store)


def _uuid(key: UUID | str) -> UUID:
    return key if isinstance(key, UUID) else UUID(str(key))


# --- listing ---------------------------------------------------------------------------------


def _scan(
    recorder: ConversationRecorder, progress: Progress | None
) -> Iterator[tuple[UUID, int, bytes]]:
    """(conversation, version, stored bytes) of every event, in notification order."""
    total = recorder.max_notification_id() or 0
    start: int | None = None
    while True:
        page = recorder.select_notifications(start, PAGE, inclusive_of_start=False)
        if not page:
            return
        for notification in page:
            yield (
                _uuid(notification.originator_id),
                notification.originator_version,
                notification.state,
            )
        start = page[-1].id
        if progress is not None:
            progress("listing", min(start, total), total)


def stored_conversations(
    store: Store | ConversationRecorder, *, progress: Progress | None = None
) -> list[ConversationId]:
    """Every conversation with at least one stored event, in the order they first appear.

    Unlike a listing by first event, it finds a conversation whose first event was removed.
    """
    seen: dict[UUID, None] = {}
    for conversation, _, _ in _scan(_recorder(store), progress):
        seen.setdefault(conversation)
    return [ConversationId(c) for c in seen]


# --- verifying -------------------------------------------------------------------------------


def _head(state: bytes) -> str:
    try:
        return canonical_from_stored(state)[2]
    except IntegrityError:
        return ""


def _envelope_breaks(
    conversation_id: UUID, states: list[tuple[int, bytes]]
) -> Iterator[tuple[int, str]]:
    """Events stored at another version or under another conversation than written for."""
    for version, state in states:
        try:
            envelope = _envelope(state)
        except (msgspec.DecodeError, RecursionError):
            continue  # unreadable: the chain check reports it
        written = envelope.originator_version
        if written is not None and written != version:
            yield version, f"holds the event written as version {written} (moved)"
        owner = envelope.originator_id
        if owner is not None:
            try:
                same = UUID(owner) == conversation_id
            except ValueError:
                same = False
            if not same:
                yield version, f"holds an event written for conversation {owner} (moved)"


def _unreadable(states: list[tuple[int, bytes]]) -> Iterator[tuple[int, str]]:
    """Events this convstore cannot read as events (those that are not even JSON objects
    the chain check reports)."""
    for version, state in states:
        kind = sealed_kind(state)
        if kind is not None:  # readable without its key: its envelope must be known
            if kind not in CURRENT:
                yield version, f"a sealed event of a type this convstore does not know: {kind!r}"
            continue
        try:
            decode(state)
        except IntegrityError as error:
            try:
                canonical_from_stored(state)
            except IntegrityError:
                continue
            yield version, str(error)


def _anchor_breaks(
    anchor: Anchor, states: list[tuple[int, bytes]]
) -> Iterator[tuple[int | None, str]]:
    if not states:
        yield None, f"conversation removed: the anchor records {anchor.version} events"
        return
    newest = states[-1][0]
    if newest < anchor.version:
        first = newest + 1
        removed = f"version {first}" if first == anchor.version else f"versions {first}-"
        if first != anchor.version:
            removed += str(anchor.version)
        yield first, f"{removed} removed: the anchor records version {anchor.version}"
        return
    at = {version: state for version, state in states}.get(anchor.version)
    if at is None:
        yield anchor.version, "the anchored version is missing"
    elif anchor.head and _head(at) != anchor.head:
        yield (
            anchor.version,
            "differs from the anchored head: the chain was rewritten since the anchor",
        )


def verify_conversation(
    store: Store | ConversationRecorder,
    conversation_id: UUID,
    *,
    anchor: Anchor | None = None,
) -> ConversationCheck:
    """Verify one conversation's stored chain (and its anchor, if given)."""
    states = _recorder(store).select_states(conversation_id)
    return check_states(conversation_id, states, anchor=anchor)


def check_states(
    conversation_id: UUID, states: list[tuple[int, bytes]], *, anchor: Anchor | None = None
) -> ConversationCheck:
    """Verify one conversation's chain in its stored (version, bytes), as read from the
    recorder (`select_states`), and its anchor, if given."""
    found: list[tuple[int | None, str]] = []
    if states and states[0][0] != 1:
        first = states[0][0]
        missing = "version 1" if first == 2 else f"versions 1-{first - 1}"
        found.append((1, f"{missing} missing: the chain's start was removed"))
    found.extend((b.version, b.problem) for b in verify_stored(states))
    found.extend(_envelope_breaks(conversation_id, states))
    if anchor is not None:
        found.extend(_anchor_breaks(anchor, states))
    key = str(conversation_id)
    breaks = [Break(conversation_id=key, version=v, problem=p) for v, p in found]
    unreadable = list(_unreadable(states))
    if anchor is not None and not anchor.head:
        unreadable.append((anchor.version, NO_HEAD))
    breaks.extend(
        Break(conversation_id=key, version=v, problem=p, unreadable=True) for v, p in unreadable
    )
    breaks.sort(key=lambda item: -1 if item.version is None else item.version)
    return ConversationCheck(
        conversation_id=key,
        events=len(states),
        version=states[-1][0] if states else 0,
        head=_head(states[-1][1]) if states else "",
        anchor=anchor,
        breaks=breaks,
        intact=not breaks,
    )


def verify(
    store: Store | ConversationRecorder,
    conversation_id: UUID | None = None,
    *,
    anchors: Mapping[UUID, Anchor] | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """Verify one conversation, or every stored and every anchored one (None).

    Raises ConversationNotFound when the one conversation asked for has no stored event
    and no anchor.
    """
    anchors = anchors or {}
    recorder = _recorder(store)
    if conversation_id is not None:
        ids: list[UUID] = [conversation_id]
    else:
        ids = list(stored_conversations(recorder, progress=progress))
        known = set(ids)
        ids.extend(c for c in anchors if c not in known)
    checks: list[ConversationCheck] = []
    for position, conversation in enumerate(ids, 1):
        check = verify_conversation(recorder, conversation, anchor=anchors.get(conversation))
        if conversation_id is not None and not check.events and check.anchor is None:
            raise ConversationNotFound(f"no conversation {conversation_id} in this store")
        checks.append(check)
        if progress is not None and conversation_id is None:
            progress("verifying", position, len(ids))
    return _report(checks)


def _report(checks: Iterable[ConversationCheck]) -> VerifyReport:
    checks = list(checks)
    breaks = [b for check in checks for b in check.breaks]
    return VerifyReport(
        schema=VERIFY_SCHEMA,
        intact=not breaks,
        conversations=len(checks),
        events=sum(check.events for check in checks),
        anchored=sum(check.anchor is not None for check in checks),
        breaks=breaks,
        checks=checks,
    )


# --- anchors ---------------------------------------------------------------------------------


def export_anchors(
    store: Store | ConversationRecorder, *, progress: Progress | None = None
) -> dict[str, dict[str, Any]]:
    """Every conversation's chain head: `{conversation_id: {"head": hash, "version": n}}`.

    Keep the result (`dump_anchors`) somewhere the store's writers cannot change; a later
    `verify` with it catches removed newest events and removed conversations. The heads are
    those the newest stored events claim: verify the store first to anchor a sound chain.
    A conversation whose newest event holds no readable hash gets `"head": ""` and, in
    `"unreadable"`, why (`unanchored` lists them); every other one is anchored as usual.
    """
    newest: dict[UUID, tuple[int, bytes]] = {}
    for conversation, version, state in _scan(_recorder(store), progress):
        known = newest.get(conversation)
        if known is None or version > known[0]:
            newest[conversation] = (version, state)
    anchors: dict[str, dict[str, Any]] = {}
    for conversation, (version, state) in newest.items():
        try:
            head = _own_hash(state).hash
        except (msgspec.DecodeError, RecursionError) as error:
            head, why = "", str(error)
        else:
            why = "" if _HASH.fullmatch(head) else "it is not a 64-digit hex hash"
        entry: dict[str, Any] = {"head": head if not why else "", "version": version}
        if why:
            entry["unreadable"] = f"version {version}, the newest, holds no readable hash: {why}"
        anchors[str(conversation)] = entry
    return anchors


def unanchored(anchors: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The conversations `export_anchors` could not anchor, each with why."""
    return {key: str(a["unreadable"]) for key, a in anchors.items() if "unreadable" in a}


def dump_anchors(anchors: Mapping[str, Mapping[str, Any]]) -> bytes:
    """Anchors as the JSON file `verify --anchor` reads (one conversation a line)."""
    lines = [
        msgspec.json.encode(key) + b":" + msgspec.json.encode(dict(value))
        for key, value in anchors.items()
    ]
    if not lines:
        return b"{}\n"
    return b"{\n" + b",\n".join(lines) + b"\n}\n"


def parse_anchors(data: bytes, *, source: str = "anchor file") -> dict[UUID, Anchor]:
    """Read an anchor file; raises ConfigurationError for anything but well-formed anchors.

    An empty head is an anchor taken while the conversation's newest event was unreadable:
    accepted, and reported by `verify` for that conversation alone."""
    try:
        raw = msgspec.json.decode(data, type=dict[str, Anchor])
    except (msgspec.DecodeError, RecursionError) as error:
        raise ConfigurationError(
            f"{source} is not an anchor file ({{conversation_id: {{head, version}}}}): {error}"
        ) from None
    anchors: dict[UUID, Anchor] = {}
    for key, anchor in raw.items():
        try:
            conversation = UUID(key)
        except ValueError:
            raise ConfigurationError(f"{source}: {key!r} is not a conversation id") from None
        if not (anchor.head == "" or _HASH.fullmatch(anchor.head)) or anchor.version < 1:
            raise ConfigurationError(
                f'{source}: the anchor of {key} needs a 64-digit hex head (or "" for one'
                " that could not be read) and a version >= 1"
            )
        anchors[conversation] = anchor
    return anchors


# --- as text ---------------------------------------------------------------------------------


def to_data(report: VerifyReport) -> Any:
    """The report as plain JSON data."""
    return msgspec.to_builtins(report)


def verify_lines(report: VerifyReport) -> Iterator[str]:
    """The report as readable lines: each break (UNREADABLE for an event this convstore
    cannot read), then a summary (unsanitized)."""
    for item in report.breaks:
        where = "whole conversation" if item.version is None else f"version {item.version}"
        label = "UNREADABLE" if item.unreadable else "BROKEN"
        yield f"{label} {item.conversation_id} {where}: {item.problem}"
    if len(report.checks) == 1:
        check = report.checks[0]
        head = check.head or "(none)"
        yield f"conversation {check.conversation_id}: {check.events} events, head {head}"
    anchored = f", {report.anchored} against an anchor" if report.anchored else ""
    summary = f"{report.conversations} conversations, {report.events} events checked{anchored}"
    if report.intact:
        yield f"intact: {summary}"
    else:
        broken = sum(not check.intact for check in report.checks)
        unreadable = sum(item.unreadable for item in report.breaks)
        breaks = len(report.breaks) - unreadable
        found = [f"{breaks} breaks"] if breaks else []
        found += [f"{unreadable} unreadable"] if unreadable else []
        label = "BROKEN" if breaks else "UNREADABLE"
        yield f"{label}: {' and '.join(found)} in {broken} of {summary}"
