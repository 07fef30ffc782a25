"""The links of a display obligation's HTML content, read with the standard library's
HTML parser: best effort, for readers that cannot show the content itself.

Google requires its Search Suggestions (`renderedContent`, HTML and CSS) to be shown with
grounded answers; only the web viewer displays that markup (sandboxed). A transcript or
a Markdown export lists the suggestions instead: each `<a href>`'s text and address, in
order. Nothing else of the markup is kept, and nothing here renders or trusts it: the
text and the address are untrusted strings for each renderer to make inert.
"""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Final, Protocol

MAX_LINKS: Final = 50
"""At most this many links are read from one content (Google sends a handful)."""


class DisplayLike(Protocol):
    """A display obligation (domain `Display`)."""

    @property
    def content(self) -> str: ...
    @property
    def content_type(self) -> str: ...


class _Anchors(HTMLParser):
    """Collects (text, href) of every anchor; text inside `<style>`/`<script>` is skipped."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("style", "script"):
            self._hidden += 1
        elif tag == "a":
            self._close()
            href = dict(attrs).get("href")
            self._href = href.strip() if href else None
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("style", "script"):
            self._hidden = max(self._hidden - 1, 0)
        elif tag == "a":
            self._close()

    def handle_data(self, data: str) -> None:
        if self._href is not None and not self._hidden:
            self._text.append(data)

    def _close(self) -> None:
        if self._href and len(self.found) < MAX_LINKS:
            text = " ".join("".join(self._text).split())
            self.found.append((text or self._href, self._href))
        self._href = None

    def close(self) -> None:
        super().close()
        self._close()


def links(display: DisplayLike) -> list[tuple[str, str]]:
    """(text, url) of each anchor in an HTML display's content, in order; none for other
    content types or content the parser cannot read."""
    if display.content_type.split(";")[0].strip().lower() != "text/html":
        return []
    parser = _Anchors()
    try:
        parser.feed(display.content)
        parser.close()
    except (AssertionError, ValueError):  # malformed markup the parser gives up on
        return parser.found
    return parser.found
