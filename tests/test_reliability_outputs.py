"""Scenario 35: files we write, on SQLite and PostgreSQL where a store is read.

Every output file goes through `projections.files` (exports since scenario 20, and now
`anchor -o`): a temporary file with a random name made `O_EXCL | O_NOFOLLOW` in the
target's folder, renamed into place; a link at the target itself is refused. A store
file convstore creates, and the folder it makes for the default location, are its
owner's only (0600 / 0700), whatever the umask lets through.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from convstore.adapters import cli
from convstore.storage import open_store
from convstore.storage.url import ENV_VAR, default_path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CAPTURE = EXAMPLES / "anthropic" / "web_search_citations" / "1.response.sse"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The most common umask (022), which alone would leave new files world-readable."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def test_anchor_never_writes_through_a_link(
    capsys: pytest.CaptureFixture[str], store_url: str, tmp_path: Path
) -> None:
    """Scenario 35: `anchor -o` writes its file whole beside links planted at the name
    it used to write through (`.NAME.PID.tmp`) and refuses a link at its target; the
    files those links point to stay as they were."""
    ingest = ["--db", store_url, "ingest", "--provider", "anthropic", str(CAPTURE)]
    code, _, err = _run(capsys, *ingest)
    assert code == 0, err
    secret = tmp_path / "secret.txt"
    secret.write_text("untouched")
    out = tmp_path / "out"
    out.mkdir()
    target = out / "anchors.json"
    planted = out / f".{target.name}.{os.getpid()}.tmp"
    planted.symlink_to(secret)
    code, summary, err = _run(capsys, "--db", store_url, "anchor", "-o", str(target))
    assert (code, err) == (0, ""), err
    assert "1 chain heads written" in summary
    assert secret.read_text() == "untouched"
    assert not target.is_symlink() and len(json.loads(target.read_text())) == 1
    assert sorted(p.name for p in out.iterdir()) == sorted([target.name, planted.name])
    code, _, err = _run(capsys, "--db", store_url, "verify", "--anchor", str(target))
    assert code == 0, err

    linked = out / "linked.json"
    linked.symlink_to(secret)
    code, _, err = _run(capsys, "--db", store_url, "anchor", "-o", str(linked))
    assert code == 2 and "symbolic link" in err and len(err.splitlines()) == 1
    assert secret.read_text() == "untouched" and linked.is_symlink()
    code, _, err = _run(capsys, "--db", store_url, "anchor", "-o", str(out))
    assert code == 2 and "is a folder" in err and len(err.splitlines()) == 1


def test_a_store_file_convstore_creates_is_its_owners_only(
    tmp_path: Path, open_umask: None
) -> None:
    """Scenario 35 (SQLite: PostgreSQL keeps no file of ours): under umask 022 a new
    store file and the `-wal` and `-shm` SQLite makes beside it are 0600."""
    path = tmp_path / "store.db"
    with open_store(f"sqlite:///{path}") as store:
        store.service.start("private")
        made = sorted(p.name for p in tmp_path.iterdir())
        assert made == ["store.db", "store.db-shm", "store.db-wal"]
        assert {name: _mode(tmp_path / name) for name in made} == dict.fromkeys(made, 0o600)


def test_an_existing_store_file_keeps_its_permissions(tmp_path: Path, open_umask: None) -> None:
    """Scenario 35: a store file the user made keeps the mode the user gave it."""
    path = tmp_path / "shared.db"
    path.touch(mode=0o640)
    with open_store(f"sqlite:///{path}") as store:
        store.service.start("shared")
    assert _mode(path) == 0o640


def test_the_default_folder_convstore_makes_is_its_owners_only(
    tmp_path: Path, open_umask: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scenario 35: the user data folder convstore creates for its default store is 0700,
    the file in it 0600."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    with open_store() as store:
        store.service.start("default")
    assert _mode(default_path().parent) == 0o700
    assert _mode(default_path()) == 0o600
