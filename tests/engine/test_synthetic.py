"""Synthetic GGUF models: llama.cpp loads and runs them, and they hold what we asked for."""

from __future__ import annotations

import itertools
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest

from engine.model.default_model import default_model_path
from engine.model.synthetic import quantize_model, write_synthetic_model
from engine.model.synthetic_spec import DIRECT_QUANTS, SUPPORTED_ARCHITECTURES, SyntheticSpec

pytestmark = pytest.mark.usefixtures("ggml_started")  # it builds Llama() itself

N_VOCAB = 49152  # SmolLM2's vocabulary, copied into every synthetic model
PROMPT = "Hello world"

# Every architecture in F16; the quantized paths on one dense and one MoE model.
CASES = [(arch, "F16") for arch in ("llama", "qwen3", "qwen3moe", "gemma3")] + [
    ("llama", "Q8_0"),
    ("qwen3moe", "Q8_0"),
    ("llama", "Q4_0"),
    ("qwen3moe", "Q4_0"),
]
CASE_IDS = [f"{arch}-{quant}" for arch, quant in CASES]

ModelWriter = Callable[..., Path]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> ModelWriter:
    """Write each (architecture, quant, overrides) tiny model once per module."""
    written: dict[tuple, Path] = {}

    def write(arch: str, quant: str = "F16", **overrides: object) -> Path:
        key = (arch, quant, tuple(sorted(overrides.items())))
        if key not in written:
            path = tmp_path_factory.mktemp("synthetic") / f"{arch}-{quant}.gguf"
            written[key] = write_synthetic_model(path, SyntheticSpec(arch, **overrides), quant)
        return written[key]

    return write


@pytest.fixture(scope="module")
def read_gguf() -> Callable[[Path], gguf.GGUFReader]:
    """GGUFReader per path, cached: parsing 100k tokenizer strings takes ~1.5 s a file."""
    readers: dict[Path, gguf.GGUFReader] = {}

    def read(path: Path) -> gguf.GGUFReader:
        if path not in readers:
            readers[path] = gguf.GGUFReader(path)
        return readers[path]

    return read


@pytest.fixture(scope="module")
def default_tokenizer(read_gguf: Callable[[Path], gguf.GGUFReader]) -> dict[str, tuple]:
    """The default model's tokenizer keys: key -> (value types, contents)."""
    fields = read_gguf(default_model_path()).fields
    return {k: (f.types, f.contents()) for k, f in fields.items() if k.startswith("tokenizer.")}


@contextmanager
def _load(path: Path) -> Iterator[llama_cpp.Llama]:
    llm = llama_cpp.Llama(
        model_path=str(path), n_ctx=256, n_threads=2, logits_all=True, verbose=False
    )
    try:
        yield llm
    finally:
        llm.close()


def _check_runs(path: Path) -> list[int]:
    """Load `path`, evaluate the prompt, check logits and greedy tokens; return the tokens."""
    with _load(path) as llm:
        assert llm.n_vocab() == N_VOCAB
        prompt = llm.tokenize(PROMPT.encode())
        assert prompt, "the copied tokenizer produced no tokens"
        llm.eval(prompt)
        logits = np.asarray(llm.scores[: llm.n_tokens])
        assert logits.shape == (len(prompt), N_VOCAB)
        assert np.isfinite(logits).all()
        assert logits.std() > 0, "logits are constant; weights were not random"
        generated = list(itertools.islice(llm.generate(prompt, temp=0), 4))
        assert len(generated) == 4
        assert all(0 <= tok < N_VOCAB for tok in generated), generated
        assert np.isfinite(np.asarray(llm.scores[: llm.n_tokens])).all()
    return generated


def _tensor_types(reader: gguf.GGUFReader) -> dict[str, str]:
    return {t.name: t.tensor_type.name for t in reader.tensors}


def _field(reader: gguf.GGUFReader, key: str) -> object:
    return reader.fields[key].contents()


# ---------------------------------------------------------------- llama.cpp runs them


@pytest.mark.parametrize(("arch", "quant"), CASES, ids=CASE_IDS)
def test_tiny_model_loads_and_generates(tiny_model: ModelWriter, arch: str, quant: str) -> None:
    _check_runs(tiny_model(arch, quant))


def test_tokenizes_like_the_default_model(tiny_model: ModelWriter) -> None:
    reference = llama_cpp.Llama(
        model_path=str(default_model_path()), vocab_only=True, verbose=False
    )
    try:
        expected = reference.tokenize(PROMPT.encode())
    finally:
        reference.close()
    with _load(tiny_model("qwen3")) as llm:
        assert llm.tokenize(PROMPT.encode()) == expected


def test_tied_output_has_no_output_tensor_and_runs(
    tiny_model: ModelWriter, read_gguf: Callable[[Path], gguf.GGUFReader]
) -> None:
    path = tiny_model("llama", tied_output=True)
    assert "output.weight" not in _tensor_types(read_gguf(path))
    _check_runs(path)


def test_head_dim_wider_than_embd_over_heads_runs(
    tiny_model: ModelWriter, read_gguf: Callable[[Path], gguf.GGUFReader]
) -> None:
    # Like Qwen3: n_head * head_dim (4 * 32) != n_embd (64).
    path = tiny_model("qwen3", head_dim=32)
    reader = read_gguf(path)
    assert _field(reader, "qwen3.attention.key_length") == 32
    q = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    assert list(q.shape) == [64, 128]
    _check_runs(path)


# ---------------------------------------------------------------- what the file holds


@pytest.mark.parametrize(("arch", "quant"), CASES, ids=CASE_IDS)
def test_metadata_reads_back(
    tiny_model: ModelWriter,
    read_gguf: Callable[[Path], gguf.GGUFReader],
    default_tokenizer: dict[str, tuple],
    arch: str,
    quant: str,
) -> None:
    reader = read_gguf(tiny_model(arch, quant))
    assert _field(reader, "general.architecture") == arch
    assert _field(reader, "general.name") == SyntheticSpec(arch).model_name
    assert _field(reader, "general.file_type") == gguf.LlamaFileType[f"MOSTLY_{quant}"]
    assert _field(reader, f"{arch}.block_count") == 2
    assert _field(reader, f"{arch}.embedding_length") == 64
    assert _field(reader, f"{arch}.vocab_size") == N_VOCAB
    if arch == "qwen3moe":
        assert _field(reader, "qwen3moe.expert_count") == 4
        assert _field(reader, "qwen3moe.expert_used_count") == 2
        assert _field(reader, "qwen3moe.expert_feed_forward_length") == 64
    if arch == "gemma3":
        assert _field(reader, "gemma3.attention.sliding_window") == 512
    tokenizer = {k: f for k, f in reader.fields.items() if k.startswith("tokenizer.")}
    assert set(tokenizer) == set(default_tokenizer)
    for key, (types, contents) in default_tokenizer.items():
        assert tokenizer[key].types == types, key
        assert tokenizer[key].contents() == contents, key
    assert len(_field(reader, "tokenizer.ggml.tokens")) == N_VOCAB


LAYER_TENSORS = {
    "llama": ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm"]
    + ["ffn_gate", "ffn_up", "ffn_down"],
    "qwen3": ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm"]
    + ["attn_k_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"],
    "qwen3moe": ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm"]
    + ["attn_k_norm", "ffn_norm", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"],
    "gemma3": ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm"]
    + ["attn_k_norm", "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]
    + ["post_ffw_norm"],
}


@pytest.mark.parametrize(("arch", "quant"), CASES, ids=CASE_IDS)
def test_tensors_read_back(
    tiny_model: ModelWriter,
    read_gguf: Callable[[Path], gguf.GGUFReader],
    arch: str,
    quant: str,
) -> None:
    reader = read_gguf(tiny_model(arch, quant))
    types = _tensor_types(reader)
    expected = {"token_embd.weight", "output_norm.weight"}
    expected |= set() if arch == "gemma3" else {"output.weight"}  # gemma3 always ties
    expected |= {f"blk.{i}.{t}.weight" for i in range(2) for t in LAYER_TENSORS[arch]}
    assert set(types) == expected
    for tensor in reader.tensors:
        if len(tensor.shape) == 1 or tensor.name.endswith("ffn_gate_inp.weight"):
            assert types[tensor.name] == "F32", tensor.name
        else:
            assert types[tensor.name] == quant, tensor.name
    shapes = {t.name: list(t.shape) for t in reader.tensors}  # GGUF order: fastest dim first
    assert shapes["token_embd.weight"] == [64, N_VOCAB]
    if arch == "qwen3moe":
        assert shapes["blk.0.ffn_gate_inp.weight"] == [64, 4]
        assert shapes["blk.0.ffn_gate_exps.weight"] == [64, 64, 4]
        assert shapes["blk.0.ffn_down_exps.weight"] == [64, 64, 4]
    else:
        assert shapes["blk.1.ffn_down.weight"] == [128, 64]
        assert shapes["blk.1.ffn_up.weight"] == [64, 128]


def test_seed_decides_the_weights(tmp_path: Path) -> None:
    def write(name: str, seed: int) -> bytes:
        spec = SyntheticSpec("llama", n_layer=1, seed=seed)
        return write_synthetic_model(tmp_path / name, spec, "Q8_0").read_bytes()

    first, again, other = write("a.gguf", 1), write("b.gguf", 1), write("c.gguf", 2)
    assert first == again
    assert len(first) == len(other) and first != other


# ---------------------------------------------------------------- quantize_model


def test_quantize_f16_to_q4_k_m_loads_and_decodes(tiny_model: ModelWriter, tmp_path: Path) -> None:
    src = tiny_model("llama", "F16")
    dst = quantize_model(src, tmp_path / "llama-q4km.gguf", "Q4_K_M")
    assert dst == tmp_path / "llama-q4km.gguf"
    assert not dst.with_suffix(".gguf.part").exists()
    assert dst.stat().st_size < src.stat().st_size
    with _load(dst) as llm:
        assert llm.metadata["general.file_type"] == str(int(gguf.LlamaFileType.MOSTLY_Q4_K_M))
    _check_runs(dst)


@pytest.mark.parametrize("quant", ["Q4_K_X", "q4_k_m", "", "GUESSED"])
def test_quantize_rejects_unknown_names(
    tiny_model: ModelWriter, tmp_path: Path, quant: str
) -> None:
    with pytest.raises(ValueError, match="unknown llama.cpp quantization type"):
        quantize_model(tiny_model("llama"), tmp_path / "out.gguf", quant)
    assert list(tmp_path.iterdir()) == []


def test_quantize_failure_raises_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="failed"):
        quantize_model(tmp_path / "missing.gguf", tmp_path / "out.gguf", "Q8_0")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- bad input, failures


def test_public_constants() -> None:
    assert set(SUPPORTED_ARCHITECTURES) == {"llama", "qwen3", "qwen3moe", "gemma3"}
    assert DIRECT_QUANTS == ("F32", "F16", "Q8_0", "Q4_0", "Q4_1")


def test_unknown_architecture_is_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown architecture 'mamba'"):
        write_synthetic_model(tmp_path / "m.gguf", SyntheticSpec("mamba"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("quant", ["Q4_K_M", "BF16", "f16"])
def test_unknown_direct_quant_is_value_error(tmp_path: Path, quant: str) -> None:
    with pytest.raises(ValueError, match="cannot be written directly") as info:
        write_synthetic_model(tmp_path / "m.gguf", SyntheticSpec("llama"), quant)
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_rows_not_divisible_by_block_is_value_error(tmp_path: Path) -> None:
    spec = SyntheticSpec("llama", n_embd=48, n_head=4, n_head_kv=2)  # 48 % 32 != 0
    with pytest.raises(ValueError, match="not a multiple of Q4_0 block size 32"):
        write_synthetic_model(tmp_path / "m.gguf", spec, "Q4_0")
    assert list(tmp_path.iterdir()) == []


def _fail_on_third_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    original = gguf.GGUFWriter.write_tensor_data
    calls = itertools.count()

    def flaky(self: gguf.GGUFWriter, tensor: object, *args: object, **kwargs: object) -> None:
        if next(calls) == 2:
            raise OSError("No space left on device")
        original(self, tensor, *args, **kwargs)

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensor_data", flaky)


def test_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fail_on_third_tensor(monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        write_synthetic_model(tmp_path / "m.gguf", SyntheticSpec("llama"))
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_existing_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "m.gguf"
    target.write_bytes(b"previous model")
    _fail_on_third_tensor(monkeypatch)
    with pytest.raises(OSError):
        write_synthetic_model(target, SyntheticSpec("llama"))
    assert target.read_bytes() == b"previous model"
    assert list(tmp_path.iterdir()) == [target]


# ---------------------------------------------------------------- large shapes


def _q4_0_bytes(*shape: int) -> int:
    n = int(np.prod(shape))
    return n // 32 * 18


def _padded(nbytes: int) -> int:
    return -(-nbytes // gguf.GGUF_DEFAULT_ALIGNMENT) * gguf.GGUF_DEFAULT_ALIGNMENT


@pytest.mark.slow  # ~5 s when it is the first test to read the tokenizer
def test_large_shape_streams_quickly_in_little_memory(
    tiny_model: ModelWriter, tmp_path: Path, read_gguf: Callable[[Path], gguf.GGUFReader]
) -> None:
    tiny_model("llama")  # the first write reads (and caches) the default model's tokenizer
    d, ff, kv = 1024, 4096, 256  # 8 heads of 128, 2 kv heads
    spec = SyntheticSpec("llama", n_layer=2, n_embd=d, n_head=8, n_head_kv=2, n_ff=ff)
    layer = [(d, d), (kv, d), (kv, d), (d, d), (ff, d), (ff, d), (d, ff)]
    matrices = [(N_VOCAB, d), (N_VOCAB, d)] + layer * 2
    expected = sum(_padded(_q4_0_bytes(*s)) for s in matrices) + 5 * _padded(4 * d)

    tracemalloc.start()
    started = time.monotonic()
    try:
        path = write_synthetic_model(tmp_path / "big.gguf", spec, "Q4_0")
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    size = path.stat().st_size
    assert size > 70 * 2**20
    assert elapsed < 10, f"took {elapsed:.1f} s; is every value being drawn?"
    assert peak < size / 3, f"peak Python memory {peak / 2**20:.0f} MiB; not streaming?"
    reader = read_gguf(path)
    assert reader.data_offset < 4 * 2**20  # header + tokenizer
    assert size == reader.data_offset + expected
    assert {t.tensor_type.name for t in reader.tensors if len(t.shape) > 1} == {"Q4_0"}
