"""Time from launching the bundled app to a usable window, offscreen (no display needed).

    python installer/startup_time.py [EXECUTABLE]   (default: the bundle `make installer` built)

The app runs with SHARDCHAT_EXIT_WHEN_READY=1 (ui/gui_main.py): it prints
"shardchat: ready: wizard shown" when the first-launch wizard is up (and then
skips it), and "shardchat: ready: window shown, model loaded" once the main
window is shown with its model loaded, then quits. This script timestamps those
lines from the moment it starts the process, so the figures include the
bundle's own start-up (bootloader, Python, Qt, llama.cpp).

1. first launch (empty data folder): the wizard, then the window;
2. `shardchat profile --smoke`, which stores a profile (through the profiler's
   child processes, as the wizard's run would), so that
3. the next launch is a returning user's: straight to the window.

Each run gets a clean environment: PATH=/usr/bin:/bin, a fresh HOME, no
PYTHONPATH or VIRTUAL_ENV, QT_QPA_PLATFORM=offscreen.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_EXECUTABLE = Path(__file__).resolve().parent / "build" / "dist" / "shardchat" / "shardchat"
READY = "shardchat: ready: "
WIZARD, OPEN, WINDOW = "wizard shown", "window open", "window shown"


@dataclass
class Launch:
    """One launch: seconds to the wizard and to the loaded window (None if never seen)."""

    returncode: int
    wizard_s: float | None = None
    open_s: float | None = None  # the window shown, its model maybe still loading
    window_s: float | None = None  # the window shown with its model loaded
    output: list[str] = field(default_factory=list)


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """A desktop session's bare minimum, and nothing of the build machine's Python."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "QT_QPA_PLATFORM": "offscreen", **extra}


def launch_until_ready(
    executable: Path,
    home: Path,
    data: Path | None = None,
    timeout_s: float = 300,
    args: list[str] | None = None,
) -> Launch:
    """Start the app with no arguments (a double-click; a development install's console
    script needs `gui`) and time its ready lines."""
    extra = {"SHARDCHAT_EXIT_WHEN_READY": "1"}
    if data is not None:
        extra["SHARDCHAT_HOME"] = str(data)
    started = time.perf_counter()
    process = subprocess.Popen(
        [str(executable), *(args or [])],
        env=clean_env(home, **extra),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    watchdog = threading.Timer(timeout_s, process.kill)
    watchdog.start()
    launch = Launch(returncode=-1)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            seconds = time.perf_counter() - started
            launch.output.append(line.rstrip("\n"))
            if line.startswith(READY + WIZARD) and launch.wizard_s is None:
                launch.wizard_s = seconds
            elif line.startswith(READY + OPEN) and launch.open_s is None:
                launch.open_s = seconds
            elif line.startswith(READY + WINDOW) and launch.window_s is None:
                launch.window_s = seconds
        launch.returncode = process.wait()
    finally:
        watchdog.cancel()
    return launch


def store_smoke_profile(executable: Path, home: Path, data: Path | None = None) -> float:
    """`shardchat profile --smoke` in that home; returns its seconds (raises on failure)."""
    extra = {"SHARDCHAT_HOME": str(data)} if data is not None else {}
    # what is timed is the start-up after a stored profile, so one measured while the
    # build machine was busy is stored all the same (flagged), not refused
    extra["SHARDCHAT_PROFILE_KEEP_BUSY"] = "1"
    started = time.perf_counter()
    subprocess.run(
        [str(executable), "profile", "--smoke"],
        env=clean_env(home, **extra),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return time.perf_counter() - started


def measure(executable: Path) -> dict[str, float | None]:
    with tempfile.TemporaryDirectory(prefix="shardchat-startup-") as folder:
        home, data = Path(folder) / "home", Path(folder) / "data"
        home.mkdir()
        first = launch_until_ready(executable, home, data)
        _check(first, "first launch", expect_wizard=True)
        profile_s = store_smoke_profile(executable, home, data)
        again = launch_until_ready(executable, home, data)
        _check(again, "second launch", expect_wizard=False)
    return {
        "first_launch_wizard_s": first.wizard_s,
        "first_launch_window_s": first.window_s,
        "smoke_profile_s": profile_s,
        "returning_launch_window_s": again.window_s,
    }


def _check(launch: Launch, what: str, expect_wizard: bool) -> None:
    problems = []
    if launch.returncode != 0:
        problems.append(f"exit code {launch.returncode}")
    if launch.window_s is None:
        problems.append("no window")
    if (launch.wizard_s is not None) != expect_wizard:
        problems.append("the wizard " + ("did not open" if expect_wizard else "opened again"))
    if problems:
        tail = "\n".join(launch.output[-20:])
        raise RuntimeError(f"{what}: {', '.join(problems)}\n{tail}")


def main(argv: list[str]) -> int:
    executable = Path(argv[0]) if argv else DEFAULT_EXECUTABLE
    if not executable.is_file():
        print(f"{executable} does not exist: run `make installer` first", file=sys.stderr)
        return 2
    f = measure(executable)
    print(f"first launch:     wizard shown after {f['first_launch_wizard_s']:.1f} s")
    print(f"                  (skipped) window + model after {f['first_launch_window_s']:.1f} s")
    print(f"profile --smoke:  {f['smoke_profile_s']:.1f} s")
    print(f"returning launch: window + model after {f['returning_launch_window_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
