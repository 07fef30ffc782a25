"""The web viewer in a real browser: Debian's headless Chromium (never a downloaded one),
driven by Playwright, against `convstore serve` running as a process.

Pages load and show citations, activity lines and search hits; a capture full of hostile
text stays inert (no dialog fires, no request leaves for another origin, the Search
Suggestion cannot touch its parent page, our own pages raise no CSP violation); every
page works without JavaScript. Screenshots are saved under `.artifacts/viewer/`.

Chromium is installed by `.ci/run`; without it these tests skip, except where
`CONVSTORE_REQUIRE_BROWSER=1` (CI), where they fail.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from convstore.adapters.web.guard import DISPLAY_POLICY, PAGE_POLICY
from convstore.storage import open_store
from tests.viewing import PLANTED, ROOT, viewer_process, viewer_store

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / ".artifacts" / "viewer"

if not Path(CHROMIUM).exists():
    if os.environ.get("CONVSTORE_REQUIRE_BROWSER") == "1":
        raise RuntimeError("CONVSTORE_REQUIRE_BROWSER=1 but Debian's chromium is not installed")
    pytest.skip("Debian's chromium is not installed (.ci/run installs it)", allow_module_level=True)

sync_api = pytest.importorskip("playwright.sync_api")


class Watch:
    """What a page did: dialogs, requests to other origins, console messages."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.dialogs: list[str] = []
        self.foreign: list[str] = []
        self.console: list[tuple[str, str, str]] = []

    def attach(self, page: Any) -> None:
        def dialog(d: Any) -> None:
            self.dialogs.append(d.message)
            d.dismiss()

        def route(r: Any) -> None:
            url = r.request.url
            if _origin(url) == self.origin:
                r.continue_()
            else:
                self.foreign.append(url)
                r.abort()

        page.on("dialog", dialog)
        page.route("**/*", route)
        page.on(
            "console",
            lambda m: self.console.append((m.type, m.text, (m.location or {}).get("url", ""))),
        )

    def own_violations(self) -> list[tuple[str, str, str]]:
        """CSP violations of our pages' policy. Chromium reports the framed provider
        markup's under the top page's address, so a violation is told by the directive it
        quotes: one only the Search Suggestion's policy has is the provider markup's,
        blocked as it should be."""
        own = []
        for message in self.console:
            if "Content Security Policy" not in message[1]:
                continue
            quoted = re.search(r'directive: "([^"]+)"', message[1])
            directive = quoted.group(1) if quoted else ""
            if not (_directives(DISPLAY_POLICY) - _directives(PAGE_POLICY)) >= {directive}:
                own.append(message)
        return own


def _directives(policy: str) -> set[str]:
    return {part.strip() for part in policy.split(";")}


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    db = viewer_store(tmp_path_factory.mktemp("browser"))
    store = open_store(f"sqlite:///{db}", read_only=True)
    titles = {s.title: str(s.id) for s in store.service.list(limit=50)}
    store.close()
    with viewer_process(db) as (_, url):
        yield url, titles


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--disable-background-networking"]
        )
        yield launched
        launched.close()


def _page(browser: Any, url: str, *, javascript: bool = True) -> tuple[Any, Watch]:
    context = browser.new_context(
        java_script_enabled=javascript, viewport={"width": 1100, "height": 900}
    )
    page = context.new_page()
    watch = Watch(_origin(url))
    watch.attach(page)
    return page, watch


def _shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_pages_load_with_citations_activity_lines_and_search(
    served: tuple[str, dict[str, str]], browser: Any
) -> None:
    url, titles = served
    page, watch = _page(browser, url)
    page.goto(url + "/")
    assert page.locator("table.list tbody tr").count() == len(titles)
    _shot(page, "list")
    page.click("text=web_search_citations")
    assert page.url.endswith(titles["web_search_citations"])
    assert page.locator("sup.mark").count() >= 1
    assert page.locator("ol.sources li").count() >= 1
    assert page.locator(".activity summary").first.inner_text().startswith("⚒ web search")
    assert "chain verified" in page.locator(".badge").inner_text()
    _shot(page, "transcript")
    page.locator(".activity summary").first.click()  # expands to its input and outcome
    assert page.locator(".activity dl").first.is_visible()
    page.click("text=audit")
    assert "Hosted spend" in page.content()
    _shot(page, "audit")
    page.fill("input[name=q]", PLANTED)
    page.press("input[name=q]", "Enter")
    hits = page.locator("ol.hits li a")
    assert hits.count() == 1
    hits.first.click()
    assert titles["hostile"] in page.url and "#turn-" in page.url
    _shot(page, "search-hit")
    assert watch.dialogs == [] and watch.foreign == [] and watch.own_violations() == []
    page.context.close()


def test_a_hostile_capture_stays_inert(served: tuple[str, dict[str, str]], browser: Any) -> None:
    url, titles = served
    page, watch = _page(browser, url)
    page.goto(f"{url}/c/{titles['hostile']}")
    frame = page.frame_locator("iframe.suggestion")
    assert frame.locator("text=quokka facts").is_visible()  # shown, as Google requires
    for details in page.locator("details").all():
        details.evaluate("d => { d.open = true }")
    page.wait_for_timeout(500)  # any timer, focus handler or lazy load would fire now
    body = page.locator("body").inner_text()
    assert "PWNED" not in body
    assert "<script>alert('user')</script>" in body  # shown as text
    assert page.evaluate("document.scripts.length") == 0
    assert page.evaluate("window.frames.length") == 1
    _shot(page, "hostile")
    assert watch.dialogs == []
    assert watch.foreign == []
    assert watch.own_violations() == []
    page.context.close()


def test_every_page_works_without_javascript(
    served: tuple[str, dict[str, str]], browser: Any
) -> None:
    url, titles = served
    page, watch = _page(browser, url, javascript=False)
    conversation = titles["grounding_search_stream"]
    for path in (
        "/",
        f"/c/{conversation}",
        f"/c/{conversation}/audit",
        f"/c/{conversation}/replay",
        f"/search?q={PLANTED}",
    ):
        answer = page.goto(url + path)
        assert answer is not None and answer.status == 200, path
    page.goto(url + "/")
    page.fill("input[name=provider]", "google")
    page.click("form.filters button")
    assert "provider=google" in page.url
    assert page.locator("table.list tbody tr").count() == 2
    page.goto(f"{url}/c/{conversation}/replay")
    page.select_option("select[name=to]", "openai")
    page.fill("input[name=model]", "gpt-5")
    page.click("form.filters button")
    assert "to=openai" in page.url and "Replay preview" in page.content()
    _shot(page, "replay-no-javascript")
    assert watch.foreign == [] and watch.own_violations() == []
    page.context.close()
