"""Golden `show` transcripts: each provider's hosted search with citations (and a code run),
ingested from the example captures through the command line into a real SQLite store,
then shown; the output must equal `tests/golden/show/<name>.txt` line for line.

What differs from one run to the next (the conversation's id, the times events were
recorded, the chain hashes that cover those times) is replaced by `<id>`, `<time>` and
`<hash>` before comparing. To rewrite the files after a deliberate change of wording, run
`CONVSTORE_WRITE_GOLDEN=1 .venv/bin/pytest tests/test_show_golden.py` and review the diff.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from convstore.adapters import cli

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden" / "show"
CAPTURES = {
    "anthropic_web_search": ("anthropic", "web_search_citations", 1),
    "openai_web_search": ("openai", "web_search_citations", 1),
    "google_web_search": ("google", "grounding_search_stream", 1),
    "google_code_execution": ("google", "code_execution", 1),
}
"""Golden file → (provider, example capture, exchange)."""

_VOLATILE = (
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<id>"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"), "<time>"),
    (re.compile(r"\b[0-9a-f]{64}\b"), "<hash>"),
)


def _stable(text: str) -> str:
    for pattern, placeholder in _VOLATILE:
        text = pattern.sub(placeholder, text)
    return text


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_show_matches_its_golden_transcript(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CONVSTORE_URL", raising=False)
    provider, capture, n = CAPTURES[name]
    folder = ROOT / "examples" / provider / capture
    db = ("--db", f"sqlite:///{tmp_path / 'store.db'}")
    response = next(folder.glob(f"{n}.response.*"))
    request = folder / f"{n}.request.json"
    argv = ["ingest", "--provider", provider, "--request", str(request), str(response), "--json"]
    assert cli.main([*db, *argv]) == 0
    conversation = re.search(r'"conversation_id":\s*"([^"]+)"', capsys.readouterr().out)
    assert conversation is not None
    assert cli.main([*db, "show", conversation.group(1)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    shown = _stable(out)
    golden = GOLDEN / f"{name}.txt"
    if os.environ.get("CONVSTORE_WRITE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(shown, encoding="utf-8")
    assert shown.splitlines() == golden.read_text(encoding="utf-8").splitlines()
