"""The Gemini encoder: decode → store → encode round trips, history, bindings, losses, config.

Expectations are read from the captures with plain `json`, `base64` and regular
expressions on the raw bytes (independent of the adapter): the next request of each
captured exchange is what the encoder must rebuild, and every thought signature must come
back byte for byte (a captured client may re-send it in URL-safe base64: the decoded bytes
are compared then).
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from convstore.adapters.anthropic import decode as anthropic_decode
from convstore.adapters.anthropic import history as anthropic_history
from convstore.adapters.anthropic.context import RequestContext as AnthropicContext
from convstore.adapters.google.binding import SKIP_SIGNATURE, function_name, signature_bytes
from convstore.adapters.google.config import (
    GoogleConfig,
    model_generation,
    model_path,
    serves,
    validate_hosted_tools,
)
from convstore.adapters.google.context import RequestContext, model_from_path
from convstore.adapters.google.decode import detect_and_decode
from convstore.adapters.google.encode import EncodedRequest, encode_request
from convstore.adapters.google.history import (
    HistoryMismatch,
    history,
    history_drafts,
    recorded_prefix,
)
from convstore.adapters.google.settings import scope_tool_config
from convstore.adapters.openai import decode as openai_decode
from convstore.adapters.openai.context import RequestContext as OpenAIContext
from convstore.adapters.wire.encoding import context_envelope
from convstore.domain.conversation import Conversation
from convstore.domain.errors import ConfigurationError, DecodeError
from convstore.domain.events import (
    AssistantText,
    ContextInjected,
    Event,
    HostedActivity,
    Reasoning,
    ResponseEnded,
    ResponseStarted,
    ToolCallRequested,
    ToolCallResponded,
    UnknownArtifact,
    UserMessage,
)
from convstore.domain.vocabulary import ActivityId, ProviderPayload, ResponseId
from tests.consenting import google_consent
from tests.gemini_reference import whole_calls

ROOT = Path(__file__).resolve().parents[1]
WIRE = ROOT.parent / "shared" / "wire" / "gemini"
EXAMPLES = ROOT / "examples" / "google"
DEFAULT = GoogleConfig()
DEFAULT_MODEL = "gemini-2.5-flash"

SIGNATURE = re.compile(rb'"(?:thoughtSignature|thought_signature)"\s*:\s*("(?:[^"\\]|\\.)*")')
"""A thought signature's JSON string literal, exactly as spelled in the bytes."""

PART_FIELDS = frozenset(
    {
        "text",
        "inlineData",
        "fileData",
        "functionCall",
        "functionResponse",
        "executableCode",
        "codeExecutionResult",
        "toolCall",
        "toolResponse",
    }
)
"""The data fields of a Gemini part: each part holds exactly one (a part of a type not
known yet holds none, and is replayed as it came)."""


# --- reference readings (plain json) ---------------------------------------------------------


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def sig_bytes(literal: str) -> bytes:
    """A signature's bytes, standard or URL-safe base64 alike."""
    text = literal.replace("-", "+").replace("_", "/")
    return base64.b64decode(text + "=" * (-len(text) % 4))


def normalized_part(part: dict[str, Any], *, ids: bool) -> dict[str, Any] | None:
    """A part as the API reads it: camelCase field names, the signature as bytes; None for
    an empty unsigned text part (it says nothing); without call ids unless `ids`."""
    out = {camel(k): v for k, v in part.items()}
    if out.keys() == {"text"} and out["text"] == "":
        return None
    if "thoughtSignature" in out:
        out["thoughtSignature"] = sig_bytes(out["thoughtSignature"])
    for key in ("functionCall", "functionResponse"):
        if key in out and not ids:
            out[key] = {k: v for k, v in out[key].items() if k != "id"}
    return out


def normalized(contents: Sequence[Any], *, ids: bool = False) -> list[dict[str, Any]]:
    out = []
    for content in contents:
        role = content.get("role") or "user"
        parts = [normalized_part(p, ids=ids) for p in content["parts"]]
        out.append(
            {"role": "user" if role == "function" else role, "parts": [p for p in parts if p]}
        )
    return out


def signatures(raw: bytes) -> list[bytes]:
    """Every signature literal in `raw`, as spelled."""
    return [m.group(1) for m in SIGNATURE.finditer(raw)]


def body_of(encoded: EncodedRequest) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(encoded.to_json())
    return parsed


def response_chunks(path: Path) -> list[dict[str, Any]]:
    """The chunks of a response file (SSE, JSON object or JSON array)."""
    raw = body_bytes(path)
    if path.suffix == ".sse":
        return [json.loads(line[5:]) for line in raw.splitlines() if line.startswith(b"data:")]
    value = json.loads(raw)
    return value if isinstance(value, list) else [value]


def response_parts(path: Path) -> list[dict[str, Any]]:
    """Candidate 0's parts of a response, consecutive unsigned plain text parts of one
    kind joined, empty unsigned text parts dropped, a call streamed in pieces whole (as a
    client keeping the turn would)."""
    parts: list[dict[str, Any]] = []
    received = [
        part
        for chunk in response_chunks(path)
        for candidate in chunk.get("candidates") or []
        for part in (candidate.get("content") or {}).get("parts") or []
    ]
    for part in whole_calls(received):
        plain = part.keys() <= {"text", "thought"}
        if plain and not part["text"]:
            continue
        last = parts[-1] if parts else None
        if (
            plain
            and last is not None
            and last.keys() <= {"text", "thought"}
            and last.get("thought", False) == part.get("thought", False)
        ):
            last["text"] += part["text"]
        else:
            parts.append(dict(part))
    return parts


def body_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


# --- conversations from captures ---------------------------------------------------------------


def response_file(folder: Path, n: int) -> Path:
    [path] = folder.glob(f"{n}.response.*")
    return path


def numbers(folder: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in folder.glob("*.response.*"))


def model_of(folder: Path, n: int) -> str:
    meta = folder / f"{n}.meta.json"
    path = json.loads(meta.read_text()).get("path", "") if meta.exists() else ""
    return model_from_path(path) or DEFAULT_MODEL


def events_of(conversation: Conversation) -> list[Event]:
    return list(conversation.pending)


def record_history(conversation: Conversation, request: bytes) -> int:
    """Record what the request holds that the conversation does not; return the prefix."""
    held = recorded_prefix(events_of(conversation), request)
    for message in history(events_of(conversation), request):
        conversation.record_all(message.drafts)
    return held


def record_response(conversation: Conversation, folder: Path, n: int) -> None:
    request = folder / f"{n}.request.json"
    meta = folder / f"{n}.meta.json"
    status = json.loads(meta.read_text()).get("status") if meta.exists() else None
    context = (
        RequestContext.from_body(request.read_bytes(), model=model_of(folder, n))
        if request.exists()
        else None
    )
    body = body_bytes(response_file(folder, n))
    conversation.record_all(list(detect_and_decode(body, request=context, status=status)))


def conversation_through(folder: Path, last: int) -> Conversation:
    """A conversation holding exchanges up to `last` of a folder, as `ingest` records."""
    conversation = Conversation.start()
    for n in numbers(folder):
        if n > last:
            break
        request = folder / f"{n}.request.json"
        if request.exists():
            try:
                record_history(conversation, request.read_bytes())
            except HistoryMismatch:  # an exchange of its own (the errors folder)
                conversation = Conversation.start()
                record_history(conversation, request.read_bytes())
        record_response(conversation, folder, n)
    return conversation


def continuations() -> list[Any]:
    """(folder, N) for each exchange N whose next request continues it."""
    cases = []
    for root in (EXAMPLES, WIRE):
        for folder in sorted(root.iterdir()) if root.is_dir() else []:
            found = numbers(folder)
            for n in found:
                after = folder / f"{n + 1}.request.json"
                this = folder / f"{n}.request.json"
                if not after.exists() or not this.exists():
                    continue
                later = json.loads(after.read_bytes())["contents"]
                earlier = json.loads(this.read_bytes())["contents"]
                if len(later) > len(earlier) and any(c.get("role") == "model" for c in later):
                    cases.append(pytest.param(folder, n, id=f"{root.name}/{folder.name}/{n}"))
    if not WIRE.is_dir():
        cases.append(pytest.param(None, 0, marks=pytest.mark.skip(reason=f"no captures at {WIRE}")))
    return cases


def every_response() -> list[Any]:
    cases = []
    for root in (EXAMPLES, WIRE):
        for folder in sorted(root.iterdir()) if root.is_dir() else []:
            for n in numbers(folder):
                cases.append(pytest.param(folder, n, id=f"{root.name}/{folder.name}/{n}"))
    return cases


def example(name: str) -> Path:
    folder = EXAMPLES / name
    if not folder.is_dir():
        pytest.skip(f"no example {name}")
    return folder


def wire(name: str) -> Path:
    folder = WIRE / name
    if not folder.is_dir():
        pytest.skip(f"no capture {name} at {WIRE}")
    return folder


SETTINGS_KEYS = ("systemInstruction", "tools", "toolConfig", "generationConfig", "safetySettings")


# --- decode → store → encode against the next captured request -----------------------------------


@pytest.mark.parametrize(("folder", "n"), continuations())
def test_encoding_rebuilds_the_next_captured_request(folder: Path, n: int) -> None:
    conversation = conversation_through(folder, n)
    following = (folder / f"{n + 1}.request.json").read_bytes()
    held = record_history(conversation, following)
    wanted = json.loads(following)
    # The model contents of the next request are rebuilt from the stored response, not
    # copied from the request: its history added only what came after them.
    last_model = max(i for i, c in enumerate(wanted["contents"]) if c.get("role") == "model")
    assert held > last_model

    encoded = encode_request(events_of(conversation), config=google_consent(following))
    raw = encoded.to_json()
    body = json.loads(raw)
    assert encoded.model == model_of(folder, n + 1)
    assert "model" not in body
    assert normalized(body["contents"]) == normalized(wanted["contents"])
    for key in SETTINGS_KEYS:
        assert body.get(key) == wanted.get(key), key
    # Same provider, same model: nothing is left out but the Search Suggestions.
    displays = [e for e in events_of(conversation) if isinstance(e, HostedActivity) and e.display]
    assert [(loss.kind, loss.version) for loss in encoded.losses] == [
        ("display", e.originator_version) for e in displays
    ]
    # Every signature the client sent is one of ours, byte for byte once decoded, and
    # ours are the response's literals exactly.
    ours = signatures(raw)
    assert sorted(sig_bytes(json.loads(s)) for s in ours) == sorted(
        sig_bytes(json.loads(s)) for s in signatures(following)
    )
    received = b"".join(body_bytes(response_file(folder, i)) for i in numbers(folder) if i <= n)
    for literal in ours:
        assert literal in received


@pytest.mark.parametrize(("folder", "n"), every_response())
def test_every_response_replays_its_parts_in_order_with_signatures_verbatim(
    folder: Path, n: int
) -> None:
    conversation = conversation_through(folder, n)
    ended = [e for e in events_of(conversation) if isinstance(e, ResponseEnded)][-1]
    response = response_file(folder, n)
    encoded = encode_request(events_of(conversation), config=DEFAULT)
    raw = encoded.to_json()
    body = json.loads(raw)
    parts = response_parts(response)
    if ended.state == "failed" or not parts:
        return  # an error body, a blocked prompt: nothing to replay
    if ended.state != "completed":
        pytest.skip("an interrupted response (its cut parts are covered below)")
    # The response's parts, as the last model content, in order; each of one known kind.
    [last] = [c for c in body["contents"] if c["role"] == "model"][-1:]
    assert [normalized_part(p, ids=True) for p in last["parts"]] == [
        normalized_part(p, ids=True) for p in parts
    ]
    for literal in signatures(body_bytes(response)):
        assert literal in raw
    for content in body["contents"]:
        for part in content["parts"]:
            assert len(part.keys() & PART_FIELDS) <= 1, part
            assert part.get("functionCall") != {}, part


def request_files() -> list[Any]:
    files = sorted(EXAMPLES.glob("*/*.request.json")) if EXAMPLES.is_dir() else []
    files += sorted(WIRE.glob("*/*.request.json")) if WIRE.is_dir() else []
    return [pytest.param(p, id=f"{p.parent.parent.name}/{p.parent.name}/{p.name}") for p in files]


@pytest.mark.parametrize("path", request_files())
def test_a_request_history_records_and_replays_unchanged(path: Path) -> None:
    request = path.read_bytes()
    conversation = Conversation.start()
    assert record_history(conversation, request) == 0
    model = model_of(path.parent, int(path.name.split(".")[0]))
    encoded = encode_request(events_of(conversation), config=DEFAULT, model=model)
    raw = encoded.to_json()
    wanted = json.loads(request)
    assert normalized(json.loads(raw)["contents"], ids=True) == normalized(
        wanted["contents"], ids=True
    )
    for literal in signatures(request):
        assert literal in raw
    assert recorded_prefix(events_of(conversation), request) == len(wanted["contents"])
    assert encoded.losses == []


# --- history (ingest --request) ------------------------------------------------------------------


def test_history_drafts_by_position() -> None:
    request = (example("thinking_function_roundtrip") / "2.request.json").read_bytes()
    messages = history_drafts(request, model="gemini-3-pro-preview")
    assert [(m.index, m.role) for m in messages] == [(0, "user"), (1, "assistant"), (2, "user")]
    assert [type(d).__name__ for d in messages[0].drafts] == ["UserMessage"]
    started, *parts, ended = messages[1].drafts
    assert isinstance(started, ResponseStarted) and started.origin == "request"
    assert started.provider == "google" and started.model == "gemini-3-pro-preview"
    assert re.fullmatch(r"request:[0-9a-f]{16}:1", started.response_id)
    assert isinstance(ended, ResponseEnded) and ended.state == "completed"
    assert ended.finish_reason == "tool_use"
    reasoning, call = parts
    assert isinstance(reasoning, Reasoning) and reasoning.payload is None
    assert reasoning.text.startswith("**Identifier la ville**")
    assert isinstance(call, ToolCallRequested)
    assert call.call_id == f"{started.response_id}:call:0"
    assert call.arguments == {"city": "Lisbon", "unit": "celsius"}
    assert call.payload is not None
    assert call.payload.binding == {"model": "gemini-3-pro-preview"}
    [result] = messages[2].drafts
    assert isinstance(result, ToolCallResponded) and result.call_id == call.call_id
    assert json.loads(result.content) == {"temperature_c": 21, "conditions": "ensoleillé"}
    assert not result.is_error
    # Deterministic: the same body gives the same ids.
    assert history_drafts(request, model="gemini-3-pro-preview") == messages


def test_history_binds_to_the_recorded_model_when_the_body_names_none() -> None:
    folder = example("thinking_function_roundtrip")
    conversation = conversation_through(folder, 1)
    conversation.record(UserMessage(blocks=("Et à Porto ?",)))
    body = json.loads((folder / "2.request.json").read_bytes())
    body["contents"].append({"role": "user", "parts": [{"text": "Et à Porto ?"}]})
    body["contents"].append(body["contents"][1])  # a model content the request adds
    request = json.dumps(body).encode()
    with pytest.raises(HistoryMismatch):
        history(events_of(conversation), request)  # the conversation lacks the result
    conversation = conversation_through(folder, 1)
    messages = history(events_of(conversation), request)
    assert [m.index for m in messages] == [2, 3, 4]
    call = next(d for d in messages[-1].drafts if isinstance(d, ToolCallRequested))
    recorded = next(e for e in events_of(conversation) if isinstance(e, ResponseStarted))
    assert call.payload is not None and call.payload.binding == {"model": recorded.model}


def test_function_results_answer_calls_by_id_then_by_name() -> None:
    calls = [
        {"functionCall": {"name": "a", "args": {}, "id": "c1"}},
        {"functionCall": {"name": "b", "args": {"n": 1}}},
        {"functionCall": {"name": "b", "args": {"n": 2}}},
    ]
    results = [
        {"functionResponse": {"name": "b", "response": {"result": "first b"}}},
        {"functionResponse": {"name": "a", "id": "c1", "response": {"error": "boom"}}},
        {"functionResponse": {"name": "b", "id": "client-own-id", "response": {"x": 1, "y": 2}}},
        {"functionResponse": {"name": "zzz", "response": {"result": "nobody asked"}}},
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
    ]
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": calls},
            {"role": "user", "parts": results},
        ]
    }
    request = json.dumps(body).encode()
    messages = history_drafts(request)
    call_ids = [d.call_id for d in messages[1].drafts if isinstance(d, ToolCallRequested)]
    assert call_ids[0] == "c1" and call_ids[1].endswith(":call:1")
    drafts = messages[2].drafts
    first_b, error_a, second_b, orphan, image = drafts
    assert isinstance(first_b, ToolCallResponded) and first_b.call_id == call_ids[1]
    assert first_b.content == "first b"
    assert isinstance(error_a, ToolCallResponded) and error_a.call_id == "c1"
    assert (error_a.content, error_a.is_error) == ("boom", True)
    assert isinstance(second_b, ToolCallResponded) and second_b.call_id == call_ids[2]
    assert json.loads(second_b.content) == {"x": 1, "y": 2}
    for kept in (orphan, image):
        assert isinstance(kept, UnknownArtifact) and kept.payload.format == "user_part"
    # Recorded, they replay unchanged (the result given a client id is sent without it,
    # since its call had none).
    conversation = Conversation.start()
    for message in messages:
        conversation.record_all(message.drafts)
    replayed = body_of(encode_request(events_of(conversation), config=DEFAULT, model="gemini-x"))
    assert normalized(replayed["contents"]) == normalized(body["contents"])
    sent = replayed["contents"][2]["parts"]
    assert sent[1]["functionResponse"]["id"] == "c1"
    assert "id" not in sent[2]["functionResponse"]
    assert sent[2]["functionResponse"]["response"] == {"x": 1, "y": 2}


def test_a_conversation_must_be_a_prefix_of_the_request() -> None:
    folder = example("thinking_function_roundtrip")
    request = (folder / "2.request.json").read_bytes()
    conversation = conversation_through(folder, 1)
    assert recorded_prefix(events_of(conversation), request) == 2
    # Re-sent in URL-safe base64, the signature is the same part.
    match = SIGNATURE.search(request)
    assert match is not None
    literal = match.group(1)
    urlsafe = literal.replace(b"+", b"-").replace(b"/", b"_").rstrip(b'="') + b'"'
    assert urlsafe != literal
    assert recorded_prefix(events_of(conversation), request.replace(literal, urlsafe)) == 2
    # Another signature is another part.
    forged = literal[:5] + (b"A" if literal[5:6] != b"A" else b"B") + literal[6:]
    with pytest.raises(HistoryMismatch, match=r"contents\[1\]"):
        recorded_prefix(events_of(conversation), request.replace(literal, forged))
    other = Conversation.start()
    other.record(UserMessage(blocks=("Something else",)))
    with pytest.raises(HistoryMismatch, match=r"contents\[0\]"):
        recorded_prefix(events_of(other), request)
    longer = conversation_through(folder, 2)
    with pytest.raises(HistoryMismatch, match="more than the request"):
        recorded_prefix(events_of(longer), (folder / "1.request.json").read_bytes())
    inside = Conversation.start()
    inside.record(UserMessage(blocks=("one",)))
    two_parts = json.dumps(
        {"contents": [{"role": "user", "parts": [{"text": "one"}, {"text": "two"}]}]}
    ).encode()
    with pytest.raises(HistoryMismatch, match="ends inside"):
        recorded_prefix(events_of(inside), two_parts)
    assert issubclass(HistoryMismatch, DecodeError)
    with pytest.raises(DecodeError):
        history_drafts(b"[1, 2]")
    with pytest.raises(DecodeError, match="role"):
        history_drafts(b'{"contents": [{"role": "assistant", "parts": []}]}')


# --- bindings ------------------------------------------------------------------------------------


def test_a_signature_bound_to_another_model_is_left_out() -> None:
    folder = example("thinking_function_roundtrip")
    conversation = conversation_through(folder, 1)
    record_history(conversation, (folder / "2.request.json").read_bytes())
    events = events_of(conversation)
    response = (folder / "1.response.sse").read_bytes()
    [literal] = signatures(response)

    same = encode_request(events, config=DEFAULT, model="models/gemini-3-pro-preview")
    assert literal in same.to_json() and same.losses == []
    assert same.model == "gemini-3-pro-preview"

    older = encode_request(events, config=DEFAULT, model="gemini-2.5-flash")
    raw = older.to_json()
    assert literal not in raw and b"thoughtSignature" not in raw
    [model] = [c for c in body_of(older)["contents"] if c["role"] == "model"]
    assert model["parts"][1] == {
        "functionCall": {"name": "get_weather", "args": {"city": "Lisbon", "unit": "celsius"}}
    }
    assert [(loss.event, loss.kind) for loss in older.losses] == [("ToolCallRequested", "payload")]
    assert "gemini-3-pro-preview" in older.losses[0].reason

    # A Gemini 3 target gets Google's placeholder on the first unsigned call instead.
    newer = encode_request(events, config=DEFAULT, model="gemini-3-flash-preview")
    [model] = [c for c in body_of(newer)["contents"] if c["role"] == "model"]
    assert model["parts"][1]["thoughtSignature"] == SKIP_SIGNATURE
    assert literal not in newer.to_json()


def test_a_signed_text_part_bound_elsewhere_becomes_plain_text() -> None:
    folder = example("grounding_search_stream")
    conversation = conversation_through(folder, 1)
    config = google_consent((folder / "1.request.json").read_bytes())
    encoded = encode_request(events_of(conversation), config=config, model="gemini-2.0-flash")
    body = body_of(encoded)
    assert b"thoughtSignature" not in encoded.to_json()
    texts = [e.text for e in events_of(conversation) if isinstance(e, AssistantText)]
    model = body["contents"][1]
    assert [p["text"] for p in model["parts"]] == texts
    assert sorted(loss.kind for loss in encoded.losses) == ["display", "payload"]


def test_signature_bytes_reads_both_alphabets() -> None:
    data = bytes(range(256))
    standard = base64.b64encode(data).decode()
    urlsafe = base64.urlsafe_b64encode(data).decode().rstrip("=")
    assert signature_bytes(standard) == signature_bytes(urlsafe) == data
    assert signature_bytes("not base64!") == "not base64!"


# --- hosted work, interruptions ----------------------------------------------------------------


def test_code_execution_replays_both_parts_and_a_cut_run_is_left_out() -> None:
    folder = example("code_execution")
    conversation = conversation_through(folder, 1)
    config = google_consent((folder / "1.request.json").read_bytes())
    body = body_of(encode_request(events_of(conversation), config=config))
    kinds = [next(iter(p.keys() & PART_FIELDS)) for p in body["contents"][1]["parts"]]
    assert kinds == [
        p
        for p in (
            next(iter(q.keys() & PART_FIELDS)) for q in response_parts(response_file(folder, 1))
        )
    ]
    assert body["tools"] == [{"codeExecution": {}}]

    rid = ResponseId("cut")
    cut = Conversation.start()
    code = b'{"executableCode":{"language":"PYTHON","code":"print(1)"}}'
    cut.record_all(
        [
            UserMessage(blocks=("run it",)),
            ResponseStarted(response_id=rid, provider="google", model="gemini-2.5-pro"),
            HostedActivity(
                activity_id=ActivityId("cut:code_execution:0"),
                name="code_execution",
                state="started",
                response_id=rid,
                input={"code": "print(1)"},
                payload=ProviderPayload.of("google", "part", code),
            ),
            ResponseEnded(response_id=rid, state="abandoned"),
        ]
    )
    encoded = encode_request(events_of(cut), config=DEFAULT)
    assert b"executableCode" not in encoded.to_json()
    assert [(loss.event, loss.kind) for loss in encoded.losses] == [
        ("HostedActivity", "hosted_activity")
    ]
    assert "abandoned" in encoded.losses[0].reason


def test_a_cut_function_call_is_left_out_and_listed() -> None:
    rid = ResponseId("r")
    conversation = Conversation.start()
    partial = b'{"functionCall":{"name":"f","partialArgs":[]}}'
    conversation.record_all(
        [
            UserMessage(blocks=("hi",)),
            ResponseStarted(response_id=rid, provider="google", model="gemini-3-pro-preview"),
            AssistantText(response_id=rid, text="Calling"),
            UnknownArtifact(
                response_id=rid, payload=ProviderPayload.of("google", "partial", partial)
            ),
            ResponseEnded(response_id=rid, state="abandoned"),
        ]
    )
    encoded = encode_request(events_of(conversation), config=DEFAULT)
    assert body_of(encoded)["contents"][1] == {"role": "model", "parts": [{"text": "Calling"}]}
    assert [(loss.event, loss.kind) for loss in encoded.losses] == [
        ("UnknownArtifact", "unknown_artifact")
    ]


def test_function_results_and_their_ids() -> None:
    folder = example("array_stream")
    conversation = conversation_through(folder, 1)
    calls = [e for e in events_of(conversation) if isinstance(e, ToolCallRequested)]
    conversation.record(ToolCallResponded(call_id=calls[0].call_id, content="Dîner à 19 h"))
    conversation.record(
        ToolCallResponded(call_id=calls[1].call_id, content="service down", is_error=True)
    )
    body = body_of(encode_request(events_of(conversation), config=DEFAULT))
    assert body["contents"][-1] == {
        "role": "user",
        "parts": [
            {
                "functionResponse": {
                    "name": "list_events",
                    "response": {"result": "Dîner à 19 h"},
                    "id": "call-8f3k2q",
                }
            },
            {
                "functionResponse": {
                    "name": "get_weather",
                    "response": {"error": "service down"},
                    "id": "call-a71mze",
                }
            },
        ],
    }
    # A call without an id: its result has none (never a derived id); JSON stays JSON.
    folder = example("thinking_function_roundtrip")
    conversation = conversation_through(folder, 1)
    [call] = [e for e in events_of(conversation) if isinstance(e, ToolCallRequested)]
    conversation.record(ToolCallResponded(call_id=call.call_id, content='{"temp": 21}'))
    conversation.record(UserMessage(blocks=("Merci !",)))
    body = body_of(encode_request(events_of(conversation), config=DEFAULT, user="Et demain ?"))
    assert body["contents"][-1] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"temp": 21}}},
            {"text": "Merci !"},
            {"text": "Et demain ?"},
        ],
    }


def test_context_is_a_tagged_user_envelope_never_a_system_instruction() -> None:
    folder = example("code_execution")
    conversation = conversation_through(folder, 1)
    conversation.record(ContextInjected(source="steering", text="Réponds en anglais."))
    conversation.record(ContextInjected(source='odd"source', text="x"))
    body = body_of(encode_request(events_of(conversation), config=DEFAULT))
    assert "systemInstruction" not in body
    assert {c["role"] for c in body["contents"]} == {"user", "model"}
    assert body["contents"][-1] == {
        "role": "user",
        "parts": [
            {"text": '<context source="steering">Réponds en anglais.</context>'},
            {"text": '<context source="odd&quot;source">x</context>'},
        ],
    }
    assert context_envelope("context", "t") == '<context source="context">t</context>'
    # With a system instruction recorded, context still goes to a user content.
    grounded = conversation_through(example("grounding_search_stream"), 1)
    grounded.record(ContextInjected(source="context", text="Il pleut."))
    body = body_of(encode_request(events_of(grounded), config=DEFAULT))
    assert body["systemInstruction"] == {
        "parts": [{"text": "Réponds en français, avec les sources."}]
    }
    assert body["contents"][-1]["parts"] == [
        {"text": '<context source="context">Il pleut.</context>'}
    ]


def test_encoding_never_writes() -> None:
    conversation = conversation_through(example("thinking_function_roundtrip"), 2)
    before = events_of(conversation)
    encode_request(before, config=DEFAULT, user="next")
    encode_request(before, config=DEFAULT, model="gemini-2.0-flash")
    assert events_of(conversation) == before


# --- other providers -----------------------------------------------------------------------------

ANTHROPIC = ROOT / "examples" / "anthropic"
OPENAI = ROOT / "examples" / "openai"
OPAQUE = re.compile(rb'"(?:signature|encrypted_content|encrypted_index|data)"\s*:\s*"([^"]{16,})"')


def anthropic_conversation(folder: Path) -> Conversation:
    conversation = Conversation.start()
    for n in numbers(folder):
        request = (folder / f"{n}.request.json").read_bytes()
        try:
            held = anthropic_history.recorded_prefix(events_of(conversation), request)
        except anthropic_history.HistoryMismatch:
            conversation, held = Conversation.start(), 0
        for message in anthropic_history.history_drafts(request, start=held):
            conversation.record_all(message.drafts)
        context = AnthropicContext.from_body(request)
        body = response_file(folder, n).read_bytes()
        conversation.record_all(list(anthropic_decode.detect_and_decode(body, request=context)))
    return conversation


def openai_conversation(folder: Path) -> Conversation:
    """Each response of the folder, the user's question first and a result for each call
    (the OpenAI request history is another adapter's)."""
    conversation = Conversation.start()
    for n in numbers(folder):
        request = (folder / f"{n}.request.json").read_bytes()
        if n == 1:
            text = json.dumps(json.loads(request)["input"], ensure_ascii=False)
            conversation.record(UserMessage(blocks=(text,)))
        context = OpenAIContext.from_body(request)
        body = response_file(folder, n).read_bytes()
        drafts = list(openai_decode.detect_and_decode(body, request=context))
        first = drafts[0]
        if isinstance(first, ResponseStarted) and first.response_id in conversation.state.responses:
            continue  # the same response again (streamed, then not)
        conversation.record_all(drafts)
        for call_id in conversation.open_calls():
            conversation.record(ToolCallResponded(call_id=call_id, content='{"ok": true}'))
    return conversation


def foreign_cases() -> list[Any]:
    cases = []
    for root, provider in ((ANTHROPIC, "anthropic"), (OPENAI, "openai")):
        for folder in sorted(root.iterdir()) if root.is_dir() else []:
            if folder.is_dir() and folder.name != "errors":
                cases.append(pytest.param(folder, provider, id=f"{provider}/{folder.name}"))
    return cases


def expected_losses(events: Sequence[Event]) -> list[tuple[int, str]]:
    """What a Gemini request must leave out of a conversation no Google response is in,
    by the rules the module documents: foreign reasoning, hosted activities (one per
    activity), payloads of text, calls and results, unknown artifacts, citations, the
    foreign native settings and hosted tool declarations."""
    out: list[tuple[int, str]] = []
    seen: set[str] = set()
    newest = None
    for event in events:
        version = event.originator_version
        if isinstance(event, ResponseStarted) and event.settings.native is not None:
            newest = event
        if isinstance(event, Reasoning):
            out.append((version, "reasoning"))
        elif isinstance(event, HostedActivity):
            if event.activity_id not in seen:
                seen.add(event.activity_id)
                out.append((version, "hosted_activity"))
            if event.display is not None:
                out.append((version, "display"))
        elif isinstance(event, AssistantText):
            if event.payload is not None:
                out.append((version, "payload"))
            if event.attributions:
                out.append((version, "citations"))
        elif isinstance(event, ToolCallRequested | ToolCallResponded):
            if event.payload is not None:
                out.append((version, "payload"))
        elif isinstance(event, UnknownArtifact):
            out.append((version, "unknown_artifact"))
    if newest is not None:
        out.append((newest.originator_version, "settings"))
        hosted = [t for t in newest.settings.tools if t.hosted]
        out.extend((newest.originator_version, "tool_declaration") for _ in hosted)
    return sorted(out)


def assert_generate_content_structure(body: dict[str, Any]) -> None:
    """The structure `generateContent` requires: contents of role user|model with parts of
    one known kind each; every model content's function calls answered, in the next
    content, by results of the same names; nothing but API fields at the top."""
    assert set(body) <= {
        "contents",
        "systemInstruction",
        "tools",
        "toolConfig",
        "generationConfig",
        "safetySettings",
    }
    contents = body["contents"]
    assert contents and contents[0]["role"] == "user"
    for index, content in enumerate(contents):
        assert content["role"] in ("user", "model")
        assert content["parts"]
        if index:
            assert content["role"] != contents[index - 1]["role"]  # merged
        for part in content["parts"]:
            assert len(part.keys() & PART_FIELDS) == 1, part
            assert part.keys() <= PART_FIELDS | {"thought", "thoughtSignature"}, part
            if "text" in part:
                assert isinstance(part["text"], str) and part["text"]
        called = [p["functionCall"]["name"] for p in content["parts"] if "functionCall" in p]
        if called and content["role"] == "model":
            following = contents[index + 1] if index + 1 < len(contents) else None
            assert following is not None and following["role"] == "user"
            answered = [
                p["functionResponse"]["name"] for p in following["parts"] if "functionResponse" in p
            ]
            assert answered == called
            for part in following["parts"]:
                if "functionResponse" in part:
                    assert isinstance(part["functionResponse"]["response"], dict)
        for part in content["parts"]:
            if "functionCall" in part:
                assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}", part["functionCall"]["name"])
                assert isinstance(part["functionCall"]["args"], dict)
    for tool in body.get("tools", []):
        for declaration in tool.get("functionDeclarations", []):
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}", declaration["name"])


@pytest.mark.parametrize(("folder", "provider"), foreign_cases())
def test_another_providers_conversation_replays_portably_with_a_loss_report(
    folder: Path, provider: str
) -> None:
    conversation = (
        anthropic_conversation(folder) if provider == "anthropic" else openai_conversation(folder)
    )
    events = events_of(conversation)
    with pytest.raises(ConfigurationError, match="no model"):
        encode_request(events, config=DEFAULT)
    encoded = encode_request(events, config=DEFAULT, model="gemini-2.5-flash")
    raw = encoded.to_json()
    body = json.loads(raw)
    assert_generate_content_structure(body)
    captured = b"".join(p.read_bytes() for p in folder.iterdir())
    for secret in OPAQUE.findall(captured):
        assert secret not in raw
    assert sorted((loss.version, loss.kind) for loss in encoded.losses) == expected_losses(events)
    assert all(loss.reason for loss in encoded.losses)
    # Every text the conversation holds is sent, in order.
    texts: list[str] = []
    for event in events:
        if isinstance(event, UserMessage):
            texts.extend(t for t in event.blocks if t)
        elif isinstance(event, AssistantText) and event.text:
            texts.append(event.text)
    sent = [p["text"] for c in body["contents"] for p in c["parts"] if "text" in p]
    assert sent == texts
    # To Gemini 3, the first call of each model content carries the placeholder.
    gemini3 = body_of(encode_request(events, config=DEFAULT, model="gemini-3-pro-preview"))
    for content in gemini3["contents"]:
        calls = [p for p in content["parts"] if "functionCall" in p]
        if calls:
            assert calls[0]["thoughtSignature"] == SKIP_SIGNATURE
            assert all("thoughtSignature" not in p for p in calls[1:])


def test_portable_settings_and_tool_names() -> None:
    conversation = anthropic_conversation(example_of(ANTHROPIC, "thinking_tool_roundtrip"))
    events = events_of(conversation)
    started = [e for e in events if isinstance(e, ResponseStarted)][-1]
    body = body_of(encode_request(events, config=DEFAULT, model="gemini-2.5-flash"))
    settings = started.settings
    if settings.system:
        assert body["systemInstruction"] == {"parts": [{"text": settings.system}]}
    declared = [t for t in settings.tools if not t.hosted]
    assert [d["name"] for d in body["tools"][0]["functionDeclarations"]] == [
        d.name for d in declared
    ]
    assert body["generationConfig"] == {"maxOutputTokens": settings.max_tokens}
    assert function_name("get_weather") == "get_weather"
    odd = function_name("récupérer/météo du jour")
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}", odd)
    assert odd == function_name("récupérer/météo du jour")
    assert function_name("9lives") != "9lives" and function_name("9lives").startswith("_")


def example_of(root: Path, name: str) -> Path:
    folder = root / name
    if not folder.is_dir():
        pytest.skip(f"no example {name}")
    return folder


# --- settings, toolConfig, validation ------------------------------------------------------------


def with_settings(request: dict[str, Any], model: str = "gemini-2.5-flash") -> list[Event]:
    """A Gemini conversation whose one response answered `request`."""
    context = RequestContext.from_body(json.dumps(request).encode(), model=model)
    rid = ResponseId("r1")
    conversation = Conversation.start()
    conversation.record_all(
        [
            UserMessage(blocks=("hello",)),
            ResponseStarted(
                response_id=rid, provider="google", model=model, settings=context.settings
            ),
            AssistantText(response_id=rid, text="hi"),
            ResponseEnded(response_id=rid, state="completed", finish_reason="stop"),
        ]
    )
    return events_of(conversation)


WEATHER = {"name": "get_weather", "parameters": {"type": "object"}}
SEARCH = GoogleConfig.from_block({"hosted_tools": {"google_search": {"enable": True}}})


def test_tool_config_is_never_broadened_to_hosted_tools() -> None:
    tools = [{"functionDeclarations": [WEATHER]}, {"googleSearch": {}}]
    # (Without consent, googleSearch is not declared: see the test after this one.)
    forcing = {
        "functionCallingConfig": {
            "mode": "ANY",
            "allowedFunctionNames": ["googleSearch", "get_weather"],
        }
    }
    encoded = encode_request(with_settings({"tools": tools, "toolConfig": forcing}), config=SEARCH)
    body = body_of(encoded)
    assert body["toolConfig"] == {
        "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}
    }
    assert [loss.kind for loss in encoded.losses] == ["tool_choice"]
    assert "googleSearch" in encoded.losses[0].reason

    only_hosted = {
        "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["googleSearch"]}
    }
    encoded = encode_request(
        with_settings({"tools": tools, "toolConfig": only_hosted}), config=SEARCH
    )
    assert "toolConfig" not in body_of(encoded)
    assert [loss.kind for loss in encoded.losses] == ["tool_choice"]

    # ANY forces a function: with only hosted tools declared it is left out.
    hosted_only = {
        "tools": [{"googleSearch": {}}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
    }
    encoded = encode_request(with_settings(hosted_only), config=SEARCH)
    assert "toolConfig" not in body_of(encoded)
    assert [loss.kind for loss in encoded.losses] == ["tool_choice"]

    # Enabling a hosted tool by configuration never touches the mode, nor retrieval.
    auto = {
        "tools": [{"functionDeclarations": [WEATHER]}],
        "toolConfig": {
            "functionCallingConfig": {"mode": "ANY"},
            "retrievalConfig": {"languageCode": "fr"},
        },
    }
    config = GoogleConfig.from_block({"hosted_tools": {"google_search": {"enable": True}}})
    encoded = encode_request(with_settings(auto), config=config)
    body = body_of(encoded)
    assert body["toolConfig"] == auto["toolConfig"]
    assert body["tools"] == [{"functionDeclarations": [WEATHER]}, {"googleSearch": {}}]
    assert encoded.losses == []


def test_scope_tool_config_rules() -> None:
    calling = {"functionCallingConfig": {"mode": "AUTO"}}
    assert scope_tool_config(calling, ["f"], []) == (calling, None)
    assert scope_tool_config(calling, [], []) == (None, None)
    assert (
        scope_tool_config({"functionCallingConfig": {"mode": "NONE"}}, [], ["googleSearch"])[1]
        is None
    )
    scoped, why = scope_tool_config(
        {"function_calling_config": {"mode": "ANY", "allowed_function_names": ["nope"]}}, ["f"], []
    )
    assert scoped is None and why is not None and "not declared" in why
    scoped, why = scope_tool_config("ANY", ["f"], [])
    assert scoped is None and why is not None


def test_configuration_overrides_the_recorded_settings() -> None:
    request = {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [{"functionDeclarations": [WEATHER], "codeExecution": {}}, {"googleSearch": {}}],
        "generationConfig": {"temperature": 0.2, "maxOutputTokens": 100},
        "safetySettings": [{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"}],
    }
    events = with_settings(request)
    unchanged = body_of(encode_request(events, config=google_consent(request)))
    for key, value in request.items():
        assert unchanged[key] == value, key
    # Without consent, the recorded hosted tools are not declared; the functions are.
    unconsented = encode_request(events, config=DEFAULT)
    assert body_of(unconsented)["tools"] == [{"functionDeclarations": [WEATHER]}]
    assert sorted(loss.reason.split(":")[0] for loss in unconsented.losses) == [
        "hosted tool code_execution is not declared",
        "hosted tool google_search is not declared",
    ]
    assert {loss.kind for loss in unconsented.losses} == {"tool_declaration"}
    assert unconsented.kept_declared == ()
    config = GoogleConfig.from_block(
        {
            "model": "gemini-2.5-pro",
            "max_output_tokens": 512,
            "thinking": {"include_thoughts": True, "thinking_budget": 2048},
            "hosted_tools": {
                "code_execution": {"enable": False},
                "google_search": {"enable": False},
                "url_context": {"enable": True},
            },
        }
    )
    encoded = encode_request(events, config=config)
    body = body_of(encoded)
    assert encoded.model == "gemini-2.5-pro"
    assert body["tools"] == [{"functionDeclarations": [WEATHER]}, {"urlContext": {}}]
    assert body["generationConfig"] == {
        "temperature": 0.2,
        "maxOutputTokens": 512,
        "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 2048},
    }
    assert (
        encode_request(events, config=config, model="gemini-2.5-flash").model == "gemini-2.5-flash"
    )
    # A recorded thinkingConfig the target model cannot take is left out, and listed.
    thinking = with_settings({"generationConfig": {"thinkingConfig": {"thinkingBudget": 1024}}})
    encoded = encode_request(thinking, config=DEFAULT, model="gemini-2.0-flash")
    assert "generationConfig" not in body_of(encoded)
    assert [loss.kind for loss in encoded.losses] == ["settings"]


@pytest.mark.parametrize(
    ("block", "model", "match"),
    [
        ({"hosted_tools": {"google_search": {"enable": True}}}, "gemini-1.0-pro", "not available"),
        ({"hosted_tools": {"google_search": {"enable": True}}}, "gemini-pro", "not available"),
        (
            {"hosted_tools": {"google_search": {"enable": True}}},
            "gemini-1.5-pro-002",
            "not available",
        ),
        ({"hosted_tools": {"url_context": {"enable": True}}}, "gemini-1.5-flash", "not available"),
        (
            {"hosted_tools": {"code_execution": {"enable": True}}},
            "gemini-2.0-flash-lite",
            "not available",
        ),
        ({"hosted_tools": {"google_search": {"enable": True}}}, "gemma-3-27b-it", "not available"),
        (
            {"hosted_tools": {"google_search": {"enable": True}}},
            "gemini-2.5-flash-preview-tts",
            "not available",
        ),
        ({"hosted_tools": {"google_search": {"enable": True}}}, "my-tuned-thing", "cannot tell"),
        (
            {
                "base_url": "https://llm-gateway.example.com/v1beta",
                "hosted_tools": {"code_execution": {"enable": True}},
            },
            "gemini-2.5-flash",
            "neither the Gemini API nor Vertex",
        ),
        (
            {
                "endpoint_serves_hosted_tools": False,
                "hosted_tools": {"url_context": {"enable": True}},
            },
            "gemini-2.5-flash",
            "endpoint_serves_hosted_tools = false",
        ),
        ({"thinking": {"thinking_budget": 1024}}, "gemini-2.0-flash", "does not think"),
        ({"thinking": {"thinking_budget": 0}}, "gemini-2.5-pro", "cannot turn"),
        ({"thinking": {"thinking_budget": 0}}, "gemini-3-pro-preview", "cannot turn"),
    ],
)
def test_settings_a_model_or_endpoint_cannot_serve_fail_before_any_request(
    block: dict[str, Any], model: str, match: str
) -> None:
    config = GoogleConfig.from_block(block)
    with pytest.raises(ConfigurationError, match=match):
        encode_request(with_settings({}), config=config, model=model)


@pytest.mark.parametrize(
    ("model", "tool", "served"),
    [
        ("gemini-2.0-flash", "google_search", True),
        ("gemini-2.0-flash-001", "url_context", True),
        ("gemini-2.5-flash-lite", "google_search", True),
        ("gemini-1.5-pro", "code_execution", True),
        ("gemini-3-pro-preview", "url_context", True),
        ("gemini-flash-latest", "google_search", True),
        ("models/gemini-2.5-pro", "code_execution", True),
        ("gemini-2.5-flash-image", "google_search", False),
        ("gemini-3-pro-image-preview", "google_search", True),
        ("gemini-embedding-001", "code_execution", False),
        ("gemini-1.5-flash", "google_search", False),
        ("gemini-2.5-flash", "googleMaps", True),
        ("something-else", "google_search", None),
    ],
)
def test_the_hosted_tool_table(model: str, tool: str, served: bool | None) -> None:
    assert serves(model, tool) is served


def test_endpoint_rules() -> None:
    vertex = "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/publishers/google"
    config = GoogleConfig.from_block({"base_url": vertex})
    validate_hosted_tools(config, "gemini-2.5-pro", ["google_search", "codeExecution"])
    GoogleConfig.from_block({"base_url": "https://aiplatform.googleapis.com/v1/publishers/google"})
    with pytest.raises(ConfigurationError, match="Vertex AI host"):
        GoogleConfig.from_block(
            {"base_url": "https://us-central1-aiplatform.googleapis.com/v1beta"}
        )
    loopback = GoogleConfig.from_block({"base_url": "http://127.0.0.1:8080/v1beta"})
    validate_hosted_tools(loopback, "gemini-2.5-flash", ["url_context"])
    forwarded = GoogleConfig.from_block(
        {"base_url": "https://gw.example.com/gemini", "endpoint_serves_hosted_tools": True}
    )
    validate_hosted_tools(forwarded, "gemini-2.5-flash", ["google_search"])
    for bad in ("ftp://example.com", "https://generativelanguage.googleapis.com/v1beta?key=x"):
        with pytest.raises(ConfigurationError, match="base_url"):
            GoogleConfig.from_block({"base_url": bad})


@pytest.mark.parametrize(
    ("block", "key"),
    [
        ({"modle": "x"}, "providers.google: unknown key 'modle'"),
        (
            {"hosted_tools": {"web_search": {"enable": True}}},
            "providers.google.hosted_tools: unknown key 'web_search'",
        ),
        (
            {"hosted_tools": {"google_search": {"enable": True, "max_uses": 3}}},
            "hosted_tools.google_search: unknown key 'max_uses'",
        ),
        ({"thinking": {"budget": 3}}, "providers.google.thinking: unknown key 'budget'"),
        ({"max_output_tokens": 0}, "providers.google.max_output_tokens"),
        ({"thinking": {"thinking_budget": -2}}, "thinking.thinking_budget"),
        ({"model": " "}, "model name is empty"),
    ],
)
def test_configuration_errors_name_the_key(block: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        GoogleConfig.from_block(block)
    assert key in str(raised.value)


def test_configuration_defaults() -> None:
    config = GoogleConfig.from_config({})
    assert config.base_url == "https://generativelanguage.googleapis.com/v1beta"
    assert config.hosted_tools.enabled() == []
    assert not config.hosted_tools.enables("google_search")
    with pytest.raises(ConfigurationError, match=r"providers\.google must be a table"):
        GoogleConfig.from_config({"providers": {"google": 3}})
    enabled = GoogleConfig.from_config(
        {"providers": {"google": {"hosted_tools": {"url_context": {"enable": True}}}}}
    )
    assert enabled.hosted_tools.enabled() == ["url_context"]


def test_model_names_and_paths() -> None:
    assert model_path("gemini-2.5-flash") == "models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert (
        model_path("models/gemini-2.5-flash", stream=False)
        == "models/gemini-2.5-flash:generateContent"
    )
    assert (
        model_path("tunedModels/my-model-123", stream=False)
        == "tunedModels/my-model-123:generateContent"
    )
    for bad in ("", "gemini/../../x", "gemini?key=1", "gemini#x", "a b"):
        with pytest.raises(ConfigurationError, match="not a Gemini model name"):
            model_path(bad)
    generation = model_generation("gemini-2.5-flash-lite-preview-06-17")
    assert generation is not None and generation.version == (2, 5)
    assert generation.variant.startswith("flash-lite")
    assert model_generation("claude-sonnet-4-5") is None


def test_the_request_goes_to_the_model_it_names() -> None:
    events = with_settings({}, model="gemini-2.5-pro")
    encoded = encode_request(events, config=DEFAULT)
    assert encoded.model == "gemini-2.5-pro"
    assert encoded.path() == "models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    assert encoded.path(stream=False) == "models/gemini-2.5-pro:generateContent"
    with pytest.raises(ConfigurationError, match="not a Gemini model name"):
        encode_request(events, config=DEFAULT, model="x/../y")


def test_loss_reports_round_trip_as_data() -> None:
    encoded = encode_request(
        events_of(conversation_through(example("grounding_search_stream"), 1)),
        config=DEFAULT,
    )
    data = msgspec.to_builtins(encoded.losses)
    assert data and set(data[0]) == {"version", "event", "kind", "reason"}
    assert data[0]["kind"] == "display"
    assert "<" not in data[0]["reason"]  # the suggestion's HTML is never in a report
