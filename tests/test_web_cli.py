"""`convstore serve` as a person runs it: a real process printing its address, serving
pages until SIGINT or SIGTERM and exiting 0; refusing (exit 2, nothing listening) another
address without `--allow-remote` and a token, a short token, a store that is not there;
answering only with the token when one is set; and never writing to the store."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.test_web_viewer import _digest
from tests.viewing import CONVSTORE, viewer_process, viewer_store


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return viewer_store(tmp_path_factory.mktemp("serve"))


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_it_serves_until_a_signal_and_exits_0(db: Path, stop: signal.Signals) -> None:
    before = _digest(db)
    with viewer_process(db) as (process, url):
        page = httpx.get(url + "/", timeout=10)
        assert page.status_code == 200 and "3 of 3 shown" in page.text
        foreign = httpx.get(url + "/", headers={"host": "rebound.example"}, timeout=10)
        assert foreign.status_code == 403
        process.send_signal(stop)
        assert process.wait(timeout=30) == 0
        assert process.stderr is not None and "Traceback" not in process.stderr.read()
    assert _digest(db) == before


def _refused(*args: str) -> str:
    run = subprocess.run(
        [*CONVSTORE, *args], check=False, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""
    return run.stderr


def test_another_address_needs_the_flag_and_a_token(db: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{db}"
    said = _refused("--db", url, "serve", "--listen", "0.0.0.0:0")
    assert "not a loopback address" in said and "--allow-remote" in said
    said = _refused("--db", url, "serve", "--listen", "0.0.0.0:0", "--allow-remote")
    assert "needs an access token" in said
    short = tmp_path / "token"
    short.write_text("short\n")
    said = _refused("--db", url, "serve", "--token-file", str(short))
    assert "at least 16" in said
    missing = tmp_path / "no-such.db"
    said = _refused("--db", f"sqlite:///{missing}", "serve")
    assert not missing.exists()  # a reader creates nothing
    said = _refused("--db", url, "serve", "--listen", "nowhere")
    assert "HOST:PORT" in said


def test_with_a_token_only_requests_that_carry_it_are_answered(db: Path, tmp_path: Path) -> None:
    token = "a-viewer-token-long-enough-0123"
    file = tmp_path / "token"
    file.write_text(token + "\n")
    with viewer_process(db, "--token-file", str(file)) as (process, url):
        assert httpx.get(url + "/", timeout=10).status_code == 401
        signed = httpx.get(url + "/", headers={"authorization": f"Bearer {token}"}, timeout=10)
        assert signed.status_code == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert process.stderr is not None
        assert token not in process.stderr.read()
