"""Readable model names from real-world GGUF file names (as published on Hugging Face)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.model.default_model import default_model_path
from engine.model.inventory import read_inventory
from engine.model.model_naming import quant_in_name, readable_model_name, split_parts

NAMES = [
    # the embedded default model
    ("SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2 135M Instruct · Q4_1"),
    # bartowski
    ("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", "Meta Llama 3.1 8B Instruct · Q4_K_M"),
    ("Llama-3.2-1B-Instruct-IQ4_XS.gguf", "Llama 3.2 1B Instruct · IQ4_XS"),
    ("Meta-Llama-3.1-8B-Instruct-Q4_0_4_4.gguf", "Meta Llama 3.1 8B Instruct · Q4_0_4_4"),
    ("Qwen2.5-Coder-32B-Instruct-Q6_K_L.gguf", "Qwen2.5 Coder 32B Instruct · Q6_K_L"),
    ("Mistral-Nemo-Instruct-2407-Q5_K_S.gguf", "Mistral Nemo Instruct 2407 · Q5_K_S"),
    ("gemma-2-9b-it-Q4_K_M.gguf", "Gemma 2 9B IT · Q4_K_M"),
    ("Llama-3.3-70B-Instruct-IQ2_XXS.gguf", "Llama 3.3 70B Instruct · IQ2_XXS"),
    ("google_gemma-3-12b-it-Q4_K_M.gguf", "Gemma 3 12B IT · Q4_K_M"),
    ("Qwen_Qwen3-8B-Q4_K_M.gguf", "Qwen3 8B · Q4_K_M"),
    (
        "mistralai_Mistral-Small-3.2-24B-Instruct-2506-Q4_K_M.gguf",
        "Mistral Small 3.2 24B Instruct 2506 · Q4_K_M",
    ),
    (
        "deepseek-ai_DeepSeek-R1-Distill-Qwen-7B-Q6_K_L.gguf",
        "DeepSeek R1 Distill Qwen 7B · Q6_K_L",
    ),
    ("ibm-granite_granite-3.3-8b-instruct-Q4_K_M.gguf", "Granite 3.3 8B Instruct · Q4_K_M"),
    ("Phi-3.5-mini-instruct-Q4_K_M.gguf", "Phi 3.5 Mini Instruct · Q4_K_M"),
    ("EXAONE-3.5-7.8B-Instruct-Q4_K_M.gguf", "EXAONE 3.5 7.8B Instruct · Q4_K_M"),
    (
        "Llama-3.3-70B-Instruct-Q8_0-00001-of-00002.gguf",
        "Llama 3.3 70B Instruct · Q8_0",
    ),
    # unsloth
    ("gemma-3-27b-it-UD-Q4_K_XL.gguf", "Gemma 3 27B IT · UD-Q4_K_XL"),
    ("Qwen3-30B-A3B-UD-Q4_K_XL.gguf", "Qwen3 30B-A3B · UD-Q4_K_XL"),
    (
        "Qwen3-235B-A22B-Instruct-2507-UD-Q2_K_XL-00001-of-00002.gguf",
        "Qwen3 235B-A22B Instruct 2507 · UD-Q2_K_XL",
    ),
    ("DeepSeek-R1-UD-IQ1_S-00001-of-00003.gguf", "DeepSeek R1 · UD-IQ1_S"),
    ("gemma-3n-E4B-it-Q4_K_M.gguf", "Gemma 3n E4B IT · Q4_K_M"),
    (
        "Llama-4-Scout-17B-16E-Instruct-UD-Q4_K_XL.gguf",
        "Llama 4 Scout 17B 16E Instruct · UD-Q4_K_XL",
    ),
    ("Qwen3-0.6B-BF16.gguf", "Qwen3 0.6B · BF16"),
    ("gpt-oss-20b-F16.gguf", "gpt-oss 20B · F16"),
    ("Qwen3-4B-Instruct-2507-UD-Q8_K_XL.gguf", "Qwen3 4B Instruct 2507 · UD-Q8_K_XL"),
    # lmstudio-community
    ("Meta-Llama-3-8B-Instruct-Q8_0.gguf", "Meta Llama 3 8B Instruct · Q8_0"),
    ("Qwen2.5-7B-Instruct-Q4_K_M.gguf", "Qwen2.5 7B Instruct · Q4_K_M"),
    ("DeepSeek-R1-0528-Qwen3-8B-Q4_K_M.gguf", "DeepSeek R1 0528 Qwen3 8B · Q4_K_M"),
    ("Qwen2.5-VL-7B-Instruct-Q4_K_M.gguf", "Qwen2.5 VL 7B Instruct · Q4_K_M"),
    # Qwen, Google, ggml-org and other publishers' own files (often all lowercase)
    ("qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf", "Qwen2.5 7B Instruct · Q4_K_M"),
    ("qwen2.5-coder-1.5b-instruct-q8_0.gguf", "Qwen2.5 Coder 1.5B Instruct · Q8_0"),
    ("qwen2.5-0.5b-instruct-fp16.gguf", "Qwen2.5 0.5B Instruct · F16"),
    ("qwq-32b-q4_k_m.gguf", "QwQ 32B · Q4_K_M"),
    ("llama-3.2-3b-instruct-q8_0.gguf", "Llama 3.2 3B Instruct · Q8_0"),
    ("gemma-3-1b-it-qat-q4_0.gguf", "Gemma 3 1B IT QAT · Q4_0"),
    ("gpt-oss-120b-mxfp4-00001-of-00003.gguf", "gpt-oss 120B · MXFP4"),
    ("SmolVLM-500M-Instruct-Q8_0.gguf", "SmolVLM 500M Instruct · Q8_0"),
    ("smollm2-1.7b-instruct-q4_k_m.gguf", "SmolLM2 1.7B Instruct · Q4_K_M"),
    ("olmoe-1b-7b-0924-instruct-q4_k_m.gguf", "OLMoE 1B 7B 0924 Instruct · Q4_K_M"),
    ("Llama-3-8B-Instruct.i1-Q4_K_M.gguf", "Llama 3 8B Instruct · Q4_K_M"),  # mradermacher
    ("bitnet_b1_58-large-TQ2_0.gguf", "Bitnet B1 58 Large · TQ2_0"),
    # TheBloke: a dot before the quant, lowercase names, versions
    ("llama-2-7b-chat.Q4_K_M.gguf", "Llama 2 7B Chat · Q4_K_M"),
    ("mistral-7b-instruct-v0.2.Q5_K_M.gguf", "Mistral 7B Instruct v0.2 · Q5_K_M"),
    ("mixtral-8x7b-instruct-v0.1.Q4_K_M.gguf", "Mixtral 8x7B Instruct v0.1 · Q4_K_M"),
    ("tinyllama-1.1b-chat-v1.0.Q4_K_M.gguf", "TinyLlama 1.1B Chat v1.0 · Q4_K_M"),
    ("codellama-13b-instruct.Q3_K_L.gguf", "CodeLlama 13B Instruct · Q3_K_L"),
    ("zephyr-7b-beta.Q8_0.gguf", "Zephyr 7B Beta · Q8_0"),
    ("openhermes-2.5-mistral-7b.Q2_K.gguf", "OpenHermes 2.5 Mistral 7B · Q2_K"),
    ("open_llama_3b_v2.Q4_0.gguf", "Open Llama 3B v2 · Q4_0"),
    ("phi-2.Q5_0.gguf", "Phi 2 · Q5_0"),
    # no quant in the name: the name alone
    ("Phi-3-mini-4k-instruct-q4.gguf", "Phi 3 Mini 4K Instruct Q4"),
    ("my-finetune.gguf", "My Finetune"),
]


@pytest.mark.parametrize(("file_name", "expected"), NAMES)
def test_published_file_names_read_as_family_size_variant_and_quant(
    file_name: str, expected: str
) -> None:
    assert readable_model_name(Path("/models") / file_name) == expected


@pytest.mark.parametrize(
    ("file_name", "general_name", "expected"),
    [
        ("model.gguf", "Llama 3.1 8B Instruct", "Llama 3.1 8B Instruct"),
        ("model.gguf", "", "model"),
        ("model-q4_k_m.gguf", "Qwen2.5 7B Instruct", "Qwen2.5 7B Instruct · Q4_K_M"),
        ("model-q4_k_m.gguf", "  ", "model-q4_k_m"),
        ("ggml-model-i2_s.gguf", "bitnet_b1_58-2B-4T", "bitnet_b1_58-2B-4T · I2_S"),
        ("ggml-model-f16.gguf", "", "ggml-model-f16"),
        ("Q4_K_M.gguf", "Gemma 3", "Gemma 3 · Q4_K_M"),
        # a name that says something wins over general.name
        ("gemma-3-4b-it-Q4_K_M.gguf", "Gemma 3 4b It", "Gemma 3 4B IT · Q4_K_M"),
    ],
)
def test_a_file_name_that_names_no_model_falls_back_to_general_name_then_the_stem(
    file_name: str, general_name: str, expected: str
) -> None:
    assert readable_model_name(file_name, general_name) == expected


@pytest.mark.parametrize(
    ("file_name", "expected"),
    [
        ("mmproj-F16.gguf", "Vision projector · F16"),  # unsloth's repos
        ("mmproj-model-f16.gguf", "Vision projector · F16"),  # llava's
        (
            "mmproj-google_gemma-3-27b-it-bf16.gguf",
            "Gemma 3 27B IT vision projector · BF16",
        ),  # bartowski's
        (
            "mmproj-Qwen2.5-VL-7B-Instruct-f16.gguf",
            "Qwen2.5 VL 7B Instruct vision projector · F16",
        ),
        ("SmolVLM-500M-Instruct-mmproj-Q8_0.gguf", "SmolVLM 500M Instruct vision projector · Q8_0"),
    ],
)
def test_a_projector_is_named_as_one_not_as_a_model(file_name: str, expected: str) -> None:
    assert readable_model_name(file_name) == expected


@pytest.mark.parametrize(
    ("file_name", "quant"),
    [
        ("x-q4_k_m.gguf", "Q4_K_M"),
        ("x-Q4_K.gguf", "Q4_K"),
        ("x-ud-iq3_xxs.gguf", "UD-IQ3_XXS"),
        ("x-IQ4_NL.gguf", "IQ4_NL"),
        ("x-IQ1_M.gguf", "IQ1_M"),
        ("x-Q3_K_XL.gguf", "Q3_K_XL"),
        ("x-Q5_1.gguf", "Q5_1"),
        ("x-TQ1_0.gguf", "TQ1_0"),
        ("x-f32.gguf", "F32"),
        ("x-fp32.gguf", "F32"),
        ("x-bf16.gguf", "BF16"),
        ("x-MXFP4_MOE.gguf", "MXFP4_MOE"),
        ("x-v0.1.Q6_K.gguf", "Q6_K"),
        ("x-Q8_0-00003-of-00004.gguf", "Q8_0"),
        ("Q4_K_M-model-Q8_0.gguf", "Q8_0"),  # the last one is the file's
        ("x-q4.gguf", None),
        ("x-Q9_0.gguf", None),
        ("xQ4_K_M.gguf", None),  # not a word of its own
        ("x-BF16x.gguf", None),
    ],
)
def test_the_quant_is_read_only_from_known_gguf_type_names(
    file_name: str, quant: str | None
) -> None:
    assert quant_in_name(file_name) == quant


def test_split_parts_lists_every_part_and_a_single_file_is_its_own_part() -> None:
    part = Path("/m/Llama-3.3-70B-Instruct-Q8_0-00002-of-00003.gguf")
    assert split_parts(part) == [
        Path(f"/m/Llama-3.3-70B-Instruct-Q8_0-0000{index}-of-00003.gguf") for index in (1, 2, 3)
    ]
    assert split_parts("/m/gemma-3-1b-it-Q4_K_M.gguf") == [Path("/m/gemma-3-1b-it-Q4_K_M.gguf")]


def test_the_default_model_reads_better_than_its_general_name() -> None:
    path = default_model_path()
    general_name = read_inventory(path).name
    assert general_name == "Smollm2 135M 8k Lc100K Mix1 Ep2"  # what the window used to show
    assert readable_model_name(path, general_name) == "SmolLM2 135M Instruct · Q4_1"
