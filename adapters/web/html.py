"""The viewer's templates: Jinja2 with autoescaping on, every value passed through the one
sanitizer before it is escaped (a bidi override or a control character shows as a visible
placeholder, as on a terminal), and the filters the pages share. Links are made only of
http and https addresses (`link_url`); anything else is shown as text.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, urlsplit

import jinja2
import markupsafe
import msgspec

from convstore.adapters.terminal.render import sanitize
from convstore.projections.wording import end_line, location_words, notice_lines, usage_counters

TEMPLATES: Final = Path(__file__).with_name("templates")
LINK_REL: Final = "noopener noreferrer nofollow"
"""Every outbound link's `rel`."""
_URL_LIMIT: Final = 4096
_SPACE: Final = re.compile(r"\s")


def _finalize(value: Any) -> Any:
    """What `{{ … }}` prints: strings sanitized (then escaped by autoescape), None as ''."""
    if value is None:
        return ""
    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        return value if value.isascii() and value.isprintable() else sanitize(value)
    return value


def link_url(url: str | None) -> str | None:
    """`url` when it may be a link's `href`: an absolute http or https address with a host,
    no whitespace and no control or format character; None otherwise (shown as text)."""
    if not url or len(url) > _URL_LIMIT or _SPACE.search(url) or sanitize(url) != url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    return url


def when(moment: datetime | None) -> str:
    """A moment as `2026-01-31 12:00:00 UTC` ('' for None)."""
    if moment is None:
        return ""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def tag(value: Any) -> str:
    """A presentation struct's tag (`answer`, `activity`, …), for the templates' dispatch."""
    config = getattr(type(value), "__struct_config__", None)
    return str(getattr(config, "tag", "") or "")


def pretty(value: Any) -> str:
    """Plain data as indented JSON (shown in a `<pre>`, escaped like any text)."""
    return json.dumps(msgspec.to_builtins(value), ensure_ascii=False, indent=2, sort_keys=True)


def tokens(usage: Any) -> str:
    """A usage's token counters, `in 1,200 · out 80`, ('' when none)."""
    return " · ".join(usage_counters(usage)) if usage is not None else ""


def path_part(text: str) -> str:
    """`text` quoted for one segment of a URL path."""
    return quote(text, safe="")


@cache
def environment() -> jinja2.Environment:
    """The templates' environment (autoescape on for every template)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        auto_reload=False,
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        link_url=link_url, when=when, pretty=pretty, tokens=tokens, path_part=path_part
    )
    env.tests["kind"] = lambda value, name: tag(value) == name
    env.globals.update(
        link_rel=LINK_REL,
        end_line=end_line,
        notice_lines=notice_lines,
        location_words=location_words,
    )
    return env


def render(template: str, **context: Any) -> str:
    """The page `template` renders with `context`."""
    return environment().get_template(template).render(**context)
