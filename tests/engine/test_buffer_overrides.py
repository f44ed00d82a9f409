"""Tensor buffer type overrides reach llama.cpp's loader and change where weights live."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from engine.llama import log_capture as llama_log
from engine.llama.buffer_overrides import (
    BufferType,
    TensorOverrides,
    buffer_types,
    loading_with_overrides,
    max_overrides,
    override_patterns_for,
)
from engine.llama.device_buffers import MIB, parse_buffer_lines
from engine.model.inventory import SubLayerKind, read_inventory
from engine.runtime.placement_report import overridden_tensors

pytestmark = pytest.mark.usefixtures("ggml_started")  # it builds Llama() itself

# llama-model-loader.cpp: "tensor %s (%zu MiB %s) buffer type overridden to %s"
# llama-model.cpp: "%s: %12s model buffer size = %8.2f MiB"
PROMPT = [1, 2, 3, 4]
Q4_0_BYTES_PER_ELEMENT = 18 / 32  # a block of 32 weights: 16 bytes of nibbles + an f16 scale


@pytest.fixture(scope="module")
def q4_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from engine.model.synthetic import write_synthetic_model
    from engine.model.synthetic_spec import SyntheticSpec

    spec = SyntheticSpec("llama", n_layer=2, n_embd=128, n_ff=256)
    return write_synthetic_model(tmp_path_factory.mktemp("overrides") / "q4.gguf", spec, "Q4_0")


@pytest.fixture
def llama_log_lines(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], list[str]]]:
    llama_log.install()
    with caplog.at_level(logging.DEBUG, logger="llama.cpp"):
        yield lambda: [r.getMessage() for r in caplog.records if r.name == "llama.cpp"]


@contextmanager
def loaded(path: Path, overrides: TensorOverrides | None = None) -> Iterator[llama_cpp.Llama]:
    with loading_with_overrides(overrides):
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=2, verbose=False)
    try:
        yield llm
    finally:
        llm.close()


overridden = overridden_tensors


def model_buffers(lines: list[str]) -> dict[str, float]:
    """buffer name -> MiB from the 'model buffer size' lines of one load."""
    buffers = parse_buffer_lines(lines).by_buffer
    return {name: roles["model"] / MIB for name, roles in buffers.items() if "model" in roles}


def ffn_tensors(path: Path, block: int) -> tuple[str, ...]:
    inventory = read_inventory(path)
    (ffn,) = [
        s
        for s in inventory.all_sublayers()
        if s.kind is SubLayerKind.DENSE_FFN and s.block == block
    ]
    return ffn.tensor_names


def last_logits(llm: llama_cpp.Llama) -> np.ndarray:
    llm.reset()
    llm.eval(PROMPT)
    logits = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(logits, shape=(llm.n_vocab(),)).copy()


def greedy(llm: llama_cpp.Llama, n: int) -> list[int]:
    llm.reset()
    tokens = []
    for token in llm.generate(PROMPT, temp=0.0, top_k=1):
        tokens.append(token)
        if len(tokens) == n:
            break
    return tokens


def defaults_without_extra_bufts(original: Callable[[], object]) -> Callable[[], object]:
    def defaults() -> object:
        params = original()
        params.use_extra_bufts = False  # type: ignore[attr-defined]
        return params

    return defaults


# ---------------------------------------------------------------- buffer types


def test_buffer_types_include_the_cpu() -> None:
    types = buffer_types()
    assert types["CPU"] == BufferType("CPU", device="CPU", is_host=True, is_extra=False)
    assert all(t.device == "CPU" for t in types.values() if t.is_extra)
    assert [name for name, t in types.items() if name != t.name] == []


# ---------------------------------------------------------------- real loads


def test_cpu_override_reaches_exactly_the_matching_tensors(q4_model, llama_log_lines) -> None:
    with loaded(q4_model) as llm:
        baseline = model_buffers(llama_log_lines())
    assert "CPU_REPACK" in baseline, "Q4_0 weights should be repacked on this build"
    assert overridden(llama_log_lines()) == {}
    start = len(llama_log_lines())

    with loaded(q4_model, TensorOverrides([(r"blk\.0\.ffn_.*", "CPU")])) as llm:
        lines = llama_log_lines()[start:]
        assert llama_cpp.llama_cpp.llama_model_default_params().tensor_buft_overrides is None
        tokens = greedy(llm, 4)
        n_vocab = llm.n_vocab()

    placed = overridden(lines)
    assert set(placed) == set(ffn_tensors(q4_model, 0))
    # A "CPU" override lets llama.cpp pick among CPU buffer types: Q4_0 stays repacked.
    assert {name: buft for name, (ggml_type, buft) in placed.items() if ggml_type == "q4_0"} == {
        name: "CPU_REPACK" for name in ffn_tensors(q4_model, 0) if "norm" not in name
    }
    assert placed["blk.0.ffn_norm.weight"] == ("f32", "CPU")
    assert model_buffers(lines) == baseline
    assert len(tokens) == 4 and all(0 <= t < n_vocab for t in tokens)


def test_override_moves_weights_into_another_buffer(
    q4_model, llama_log_lines, monkeypatch: pytest.MonkeyPatch
) -> None:
    with loaded(q4_model) as llm:
        all_repacked = model_buffers(llama_log_lines())["CPU_REPACK"]
    # Without llama.cpp's own repacking, only what we override lands in CPU_REPACK.
    low_level = llama_cpp.llama_cpp
    plain_defaults = defaults_without_extra_bufts(low_level.llama_model_default_params)
    monkeypatch.setattr(low_level, "llama_model_default_params", plain_defaults)
    start = len(llama_log_lines())
    with loaded(q4_model) as llm:
        plain = model_buffers(llama_log_lines()[start:])
        plain_logits = last_logits(llm)
    assert "CPU_REPACK" not in plain

    matrices = [name for name in ffn_tensors(q4_model, 0) if "norm" not in name]
    pairs = override_patterns_for(matrices, "CPU_REPACK")
    overrides = TensorOverrides(pairs, allow_extra_buffer_types=True)
    start = len(llama_log_lines())
    with loaded(q4_model, overrides) as llm:
        lines = llama_log_lines()[start:]
        logits = last_logits(llm)
    assert low_level.llama_model_default_params is plain_defaults

    assert overridden(lines) == {name: ("q4_0", "CPU_REPACK") for name in matrices}
    repacked = model_buffers(lines)["CPU_REPACK"]
    expected = 3 * 128 * 256 * Q4_0_BYTES_PER_ELEMENT / 2**20  # gate, up, down of block 0
    assert 0 < repacked < all_repacked
    assert repacked == pytest.approx(expected, abs=0.006)  # the log rounds to 0.01 MiB
    assert np.isfinite(logits).all()
    scale = float(np.abs(plain_logits).max())
    assert float(np.abs(logits - plain_logits).max()) <= 1e-3 * scale  # lossless placement


# ---------------------------------------------------------------- the hook itself


def test_hook_is_scoped_to_the_block_and_thread() -> None:
    low_level = llama_cpp.llama_cpp
    original = low_level.llama_model_default_params
    overrides = TensorOverrides([("^output\\.weight$", "CPU")])
    seen_elsewhere: list[object] = []
    with pytest.raises(KeyError), loading_with_overrides(overrides):
        assert low_level.llama_model_default_params().tensor_buft_overrides == overrides.pointer
        other = threading.Thread(
            target=lambda: seen_elsewhere.append(
                low_level.llama_model_default_params().tensor_buft_overrides
            )
        )
        other.start()
        other.join()
        raise KeyError("the body fails")
    assert low_level.llama_model_default_params is original
    assert seen_elsewhere == [None]


def test_hook_fails_loudly_when_llama_does_not_use_it() -> None:
    overrides = TensorOverrides([("^output\\.weight$", "CPU")])
    with pytest.raises(RuntimeError, match="not applied"), loading_with_overrides(overrides):
        pass  # no Llama(...) here, as if llama-cpp-python built its params another way


@pytest.mark.parametrize("overrides", [None, TensorOverrides([])])
def test_no_overrides_changes_nothing(overrides: TensorOverrides | None) -> None:
    original = llama_cpp.llama_cpp.llama_model_default_params
    with loading_with_overrides(overrides):
        assert llama_cpp.llama_cpp.llama_model_default_params is original


def test_the_array_is_null_terminated() -> None:
    import ctypes

    overrides = TensorOverrides([("^a$", "CPU"), ("^b$", "CPU")])
    words = (ctypes.c_void_p * 6).from_address(overrides.pointer)
    assert ctypes.string_at(words[0]) == b"^a$" and ctypes.string_at(words[2]) == b"^b$"
    assert words[1] == words[3] and words[1] is not None
    assert words[4] is None and words[5] is None
    assert overrides.pairs == (("^a$", "CPU"), ("^b$", "CPU")) and len(overrides) == 2


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([(r"blk\.0\.", "VRAM")], r"unknown buffer type 'VRAM'; available: CPU"),
        ([("blk.(0", "CPU")], r"pattern 'blk.\(0' is not a regex"),
        ([("(?P<n>blk)", "CPU")], "Python-only regex syntax"),
        ([("", "CPU")], "empty"),
        ([("^x$", "CPU")] * 4096, "4096 tensor overrides; llama.cpp accepts at most 4095"),
    ],
    ids=["unknown-type", "bad-regex", "python-only", "empty", "too-many"],
)
def test_bad_overrides_are_refused(pairs: list[tuple[str, str]], message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        TensorOverrides(pairs)
    assert "\n" not in str(caught.value)


def test_extra_buffer_types_need_an_opt_in() -> None:
    extras = [name for name, t in buffer_types().items() if t.is_extra]
    if not extras:
        pytest.skip("this build has no CPU extra buffer types")
    with pytest.raises(ValueError, match="crashes the process") as caught:
        TensorOverrides([("^blk\\.0\\.ffn_up\\.weight$", extras[0])])
    assert "\n" not in str(caught.value)
    assert len(TensorOverrides([("x", extras[0])], allow_extra_buffer_types=True)) == 1


def test_too_many_patterns_are_refused() -> None:
    names = [f"blk.{i}.ffn_up.weight" for i in range(max_overrides() + 1)]
    with pytest.raises(ValueError, match="accepts at most") as caught:
        override_patterns_for(names, "CPU", compact=False)
    assert "\n" not in str(caught.value)
    assert len(override_patterns_for(names, "CPU")) == 1  # compacted into one alternation


# ---------------------------------------------------------------- patterns from names


@pytest.mark.parametrize("compact", [True, False])
def test_patterns_match_exactly_the_given_tensors(q4_model: Path, compact: bool) -> None:
    every = [n for s in read_inventory(q4_model).all_sublayers() for n in s.tensor_names]
    chosen = {
        n for n in every if re.match(r"blk\.\d+\.(ffn_up|ffn_down|attn_q)\.", n) or "output" in n
    }
    chosen.discard("blk.1.attn_q.weight")  # an uneven set, so compaction has to split
    pairs = override_patterns_for(chosen, "CPU", compact=compact)
    assert {buft for _, buft in pairs} == {"CPU"}
    # llama.cpp searches (std::regex_search); anchored patterns make that a full match.
    matched = {n for n in every if any(re.search(p, n) for p, _ in pairs)}
    assert matched == chosen
    assert all(any(re.fullmatch(p, n) for p, _ in pairs) for n in chosen)
    if compact:
        assert len(pairs) < len(chosen)
    else:
        assert len(pairs) == len(chosen)
    assert len(TensorOverrides(pairs)) == len(pairs)
