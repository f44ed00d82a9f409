"""Shared fixtures: isolated app folders for every test, the default model, synthetic models.

Synthetic models are written once per session (they are deterministic) into a
session temp folder; every test gets its own SHARDCHAT_HOME so nothing
touches a person's real data.
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np
import pytest
from cli_run import CliRun
from local_hub import LocalHub, TestRepos, publish_test_repos

from engine.llama.backends import start_ggml
from engine.llama.load_params import LoadParams
from engine.machine.hardware import probe_hardware
from engine.machine.profile import Profile
from engine.model.default_model import default_model_path
from engine.model.inventory import read_inventory
from engine.model.synthetic import write_synthetic_model
from engine.model.synthetic_spec import SyntheticSpec
from engine.planning.machine_split import output_bytes
from engine.remote.sharing import SharingServer
from engine.runtime.loaded_model import LoadedModel, load_model
from tests.lent_computers import endpoint, lent_computer

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

RECORDED_PROFILE = Path(__file__).resolve().parent / "data" / "profile-epyc-2core-fast.json"


@pytest.fixture(scope="session", autouse=True)
def session_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A home for fixtures wider than one test (a module's API server and its worker, which
    save what their steps taught the cost model): pytest makes them before any test's own
    home is set, and they once wrote to the person's real profile store."""
    home = tmp_path_factory.mktemp("session-home")
    previous = os.environ.get("SHARDCHAT_HOME")
    os.environ["SHARDCHAT_HOME"] = str(home)
    yield home
    if previous is None:
        os.environ.pop("SHARDCHAT_HOME", None)
    else:
        os.environ["SHARDCHAT_HOME"] = previous


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "shardchat-home"
    monkeypatch.setenv("SHARDCHAT_HOME", str(home))
    # a Hugging Face token saved by a test never reaches the person's real keyring
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    # no test reaches huggingface.co: one that forgets the local hub gets a closed loopback port
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    # a profile a test measures is stored even when the (shared, 2-core) machine is busy,
    # flagged; the tests of the refusal itself take this away
    monkeypatch.setenv("SHARDCHAT_PROFILE_KEEP_BUSY", "1")
    return home


# ---------------------------------------------------------------- the command line, in process


@pytest.fixture
def shardchat(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> CliRun:
    """`shardchat ARGS` run in this process, as the console script runs it: `main(ARGS)`,
    SystemExit (argparse's) read as the exit code, stdin piped from a string.

    Why: a separate process re-imports everything and re-reads the default model (~2.3 s a
    run). Output is captured at the file descriptors, so what llama.cpp wrote to stderr
    itself is seen as a user would see it. Tests of what only a process shows (a terminal,
    a signal, a crash, a fresh interpreter's imports) start `shardchat` themselves."""
    from app.cli.main import main

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        capfd.readouterr()  # what came before this run is not its output
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        root = logging.getLogger()
        level = root.level
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = _exit_code(exc)
        finally:
            _drop_cli_log_handlers(root, level)
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(["shardchat", *args], code, out, err)

    return run


def _exit_code(exc: SystemExit) -> int:
    """What the interpreter would exit with: None is 0, a message is 1 (printed)."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


def _drop_cli_log_handlers(root: logging.Logger, level: int) -> None:
    """The log file and --verbose handlers a run added, gone with it: the next test has
    another home, and a handler on a closed capture would fail every later record."""
    for handler in list(root.handlers):
        if getattr(handler, "_shardchat", False):
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


@pytest.fixture(scope="session")
def ggml_started() -> None:
    """llama.cpp's backend modules loaded in this process, as the app loads them before
    its first model: for tests that build a `llama_cpp.Llama` themselves."""
    start_ggml()


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


@pytest.fixture(scope="session")
def recorded_profile_file() -> Path:
    """A `--fast` profile measured on a 2-core EPYC without a GPU, as a file (for the CLI's
    `--hardware` and imports)."""
    return RECORDED_PROFILE


@pytest.fixture(scope="session")
def recorded_profile(recorded_profile_file: Path) -> Profile:
    """That profile, read once: it is frozen, and a test that wants it changed makes a
    changed copy (`dataclasses.replace`), so every test sees the same measured machine."""
    return Profile.from_json(recorded_profile_file.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def recorded_profile_here(recorded_profile: Profile) -> Profile:
    """The recorded profile as if measured on this machine (it was, on one like it): its
    fingerprint this machine's, so the app takes it as this machine's own."""
    return replace(recorded_profile, fingerprint=probe_hardware().fingerprint())


@pytest.fixture(scope="session")
def write_projector():
    """Write a real, tiny CLIP vision projector GGUF at a path, as llama.cpp's mmproj files
    are (a gemma3 projector of 8x8 zeros): what library imports, pairing and refusals read.
    A fixture returning a writer, since the tests choose the file's name and folder."""

    def write(path: Path) -> Path:
        writer = gguf.GGUFWriter(path, "clip")
        writer.add_string("clip.projector_type", "gemma3")
        writer.add_bool("clip.has_vision_encoder", True)
        writer.add_tensor("v.blk.0.attn_q.weight", np.zeros((8, 8), dtype=np.float32))
        writer.add_tensor("mm.input_projection.weight", np.zeros((8, 8), dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path

    return write


@pytest.fixture(scope="module")
def default_model() -> LoadedModel:
    """The embedded default model, loaded once per test module with a 2048-token window."""
    model = load_model(LoadParams(str(default_model_path()), n_ctx=2048, n_threads=2))
    yield model
    model.close()


# ---------------------------------------------------------------- a local Hugging Face Hub


@pytest.fixture(scope="session")
def hub_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the local hub's test repositories are written, once per session."""
    return tmp_path_factory.mktemp("local-hub")


@pytest.fixture(scope="session")
def hub_repos(hub_workdir: Path) -> TestRepos:
    """What `local_hub` publishes: repo ids, commit shas (the same on every hub, since the
    files are) and the files on disk. Writes the files, so the first use takes a few seconds."""
    with LocalHub() as hub:
        return publish_test_repos(hub, hub_workdir)


@pytest.fixture
def local_hub(
    hub_repos: TestRepos, hub_workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LocalHub]:
    """A fresh LocalHub serving the test repositories; no token of the person running the tests
    reaches it (HF_TOKEN and the saved token are hidden)."""
    import huggingface_hub.constants

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(
        huggingface_hub.constants, "HF_TOKEN_PATH", str(hub_workdir / "no-saved-token")
    )
    with LocalHub() as hub:
        publish_test_repos(hub, hub_workdir)
        yield hub


# ---------------------------------------------------------------- lent computers (issue 31)


@pytest.fixture
def lend(tmp_path: Path) -> Iterator[Callable[[], SharingServer]]:
    """Starts a lent computer (tests.lent_computers) on each call; all stop after the test."""
    servers: list[SharingServer] = []

    def start() -> SharingServer:
        server = lent_computer(tmp_path / f"lent-{len(servers)}")
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def two_lent(shardchat, lend, default_model_file) -> list[str]:
    """Two lent computers, the first with a budget of ten blocks, the second of twenty and
    the output layer (so that it can take the first one's blocks too); their addresses."""
    inventory = read_inventory(default_model_file)
    block = inventory.blocks[0].n_bytes + inventory.blocks[0].kv_cache_bytes(4096)
    budgets = [10 * block + block // 2, 20 * block + block // 2 + output_bytes(inventory)]
    addresses = []
    for budget in budgets:
        address = f"tcp://{endpoint(lend())}"
        added = shardchat("devices", "add", address, "--budget", str(budget))
        assert added.returncode == 0, added.stderr
        addresses.append(address)
    return addresses


@pytest.fixture(scope="session")
def say(pytestconfig: pytest.Config) -> Callable[[str], None]:
    """Measured figures go to the terminal even while pytest captures output, marked with
    the running test's folder ("[installer] ...", "[windows] ...")."""
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")

    def write(message: str) -> None:
        running = os.environ.get("PYTEST_CURRENT_TEST", "tests/?/")
        tier = Path(running.split("::", 1)[0]).parent.name
        with capture.global_and_fixture_disabled():
            print(f"\n[{tier}] {message}", flush=True)

    return write
