"""Store URLs (DESIGN.md, Storage): every accepted form, and clear refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from convstore.domain.errors import ConfigurationError
from convstore.storage import PostgresLocation, SQLiteLocation, open_store, parse_location
from convstore.storage.errors import StoreNotFound
from convstore.storage.url import ENV_VAR, default_path


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("store.db", SQLiteLocation(Path("store.db"))),
        ("data/store.db", SQLiteLocation(Path("data/store.db"))),
        ("/var/lib/convstore/store.db", SQLiteLocation(Path("/var/lib/convstore/store.db"))),
        ("~/store.db", SQLiteLocation(Path.home() / "store.db")),
        ("sqlite:///relative.db", SQLiteLocation(Path("relative.db"))),
        ("sqlite:///sub/relative.db", SQLiteLocation(Path("sub/relative.db"))),
        ("sqlite:////absolute.db", SQLiteLocation(Path("/absolute.db"))),
        ("sqlite:////tmp/a/b.db", SQLiteLocation(Path("/tmp/a/b.db"))),
        (
            "postgresql://user@db.example:5433/conv",
            PostgresLocation("postgresql://user@db.example:5433/conv", "public"),
        ),
        (
            "postgresql://user@db.example:5433/conv?schema=tenant_7",
            PostgresLocation("postgresql://user@db.example:5433/conv", "tenant_7"),
        ),
        (
            "postgres://user@localhost/conv?schema=Mixed_Case",
            PostgresLocation("postgresql://user@localhost/conv", "Mixed_Case"),
        ),
        (
            "postgresql://u@h/conv?sslmode=require&schema=s&application_name=cs",
            PostgresLocation("postgresql://u@h/conv?sslmode=require&application_name=cs", "s"),
        ),
    ],
)
def test_accepted_forms(url: str, expected: object) -> None:
    assert parse_location(url) == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite://relative.db", r"write sqlite:///relative\.db or sqlite:////absolute"),
        ("sqlite:relative.db", r"write sqlite:///relative\.db"),
        ("sqlite:///", "names no file"),
        ("mysql://u@h/db", r"unsupported store URL 'mysql://u@h/db': use a path, sqlite:///"),
        ("http://example.com/store.db", "unsupported store URL"),
        ("postgresql://u@h/db?schema=", "schema '' is not a plain identifier"),
        ("postgresql://u@h/db?schema=a-b", "schema 'a-b' is not a plain identifier"),
        ("postgresql://u@h/db?schema=1abc", "schema '1abc' is not a plain identifier"),
        ('postgresql://u@h/db?schema=x";drop', "is not a plain identifier"),
        ("postgresql://u@h/db?schema=" + "s" * 64, "is not a plain identifier"),
    ],
)
def test_bad_urls_are_refused_with_a_clear_message(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_location(url)


def test_the_environment_variable_is_used_when_no_url_is_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENV_VAR, f"sqlite:///{tmp_path}/env.db")
    assert parse_location() == SQLiteLocation(tmp_path / "env.db")
    assert parse_location("  ") == SQLiteLocation(tmp_path / "env.db")
    assert parse_location("other.db") == SQLiteLocation(Path("other.db"))  # a URL wins

    monkeypatch.setenv(ENV_VAR, "postgres://u@h/db?schema=from_env")
    assert parse_location() == PostgresLocation("postgresql://u@h/db", "from_env")

    monkeypatch.setenv(ENV_VAR, "ftp://nope")
    with pytest.raises(ConfigurationError, match="unsupported store URL"):
        parse_location()


def test_default_is_in_the_user_data_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    expected = tmp_path / "convstore" / "convstore.db"
    assert default_path() == expected
    assert parse_location() == SQLiteLocation(expected, default=True)
    monkeypatch.setenv(ENV_VAR, "   ")
    assert parse_location(None) == SQLiteLocation(expected, default=True)
    assert parse_location(str(expected)) == SQLiteLocation(expected)  # explicit


def test_open_store_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env.db"))
    with open_store() as store:
        assert store.location == SQLiteLocation(tmp_path / "env.db")
        store.service.start("here")
    assert (tmp_path / "env.db").exists()


def test_a_named_store_needs_its_folder_and_the_default_makes_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Scenario 32: a store is created at a location a person named, never a folder."""
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nested" / "env.db"))
    with pytest.raises(StoreNotFound, match="no folder"):
        open_store()
    assert not (tmp_path / "nested").exists()
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    with open_store() as store:
        store.service.start("here")
    assert default_path().exists()
    assert default_path().parent.stat().st_mode & 0o777 == 0o700


def test_printed_postgres_location_never_shows_a_password() -> None:
    location = parse_location("postgresql://alice:s3cret@db:5432/conv?schema=s")
    assert "s3cret" not in str(location)
    assert str(location) == "postgresql://db:5432/conv (schema s)"
    assert str(parse_location("sqlite:////tmp/x.db")) == "sqlite:////tmp/x.db"
