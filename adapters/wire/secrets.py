"""Credentials in captured request bodies: found by field name and replaced by `MARKER`
before anything of the body is recorded.

A request body may carry credentials meant for someone other than the provider: an
Anthropic MCP server's `authorization_token`, an OpenAI MCP tool's `authorization` and
`headers`, a Gemini MCP server's `streamableHttpTransport.headers`, a search tool's
`apiKey`. `scrub_request` replaces each one's string value with `MARKER`, so it never
reaches the store, and so never `replay`, exports, the search index or a log line;
`credential_paths` finds the markers again, for the loss report of a rebuilt request.

What is a credential (names compared case-insensitively, without `-` and `_`, so
`api_key`, `apiKey` and `API-Key` are one name; only string values are replaced):

- anywhere in the body: `CREDENTIAL_FIELDS` (`authorization`, `authorization_token`,
  `proxy_authorization`, `api_key`, `x_api_key`, `x_goog_api_key`, `api_key_string`,
  `access_token`, `refresh_token`, `client_secret`);
- inside a credential holder (an object or list under `auth`, `oauth`,
  `authentication`, `authorization`, `credentials`, or a name ending in `headers`,
  `auth`, `authConfig` or `credentials`: `httpHeaders`, `runtime_auth_config`), at
  any depth: those, `CREDENTIAL_HEADERS` (`authorization`,
  `proxy-authorization`, `x-api-key`, `x-goog-api-key`, `api-key`, `cookie`),
  `HELD_FIELDS` (`password`, `secret`, `token`), and any name ending in `token`,
  `secret`, `key` or `password` (`X-Auth-Token`, `x-custom-api-key`); a header given as
  `{"name": …, "value": …}` has its value replaced when its name is one of these.

Everything else keeps its bytes: only the objects and lists on the way to a credential
are re-encoded (their other members embedded byte for byte), and a body holding none is
returned as it is. An object naming a credential twice keeps only the last member so
named (as a JSON reader takes it), so an earlier value cannot hide behind a later `null`.
The client's own API key, which travels in request headers, is the HTTP transport's to
scrub (`adapters.http.transport`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

import msgspec

from convstore.domain.errors import DecodeError

__all__ = [
    "CREDENTIAL_FIELDS",
    "CREDENTIAL_HEADERS",
    "HELD_FIELDS",
    "MARKER",
    "credential_paths",
    "scrub_request",
]

MARKER: Final = "[scrubbed by convstore]"
"""What a credential's value becomes in the store."""


def _name(name: str) -> str:
    """A field or header name as compared: lower case, without `-` and `_`."""
    return name.lower().replace("-", "").replace("_", "")


CREDENTIAL_FIELDS: Final = frozenset(
    {
        "authorization",
        "authorization_token",
        "proxy_authorization",
        "api_key",
        "x_api_key",
        "x_goog_api_key",
        "api_key_string",
        "access_token",
        "refresh_token",
        "client_secret",
    }
)
"""Fields that are credentials wherever they are."""
CREDENTIAL_HEADERS: Final = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "x-goog-api-key", "api-key", "cookie"}
)
"""Header names whose values are credentials (inside a credential holder)."""
HELD_FIELDS: Final = frozenset({"password", "secret", "token"})
"""Fields that are credentials inside a credential holder."""

_ANYWHERE: Final = frozenset(map(_name, CREDENTIAL_FIELDS))
_HELD: Final = _ANYWHERE | frozenset(map(_name, CREDENTIAL_HEADERS | HELD_FIELDS))
_HELD_ENDINGS: Final = ("token", "secret", "key", "password")
_HOLDERS: Final = frozenset({"auth", "oauth", "authentication", "authorization", "credentials"})
_HOLDER_ENDINGS: Final = ("headers", "auth", "authconfig", "credentials")
_MAX_DEPTH: Final = 128
"""How deep a credential-like name is looked for; deeper, the body is refused."""

_HINT: Final = re.compile(
    rb'"[^"]*(?i:auth|key|token|secret|password|cookie|header|credential)[^"]*"\s*:|\\u'
)
"""A member name that may lead to a credential (or an escape that may spell one): a
subtree without any is passed over unread."""

_OBJECT: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ARRAY: Final = msgspec.json.Decoder(list[msgspec.Raw])
_STRING: Final = msgspec.json.Decoder(str)
_ENCODE: Final = msgspec.json.Encoder().encode
_MARKED: Final = msgspec.Raw(_ENCODE(MARKER))


def _is_holder(name: str) -> bool:
    key = _name(name)
    return key in _HOLDERS or key.endswith(_HOLDER_ENDINGS)


def _is_credential(name: str, held: bool) -> bool:
    key = _name(name)
    return key in _ANYWHERE or (held and (key in _HELD or key.endswith(_HELD_ENDINGS)))


def scrub_request(body: bytes) -> bytes:
    """`body` with every credential's string value replaced by `MARKER` (see the module);
    `body` itself when it holds none, or is not a JSON object (the decoders refuse it).
    DecodeError when a credential-like name lies deeper than the scrubber looks."""
    if _HINT.search(body) is None:
        return body
    try:
        scrubbed = _scrub(body, held=False, depth=0)
    except (msgspec.DecodeError, RecursionError):
        return body
    return body if scrubbed is None else scrubbed


def _scrub(raw: bytes, *, held: bool, depth: int) -> bytes | None:
    """The JSON value `raw` (an object or a list) scrubbed; None when nothing changed."""
    if depth > _MAX_DEPTH:
        raise DecodeError(
            f"the request body nests a credential-like field deeper than {_MAX_DEPTH} "
            "levels; it is not recorded, since its credentials cannot be removed"
        )
    start = raw.lstrip()[:1]
    if start == b"{":
        members = _OBJECT.decode(raw)
        changed = False
        header = held and _header_credential(members)
        for name, value in members.items():
            credential = _is_credential(name, held) or (header and name == "value")
            # A repeated name was decoded as its last member: re-encoding drops the others.
            changed = changed or (credential and raw.count(_ENCODE(name)) > 1)
            replaced = _member(value, credential=credential)
            if replaced is None:
                replaced = _nested(value, held=held or _is_holder(name), depth=depth)
            if replaced is not None:
                members[name], changed = replaced, True
        return _ENCODE(members) if changed else None
    if start == b"[":
        items = _ARRAY.decode(raw)
        changed = False
        for index, item in enumerate(items):
            replaced = _nested(item, held=held, depth=depth)
            if replaced is not None:
                items[index], changed = replaced, True
        return _ENCODE(items) if changed else None
    return None


def _member(value: msgspec.Raw, *, credential: bool) -> msgspec.Raw | None:
    """`MARKER` for a credential's string value not already scrubbed; else None."""
    if not credential or bytes(value).lstrip()[:1] != b'"':
        return None
    text = _STRING.decode(value)
    return _MARKED if text and text != MARKER else None


def _nested(value: msgspec.Raw, *, held: bool, depth: int) -> msgspec.Raw | None:
    """An object or list member scrubbed (None when unchanged or passed over)."""
    data = bytes(value)
    if data.lstrip()[:1] not in (b"{", b"[") or (not held and _HINT.search(data) is None):
        return None
    scrubbed = _scrub(data, held=held, depth=depth + 1)
    return None if scrubbed is None else msgspec.Raw(scrubbed)


def _header_credential(members: dict[str, msgspec.Raw]) -> bool:
    """Whether an object of a credential holder is a header `{"name": …, "value": …}`
    naming a credential."""
    named = members.get("name", members.get("key"))
    if named is None or "value" not in members or bytes(named).lstrip()[:1] != b'"':
        return False
    return _is_credential(_STRING.decode(named), True)


def credential_paths(raw: bytes) -> list[str]:
    """Where `raw` (a recorded JSON value) holds `MARKER`, e.g. `tools[0].headers.Authorization`
    (nothing when it holds none or is not JSON)."""
    if _ENCODE(MARKER)[1:-1] not in raw:
        return []
    try:
        value = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return []
    return list(_marked(value, ""))


def _marked(value: object, path: str) -> Iterator[str]:
    if value == MARKER:
        yield path
    elif isinstance(value, dict):
        for name, member in value.items():
            yield from _marked(member, f"{path}.{name}" if path else str(name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _marked(item, f"{path}[{index}]")
