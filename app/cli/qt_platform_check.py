"""Before Qt starts: can its platform plugin load, and if not, which packages are missing?

When Qt cannot load its only platform plugin it aborts the process (SIGABRT)
with a generic message that names neither the library that is missing nor
the package to install. On Linux the xcb plugin links a dozen xcb utility
libraries a minimal desktop may lack (libxcb-icccm4, libxcb-keysyms1,
libxcb-cursor0 ...), so the gui command asks here first, without loading Qt:
the dynamic loader (`ldd`) lists what the plugin cannot find, and Debian's
naming rule turns each soname into the package to install.

Only the case where xcb is the one platform Qt would try is checked: where
Wayland, offscreen or another platform comes first or after, Qt has a way
out and a missing xcb library is not fatal. Windows and macOS draw natively
and are never checked.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Seam: tests (and a person debugging a bundle) point the check at another xcb plugin.
XCB_PLUGIN_ENV = "SHARDCHAT_QT_XCB_PLUGIN"
XCB_PLUGIN_NAME = "libqxcb.so"
_LDD_TIMEOUT_S = 20

# sonames whose package does not follow Debian policy 8.1's libfoo.so.N -> libfooN
_PACKAGE_EXCEPTIONS = {
    "libc.so.6": "libc6",
    "libm.so.6": "libc6",
    "libdl.so.2": "libc6",
    "libpthread.so.0": "libc6",
    "libz.so.1": "zlib1g",
    "libbrotlicommon.so.1": "libbrotli1",
    "libbrotlidec.so.1": "libbrotli1",
    "libGLdispatch.so.0": "libglvnd0",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
    "libgobject-2.0.so.0": "libglib2.0-0",
}


@dataclass(frozen=True)
class PlatformProblem:
    """Qt's platform plugin would not load: the libraries it needs that are not installed."""

    platform: str
    missing: tuple[str, ...]
    apt: bool = True  # name the apt packages (Debian and Ubuntu); False elsewhere

    def message(self) -> str:
        """The one line the user reads instead of Qt's abort."""
        line = (
            f"shardchat: the desktop window cannot start: Qt's {self.platform} platform needs "
            f"{', '.join(self.missing)}, which {'is' if len(self.missing) == 1 else 'are'} "
            "not installed"
        )
        if not self.apt:
            return line
        packages = dict.fromkeys(debian_package_for(soname) for soname in self.missing)
        return f"{line} (sudo apt install {' '.join(packages)})"


def qt_platforms(environ: Mapping[str, str], system: str = sys.platform) -> tuple[str, ...]:
    """The platforms Qt 6 would try, in order, as QGuiApplication picks them.

    QT_QPA_PLATFORM wins ("xcb", "wayland;xcb", "offscreen", options after ':');
    otherwise Wayland first in a Wayland session, then xcb where DISPLAY is set,
    then the build's default (xcb). Empty off Linux: there the native platform
    is built in and needs nothing from the system."""
    if not system.startswith("linux"):
        return ()
    chosen = environ.get("QT_QPA_PLATFORM", "")
    if chosen:
        names = [entry.split(":", 1)[0].strip() for entry in chosen.split(";")]
        return tuple(dict.fromkeys(name for name in names if name))
    order: list[str] = []
    if environ.get("WAYLAND_DISPLAY") or environ.get("XDG_SESSION_TYPE") == "wayland":
        order.append("wayland")
    order.append("xcb")  # DISPLAY's choice and the default are the same plugin
    return tuple(order)


def xcb_plugin_path(environ: Mapping[str, str]) -> Path | None:
    """PySide6's libqxcb.so (found without importing PySide6), or the seam's file."""
    override = environ.get(XCB_PLUGIN_ENV)
    if override:
        return Path(override)
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        plugin = Path(folder) / "Qt" / "plugins" / "platforms" / XCB_PLUGIN_NAME
        if plugin.is_file():
            return plugin
    return None


def missing_libraries(plugin: Path, environ: Mapping[str, str]) -> tuple[str, ...] | None:
    """The sonames the dynamic loader cannot find for PLUGIN and what it links, in ldd's order.

    ENVIRON is the environment the loader searches with (LD_LIBRARY_PATH).
    None when it cannot be told: no ldd (musl, a stripped container), not an
    ELF library, or ldd failed; the caller then lets Qt try."""
    ldd = shutil.which("ldd", path=environ.get("PATH"))
    if ldd is None or not plugin.is_file():
        return None
    try:
        done = subprocess.run(
            [ldd, str(plugin)],
            capture_output=True,
            text=True,
            env=dict(environ),
            timeout=_LDD_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    missing = re.findall(r"^\s*(\S+) => not found\s*$", done.stdout, flags=re.MULTILINE)
    if done.returncode != 0 and not missing:
        return None
    return tuple(dict.fromkeys(missing))


def debian_package_for(soname: str) -> str:
    """The Debian/Ubuntu package that ships SONAME: policy 8.1 (libfoo.so.N -> libfooN,
    libfoo2.so.N -> libfoo2-N, lower case), or the known exception."""
    if soname in _PACKAGE_EXCEPTIONS:
        return _PACKAGE_EXCEPTIONS[soname]
    found = re.fullmatch(r"(lib.+?)\.so\.(\d+)(?:\..*)?", soname)
    if not found:
        return soname
    name, major = found.groups()
    name = name.lower().replace("_", "-")
    return f"{name}-{major}" if name[-1].isdigit() else f"{name}{major}"


def platform_problem(
    environ: Mapping[str, str], system: str = sys.platform
) -> PlatformProblem | None:
    """Why Qt would abort on start, or None when it should start (or it cannot be told)."""
    if qt_platforms(environ, system) != ("xcb",):
        return None
    plugin = xcb_plugin_path(environ)
    if plugin is None:
        return None
    missing = missing_libraries(plugin, environ)
    if not missing:
        return None
    return PlatformProblem("xcb", missing, apt=_has_apt(environ))


def _has_apt(environ: Mapping[str, str]) -> bool:
    return shutil.which("apt", path=environ.get("PATH")) is not None
