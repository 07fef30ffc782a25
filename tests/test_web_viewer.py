"""The web viewer's pages and rules, in process (Starlette's test client over the ASGI
app), on a real SQLite store opened read-only: what each page shows, what bad input gets,
the Host and token rules, the headers, hostile text kept inert, and that nothing writes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from convstore.adapters.cli import main
from convstore.adapters.web.app import viewer_app
from convstore.adapters.web.guard import COOKIE, DISPLAY_POLICY, PAGE_POLICY
from convstore.adapters.web.html import link_url
from convstore.adapters.web.server import allowed_hosts
from convstore.domain import ConversationId
from convstore.storage import Store, open_store
from tests.viewing import BIDI, PLANTED, SOURCES, capture_files, fill, ingest, viewer_store

TOKEN = "t0ken-for-the-viewer-tests-0123456789"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return viewer_store(tmp_path_factory.mktemp("viewer"))


@pytest.fixture
def reader(db: Path) -> Iterator[Store]:
    store = open_store(f"sqlite:///{db}", read_only=True)
    yield store
    store.close()


@pytest.fixture
def client(reader: Store) -> Iterator[TestClient]:
    with TestClient(viewer_app(reader, hosts=frozenset({"testserver"}))) as http:
        yield http


def _ids(store: Store) -> dict[str, ConversationId]:
    """The conversations by title."""
    return {s.title: s.id for s in store.service.list(limit=50)}


def _hostile(store: Store) -> ConversationId:
    return _ids(store)["hostile"]  # a capture's conversation is titled by its folder


class _Elements(HTMLParser):
    """Every start tag and its attributes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _elements(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Elements()
    parser.feed(html)
    return parser.tags


def test_the_list_shows_every_conversation_newest_first(client: TestClient, reader: Store) -> None:
    page = client.get("/")
    assert page.status_code == 200
    ids = [s.id for s in reader.service.list(limit=50, newest_first=True)]
    shown = re.findall(r'href="/c/([0-9a-f-]{36})"', page.text)
    assert list(dict.fromkeys(shown)) == [str(i) for i in ids]
    assert f"{len(ids)} of {len(ids)} shown" in page.text


def test_the_list_filters_and_pages(client: TestClient, reader: Store) -> None:
    google = client.get("/", params={"provider": "google"}).text
    assert "2 of 2 shown" in google
    assert "claude" not in google
    first = client.get("/", params={"limit": "1"}).text
    assert "1 of 3 shown" in first
    assert 'rel="next" href="/?limit=1&amp;offset=1"' in first
    last = client.get("/", params={"limit": "1", "offset": "2"}).text
    assert 'rel="prev"' in last and 'rel="next"' not in last
    assert "No conversation matches" in client.get("/", params={"title": "no such"}).text
    dated = client.get("/", params={"since": "2999-01-01"}).text
    assert "0 of 0 shown" in dated


def test_a_transcript_shows_citations_activities_usage_and_ids(
    client: TestClient, reader: Store
) -> None:
    anthropic = _ids(reader)["web_search_citations"]
    page = client.get(f"/c/{anthropic}").text
    assert "⚒ web search: " in page and "→ " in page  # the activity line and its outcome
    assert re.search(r'<sup class="mark"><a href="#src-\d+-1">\[1\]</a></sup>', page)
    assert 'rel="noopener noreferrer nofollow"' in page
    assert "msg_01UeHGUINmC7g14hVMYgQsAZ" in page  # the response id
    assert "end_turn" in page  # the provider's stop reason
    assert "tokens in 9874" in page
    assert "chain verified" in page
    short = client.get(f"/c/{str(anthropic)[:8]}")  # a unique prefix names it too
    assert short.status_code == 200 and "msg_01UeHGUINmC7g14hVMYgQsAZ" in short.text


def test_a_search_suggestion_is_framed_from_its_own_route(
    client: TestClient, reader: Store
) -> None:
    conversation = _hostile(reader)
    page = client.get(f"/c/{conversation}").text
    frames = [attrs for tag, attrs in _elements(page) if tag == "iframe"]
    assert len(frames) == 1
    assert frames[0]["sandbox"] == "allow-popups"
    source = frames[0]["src"] or ""
    assert source.startswith(f"/display/{conversation}/")
    shown = client.get(source)
    assert shown.status_code == 200
    assert shown.headers["content-security-policy"] == DISPLAY_POLICY
    assert "script-src 'none'" in DISPLAY_POLICY and "sandbox allow-popups" in DISPLAY_POLICY
    assert shown.headers["x-frame-options"] == "SAMEORIGIN"
    assert "quokka facts" in shown.text  # the provider's markup, as Google requires
    assert client.get(f"/display/{conversation}/no-such-activity").status_code == 404


def test_hostile_text_stays_inert(client: TestClient, reader: Store) -> None:
    conversation = _hostile(reader)
    for path in (f"/c/{conversation}", f"/c/{conversation}/audit", "/", f"/search?q={PLANTED}"):
        page = client.get(path)
        assert page.status_code == 200, path
        elements = _elements(page.text)
        assert not [tag for tag, _ in elements if tag in ("script", "img", "object", "embed")]
        assert [t for t, _ in elements if t == "iframe"] == (
            ["iframe"] if path == f"/c/{conversation}" else []
        )
        for tag, attrs in elements:
            assert not [name for name in attrs if name.startswith("on")], (path, tag, attrs)
            for name in ("href", "src", "action"):
                value = attrs.get(name)
                if value is not None:
                    assert value.startswith(("/", "#", "http://", "https://")), (path, value)
        assert BIDI not in page.text
        assert "PWNED" not in page.text
    page = client.get(f"/c/{conversation}").text
    assert "&lt;script&gt;alert(&#39;user&#39;)&lt;/script&gt;" in page  # shown, as text
    assert "\ufffdtxt.exe" in page  # the override made visible
    for url, _title in SOURCES[:3]:
        assert f'href="{url}' not in page
    assert 'href="https://example.com/quokka"' in page


@pytest.mark.parametrize(
    ("url", "linked"),
    [
        ("https://example.com/a?b=c#d", True),
        ("http://example.com", True),
        ("HTTPS://EXAMPLE.COM/", True),
        ("javascript:alert(1)", False),
        ("JaVaScRiPt:alert(1)", False),
        ("data:text/html,x", False),
        ("vbscript:x", False),
        ("//evil.example/x", False),
        ("/relative", False),
        ("https://example.com/a b", False),
        (f"https://example.com/{BIDI}gpj", False),
        ("https:///no-host", False),
        ("", False),
        (None, False),
    ],
)
def test_only_http_and_https_addresses_become_links(url: str | None, linked: bool) -> None:
    assert (link_url(url) is not None) is linked
    assert link_url(url) in (url, None)


def test_the_audit_page(client: TestClient, reader: Store) -> None:
    anthropic = _ids(reader)["web_search_citations"]
    page = client.get(f"/c/{anthropic}/audit").text
    assert "chain verified" in page
    assert "web_search_requests" in page  # the provider's counter beside the recorded count
    assert "msg_01UeHGUINmC7g14hVMYgQsAZ" in page
    assert "web_search_20250305" in page  # the payload inventory: metadata only
    assert "metadata only" in page


def test_search_finds_the_planted_conversation_and_links_its_turn(
    client: TestClient, reader: Store
) -> None:
    page = client.get("/search", params={"q": PLANTED}).text
    conversation = _hostile(reader)
    assert f'href="/c/{conversation}#turn-' in page
    assert "up to date" in page
    assert "No matches" in client.get("/search", params={"q": "xyzzyplugh"}).text


def test_search_says_how_far_behind_the_index_is(tmp_path: Path) -> None:
    db = viewer_store(tmp_path, index=False)
    store = open_store(f"sqlite:///{db}", read_only=True)
    try:
        with TestClient(viewer_app(store, hosts=frozenset({"testserver"}))) as http:
            page = http.get("/search", params={"q": PLANTED}).text
        assert re.search(r"the index is \d+ events behind the log", page)
    finally:
        store.close()


def test_the_replay_preview(client: TestClient, reader: Store) -> None:
    anthropic = _ids(reader)["web_search_citations"]
    same = client.get(f"/c/{anthropic}/replay").text
    assert "--to anthropic" in same
    other = client.get(f"/c/{anthropic}/replay", params={"to": "openai", "model": "gpt-5"}).text
    assert "left out" in other  # Anthropic's hosted search results cannot go to OpenAI
    assert client.get(f"/c/{anthropic}/replay", params={"to": "gemini"}).status_code == 200


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/c/zz", 400, "is not a conversation id"),
        ("/c/00000000-0000-4000-8000-000000000000", 404, "is not in this store"),
        ("/c/ffffffff", 404, "no conversation"),
        ("/?since=yesterday", 400, "is not an ISO 8601 date"),
        ("/?offset=-1", 400, "offset must be a whole number"),
        ("/search?q=-alone", 400, "nothing to search"),
        ("/nowhere", 404, "Not Found"),
    ],
)
def test_bad_input_gets_a_page_that_says_why(
    client: TestClient, path: str, status: int, says: str
) -> None:
    page = client.get(path)
    assert page.status_code == status
    assert says in page.text
    assert page.headers["content-security-policy"] == PAGE_POLICY


def test_an_unknown_replay_target_is_refused(client: TestClient, reader: Store) -> None:
    anthropic = _ids(reader)["web_search_citations"]
    page = client.get(f"/c/{anthropic}/replay", params={"to": "cohere"})
    assert page.status_code == 400 and "is not one of" in page.text


def test_only_get_is_answered(client: TestClient, reader: Store) -> None:
    anthropic = _ids(reader)["web_search_citations"]
    for path in ("/", f"/c/{anthropic}", "/search"):
        assert client.post(path).status_code == 405
        assert client.delete(path).status_code == 405


def test_every_answer_carries_the_headers(client: TestClient) -> None:
    for path in ("/", "/static/viewer.css", "/nowhere"):
        headers = client.get(path).headers
        assert headers["content-security-policy"] == PAGE_POLICY
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["cache-control"] == "no-store"
    assert "default-src 'self'" in PAGE_POLICY and "script-src 'none'" in PAGE_POLICY
    assert client.get("/static/viewer.css").headers["content-type"].startswith("text/css")


def test_a_foreign_host_header_is_refused(reader: Store) -> None:
    hosts = allowed_hosts("127.0.0.1", ["viewer.example.org"])
    assert hosts >= {"127.0.0.1", "localhost", "[::1]", "viewer.example.org"}
    with TestClient(viewer_app(reader, hosts=hosts), base_url="http://127.0.0.1:8787") as http:
        assert http.get("/").status_code == 200
        assert http.get("/", headers={"host": "localhost:8787"}).status_code == 200
        assert http.get("/", headers={"host": "viewer.example.org"}).status_code == 200
        rebound = http.get("/", headers={"host": "attacker.example:8787"})
        assert rebound.status_code == 403
        assert "host name" in rebound.text
        assert "conversation" not in rebound.text.lower()
        assert http.get("/", headers={"host": ""}).status_code == 403
    assert allowed_hosts("0.0.0.0", []) == frozenset()  # every name must be given


def test_the_token_is_needed_in_a_header_or_the_login_cookie(reader: Store) -> None:
    app = viewer_app(reader, hosts=frozenset({"testserver"}), token=TOKEN)
    with TestClient(app) as http:
        assert http.get("/").status_code == 401
        assert http.get("/", params={"token": TOKEN}).status_code == 401  # never in the URL
        assert http.get("/", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert http.get("/", headers={"authorization": "Bearer wrong"}).status_code == 401
        assert http.get("/login").status_code == 200
        assert http.get("/static/viewer.css").status_code == 200
        wrong = http.post("/login", data={"token": "nope"}, follow_redirects=False)
        assert wrong.status_code == 401 and COOKIE not in wrong.headers.get("set-cookie", "")
        signed = http.post("/login", data={"token": TOKEN}, follow_redirects=False)
        assert signed.status_code == 303
        cookie = signed.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie
        assert "SameSite=strict" in cookie or "samesite=strict" in cookie.lower()
        assert http.get("/").status_code == 200  # the client keeps the cookie
        http.cookies.clear()
        http.cookies.set(COOKIE, "forged")
        assert http.get("/").status_code == 401


def _digest(db: Path) -> tuple[str, str]:
    """The database's and its WAL's contents (an absent WAL is an empty one; the `-shm`
    index is every reader's scratch space, not data)."""
    wal = db.with_name(db.name + "-wal")
    return (
        hashlib.sha256(db.read_bytes()).hexdigest(),
        hashlib.sha256(wal.read_bytes() if wal.exists() else b"").hexdigest(),
    )


def test_serving_never_writes(tmp_path: Path) -> None:
    """Every page read, the store's files are byte for byte as they were; and a write
    through the viewer's store fails."""
    db = viewer_store(tmp_path, index=False)
    before = _digest(db)
    store = open_store(f"sqlite:///{db}", read_only=True)
    try:
        with TestClient(viewer_app(store, hosts=frozenset({"testserver"}))) as http:
            ids = [s.id for s in store.service.list(limit=50)]
            for conversation in ids:
                for path in ("", "/audit", "/replay", "/replay?to=openai&model=gpt-5"):
                    assert http.get(f"/c/{conversation}{path}").status_code == 200
            assert http.get("/search", params={"q": PLANTED}).status_code == 200
            assert http.get("/").status_code == 200
        with pytest.raises(Exception, match=r"(?i)read.?only|readonly"):
            store.service.retitle(ids[0], "changed by the viewer")
    finally:
        store.close()
    assert _digest(db) == before


def test_a_second_capture_is_listed_after_ingest(tmp_path: Path) -> None:
    """The viewer reads the store as it is now: a conversation recorded meanwhile shows."""
    db = viewer_store(tmp_path, index=False)
    store = open_store(f"sqlite:///{db}", read_only=True)
    try:
        with TestClient(viewer_app(store, hosts=frozenset({"testserver"}))) as http:
            assert "3 of 3 shown" in http.get("/").text
            ingest(db, "google", *capture_files("google/grounding_unplaced/1"))
            assert "4 of 4 shown" in http.get("/").text
    finally:
        store.close()


def test_the_viewer_reads_either_backend(store_url: str, tmp_path: Path) -> None:
    """The same pages on SQLite and on PostgreSQL, each store opened read-only."""
    fill(store_url, tmp_path)
    store = open_store(store_url, read_only=True)
    try:
        with TestClient(viewer_app(store, hosts=frozenset({"testserver"}))) as http:
            assert "3 of 3 shown" in http.get("/").text
            for summary in store.service.list(limit=50):
                for path in ("", "/audit", "/replay"):
                    assert http.get(f"/c/{summary.id}{path}").status_code == 200
            found = http.get("/search", params={"q": PLANTED}).text
            assert f'href="/c/{_hostile(store)}#turn-' in found
        with pytest.raises(Exception, match=r"(?i)read.?only"):
            store.service.retitle(_hostile(store), "changed by the viewer")
    finally:
        store.close()


def test_a_forgotten_conversation_says_when_and_nothing_else(tmp_path: Path) -> None:
    """On an encrypted store, after `convstore forget`, every page of the conversation says
    "forgotten on DATE" (200, as `show` exits 0) and shows nothing of it; the list and
    search no longer hold it; the others read as before."""
    db = tmp_path / "encrypted.db"
    url = f"sqlite:///{db}"
    open_store(url, encrypt=True).close()
    fill(url, tmp_path)
    with open_store(url, read_only=True) as before:
        hostile = _hostile(before)
        others = [s.id for s in before.service.list(limit=50) if s.id != hostile]
    assert main(["--db", url, "forget", str(hostile), "--reason", "asked to be"]) == 0
    store = open_store(url, read_only=True)
    try:
        with TestClient(viewer_app(store, hosts=frozenset({"testserver"}))) as http:
            for path in ("", "/audit", "/replay", "/replay?to=openai&model=gpt-5"):
                page = http.get(f"/c/{hostile}{path}")
                assert page.status_code == 200, path
                assert re.search(
                    rf"conversation {hostile} was forgotten on \d{{4}}-\d\d-\d\d", page.text
                )
                assert PLANTED not in page.text and "quokka" not in page.text.lower()
            searched = http.get("/search", params={"q": PLANTED}).text
            assert "No matches" in searched and 'class="hits"' not in searched
            assert "events behind the log" in searched  # purged by forget, not by a catch-up
            listed = http.get("/").text
            assert str(hostile) not in listed and "2 of 2 shown" in listed
            for conversation in others:
                assert "chain verified" in http.get(f"/c/{conversation}").text
    finally:
        store.close()
