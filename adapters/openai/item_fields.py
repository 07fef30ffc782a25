"""Typed reads of a decoded output item's fields, shared by the item mapping tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["Malformed", "as_list", "counted", "int_field", "need_str", "str_field"]


class Malformed(Exception):
    """A known item type with an unexpected shape: kept as an UnknownArtifact."""


def str_field(d: Mapping[str, Any], key: str) -> str | None:
    value = d.get(key)
    return value if isinstance(value, str) else None


def int_field(d: Mapping[str, Any], key: str) -> int | None:
    value = d.get(key)
    return value if type(value) is int else None


def need_str(d: Mapping[str, Any], key: str) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not value:
        raise Malformed(key)
    return value


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
