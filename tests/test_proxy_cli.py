"""`convstore proxy` as a person runs it: a real process printing its address, serving
until SIGINT or SIGTERM, letting answers in flight finish within `--grace`, recording
the ones still open `abandoned`, and exiting 0; refusing a non-loopback address without
`--allow-remote` (exit 2, nothing listening), and warning with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from convstore.domain.events import ResponseEnded
from convstore.storage import open_store
from tests.proxying import capture
from tests.replay_server import ReplayServer, Reply
from tests.sdk_readers import with_event_names

CONVSTORE = [sys.executable, "-m", "convstore.adapters.cli"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


@contextmanager
def proxy_process(db: Path, *args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`convstore proxy` on a free port; (the process, its URL)."""
    process = subprocess.Popen(
        [*CONVSTORE, "--db", f"sqlite:///{db}", "proxy", "--listen", "127.0.0.1:0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        line = process.stdout.readline() if process.stdout else ""
        assert line.startswith("convstore proxy listening on http://127.0.0.1:"), line
        yield process, line.split()[-1]
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def _slow(seconds: float) -> Reply:
    """Anthropic's recorded stream, its events spread over `seconds`."""
    body = with_event_names(capture("anthropic/thinking_tool_roundtrip/1").body)
    events = [e + b"\n\n" for e in body.split(b"\n\n") if e.strip()]
    return Reply(
        body=body,
        content_type="text/event-stream",
        chunk_size=max(len(e) for e in events),
        pause=seconds / len(events),
    )


def _request(url: str, got: list[bytes]) -> threading.Thread:
    def run() -> None:
        with (
            httpx.Client(timeout=30) as http,
            http.stream(
                "POST",
                url + "/v1/messages",
                content=json.dumps(
                    {
                        "model": "claude-sonnet-4-5",
                        "max_tokens": 10,
                        "stream": True,
                        "messages": [{"role": "user", "content": "Weather?"}],
                    }
                ),
                headers={"x-api-key": "sk-ant-cli-test", "content-type": "application/json"},
            ) as response,
        ):
            try:
                for chunk in response.iter_raw():
                    got.append(chunk)
            except httpx.HTTPError:
                got.append(b"<cut>")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _ends(db: Path) -> list[ResponseEnded]:
    with open_store(f"sqlite:///{db}") as store:
        return [
            e
            for s in store.service.list()
            for e in store.service.events(s.id)
            if isinstance(e, ResponseEnded)
        ]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stream_in_flight_finishes_within_the_grace_and_the_proxy_exits_0(
    tmp_path: Path, signum: int
) -> None:
    db = tmp_path / "store.db"
    with ReplayServer() as upstream:
        upstream.enqueue(_slow(1.5))
        with proxy_process(db, "--upstream", f"anthropic={upstream.url}") as (process, url):
            got: list[bytes] = []
            client = _request(url, got)
            while not got:
                time.sleep(0.01)
            process.send_signal(signum)
            client.join(timeout=20)
            assert process.wait(timeout=20) == 0
    assert b"".join(got).endswith(b'message_stop"}\n\n')
    [end] = _ends(db)
    assert end.state == "completed"


def test_a_stream_past_the_grace_is_recorded_abandoned(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    with ReplayServer() as upstream:
        upstream.enqueue(_slow(30))
        args = ("--upstream", f"anthropic={upstream.url}", "--grace", "1")
        with proxy_process(db, *args) as (process, url):
            got: list[bytes] = []
            _request(url, got)
            while not got:
                time.sleep(0.01)
            started = time.monotonic()
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=20) == 0
            assert time.monotonic() - started < 10
    [end] = _ends(db)
    assert end.state == "abandoned"
    assert end.end_reason == "interrupted"


def test_a_non_loopback_address_needs_allow_remote(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    refused = subprocess.run(
        [*CONVSTORE, "--db", f"sqlite:///{db}", "proxy", "--listen", "0.0.0.0:0"],
        check=False,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=30,
    )
    assert refused.returncode == 2
    assert "--allow-remote" in refused.stderr
    assert refused.stdout == ""
    process = subprocess.Popen(
        [*CONVSTORE, "--db", f"sqlite:///{db}", "proxy", "--listen", "0.0.0.0:0", "--allow-remote"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    assert process.stdout is not None
    assert process.stdout.readline().startswith("convstore proxy listening on http://0.0.0.0:")
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0
    assert "warning: listening on 0.0.0.0" in err


@pytest.mark.parametrize(
    "args",
    [
        ("--upstream", "nobody=http://x"),
        ("--upstream", "openai=ftp://x"),
        ("--upstream", "anthropic=https://api.anthropic.com/v1"),  # /v1/… would be doubled
        ("--listen", "x"),
    ],
)
def test_a_bad_option_is_refused_before_listening(tmp_path: Path, args: tuple[str, ...]) -> None:
    db = tmp_path / "store.db"
    refused = subprocess.run(
        [*CONVSTORE, "--db", f"sqlite:///{db}", "proxy", *args],
        check=False,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=30,
    )
    assert refused.returncode == 2, refused.stderr
    assert refused.stdout == ""


def test_an_exchange_it_cannot_record_does_not_hold_up_the_stop(tmp_path: Path) -> None:
    """A request convstore cannot read (not JSON), answered by the upstream with an error:
    it is forwarded, logged as not recorded, and a signal still stops the proxy at once,
    exit 0 (its recording's thread does not wait for a stream that already ended)."""
    db = tmp_path / "store.db"
    error = b'{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}'
    with ReplayServer() as upstream:
        upstream.enqueue(Reply(status=400, body=error))
        with proxy_process(db, "--upstream", f"anthropic={upstream.url}") as (process, url):
            answer = httpx.post(
                url + "/v1/messages",
                content=b"{not json",
                headers={"x-api-key": "sk-ant-cli-test", "content-type": "application/json"},
            )
            assert (answer.status_code, answer.content) == (400, error)
            time.sleep(0.3)  # the recording's thread gives up on it
            started = time.monotonic()
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=10)
    assert process.returncode == 0, err
    assert time.monotonic() - started < 5
    assert "forwarded but not recorded (DecodeError" in err
    assert "not committed" not in err


def test_without_the_proxy_extra_it_says_what_to_install(tmp_path: Path) -> None:
    hide = (
        "import sys; sys.modules['uvicorn'] = None; from convstore.adapters.cli import run; run()"
    )
    done = subprocess.run(
        [sys.executable, "-c", hide, "--db", str(tmp_path / "s.db"), "proxy"],
        check=False,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "pip install 'convstore[proxy]'" in done.stderr
    assert "Traceback" not in done.stderr
