"""Bad model files are refused in one sentence before llama.cpp can abort on them.

A corpus of files whose header parses but whose values are wrong (each of which
aborted llama.cpp, hung the load, or raised a traceback in our inventory
before these checks), of byte-level damage to a header, and llama.cpp's own
reading in a child process for what no list of rules catches.
"""

from __future__ import annotations

import math
import os
import random
from pathlib import Path

import pytest

from engine.errors import BadInputError, ModelFileError
from engine.llama.file_check import check_loads_in_child
from engine.llama.load_params import LoadParams
from engine.llama.vocabulary import read_vocabulary
from engine.model.chat_message import ChatMessage
from engine.model.gguf_header import FIRST_READ_BYTES, MAX_TEXT_BYTES, read_local_header
from engine.model.inventory import read_inventory
from engine.runtime.loaded_model import load_model
from tests.engine.gguf_mutations import (
    N_KV_AT,
    N_TENSORS_AT,
    VT,
    patched,
    rewritten,
    string_length_at,
)

NAN, INF = math.nan, math.inf

# (name, architecture, changes, alignment, what the refusal names)
VALUE_CASES: list[tuple[str, str, dict, int | None, str]] = [
    ("no layers", "llama", {"llama.block_count": (0, VT.UINT32)}, None, "block_count is 0"),
    ("600 layers", "llama", {"llama.block_count": (600, VT.UINT32)}, None, "at most 512"),
    ("layers as text", "llama", {"llama.block_count": ("2", VT.STRING)}, None, "not a whole"),
    ("layers as float", "llama", {"llama.block_count": (2.0, VT.FLOAT32)}, None, "not a whole"),
    ("layers as bool", "llama", {"llama.block_count": (True, VT.BOOL)}, None, "not a whole"),
    ("layers missing", "llama", {"llama.block_count": None}, None, "block_count is missing"),
    ("width as text", "llama", {"llama.embedding_length": ("64", VT.STRING)}, None, "whole"),
    ("no width", "llama", {"llama.embedding_length": (0, VT.UINT32)}, None, "embedding_length"),
    ("negative ctx", "llama", {"llama.context_length": (-5, VT.INT32)}, None, "context_length"),
    ("heads as text", "llama", {"llama.attention.head_count": ("4", VT.STRING)}, None, "whole"),
    ("kv heads 3 of 4", "llama", {"llama.attention.head_count_kv": (3, VT.UINT32)}, None,
     "does not divide"),
    ("kv heads too many", "llama", {"llama.attention.head_count_kv": (8, VT.UINT32)}, None,
     "does not divide"),
    ("short per-layer array", "llama",
     {"llama.feed_forward_length": ([128], VT.ARRAY, VT.UINT32)}, None, "1 entries for 2 layers"),
    ("NaN epsilon", "llama",
     {"llama.attention.layer_norm_rms_epsilon": (NAN, VT.FLOAT32)}, None, "not a finite"),
    ("infinite epsilon", "llama",
     {"llama.attention.layer_norm_rms_epsilon": (INF, VT.FLOAT32)}, None, "not a finite"),
    ("negative epsilon", "llama",
     {"llama.attention.layer_norm_rms_epsilon": (-1e-6, VT.FLOAT32)}, None, "negative"),
    ("NaN rope base", "llama", {"llama.rope.freq_base": (NAN, VT.FLOAT32)}, None, "freq_base"),
    ("NaN in a float array", "llama",
     {"general.some_floats": ([1.0, NAN], VT.ARRAY, VT.FLOAT32)}, None, "some_floats"),
    ("unknown rope scaling", "llama",
     {"llama.rope.scaling.type": ("wobbly", VT.STRING)}, None, "rope.scaling.type"),
    ("next-n beyond layers", "llama",
     {"llama.nextn_predict_layers": (3, VT.UINT32)}, None, "nextn_predict_layers"),
    ("alignment 1", "llama", {}, 1, "not a multiple of 32"),
    ("alignment 8", "llama", {}, 8, "not a multiple of 32"),
    ("alignment 3", "llama", {"general.alignment": (3, VT.UINT32)}, None, "power of two"),
    ("more used than experts", "qwen3moe",
     {"qwen3moe.expert_used_count": (8, VT.UINT32)}, None, "exceeds expert_count"),
    ("no experts used", "qwen3moe",
     {"qwen3moe.expert_used_count": (0, VT.UINT32)}, None, "expert_used_count is 0"),
    ("2000 experts", "qwen3moe",
     {"qwen3moe.expert_count": (2000, VT.UINT32)}, None, "at most 1024"),
    ("experts in odd groups", "qwen3moe",
     {"qwen3moe.expert_group_count": (3, VT.UINT32)}, None, "groups"),
    ("groups without experts", "llama",
     {"llama.expert_group_count": (2, VT.UINT32)}, None, "without experts"),
    # found by a seeded sweep of value mutants (issue 44): each was an internal error
    ("window pattern as text", "llama",
     {"llama.attention.sliding_window": (64, VT.UINT32),
      "llama.attention.sliding_window_pattern": ("every 2nd", VT.STRING)}, None,
     "llama.attention.sliding_window_pattern is 'every 2nd', not a whole number"),
    ("window pattern of floats", "llama",
     {"llama.attention.sliding_window": (64, VT.UINT32),
      "llama.attention.sliding_window_pattern": ([1.0, 0.0], VT.ARRAY, VT.FLOAT32)}, None,
     "sliding_window_pattern holds 1.0, not a flag per layer"),
    ("negative window pattern", "llama",
     {"llama.attention.sliding_window": (64, VT.UINT32),
      "llama.attention.sliding_window_pattern": (-2, VT.INT32)}, None,
     "sliding_window_pattern is -2; it must be at least 0"),
    ("no architecture", "llama", {"general.architecture": None}, None,
     "bad model file: general.architecture is missing$"),
    ("architecture as a number", "llama", {"general.architecture": (7, VT.UINT32)}, None,
     "general.architecture is 7, not an architecture's name"),
    ("a projector's count as text", "llama",
     {"general.architecture": ("clip", VT.STRING), "clip.block_count": ("x", VT.STRING)}, None,
     "clip.block_count is 'x', not a whole number"),
    ("context of 8 tokens", "llama", {"llama.context_length": (8, VT.UINT32)}, None,
     "llama.context_length is 8; it must be at least 16"),
    ("context past int32", "llama", {"llama.context_length": (2**32 - 1, VT.UINT32)}, None,
     "llama.context_length is 4294967295; llama.cpp reports at most 2147483647"),
    ("context past 32 bits", "llama", {"llama.context_length": (2**40, VT.UINT64)}, None,
     "llama.context_length is 1099511627776; llama.cpp reads it as 32 bits"),
]  # fmt: skip


@pytest.fixture(scope="module")
def tiny(make_synthetic) -> dict[str, Path]:
    """Small synthetic models without a tokenizer: fast to rewrite, real to llama.cpp."""
    return {arch: make_synthetic(arch, "F16", vocab_size=256) for arch in ("llama", "qwen3moe")}


@pytest.mark.parametrize(
    ("arch", "changes", "alignment", "named"),
    [case[1:] for case in VALUE_CASES],
    ids=[case[0] for case in VALUE_CASES],
)
def test_a_bad_value_is_refused_in_one_line_naming_it(
    tiny: dict[str, Path], tmp_path: Path, arch: str, changes: dict, alignment: int | None,
    named: str,
) -> None:  # fmt: skip
    bad = rewritten(tiny[arch], tmp_path / "bad.gguf", changes, alignment)
    with pytest.raises(ModelFileError, match=named) as refused:
        read_inventory(bad)
    message = str(refused.value)
    assert message.startswith(str(bad)) and "\n" not in message


# The keys the inventory reads, and the mutations a hostile or broken writer makes of them
SWEPT_KEYS = [
    "general.architecture", "general.name", "general.alignment", "split.count", "split.no",
    *(f"llama.{name}" for name in (
        "block_count", "context_length", "embedding_length", "feed_forward_length",
        "attention.head_count", "attention.head_count_kv", "attention.key_length",
        "attention.value_length", "attention.sliding_window", "attention.sliding_window_pattern",
        "vocab_size", "expert_count", "expert_used_count", "expert_shared_count",
    )),
]  # fmt: skip
MUTATIONS = [
    ("x", VT.STRING), ("", VT.STRING), (1.5, VT.FLOAT32), (True, VT.BOOL), (-1, VT.INT32),
    (0, VT.UINT32), (2**31, VT.UINT32), (2**32 - 1, VT.UINT32), (2**40, VT.UINT64),
    (-(2**40), VT.INT64), ([1, 2], VT.ARRAY, VT.UINT32), ([-1, -1], VT.ARRAY, VT.INT32),
    (["a", "b"], VT.ARRAY, VT.STRING), ([1.0, 2.0], VT.ARRAY, VT.FLOAT32), None,
]  # fmt: skip


def test_every_mutation_of_every_key_read_is_read_or_refused_in_one_line(
    tiny: dict[str, Path], tmp_path: Path
) -> None:
    """Each of the keys the inventory reads, as each wrong type or out-of-range value (or
    removed), in a model with a sliding window (so its pattern is read): a ModelFileError of
    one line naming the file, or an inventory; never another exception (25 ms a mutant)."""
    windowed = rewritten(
        tiny["llama"],
        tmp_path / "windowed.gguf",
        {"llama.attention.sliding_window": (64, VT.UINT32)},
    )
    outcomes = {"refused": 0, "read": 0}
    for number, (key, value) in enumerate((k, v) for k in SWEPT_KEYS for v in MUTATIONS):
        bad = rewritten(windowed, tmp_path / f"mutant-{number}.gguf", {key: value})
        try:
            read_inventory(bad)
            outcomes["read"] += 1
        except ModelFileError as refusal:
            assert str(refusal).startswith(str(bad)) and "\n" not in str(refusal), (key, value)
            outcomes["refused"] += 1
        bad.unlink()
    assert outcomes["refused"] > outcomes["read"] > 0


def test_the_untouched_copies_pass_every_check(tiny: dict[str, Path], tmp_path: Path) -> None:
    """The corpus's writer itself makes good files: each refusal above is the value's doing."""
    for arch, source in tiny.items():
        copy = rewritten(source, tmp_path / f"{arch}.gguf", {})
        assert read_inventory(copy).n_layer == 2
        check_loads_in_child(copy)


@pytest.mark.parametrize(
    ("changes", "assertion"),
    [
        ({"llama.block_count": (0, VT.UINT32)}, "GGML_ASSERT(hparams.n_layer_all > 0"),
        ({"llama.rope.scaling.type": ("wobbly", VT.STRING)}, "GGML_ASSERT(hparams.rope_scaling"),
    ],
    ids=["no layers", "unknown rope scaling"],
)
def test_llama_cpp_aborting_in_the_child_is_a_refusal_with_its_assertion(
    tiny: dict[str, Path], tmp_path: Path, changes: dict, assertion: str
) -> None:
    """What the rules missed would kill the child, not us: its assertion is the reason."""
    bad = rewritten(tiny["llama"], tmp_path / "bad.gguf", changes)
    with pytest.raises(ModelFileError, match="llama.cpp cannot load it") as refused:
        check_loads_in_child(bad)
    assert "SIGABRT" in str(refused.value) and assertion in str(refused.value)


def test_a_file_llama_cpp_refuses_cleanly_is_refused_with_its_reason(
    tiny: dict[str, Path], tmp_path: Path
) -> None:
    bad = rewritten(tiny["llama"], tmp_path / "no-context.gguf", {"llama.context_length": None})
    read_inventory(bad)  # nothing our rules need is missing...
    with pytest.raises(ModelFileError, match="key not found in model: llama.context_length"):
        check_loads_in_child(bad)  # ...but llama.cpp needs the key


def test_a_vocabulary_llama_cpp_cannot_read_is_refused_with_its_reason(
    default_model_file: Path, tmp_path: Path
) -> None:
    """Our checks read no general.name, llama.cpp's do: its own line says which key and why
    (the refusal said only "could not read the model's vocabulary")."""
    bad = rewritten(default_model_file, tmp_path / "name.gguf", {"general.name": (1.5, VT.FLOAT32)})
    with pytest.raises(ModelFileError, match=r"vocabulary: .*general\.name has wrong type"):
        read_vocabulary(bad, ())


def test_a_model_llama_cpp_cannot_load_is_refused_with_its_reason(
    default_model_file: Path, tmp_path: Path
) -> None:
    """llama-cpp-python's own error says only "Failed to load model from file"."""
    changes = {"llama.feed_forward_length": (0, VT.UINT32)}
    bad = rewritten(default_model_file, tmp_path / "ffn.gguf", changes)
    with pytest.raises(ModelFileError, match=r"could not load the model \(check_tensor_dims: "
                       r"tensor 'blk\.0\.ffn_gate\.weight' has wrong shape"):  # fmt: skip
        load_model(LoadParams(str(bad), n_ctx=64, n_threads=1))


def test_damaged_header_bytes_are_refused_or_read_never_anything_else(
    tiny: dict[str, Path], tmp_path: Path
) -> None:
    """Seeded bit flips and overwritten counts across the header: ModelFileError or a header."""
    source = tiny["llama"].read_bytes()
    header_end = read_local_header(tiny["llama"]).data_offset
    rng = random.Random(28)
    outcomes = {"refused": 0, "read": 0}
    for case in range(150):
        data = bytearray(source)
        if case % 3 == 0:  # a count or length overwritten with a random 64-bit number
            at = rng.randrange(8, header_end - 8)
            data[at : at + 8] = rng.getrandbits(64).to_bytes(8, "little")
        else:
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(4, header_end)] ^= 1 << rng.randrange(8)
        path = tmp_path / f"flip-{case}.gguf"
        path.write_bytes(bytes(data))
        try:
            read_inventory(path)
            outcomes["read"] += 1
        except ModelFileError as refusal:
            assert "\n" not in str(refusal)
            outcomes["refused"] += 1
        path.unlink()
    assert outcomes["refused"] > 0 and sum(outcomes.values()) == 150


@pytest.mark.parametrize("at", [N_TENSORS_AT, N_KV_AT], ids=["tensor count", "metadata count"])
def test_a_corrupt_count_is_refused_without_reading_the_weights(
    default_model_file: Path, tmp_path: Path, at: int
) -> None:
    """A count a million too high once made the reader fetch gigabytes of weights."""
    path = patched(default_model_file, tmp_path / "corrupt.gguf", at, "<Q", 1_000_272)
    header_bytes = read_local_header(default_model_file).data_offset
    before = _bytes_read()
    with pytest.raises(ModelFileError):
        read_inventory(path)
    read = _bytes_read() - before
    assert read < 8 * header_bytes < os.path.getsize(path) // 4, f"{read} bytes read"


def test_a_chat_template_claiming_a_gigabyte_of_a_big_file_is_refused_unread(
    make_synthetic, tmp_path: Path
) -> None:
    """A real file's chat template said to be 2^30 - 1 bytes, the file grown to 6 GiB
    (sparse: no disk) so that it holds them. No chat template is that long; reading it
    took over 4 GiB of memory."""
    source = make_synthetic("llama", "F16")
    at = string_length_at(source, "tokenizer.chat_template")
    path = patched(source, tmp_path / "big.gguf", at, "<Q", 2**30 - 1)
    os.truncate(path, 6 << 30)
    before = _bytes_read()
    with pytest.raises(ModelFileError) as refused:
        read_inventory(path)
    assert _bytes_read() - before < 2 * FIRST_READ_BYTES  # one first read, not a gigabyte
    assert str(refused.value) == (
        f"{path}: malformed GGUF: absurd string length 1073741823 for tokenizer.chat_template "
        f"(at most {MAX_TEXT_BYTES} bytes)"
    )


def _bytes_read() -> int:
    """Bytes this process has read through read() calls (Linux's rchar)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_a_model_without_a_tokenizer_refuses_text_instead_of_aborting(
    tiny: dict[str, Path],
) -> None:
    """llama_tokenize aborts the process on a "none" vocabulary; the chat says why instead."""
    model = load_model(LoadParams(str(tiny["llama"]), n_ctx=256, n_threads=1))
    try:
        with pytest.raises(BadInputError, match="has no tokenizer"):
            model.count_tokens([ChatMessage("user", "hello")])
        with pytest.raises(BadInputError, match="has no tokenizer"):
            model.tokenize_text("a document to summarise")
    finally:
        model.close()
