"""`python -m benchmarks [--quick|--full] [--json FILE] [--only FAMILY,...] [--dir FOLDER]`.

Runs every benchmark family and prints one table: each figure as ours / baseline (both
measured in this run, on the same data) beside its target, with the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

from benchmarks import (
    decoding,
    encryption,
    importing,
    live,
    mapper,
    peers,
    placing,
    postgres,
    proxy,
    search,
    startup,
    storage,
    viewer,
)
from benchmarks.common import Figure, Sizes, render_table

FAMILIES: dict[str, Callable[[Sizes, Path], list[Figure]]] = {
    "append": storage.append_figures,
    "replay": storage.replay_figures,
    "growth": storage.growth_figures,
    "mapper": lambda sizes, _folder: mapper.mapper_figures(sizes),
    "postgres": lambda sizes, _folder: postgres.postgres_figures(sizes),
    "search": search.search_figures,
    "decoding": decoding.decoding_figures,
    "live": live.live_figures,
    "proxy": proxy.proxy_figures,
    "threading": placing.threading_figures,
    "startup": startup.startup_figures,
    "peers": peers.peers_figures,
    "import": importing.importing_figures,
    "viewer": viewer.viewer_figures,
    "encryption": encryption.encryption_figures,
}


def _environment(folder: Path, sizes: Sizes) -> dict[str, object]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.processor() or platform.machine(),
        "sqlite": sqlite3.sqlite_version,
        "packages": {
            name: version(name)
            for name in (
                "eventsourcing",
                "msgspec",
                "orjson",
                "psycopg",
                "llm",
                "langgraph",
                "langgraph-checkpoint-sqlite",
            )
        },
        "scratch_folder": str(folder),
        "sizes": asdict(sizes),
    }


def _order(figure: Figure) -> tuple[int, str]:
    """Figures by number (`9b` before `10a`), then by letter."""
    digits = re.match(r"\d+", figure.figure)
    return (int(digits.group()) if digits else 0, figure.figure)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; exit 0 even when a target is missed (speed is measured, not tested)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--full", action="store_true", help="also the longest runs (search growth at 1M items)"
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the figures here")
    parser.add_argument(
        "--only",
        metavar="FAMILY,...",
        help=f"run only these families (of {', '.join(FAMILIES)})",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        metavar="FOLDER",
        help="where the databases go (default: a temporary folder, removed afterwards); "
        "put it on the disk you care about, since appends fsync",
    )
    args = parser.parse_args(argv)
    if sys.flags.optimize:
        parser.error(
            "run without -O: it strips the asserts that check each side did the same work, "
            "and it is not how convstore runs"
        )
    names = list(FAMILIES) if not args.only else [n.strip() for n in args.only.split(",")]
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        parser.error(f"unknown families {unknown}; choose from {list(FAMILIES)}")

    sizes = Sizes.for_run(quick=args.quick, full=args.full)
    folder = args.dir or Path(tempfile.mkdtemp(prefix="convstore-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    environment = _environment(folder, sizes)
    print(
        f"convstore benchmarks{' (quick)' if sizes.quick else ''}: Python "
        f"{environment['python']}, SQLite {environment['sqlite']}, "
        f"{environment['machine']}, databases in {folder}",
        file=sys.stderr,
    )
    figures: list[Figure] = []
    try:
        for name in names:
            started = time.perf_counter()
            print(f"  {name} …", end="", flush=True, file=sys.stderr)
            figures.extend(FAMILIES[name](sizes, folder))
            print(f" {time.perf_counter() - started:.1f} s", file=sys.stderr)
    finally:
        if args.dir is None:
            shutil.rmtree(folder, ignore_errors=True)
    figures.sort(key=_order)
    print()
    print(render_table(figures))
    if sizes.quick:
        print("\n(quick run: small sizes, so the figures are a smoke test, not the measurement)")
    if args.json:
        document = {"environment": environment, "figures": [asdict(f) for f in figures]}
        args.json.write_text(json.dumps(document, indent=2, default=str) + "\n")
        print(f"\nfigures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
