"""Figures 10a and 10b: how long the command line takes to start.

`convstore --help` and `convstore list` (on a store of a few conversations) each run as
a fresh process, interleaved round by round with two baselines run the same way: the bare
interpreter (`python -c pass`) and the interpreter importing what the program cannot do
without (`python -c "import argparse, sqlite3, msgspec"`). The goal of 10a is `--help` at
most 1.5x the second baseline.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.common import Figure, Sizes, interleave

PROGRAM = [sys.executable, "-m", "convstore.adapters.cli"]
BARE = [sys.executable, "-c", "pass"]
NEEDED = [sys.executable, "-c", "import argparse, sqlite3, msgspec"]


def _run(command: list[str]) -> None:
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def startup_figures(sizes: Sizes, folder: Path) -> list[Figure]:
    """10a (`--help`) and 10b (`list`), each against both baselines."""
    store = folder / "startup.db"
    db = ["--db", f"sqlite:///{store}"]
    examples = Path(__file__).resolve().parents[1] / "examples" / "anthropic"
    for name in ("web_search_citations", "thinking_tool_roundtrip", "pause_turn"):
        _run(
            [
                *PROGRAM,
                *db,
                "ingest",
                "--provider",
                "anthropic",
                str(examples / name / "1.response.sse"),
            ]
        )
    commands = {
        "help": [*PROGRAM, "--help"],
        "list": [*PROGRAM, *db, "list"],
        "bare": BARE,
        "needed": NEEDED,
    }
    rounds = max(sizes.append_rounds // 10, 5)
    timings = interleave(
        {name: (lambda c=command: _run(c)) for name, command in commands.items()},
        rounds=rounds,
        warmup=sizes.warmup,
    )
    figures = []
    for letter, name, what in (("a", "help", "convstore --help"), ("b", "list", "convstore list")):
        for baseline, label, target in (
            (
                "needed",
                'python -c "import argparse, sqlite3, msgspec"',
                1.5 if name == "help" else None,
            ),
            ("bare", "python -c pass", None),
        ):
            figures.append(
                Figure(
                    f"10{letter}",
                    f"start-up: {what}",
                    f"{what}, a fresh process",
                    label,
                    "time",
                    timings.median(name),
                    timings.median(baseline),
                    ratio=timings.time_ratio(name, baseline),
                    target=("<=", target) if target is not None else None,
                    note=f"median of {rounds} interleaved rounds",
                    extra={"timings": timings.summary()},
                ).judge()
            )
    return figures


__all__ = ["startup_figures"]
