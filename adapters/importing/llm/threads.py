"""The current layout (llm 0.32 on): `threads` of `turns`, each turn the segment of a
content-addressed message chain between its `parent_message_hash` and its
`tip_message_hash`.

A turn's new messages are those of its chain that the thread's turns before it did not
carry: walking back from its parent to the previous turn's tip. A chain that meets the
thread's earlier messages anywhere else (an edited or client-held history) is marked
`diverged`, its messages after the shared part new. Text that borrows a fragment is
resolved from `fragments`; an attachment is read as its metadata (type, url, path, size).
`turns.response_json` is stored condensed against the turn's messages: markers are
resolved with `llm`'s own `resolve_payload` (the `llm` package must be importable then;
a payload without markers needs nothing).
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from convstore.adapters.importing.llm.logs import (
    LlmMessage,
    LlmThread,
    LlmTurn,
    attachment,
    tool_declaration,
)
from convstore.domain.vocabulary import ToolDeclaration

__all__ = ["count_threads", "read_threads"]


def count_threads(connection: sqlite3.Connection) -> int:
    """How many threads hold at least one turn."""
    row = connection.execute("select count(distinct thread_id) from turns").fetchone()
    return int(row[0])


class _Tree:
    """Every message of the file, its parts rebuilt as `Part.to_dict` writes them."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.parent: dict[str, str | None] = {}
        self.role: dict[str, str] = {}
        for row in connection.execute("select hash, parent_hash, role from messages"):
            self.parent[row["hash"]] = row["parent_hash"]
            self.role[row["hash"]] = row["role"]
        fragments = {
            row["id"]: row["content"]
            for row in connection.execute(
                "select id, content from fragments where id in "
                "(select fragment_id from part_fragments)"
            )
        }
        attachments = {
            row["id"]: attachment(row)
            for row in connection.execute(
                "select id, type, path, url, length(content) as size from attachments"
            )
        }
        self.parts: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in connection.execute(
            "select message_hash, type, text, payload from parts order by message_hash, position"
        ):
            part: dict[str, Any] = json.loads(row["payload"]) if row["payload"] else {}
            part["type"] = row["type"]
            if row["text"] is not None:
                part["text"] = row["text"]
            pieces = part.pop("text_ref", None)
            if pieces is not None:
                part["text"] = "".join(
                    p["literal"] if "literal" in p else fragments.get(p.get("fragment"), "")
                    for p in pieces
                )
            if isinstance(part.get("attachment"), dict):
                ref = part["attachment"].get("id")
                part["attachment"] = attachments.get(ref, {"id": ref})
            if isinstance(part.get("attachments"), list):
                part["attachments"] = [attachments.get(a.get("id"), a) for a in part["attachments"]]
            self.parts[row["message_hash"]].append(part)
        self._system: dict[str, str | None] = {}

    def message(self, key: str) -> LlmMessage:
        """The message `key`."""
        return LlmMessage(role=self.role[key], parts=tuple(self.parts.get(key, ())), key=key)

    def segment(self, tip: str | None, stop: str | None) -> list[str]:
        """The hashes from `tip` back to (not including) `stop`, oldest first."""
        hashes: list[str] = []
        while tip is not None and tip != stop:
            hashes.append(tip)
            tip = self.parent.get(tip)
        hashes.reverse()
        return hashes

    def system(self, tip: str | None) -> str | None:
        """The text of the system message at the root of `tip`'s chain, if it has one."""
        walked: list[str] = []
        found: str | None = None
        while tip is not None:
            if tip in self._system:
                found = self._system[tip]
                break
            walked.append(tip)
            parent = self.parent.get(tip)
            if parent is None:
                found = (
                    "".join(p.get("text", "") for p in self.parts.get(tip, ()))
                    if self.role.get(tip) == "system"
                    else None
                )
            tip = parent
        for key in walked:
            self._system[key] = found
        return found


def read_threads(connection: sqlite3.Connection) -> Iterator[LlmThread]:
    """Every thread that holds a turn, oldest first."""
    tree = _Tree(connection)
    tools: dict[str, list[ToolDeclaration]] = defaultdict(list)
    pairs: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for row in connection.execute(
        "select turn_tools.turn_id, tools.name, tools.description, tools.input_schema "
        "from turn_tools join tools on tools.id = turn_tools.tool_id order by turn_tools.rowid"
    ):
        tools[row["turn_id"]].append(tool_declaration(row))
        pairs[row["turn_id"]].append((row["name"], row["description"]))
    names = {
        row["id"]: row["name"] or "" for row in connection.execute("select id, name from threads")
    }
    rows = connection.execute(
        "select turns.*, schemas.content as schema_json from turns "
        "left join schemas on schemas.id = turns.schema_id "
        "order by turns.thread_id, turns.datetime_utc, turns.rowid"
    )
    thread: str | None = None
    turns: list[LlmTurn] = []
    seen: set[str] = set()
    tip: str | None = None
    for row in rows:
        if row["thread_id"] != thread:
            if thread is not None:
                yield LlmThread(f"thread:{thread}", names.get(thread, ""), tuple(turns))
            thread, turns, seen, tip = row["thread_id"], [], set(), None
        parent = row["parent_message_hash"]
        chain = tree.segment(parent, tip)
        diverged = bool(seen) and bool(chain) and tree.parent.get(chain[0]) != tip
        if diverged:  # keep only what the thread has not recorded
            chain = [h for h in chain if h not in seen]
        outputs = tree.segment(row["tip_message_hash"], parent)
        payload, unresolved = _response_json(row, tree, outputs, pairs.get(row["id"], []))
        turns.append(
            LlmTurn(
                id=row["id"],
                model=row["model"] or "",
                resolved_model=row["resolved_model"],
                inputs=tuple(tree.message(h) for h in chain),
                outputs=tuple(tree.message(h) for h in outputs),
                response_json=payload,
                unresolved=unresolved,
                system=tree.system(parent),
                tools=tuple(tools.get(row["id"], ())),
                options=json.loads(row["options_json"]) if row["options_json"] else {},
                input_tokens=row["input_tokens"],
                output_tokens=row["output_tokens"],
                token_details=json.loads(row["token_details"]) if row["token_details"] else None,
                diverged=diverged,
            )
        )
        seen.update(chain)
        seen.update(outputs)
        tip = row["tip_message_hash"]
    if thread is not None:
        yield LlmThread(f"thread:{thread}", names.get(thread, ""), tuple(turns))


def _response_json(
    row: sqlite3.Row, tree: _Tree, outputs: list[str], tool_pairs: list[tuple[str, str]]
) -> tuple[Any, str]:
    """The turn's `response_json` resolved, or (None, why not)."""
    condensed: str | None = row["response_json"]
    if not condensed:
        return None, ""
    if '{"$' not in condensed:  # nothing condensed: the payload as it was stored
        return json.loads(condensed), ""
    try:
        from llm.logs import _model_json_replacements, resolve_payload
        from llm.parts import Message, Part
    except ImportError:
        return None, (
            "its response_json is stored condensed, and resolving it needs the llm package "
            "(pip install llm)"
        )
    from condense_json import UncondenseError

    messages = [
        Message(
            role=tree.role[h],
            parts=[
                Part.from_dict(
                    {k: v for k, v in p.items() if k not in ("attachment", "attachments")}  # type: ignore[arg-type]
                )
                for p in tree.parts.get(h, ())
            ],
        )
        for h in outputs
    ]
    try:
        return resolve_payload(
            condensed,
            messages,
            tool_pairs,
            schema=json.loads(row["schema_json"]) if row["schema_json"] else None,
            model_replacements=_model_json_replacements(row["model"])
            if '"m.' in condensed
            else None,
        ), ""
    except UncondenseError as error:
        return None, (
            f"its response_json references what cannot be resolved here ({error}; a model's "
            "boilerplate needs its plugin installed)"
        )
