"""Output files written without following a link: exports, anchors, any file convstore
writes at a path it is given.

`OutputFolder` writes only inside one folder opened without following a link
(`O_NOFOLLOW`), each file through a new temporary file in that folder (`O_EXCL |
O_NOFOLLOW`, a random name) renamed into place, so a link planted at a file's name, or at
any name a temporary file could have, is replaced or refused, never followed.
`write_file` writes one file at a path: a link there is refused.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path
from types import TracebackType
from typing import Final

from convstore.domain.errors import ConfigurationError

MAX_NAME_BYTES: Final = 255


def check_name(name: str) -> None:
    """Raise ConfigurationError unless `name` is one plain file name."""
    if (
        not name
        or name in {".", ".."}
        or "/" in name
        or "\0" in name
        or (os.sep != "/" and os.sep in name)
        or len(os.fsencode(name)) > MAX_NAME_BYTES
    ):
        raise ConfigurationError(f"{name[:80]!r} is not a file name convstore writes")


class OutputFolder:
    """One folder opened without following a link; files are written inside it only.

    A file is written to a new temporary file in the folder (`O_EXCL | O_NOFOLLOW`), then
    renamed over its name: whatever was there (a file, a planted link) is replaced, and
    no link is ever followed. Paths are resolved against the folder's descriptor, so
    renaming or relinking the folder meanwhile changes nothing.
    """

    def __init__(self, path: Path, *, create: bool = False, follow: bool = False) -> None:
        self.path = path
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
        if not follow:
            flags |= os.O_NOFOLLOW
        try:
            if create and not os.path.lexists(path):
                path.parent.mkdir(parents=True, exist_ok=True)
                with suppress(FileExistsError):
                    os.mkdir(path, 0o755)
            self.fd = os.open(path, flags)
        except ValueError:
            raise ConfigurationError(f"{_shown(path)}: a path cannot hold a NUL byte") from None
        except OSError as error:
            if os.path.islink(path):
                raise ConfigurationError(
                    f"{_shown(path)} is a symbolic link; convstore does not write through links"
                ) from None
            raise ConfigurationError(f"cannot use {_shown(path)}: {error.strerror}") from None

    def write(self, name: str, chunks: Iterable[str]) -> Path:
        """Write the chunks to the file `name` in the folder (UTF-8); return its path."""
        check_name(name)
        temporary = f".convstore-{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        target = self.path / name
        try:
            fd = os.open(temporary, flags, 0o644, dir_fd=self.fd)
            try:
                with open(fd, "w", encoding="utf-8", newline="\n") as file:
                    for chunk in chunks:
                        file.write(chunk)
                os.replace(temporary, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            except BaseException:
                with suppress(OSError):
                    os.unlink(temporary, dir_fd=self.fd)
                raise
        except OSError as error:
            raise ConfigurationError(f"cannot write {_shown(target)}: {error.strerror}") from None
        return target

    def close(self) -> None:
        """Close the folder's descriptor."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def _shown(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 200 else text[:199] + "…"


def write_file(path: Path, chunks: Iterable[str], *, folder_name: str | None = None) -> Path:
    """Write the chunks (UTF-8) to the file `path`, or to `folder_name` inside `path` when
    it is a folder and a name is given; return the file's path.

    A link at `path` is refused, never followed; the file is written through a temporary
    file in its folder and renamed into place.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except ValueError:
        raise ConfigurationError(f"{_shown(path)}: a path cannot hold a NUL byte") from None
    except OSError as error:
        raise ConfigurationError(f"cannot use {_shown(path)}: {error.strerror}") from None
    if mode is not None and stat.S_ISLNK(mode):
        raise ConfigurationError(
            f"{_shown(path)} is a symbolic link; convstore does not write through links"
        )
    if mode is not None and stat.S_ISDIR(mode):
        if folder_name is None:
            raise ConfigurationError(f"{_shown(path)} is a folder; name a file to write")
        with OutputFolder(path) as folder:
            return folder.write(folder_name, chunks)
    check_name(path.name)
    with OutputFolder(path.parent, follow=True) as folder:
        return folder.write(path.name, chunks)
