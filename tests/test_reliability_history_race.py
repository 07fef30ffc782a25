"""History recorded once under races (scenario 28), on both backends.

Eight processes ingest one exchange, with its request, into one conversation at once. The
request's missing history and the response's first batch are one transaction at the
version the history was read from, so the user's question is stored once and the
response once; every loser reads the conversation again and reports the response
already stored (or, past its retries, the typed conflict, exit 2). `verify` passes, and
no message is repeated.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from convstore.domain import ResponseStarted, UserMessage, parse_conversation_id
from convstore.storage import open_store

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "anthropic" / "thinking_tool_roundtrip"
WRITERS = 8


def test_concurrent_ingests_record_the_history_once(store_url: str) -> None:
    """Scenario 28: 8 concurrent `ingest --request` runs of one exchange into one
    conversation store its history once; the losers say "already stored" or get the
    typed conflict, and the store holds no repeated message."""
    with open_store(store_url) as store:
        conversation = str(store.service.start("race"))
    argv = [
        sys.executable,
        *("-m", "convstore.adapters.cli", "--db", store_url, "ingest", "--provider", "anthropic"),
        *("--conversation", conversation, "--request", str(EXAMPLE / "1.request.json")),
        *(str(EXAMPLE / "1.response.sse"), "--json"),
    ]
    pipe = subprocess.PIPE
    runs = [subprocess.Popen(argv, stdout=pipe, stderr=pipe) for _ in range(WRITERS)]
    results = [(run.wait(timeout=120), *run.communicate()) for run in runs]
    stored_again = 0
    for code, out, err in results:
        assert code in (0, 2), err.decode()
        if code == 2:
            assert b"moved from version" in err or b"is taken" in err, err.decode()
            continue
        [response] = json.loads(out)["responses"]
        stored_again += response["already_stored"]
    assert stored_again == sum(code == 0 for code, _, _ in results) - 1  # one recorded it
    with open_store(store_url) as store:
        events = list(store.service.events(parse_conversation_id(conversation)))
    questions = Counter(e.blocks for e in events if isinstance(e, UserMessage))
    assert list(questions.values()) == [1], questions
    responses = Counter(e.response_id for e in events if isinstance(e, ResponseStarted))
    assert list(responses.values()) == [1], responses
    verified = subprocess.run(
        [sys.executable, "-m", "convstore.adapters.cli", "--db", store_url, "verify", conversation],
        capture_output=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stderr.decode()
