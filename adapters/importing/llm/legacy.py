"""The older layout (before llm 0.32): `conversations` of `responses`, each row one model
call with its prompt and system text, the fragments and attachments it was given, the
tool results it sent, the tool calls it made, and the provider's `response_json`.

A response's new messages are its tool results (a `tool` message), then its prompt (a
`user` message: the prompt's fragments and its text joined as `llm` sends them, then its
attachments, read as metadata); its output is one assistant message (reasoning where the
column exists, the response text, its tool calls). `response_json` is stored condensed
against the response texts and fragments (`{"$": "r:<id>"}`, `{"$": "f<id>"}`): markers
are resolved with `condense_json` (installed with `llm`) from those rows.
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

__all__ = ["count_conversations", "read_conversations"]


def count_conversations(connection: sqlite3.Connection) -> int:
    """How many conversations hold at least one response."""
    row = connection.execute(
        "select count(distinct coalesce(conversation_id, 'response:' || id)) from responses"
    ).fetchone()
    return int(row[0])


def _tables(connection: sqlite3.Connection) -> set[str]:
    return {row[0] for row in connection.execute("select name from sqlite_master")}


def _grouped(
    connection: sqlite3.Connection, tables: set[str], needed: str, sql: str
) -> dict[str, list[sqlite3.Row]]:
    found: dict[str, list[sqlite3.Row]] = defaultdict(list)
    if needed in tables:
        for row in connection.execute(sql):
            found[row["response_id"]].append(row)
    return found


def read_conversations(connection: sqlite3.Connection) -> Iterator[LlmThread]:
    """Every conversation that holds a response, oldest first."""
    tables = _tables(connection)
    fragments = (
        {r["id"]: r["content"] for r in connection.execute("select id, content from fragments")}
        if "fragments" in tables
        else {}
    )
    attached = _grouped(
        connection, tables, "prompt_attachments",
        'select p.response_id, a.id, a.type, a.path, a.url, length(a.content) as size '
        'from prompt_attachments p join attachments a on a.id = p.attachment_id '
        'order by p.response_id, p."order"',
    )  # fmt: skip
    prompt_fragments = _grouped(
        connection, tables, "prompt_fragments",
        'select response_id, fragment_id from prompt_fragments order by response_id, "order"',
    )  # fmt: skip
    system_fragments = _grouped(
        connection, tables, "system_fragments",
        'select response_id, fragment_id from system_fragments order by response_id, "order"',
    )  # fmt: skip
    calls = _grouped(
        connection, tables, "tool_calls",
        "select * from tool_calls order by response_id, id",
    )  # fmt: skip
    results = _grouped(
        connection, tables, "tool_results",
        "select * from tool_results order by response_id, id",
    )  # fmt: skip
    declared: dict[str, list[ToolDeclaration]] = defaultdict(list)
    for response, rows in _grouped(
        connection, tables, "tool_responses",
        "select t.response_id, tools.name, tools.description, tools.input_schema "
        "from tool_responses t join tools on tools.id = t.tool_id order by t.rowid",
    ).items():  # fmt: skip
        declared[response] = [tool_declaration(one) for one in rows]
    names = (
        {r["id"]: r["name"] or "" for r in connection.execute("select id, name from conversations")}
        if "conversations" in tables
        else {}
    )
    texts: dict[str, str] = {}
    conversation: str | None = None
    turns: list[LlmTurn] = []
    for row in map(
        dict, connection.execute("select * from responses order by conversation_id, rowid")
    ):
        key = row["conversation_id"] or f"response:{row['id']}"
        if key != conversation:
            if conversation is not None:
                yield LlmThread(
                    f"conversation:{conversation}", names.get(conversation, ""), tuple(turns)
                )
            conversation, turns = key, []
        texts[row["id"]] = row["response"] or ""
        fragment_texts = [fragments.get(f["fragment_id"], "") for f in prompt_fragments[row["id"]]]
        system_texts = [fragments.get(f["fragment_id"], "") for f in system_fragments[row["id"]]]
        inputs: list[LlmMessage] = []
        if results[row["id"]]:
            inputs.append(
                LlmMessage(
                    role="tool",
                    parts=tuple(_result(dict(r)) for r in results[row["id"]]),
                    key=f"{row['id']}:tool",
                )
            )
        prompt = "\n".join(fragment_texts + ([row["prompt"]] if row["prompt"] else []))
        user: list[dict[str, Any]] = [{"type": "text", "text": prompt}] if prompt else []
        user += [{"type": "attachment", "attachment": attachment(a)} for a in attached[row["id"]]]
        if user:
            inputs.append(LlmMessage(role="user", parts=tuple(user), key=f"{row['id']}:user"))
        output: list[dict[str, Any]] = []
        if row.get("reasoning"):
            output.append({"type": "reasoning", "text": row["reasoning"]})
        if row["response"]:
            output.append({"type": "text", "text": row["response"]})
        output += [_call(dict(c)) for c in calls[row["id"]]]
        system = "\n\n".join(
            bit.strip() for bit in [*system_texts, row["system"] or ""] if bit.strip()
        )
        payload, unresolved = _response_json(row["response_json"], texts, fragments, connection)
        turns.append(
            LlmTurn(
                id=row["id"],
                model=row["model"] or "",
                resolved_model=row.get("resolved_model"),
                inputs=tuple(inputs),
                outputs=(
                    LlmMessage(role="assistant", parts=tuple(output), key=f"{row['id']}:assistant"),
                ),
                response_json=payload,
                unresolved=unresolved,
                system=system or None,
                tools=tuple(declared.get(row["id"], ())),
                options=json.loads(row["options_json"]) if row["options_json"] else {},
                input_tokens=row.get("input_tokens"),
                output_tokens=row.get("output_tokens"),
                token_details=json.loads(row["token_details"])
                if row.get("token_details")
                else None,
            )
        )
    if conversation is not None:
        yield LlmThread(f"conversation:{conversation}", names.get(conversation, ""), tuple(turns))


def _result(row: dict[str, Any]) -> dict[str, Any]:
    part: dict[str, Any] = {
        "type": "tool_result",
        "name": row["name"] or "",
        "output": row["output"] or "",
        "tool_call_id": row["tool_call_id"],
    }
    if row.get("exception"):
        part["exception"] = row["exception"]
    return part


def _call(row: dict[str, Any]) -> dict[str, Any]:
    try:
        arguments = json.loads(row["arguments"]) if row["arguments"] else {}
    except json.JSONDecodeError:
        arguments = {"arguments": row["arguments"]}
    return {
        "type": "tool_call",
        "name": row["name"] or "",
        "arguments": arguments if isinstance(arguments, dict) else {"arguments": arguments},
        "tool_call_id": row["tool_call_id"],
    }


def _response_json(
    stored: str | None,
    texts: dict[str, str],
    fragments: dict[int, str],
    connection: sqlite3.Connection,
) -> tuple[Any, str]:
    """The response's `response_json` resolved, or (None, why not)."""
    if not stored:
        return None, ""
    try:
        condensed = json.loads(stored)
    except json.JSONDecodeError as error:
        return None, f"its response_json is not JSON ({error})"
    if '{"$' not in stored:
        return condensed, ""
    try:
        from condense_json import UncondenseError, uncondense_json
    except ImportError:
        return None, (
            "its response_json is stored condensed, and resolving it needs the condense-json "
            "package (installed with llm)"
        )
    replacements: dict[str, str] = {}
    for key in _markers(condensed):
        if key.startswith("r:"):
            text = texts.get(key[2:])
            if text is None:
                found = connection.execute(
                    "select response from responses where id = ?", [key[2:]]
                ).fetchone()
                text = found[0] if found else None
            if text is not None:
                replacements[key] = text
        elif key.startswith("f") and key.lstrip("f:").isdigit():
            content = fragments.get(int(key.lstrip("f:")))
            if content is not None:
                replacements[key] = content
    try:
        return uncondense_json(condensed, replacements), ""
    except UncondenseError as error:
        return None, f"its response_json references what this file no longer holds ({error})"


def _markers(value: Any) -> Iterator[str]:
    """The ids of every `{"$": id}` marker in a condensed value."""
    if isinstance(value, dict):
        marker = value.get("$")
        if len(value) == 1 and isinstance(marker, str):
            yield marker
        for inner in value.values():
            yield from _markers(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _markers(inner)
