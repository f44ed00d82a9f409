"""A repository's files as models: quants, split parts together, projectors paired."""

from __future__ import annotations

from app.hub.gguf_files import RemoteFile, choose_model, group_models


def _files(*paths: str) -> list[RemoteFile]:
    return [RemoteFile(p, 1000 * (i + 1), f"{i:064x}") for i, p in enumerate(paths)]


def test_one_model_per_quant_smallest_first_and_other_files_ignored() -> None:
    models = group_models(
        _files("README.md", "Qwen3-8B-Q8_0.gguf", "Qwen3-8B-Q4_K_M.gguf", "config.json")
    )
    # sizes follow the listing order above: Q8_0 got 2000, Q4_K_M 3000 bytes
    assert [m.quant for m in models] == ["Q8_0", "Q4_K_M"]
    assert [m.path for m in models] == ["Qwen3-8B-Q8_0.gguf", "Qwen3-8B-Q4_K_M.gguf"]
    assert all(m.projector is None and not m.is_split for m in models)


def test_split_parts_are_one_model_in_part_order_with_their_sizes_summed() -> None:
    files = _files(
        "Q8_0/big-Q8_0-00002-of-00003.gguf",
        "Q8_0/big-Q8_0-00001-of-00003.gguf",
        "Q8_0/big-Q8_0-00003-of-00003.gguf",
        "big-Q4_0.gguf",
    )
    models = group_models(files)
    split = next(m for m in models if m.is_split)
    assert [p.path for p in split.parts] == [
        "Q8_0/big-Q8_0-00001-of-00003.gguf",
        "Q8_0/big-Q8_0-00002-of-00003.gguf",
        "Q8_0/big-Q8_0-00003-of-00003.gguf",
    ]
    assert split.size == 1000 + 2000 + 3000
    assert split.quant == "Q8_0" and split.missing_parts == 0
    assert split.path == "Q8_0/big-Q8_0-00001-of-00003.gguf"


def test_a_split_model_with_a_part_missing_says_how_many() -> None:
    models = group_models(_files("m-Q8_0-00001-of-00003.gguf", "m-Q8_0-00003-of-00003.gguf"))
    assert len(models) == 1 and models[0].missing_parts == 1


def test_projector_in_the_models_precision_else_f16() -> None:
    models = group_models(
        _files(
            "vis-Q8_0.gguf",
            "vis-Q4_K_M.gguf",
            "mmproj-vis-F16.gguf",
            "mmproj-vis-Q8_0.gguf",
            "mmproj-vis-F32.gguf",
        )
    )
    by_quant = {m.quant: m for m in models}
    assert set(by_quant) == {"Q8_0", "Q4_K_M"}  # projectors are not models
    assert by_quant["Q8_0"].projector is not None
    assert by_quant["Q8_0"].projector.path == "mmproj-vis-Q8_0.gguf"
    assert by_quant["Q4_K_M"].projector is not None
    assert by_quant["Q4_K_M"].projector.path == "mmproj-vis-F16.gguf"
    q8 = by_quant["Q8_0"]
    assert q8.download_size == q8.size + q8.projector.size  # type: ignore[union-attr]


def test_a_lone_projector_of_another_precision_is_still_paired() -> None:
    models = group_models(_files("vis-Q4_0.gguf", "mmproj-model-BF16.gguf"))
    assert models[0].projector is not None
    assert models[0].projector.path == "mmproj-model-BF16.gguf"


def test_choose_model_by_quant_file_name_or_path() -> None:
    models = group_models(
        _files("a/x-Q8_0-00001-of-00002.gguf", "a/x-Q8_0-00002-of-00002.gguf", "x-Q4_0.gguf")
    )
    assert choose_model(models, "q4_0") is not None
    assert choose_model(models, "Q8_0").path == "a/x-Q8_0-00001-of-00002.gguf"  # type: ignore[union-attr]
    assert choose_model(models, "x-Q8_0-00002-of-00002.gguf").quant == "Q8_0"  # type: ignore[union-attr]
    assert choose_model(models, "x-Q4_0.gguf").quant == "Q4_0"  # type: ignore[union-attr]
    assert choose_model(models, "Q6_K") is None
