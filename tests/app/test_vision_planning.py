"""VLMOpt for a load: the planner's choices reach the runtime's options and the load itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli.commands.plan_command import load_profile_for_planning
from app.model_lifecycle.load_planning import LoadRequest
from app.model_lifecycle.vision_planning import planned_vision
from engine.errors import BadInputError
from engine.model.inventory import read_inventory
from engine.planning.plan import PlanRequest
from engine.planning.planner import make_plan
from engine.vision.projector import QWEN25_VL_7B
from tests.shape_only_projector import write_shape_only_projector
from tests.synthetic_vision import write_synthetic_vlm


@pytest.fixture(scope="module")
def vlm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_synthetic_vlm(tmp_path_factory.mktemp("vlm"))


def test_without_a_profile_the_encoder_runs_on_the_cpu(vlm: tuple[Path, Path]) -> None:
    load = LoadRequest(str(vlm[0]), 1024, None, mmproj_path=str(vlm[1])).planned()
    assert load.vision is not None and load.vision_problem is None
    assert not load.vision.options.encoder_on_gpu
    assert "not profiled" in load.vision.summary


def test_a_cpu_only_profile_keeps_the_encoder_on_the_cpu(
    vlm: tuple[Path, Path], recorded_profile_file
) -> None:
    profile = load_profile_for_planning(str(recorded_profile_file))
    load = LoadRequest(str(vlm[0]), 1024, profile, mmproj_path=str(vlm[1])).planned()
    assert load.plan is not None and load.vision is not None
    assert not load.vision.options.encoder_on_gpu and "images up to" in load.vision.summary


def gpu_plan(model: Path):
    """A described 8 GB laptop's plan (this machine's build has no GPU to load it on)."""
    profile = load_profile_for_planning("laptop-8gb")
    plan = make_plan(read_inventory(model), profile, PlanRequest(6 << 30, n_ctx=1024))
    return plan, profile


def test_a_gpu_with_room_gets_the_small_encoder(vlm: tuple[Path, Path]) -> None:
    plan, profile = gpu_plan(vlm[0])
    choice = planned_vision(read_inventory(vlm[0]), str(vlm[1]), plan, profile, 6 << 30)
    assert choice.options.encoder_on_gpu and choice.language_plan is None
    assert not choice.options.language_steps_aside  # the runtime cannot do that yet
    assert "vision encoder on the GPU" in choice.summary


def test_a_projector_for_another_model_is_a_problem_not_a_failed_load(
    vlm: tuple[Path, Path], tmp_path: Path
) -> None:
    wrong = write_shape_only_projector(tmp_path / "mmproj-qwen.gguf", QWEN25_VL_7B)
    plan, profile = gpu_plan(vlm[0])
    with pytest.raises(BadInputError, match="another model"):
        planned_vision(read_inventory(vlm[0]), str(wrong), plan, profile, 6 << 30)
    not_a_projector = LoadRequest(str(vlm[0]), 1024, None, mmproj_path=str(vlm[0])).planned()
    assert not_a_projector.vision is None and not_a_projector.vision_problem
    assert not_a_projector.params.model_path == str(vlm[0])  # the text model still loads
