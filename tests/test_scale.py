"""`make scale` at a small size, end to end on PostgreSQL, so the script never rots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.soak
@pytest.mark.postgres
def test_scale_run_keeps_every_event_once(postgres_url: str, tmp_path: Path) -> None:
    """Scenario 4 at scale (issue 6, item 4): eight writer processes ingest captures
    through the service while two `project --follow` workers index them; every
    acknowledged event is stored once at its version, every chain verifies, and each
    planted word is found in exactly its items."""
    figures = tmp_path / "scale.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.scale",
            "--events",
            "20000",
            "--conversations",
            "200",
            "--url",
            postgres_url,
            "--json",
            str(figures),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    document = json.loads(figures.read_text())
    checks = {check["name"]: check for check in document["checks"]}
    assert set(checks) == {"counts", "duplicates", "index", "search", "chains"}
    assert all(check["passed"] for check in checks.values()), checks
    assert document["info"]["events"] == 20_000
    assert {f["figure"] for f in document["figures"]} == {"S1", "S2", "S3", "S4"}
    assert all(f["ratio"] is not None for f in document["figures"])
