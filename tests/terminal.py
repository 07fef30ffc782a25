"""A text stream that says it is a terminal, for tests of what only a terminal is shown."""

from __future__ import annotations


class Terminal:
    """Records what is written; `isatty()` is True."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def isatty(self) -> bool:
        return True

    def flush(self) -> None:
        """Nothing to flush: the text is kept as written."""
