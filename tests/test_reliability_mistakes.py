"""Scenario 38: a user's mistakes are exit 2 with one line, on SQLite and PostgreSQL.

Each mistake that used to end in `internal error` (exit 1), exhaust memory or echo a
password: a missing file or a folder given as a file, an out-of-range number, a
malformed or mis-cased store URL, a configuration file nested 100,000 deep, stdout on a
full disk. And `postgresql:///db`, libpq's local socket, opens a store.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

import pytest

from convstore.adapters import cli
from convstore.adapters.cli.registry import MAX_NUMBER
from convstore.adapters.config.loading import MAX_DEPTH, load_config
from convstore.domain.errors import ConfigurationError
from convstore.storage import PostgresLocation, open_store, parse_location
from convstore.storage.url import redacted
from tests.conftest import POSTGRES_DSN

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CAPTURE = EXAMPLES / "anthropic" / "web_search_citations" / "1.response.sse"
SECRET = "pa55-w0rd-never-shown"
DEEP = 100_000
INGEST = ("ingest", "--provider", "anthropic", str(CAPTURE))


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("convstore") and "internal error" not in err, err
    return lines[0]


def _process(*argv: str, stdout: IO[str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "convstore.adapters.cli", *argv],
        stdout=subprocess.PIPE if stdout is None else stdout,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
        timeout=120,
    )


# --- files ---------------------------------------------------------------------------------


def test_a_missing_file_or_a_folder_is_exit_2_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], store_url: str, tmp_path: Path
) -> None:
    """Scenario 38: `ingest FILE` naming a missing file or a folder that holds no capture,
    and `--request` naming a missing file or a folder, are one line, exit 2; a second FILE
    missing stops the first from being recorded too."""
    missing = tmp_path / "missing.sse"
    ingest = ["--db", store_url, "ingest", "--provider", "anthropic"]
    cases = {
        "missing file": ([str(missing)], f"{missing}: cannot be read: No such file"),
        "folder of no capture": ([str(tmp_path)], f"{tmp_path}: holds no capture"),
        "second file missing": ([str(CAPTURE), str(missing)], f"{missing}: cannot be read"),
        "missing request": (["--request", str(missing), str(CAPTURE)], f"{missing}: cannot"),
        "folder as request": (["--request", str(tmp_path), str(CAPTURE)], "is a folder"),
    }
    for case, (argv, expected) in cases.items():
        code, out, err = _run(capsys, *ingest, *argv)
        assert code == 2, case
        assert expected in _one_error_line(err), case
        assert "conversation" not in out, case
    with open_store(store_url) as store:
        assert store.service.list(limit=10) == []


# --- numbers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["list", "--limit", "1e20"], "'1e20' is not a whole number"),
        (["list", "--limit", str(10**20)], f"is out of range (at most {MAX_NUMBER})"),
        (["list", "--offset", str(MAX_NUMBER + 1)], "is out of range"),
        (["list", "--limit", "9" * 5000], "is not a whole number"),
        (["list", "--offset", "-" + "9" * 30], "is negative"),
        (["search", "x", "--limit", str(10**30)], "is out of range"),
    ],
)
def test_an_out_of_range_number_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], expected: str
) -> None:
    """Scenario 38 (backend-independent: refused while parsing the arguments, before any
    store is opened): argparse's usage, then one error line, exit 2; a number of 5,000
    digits is shown cut short."""
    code, out, err = _run(capsys, "--db", f"sqlite:///{tmp_path / 's.db'}", *argv)
    assert (code, out) == (2, "")
    assert err.startswith("usage: convstore")
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert expected in line and len(line) < 200
    assert not (tmp_path / "s.db").exists()


def test_the_largest_number_reaches_the_database(
    capsys: pytest.CaptureFixture[str], store_url: str
) -> None:
    """Scenario 38: the bound is what both databases take: `--offset` and `--limit` at
    2^63 - 1 list nothing, exit 0."""
    code, _, err = _run(
        capsys, "--db", store_url, "ingest", "--provider", "anthropic", str(CAPTURE)
    )
    assert code == 0, err
    top = str(MAX_NUMBER)
    listed = _run(capsys, "--db", store_url, "list", "--offset", top, "--limit", top)
    assert listed == (0, "0 of 1 shown\n", "")
    code, out, _ = _run(capsys, "--db", store_url, "list", "--limit", top)
    assert code == 0 and len(out.splitlines()) == 3  # the header, one line, the count


# --- store URLs ------------------------------------------------------------------------------

BAD_URLS = {
    "unclosed IPv6 bracket": ("postgresql://[::1", "Invalid IPv6 URL"),
    "unclosed bracket, password": (f"postgresql://u:{SECRET}@[::1/db", "Invalid IPv6 URL"),
    "port out of range": (f"postgresql://u:{SECRET}@h:99999/db", "Port out of range"),
    "port not a number": (f"postgres://u:{SECRET}@h:port/db", "Port could not be cast"),
    "unsupported scheme": (f"mysql://u:{SECRET}@h/db", "unsupported store URL"),
    "unsupported, mis-cased": (f"MySQL://u:{SECRET}@h/db", "unsupported store URL"),
    "sqlite with a host": (f"SQLite://u:{SECRET}@h/x.db", "write sqlite:///"),
    "password parameter": (f"ftp://h/db?user=u&password={SECRET}", "unsupported store URL"),
}


@pytest.mark.parametrize("case", sorted(BAD_URLS))
def test_a_malformed_store_url_is_one_line_without_its_password(
    capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """Scenario 38 (backend-independent: refused before any connection): one line,
    exit 2, and the password is never in it."""
    url, expected = BAD_URLS[case]
    code, out, err = _run(capsys, "--db", url, "list")
    assert (code, out) == (2, "")
    line = _one_error_line(err)
    assert expected in line and SECRET not in err
    with pytest.raises(ConfigurationError) as raised:
        parse_location(url)
    assert SECRET not in str(raised.value)


def test_a_mis_cased_postgres_url_is_read_and_its_password_not_shown(
    capsys: pytest.CaptureFixture[str], postgres_url: str
) -> None:
    """Scenario 38: a URL's scheme is case-insensitive (RFC 3986): `PostgreSQL://` opens
    the store; a wrong password in one is never shown."""
    mixed = "PostgreSQL" + postgres_url[len("postgresql") :]
    assert parse_location(mixed) == parse_location(postgres_url)
    code, _, err = _run(capsys, "--db", mixed, *INGEST)
    assert code == 0, err
    code, out, _ = _run(capsys, "--db", mixed, "list")
    assert code == 0 and len(out.splitlines()) == 3  # the header, one line, the count
    parts = urlsplit(postgres_url)
    refused = f"POSTGRES://nobody:{SECRET}@{parts.hostname}:1{parts.path}?{parts.query}"
    code, _, err = _run(capsys, "--db", refused, "list")
    assert code == 2 and SECRET not in err
    _one_error_line(err)


def test_redacted_hides_every_password_form() -> None:
    """Scenario 38: what a message shows of a URL, well-formed or not."""
    assert redacted(f"postgresql://u:{SECRET}@h/db") == "postgresql://u:***@h/db"
    assert redacted(f"postgresql://u:{SECRET}@[::1") == "postgresql://u:***@[::1"
    assert redacted(f"postgresql://u:p@{SECRET}@h/db") == "postgresql://u:***@h/db"
    assert redacted(f"x://h/db?password={SECRET}&a=1") == "x://h/db?password=***&a=1"
    assert redacted("postgresql://u@h/db") == "postgresql://u@h/db"


def test_the_local_socket_url_opens_a_store(
    capsys: pytest.CaptureFixture[str], postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scenario 38: `postgresql:///db` (no host: libpq's local socket) keeps its empty
    host and opens the store; here the server's socket is /var/run/postgresql (the
    user comes from PGUSER, as libpq reads it)."""
    assert parse_location("postgresql:///db") == PostgresLocation("postgresql:///db")
    assert parse_location("postgres:///db?schema=s") == PostgresLocation("postgresql:///db", "s")
    socket_dir = Path(os.environ.get("PGHOST", "/var/run/postgresql"))
    if not any(socket_dir.glob(".s.PGSQL.*")):
        pytest.skip(f"no PostgreSQL socket in {socket_dir}")
    parts = urlsplit(postgres_url)
    monkeypatch.setenv("PGUSER", urlsplit(POSTGRES_DSN).username or "postgres")
    if parts.port is not None:
        monkeypatch.setenv("PGPORT", str(parts.port))
    local = f"postgresql://{parts.path}?{parts.query}"
    assert local.startswith("postgresql:///")
    code, _, err = _run(capsys, "--db", local, *INGEST)
    assert code == 0, err
    with open_store(postgres_url) as store:  # the same schema, reached over TCP
        assert len(store.service.list(limit=10)) == 1


# --- configuration ---------------------------------------------------------------------------

DEEP_CONFIGS = {
    "arrays": "a = " + "[" * DEEP + "]" * DEEP + "\n",
    "arrays over lines": "a = " + "[\n" * DEEP + "]\n" * DEEP,
    "inline tables": "a = " + "{b = " * DEEP + "1" + "}" * DEEP + "\n",
    "dotted key": "a" + ".a" * DEEP + " = 1\n",
    "quoted dotted key": '"a"' + '."a"' * DEEP + " = 1\n",
    "table header": "[" + ".".join(["t"] * DEEP) + "]\nx = 1\n",
    "headers one deeper each": "".join(
        f"[{'.'.join(['t'] * n)}]\n" for n in range(1, MAX_DEPTH + 2)
    ),
}


@pytest.mark.parametrize("case", sorted(DEEP_CONFIGS))
def test_a_deep_configuration_file_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
) -> None:
    """Scenario 38 (backend-independent: the configuration is read before the store):
    a file nested 100,000 deep, any way TOML nests, is refused before the parser runs
    out of stack or memory (100k dotted parts took tomllib past 24 GiB)."""
    file = tmp_path / "config.toml"
    file.write_text(DEEP_CONFIGS[case])
    with pytest.raises(ConfigurationError, match=f"nested deeper than {MAX_DEPTH} levels"):
        load_config(path=file)
    monkeypatch.setenv("CONVSTORE_CONFIG", str(file))
    code, _, err = _run(capsys, "--db", f"sqlite:///{tmp_path / 's.db'}", "list")
    assert code == 2 and "nested deeper" in _one_error_line(err)


def test_a_configuration_as_deep_as_allowed_is_read(tmp_path: Path) -> None:
    """Scenario 38 (the other side of the bound): `MAX_DEPTH` levels read as written."""
    file = tmp_path / "config.toml"
    file.write_text(f"[{'.'.join(['t'] * (MAX_DEPTH - 1))}]\nx = 1\n")
    node = load_config(path=file)
    for _ in range(MAX_DEPTH - 1):
        node = node["t"]
    assert node == {"x": 1}


def test_an_endless_or_huge_configuration_file_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scenario 38: `CONVSTORE_CONFIG=/dev/zero` and a file over 1 MiB are one line."""
    huge = tmp_path / "huge.toml"
    huge.write_text("# padding\n" * 200_000)
    for file in ("/dev/zero", str(huge)):
        monkeypatch.setenv("CONVSTORE_CONFIG", file)
        code, _, err = _run(capsys, "--db", f"sqlite:///{tmp_path / 's.db'}", "list")
        assert code == 2 and "larger than" in _one_error_line(err)


# --- stdout on a full disk ---------------------------------------------------------------------


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_stdout_on_a_full_disk_is_one_line_exit_2(store_url: str) -> None:
    """Scenario 38: every write to stdout fails (`/dev/full`, ENOSPC): one line on stderr,
    exit 2, not an internal error; nothing is left for the interpreter to fail on at exit."""
    done = _process("--db", store_url, *INGEST)
    assert done.returncode == 0, done.stderr
    for argv in (["list"], ["list", "--json"], ["export", "--all", "--format", "md"], ["--help"]):
        with open("/dev/full", "w") as full:
            done = _process("--db", store_url, *argv, stdout=full)
        assert done.returncode == 2, (argv, done.stderr)
        line = _one_error_line(done.stderr)
        assert line == "convstore: error: cannot write the output: No space left on device"
