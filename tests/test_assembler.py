"""The shared stream assembler, driven by a toy provider's delta table."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from convstore.adapters.wire.assembler import AssembledBlock, OpenBlock, StreamAssembler


def _text(block: OpenBlock, delta: Any) -> bool:
    if not isinstance(delta, str):
        return False
    block.append_text("text", delta)
    return True


def _json(block: OpenBlock, delta: Any) -> bool:
    block.append_json("input", delta)
    return True


def _item(block: OpenBlock, delta: Any) -> bool:
    block.append_item("notes", delta)
    return True


def _set(block: OpenBlock, delta: Any) -> bool:
    block.set("seal", delta)
    return True


TABLE = {"text": _text, "json": _json, "item": _item, "set": _set}


def assembler() -> tuple[StreamAssembler[AssembledBlock], list[AssembledBlock]]:
    closed: list[AssembledBlock] = []

    def mapper(block: AssembledBlock) -> list[AssembledBlock]:
        closed.append(block)
        return [block]

    return StreamAssembler(TABLE, mapper), closed


def test_a_block_is_its_start_json_with_every_delta_applied() -> None:
    asm, _ = assembler()
    assert asm.start(0, {"type": "t", "text": "He", "notes": ["a"]}) == []
    for delta_type, delta in [("text", "llo"), ("text", ", "), ("item", "b"), ("text", "you")]:
        assert asm.delta(0, delta_type, delta)
    assert asm.delta(0, "set", "sig")
    [out] = asm.stop(0)
    assert out.block == {"type": "t", "text": "Hello, you", "notes": ["a", "b"], "seal": "sig"}
    assert out.complete and out.raw is None and out.unparsed == {}
    assert asm.open_blocks == 0


def test_partial_json_is_parsed_once_at_close() -> None:
    asm, _ = assembler()
    asm.start(3, {"type": "call", "input": {}})
    for piece in ["", '{"ci', 'ty": "Zü', 'rich", "n": [1, 2', "]}"]:
        asm.delta(3, "json", piece)
    [out] = asm.stop(3)
    assert out.block["input"] == {"city": "Zürich", "n": [1, 2]}


def test_a_block_no_delta_changed_keeps_its_bytes() -> None:
    asm, _ = assembler()
    raw = b'{"type":"result","content":[1,2]}'
    asm.start(0, msgspec.json.decode(raw), raw)
    asm.delta(0, "json", "")  # an empty fragment changes nothing
    [out] = asm.stop(0)
    assert out.raw == raw


def test_unknown_delta_types_and_indexes_are_refused_not_applied() -> None:
    asm, _ = assembler()
    asm.start(0, {"type": "t", "text": ""})
    assert not asm.delta(0, "telepathy", "x")
    assert not asm.delta(7, "text", "x")
    assert not asm.delta(0, "text", 42)  # malformed: the applier says no
    assert asm.stop(7) == []
    [out] = asm.stop(0)
    assert out.block == {"type": "t", "text": ""}


def test_finish_cut_hands_open_blocks_over_incomplete_in_index_order() -> None:
    asm, closed = assembler()
    asm.start(2, {"type": "call", "input": {}})
    asm.delta(2, "json", '{"city": "Par')
    asm.start(1, {"type": "t", "text": ""})
    asm.delta(1, "text", "half a sen")
    out = asm.finish(cut=True)
    assert [b.index for b in out] == [1, 2]
    assert not any(b.complete for b in out)
    assert out[0].block["text"] == "half a sen"
    assert out[1].block["input"] == {}  # the start value stays
    assert out[1].unparsed == {"input": '{"city": "Par'}
    assert asm.open_blocks == 0 and closed == out


def test_finish_without_cut_closes_blocks_as_complete() -> None:
    asm, _ = assembler()
    asm.start(0, {"type": "t", "text": "x"})
    [out] = asm.finish(cut=False)
    assert out.complete


def test_restarting_an_open_index_closes_the_old_block_incomplete() -> None:
    asm, _ = assembler()
    asm.start(0, {"type": "t", "text": ""})
    asm.delta(0, "text", "lost?")
    [old] = asm.start(0, {"type": "t", "text": ""})
    assert not old.complete and old.block["text"] == "lost?"


def test_start_values_of_the_wrong_type_do_not_break_assembly() -> None:
    asm, _ = assembler()
    asm.start(0, {"type": "t", "text": 5, "notes": "not a list"})
    asm.delta(0, "text", "ok")
    asm.delta(0, "item", 1)
    [out] = asm.stop(0)
    assert out.block["text"] == "ok" and out.block["notes"] == [1]


def test_only_open_blocks_are_held() -> None:
    asm, _ = assembler()
    for index in range(1000):
        asm.start(index, {"type": "t", "text": ""})
        asm.delta(index, "text", "x" * 10)
        asm.stop(index)
        assert asm.open_blocks == 0


def test_many_small_pieces_join_in_linear_time() -> None:
    asm, _ = assembler()
    asm.start(0, {"type": "t", "text": ""})
    for _ in range(200_000):
        asm.delta(0, "text", "ab")
    [out] = asm.stop(0)
    assert len(out.block["text"]) == 400_000


@given(st.lists(st.text(max_size=8), max_size=30))
def test_text_pieces_concatenate_exactly(pieces: list[str]) -> None:
    asm, _ = assembler()
    asm.start(0, {"type": "t", "text": ""})
    for piece in pieces:
        asm.delta(0, "text", piece)
    [out] = asm.stop(0)
    assert out.block["text"] == "".join(pieces)
