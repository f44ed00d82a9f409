"""Shared fixtures: isolated app folders for every test, the default model, synthetic models.

Synthetic models are written once per session (they are deterministic) into a
session temp folder; every test gets its own SHARDCHAT_HOME so nothing
touches a person's real data.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.llama.load_params import LoadParams
from engine.model.default_model import default_model_path
from engine.model.synthetic import write_synthetic_model
from engine.model.synthetic_spec import SyntheticSpec
from engine.runtime.loaded_model import LoadedModel, load_model

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "shardchat-home"
    monkeypatch.setenv("SHARDCHAT_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def default_model_file() -> Path:
    return default_model_path()


@pytest.fixture(scope="session")
def synthetic_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("synthetic-models")


@pytest.fixture(scope="session")
def make_synthetic(synthetic_dir: Path):
    """Write (once per session) a synthetic model of an architecture in a quant type."""
    made: dict[tuple[str, str, SyntheticSpec], Path] = {}

    def make(architecture: str, quant: str = "F16", **spec_fields: object) -> Path:
        spec = SyntheticSpec(architecture=architecture, **spec_fields)  # type: ignore[arg-type]
        key = (architecture, quant, spec)
        if key not in made:
            name = f"{spec.model_name}-{quant}-{abs(hash(spec)) % 10**8}.gguf"
            made[key] = write_synthetic_model(synthetic_dir / name, spec, quant)
        return made[key]

    return make


@pytest.fixture(scope="module")
def default_model() -> LoadedModel:
    """The embedded default model, loaded once per test module with a 2048-token window."""
    model = load_model(LoadParams(str(default_model_path()), n_ctx=2048, n_threads=2))
    yield model
    model.close()
