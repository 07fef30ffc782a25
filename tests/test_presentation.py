"""The presentation model and the wording every reader shares (issue 13, item 9).

The wording is checked value by value, with the summaries each provider's adapter
records; the model is built from the example captures of every provider, read with the
adapters' `read_payload`: one activity line per hosted activity in one form, code and its
outputs, typed notices where unknown artifacts used to be, spend counted from activities,
Search Suggestion links, turn and response times.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from convstore.adapters.wire.providers import read_payload
from convstore.domain import Display, Notice, Usage
from convstore.projections import portable
from convstore.projections.anchors import links
from convstore.projections.portable import ActivityItem, ResponseItem
from convstore.projections.presentation import (
    Activity,
    Answer,
    Response,
    Transcript,
    Unknown,
    present,
)
from convstore.projections.wording import (
    activity_line,
    activity_outcome,
    code_of,
    end_line,
    hosted_spend,
    notice_lines,
)
from convstore.storage import Store, open_store
from tests.test_portable import ingest_examples, items


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("presentation-examples")
    with open_store(f"sqlite:///{folder / 'store.db'}") as store:
        yield store, ingest_examples(store.service)


def presented(examples: tuple[Store, dict[str, Any]], name: str) -> Transcript:
    store, ids = examples
    return present(portable.load(store.service, ids[name][0], read_payload))


def contents(view: Transcript) -> list[Any]:
    found: list[Any] = []
    for turn in view.turns:
        for part in turn.parts:
            found.extend(part.content if isinstance(part, Response) else [part])
    return found


def activities(view: Transcript) -> list[Activity]:
    return [c for c in contents(view) if isinstance(c, Activity)]


# --- the wording, value by value ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "summary", "response", "outcome"),
    [
        ("completed", "3 results", None, "3 results"),  # Anthropic's web search
        ("completed", "1 result", None, "1 result"),
        ("completed", "3 sources", None, "3 results"),  # Gemini's grounding
        ("completed", 'searched "a", "b" (2 sources)', None, "2 results"),  # OpenAI's, sources
        ("completed", 'searched "a"', None, "done"),  # OpenAI's, without sources included
        ("completed", "opened https://example.org/x", None, "opened"),
        ("completed", 'found "p" in https://example.org/x', None, "found"),
        ("completed", "fetched https://example.org/x", None, "fetched"),
        ("completed", "exit 0", None, "exit 0"),
        ("completed", "", None, "done"),
        ("failed", "max_uses_exceeded", None, "failed: max_uses_exceeded"),
        ("failed", "failed: ModuleNotFoundError: x", None, "failed: ModuleNotFoundError: x"),
        ("failed", "", None, "failed"),
        ("abandoned", "", None, "abandoned"),
        ("started", "", "completed", "pending"),
        ("started", "", "abandoned", "interrupted"),
        ("started", "", "failed", "interrupted"),
        ("started", "", None, "unfinished"),
    ],
)
def test_activity_outcomes_read_every_adapters_summary(
    state: str, summary: str, response: str | None, outcome: str
) -> None:
    assert activity_outcome(state, summary, response) == outcome


@pytest.mark.parametrize(
    ("name", "given", "state", "summary", "line"),
    [
        ("web_search", {"query": "kyoto ryokan"}, None, "", '⚒ web search: "kyoto ryokan"'),
        ("web_search", {"query": "q"}, "completed", "3 results", '⚒ web search: "q" → 3 results'),
        (
            "web_search",
            {"query": "q"},
            "failed",
            "max_uses_exceeded",
            '⚒ web search: "q" → failed: max_uses_exceeded',
        ),
        (
            "web_search",
            {},
            "completed",
            "3 results",
            "⚒ web search (no query recorded) → 3 results",
        ),
        (
            "web_search",
            {"queries": ["a", "b"]},
            "completed",
            "2 sources",
            '⚒ web search: "a", "b" → 2 results',
        ),
        (
            "web_fetch",
            {"url": "https://e.org/x"},
            "completed",
            "fetched https://e.org/x",
            "⚒ web fetch: https://e.org/x → fetched",
        ),
        (
            "web_search",
            {"url": "https://e.org/x"},
            "completed",
            "opened https://e.org/x",
            "⚒ web search: open https://e.org/x → opened",
        ),
        (
            "code_execution",
            {"code": "print(1)"},
            "completed",
            "exit 0",
            "⚒ code execution → exit 0",
        ),
        (
            "code_execution",
            {"code": "x", "language": "PYTHON"},
            "completed",
            "1",
            "⚒ code execution (python) → 1",
        ),
        (
            "bash_code_execution",
            {"command": "ls"},
            "completed",
            "exit 0",
            "⚒ bash code execution → exit 0",
        ),
        (
            "code_execution",
            {},
            "completed",
            "exit 0",
            "⚒ code execution (no code recorded) → exit 0",
        ),
        (
            "text_editor_code_execution",
            {"command": "view", "path": "/tmp/a"},
            "completed",
            "viewed 2 lines",
            "⚒ text editor code execution: view /tmp/a → viewed 2 lines",
        ),
        ("mcp:docs/search", {"q": "x"}, "completed", "done", '⚒ mcp:docs/search: {"q":"x"} → done'),
    ],
)
def test_activity_lines_take_plain_values(
    name: str, given: dict[str, Any], state: str | None, summary: str, line: str
) -> None:
    assert activity_line(name, given, state, summary) == line


def test_code_is_read_from_each_providers_input() -> None:
    assert code_of("code_execution", {"code": "x", "language": "PYTHON"}) == ("x", "python")
    assert code_of("code_interpreter", {"code": "y"}) == ("y", "python")
    assert code_of("bash_code_execution", {"command": "ls"}) == ("ls", "bash")
    assert code_of("web_search", {"query": "q"}) is None
    assert code_of("code_execution", {}) is None


def test_hosted_spend_counts_activities_by_what_they_are() -> None:
    spent = hosted_spend(
        [
            ("web_search", {"query": "a"}, "completed"),
            ("code_execution", {"code": "x"}, "completed"),
            ("web_search", {"query": "b"}, "failed"),
            ("web_search", {"url": "https://e.org"}, "completed"),
            ("web_search", {}, "completed"),
            ("mcp:docs/search", {}, "completed"),
            ("hologram_scan", {}, "started"),
        ]
    )
    assert spent == [
        "3 searches (1 failed)",
        "1 code run",
        "1 page visit",
        "1 MCP call",
        "1 hologram scan call",
    ]
    assert hosted_spend([]) == []


def test_the_end_of_a_turn_is_one_line() -> None:
    usage = Usage(input_tokens=12, output_tokens=40, hosted={"web_search_requests": 2})
    assert (
        end_line(["2 searches"], usage, "end_turn")
        == "2 searches · tokens in 12, out 40 · end_turn"
    )
    assert end_line([], None, None) == "no hosted work"


def test_notices_read_as_lines_with_safety_ratings_together() -> None:
    notices = [
        Notice(kind="finish_message", message="Stopped."),
        Notice(kind="safety", code="HATE", details={"probability": "LOW", "subject": "response"}),
        Notice(kind="refusal", code="cyber", message="No.", details={"recommended_model": "m"}),
        Notice(kind="safety", code="DANGER", details={"probability": "HIGH", "blocked": "true"}),
        Notice(kind="stop_sequence", code="###"),
    ]
    assert notice_lines(notices) == [
        "finish message: Stopped.",
        "safety ratings of the response: HATE LOW, DANGER HIGH BLOCKED",
        "refusal cyber: No. (recommended_model: m)",
        'stop sequence "###"',
    ]


def test_anchors_are_read_best_effort() -> None:
    content = (
        "<style>a { color: red }</style><div><a class=chip href='https://s.example/q?a'>"
        "kyoto <b>meteo</b></a> <a>no href</a><a href=' https://s.example/q?b '></a>"
        "<script>var a = '<a href=x>'</script><a href=\"javascript:alert(1)\">js</a>"
    )
    assert links(Display(kind="search_suggestion", content=content)) == [
        ("kyoto meteo", "https://s.example/q?a"),
        ("https://s.example/q?b", "https://s.example/q?b"),
        ("js", "javascript:alert(1)"),  # kept as written; each renderer decides what links
    ]
    assert links(Display(kind="x", content="<a href=y>z</a>", content_type="text/plain")) == []
    assert links(Display(kind="x", content="<a href='u'>unclosed <")) == [("unclosed <", "u")]


# --- the model, from the examples ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("anthropic/web_search_citations", '⚒ web search: "Uji matcha cafés 宇治抹茶" → 3 results'),
        (
            "openai/web_search_citations",
            '⚒ web search: "spécialité lyonnaise quenelle" → 3 results',
        ),
        (
            "google/grounding_search_stream",
            '⚒ web search: "météo Kyoto aujourd\'hui", "Kyoto weather today" → 3 results',
        ),
    ],
)
def test_every_providers_search_reads_in_one_form(
    examples: tuple[Store, dict[str, Any]], name: str, line: str
) -> None:
    view = presented(examples, name)
    assert next(a.line for a in activities(view)) == line
    answers = [c for c in contents(view) if isinstance(c, Answer) and c.sources]
    assert answers and all(
        {n for s in a.segments for n in s.marks} == {r.number for r in a.sources} for a in answers
    )
    (turn,) = view.turns
    assert turn.spend[0] == "1 search" and turn.started is not None and turn.ended is not None
    (response,) = turn.responses
    assert response.started is not None and response.ended is not None and response.usage


def test_a_failed_fetch_and_a_code_run_with_its_outputs(
    examples: tuple[Store, dict[str, Any]],
) -> None:
    store, ids = examples
    (view,) = (
        v
        for v in (
            present(portable.load(store.service, c, read_payload)) for c in ids["anthropic/errors"]
        )
        if activities(v)
    )
    fetch, bash = (a for a in activities(view) if a.name in ("web_fetch", "bash_code_execution"))
    url = "https://intranet.example.net/reports/q3-sales.csv"
    assert fetch.line == f"⚒ web fetch: {url} → failed: url_not_accessible"
    assert bash.code is not None and "1234 + 5678 + 91011" in bash.code and bash.language == "bash"
    assert [(o.channel, o.text) for o in bash.outputs] == [
        ("stdout", "97923\n"),
        ("stderr", "note: computed locally\n"),
    ]
    assert view.turns[-1].spend == ["1 fetch (1 failed)", "1 code run"]


@pytest.mark.parametrize(
    ("name", "channel", "text"),
    [
        ("google/code_execution", "output", "5117 229\n"),
        ("openai/hosted_tools", "logs", "3.875\n"),
        ("anthropic/dynamic_filtering", "stdout", "Dublin 92 mm\nBrussels 81 mm\nLondon 77 mm\n"),
    ],
)
def test_code_outputs_are_in_the_portable_reading(
    examples: tuple[Store, dict[str, Any]], name: str, channel: str, text: str
) -> None:
    store, ids = examples
    reading = portable.load(store.service, ids[name][0], read_payload)
    runs = [a for a in items(reading, ActivityItem) if a.outputs]
    assert (channel, text) in [(o.channel, o.text) for run in runs for o in run.outputs]
    assert portable.DECODER.decode(portable.msgspec.json.encode(reading)) == reading
    plain = portable.load(store.service, ids[name][0])  # without the adapters: no outputs
    assert not any(a.outputs for a in items(plain, ActivityItem))


@pytest.mark.parametrize(
    ("name", "notice"),
    [
        ("anthropic/refusal", "refusal cyber: "),
        ("google/safety_notices", "safety ratings of the response: "),
        ("openai/refusal_incomplete", "incomplete max_output_tokens"),
        ("openai/notices", "screening moderation.output (flagged: true"),
    ],
)
def test_typed_details_replace_unknown_artifacts(
    examples: tuple[Store, dict[str, Any]], name: str, notice: str
) -> None:
    store, ids = examples
    shown: list[str] = []
    unknown: list[str] = []
    for conversation in ids[name]:
        view = present(portable.load(store.service, conversation, read_payload))
        for turn in view.turns:
            for response in turn.responses:
                shown += notice_lines(response.notices)
        unknown += [c.format for c in contents(view) if isinstance(c, Unknown)]
    assert any(line.startswith(notice) for line in shown), shown
    assert not {"message_fields", "candidate_fields", "response_fields"} & set(unknown)


def test_search_suggestions_keep_their_links_never_their_markup(
    examples: tuple[Store, dict[str, Any]],
) -> None:
    store, ids = examples
    reading = portable.load(store.service, ids["google/grounding_search_stream"][0])
    (search,) = items(reading, ActivityItem)
    assert search.display is not None
    assert [(link.text, link.url) for link in search.display.links] == [
        ("météo Kyoto aujourd'hui", "https://search.example.com/q?kyoto-meteo"),
        ("Kyoto weather today", "https://search.example.com/q?kyoto-weather"),
    ]
    (activity,) = activities(present(reading))
    assert activity.display == "search_suggestion" and activity.links == search.display.links


def test_a_pending_activity_reads_pending(examples: tuple[Store, dict[str, Any]]) -> None:
    """A `pause_turn` leaves the search `started` in a completed response: pending."""
    store, ids = examples
    reading = portable.load(store.service, ids["anthropic/pause_turn_pending"][0], read_payload)
    responses = {r.id: r for r in items(reading, ResponseItem)}
    view = present(reading)
    for activity, item in zip(activities(view), items(reading, ActivityItem), strict=True):
        if item.state == "started":
            reporter = responses[item.transitions[-1].response_id or ""]
            assert reporter.state == "completed" and activity.outcome == "pending"
