"""The Windows installer under Wine: one fresh prefix and one silent install per run.

`make test-windows` builds dist/ShardChat-VERSION-windows-x64-setup.exe (`make windows`)
and sets SHARDCHAT_WINDOWS_TEST=reuse; a plain `make test` skips this folder. The prefix
is made by tests/windows/wine_prefix.py (what Wine 8 lacks and Windows has, added there).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from wine_install import ROOT, Installed
from wine_prefix import make_prefix, remove_prefix

DIST = ROOT / "dist"
MODE = os.environ.get("SHARDCHAT_WINDOWS_TEST", "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.windows)
            item.add_marker(pytest.mark.slow)
            if not MODE:
                item.add_marker(
                    pytest.mark.skip(
                        reason="installs the Windows build under Wine: `make test-windows`"
                    )
                )


def setup_program() -> Path:
    info = json.loads((DIST / "windows-build-info.json").read_text(encoding="utf-8"))
    return DIST / info["setup"]


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """A new prefix and a silent per-user install into it (`setup.exe /S`)."""
    work = tmp_path_factory.mktemp("wine")
    prefix = work / "prefix"
    env = make_prefix(prefix, work)
    setup = setup_program()
    subprocess.run(["wine", str(setup), "/S"], env=env, check=True, timeout=600)
    subprocess.run(["wineserver", "-w"], env=env, check=True, timeout=600)
    (local,) = (prefix / "drive_c" / "users").glob("*/AppData/Local")
    try:
        yield Installed(prefix, env, setup, local / "Programs" / "ShardChat", local)
    finally:
        remove_prefix(prefix)


@pytest.fixture(scope="session")
def x_display() -> Iterator[str]:
    """An X server (Xvfb) for Wine's graphics driver: winevulkan reaches the host's Vulkan
    driver only through winex11.drv, which needs a display even for compute alone."""
    read, write = os.pipe()
    command = ["Xvfb", "-displayfd", str(write), "-nolisten", "tcp", "-screen", "0", "1280x800x24"]
    server = subprocess.Popen(
        command, pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    os.close(write)
    with os.fdopen(read) as ready:
        number = ready.readline().strip()  # written once the server accepts clients
    try:
        assert number, "Xvfb did not start"
        yield f":{number}"
    finally:
        server.terminate()
        server.wait(30)
