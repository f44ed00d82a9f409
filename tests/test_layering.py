"""The architecture rule, checked: import-linter's contracts in pyproject.toml hold here.

The contracts ([tool.importlinter]) say ui > app > engine, engine and app never import Qt,
ui never imports llama_cpp, the engine's packages stay in their layers, and no sibling
packages or modules import each other in a cycle; type-only imports count. `make test` and
`make lint` run `lint-imports`; these tests run it too, and run it on copies of the tree
with one bad import added, to show that each contract would catch the breach.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from importlinter.api import read_configuration

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "app", "ui")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def contract_names() -> dict[str, str]:
    """Each contract's name by its id, as pyproject.toml declares them."""
    contracts = read_configuration(str(ROOT / "pyproject.toml"))["contracts_options"]
    return {contract["id"]: contract["name"] for contract in contracts}


def broken_contracts(root: Path) -> set[str]:
    """The ids of the contracts `lint-imports` finds broken in the tree at `root`; every
    contract must be reported, kept or broken, and the exit status must agree."""
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    verdicts = {}
    for contract_id, name in contract_names().items():
        found = re.search(rf"^{re.escape(name)} (KEPT|BROKEN)\b", done.stdout, re.MULTILINE)
        assert found, f"no verdict for {name!r}:\n{done.stdout}{done.stderr}"
        verdicts[contract_id] = found.group(1)
    broken = {contract_id for contract_id, verdict in verdicts.items() if verdict == "BROKEN"}
    assert (done.returncode != 0) == bool(broken), done.stdout + done.stderr
    return broken


def test_the_tree_keeps_every_contract() -> None:
    assert broken_contracts(ROOT) == set()


# Each breach as a file of a copied tree and the text appended to it (or a new file), with
# the contracts it breaks.
BREACHES = {
    "engine imports app": (
        "engine/model/gguf_file.py",
        "from app import paths\n",
        {"layers"},
    ),
    "app imports ui": ("app/screen_text/units.py", "import ui\n", {"layers"}),
    "engine imports Qt for types only": (
        "engine/cancel.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from PySide6 import QtCore\n",
        {"core-without-qt"},
    ),
    "app reaches Qt through ui": (
        "app/screen_text/units.py",
        "from ui.window import main_window\n",
        # and through app, the window's panels would reach the window and app's floor its top
        {"layers", "core-without-qt", "app-layers", "ui-layers"},
    ),
    "ui imports llama_cpp": (
        "ui/conversation/message_html.py",
        "import llama_cpp\n",
        {"ui-without-llama"},
    ),
    "app imports llama_cpp": (
        "app/api/api_streams.py",
        "import llama_cpp\n",
        {"app-without-llama"},
    ),
    "an engine package imports one of its own layer": (
        "engine/llama/offload_boundary.py",
        "from engine.model import gguf_file\n",
        {"engine-layers"},
    ),
    "an engine package without a layer": ("engine/extras/__init__.py", "", {"engine-layers"}),
    "a type-only import cycle": (
        "ui/window/main_window.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ui import desktop\n",
        {"no-cycles", "ui-layers"},
    ),
    "an app package imports one of its own layer": (
        "app/profiling_job.py",
        "from app.api import server\n",
        {"app-layers"},
    ),
    "an app package without a layer": ("app/extras/__init__.py", "", {"app-layers"}),
    "a ui feature imports another": (
        "ui/vram/vram_panel.py",
        "from ui.server import server_panel\n",
        {"ui-layers"},
    ),
    "a ui feature imports the window": (
        "ui/summaries/batch_panel.py",
        "from ui.window import main_window\n",
        {"ui-layers", "no-cycles"},
    ),
    "a ui package without a layer": ("ui/extras/__init__.py", "", {"ui-layers"}),
}


def copy_of_the_tree(destination: Path) -> Path:
    """Our packages and the contracts, copied: what `lint-imports` reads, nothing else."""
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, destination / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy2(ROOT / "pyproject.toml", destination / "pyproject.toml")
    return destination


@pytest.mark.parametrize("breach", sorted(BREACHES))
def test_a_contract_catches_the_breach(breach: str, tmp_path: Path) -> None:
    relative, added, expected = BREACHES[breach]
    tree = copy_of_the_tree(tmp_path)
    target = tree / relative
    assert target.exists() or not added, f"{relative} is gone: choose another module"
    target.parent.mkdir(exist_ok=True)
    with target.open("a", encoding="utf-8") as source:
        source.write(added)
    assert broken_contracts(tree) == expected


@pytest.mark.parametrize(
    ("imports", "forbidden"),
    [
        (
            "engine.runtime.chat, engine.model.inventory, engine.model.synthetic, "
            "app.engine_host.worker, app.cli.main",
            "PySide6",
        ),
        ("ui.engine_bridge", "llama_cpp"),
    ],
)
def test_importing_a_layer_does_not_load_the_forbidden_library(
    imports: str, forbidden: str
) -> None:
    """At run time too: the launcher's GUI import stays deferred (the contracts name it as
    their one exception, so only running the imports shows it still is)."""
    script = (
        f"import sys, {imports}\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] == {forbidden!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
