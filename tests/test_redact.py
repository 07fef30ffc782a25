"""Redaction overlays (issue 19, item 3): `convstore redact` hides a span of an event's
text, or all of it, from every portable reading (show, every export, the search index,
the web view, replay) without touching the stored bytes, on real SQLite files and real
PostgreSQL, plain and encrypted. Same-provider replay is refused only where the provider
signed the hidden text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from convstore.adapters import cli
from convstore.adapters.web.app import viewer_app
from convstore.domain import (
    AssistantText,
    Attribution,
    ConversationId,
    ResponseEnded,
    ResponseId,
    ResponseStarted,
    Source,
    TextRange,
    UserMessage,
)
from convstore.domain.errors import ResponseBeingWritten
from convstore.domain.redaction import MARK, marked_blocks, merged, redacted
from convstore.projections.search import SearchIndex, follower
from convstore.projections.verify import verify
from convstore.storage import Store, open_store
from tests.test_forget import drop_key_schema
from tests.viewing import capture_files, ingest

SECRET = "sk-zebra-umbrella-4242"
ANSWER_SECRET = "hunter2koicha"
KEPT = "genmaicha"
"""A word of the redacted message outside the span: it stays readable and searchable."""


@pytest.fixture(params=[False, True], ids=["plain", "encrypted"])
def url(store_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A store URL on each backend, plain and encrypted."""
    if request.param:
        open_store(store_url, encrypt=True).close()
    try:
        yield store_url
    finally:
        if request.param:
            drop_key_schema(store_url)


def _converse(store: Store) -> tuple[ConversationId, int, int]:
    """A conversation holding SECRET in a user message and ANSWER_SECRET in assistant
    text cited after it; (its id, the message's version, the text's version)."""
    service = store.service
    cid = service.start("redaction", ["tea"])
    service.add_user_input(
        cid, [UserMessage(blocks=(f"my key is {SECRET} for {KEPT}", "and more"))]
    )
    rid = ResponseId(f"msg_{uuid4().hex}")
    text = f"Noted {ANSWER_SECRET}. Matcha is green."
    cited = TextRange(text.index("Matcha"), len(text))
    service.ingest(
        cid,
        iter(
            [
                ResponseStarted(response_id=rid, provider="anthropic", model="claude-test"),
                AssistantText(
                    response_id=rid,
                    text=text,
                    attributions=(
                        Attribution(
                            source=Source(kind="web", url="https://tea.example/m", title="Tea"),
                            range=cited,
                        ),
                    ),
                ),
                ResponseEnded(response_id=rid, state="completed", finish_reason="stop"),
            ]
        ),
    )
    events = list(service.events(cid))
    said = next(e.originator_version for e in events if isinstance(e, UserMessage))
    answered = next(e.originator_version for e in events if isinstance(e, AssistantText))
    return cid, said, answered


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _states(store: Store, cid: ConversationId) -> list[tuple[int, bytes]]:
    return [(v, bytes(s)) for v, s in store.recorder.select_states(cid)]


def _search(url: str, query: str) -> list[int]:
    """The versions of the hits for `query`, the follower caught up first."""
    with open_store(url) as store:
        keeper = follower(store)
        keeper.catch_up()
        index = keeper.projection
        assert isinstance(index, SearchIndex)
        return [hit.version for hit in index.search(query)]


def test_a_span_is_hidden_from_every_reading_and_the_stored_bytes_stay(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_store(url) as store:
        cid, said, answered = _converse(store)
        before = _states(store, cid)
    db = ("--db", url)
    assert _search(url, SECRET.split("-")[1]) != []  # indexed before the redaction
    message = f"my key is {SECRET} for {KEPT}"
    start = message.index(SECRET)
    base = ("redact", str(cid), "--reason", "pasted a key")
    span = f"{start}:{start + len(SECRET)}"
    assert _cli(capsys, *db, *base, "--event", str(said), "--span", span)[0] == 0
    text = f"Noted {ANSWER_SECRET}. Matcha is green."
    cut = f"{text.index(ANSWER_SECRET)}:{text.index(ANSWER_SECRET) + len(ANSWER_SECRET)}"
    assert _cli(capsys, *db, *base, "--event", str(answered), "--span", cut)[0] == 0

    with open_store(url) as store:
        after = _states(store, cid)
        assert after[: len(before)] == before  # an overlay: nothing stored was changed
        assert [json.loads(s).get("type") for _, s in after[len(before) :]] == ["Redacted"] * 2
        assert verify(store, cid).intact
    assert _cli(capsys, *db, "verify", str(cid))[0] == 0

    readings = {
        "show": _cli(capsys, *db, "show", str(cid)),
        "show --json": _cli(capsys, *db, "show", str(cid), "--json"),
        **{
            f"export {form}": _cli(capsys, *db, "export", str(cid), "--format", form)
            for form in ("json", "jsonl", "md", "otel", "pydantic-ai")
        },
        "replay anthropic": _cli(capsys, *db, "replay", str(cid), "--to", "anthropic"),
        "replay openai": _cli(
            capsys, *db, "replay", str(cid), "--to", "openai", "--model", "gpt-5"
        ),
        "replay google": _cli(
            capsys, *db, "replay", str(cid), "--to", "google", "--model", "gemini-2.5-flash"
        ),
    }
    for name, (code, out, err) in readings.items():
        assert code == 0, (name, err)
        assert SECRET not in out and ANSWER_SECRET not in out, name
        assert SECRET.split("-")[1] not in out, name
        assert KEPT in out, name  # the rest of the message is still read
    exported = json.loads(readings["export json"][1])
    [item] = [i for t in exported["turns"] for i in t["items"] if i["kind"] == "text"]
    assert item["text"] == f"Noted {MARK}. Matcha is green."
    [citation] = item["citations"]
    assert item["text"][citation["range"]["start"] : citation["range"]["end"]].startswith("Matcha")

    # The follower reached the redactions: the rows were derived again; so are a rebuild's.
    assert _search(url, SECRET.split("-")[1]) == []
    assert _search(url, ANSWER_SECRET) == []
    assert _search(url, KEPT) == [said]
    assert _cli(capsys, *db, "reindex")[0] == 0
    assert _search(url, SECRET.split("-")[1]) == []
    assert _search(url, ANSWER_SECRET) == []
    assert _search(url, KEPT) == [said]
    with open_store(url) as store:
        dump = SearchIndex(store.recorder).dump()
    assert SECRET.encode() not in dump and ANSWER_SECRET.encode() not in dump


def test_a_whole_event_is_hidden_from_the_web_view(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_store(store_url) as store:
        cid, said, answered = _converse(store)
    db = ("--db", store_url)
    for version in (said, answered):
        redact = ("redact", str(cid), "--event", str(version), "--reason", "secret")
        assert _cli(capsys, *db, *redact)[0] == 0
    with (
        open_store(store_url, read_only=True) as reader,
        TestClient(viewer_app(reader, hosts=frozenset({"testserver"}))) as http,
    ):
        page = http.get(f"/c/{cid}")
    assert page.status_code == 200
    assert MARK in page.text
    for hidden in (SECRET, ANSWER_SECRET, KEPT, "Matcha is green", "tea.example"):
        assert hidden not in page.text
    out = _cli(capsys, *db, "export", str(cid), "--format", "md")[1]
    assert SECRET not in out and KEPT not in out and "tea.example" not in out


def test_bad_input_exits_2_and_writes_nothing(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_store(store_url) as store:
        cid, said, _ = _converse(store)
        before = _states(store, cid)
        started = next(v for v, s in before if json.loads(s)["type"] == "ResponseStarted")
    db = ("--db", store_url)
    length = len(f"my key is {SECRET} for {KEPT}and more")
    cases = {
        "unknown version": ("--event", "99"),
        "version 0": ("--event", "0"),
        "span past the end": ("--event", str(said), "--span", f"3:{length + 1}"),
        "empty span": ("--event", str(said), "--span", "4:4"),
        "reversed span": ("--event", str(said), "--span", "5:3"),
        "malformed span": ("--event", str(said), "--span", "3-5"),
        "non-text event": ("--event", str(started)),
        "no reason": ("--event", str(said)),
    }
    for name, args in cases.items():
        reason = () if name == "no reason" else ("--reason", "x")
        code, _, err = _cli(capsys, *db, "redact", str(cid), *args, *reason)
        assert code == 2, name
        assert err.startswith("convstore: error") or "usage:" in err, name
    code, _, err = _cli(capsys, *db, "redact", str(cid)[:8], "--event", str(said), "--reason", "x")
    assert code == 2 and "full id" in err
    code, _, err = _cli(capsys, *db, "redact", str(cid), "--event", "99", "--reason", "x")
    assert "no event 99" in err
    with open_store(store_url) as store:
        assert _states(store, cid) == before


def test_a_redaction_beside_a_live_writer_is_refused_and_writes_nothing(store: Store) -> None:
    cid, said, _ = _converse(store)
    service = store.service
    open_response = ResponseStarted(
        response_id=ResponseId(f"r_{uuid4().hex}"), provider="anthropic", writer=service.writer
    )
    service.append(cid, [open_response])
    before = _states(store, cid)
    with pytest.raises(ResponseBeingWritten):
        service.redact(cid, said, reason="key")
    assert _states(store, cid) == before


# --- replay -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capture", "refused"),
    [
        ("anthropic/thinking_tool_roundtrip/1", True),  # a thinking block's signature
        ("openai/reasoning_function_roundtrip/1", True),  # reasoning's encrypted content
        ("google/thinking_function_roundtrip/1", False),  # the signature is on the call
    ],
)
def test_same_provider_replay_is_refused_only_with_a_bound_signature(
    store_url: str, capsys: pytest.CaptureFixture[str], capture: str, refused: bool
) -> None:
    provider = capture.split("/", maxsplit=1)[0]
    ingest(store_url, provider, *capture_files(capture))
    capsys.readouterr()
    with open_store(store_url) as store:
        [summary] = store.service.list()
        events = list(store.service.events(summary.id))
    cid = str(summary.id)
    [said] = [e for e in events if isinstance(e, UserMessage)]
    [thought] = [e for e in events if type(e).__name__ == "Reasoning"]
    db = ("--db", store_url)
    base = ("redact", cid, "--reason", "private")
    assert (
        _cli(capsys, *db, *base, "--event", str(said.originator_version), "--span", "0:12")[0] == 0
    )
    code, out, err = _cli(capsys, *db, "replay", cid, "--to", provider)
    assert code == 0, err  # an unsigned text redacted: the conversation goes on
    assert MARK in out and said.blocks[0][:12] not in out

    assert _cli(capsys, *db, *base, "--event", str(thought.originator_version))[0] == 0
    code, out, err = _cli(capsys, *db, "replay", cid, "--to", provider)
    hidden = thought.text[:40]
    if refused:
        assert code == 2 and out == ""
        assert f"event {thought.originator_version} is redacted" in err
    else:
        assert code == 0, err
        assert hidden not in out
    if refused:  # to a model its signature is not bound to, it is left out: no refusal
        elsewhere = {"anthropic": "claude-opus-4-1", "openai": "gpt-4.1"}[provider]
        moved = ("replay", cid, "--to", provider, "--model", elsewhere)
        code, out, err = _cli(capsys, *db, *moved)
        assert code == 0, err
        assert hidden not in out
    other = "anthropic" if provider != "anthropic" else "openai"
    model = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-5"}[other]
    code, out, err = _cli(capsys, *db, "replay", cid, "--to", other, "--model", model)
    assert code == 0, err  # another provider reads the overlay alone
    assert hidden not in out and said.blocks[0][:12] not in out


# --- the overlay itself -------------------------------------------------------------------------

_TEXT = st.text(alphabet=st.characters(blacklist_characters="[]"), min_size=1, max_size=60)


@st.composite
def _text_and_spans(draw: st.DrawFn) -> tuple[str, list[tuple[int, int]]]:
    text = draw(_TEXT)
    spans = []
    for _ in range(draw(st.integers(1, 3))):
        start = draw(st.integers(0, len(text) - 1))
        spans.append((start, draw(st.integers(start + 1, len(text)))))
    return text, spans


@given(_text_and_spans())
def test_the_portable_text_is_the_original_with_the_spans_marked(
    case: tuple[str, list[tuple[int, int]]],
) -> None:
    text, spans = case
    rid = ResponseId("r")
    event = AssistantText(response_id=rid, text=text)
    (start, end), *_ = spans
    one = redacted(event, [(start, end)])
    assert isinstance(one, AssistantText)
    assert one.text == text[:start] + MARK + text[end:]
    union = merged(spans)
    many = redacted(event, union)
    assert isinstance(many, AssistantText)
    assert many.text.count(MARK) == len(union)
    assert many.text.replace(MARK, "") == "".join(
        c for i, c in enumerate(text) if not any(s <= i < e for s, e in union)
    )
    assert redacted(event, None).text == MARK  # type: ignore[attr-defined]


@given(_text_and_spans(), st.integers(0, 60))
def test_citations_and_blocks_stay_consistent_with_the_marked_text(
    case: tuple[str, list[tuple[int, int]]], cut: int
) -> None:
    text, spans = case
    union = merged(spans)
    source = Source(kind="web", url="https://tea.example")
    ranges = [TextRange(a, b) for a in range(len(text)) for b in range(a + 1, len(text) + 1)]
    event = AssistantText(
        response_id=ResponseId("r"),
        text=text,
        attributions=tuple(Attribution(source=source, range=r) for r in ranges),
    )
    after = redacted(event, union)
    assert isinstance(after, AssistantText)
    for attribution in after.attributions:
        assert attribution.range is not None
        assert 0 <= attribution.range.start <= attribution.range.end <= len(after.text)
    kept = [r for r in ranges if not any(s <= r.start and r.end <= e for s, e in union)]
    assert len(kept) == len(after.attributions)  # only citations of hidden text go
    for old, new in zip(kept, after.attributions, strict=True):
        assert new.range is not None
        if not any(old.start < e and s < old.end for s, e in union):
            assert after.text[new.range.start : new.range.end] == text[old.start : old.end]
        else:  # cut by a hidden span: it cites the mark in its place
            assert MARK in after.text[new.range.start : new.range.end]
    cut = min(cut, len(text))
    blocks = (text[:cut], text[cut:])
    assert "".join(marked_blocks(blocks, union)).replace(MARK, "") == many_removed(text, union)


def many_removed(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` without the code points of `spans`."""
    return "".join(c for i, c in enumerate(text) if not any(s <= i < e for s, e in spans))


def test_a_fork_reads_its_parents_prefix_as_its_parent_hides_it(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A redaction recorded in the parent after the fork hides the prefix the fork reads;
    a fork's own event is redacted by its own version."""
    with open_store(store_url) as store:
        cid, said, _ = _converse(store)
        fork = store.service.fork(cid, at=said, title="fork")
        store.service.add_user_input(fork, [UserMessage(blocks=(f"fork {ANSWER_SECRET}",))])
        own = list(store.service.events(fork))[-1].originator_version
        store.service.redact(cid, said, reason="key")
        store.service.redact(fork, own, span=(5, 5 + len(ANSWER_SECRET)), reason="mine")
    db = ("--db", store_url)
    for argv in (("show", str(fork)), ("export", str(fork), "--format", "json")):
        code, out, err = _cli(capsys, *db, *argv)
        assert code == 0, err
        assert SECRET not in out and ANSWER_SECRET not in out and KEPT not in out
        assert out.count(MARK) == 2
    code, out, err = _cli(capsys, *db, "replay", str(fork), "--to", "openai", "--model", "gpt-5")
    assert code == 0, err
    assert SECRET not in out and ANSWER_SECRET not in out


def test_the_other_conversations_are_untouched(tmp_path: Path) -> None:
    """A redaction of one conversation leaves the others' readings as they were."""
    url = f"sqlite:///{tmp_path / 'two.db'}"
    with open_store(url) as store:
        cid, said, _ = _converse(store)
        other, _, _ = _converse(store)
        store.service.redact(cid, said, reason="key")
        theirs = list(store.service.events(other))
        assert not any(type(e).__name__ == "Redacted" for e in theirs)
        assert verify(store, other).intact and verify(store, cid).intact
