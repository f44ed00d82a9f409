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
        (
            "engine.runtime.chat, engine.model.inventory, engine.model.synthetic, app.worker, "
            "app.cli",
            "PySide6",
        ),
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


# --- no import cycles, type-only (TYPE_CHECKING) imports included (issue 14) ---

OURS = ("engine", "app", "ui")


def our_imports(source: Path) -> set[str]:
    """Our modules `source` imports anywhere in it, under TYPE_CHECKING too: a module
    named by `from package import module` counts as that module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] in OURS)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in OURS:
                continue
            found.add(node.module)
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if (ROOT / Path(*submodule.split("."))).with_suffix(".py").exists():
                    found.add(submodule)
    return found


def module_graph() -> dict[str, set[str]]:
    graph = {}
    for package in OURS:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            graph[name.removesuffix(".__init__")] = our_imports(path)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (or one importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1 or node in graph.get(node, ()):
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_through_others() -> None:
    graph = module_graph()
    assert "engine.batch.run" in graph["engine.batch.generator"]  # the graph sees imports
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_type_only_cycle(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from engine.planning.plan import Plan\n"
        "from engine.llama import offload_boundary\n"
    )
    expected = {"engine.planning.plan", "engine.llama", "engine.llama.offload_boundary"}
    assert our_imports(probe) == expected


# --- the engine's packages, in layers (import-linter's "layers" contract) ---

# Bottom first. A package may import the packages of the layers below it, never one of
# its own layer or above; the modules directly in engine/ (errors, cancel, ...) are the
# floor everything may use and that uses nothing else.
ENGINE_LAYERS: list[set[str]] = [
    {"model", "llama"},  # GGUF files and chat templates; the llama.cpp bindings
    {"machine"},  # hardware probe, profiles, described machines
    {"planning"},  # plans, the cost model, and how a plan becomes load parameters
    {"generation"},  # the scheduler, its streams, sampling: the one token loop
    {"runtime"},  # the loaded model, its conversation, the step log
    {"vision", "batch", "profiling", "serving"},  # serving: many clients' streams in slots
]


def engine_package(module: str) -> str | None:
    """The engine package a module belongs to; "" for the modules directly in engine/."""
    parts = module.split(".")
    if parts[0] != "engine":
        return None
    is_package = len(parts) > 1 and (ROOT / "engine" / parts[1]).is_dir()
    return parts[1] if is_package else ""


def layer_breaches(graph: dict[str, set[str]], layers: list[set[str]]) -> list[str]:
    rank = {package: i for i, layer in enumerate(layers) for package in layer}
    rank[""] = -1
    breaches = []
    for module, imports in sorted(graph.items()):
        source = engine_package(module)
        if source is None:
            continue
        for target in sorted(imports):
            wanted = engine_package(target)
            if wanted is None or wanted == source:
                continue
            if rank.get(wanted, len(layers)) >= rank.get(source, len(layers)):
                breaches.append(f"{module} -> {target}")
    return breaches


def test_every_engine_package_has_a_layer() -> None:
    packages = {p.name for p in (ROOT / "engine").iterdir() if (p / "__init__.py").exists()}
    assert packages == set().union(*ENGINE_LAYERS)


def test_engine_packages_import_only_the_layers_below_them() -> None:
    assert layer_breaches(module_graph(), ENGINE_LAYERS) == []


def test_the_layer_check_sees_an_upward_import() -> None:
    graph = {"engine.model.inventory": {"engine.planning.plan", "engine.errors"}}
    assert layer_breaches(graph, ENGINE_LAYERS) == [
        "engine.model.inventory -> engine.planning.plan"
    ]
