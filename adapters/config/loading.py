"""Configuration: a TOML file, named fragments, and `--cfg key=value` overrides.

Provider-neutral: this module only assembles one nested table (a `dict`); each provider's
adapter reads its own block (`providers.<name>`) and validates it.

Where it comes from, in order (later wins, tables deep-merged):

1. the file: `path` if given, else `$CONVSTORE_CONFIG`, else `config.toml` in the user
   config folder (`platformdirs.user_config_dir("convstore")`). Only that last, default
   file may be absent; a file named explicitly must exist.
2. each `--cfg` item, in the order given:
   - `key.path=value` sets one value. The key is a TOML dotted key (`a.b.c`, quoted parts
     allowed: `a."b.c"`); the value is read as a TOML value when it parses as one
     (`true`, `5`, `1.5`, `["a", "b"]`, `"x"`, `{k = 1}`), else taken as a plain string
     (`value=hello world` → `"hello world"`).
   - `NAME` (no `=`) merges the fragment `NAME.toml` from the config folder: the folder of
     the configuration file in use, then the user config folder. `--cfg websearch` merges
     `websearch.toml`.
   - a path ending in `.toml` merges that file.

API keys are never read from configuration: they come only from the environment (e.g.
`ANTHROPIC_API_KEY`). A key named `api_key` (or ending in `_api_key`) anywhere in the
configuration is refused, so a secret is never written into a file convstore reads.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import platformdirs

from convstore.domain.errors import ConfigurationError

__all__ = [
    "CONFIG_ENV",
    "ConfigurationError",
    "config_dir",
    "config_path",
    "deep_merge",
    "load_config",
    "lookup",
    "parse_override",
]

CONFIG_ENV: Final = "CONVSTORE_CONFIG"
"""Environment variable naming the configuration file."""

APP_NAME: Final = "convstore"

_FRAGMENT_NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_SECRET_KEY: Final = re.compile(r"(^|_)api_?key$", re.IGNORECASE)

MAX_DEPTH: Final = 64
"""The deepest configuration table or array accepted (real ones are under ten deep)."""
MAX_FILE_BYTES: Final = 1024 * 1024
"""The largest configuration file read."""
_LONG_KEY: Final = re.compile(
    rf"""(?>(?:[A-Za-z0-9_-]+|"[^"\n]*"|'[^'\n]*')[ \t]*\.[ \t]*){{{MAX_DEPTH},}}"""
)
"""A dotted key of more than `MAX_DEPTH` parts: refused before parsing, since tomllib's
time and memory grow with the square of a key's parts (100k parts exhaust memory)."""


def config_dir() -> Path:
    """The user config folder (`platformdirs.user_config_dir("convstore")`)."""
    return Path(platformdirs.user_config_dir(APP_NAME))


def config_path() -> tuple[Path, bool]:
    """The configuration file to read, and whether it must exist.

    `$CONVSTORE_CONFIG` names a file that must exist; the default `config.toml` in the
    user config folder may be absent.
    """
    named = os.environ.get(CONFIG_ENV)
    if named:
        return Path(named).expanduser(), True
    return config_dir() / "config.toml", False


def load_config(
    cfg: Sequence[str] = (),
    *,
    path: str | os.PathLike[str] | None = None,
    fragment_dirs: Sequence[str | os.PathLike[str]] | None = None,
) -> dict[str, Any]:
    """The configuration table: the file, then each `--cfg` item in order.

    `path` overrides `$CONVSTORE_CONFIG` and the default file (and must exist);
    `fragment_dirs` overrides where named fragments are looked up. Raises
    ConfigurationError for a missing named file, malformed TOML (with file and line), an
    unknown fragment, a malformed override, a key path that crosses a non-table value, or
    an API key found in configuration.
    """
    if path is not None:
        file, required = Path(path).expanduser(), True
    else:
        file, required = config_path()
    config: dict[str, Any] = {}
    if file.exists() and not file.is_dir():  # a file, or e.g. /dev/null for "none"
        config = _read_toml(file)
    elif required:
        raise ConfigurationError(f"configuration file {file} does not exist")
    if fragment_dirs is None:
        dirs = _unique([file.parent, config_dir()])
    else:
        dirs = [Path(d) for d in fragment_dirs]
    for item in cfg:
        _apply_item(config, item, dirs)
    _refuse_secrets(config, ())
    return config


def parse_override(item: str) -> tuple[tuple[str, ...], Any]:
    """Split `key.path=value` into the key's parts and its value (see the module doc)."""
    key, sep, text = item.partition("=")
    if not sep:
        raise ConfigurationError(f"--cfg {item!r}: expected key=value, a fragment name or a file")
    key = key.strip()
    if not key:
        raise ConfigurationError(f"--cfg {item!r}: the key is empty")
    return _key_parts(key, item), _value(text.strip())


def lookup(config: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    """The value at a plain dotted key path, or `default` when any part is absent."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def deep_merge(
    base: dict[str, Any], update: Mapping[str, Any], *, source: str = "", _at: str = ""
) -> dict[str, Any]:
    """Merge `update` into `base` in place: tables merge key by key, other values replace.

    A table merged onto a value that is not a table (or the reverse) is a
    ConfigurationError naming the key and `source`: a silent replacement would hide a
    typo such as `web_search = true` where a table was meant.
    """
    for name, value in update.items():
        at = f"{_at}.{name}" if _at else name
        current = base.get(name)
        if isinstance(value, Mapping):
            if current is None:
                current = base[name] = {}
            elif not isinstance(current, dict):
                raise _crossing(at, current, source)
            deep_merge(current, value, source=source, _at=at)
        else:
            if isinstance(current, dict):
                raise ConfigurationError(
                    f"{_where(source)}{at} is a table; it cannot be set to {_describe(value)}"
                )
            base[name] = value
    return base


# --- internals -------------------------------------------------------------------------------


def _read_toml(file: Path) -> dict[str, Any]:
    try:
        with file.open("rb") as opened:
            data = opened.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise ConfigurationError(
            f"cannot read configuration file {file}: {error.strerror or error}"
        ) from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigurationError(f"{file}: larger than {MAX_FILE_BYTES} bytes; not read")
    try:
        return _loads(data.decode("utf-8"), where=f"{file}")
    except UnicodeDecodeError as error:
        raise ConfigurationError(f"{file}: not UTF-8 text ({error})") from None
    except tomllib.TOMLDecodeError as error:
        # tomllib's message ends with "(at line L, column C)".
        raise ConfigurationError(f"{file}: malformed TOML: {error}") from None


def _loads(text: str, *, where: str) -> dict[str, Any]:
    """`tomllib.loads`, refusing (ConfigurationError) anything nested deeper than
    `MAX_DEPTH`, before parsing where the parser itself would not cope."""
    too_deep = ConfigurationError(f"{where}: nested deeper than {MAX_DEPTH} levels; not read")
    if _LONG_KEY.search(text):
        raise too_deep
    try:
        table = tomllib.loads(text)
    except RecursionError:  # arrays or inline tables nested past the interpreter's stack
        raise too_deep from None
    nodes: list[tuple[Any, int]] = [(table, 1)]
    while nodes:  # iteratively: the merges and checks after this recurse over the tables
        node, depth = nodes.pop()
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, dict | list):
                if depth >= MAX_DEPTH:
                    raise too_deep
                nodes.append((child, depth + 1))
    return table


def _apply_item(config: dict[str, Any], item: str, dirs: Sequence[Path]) -> None:
    text = item.strip()
    if "=" in text:
        parts, value = parse_override(text)
        _set(config, parts, value, source=f"--cfg {item}")
        return
    if text.endswith(".toml"):
        file = Path(text).expanduser()
        if not file.is_file():
            raise ConfigurationError(f"--cfg {item}: configuration file {file} does not exist")
        deep_merge(config, _read_toml(file), source=str(file))
        return
    if not _FRAGMENT_NAME.fullmatch(text):
        raise ConfigurationError(
            f"--cfg {item!r}: not key=value, a fragment name (letters, digits, _ . -) "
            "or a .toml file"
        )
    for folder in dirs:
        file = folder / f"{text}.toml"
        if file.is_file():
            deep_merge(config, _read_toml(file), source=str(file))
            return
    searched = ", ".join(str(d) for d in dirs) or "(no folder)"
    raise ConfigurationError(
        f"--cfg {text}: unknown configuration fragment; no {text}.toml in {searched}"
    )


def _key_parts(key: str, item: str) -> tuple[str, ...]:
    """The parts of a TOML dotted key, read by the TOML parser itself."""
    try:
        table = _loads(f"{key} = 0", where=f"--cfg {item[:60]!r}")
    except tomllib.TOMLDecodeError:
        raise ConfigurationError(
            f"--cfg {item!r}: {key!r} is not a valid key (dotted bare or quoted TOML keys)"
        ) from None
    parts: list[str] = []
    node: Any = table
    while isinstance(node, dict):
        (name, node), *_ = node.items()
        parts.append(name)
    return tuple(parts)


def _value(text: str) -> Any:
    """A TOML value when `text` parses as one, else `text` as a plain string."""
    if not text:
        return ""
    try:
        return _loads(f"v = {text}", where="--cfg value")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _set(config: dict[str, Any], parts: tuple[str, ...], value: Any, *, source: str) -> None:
    node = config
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise _crossing(".".join(parts[: depth + 1]), child, source, key=".".join(parts))
        node = child
    last = parts[-1]
    if isinstance(node.get(last), dict) and not isinstance(value, dict):
        raise ConfigurationError(
            f"{_where(source)}{'.'.join(parts)} is a table; it cannot be set to "
            f"{_describe(value)} (set one of its keys instead)"
        )
    if isinstance(value, dict) and isinstance(node.get(last), dict):
        deep_merge(node[last], value, source=source, _at=".".join(parts))
    else:
        node[last] = value


def _crossing(at: str, current: Any, source: str, *, key: str = "") -> ConfigurationError:
    target = f" to set {key}" if key and key != at else ""
    return ConfigurationError(
        f"{_where(source)}{at} is {_describe(current)}, not a table; it cannot hold keys{target}"
    )


def _describe(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return names.get(type(value), f"a {type(value).__name__}")


def _where(source: str) -> str:
    return f"{source}: " if source else ""


def _refuse_secrets(node: Mapping[str, Any], at: tuple[str, ...]) -> None:
    for name, value in node.items():
        here = (*at, name)
        if _SECRET_KEY.search(name):
            raise ConfigurationError(
                f"{'.'.join(here)}: API keys are never read from configuration; "
                "set the provider's environment variable (e.g. ANTHROPIC_API_KEY) instead"
            )
        if isinstance(value, Mapping):
            _refuse_secrets(value, here)


def _unique(paths: Iterable[Path]) -> list[Path]:
    seen: set[Path] = set()
    out: list[Path] = []
    for p in paths:
        key = p.resolve() if p.exists() else p
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out
