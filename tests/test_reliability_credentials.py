"""Scenario 33 (RELIABILITY.md): secrets anywhere, on SQLite and PostgreSQL.

Credentials ride inside captured request bodies: an Anthropic MCP server's
`authorization_token`, an OpenAI MCP tool's `authorization` and `headers` (in `tools`, and
in a `tool_search_output` of the request's history), a Gemini MCP server's
`streamableHttpTransport.headers` and a search tool's `apiKey`. The example captures are
ingested with those credentials planted (made up, each its own string), then every
reading is taken: `show`, `audit`, `list`, `search`, `replay` (which says, as a loss, that
each credential must be supplied by configuration) and `export --all` in each format, with
every log record captured. No credential is in any of them, nor in the store: on SQLite
the bytes of the database file and its `-wal`; on PostgreSQL every column of every table
of the test's schema. The marker that replaced them is, as is the text around them (the
positive control). `ask` is checked likewise for the client's own key echoed back in a
successful streamed answer.

The scrubber itself (`adapters.wire.secrets`) and the transport's streaming scrub of a
known key are checked with properties, independently of any store.
"""

from __future__ import annotations

import json
import logging
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convstore.adapters.http.transport import _Scrubber
from convstore.adapters.wire.secrets import MARKER, credential_paths, scrub_request
from convstore.domain.errors import DecodeError
from convstore.storage import open_store
from tests.replay_server import ReplayServer, Reply
from tests.test_reliability_secrets import (
    KEY_VARIABLES,
    _postgres_hits,
    _run,
    _stored_files,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

Body = dict[str, Any]


def _anthropic(body: Body, number: int) -> list[str]:
    for server in body["mcp_servers"]:
        server["authorization_token"] = "S33-anthropic-mcp-token-7fQk2LmZpR"
    return ["S33-anthropic-mcp-token-7fQk2LmZpR"]


def _openai_mcp(body: Body, number: int) -> list[str]:
    for tool in body["tools"]:
        tool["authorization"] = "S33-openai-oauth-token-Vb81xNcQe4"
        tool["headers"] = {
            "Authorization": "Bearer S33-openai-header-bearer-Jd0sWq",
            "X-Api-Key": "S33-openai-header-apikey-Lm3rTy",
            "X-Request-Tag": "kept-header-value-33",
        }
    return [
        "S33-openai-oauth-token-Vb81xNcQe4",
        "S33-openai-header-bearer-Jd0sWq",
        "S33-openai-header-apikey-Lm3rTy",
    ]


def _openai_history(body: Body, number: int) -> list[str]:
    if number == 1:
        return []
    [found] = [item for item in body["input"] if item.get("type") == "tool_search_output"]
    found["tools"].append(
        {
            "type": "mcp",
            "server_label": "meteo",
            "server_url": "https://mcp.example.com/meteo",
            "authorization": "S33-openai-history-token-Qa9ZxW",
            "headers": {"authorization": "Basic S33-openai-history-basic-Pp7"},
        }
    )
    return ["S33-openai-history-token-Qa9ZxW", "S33-openai-history-basic-Pp7"]


def _google(body: Body, number: int) -> list[str]:
    transport = {
        "url": "https://mcp.example.com/mcp",
        "headers": {
            "Authorization": "Bearer S33-google-mcp-bearer-Hh4Kd",
            "x-goog-api-key": "S33-google-mcp-goog-key-Tt2Ws",
        },
    }
    body["tools"].append({"mcpServers": [{"name": "docs", "streamableHttpTransport": transport}]})
    body["tools"].append({"exaAiSearch": {"apiKey": "S33-google-exa-api-key-Zz5Qe"}})
    return [
        "S33-google-mcp-bearer-Hh4Kd",
        "S33-google-mcp-goog-key-Tt2Ws",
        "S33-google-exa-api-key-Zz5Qe",
    ]


Plant = Callable[[Body, int], list[str]]
SEQUENCES: dict[str, list[tuple[str, int, Plant]]] = {
    "anthropic": [("mcp_connector", 3, _anthropic)],
    "openai": [("mcp_approval", 2, _openai_mcp), ("tool_search", 2, _openai_history)],
    "google": [("thinking_function_roundtrip", 2, _google)],
}
"""Provider → the example sequences ingested (folder, exchanges, what is planted)."""


def _planted(folder: Path, number: int, plant: Plant, into: Path) -> tuple[Path, list[str]]:
    """Exchange `number`'s request with credentials planted, written under `into`."""
    body = json.loads((folder / f"{number}.request.json").read_bytes())
    secrets = plant(body, number)
    written = into / f"{folder.name}.{number}.request.json"
    written.write_text(json.dumps(body, ensure_ascii=False))
    return written, secrets


@pytest.fixture
def no_user_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No configuration file of the user's is read."""
    monkeypatch.setenv("CONVSTORE_CONFIG", "/dev/null")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


Run = Callable[..., str]
"""`convstore --db STORE ARGV`, checked to exit as expected: what it printed."""


def _ingest_planted(run: Run, provider: str, into: Path) -> tuple[list[str], set[str]]:
    """Every sequence of `provider` ingested with its credentials planted: the
    conversations, and the credentials."""
    conversations: list[str] = []
    secrets: set[str] = set()
    for name, count, plant in SEQUENCES[provider]:
        folder = EXAMPLES / provider / name
        conversation: list[str] = []
        for number in range(1, count + 1):
            request, planted = _planted(folder, number, plant, into)
            secrets.update(planted)
            [response] = folder.glob(f"{number}.response.*")
            out = run(
                *("ingest", "--provider", provider, "--request", str(request), str(response)),
                *(("--conversation", conversation[0]) if conversation else ()),
                "--json",
            )
            conversation = conversation or [json.loads(out)["conversation_id"]]
        conversations += conversation
    return conversations, secrets


def _readings(run: Run, provider: str, conversations: list[str], exported: Path) -> list[str]:
    """Everything every reading prints or writes; the replays first."""
    replays, printed = [], []
    # The MCP servers are declared (their credentials' places shown) only with consent.
    mcp = (
        []
        if provider == "google"
        else ["--cfg", f"providers.{provider}.hosted_tools.mcp.enable=true"]
    )
    for conversation in conversations:
        replays.append(run("replay", conversation, "--to", provider, "--user", "Et demain ?", *mcp))
        for dry_run in (["--dry-run"], ["--dry-run", "--json"]):
            replays.append(run("replay", conversation, "--to", provider, *dry_run, *mcp))
        for argv in (["show"], ["show", "--json"], ["audit", "--json"]):
            printed.append(run(argv[0], conversation, *argv[1:]))
    printed.append(run("list", "--json"))
    printed += [run("search", query, codes=(0, 1)) for query in ("mcp*", "scrubbed")]
    for format in ("json", "jsonl", "md", "pydantic-ai"):
        printed.append(run("export", "--all", "--format", format, "-o", str(exported / format)))
    printed += [p.read_text() for p in sorted(exported.rglob("*")) if p.is_file()]
    return ["".join(replays), *printed]


@pytest.mark.usefixtures("no_user_config")
@pytest.mark.parametrize("provider", sorted(SEQUENCES))
def test_credentials_in_requests_are_stored_shown_indexed_and_logged_nowhere(
    provider: str,
    store_url: str,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    """Scenario 33: credentials in captured request bodies never reach the store, a
    reading, an export, the search index or a log line; replay names each as a loss."""
    caplog.set_level(logging.DEBUG)

    def run(*argv: str, codes: tuple[int, ...] = (0,)) -> str:
        code, out = _run(capsys, "--db", store_url, *argv)
        assert code in codes, out
        return out

    with open_store(store_url):  # held open: SQLite's WAL is not checkpointed away
        conversations, secrets = _ingest_planted(run, provider, tmp_path)
        assert secrets
        replayed, *printed = _readings(run, provider, conversations, tmp_path / "exports")
        # Replay puts the marker where each credential was and says it must be supplied.
        assert MARKER in replayed
        assert "credential left out: " in replayed
        assert "must be supplied by configuration" in replayed
        assert "kept-header-value-33" in replayed or provider != "openai"
        if store_url.startswith("sqlite"):
            stored = _stored_files(store_url)
            assert MARKER.encode() in stored  # the search finds what is there
            found = [s for s in secrets if s.encode() in stored]
        else:
            assert _postgres_hits(store_url, MARKER)
            found = [s for s in secrets if _postgres_hits(store_url, s)]
        assert found == []

    everything = replayed + "".join(printed)
    assert "mcp.example.com" in everything  # the positive control
    assert [s for s in secrets if s in everything] == []
    assert [s for s in secrets if s in caplog.text] == []
    assert all(s not in str(record.args) for record in caplog.records for s in secrets)


ECHOES = {
    "anthropic": (
        "ANTHROPIC_API_KEY",
        "sk-ant-api03-S33echoANTHROPICkey0123456789abcdef",
        "",
        "claude-sonnet-4-5",
        "anthropic/thinking_tool_roundtrip/1.response.sse",
        "wants to know",
    ),
    "openai": (
        "OPENAI_API_KEY",
        "sk-proj-S33echoOPENAIkey0123456789abcdefghijkl",
        "/v1",
        "gpt-5.1",
        "openai/reasoning_function_roundtrip/1.response.sse",
        "rifi",
    ),
    "google": (
        "GEMINI_API_KEY",
        "AIzaSyS33echoGOOGLEkey0123456789abcdefghij",
        "/v1beta",
        "gemini-3-pro-preview",
        "google/thinking_function_roundtrip/2.response.sse",
        "Lisbonne",
    ),
}
"""Provider → (key variable, key, base path, model, the streamed answer, a piece of its
text the key is echoed after)."""


@pytest.mark.parametrize("provider", sorted(ECHOES))
def test_the_clients_key_echoed_in_a_successful_answer_is_never_stored(
    provider: str,
    store_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Scenario 33: `ask`, whose answer streams back the client's own key inside its text
    (split across the server's chunks), stores and shows it nowhere; the text around it
    is kept."""
    variable, key, base_path, model, answer, anchor = ECHOES[provider]
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("CONVSTORE_URL", *KEY_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CONVSTORE_CONFIG", "/dev/null")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(variable, key)
    body = (EXAMPLES / answer).read_bytes()
    assert body.count(anchor.encode()) >= 1
    echoed = body.replace(anchor.encode(), f"{anchor} {key} ".encode())
    with ReplayServer() as server, open_store(store_url):
        server.enqueue(Reply(body=echoed, content_type="text/event-stream", chunk_size=7))
        code, out = _run(
            capsys,
            *("--db", store_url, "ask", "Quel temps ?", "--provider", provider, "--json"),
            *("--cfg", f"providers.{provider}.base_url={server.url}{base_path}"),
            *("--cfg", f"providers.{provider}.model={model}"),
        )
        assert code == 0, out
        conversation = json.loads(out)["conversation_id"]
        code, shown = _run(capsys, "--db", store_url, "show", conversation, "--json")
        assert code == 0, shown
        assert anchor in shown and "[redacted]" in shown
        if store_url.startswith("sqlite"):
            assert key.encode() not in _stored_files(store_url)
        else:
            assert _postgres_hits(store_url, key) == {}
    assert key not in out + shown


# --- the scrubber, independently of any store ------------------------------------------------

_PLAIN_NAMES = st.text(string.ascii_lowercase, min_size=1, max_size=6).filter(
    lambda name: not any(w in name for w in ("auth", "key", "token", "secret", "password"))
)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_PLAIN_NAMES, inner, max_size=3),
    max_leaves=12,
)
_SPELLINGS = st.sampled_from(
    [
        ("authorization_token", False),
        ("authorizationToken", False),
        ("api_key", False),
        ("API-Key", False),
        ("apiKey", False),
        ("x-api-key", False),
        ("Authorization", False),
        ("access_token", False),
        ("client_secret", False),
        ("Cookie", True),
        ("password", True),
        ("token", True),
        ("X-Custom-Token", True),
        ("Proxy-Authorization", False),
    ]
)
"""A credential's name as a body may spell it, and whether it counts only inside a
credential holder (`headers`)."""


@settings(max_examples=150, deadline=None)
@given(tree=st.dictionaries(_PLAIN_NAMES, _VALUES, max_size=4), data=st.data())
def test_every_planted_credential_is_replaced_and_every_other_byte_kept(
    tree: Body, data: st.DataObject
) -> None:
    """Scenario 33: credentials planted anywhere in a body (under any spelling of their
    names) become the marker, the rest of the body decodes as before, a second scrub
    changes nothing, and `credential_paths` names each place."""
    plain = msgspec.json.encode(tree)
    assert scrub_request(plain) is plain
    planted: list[str] = []
    paths: list[str] = []
    expected = dict(tree)
    for index in range(data.draw(st.integers(1, 3))):
        name, held = data.draw(_SPELLINGS)
        secret = f"S33-planted-{index}-" + data.draw(st.text(string.ascii_letters, min_size=8))
        beside = data.draw(_VALUES)
        slot = f"slot{index}"
        if held:
            tree[slot] = {"headers": {name: secret, "note": beside}}
            expected[slot] = {"headers": {name: MARKER, "note": beside}}
            paths.append(f"{slot}.headers.{name}")
        else:
            tree[slot] = [{"inner": {name: secret}}, beside]
            expected[slot] = [{"inner": {name: MARKER}}, beside]
            paths.append(f"{slot}[0].inner.{name}")
        planted.append(secret)
    scrubbed = scrub_request(msgspec.json.encode(tree))
    assert [s for s in planted if s.encode() in scrubbed] == []
    assert msgspec.json.decode(scrubbed) == expected
    assert scrub_request(scrubbed) == scrubbed
    assert sorted(credential_paths(scrubbed)) == sorted(paths)


def test_values_that_are_not_credentials_keep_their_bytes() -> None:
    """Scenario 33: a schema property named like a credential, a header that is not one,
    a number past float range and an escaped string keep their exact bytes beside a
    scrubbed credential."""
    body = (
        b'{"tools":[{"name":"f","input_schema":{"properties":{"api_key":{"type":"string"}}}}],'
        b'"mcp_servers":[{"name":"d","authorization_token":"S33-x"}],'
        b'"headers":{"X-Trace":"t\\u00e9"},"n":1.50e3,"max_tokens":5}'
    )
    scrubbed = scrub_request(body)
    assert b"S33-x" not in scrubbed
    for kept in (b'{"properties":{"api_key":{"type":"string"}}}', b'"t\\u00e9"', b"1.50e3"):
        assert kept in scrubbed
    assert credential_paths(scrubbed) == ["mcp_servers[0].authorization_token"]


def test_a_credential_named_twice_keeps_neither_value() -> None:
    """Scenario 33: an object repeating a credential's name, its last value null or
    already the marker, keeps none of the earlier values."""
    for last in (b"null", b'"[scrubbed by convstore]"', b'""'):
        body = b'{"mcp_servers":[{"authorization_token":"S33-first","authorization_token":%s}]}'
        scrubbed = scrub_request(body % last)
        assert b"S33-first" not in scrubbed
        assert msgspec.json.decode(scrubbed) == msgspec.json.decode(body % last)


def test_a_credential_nested_past_the_limit_is_refused() -> None:
    """Scenario 33: a credential-like name deeper than the scrubber looks is a typed
    error (the body is not recorded), never stored unscrubbed."""
    deep = b'{"a":' + b'{"b":' * 200 + b'{"api_key":"S33-deep"}' + b"}" * 201
    with pytest.raises(DecodeError, match="deeper than"):
        scrub_request(deep)


@settings(max_examples=200, deadline=None)
@given(
    before=st.binary(max_size=40),
    after=st.binary(max_size=40),
    cuts=st.lists(st.integers(0, 200), max_size=6),
)
def test_a_key_split_anywhere_in_a_streamed_body_is_scrubbed(
    before: bytes, after: bytes, cuts: list[int]
) -> None:
    """Scenario 33: the transport's streaming scrub removes the request's key from a
    successful body whatever pieces it arrives in, and hands over every other byte."""
    key = "sk-S33-streamed-key-0123456789"
    scrubber = _Scrubber({"authorization": f"Bearer {key}"})
    body = before + key.encode() + after + key.encode()
    points = sorted({min(c, len(body)) for c in cuts})
    pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    out = b"".join(scrubber.stream(pieces))
    assert out == scrubber.data(body)
    assert key.encode() not in out
