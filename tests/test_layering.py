"""The architecture rule, checked: engine/ and app/ never import Qt; ui/ never imports llama_cpp."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {"engine": {"PySide6", "qasync"}, "app": {"PySide6", "qasync"}, "ui": {"llama_cpp"}}


def imported_modules(source: Path) -> set[str]:
    tree = ast.parse(source.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_sources_do_not_import_forbidden_modules(package: str) -> None:
    sources = sorted((ROOT / package).rglob("*.py"))
    assert sources, f"no sources found in {package}/"
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_modules(path) & FORBIDDEN[package])
        for path in sources
        if imported_modules(path) & FORBIDDEN[package]
    }
    assert offenders == {}


@pytest.mark.parametrize(
    ("imports", "forbidden"),
    [
        ("engine.chat, engine.inventory, engine.synthetic, app.worker, app.cli", "PySide6"),
        ("ui.engine_bridge", "llama_cpp"),
    ],
)
def test_importing_a_layer_does_not_load_the_forbidden_library(
    imports: str, forbidden: str
) -> None:
    script = (
        f"import sys, {imports}\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] == {forbidden!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_module_detector_sees_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import PySide6.QtCore\nfrom llama_cpp import Llama\nfrom . import x\n")
    assert imported_modules(probe) == {"PySide6", "llama_cpp"}
