"""Scenario 16 (RELIABILITY.md): escape injection never reaches a terminal, on both backends.

The hostile conversation of tests/test_cli.py (ESC, CSI, OSC titles and hyperlinks, BEL,
C1, bare CR, bidi overrides in every stored text) is written to SQLite and PostgreSQL;
then `show`, `list`, `search`, `audit` and `export --format md` to stdout, error messages
naming hostile input, and a log line quoting a hostile id all run through the command
line. Nothing injected comes out on stdout or stderr, and the stored events read back
exactly as written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convstore.adapters import cli
from convstore.storage import open_store
from tests.test_cli import HOSTILE_TEXTS, HOSTILE_TITLE, INJECTED, OSC_TITLE, hostile_drafts

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """`convstore ARGV`: its exit status and stdout + stderr."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out + err


def test_nothing_injected_reaches_the_terminal_and_the_stored_bytes_stay(
    store_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Scenario 16: show, list, search, audit, export md to stdout, errors and logs are
    inert; the stored bytes are unchanged."""
    with open_store(store_url) as store:
        conversation = store.service.start(HOSTILE_TITLE, [f"label{OSC_TITLE}"])
        recorded = store.service.append(conversation, hostile_drafts())
    cid = str(conversation)

    shown = {  # each command, and a word it must show (the hostile text, made inert)
        ("show", cid): "OVERWRITTEN",
        ("show", cid, "--json"): "OVERWRITTEN",
        ("list",): "Report",
        ("search", "OVERWRITTEN"): "OVERWRITTEN",
        ("search", "OVERWRITTEN", "--json"): "OVERWRITTEN",
        ("audit", cid): "web_search",
        ("export", cid, "--format", "md"): "OVERWRITTEN",
    }
    for argv, visible in shown.items():
        code, printed = _run(capsys, "--db", store_url, *argv)
        assert code == 0, (argv, printed)
        assert INJECTED.findall(printed) == [], argv
        assert visible in printed, argv

    refused = {
        "a hostile id": ["show", f"\x1b]0;{OSC_TITLE}"],
        "a hostile limit": ["search", "matcha", "--limit", OSC_TITLE],
        "a hostile folder": ["export", cid, "--format", "md", "-o", f"/proc/{OSC_TITLE}/x.md"],
    }
    for name, argv in refused.items():
        code, printed = _run(capsys, "--db", store_url, *argv)
        assert code == 2, (name, printed)
        assert "error" in printed.splitlines()[-1] and "Traceback" not in printed, name
        assert INJECTED.findall(printed) == [], name

    # A log line quoting a hostile id from a request (`convstore.adapters.openai`, INFO).
    request = tmp_path / "1.request.json"
    previous = f"resp_{OSC_TITLE}"
    request.write_text(json.dumps({"model": "gpt-5.1", "previous_response_id": previous}))
    answer = EXAMPLES / "openai" / "web_search_citations" / "2.response.json"
    code, printed = _run(
        capsys,
        "--db",
        store_url,
        "ingest",
        "--provider",
        "openai",
        "--request",
        str(request),
        str(answer),
    )
    assert code == 0, printed
    assert "previous_response_id" in printed  # the log line reached stderr
    assert INJECTED.findall(printed) == []
    # A warning quoting hostile response and item ids (a citation range off its text).
    cited = {
        "type": "output_text",
        "text": "short",
        "annotations": [
            {
                "type": "url_citation",
                "url": "https://example.org/",
                "start_index": 0,
                "end_index": 99,
                "title": "t",
            }
        ],
    }
    item = {
        "id": f"msg_{OSC_TITLE}",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [cited],
    }
    odd = tmp_path / "2.response.json"
    odd.write_text(
        json.dumps(
            {
                "id": f"resp_{OSC_TITLE}",
                "object": "response",
                "status": "completed",
                "model": "gpt-5.1",
                "output": [item],
            }
        )
    )
    code, printed = _run(capsys, "--db", store_url, "ingest", "--provider", "openai", str(odd))
    assert code == 0, printed
    assert "does not lie in its text" in printed
    assert INJECTED.findall(printed) == []

    with open_store(store_url) as store:
        stored = list(store.service.events(conversation))
    assert stored[1:] == recorded
    assert stored[0].title == HOSTILE_TITLE  # type: ignore[attr-defined]
    assert stored[2].blocks == (HOSTILE_TEXTS["user"],)  # type: ignore[attr-defined]
    assert stored[5].text == HOSTILE_TEXTS["assistant"]  # type: ignore[attr-defined]
    assert stored[8].content == HOSTILE_TEXTS["tool"]  # type: ignore[attr-defined]
