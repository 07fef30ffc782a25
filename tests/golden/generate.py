"""Write the golden fixtures: stored bytes of today's schema (version 1), kept as written.

Run once, by hand, from the project root: `.venv/bin/python -m tests.golden.generate`
(and `... generate metadata` for the fixture of the event types added later).
The tests never run it: the files it writes are the record of what this version stored,
and `tests/test_upcasting.py` proves every later version still reads them. Regenerating
them after an event class changed would hide exactly the break they exist to catch;
add an upcaster (`storage/upcasting.py`) instead, and new fixtures beside these.

- `conversation.jsonl`: one conversation's stored events in version order, one record's
  exact bytes per line (every one of the 13 event types, with payloads, citations with
  ranges, usage, an error, a display obligation, a redaction and a repair);
- `snapshot.json`: the snapshot the repository stored part-way through (`version`, and
  `state`: the msgpack bytes in base64);
- `metadata.jsonl`, beside them (written when Retitled and Relabelled were added): a
  conversation titled, retitled, relabelled and its title cleared, its exact bytes;
- `forgotten.jsonl` (written when encryption and Forgotten were added): a conversation of
  an encrypted store, its content sealed, then forgotten (its key destroyed), its bytes;
- `redacted.jsonl` (written when Redacted was added): a user message, a span of it
  redacted, then all of it, its exact bytes.
"""

from __future__ import annotations

import base64
import json
import sys
import tempfile
from pathlib import Path

from convstore.domain import (
    ActivityId,
    AssistantText,
    Attribution,
    CallId,
    ContextInjected,
    ConversationId,
    ConversationService,
    Display,
    ErrorInfo,
    HostedActivity,
    Location,
    ProviderPayload,
    Reasoning,
    RequestSettings,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    Source,
    TextRange,
    ToolCallRequested,
    ToolDeclaration,
    UnknownArtifact,
    Usage,
    UserMessage,
    Writer,
)
from convstore.storage import open_store
from tests import sample_conversation

FOLDER = Path(__file__).parent
SNAPSHOT_EVERY = 20
"""A snapshot part-way through, so a load reads it and then the events after it."""
WRITER = Writer(host="golden.example", pid=4242, started=1767225600.0)

GOOGLE = ResponseId("golden-google-response-1")
MODEL = "gemini-2.5-flash"
SEARCH = ActivityId("golden-google-search-1")
LOOKUP = CallId("golden-call-lookup-1")
ANSWER = "Byōdō-in opens at 8:30; the museum at 9:00 [cut]"


def _google(block: dict[str, object], format: str = "part") -> ProviderPayload:
    raw = json.dumps(block, ensure_ascii=False, separators=(",", ":")).encode()
    return ProviderPayload.of("google", format, raw, binding={"model": MODEL})


def _google_response() -> list[object]:
    """A failed Gemini response: grounding, cut citations, a redaction, an unknown part."""
    queries = {"queries": ["Byōdō-in opening hours"]}
    return [
        ResponseStarted(
            response_id=GOOGLE,
            provider="google",
            model=MODEL,
            settings=RequestSettings(
                tools=(
                    ToolDeclaration(name="google_search", hosted=True, native_type="google_search"),
                    ToolDeclaration(
                        name="lookup_hours",
                        description="Opening hours of a place.",
                        input_schema={
                            "type": "object",
                            "properties": {"place": {"type": "string"}},
                        },
                    ),
                ),
                native=_google({"generationConfig": {"temperature": 0.2}}, "request"),
            ),
        ),
        Reasoning(
            response_id=GOOGLE,
            redacted=True,
            payload=_google({"thought": True, "thoughtSignature": sample_conversation.opaque("g")}),
        ),
        HostedActivity(
            activity_id=SEARCH,
            name="web_search",
            state="started",
            response_id=GOOGLE,
            input=queries,
        ),
        HostedActivity(
            activity_id=SEARCH,
            name="web_search",
            state="completed",
            response_id=GOOGLE,
            summary="1 source",
            display=Display(kind="search_suggestion", content="<div>Byōdō-in hours</div>"),
        ),
        AssistantText(
            response_id=GOOGLE,
            text=ANSWER,
            attributions=(
                Attribution(
                    source=Source(
                        kind="web",
                        url="https://www.example.org/uji/byodoin",
                        title="Byōdō-in visitor guide",
                        location=Location(unit="char", start=0, end=24, document_index=0),
                    ),
                    range=TextRange(0, 24),
                ),
            ),
            attributions_complete=False,
        ),
        ToolCallRequested(
            response_id=GOOGLE,
            call_id=LOOKUP,
            name="lookup_hours",
            arguments={"place": "Byōdō-in museum"},
            payload=_google({"thoughtSignature": sample_conversation.opaque("call")}),
        ),
        UnknownArtifact(response_id=GOOGLE, payload=_google({"executableCode": {"code": "1+1"}})),
        ResponseEnded(
            response_id=GOOGLE,
            state="failed",
            finish_reason="error",
            stop_reason="MALFORMED_FUNCTION_CALL",
            usage=Usage(
                input_tokens=812,
                output_tokens=64,
                cache_read_tokens=128,
                reasoning_tokens=40,
                hosted={"grounding_queries": 1},
                other={"tool_use_prompt_tokens": 12},
            ),
            error=ErrorInfo(type="stream_error", message="stream cut", status=500),
        ),
    ]


def record(service: ConversationService) -> ConversationId:
    """The golden conversation, written through the service as any caller would."""
    conversation = sample_conversation.build(service)
    service.add_user_input(
        conversation, [ContextInjected(source="steering", text="Prefer places near the river.")]
    )
    service.add_user_input(conversation, [UserMessage(blocks=("When does Byōdō-in open?",))])
    service.ingest(conversation, _google_response())
    service.repair(conversation)  # answers the orphaned lookup_hours call
    return conversation


def main() -> None:
    """Record the conversation in a scratch SQLite store and write its stored bytes."""
    with (
        tempfile.TemporaryDirectory() as scratch,
        open_store(f"sqlite:///{scratch}/golden.db", snapshot_every=SNAPSHOT_EVERY) as store,
    ):
        service = ConversationService(store.repository, writer=WRITER)
        conversation = record(service)
        states = store.recorder.select_states(conversation)
        snapshot = store.recorder.select_snapshot(conversation)
    assert snapshot is not None and snapshot.version < len(states)
    lines = b"".join(state + b"\n" for _, state in states)
    (FOLDER / "conversation.jsonl").write_bytes(lines)
    document = {"version": snapshot.version, "state": base64.b64encode(snapshot.state).decode()}
    (FOLDER / "snapshot.json").write_text(json.dumps(document, indent=1) + "\n")
    print(f"{len(states)} events, snapshot at version {snapshot.version}, in {FOLDER}")


def metadata() -> None:
    """Record a conversation's title and label changes; write its stored bytes."""
    with (
        tempfile.TemporaryDirectory() as scratch,
        open_store(f"sqlite:///{scratch}/golden.db") as store,
    ):
        service = ConversationService(store.repository, writer=WRITER)
        conversation = service.start("Kyoto notes", ["travel"])
        service.retitle(conversation, "Uji day trip")
        service.relabel(conversation, add=["japan", "tea"], remove=["travel"])
        service.relabel(conversation, remove=["tea"])
        service.retitle(conversation, "")
        states = store.recorder.select_states(conversation)
    (FOLDER / "metadata.jsonl").write_bytes(b"".join(state + b"\n" for _, state in states))
    print(f"{len(states)} events in {FOLDER / 'metadata.jsonl'}")


def forgotten() -> None:
    """Record a sealed conversation and forget it; write its stored bytes."""
    from convstore.storage import forgetting

    with (
        tempfile.TemporaryDirectory() as scratch,
        open_store(f"sqlite:///{scratch}/golden.db", encrypt=True) as store,
    ):
        conversation = store.service.start("Kyoto notes", ["travel"])
        store.service.add_user_input(
            conversation, [UserMessage(blocks=("Where should I stay in Kyoto?",))]
        )
        forgetting.forget(store, conversation, reason="golden fixture")
        states = store.recorder.select_states(conversation)
    (FOLDER / "forgotten.jsonl").write_bytes(b"".join(state + b"\n" for _, state in states))
    print(f"{len(states)} events in {FOLDER / 'forgotten.jsonl'}")


def redacted() -> None:
    """Record a user message, redact a span of it and then all of it; write its bytes."""
    with (
        tempfile.TemporaryDirectory() as scratch,
        open_store(f"sqlite:///{scratch}/golden.db") as store,
    ):
        service = ConversationService(store.repository, writer=WRITER)
        conversation = service.start("Keys", ["ops"])
        service.add_user_input(conversation, [UserMessage(blocks=("my key is sk-golden-1",))])
        service.redact(conversation, 3, span=(10, 21), reason="pasted a key")
        service.redact(conversation, 3, reason="all of it")
        states = store.recorder.select_states(conversation)
    (FOLDER / "redacted.jsonl").write_bytes(b"".join(state + b"\n" for _, state in states))
    print(f"{len(states)} events in {FOLDER / 'redacted.jsonl'}")


if __name__ == "__main__":
    chosen = {"metadata": metadata, "forgotten": forgotten, "redacted": redacted}
    chosen.get(" ".join(sys.argv[1:]), main)()
