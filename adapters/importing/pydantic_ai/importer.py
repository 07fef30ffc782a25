"""`convstore import pydantic-ai PATH`: a history file, or a folder of them.

PATH is one history (`ModelMessagesTypeAdapter` JSON, e.g. `result.all_messages_json()`)
or a folder whose `*.json` files each hold one (read in name order). Every file is read
and checked before anything is written: a missing path, a file that is not JSON or not a
history, or an empty history refuses the import.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec

from convstore.adapters.importing.pydantic_ai import wire
from convstore.adapters.importing.pydantic_ai.history import read_history
from convstore.adapters.importing.source import ImportedConversation, Unreadable
from convstore.domain.errors import ConfigurationError, DecodeError

__all__ = ["PydanticAIImporter"]


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        found = sorted(p for p in path.glob("*.json") if p.is_file())
        if not found:
            raise ConfigurationError(f"{path} holds no .json file of a pydantic-ai history")
        return found
    if not path.is_file():
        raise ConfigurationError(f"{path}: no such file or folder")
    return [path]


def _history(path: Path) -> list[wire.Message]:
    """The file's messages, every part checked; raises DecodeError naming the file."""
    try:
        messages = wire.HISTORY.decode(path.read_bytes())
        for message in messages:
            wire.parts(message)
    except OSError as error:
        raise ConfigurationError(f"{path}: cannot be read: {error.strerror}") from None
    except msgspec.ValidationError as error:
        raise DecodeError(
            f"{path} is not a pydantic-ai message history (ModelMessagesTypeAdapter JSON): {error}"
        ) from None
    except msgspec.DecodeError as error:
        raise DecodeError(f"{path} is not JSON: {error}") from None
    if not messages:
        raise DecodeError(f"{path} is an empty message history: nothing to import")
    return messages


class PydanticAIImporter:
    """Reads pydantic-ai message histories (see the module's docstring)."""

    def plan(self, path: Path) -> int:
        """Check every history under `path`; the number of them."""
        files = _files(path)
        for file in files:
            _history(file)
        return len(files)

    def read(self, path: Path) -> Iterator[ImportedConversation | Unreadable]:
        """Each history as a conversation, in file name order."""
        for file in _files(path):
            try:
                yield read_history(_history(file))
            except DecodeError as error:  # changed since `plan` read it
                yield Unreadable(source_id=str(file), reason=str(error))
