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
    (app.engine_host.early_engine), and the window shows it loaded."""
    home, data = tmp_path / "home", tmp_path / "data"
    home.mkdir()
    store_smoke_profile(SHARDCHAT, home, data)
    launch = launch_until_ready(SHARDCHAT, home, data, args=["gui"])
    assert launch.returncode == 0, "\n".join(launch.output)
    assert launch.wizard_s is None, "a profiled machine goes straight to the window"
    assert launch.open_s is not None and launch.window_s is not None
    assert launch.window_s >= launch.open_s


def test_the_window_answers_a_message_and_saves_its_picture_before_it_quits(
    tmp_path: Path,
) -> None:
    """SHARDCHAT_READY_MESSAGE and SHARDCHAT_READY_SCREENSHOT: what the Windows tier uses to
    see the window answer under Wine, with no screen. The reply is in the chat store (the
    window sent it as a user would) and the picture is a real PNG of the window."""
    import sqlite3
    import subprocess

    from PIL import Image
    from startup_time import clean_env

    home, data = tmp_path / "home", tmp_path / "data"
    home.mkdir()
    store_smoke_profile(SHARDCHAT, home, data)
    picture = tmp_path / "window.png"
    env = clean_env(
        home,
        SHARDCHAT_HOME=str(data),
        SHARDCHAT_EXIT_WHEN_READY="1",
        SHARDCHAT_READY_MESSAGE="Name a colour.",
        SHARDCHAT_READY_SCREENSHOT=str(picture),
    )
    done = subprocess.run(
        [str(SHARDCHAT), "gui"], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "shardchat: ready: message answered" in lines, done.stdout
    assert f"shardchat: ready: screenshot {picture}" in lines, done.stdout
    with Image.open(picture) as image:
        assert image.width >= 400 and image.height >= 300
    (store,) = data.rglob("chats.sqlite3")
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT role, content, complete FROM messages ORDER BY id").fetchall()
    assert rows[0] == ("user", "Name a colour.", 1), rows
    assert rows[1][0] == "assistant" and rows[1][1].strip() and rows[1][2] == 1, rows
