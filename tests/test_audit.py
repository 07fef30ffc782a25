"""The audit reading over realistic conversations: the example captures, ingested.

Each conversation is recorded the way `convstore ingest` records it (exchange by exchange,
each with its own request), then audited: hosted activity lifecycles, orphaned and repaired
tool calls, hosted counts beside the provider's counters, responses, the payload inventory
and the chain head. Payload values never reach the report, in JSON or as a table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import msgspec
import pytest

from convstore.adapters import cli
from convstore.adapters.recording.jobs import ingest
from convstore.domain import (
    ActivityId,
    AssistantText,
    CallId,
    ConversationId,
    ConversationService,
    Event,
    HostedActivity,
    ProviderPayload,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    ToolCallRequested,
    TurnId,
    TurnStarted,
    UserMessage,
)
from convstore.projections.audit import (
    AUDIT_SCHEMA,
    AuditFold,
    ConversationAudit,
    audit,
    audit_lines,
    to_data,
)
from convstore.storage import Store, open_store

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "anthropic"
OPAQUE_FIELDS = re.compile(rb'"(signature|encrypted_content|encrypted_index|data)":"([^"]{16,})"')


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'audit.db'}"


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with open_store(url) as opened:
        yield opened


def record(
    service: ConversationService,
    folder: Path,
    exchanges: tuple[int, ...] = (1, 2),
    *,
    conversation: ConversationId | None = None,
    response: Path | None = None,
) -> ConversationId:
    """Ingest exchanges of a capture folder in order, each with its own request."""
    for n in exchanges:
        body = response or next(folder.glob(f"{n}.response.*"))
        report = ingest(
            service,
            "anthropic",
            [body],
            request=(folder / f"{n}.request.json").read_bytes(),
            conversation_id=conversation,
        )
        assert report.exit_code in (0, 3), report.error
        conversation = report.conversation_id
    assert conversation is not None
    return conversation


def audited(service: ConversationService, conversation: ConversationId) -> ConversationAudit:
    return audit(service.events(conversation))


def spend_of(report: ConversationAudit, name: str = "web_search") -> dict[str, object]:
    (turn,) = report.turns
    (spend,) = [s for s in turn.spend if s.name == name]
    data: dict[str, object] = msgspec.to_builtins(spend)
    return data


# --- hosted activities ------------------------------------------------------------------------


def test_mixed_batch_search_is_pending_until_the_next_response_completes_it(
    store: Store,
) -> None:
    folder = EXAMPLES / "mixed_batch"
    conversation = record(store.service, folder, (1,))
    report = audited(store.service, conversation)
    (activity,) = report.activities
    assert activity.name == "web_search"
    assert activity.provider == "anthropic"
    assert activity.state == "started"
    assert activity.flags == ["never_finished", "pending"]
    assert [(t.state, t.response_id) for t in activity.transitions] == [
        ("started", report.responses[0].response_id)
    ]
    (call,) = report.tool_calls
    assert (call.name, call.flags, call.responded_version) == ("lookup_order", ["orphaned"], None)
    assert spend_of(report) == {
        "name": "web_search",
        "recorded": 1,
        "completed": 0,
        "requests": 1,
        "requests_completed": 0,
        "counter": "web_search_requests",
        "reported": 0,  # deferred: not run yet, so not counted, and that agrees
        "differs": False,
    }
    assert report.flags == ["activity_never_finished", "activity_pending", "tool_call_orphaned"]
    assert report.turns[0].state == "open"

    record(store.service, folder, (2,), conversation=conversation)
    report = audited(store.service, conversation)
    (activity,) = report.activities
    first, second = (r.response_id for r in report.responses)
    assert [(t.state, t.response_id) for t in activity.transitions] == [
        ("started", first),
        ("completed", second),
    ]
    assert activity.transitions[0].version < activity.transitions[1].version
    assert activity.flags == []
    (call,) = report.tool_calls
    assert call.flags == [] and call.responded_version is not None and not call.synthetic
    assert spend_of(report)["reported"] == 1 and not spend_of(report)["differs"]
    assert report.flags == []
    assert report.turns[0].responses == [first, second]
    assert report.turns[0].state == "completed"


def test_pause_turn_continues_in_the_same_turn(store: Store) -> None:
    conversation = record(store.service, EXAMPLES / "pause_turn")
    report = audited(store.service, conversation)
    (turn,) = report.turns
    paused, final = report.responses
    assert turn.responses == [paused.response_id, final.response_id]
    assert (paused.state, paused.finish_reason, paused.stop_reason) == (
        "completed",
        "pause",
        "pause_turn",
    )
    assert (final.finish_reason, final.stop_reason) == ("stop", "end_turn")
    assert paused.activities == {"web_search": 1} and final.activities == {"web_search": 1}
    assert [a.response_id for a in report.activities] == [paused.response_id, final.response_id]
    assert all(a.state == "completed" and not a.flags for a in report.activities)
    assert spend_of(report) == {
        "name": "web_search",
        "recorded": 2,
        "completed": 2,
        "requests": 2,
        "requests_completed": 2,
        "counter": "web_search_requests",
        "reported": 2,
        "differs": False,
    }
    assert report.flags == []


def _with_counter(tmp_path: Path, count: int) -> Path:
    source = (EXAMPLES / "web_search_citations" / "1.response.sse").read_bytes()
    assert source.count(b'"web_search_requests":1') == 1
    changed = tmp_path / "1.response.sse"
    changed.write_bytes(
        source.replace(b'"web_search_requests":1', b'"web_search_requests":%d' % count)
    )
    return changed


@pytest.mark.parametrize(("reported", "differs"), [(1, False), (0, True), (3, True)])
def test_web_search_counter_beside_the_recorded_searches(
    store: Store, tmp_path: Path, reported: int, differs: bool
) -> None:
    folder = EXAMPLES / "web_search_citations"
    conversation = record(store.service, folder, (1,), response=_with_counter(tmp_path, reported))
    report = audited(store.service, conversation)
    spend = spend_of(report)
    assert (spend["recorded"], spend["completed"], spend["reported"]) == (1, 1, reported)
    assert spend["differs"] is differs
    assert ("hosted_count_differs" in report.turns[0].flags) is differs
    assert ("hosted_count_differs" in report.flags) is differs
    assert [s.differs for s in report.spend] == [differs]
    text = "\n".join(audit_lines(report))
    assert ("DIFFERS" in text) is differs
    assert f"provider reports {reported} (web_search_requests)" in text


def _cut_after_search_call(tmp_path: Path, tail: bytes = b"") -> Path:
    """The web search stream cut after the `server_tool_use` block, before its result."""
    source = (EXAMPLES / "web_search_citations" / "1.response.sse").read_bytes()
    marker = b'data: {"type":"content_block_stop","index":1}\n\n'
    assert marker in source
    cut = tmp_path / "1.response.sse"
    cut.write_bytes(source[: source.index(marker) + len(marker)] + tail)
    return cut


ERROR_EVENT = (
    b'event: error\ndata: {"type":"error","error":'
    b'{"type":"overloaded_error","message":"Overloaded"}}\n\n'
)


@pytest.mark.parametrize(("tail", "ended"), [(b"", "abandoned"), (ERROR_EVENT, "failed")])
def test_interrupted_stream_leaves_the_search_started_never_finished(
    store: Store, tmp_path: Path, tail: bytes, ended: str
) -> None:
    folder = EXAMPLES / "web_search_citations"
    conversation = record(
        store.service, folder, (1,), response=_cut_after_search_call(tmp_path, tail)
    )
    report = audited(store.service, conversation)
    (response,) = report.responses
    assert response.state == ended
    assert response.flags == [ended]
    if ended == "failed":
        assert response.error is not None and response.error.type == "overloaded_error"
    (activity,) = report.activities
    assert activity.state == "started"
    assert activity.flags == ["never_finished", "interrupted"]
    assert {"activity_never_finished", "activity_interrupted", f"response_{ended}"} <= set(
        report.flags
    )
    assert "NEVER FINISHED, INTERRUPTED" in "\n".join(audit_lines(report))


def test_provider_error_stream_is_a_failed_response_with_its_error(store: Store) -> None:
    folder = EXAMPLES / "errors"
    conversation = record(store.service, folder, (1,))
    report = audited(store.service, conversation)
    (response,) = report.responses
    assert (response.state, response.finish_reason) == ("failed", "error")
    assert response.error is not None
    assert (response.error.type, response.error.message) == ("overloaded_error", "Overloaded")
    assert report.turns[0].state == "failed"
    assert report.flags == ["response_failed"]


def test_failed_hosted_fetch_is_flagged_and_matches_its_counter(store: Store) -> None:
    conversation = record(store.service, EXAMPLES / "errors", (3,))
    report = audited(store.service, conversation)
    by_name = {a.name: a for a in report.activities}
    assert by_name["web_fetch"].flags == ["failed"]
    assert by_name["bash_code_execution"].flags == []
    fetch = spend_of(report, "web_fetch")
    assert (fetch["recorded"], fetch["completed"], fetch["reported"]) == (1, 0, 1)
    assert not fetch["differs"]  # failed: may or may not be counted
    code = spend_of(report, "bash_code_execution")
    assert (code["counter"], code["reported"], code["differs"]) == (None, None, False)


# --- tool calls -------------------------------------------------------------------------------


def test_orphaned_tool_call_then_its_synthetic_repair(store: Store) -> None:
    conversation = record(store.service, EXAMPLES / "thinking_tool_roundtrip", (1,))
    report = audited(store.service, conversation)
    (call,) = report.tool_calls
    assert (call.name, call.flags) == ("get_weather", ["orphaned"])
    assert "ORPHANED" in "\n".join(audit_lines(report))

    store.service.repair(conversation)
    report = audited(store.service, conversation)
    (call,) = report.tool_calls
    assert call.flags == ["synthetic"]
    assert call.synthetic and call.is_error
    assert call.responded_version is not None
    assert "tool_call_synthetic" in report.flags and "tool_call_orphaned" not in report.flags
    assert "SYNTHETIC" in "\n".join(audit_lines(report))


def test_a_completed_round_trip_has_no_flags(store: Store) -> None:
    conversation = record(store.service, EXAMPLES / "thinking_tool_roundtrip")
    report = audited(store.service, conversation)
    (call,) = report.tool_calls
    assert call.flags == [] and not call.synthetic
    assert report.flags == []


# --- payloads, head, the fold ---------------------------------------------------------------


def _payload_sizes(events: list[Event]) -> list[tuple[int, str, int]]:
    """Every payload's (version, field, byte length), found without the audit's walker."""
    found: list[tuple[int, str, int]] = []
    for event in events:
        version = event.originator_version
        if isinstance(event, ResponseStarted) and event.settings.native is not None:
            found.append((version, "settings.native", len(event.settings.native.raw)))
        payload = getattr(event, "payload", None)
        if isinstance(payload, ProviderPayload):
            found.append((version, "payload", len(payload.raw)))
        if isinstance(event, AssistantText):
            for i, attribution in enumerate(event.attributions):
                if attribution.replay is not None:
                    found.append(
                        (version, f"attributions[{i}].replay", len(attribution.replay.raw))
                    )
    return found


@pytest.mark.parametrize(
    "name", ["web_search_citations", "pause_turn", "mixed_batch", "thinking_tool_roundtrip"]
)
def test_payload_inventory_sizes_are_the_payload_bytes(store: Store, name: str) -> None:
    folder = EXAMPLES / name
    exchanges = (1,) if name == "web_search_citations" else (1, 2)
    conversation = record(store.service, folder, exchanges)
    events = list(store.service.events(conversation))
    report = audit(events)
    inventory = [(p.event_version, p.field, p.size) for p in report.payloads]
    assert sorted(inventory) == sorted(_payload_sizes(events))
    assert report.payload_bytes == sum(size for _, _, size in inventory)
    assert all(p.provider == "anthropic" and p.format for p in report.payloads)
    by_version = {e.originator_version: type(e).__name__ for e in events}
    assert all(by_version[p.event_version] == p.event for p in report.payloads)
    assert any(p.version.startswith("web_search_") for p in report.payloads) == (
        name != "thinking_tool_roundtrip"
    )


def test_head_is_the_newest_event_and_the_fold_is_incremental(store: Store) -> None:
    conversation = record(store.service, EXAMPLES / "mixed_batch")
    events = list(store.service.events(conversation))
    report = audit(events)
    assert report.schema == AUDIT_SCHEMA
    assert report.conversation_id == str(conversation)
    assert report.title == "mixed_batch"
    assert report.events == len(events)
    assert (report.head.hash, report.head.version) == (events[-1].hash, len(events))
    assert audit(events) == report  # pure: the same events give the same report
    fold = AuditFold()
    for n, event in enumerate(events, 1):
        fold.apply(event)
        assert fold.report() == audit(events[:n])  # reporting never disturbs the fold


def test_activity_outside_a_response_and_an_open_response_are_read(store: Store) -> None:
    """An explicit abandonment (provider switched) and a response whose writer died."""
    service = store.service
    conversation = service.start("by hand")
    r1, r2 = ResponseId("r1"), ResponseId("r2")
    service.append(
        conversation,
        [
            TurnStarted(turn_id=TurnId("t1")),
            UserMessage(blocks=("hi",)),
            ResponseStarted(response_id=r1, provider="anthropic", model="m"),
            HostedActivity(
                activity_id=ActivityId("a1"),
                name="web_search",
                state="started",
                response_id=r1,
                input={"query": "q"},
            ),
            ToolCallRequested(response_id=r1, call_id=CallId("c1"), name="f"),
            ResponseEnded(response_id=r1, state="completed", finish_reason="tool_use"),
        ],
    )
    service.abandon_activities(conversation, provider="anthropic")
    service.append(conversation, [ResponseStarted(response_id=r2, provider="openai", model="g")])
    report = audited(service, conversation)
    (activity,) = report.activities
    assert activity.flags == ["abandoned"]
    assert [(t.state, t.response_id) for t in activity.transitions] == [
        ("started", r1),
        ("abandoned", None),
    ]
    open_response = report.responses[1]
    assert (open_response.state, open_response.flags, open_response.ended_version) == (
        "open",
        ["open"],
        None,
    )
    assert {"activity_abandoned", "response_open", "tool_call_orphaned"} <= set(report.flags)
    text = "\n".join(audit_lines(report))
    assert "open (never ended)" in text and "ABANDONED" in text


# --- no payload value, no escape sequence ---------------------------------------------------


def _opaque_values() -> set[bytes]:
    values: set[bytes] = set()
    for path in EXAMPLES.glob("*/*.response.*"):
        values.update(m.group(2) for m in OPAQUE_FIELDS.finditer(path.read_bytes()))
    return values


def test_no_payload_value_reaches_the_json_or_the_table(
    url: str, store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("web_search_citations", "pause_turn", "mixed_batch", "thinking_tool_roundtrip"):
        record(store.service, EXAMPLES / name, (1,) if name == "web_search_citations" else (1, 2))
    opaque = _opaque_values()
    assert len(opaque) >= 10
    stored = b"".join(n.state for n in store.recorder.select_notifications(None, 10_000))
    assert sum(value in stored for value in opaque) >= 10  # they are in the store...
    outputs = []
    for argv in (["audit", "--all"], ["audit", "--all", "--json"]):
        code = cli.main(["--db", url, *argv])
        out, err = capsys.readouterr()
        assert (code, err) == (0, "")
        outputs.append(out.encode())
    for output in outputs:  # ...and never in the report
        leaked = [value[:20] for value in opaque if value in output]
        assert leaked == []
        assert b"encrypted_content" not in output and b"signature" not in output
    data = json.loads(outputs[1])
    assert len(data) == 4 and all(item["schema"] == AUDIT_SCHEMA for item in data)
    assert all(isinstance(p["size"], int) and "value" not in p for d in data for p in d["payloads"])


HOSTILE = "\x1b]0;pwned\x07\x1b[2J\u202eevil\x9b31m\x08"
INJECTED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]")


def test_hostile_names_never_reach_the_terminal(
    url: str, store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    service = store.service
    conversation = service.start(f"title {HOSTILE}")
    r1 = ResponseId(f"r{HOSTILE}")
    service.append(
        conversation,
        [
            TurnStarted(turn_id=TurnId(f"t{HOSTILE}")),
            UserMessage(blocks=("hi",)),
            ResponseStarted(response_id=r1, provider=f"p{HOSTILE}", model=f"m{HOSTILE}"),
            HostedActivity(
                activity_id=ActivityId(f"a{HOSTILE}"),
                name=f"web_search{HOSTILE}",
                state="started",
                response_id=r1,
                input={"query": f"q{HOSTILE}"},
            ),
            ToolCallRequested(response_id=r1, call_id=CallId(f"c{HOSTILE}"), name=f"f{HOSTILE}"),
            ResponseEnded(response_id=r1, state="failed", stop_reason=f"s{HOSTILE}"),
        ],
    )
    for json_flag in ([], ["--json"]):
        code = cli.main(["--db", url, "audit", str(conversation), *json_flag])
        out, err = capsys.readouterr()
        assert code == 0
        assert INJECTED.search(out) is None and INJECTED.search(err) is None
        if json_flag:
            assert json.loads(out)["title"] == f"title {HOSTILE}"  # lossless, yet inert


# --- the command ------------------------------------------------------------------------------


def test_audit_command_shows_the_chain_head(
    url: str, store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    conversation = record(store.service, EXAMPLES / "pause_turn")
    head = list(store.service.events(conversation))[-1].hash
    code = cli.main(["--db", url, "audit", str(conversation)])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert f"chain head {head} at version 19 (19 events)\n  chain verified: intact\n" in out
    assert "hosted web_search: 2 recorded, 2 completed, provider reports 2" in out
    code = cli.main(["--db", url, "audit", str(conversation), "--json"])
    out, _ = capsys.readouterr()
    data = json.loads(out)
    assert data["head"] == {"hash": head, "version": 19}
    assert data.pop("chain") == {
        "intact": True,
        "head": head,
        "version": 19,
        "first_bad_version": None,
        "problems": [],
    }
    expected = json.loads(json.dumps(to_data(audited(store.service, conversation)), default=str))
    assert expected.pop("chain") is None  # the fold alone checks no stored chain
    assert data == expected


def test_audit_command_errors(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    open_store(url).close()  # an empty store: reading one that does not exist is refused
    assert cli.main(["--db", url, "audit", "00000000-0000-0000-0000-000000000001"]) == 2
    assert "no conversation" in capsys.readouterr().err
    assert cli.main(["--db", url, "audit"]) == 2  # an id or --all
    assert cli.main(["--db", url, "audit", "x", "--all"]) == 2
    capsys.readouterr()
    assert cli.main(["--db", url, "audit", "--all", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_audit_of_unreadable_stored_events_exits_5(
    url: str, store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    good = record(store.service, EXAMPLES / "pause_turn")
    bad = record(store.service, EXAMPLES / "thinking_tool_roundtrip", (1,))
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        db.execute(
            "UPDATE events SET state = ? WHERE originator_id = ? AND originator_version = 3",
            (b"{not json", bad.bytes),
        )
    code = cli.main(["--db", url, "audit", "--all"])
    out, err = capsys.readouterr()
    assert code == 5
    assert str(good) in out and f"conversation {bad} cannot be read" in err
    assert cli.main(["--db", url, "audit", str(bad)]) == 5


def test_citations_without_a_range_are_listed_per_turn_with_their_reason(
    url: str, store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Gemini grounding support whose offsets do not fit the text keeps its source: the
    audit lists it in its turn with the reason, as text and in --json (valid against the
    command's schema)."""
    folder = EXAMPLES.parent / "google" / "grounding_unplaced"
    report = ingest(
        store.service,
        "google",
        [folder / "1.response.json"],
        request=(folder / "1.request.json").read_bytes(),
    )
    assert report.exit_code == 0 and report.conversation_id is not None
    conversation = report.conversation_id
    (turn,) = audited(store.service, conversation).turns
    reasons = [(c.url, c.title, bool(c.reason)) for c in turn.unplaced]
    assert reasons == [
        ("https://example.org/tarifs", "example.org", True),
        ("https://example.org/tarifs", "example.org", True),
        ("https://example.net/agenda", "example.net", True),
        ("https://example.net/agenda", "example.net", True),
    ]
    assert cli.main(["--db", url, "audit", str(conversation)]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "citation without a range" in line]
    assert len(lines) == 4
    assert 'https://example.org/tarifs "example.org" · the text at the segment' in lines[0]
    assert cli.main(["--db", url, "audit", str(conversation), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    schema = json.loads(
        (EXAMPLES.parents[1] / "adapters" / "cli" / "schemas" / "audit.schema.json").read_text()
    )
    jsonschema.Draft202012Validator(schema).validate(data)
    (turn_data,) = data["turns"]
    assert [c["reason"] for c in turn_data["unplaced"]] == [c.reason for c in turn.unplaced]
