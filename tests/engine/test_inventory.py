"""The inventory groups every tensor into the sub-layers the planner places, with exact sizes."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import pytest

from engine.errors import ModelFileError
from engine.llama.load_params import LoadParams
from engine.llama.vocabulary import longest_token_bytes
from engine.model.inventory import ModelInventory, SubLayerKind, read_inventory
from engine.runtime.loaded_model import inspect_model, load_model

K = SubLayerKind


def tensor_bytes_in_file(path: Path) -> int:
    return sum(int(t.n_bytes) for t in gguf.GGUFReader(path).tensors)


def test_default_model_inventory_matches_smollm2(default_model_file: Path) -> None:
    inv = read_inventory(default_model_file)
    assert (inv.architecture, inv.n_layer, inv.n_embd) == ("llama", 30, 576)
    assert (inv.n_head, inv.n_head_kv, inv.n_vocab, inv.context_length) == (9, 3, 49152, 8192)
    assert inv.n_params == sum(
        int(t.n_elements) for t in gguf.GGUFReader(default_model_file).tensors
    )
    assert 130e6 < inv.n_params < 140e6
    # 30 layers x 3 kv heads x (64 + 64) dims x 2 bytes
    assert inv.kv_bytes_per_token == 30 * 3 * 128 * 2
    assert inv.kv_cache_bytes(1024) == 1024 * inv.kv_bytes_per_token
    assert inv.tied_output and not inv.is_moe and not inv.is_vision_projector
    assert set(inv.quant_bytes) == {"Q4_1", "Q8_0", "F32"}


def test_every_tensor_byte_lands_in_exactly_one_sublayer(default_model_file: Path) -> None:
    inv = read_inventory(default_model_file)
    assert inv.tensor_bytes == tensor_bytes_in_file(default_model_file)
    assert sum(inv.bytes_by_kind().values()) == inv.tensor_bytes
    names = [n for sub in inv.all_sublayers() for n in sub.tensor_names]
    assert len(names) == len(set(names)) == 272


def test_dense_block_has_attention_and_ffn_only(default_model_file: Path) -> None:
    block = read_inventory(default_model_file).blocks[0]
    assert [s.kind for s in block.sublayers] == [K.ATTENTION, K.DENSE_FFN]
    attention = block.sublayer(K.ATTENTION)
    assert attention is not None
    assert {n.split(".")[2] for n in attention.tensor_names} == {
        "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output"
    }  # fmt: skip


def test_moe_model_splits_router_and_routed_experts(make_synthetic) -> None:
    path = make_synthetic("qwen3moe", "F16")
    inv = read_inventory(path)
    assert inv.is_moe and (inv.expert_count, inv.expert_used_count) == (4, 2)
    block = inv.blocks[0]
    assert [s.kind for s in block.sublayers] == [K.ATTENTION, K.MOE_ROUTER, K.ROUTED_EXPERTS]
    experts = block.sublayer(K.ROUTED_EXPERTS)
    # gate, up and down banks: 4 experts x 64 x 64, F16
    assert experts.n_params == 3 * 4 * 64 * 64
    assert experts.n_bytes == experts.n_params * 2
    assert block.sublayer(K.DENSE_FFN) is None
    assert inv.tensor_bytes == tensor_bytes_in_file(path)


def test_qwen3_attention_includes_qk_norms(make_synthetic) -> None:
    inv = read_inventory(make_synthetic("qwen3", "F16"))
    attention = inv.blocks[0].sublayer(K.ATTENTION)
    roles = {n.split(".")[2] for n in attention.tensor_names}
    assert {"attn_q_norm", "attn_k_norm"} <= roles
    assert not inv.tied_output
    assert inv.bytes_by_kind()[K.OUTPUT_HEAD] > 0


def test_gemma3_sliding_window_caps_kv_cache_on_five_of_six_layers(make_synthetic) -> None:
    inv = read_inventory(make_synthetic("gemma3", "F16", n_layer=6, sliding_window=128))
    windows = [b.sliding_window for b in inv.blocks]
    assert windows == [128, 128, 128, 128, 128, None]
    per_layer = inv.blocks[0].kv_bytes_per_token
    assert inv.kv_cache_bytes(1000) == per_layer * (5 * 128 + 1000)
    assert inv.tied_output
    post_norms = {n.split(".")[2] for s in inv.blocks[0].sublayers for n in s.tensor_names}
    assert {"post_attention_norm", "post_ffw_norm"} <= post_norms


def test_quant_types_are_reported_per_sublayer(make_synthetic) -> None:
    inv = read_inventory(make_synthetic("llama", "Q8_0"))
    ffn = inv.blocks[0].sublayer(K.DENSE_FFN)
    assert ffn.quant_types == ("F32", "Q8_0")
    assert "Q8_0" in inv.quant_bytes


def test_inventory_round_trips_through_json_and_ignores_unknown_keys(make_synthetic) -> None:
    inv = read_inventory(make_synthetic("qwen3moe", "F16"))
    data = json.loads(json.dumps(inv.to_dict(), default=str))
    data["a_key_from_the_future"] = 1
    data["blocks"][0]["another_new_key"] = True
    again = ModelInventory.from_dict(data)
    assert again == inv
    assert again.kv_cache_bytes(777) == inv.kv_cache_bytes(777)


def test_vision_projector_is_recognised_and_refused_as_a_chat_model(
    tmp_path: Path, write_projector
) -> None:
    path = write_projector(tmp_path / "mmproj.gguf")
    inv = read_inventory(path)
    assert inv.is_vision_projector and inv.projector_type == "gemma3"
    assert {s.kind for s in inv.globals} == {K.VISION_ENCODER, K.VISION_PROJECTOR}
    with pytest.raises(ModelFileError, match="vision projector"):
        inspect_model(path)


def test_inventory_notices_a_changed_file(tmp_path: Path, make_synthetic) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(make_synthetic("llama", "F16").read_bytes())
    first = read_inventory(path)
    path.write_bytes(make_synthetic("llama", "Q8_0").read_bytes())
    assert read_inventory(path).quant_bytes != first.quant_bytes


@pytest.mark.parametrize("kept", [4096, -1000])
def test_inventory_refuses_a_cut_file(kept: int, tmp_path: Path, default_model_file: Path) -> None:
    """Cut inside the header (4 KiB kept) or inside the tensor data (1000 bytes short)."""
    whole = default_model_file.read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(whole[:kept])
    with pytest.raises(ModelFileError, match="truncated GGUF") as raised:
        read_inventory(path)
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)


def test_the_longest_token_is_read_from_the_header_as_llama_cpp_counts_it(
    default_model_file: Path, make_synthetic
) -> None:
    """The API server refuses a prompt too long for the context from its byte length and
    this figure; it is read from the header, so llama.cpp is not asked token by token."""
    dragons = "<|" + "🐉" * 60 + "|>"  # 244 bytes in 64 characters: counted in bytes
    synthetic = make_synthetic("llama", "F16", extra_tokens=(dragons,))
    for path, longest in ((default_model_file, None), (synthetic, len(dragons.encode()))):
        model = load_model(LoadParams(str(path), n_ctx=64, n_threads=1))
        try:
            asked = longest_token_bytes(model.handle.vocab)
        finally:
            model.close()
        assert read_inventory(path).longest_token_bytes == asked == (longest or asked) > 0
