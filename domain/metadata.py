"""A conversation's metadata rules: what a title and a label may be, and a label change.

A title is one line: trimmed of surrounding whitespace, with no control character, at
most `MAX_TITLE` code points; an empty title clears it. A label is a word: 1 to
`MAX_LABEL` code points, with no whitespace, control or format character (so it prints
as it is, and a listing's `a, b` cannot be misread). Labels are compared exactly (case
counts). The checks raise InvalidMetadata; the aggregate applies them where it applies
Retitled and Relabelled.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Final

from convstore.domain.errors import InvalidMetadata

MAX_TITLE: Final = 500
"""The longest title, in code points."""
MAX_LABEL: Final = 100
"""The longest label, in code points."""


def _shown(text: str) -> str:
    """`text` for an error message: short, its escapes visible."""
    return repr(text if len(text) <= 40 else text[:40] + "…")


def title(text: str) -> str:
    """The title `text` records (trimmed); raises InvalidMetadata for one that cannot be."""
    trimmed = text.strip()
    if len(trimmed) > MAX_TITLE:
        raise InvalidMetadata(
            f"a title is at most {MAX_TITLE} characters; this one has {len(trimmed)}: shorten it"
        )
    if any(unicodedata.category(c) == "Cc" for c in trimmed):
        raise InvalidMetadata(
            f"the title {_shown(trimmed)} holds a line break or another control character: "
            "a title is one line"
        )
    return trimmed


def label(text: str) -> str:
    """`text` as a label; raises InvalidMetadata when it cannot be one."""
    if not text:
        raise InvalidMetadata("a label cannot be empty")
    if len(text) > MAX_LABEL:
        raise InvalidMetadata(
            f"a label is at most {MAX_LABEL} characters; {_shown(text)} has {len(text)}"
        )
    if any(c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in text):
        raise InvalidMetadata(
            f"the label {_shown(text)} holds whitespace or a control character: a label is "
            "one word (use `-` or `_` between words)"
        )
    return text


def label_change(
    current: Iterable[str], add: Iterable[str], remove: Iterable[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The change (added, removed) that adding `add` and removing `remove` makes to the
    labels `current`: adding a label already there, or removing one that is not, changes
    nothing. Raises InvalidMetadata for an invalid label, or one both added and removed.
    A label `current` holds can always be removed (a Started's labels were never checked)."""
    have = set(current)
    adding = dict.fromkeys(map(label, add))
    removing = dict.fromkeys(name if name in have else label(name) for name in remove)
    both = [name for name in adding if name in removing]
    if both:
        raise InvalidMetadata(
            f"the label {_shown(both[0])} is both added and removed: give it once"
        )
    return (
        tuple(name for name in adding if name not in have),
        tuple(name for name in removing if name in have),
    )


def relabelled(
    current: tuple[str, ...], added: tuple[str, ...], removed: tuple[str, ...]
) -> tuple[str, ...]:
    """The labels after a change: `current` in order without `removed`, then `added`."""
    gone = set(removed)
    return (*(name for name in current if name not in gone), *added)
