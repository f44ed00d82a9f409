"""Streamed bytes become text without splitting characters or leaking stop strings."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engine.generation.text_assembly import TextAssembler


def pieces_of(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


@given(text=st.text(), cuts=st.lists(st.integers(0, 10_000), max_size=20))
def test_any_byte_split_reassembles_the_text(text: str, cuts: list[int]) -> None:
    assembler = TextAssembler(stop=())
    out = "".join(assembler.feed(p) for p in pieces_of(text.encode(), cuts)) + assembler.flush()
    assert out == text


@given(
    before=st.text(alphabet="abc <>|"),
    after=st.text(alphabet="abc <>|"),
    cuts=st.lists(st.integers(0, 10_000), max_size=20),
)
def test_text_stops_before_the_stop_string(before: str, after: str, cuts: list[int]) -> None:
    stop = "<|im_end|>"
    assembler = TextAssembler(stop=(stop,))
    emitted = ""
    for piece in pieces_of((before + stop + after).encode(), cuts):
        emitted += assembler.feed(piece)
        assert stop not in emitted
    emitted += assembler.flush()
    assert emitted == before.split(stop)[0]
    assert assembler.stopped


def test_a_partial_stop_string_is_released_when_it_turns_out_not_to_be_one() -> None:
    assembler = TextAssembler(stop=("<|im_end|>",))
    assert assembler.feed(b"hello <|im") == "hello "
    assert assembler.feed(b"pressive") == "<|impressive"
    assert assembler.flush() == ""
    assert not assembler.stopped
