"""VLMOpt planning: projector facts, llama.cpp's image geometry and buffers, the choices, the CLI.

The language model is a shape-true Qwen2.5-VL-7B-class text model and the
projector its 1.35 GB vision tower, both written shape-only (no weights), on
the recorded 2-core CPU profile and the described laptop and desktop GPUs.
The reference figures (token counts, clip compute buffer sizes) were read from
llama.cpp's own mtmd/clip on this build, with projectors written by
`write_shape_only_projector`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import gguf
import pytest
from cli_run import CliRun

from engine.errors import ModelFileError
from engine.machine.described_machines import load_described
from engine.machine.profile import Profile
from engine.model.inventory import read_inventory
from engine.model.synthetic import write_shape_only_model
from engine.model.synthetic_specs import QWEN25_VL_7B_TEXT
from engine.planning.plan import PlanRequest
from engine.planning.planner import make_plan
from engine.planning.vram_account import margin_bytes
from engine.vision.geometry import image_geometry
from engine.vision.memory import vision_memory
from engine.vision.options import NO_TOKEN_LIMIT
from engine.vision.plan import plan_vision
from engine.vision.plan_choice import ResidentSet
from engine.vision.projector import QWEN25_VL_7B, ProjectorFacts, Resolution, projector_facts
from tests.shape_only_projector import write_shape_only_projector

GIB, MIB = 1 << 30, 1 << 20
GEMMA3_LIKE = ProjectorFacts(
    projector_type="gemma3", width=1152, n_layer=27, n_head=16, ffn=4304, patch_size=14,
    merge=4, image_size=896, out_dim=3584, weights_bytes=851_000_000,
)  # fmt: skip
IMAGE_1440P = (2560, 1440)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("vlm")
    return {
        "model": write_shape_only_model(folder / "qwen25vl-7b.gguf", QWEN25_VL_7B_TEXT, "Q4_K"),
        "mmproj": write_shape_only_projector(folder / "mmproj.gguf", QWEN25_VL_7B),
    }


@pytest.fixture(scope="module")
def inventory(files):
    return read_inventory(files["model"])


@pytest.fixture(scope="module")
def laptop() -> Profile:
    return load_described("laptop-8gb")


def planned(inventory, profile: Profile, budget: int, image=IMAGE_1440P, facts=QWEN25_VL_7B,
            **kwargs):  # fmt: skip
    plan = make_plan(inventory, profile, PlanRequest(budget, n_ctx=8192))
    return plan_vision(plan, inventory, facts, profile, image_size=image, **kwargs)


# --- projector facts ---


def test_a_shape_only_projector_reads_back_as_the_described_shape(files) -> None:
    facts = projector_facts(files["mmproj"])
    assert facts == QWEN25_VL_7B
    # llama.cpp's clip reported "model size: 1291.40 MiB" loading this file.
    assert round(facts.weights_bytes / MIB, 2) == 1291.40
    assert facts.resolution is Resolution.DYNAMIC and facts.head_dim == 80
    assert files["mmproj"].stat().st_blocks * 512 < 1 * MIB  # a hole, not 1.35 GB of zeros


def test_a_gemma3_projector_has_a_fixed_size_and_the_default_merge(tmp_path: Path) -> None:
    path = tmp_path / "mmproj-gemma3.gguf"
    writer = gguf.GGUFWriter(path, "clip")
    writer.add_string("clip.projector_type", "gemma3")
    writer.add_bool("clip.has_vision_encoder", True)
    for key, value in (("embedding_length", 64), ("block_count", 2), ("attention.head_count", 4),
                       ("feed_forward_length", 128), ("patch_size", 14), ("image_size", 896),
                       ("projection_dim", 96)):  # fmt: skip
        writer.add_uint32(f"clip.vision.{key}", value)
    writer.add_tensor("v.blk.0.attn_q.weight", gguf.np.zeros((64, 64), dtype=gguf.np.float16))
    writer.add_tensor("mm.input_projection.weight", gguf.np.zeros((96, 64), dtype=gguf.np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    facts = projector_facts(path)
    assert (facts.projector_type, facts.merge, facts.out_dim) == ("gemma3", 4, 96)
    assert facts.weights_bytes == 64 * 64 * 2 + 96 * 64 * 4
    geometry = image_geometry(facts, 4000, 3000)
    assert (geometry.resolution, geometry.n_tokens, geometry.patches_per_pass) == (
        "896x896", 256, 4096,
    )  # fmt: skip


def test_a_language_model_is_not_a_projector(files) -> None:
    with pytest.raises(ModelFileError, match="not a vision projector"):
        projector_facts(files["model"])


# --- what llama.cpp does with an image ---


@pytest.mark.parametrize(
    ("size", "max_tokens", "tokens"),
    [
        ((644, 644), NO_TOKEN_LIMIT, 529), ((1288, 1288), NO_TOKEN_LIMIT, 2116),
        ((1792, 1792), NO_TOKEN_LIMIT, 4096), ((640, 360), NO_TOKEN_LIMIT, 299),
        ((1280, 720), NO_TOKEN_LIMIT, 1196), ((1920, 1080), NO_TOKEN_LIMIT, 2691),
        ((2560, 1440), NO_TOKEN_LIMIT, 4080), ((3000, 700), NO_TOKEN_LIMIT, 2675),
        ((100, 100), NO_TOKEN_LIMIT, 16), ((2560, 1440), 1899, 1856), ((1792, 1792), 1899, 1849),
        ((3000, 700), 500, 460),
    ],
)  # fmt: skip
def test_image_tokens_are_what_mtmd_made_of_the_image(size, max_tokens, tokens) -> None:
    """Token counts mtmd_tokenize gave for these images with this projector (float32 rounding)."""
    geometry = image_geometry(QWEN25_VL_7B, *size, max_tokens=max_tokens)
    assert geometry.n_tokens == tokens
    assert geometry.patches_per_pass == 4 * tokens
    assert geometry.width % 28 == 0 and geometry.height % 28 == 0


@pytest.mark.parametrize(
    ("patches", "without_mib", "with_mib"),
    [(2116, 346.81, 144.22), (8464, 4871.57, 704.79), (16384, 17845.03, 1893.03)],
)
def test_the_compute_buffer_matches_what_clip_reserved(patches, without_mib, with_mib) -> None:
    """clip's 'CPU compute buffer size' for the 32-layer projector, flash attention off / on."""
    without = vision_memory(QWEN25_VL_7B, patches, flash_attention=False)
    with_flash = vision_memory(QWEN25_VL_7B, patches, flash_attention=True)
    assert without.compute_bytes / MIB == pytest.approx(without_mib, rel=0.002)
    assert 0.995 * with_mib <= with_flash.compute_bytes / MIB <= 1.08 * with_mib
    assert without.attention_scores_bytes == 4 * 16 * patches**2
    assert with_flash.attention_scores_bytes == 0 and with_flash.mask_bytes > 0


@pytest.mark.parametrize("patches", [16, 1000, 4096, 20000])
def test_flash_attention_never_needs_more(patches: int) -> None:
    for facts in (QWEN25_VL_7B, GEMMA3_LIKE):
        with_flash = vision_memory(facts, patches, True).total_bytes
        assert with_flash <= vision_memory(facts, patches, False).total_bytes


# --- the choices ---


def test_without_a_gpu_everything_runs_on_the_cpu(inventory, recorded_profile) -> None:
    profile = recorded_profile
    vision = planned(inventory, profile, 0)
    assert not vision.options.encoder_on_gpu and not vision.options.free_after_encode
    assert not vision.options.language_steps_aside
    assert vision.peak_bytes == vision.peak_without_bytes == 0 and vision.saving is None
    assert "no GPU" in vision.options.reason and vision.resident_set is ResidentSet.KEPT
    assert vision.n_tokens == 4080  # no budget to fit: the image as the projector takes it


def test_a_big_budget_keeps_the_encoder_on_the_gpu_beside_the_model(inventory) -> None:
    desktop = load_described("rtx5090-desktop")
    vision = planned(inventory, desktop, 24 * GIB)
    options = vision.options
    assert options.encoder_on_gpu and options.flash_attention
    assert not options.free_after_encode and not options.language_steps_aside
    assert options.image_max_tokens == NO_TOKEN_LIMIT and options.max_side_px == 0
    assert vision.resident_set is ResidentSet.KEPT and vision.n_tokens == 4080
    assert vision.language_plan.vram.weights_bytes > 3 * GIB  # the whole model stays resident
    assert vision.peak_bytes + margin_bytes(24 * GIB) <= 24 * GIB


def test_a_tight_budget_frees_the_encoder_and_downscales_to_fit(inventory, laptop) -> None:
    vision = planned(inventory, laptop, 2 * GIB)
    options = vision.options
    assert options.encoder_on_gpu and options.free_after_encode
    assert 0 < options.image_max_tokens < 4080 and vision.n_tokens <= options.image_max_tokens
    assert options.max_side_px == vision.image.long_side < 2560
    assert vision.full_image.n_tokens == 4080 and vision.n_tokens < 4080
    assert vision.peak_bytes + margin_bytes(2 * GIB) <= 2 * GIB
    # plain llama.cpp needs about 20 GB for this image (the paper's figure): ~10x more
    assert vision.peak_without_bytes > 18 * GIB and vision.saving > 9


def test_a_middle_budget_takes_turns_without_downscaling(inventory, laptop) -> None:
    vision = planned(inventory, laptop, 4 * GIB)
    assert vision.options.free_after_encode and vision.n_tokens == 4080
    assert vision.options.max_side_px == 0
    assert vision.peak_bytes == max(vision.encode_bytes, vision.decode_bytes)
    assert vision.peak_bytes < vision.encode_bytes + vision.decode_bytes


@pytest.mark.parametrize("machine", ["laptop-8gb", "desktop-16gb"])
@pytest.mark.parametrize("budget_gib", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("side", [640, 1280, 1920, 2560])
def test_vlmopt_never_needs_more_than_plain_llama_cpp_and_fits_the_budget(
    inventory, machine: str, budget_gib: int, side: int
) -> None:
    vision = planned(inventory, load_described(machine), budget_gib * GIB, (side, side * 9 // 16))
    assert vision.peak_bytes <= vision.peak_without_bytes
    assert vision.peak_bytes + min(margin_bytes(budget_gib * GIB), 128 * MIB) <= budget_gib * GIB
    assert vision.n_tokens <= vision.full_image.n_tokens
    if vision.options.language_steps_aside:
        assert vision.options.free_after_encode and vision.resident_set is ResidentSet.RESTORED


def test_the_resident_set_decision_follows_the_cost_of_restoring_it(inventory, laptop) -> None:
    assert laptop.gpu is not None
    # a PCIe 5 x16 link: restoring is cheap. (At 500 GB/s streaming through staging slots
    # decodes as fast as a resident set, so a smaller set would cost nothing to keep.)
    fast = replace(laptop, gpu=replace(laptop.gpu, h2d_pinned_gbps=50.0))
    slow = replace(laptop, gpu=replace(laptop.gpu, h2d_pinned_gbps=0.02))
    cheap = planned(inventory, fast, 4 * GIB, (1920, 1080))
    dear = planned(inventory, slow, 4 * GIB, (1920, 1080))
    assert cheap.resident_set is ResidentSet.RESTORED and cheap.options.language_steps_aside
    assert cheap.restore_s < cheap.shrink_s
    assert dear.resident_set is ResidentSet.SHRUNK and not dear.options.language_steps_aside
    assert dear.shrink_s < dear.restore_s and dear.options.free_after_encode
    assert len(dear.language_plan.resident) < len(cheap.language_plan.resident)
    assert dear.peak_bytes == dear.encode_bytes  # encoder beside the smaller set
    assert dear.peak_bytes + margin_bytes(dear.language_plan.request.vram_budget_bytes) <= 4 * GIB
    assert "shrunk" in dear.reasons[-1] and "restored" in cheap.reasons[-1]


def test_a_runtime_that_cannot_step_aside_never_gets_asked_to(inventory, laptop) -> None:
    vision = planned(inventory, laptop, 4 * GIB, can_step_aside=False)
    assert not vision.options.language_steps_aside
    assert vision.resident_set is not ResidentSet.RESTORED


def test_a_fixed_size_encoder_is_never_token_limited(inventory, laptop) -> None:
    vision = planned(inventory, laptop, 2 * GIB, (4000, 3000), GEMMA3_LIKE)
    assert vision.n_tokens == 256 and vision.effective_resolution == "896x896"
    assert vision.options.image_max_tokens == NO_TOKEN_LIMIT and vision.options.max_side_px == 0
    assert vision.options.encoder_on_gpu


def test_a_projector_of_another_width_is_refused(files, laptop) -> None:
    other = read_inventory(files["model"])
    facts = replace(QWEN25_VL_7B, out_dim=2048)
    plan = make_plan(other, laptop, PlanRequest(2 * GIB))
    with pytest.raises(ValueError, match="another model"):
        plan_vision(plan, other, facts, laptop)


# --- the plan command ---


def test_the_plan_command_prints_the_vlmopt_choices(files, shardchat: CliRun) -> None:
    common = ("plan", "--vram", "2GiB", "--hardware", "laptop-8gb", "--ctx", "8192",
              "--model", str(files["model"]))  # fmt: skip
    done = shardchat(*common, "--mmproj", str(files["mmproj"]), "--image-px", "2560")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    vlmopt = next(line for line in lines if line.startswith("VLMOpt"))
    assert "vision encoder on the GPU, flash attention, freed before decoding" in vlmopt
    assert "images downscaled to" in vlmopt
    assert any(line.startswith("image     2560x1440 -> ") for line in lines)
    peak = next(line for line in lines if line.startswith("peak VRAM"))
    assert "with VLMOpt" in peak and "x less" in peak
    plain = shardchat(*common)
    assert plain.returncode == 0 and "VLMOpt" not in plain.stdout
    assert done.stdout.startswith(plain.stdout.rstrip("\n"))  # the plan itself is unchanged
    mismatch = shardchat("plan", "--vram", "1GiB", "--hardware", "laptop-8gb",
                         "--mmproj", str(files["mmproj"]))  # fmt: skip
    assert mismatch.returncode == 2 and "another model" in mismatch.stderr
