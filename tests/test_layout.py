"""The layout's dependency rules, as the packages' docstrings state them.

Every `import` of convstore in the tree (module level or inside a function) is read with
`ast` and checked against `MAY_IMPORT`: `domain` imports nothing of ours, the provider
packages never import one another, nothing imports the command line.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("domain", "storage", "adapters", "projections")

PROVIDERS = ("anthropic", "openai", "google", "openai_chat")
WIRE = ("domain", "adapters.wire")
PROVIDER_RULE = (*WIRE, "adapters.config", "adapters.http")

MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "domain": ("domain",),
    "storage": ("domain", "storage"),
    # The search index and verify read the recorders; the exports pass stored text
    # through the one sanitizer (standard library only).
    "projections": ("domain", "storage", "projections", "adapters.terminal.render"),
    "adapters": (),
    "adapters.wire": WIRE,
    "adapters.config": ("domain", "adapters.config"),
    # An importer reads a provider's native JSON it finds with that provider's adapter.
    "adapters.importing": (
        *WIRE,
        *(f"adapters.{p}" for p in PROVIDERS),
        "adapters.importing",
        "adapters.terminal.render",
    ),
    "adapters.http": ("domain", "adapters.http"),
    "adapters.recording": (*PROVIDER_RULE, "adapters.recording"),
    "adapters.terminal": ("domain", "projections", "adapters.terminal"),
    "adapters.proxy": ("domain", "storage", "projections", "adapters"),
    # The viewer serves as the proxy does, and previews a replay as `replay --dry-run`.
    "adapters.web": (
        "domain",
        "storage",
        "projections",
        "adapters.config",
        "adapters.http",
        "adapters.recording",
        "adapters.terminal",
        "adapters.wire",
        "adapters.web",
    ),
    "adapters.cli": ("domain", "storage", "projections", "adapters"),
    **{f"adapters.{name}": (*PROVIDER_RULE, f"adapters.{name}") for name in PROVIDERS},
}
"""Each package (by its dotted name under `convstore.`) and the prefixes it may import."""


def _modules() -> Iterator[tuple[str, Path]]:
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(part for part in parts if part != "__init__"), path


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith("convstore."):
                yield name.removeprefix("convstore.")


def _package(module: str) -> str:
    """The most specific package of `MAY_IMPORT` that holds `module`."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in MAY_IMPORT:
            return ".".join(parts[:end])
    raise AssertionError(f"{module} is in no package of MAY_IMPORT: add its rule")


def _allowed(target: str, prefixes: tuple[str, ...]) -> bool:
    return any(target == prefix or target.startswith(f"{prefix}.") for prefix in prefixes)


def test_every_import_follows_the_layout() -> None:
    broken = [
        f"{module} imports convstore.{target}"
        for module, path in _modules()
        for target in _imports(path)
        if not _allowed(target, MAY_IMPORT[_package(module)])
    ]
    assert broken == []


def test_nothing_imports_the_command_line() -> None:
    importers = [
        module
        for module, path in _modules()
        if not module.startswith("adapters.cli")
        for target in _imports(path)
        if _allowed(target, ("adapters.cli",))
    ]
    assert importers == []


@pytest.mark.parametrize("package", sorted(name for name in MAY_IMPORT if name != "adapters"))
def test_each_package_says_what_it_may_import(package: str) -> None:
    """Every package's docstring names what lives there and what it may import."""
    doc = importlib.import_module(f"convstore.{package}").__doc__ or ""
    assert "import" in doc.lower(), f"convstore.{package} has no import rule in its docstring"


def test_the_rules_catch_a_forbidden_import(tmp_path: Path) -> None:
    """The checker itself: a provider importing another provider is reported."""
    module = tmp_path / "encode.py"
    module.write_text("from convstore.adapters.google.parts import X\n")
    targets = list(_imports(module))
    assert targets == ["adapters.google.parts.X"]
    assert not _allowed(targets[0], MAY_IMPORT["adapters.anthropic"])
    assert _allowed(targets[0], MAY_IMPORT["adapters.google"])


EXTRAS_MODULES = (
    "psycopg",
    "starlette",
    "uvicorn",
    "opentelemetry",
    "cryptography",
    "orjson",
    "llm",
    "langgraph",
    "anthropic",
    "openai",
    "google",
    "jsonschema",
)
"""Top-level modules that only the extras install (pyproject's optional dependencies)."""

_WITHOUT_EXTRAS = """
import importlib.abc, sys
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is an extra's (blocked)")
sys.meta_path.insert(0, Blocked())
from convstore.adapters import cli
for argv in ARGV:
    code = cli.main(argv)
    if code != 0:
        sys.exit(f"{argv}: exit {code}")
"""


def test_the_base_install_needs_no_extra(tmp_path: Path) -> None:
    """The command line records and reads an SQLite store with every extra's module
    unimportable: the base install stays lean."""
    import subprocess
    import sys

    example = ROOT / "examples" / "anthropic" / "web_search_citations"
    db = f"sqlite:///{tmp_path / 'store.db'}"
    capture = [str(example / "1.request.json"), str(example / "1.response.sse")]
    argv = [
        ["--help"],
        ["--db", db, "ingest", "--provider", "anthropic", "--request", *capture],
        ["--db", db, "list"],
        ["--db", db, "search", "Kyoto"],
        ["--db", db, "verify", "--all"],
    ]
    script = f"BLOCKED = {set(EXTRAS_MODULES)!r}\nARGV = {argv!r}\n{_WITHOUT_EXTRAS}"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
