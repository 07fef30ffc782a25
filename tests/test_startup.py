"""Start-up stays lazy: what `--help` and `list` import, read from `python -X importtime`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.replay_server import EXAMPLES

NEVER_TO_LIST = ("httpx", "httpcore", "psycopg", "convstore.adapters.anthropic")
NEVER_TO_LIST += ("convstore.adapters.openai", "convstore.adapters.google")
NEVER_TO_LIST += ("convstore.adapters.recording.asking", "convstore.adapters.http.transport")


def imported(*argv: str, program: tuple[str, ...] = ("-m", "convstore.adapters.cli")) -> set[str]:
    """The modules a fresh `convstore ARGV` imports (`program`: what the interpreter runs)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *program, *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


@pytest.mark.parametrize("command", ["--help", "list"])
def test_help_and_list_load_no_http_no_provider_and_no_postgres(
    command: str, tmp_path: Path
) -> None:
    """Neither sends a request nor opens PostgreSQL, so neither loads what those need."""
    db = f"sqlite:///{tmp_path / 'store.db'}"
    capture = EXAMPLES / "anthropic" / "web_search_citations" / "1.response.sse"
    ingest = [sys.executable, "-m", "convstore.adapters.cli", "--db", db, "ingest"]
    subprocess.run([*ingest, "--provider", "anthropic", str(capture)], check=True)
    modules = imported("--db", db, command)
    assert "convstore.adapters.cli.program" in modules  # the reading worked
    loaded = sorted(
        m
        for m in modules
        if m.split(".")[0] in NEVER_TO_LIST
        or any(m == name or m.startswith(f"{name}.") for name in NEVER_TO_LIST)
    )
    assert loaded == []


def test_help_loads_no_third_party_module() -> None:
    """`--help` (and `--version`) load the standard library and convstore's light modules
    only: no msgspec, no eventsourcing, no platformdirs, not even the package metadata
    reader. What the bare interpreter loads (site hooks of the environment) is not ours."""
    bare = imported(program=("-c", "pass"))
    for argv in (["--help"], ["--version"], ["list", "--help"], ["ingest", "--help"]):
        modules = imported(*argv) - bare
        assert "convstore.adapters.cli.program" in modules
        foreign = sorted(
            m for m in modules if m.split(".")[0] not in {*sys.stdlib_module_names, "convstore"}
        )
        assert foreign == [], argv
        if argv != ["--version"]:  # the one that reads the package metadata
            assert not any(m.startswith("importlib.metadata") for m in modules)
