"""The Markdown export through a real CommonMark renderer (markdown-it-py, `commonmark`).

What is checked on the parsed document, not on the source text: stored text reads back as
it was stored (escaped only where markup would form, so prose keeps no stray backslash);
the only links are the sources' and the Search Suggestions' http and https addresses;
hostile text (HTML, `javascript:` links, autolinks, escape sequences, headings, lists,
quotes, emphasis at a line's start) makes no element of its own; code and outputs are
fenced blocks holding exactly what was run and written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.token import Token

from convstore.adapters.terminal.render import sanitize
from convstore.projections import export, portable
from convstore.projections.markdown import fenced, md_body, md_inline, md_link, md_text, md_url
from convstore.projections.portable import ActivityItem, TextItem
from convstore.storage import Store, open_store
from tests.test_portable import ingest_examples, items

MD = MarkdownIt("commonmark")
GFM = MarkdownIt("commonmark").enable("table")
"""With tables, as the readers that render a model's tables do."""
CODE_RUNS = ("code_execution", "code_interpreter")

OUR_LIST_ITEMS = (
    "conversation: ",
    "started: ",
    "labels: ",
    "chain: ",
    "schema: ",
    "time: ",
    "response ",
    "hosted spend: ",
    "⚒ ",
    "[",
    "tool call ",
    "unknown ",
    "not a web address: ",
    # A response's notices, by kind (`wording.notice_lines`).
    "refusal",
    "safety ratings of the ",
    "blocked",
    "incomplete",
    "error",
    "finish message",
    "stop sequence",
    "screening",
    "container",
    "context management",
)
"""How every bullet the export writes begins (a suggestion's is a link alone; a chain
problem's, the conversation id)."""
CHAIN_PROBLEM = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12} ")
OUR_STRONG = ("User", "Assistant", "Reasoning", "System prompt", "Context (", "result")
OUR_EMPHASIS = (
    "Response ",
    "Turn ended: ",
    "(no text)",
    "Citations incomplete",
    "Reasoning: redacted",
    "no result",
    "Display obligation (",
)


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("markdown-examples")
    with open_store(f"sqlite:///{folder / 'store.db'}") as store:
        yield store, ingest_examples(store.service)


def _reading(examples: tuple[Store, dict[str, Any]], name: str) -> portable.PortableConversation:
    from convstore.adapters.wire.providers import read_payload

    store, ids = examples
    return portable.load(store.service, ids[name][0], read_payload)


def _markdown(reading: portable.PortableConversation) -> str:
    return "".join(export.render(reading, "md"))


def links(md: str) -> list[tuple[str, str]]:
    """(href, text) of every link the document renders."""
    found: list[tuple[str, str]] = []
    for token in MD.parse(md):
        children = token.children or []
        for at, child in enumerate(children):
            if child.type == "link_open":
                found.append((str(child.attrs["href"]), children[at + 1].content))
    return found


def assert_inert_markdown(md: str, urls: Iterable[str] = ()) -> None:
    """Nothing in `md` but the elements the export writes, and stored text's own Markdown
    inside our block quotes: no raw HTML or image anywhere; outside the quotes no heading,
    bullet, rule or emphasis that stored text made, links only to `urls` (the stored http
    and https addresses of sources and suggestions); inside them, headings from h3 down and
    links only to http and https addresses."""
    assert sanitize(md) == md  # nothing a terminal would act on
    allowed = {MD.normalizeLink(u) for url in urls if (u := md_url(url)) is not None}
    tokens = MD.parse(md)
    assert tokens[0].type == "heading_open" and tokens[0].tag == "h1"
    quoted = 0
    for at, token in enumerate(tokens):
        assert token.type not in ("html_block", "html_inline", "image"), token
        quoted += {"blockquote_open": 1, "blockquote_close": -1}.get(token.type, 0)
        if quoted:
            if token.type == "heading_open":
                assert token.tag in ("h3", "h4", "h5", "h6"), token
            if token.type == "inline":
                _check_quoted(token)
            continue
        assert token.type not in ("hr", "ordered_list_open"), token
        if token.type == "heading_open":
            assert (token.tag == "h1" and at == 0) or token.tag == "h2", token
            if token.tag == "h2":
                assert tokens[at + 1].content.startswith(("Turn ", "Outside a turn")), token
        if token.type != "inline":
            continue
        if tokens[at - 2].type == "list_item_open":  # the first paragraph of a bullet
            first = next((c for c in token.children or () if c.content or c.nesting), None)
            ours = token.content.startswith(OUR_LIST_ITEMS) or CHAIN_PROBLEM.match(token.content)
            assert ours or (first is not None and first.type == "link_open"), token.content
        _check_inline(token, allowed)


def _check_inline(inline: Token, allowed: set[str]) -> None:
    """Links only to `allowed`; emphasis only where the export writes it (opening a
    paragraph, never nested); inline code only for the chain head."""
    children = [c for c in inline.children or () if c.type != "text" or c.content]
    depth = 0
    for at, child in enumerate(children):
        assert child.type not in ("html_inline", "image"), (child, inline.content)
        if child.type == "link_open":
            href = str(child.attrs["href"])
            assert href.startswith(("http://", "https://")) and href in allowed, href
        if child.type == "code_inline":
            assert inline.content.startswith("chain: "), inline.content
        if child.type in ("strong_open", "em_open"):
            inner = children[at + 1].content if at + 1 < len(children) else ""
            ours = inner.startswith(OUR_STRONG if child.type == "strong_open" else OUR_EMPHASIS)
            verdict = inline.content.startswith("chain: ") and inner == "does not verify"
            assert depth == 0 and (at == 0 or verdict) and (ours or verdict), inline.content
            depth += 1
        elif child.type in ("strong_close", "em_close"):
            depth -= 1


def _check_quoted(inline: Token) -> None:
    """Stored text's own inline Markdown: links to http and https only, no marker of ours
    in a link's text."""
    children = inline.children or []
    for at, child in enumerate(children):
        assert child.type not in ("html_inline", "image"), (child, inline.content)
        if child.type == "link_open":
            href = str(child.attrs["href"])
            assert href.startswith(("http://", "https://")), href
            assert not re.search(r"\[\d+\]", children[at + 1].content), inline.content


# --- stored text reads as stored ---------------------------------------------------------------

MARKUP = [
    "#",
    "# ",
    "## x",
    "> ",
    "- ",
    "+ ",
    "* ",
    "1. ",
    "2) ",
    "---",
    "===",
    "~~~",
    "```",
    "`",
    "*",
    "**",
    "_",
    "__",
    "[",
    "]",
    "(",
    ")",
    "![",
    "[x](javascript:alert(1))",
    "[x][y]",
    "[y]: http://evil.example",
    "<",
    "<a href='http://evil.example'>",
    "</p>",
    "<!--",
    "<?php",
    "<!DOCTYPE",
    "<http://evil.example>",
    "<me@evil.example>",
    "&",
    "&amp;",
    "&#60;",
    "&#x3C;",
    "&copy;",
    "AT&T",
    "\\",
    "\\*",
    "\\\\",
    "https://example.org/a_b*c",
    "snake_case_name",
    "a_",
    "_a",
    "é_é",
    "3 < 5",
    "x > y",
    "|a|b|",
    "~~s~~",
    "@me",
    "javascript:alert(1)",
    "中文",
    "🍵",
    " ",
    ".",
    ":",
    "!",
]
_words = st.lists(
    st.one_of(
        st.sampled_from(MARKUP), st.text("abcXYZ019 .,;:!?'\"-_*#<>&[]()\\`~|=+@/", max_size=6)
    ),
    min_size=1,
    max_size=8,
).map("".join)
one_line = _words.map(lambda text: " ".join(text.split())).filter(bool)
"""Text on one line as a paragraph holds it: no leading, trailing or doubled whitespace."""


def _paragraph_text(md: str) -> str:
    """The text of a document that must be one paragraph (soft breaks as newlines)."""
    tokens = MD.parse(md)
    assert [t.type for t in tokens] == ["paragraph_open", "inline", "paragraph_close"], md
    out = []
    for child in tokens[1].children or ():
        assert child.type in ("text", "softbreak"), (child.type, md)
        out.append("\n" if child.type == "softbreak" else child.content)
    return "".join(out)


@settings(max_examples=400, deadline=None)
@given(one_line)
def test_one_line_of_stored_text_reads_back_as_stored(text: str) -> None:
    assert _paragraph_text(md_text(text)) == text
    assert _paragraph_text(f"x {md_inline(text)}") == f"x {text}"


@settings(max_examples=300, deadline=None)
@given(st.lists(one_line, min_size=1, max_size=6))
def test_lines_of_stored_text_read_back_as_stored(lines: list[str]) -> None:
    """Every line is a line's start: headings, lists, quotes, fences, setext underlines,
    thematic breaks, definitions and HTML blocks all stay text."""
    text = "\n".join(lines)
    assert _paragraph_text(md_text(text)) == text


def test_prose_keeps_no_stray_backslash() -> None:
    prose = (
        "Uji, a small city (宇治) between Kyoto and Nara, has grown tea since the 14th century."
        " See https://www.example.org/food/uji-matcha-cafes — 3 < 5 & AT&T agree: it's 50% "
        "off! Write to tea@example.org; use snake_case_names, version 2.0 or C# #1."
    )
    assert md_text(prose) == prose


def test_escaping_is_minimal_where_markup_would_form() -> None:
    assert md_text("### Heading") == "\\### Heading"
    assert md_text("#hashtag and ####### seven") == "#hashtag and ####### seven"
    assert md_text("- item\n1. first\n> quoted") == "\\- item\n1\\. first\n\\> quoted"
    assert md_text("[a](http://x.org)") == "\\[a](http://x.org)"
    assert md_text("<b>bold</b> &amp; x") == "\\<b>bold\\</b> \\&amp; x"
    assert md_text("a\x1b[31mb") == "a\u241bb"  # sanitized first: no backslash eaten
    assert md_text("\x1b\\[x]") == "\u241b\\[x]"  # ESC \ is one sequence: one placeholder


# --- stored Markdown renders, contained and inert ---------------------------------------------


def _body(*segments: tuple[str, list[int]]) -> str:
    """Stored text as the export writes it: `md_body`'s lines in a block quote."""
    return "\n".join(f"> {line}" if line.strip() else ">" for line in md_body(segments))


def _tokens(md: str) -> list[Token]:
    """The block tokens and, in order, each inline's children."""
    flat: list[Token] = []
    for token in GFM.parse(md):
        flat.append(token)
        flat.extend(token.children or ())
    return flat


def assert_contained(md: str, markers: Iterable[int] = (), code: bool = True) -> None:
    """One block quote holding everything; no raw HTML, image, heading above h3 or link
    other than http(s); our markers shown, never in a link, nor (with `code`) in code."""
    tokens = GFM.parse(md)
    assert tokens[0].type == "blockquote_open" and tokens[-1].type == "blockquote_close", md
    assert not any(t.type == "blockquote_close" for t in tokens[1:-1] if t.level == 0), md
    inside_link = False
    shown = ""
    for token in _tokens(md):
        assert token.type not in ("html_block", "html_inline", "image"), (token, md)
        if token.type == "heading_open":
            assert token.tag in ("h3", "h4", "h5", "h6"), md
        if token.type == "link_open":
            assert str(token.attrs["href"]).startswith(("http://", "https://")), md
            assert not re.search(r"\[\d+\]", str(token.attrs["href"])), md
            inside_link = True
        elif token.type == "link_close":
            inside_link = False
        elif token.type == "text":
            assert not (inside_link and re.search(r"\[\d+\]", token.content)), md
            shown += token.content
        elif token.type in ("code_inline", "fence", "code_block"):
            for number in markers:
                assert not code or f"[{number}]" not in token.content + token.info, md
            shown += token.content + token.info
    for number in markers:
        assert f"[{number}]" in shown, md
    html = GFM.render(md)
    for hostile in ("<script", "<img", 'href="javascript', 'href="data', "<b>"):
        assert hostile not in html, html


def test_a_models_markdown_renders_as_written() -> None:
    text = (
        "### Cloudy Skies\n\n**San Francisco** is *mild*; compute 6544 * 65464.\n\n"
        "- item\n1.  step\n\n> quoted\n\n(see [site](https://example.org/a_(b)), `<div>`)\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 |\n\n```py\nprint('<b>')\n```"
    )
    md = _body((text, []))
    assert "\\" not in md  # no backslash anywhere: nothing here needs one
    assert_contained(md)
    html = GFM.render(md)
    for element in (
        "<h5>Cloudy Skies</h5>",
        "<strong>San Francisco</strong>",
        "<em>mild</em>; compute 6544 * 65464.",
        "<li>item</li>",
        "<ol>\n<li>step</li>",
        "<blockquote>\n<p>quoted</p>",
        '<a href="https://example.org/a_%28b%29">site</a>',
        "<code>&lt;div&gt;</code>",
        "<td>1</td>",
        "<code class=\"language-py\">print('&lt;b&gt;')",
    ):
        assert element in html, element


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("<script>alert(1)</script>", "<script>alert(1)</script>"),
        ("<img src=x onerror=alert(1)>", "<img src=x onerror=alert(1)>"),
        ("<div>\n*x*\n</div>", "<div>"),
        ("<!-- c --> <?php x ?> <![CDATA[x]]>", "<!-- c -->"),
        ("[x](javascript:alert(1))", "[x](javascript:alert(1))"),
        ("[x](data:text/html,hi) [y](<https://a.example>)", "[x](data:text/html,hi)"),
        ("<javascript:alert(1)> <me@evil.example>", "<javascript:alert(1)>"),
        ("![pixel](https://track.example/p.png)", "!"),
        ("[d]\n\n[d]: javascript:alert(1)", "[d]: javascript:alert(1)"),
        ("[d]: https://evil.example\n\n[d] [x][d]", "[x][d]"),
        ("## Turn 2\n\nTurn 3\n===\n\nx\n-", "Turn 3"),
        ("```\n<b>\n", "<b>"),
        ("- ```\n  x\n  ```\n  <b>y</b>", "<b>y</b>"),
        ("a `\nb ` <b>c</b> `", "<b>c</b>"),
        ("| `a | <b>x</b> | b` |\n|-|-|-|", "b>x"),
        ("\\<b>x\\</b> \\[y](javascript:z)", "<b>x"),
        ("&lt;script&gt; &#60;b&#62; AT&T", "&lt;script&gt; &#60;b&#62; AT&T"),
    ],
)
def test_hostile_markdown_stays_text(text: str, shown: str) -> None:
    md = _body((text, [1]))
    assert_contained(md, [1])
    html = GFM.render(md)
    assert "<script" not in html and "<img" not in html and "<b>" not in html, html
    assert "<h1" not in html and "<h2" not in html and "<div" not in html, html
    assert 'href="javascript' not in html and 'href="data' not in html, html
    rendered = "".join(t.content for t in _tokens(md) if t.type in ("text", "code_inline", "fence"))
    assert shown in rendered, (shown, rendered)


@pytest.mark.parametrize(
    "segments",
    [
        [("see [the si", [1]), ("te](https://x.example) now", [2])],
        [("see [site](https://x.exa", [1]), ("mple/) now", [])],
        [("run `pri", [1]), ("nt(1)` now", [2])],
        [("```\nprint(", [1]), ("1)\n```\nafter", [2])],
        [("```\nopen fence", [1])],
        [("a <https://x.exa", [1]), ("mple> b", [])],
        [("look!", [1]), ("[x](https://x.example)", [2])],
        [("cited", [1]), ("(https://evil.example)", [2]), (": defined", [3])],
        [("", [1]), ("# heading", [2])],
    ],
)
def test_markers_never_land_in_a_link_or_code(segments: list[tuple[str, list[int]]]) -> None:
    markers = [n for _, numbers in segments for n in numbers]
    assert_contained(_body(*segments), markers)


_hostile = st.lists(
    st.one_of(
        st.sampled_from([*MARKUP, "\n", "\n\n", "    ", "|"]), st.text("ab <>[]()`!:", max_size=4)
    ),
    min_size=1,
    max_size=12,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_hostile, st.booleans()), min_size=1, max_size=4))
def test_any_stored_markdown_stays_contained_and_inert(pieces: list[tuple[str, bool]]) -> None:
    segments = [(text, [at + 1] if cited else []) for at, (text, cited) in enumerate(pieces)]
    md = _body(*segments)
    assert sanitize(md) == md
    # A marker can sit in code a line scan cannot see (an indented block, a fence in a
    # list item): shown as text there, never in a link.
    assert_contained(md, [n for _, numbers in segments for n in numbers], code=False)


_prose = st.lists(
    st.one_of(
        st.from_regex(r"[A-Za-z0-9]{1,8}", fullmatch=True),
        st.sampled_from(
            [
                " ",
                ", ",
                ". ",
                " * ",
                " - ",
                " < ",
                " > ",
                " & ",
                "'",
                " (x) ",
                "!",
                " [note] ",
                "[1]",
                " a_b ",
            ]
        ),
    ),
    min_size=1,
    max_size=20,
).map(lambda words: " ".join("".join(words).split()))


@settings(max_examples=300, deadline=None)
@given(_prose)
def test_plain_prose_comes_out_as_it_was_stored(text: str) -> None:
    """No backslash in prose that forms no markup (`6544 * 65464`, `3 < 5`, `AT&T`,
    `[note]`)."""
    assert md_body([(text, [])]) == [text]


@pytest.mark.parametrize(
    ("url", "link"),
    [
        ("https://example.org/a b(c)", "https://example.org/a%20b%28c%29"),
        ("HTTP://example.org/x?q=1&r=2&amp;", "http://example.org/x?q=1&r=2%26amp;"),
        ("https://example.org/<script>", "https://example.org/%3Cscript%3E"),
        ("javascript:alert(1)", None),
        ("data:text/html,<b>x</b>", None),
        ("file:///etc/passwd", None),
        ("vbscript:msgbox", None),
        ("//example.org/x", None),
        ("https://", None),
        (" javascript:alert(1)", None),
    ],
)
def test_only_http_and_https_become_links(url: str, link: str | None) -> None:
    assert md_url(url) == link
    found = links(md_link("title [x]", url))
    if link is None:
        assert found == []
        assert url.strip() in _paragraph_text(md_link("title [x]", url))  # shown as text
    else:
        assert found == [(MD.normalizeLink(link), "title [x]")]


@pytest.mark.parametrize(
    "content", ["print(1)\n", "```\nx\n```", "a ```` b\n`````", "<script>alert(1)</script>", ""]
)
def test_a_fence_holds_exactly_its_content(content: str) -> None:
    (token,) = MD.parse("\n".join(fenced(content, "py`thon")))
    assert token.type == "fence" and token.info == "python"
    assert token.content == (content.rstrip("\n") + "\n" if content.rstrip("\n") else "")


# --- the examples, rendered --------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "anthropic/web_search_citations",
        "openai/web_search_citations",
        "google/grounding_search_stream",
    ],
)
def test_each_providers_search_renders_sources_as_links(
    examples: tuple[Store, dict[str, Any]], name: str
) -> None:
    reading = _reading(examples, name)
    md = _markdown(reading)
    cited = [c.source for t in items(reading, TextItem) for c in t.citations]
    urls = [s.url for s in cited if s.url]
    suggestions = [
        link.url for a in items(reading, ActivityItem) if a.display for link in a.display.links
    ]
    assert_inert_markdown(md, [*urls, *suggestions])
    rendered = links(md)
    for source in cited:
        assert (MD.normalizeLink(md_url(source.url or "") or ""), source.title) in rendered
    assert {href for href, _ in rendered} == {MD.normalizeLink(md_url(u) or "") for u in urls} | {
        MD.normalizeLink(u) for u in suggestions
    }
    for href, text in rendered:  # markers sit in the answer, never in a link
        assert not re.search(r"\[\d+\]|%5B\d+%5D", href + text), href
    html = MD.render(md)
    assert re.search(r"[^\\]\[1\]", md) and "[1]" in html and "⚒ web search: " in html


def test_search_suggestions_are_a_list_of_links(examples: tuple[Store, dict[str, Any]]) -> None:
    reading = _reading(examples, "google/grounding_search_stream")
    md = _markdown(reading)
    assert "Search suggestions:\n\n- [météo Kyoto aujourd'hui](https://search.example.com/" in md
    assert ("https://search.example.com/q?kyoto-weather", "Kyoto weather today") in links(md)
    assert "<" not in md.replace("\\<", "")  # no markup of the suggestion's content


@pytest.mark.parametrize(
    ("name", "code", "output"),
    [
        ("google/code_execution", "print(sum(primes), primes[-1])", "5117 229"),
        ("anthropic/dynamic_filtering", "", "Dublin 92 mm"),
        ("openai/hosted_tools", "mean = sum(values) / len(values)", "3.875"),
    ],
)
def test_code_and_outputs_are_fenced_blocks(
    examples: tuple[Store, dict[str, Any]], name: str, code: str, output: str
) -> None:
    reading = _reading(examples, name)
    md = _markdown(reading)
    fences = [t for t in MD.parse(md) if t.type == "fence"]
    runs = [a for a in items(reading, ActivityItem) if a.name in CODE_RUNS]
    assert runs and fences
    for run in runs:
        given = run.input.get("code")
        if given:
            assert any(f.content == given.rstrip("\n") + "\n" for f in fences), run.activity_id
        for written in run.outputs:
            assert any(f.content == written.text.rstrip("\n") + "\n" for f in fences)
    assert any(code in f.content for f in fences)
    assert any(output in f.content for f in fences)
    assert_inert_markdown(md, _urls(reading))


def _urls(reading: portable.PortableConversation) -> list[str]:
    """Every http(s) address the export may link: cited sources, suggestions."""
    urls = [c.source.url or "" for t in items(reading, TextItem) for c in t.citations]
    urls += [
        link.url for a in items(reading, ActivityItem) if a.display for link in a.display.links
    ]
    return urls


def test_every_example_renders_inert(examples: tuple[Store, dict[str, Any]]) -> None:
    for name in examples[1]:
        reading = _reading(examples, name)
        assert_inert_markdown(_markdown(reading), _urls(reading))
