"""The start-up hook the installer checks time (SHARDCHAT_EXIT_WHEN_READY), from the venv.

The bundled app is checked by test_installer.py (slow, `make installer-test`); this runs
the same launches with the development install, so the hook is checked by `make test`.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "installer"))

from startup_time import launch_until_ready, store_smoke_profile  # noqa: E402

SHARDCHAT = Path(sys.executable).parent / "shardchat"


def test_first_launch_shows_the_wizard_then_the_window_with_its_model(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    launch = launch_until_ready(SHARDCHAT, home, tmp_path / "data", args=["gui"])
    assert launch.returncode == 0, "\n".join(launch.output)
    assert launch.wizard_s is not None, "an empty data folder must open the profiling wizard"
    assert launch.open_s is not None and launch.open_s >= launch.wizard_s
    assert launch.window_s is not None and launch.window_s >= launch.open_s


def test_a_returning_user_s_launch_loads_the_model_under_the_window(tmp_path: Path) -> None:
    """A profiled machine: no wizard; the model's load is queued before Qt is imported
    (app.early_engine), and the window shows it loaded."""
    home, data = tmp_path / "home", tmp_path / "data"
    home.mkdir()
    store_smoke_profile(SHARDCHAT, home, data)
    launch = launch_until_ready(SHARDCHAT, home, data, args=["gui"])
    assert launch.returncode == 0, "\n".join(launch.output)
    assert launch.wizard_s is None, "a profiled machine goes straight to the window"
    assert launch.open_s is not None and launch.window_s is not None
    assert launch.window_s >= launch.open_s
