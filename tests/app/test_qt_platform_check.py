"""The check before Qt starts: real plugins, real ELF libraries built here, real processes.

A broken platform plugin is made for real: a tiny shared library compiled with
gcc against libraries that are then taken away, so the dynamic loader reports
them "not found" exactly as it does for libqxcb.so on a desktop that lacks
libxcb-icccm4. The gui command is pointed at it through SHARDCHAT_QT_XCB_PLUGIN.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.commands.gui_command import terminal_chat_args
from app.cli.main import _parser as cli_parser
from app.cli.qt_platform_check import (
    XCB_PLUGIN_ENV,
    PlatformProblem,
    debian_package_for,
    missing_libraries,
    platform_problem,
    qt_platforms,
    xcb_plugin_path,
)
from tests.app.pty_terminal import Terminal

ROOT = Path(__file__).resolve().parents[2]
GHOST_A, GHOST_B = (
    "libshardchat-ghost-a.so.4",
    "libshardchat-ghost-b.so.1",
)
BROKEN_LINE = (
    "shardchat: the desktop window cannot start: Qt's xcb platform needs "
    f"{GHOST_A}, {GHOST_B}, which are not installed "
    "(sudo apt install libshardchat-ghost-a4 libshardchat-ghost-b1)"
)
needs_ldd = pytest.mark.skipif(shutil.which("ldd") is None, reason="no ldd on this system")


def _environ(**changes: str | None) -> dict[str, str]:
    """This process's environment without any display or Qt choice, then CHANGES."""
    env = dict(os.environ)
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "XDG_SESSION_TYPE", "QT_QPA_PLATFORM"):
        env.pop(name, None)
    env.pop("LD_LIBRARY_PATH", None)
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _compile(target: Path, source: str, *link: str) -> Path:
    soname = target.name
    subprocess.run(
        ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(target), "-x", "c", "-",
         *link],
        input=source, text=True, check=True, capture_output=True,
    )  # fmt: skip
    return target


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A plugin needing ghost-a and libmiddle; libmiddle needing ghost-b. The ghosts are
    built, linked against, then kept only in a folder the loader does not search."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc to build the shared libraries")
    root = tmp_path_factory.mktemp("elf")
    ghosts, middle_dir, plugin_dir = root / "ghosts", root / "middle", root / "plugin"
    for folder in (ghosts, middle_dir, plugin_dir):
        folder.mkdir()
    for name, symbol in ((GHOST_A, "ghost_a"), (GHOST_B, "ghost_b")):
        _compile(ghosts / name, f"int {symbol}(void) {{ return 1; }}\n")
    _compile(
        middle_dir / "libshardchat-middle.so.2",
        "int ghost_b(void);\nint middle(void) { return ghost_b(); }\n",
        f"-L{ghosts}", f"-l:{GHOST_B}",
    )  # fmt: skip
    plugin = _compile(
        plugin_dir / "libqxcb.so",
        "int ghost_a(void); int middle(void);\nint plugin(void) { return ghost_a() + middle(); }\n",
        f"-L{ghosts}", f"-l:{GHOST_A}", f"-L{middle_dir}", "-l:libshardchat-middle.so.2",
    )  # fmt: skip
    return {"plugin": plugin, "middle": middle_dir, "ghosts": ghosts}


# -- which platform Qt would use --------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"DISPLAY": ":0"}, ("xcb",)),
        ({}, ("xcb",)),  # the build's default
        ({"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}, ("wayland", "xcb")),
        ({"DISPLAY": ":0", "XDG_SESSION_TYPE": "wayland"}, ("wayland", "xcb")),
        ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, ("offscreen",)),
        ({"WAYLAND_DISPLAY": "w", "QT_QPA_PLATFORM": "xcb:nograb"}, ("xcb",)),
        ({"QT_QPA_PLATFORM": "wayland;xcb"}, ("wayland", "xcb")),
        ({"QT_QPA_PLATFORM": "minimal"}, ("minimal",)),
    ],
)
def test_the_platforms_are_those_qt_would_try(
    environ: dict[str, str], expected: tuple[str, ...]
) -> None:
    assert qt_platforms(environ, "linux") == expected


@pytest.mark.parametrize("system", ["win32", "darwin"])
def test_windows_and_macos_are_never_checked(system: str, built: dict[str, Path]) -> None:
    broken = {XCB_PLUGIN_ENV: str(built["plugin"])}
    environ = _environ(DISPLAY=":0", QT_QPA_PLATFORM="xcb", **broken)
    assert qt_platforms(environ, system) == ()
    assert platform_problem(environ, system) is None


@needs_ldd
@pytest.mark.parametrize(
    "changes",
    [
        {"QT_QPA_PLATFORM": "offscreen"},
        {"QT_QPA_PLATFORM": "minimal"},
        {"WAYLAND_DISPLAY": "wayland-0"},  # Wayland first: a broken xcb is only the fallback
        {"QT_QPA_PLATFORM": "xcb;offscreen"},
    ],
)
def test_a_broken_xcb_is_no_problem_where_qt_has_another_platform(
    changes: dict[str, str], built: dict[str, Path]
) -> None:
    environ = _environ(DISPLAY=":0", **changes, **{XCB_PLUGIN_ENV: str(built["plugin"])})
    assert platform_problem(environ, "linux") is None


# -- what the loader cannot find ---------------------------------------------------------------


@needs_ldd
def test_the_missing_libraries_are_what_the_loader_cannot_find(built: dict[str, Path]) -> None:
    plugin, middle, ghosts = built["plugin"], built["middle"], built["ghosts"]
    assert missing_libraries(plugin, _environ()) == (GHOST_A, "libshardchat-middle.so.2")
    # with libmiddle found, its own missing dependency shows up too, once, in the loader's order
    assert missing_libraries(plugin, _environ(LD_LIBRARY_PATH=str(middle))) == (GHOST_A, GHOST_B)
    everything = f"{middle}{os.pathsep}{ghosts}"
    assert missing_libraries(plugin, _environ(LD_LIBRARY_PATH=everything)) == ()


@needs_ldd
def test_the_real_xcb_plugin_is_judged_as_the_loader_judges_it() -> None:
    """Independent of ldd: dlopen the real libqxcb.so in a fresh process. It loads exactly
    when nothing is reported missing; when it fails, it names a library reported missing."""
    plugin = xcb_plugin_path(_environ())
    assert plugin is not None and plugin.name == "libqxcb.so" and plugin.is_file()
    missing = missing_libraries(plugin, _environ())
    assert missing is not None
    loaded = subprocess.run(
        [sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(plugin)!r})"],
        capture_output=True, text=True, env=_environ(), timeout=60,
    )  # fmt: skip
    if loaded.returncode == 0:
        assert missing == ()
    else:
        named = re.search(r"(lib[^\s:]+\.so[.\d]*): cannot open shared object file", loaded.stderr)
        assert named, loaded.stderr
        assert named.group(1) in missing


@needs_ldd
def test_what_cannot_be_told_lets_qt_try(tmp_path: Path, built: dict[str, Path]) -> None:
    text = tmp_path / "libqxcb.so"
    text.write_text("not an ELF file\n")
    assert missing_libraries(text, _environ()) is None
    assert missing_libraries(tmp_path / "absent.so", _environ()) is None
    no_ldd = _environ(PATH=str(tmp_path))  # a system without ldd
    assert missing_libraries(built["plugin"], no_ldd) is None
    broken = {XCB_PLUGIN_ENV: str(built["plugin"])}
    assert platform_problem(_environ(DISPLAY=":0", PATH=str(tmp_path), **broken), "linux") is None


@needs_ldd
def test_a_broken_xcb_plugin_is_a_problem_named_in_one_line(built: dict[str, Path]) -> None:
    environ = _environ(
        DISPLAY=":0", LD_LIBRARY_PATH=str(built["middle"]), **{XCB_PLUGIN_ENV: str(built["plugin"])}
    )
    problem = platform_problem(environ, "linux")
    apt = shutil.which("apt") is not None
    assert problem == PlatformProblem("xcb", (GHOST_A, GHOST_B), apt=apt)
    if apt:
        assert problem.message() == BROKEN_LINE


# -- the message and the packages --------------------------------------------------------------


@pytest.mark.parametrize(
    ("soname", "package"),
    [
        ("libxcb-icccm.so.4", "libxcb-icccm4"),
        ("libxcb-keysyms.so.1", "libxcb-keysyms1"),
        ("libxcb-cursor.so.0", "libxcb-cursor0"),
        ("libxkbcommon-x11.so.0", "libxkbcommon-x11-0"),
        ("libxcb-render-util.so.0", "libxcb-render-util0"),
        ("libX11-xcb.so.1", "libx11-xcb1"),
        ("libxcb.so.1", "libxcb1"),
        ("libglib-2.0.so.0", "libglib2.0-0"),
        ("libz.so.1", "zlib1g"),
    ],
)
def test_sonames_map_to_debian_packages(soname: str, package: str) -> None:
    assert debian_package_for(soname) == package


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="not a Debian system")
@needs_ldd
def test_the_package_named_for_each_library_qxcb_links_is_the_one_that_ships_it() -> None:
    """The naming rule against dpkg's own records, for every system library the real
    plugin resolves (PySide6's own libraries belong to no package and are left out)."""
    plugin = xcb_plugin_path(_environ())
    assert plugin is not None
    text = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True).stdout
    resolved = dict(re.findall(r"^\s*(\S+) => (/\S+)", text, flags=re.MULTILINE))
    checked = 0
    for soname, path in resolved.items():
        if "site-packages" in path:
            continue
        owner = _dpkg_owner(Path(path))
        if owner is not None:
            assert debian_package_for(soname) == owner, soname
            checked += 1
    assert checked >= 10


@pytest.mark.skipif(shutil.which("apt-cache") is None, reason="not a Debian system")
@needs_ldd
def test_the_packages_named_for_what_is_missing_here_are_in_apts_index() -> None:
    """On this machine (or any lacking part of xcb), the real plugin's message names packages
    apt can install; a machine with the full set has nothing to name."""
    plugin = xcb_plugin_path(_environ())
    assert plugin is not None
    missing = missing_libraries(plugin, _environ())
    assert missing is not None
    if missing and not list(Path("/var/lib/apt/lists").glob("*Packages*")):
        pytest.skip("apt has no package index here (apt-get update never ran)")
    for soname in missing:
        package = debian_package_for(soname)
        known = subprocess.run(["apt-cache", "show", package], capture_output=True, text=True)
        assert known.returncode == 0 and f"Package: {package}" in known.stdout, soname


def _dpkg_owner(path: Path) -> str | None:
    """dpkg records a file under /lib or /usr/lib (merged /usr), the link or its target."""
    text = str(path)
    twin = text[len("/usr") :] if text.startswith("/usr/") else "/usr" + text
    for candidate in (text, twin, str(path.resolve())):
        done = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout.split(":", 1)[0].strip()
    return None


def test_the_message_reads_as_a_sentence_and_names_each_package_once() -> None:
    one = PlatformProblem("xcb", ("libxcb-icccm.so.4",))
    assert one.message() == (
        "shardchat: the desktop window cannot start: Qt's xcb platform needs "
        "libxcb-icccm.so.4, which is not installed (sudo apt install libxcb-icccm4)"
    )
    glib = PlatformProblem("xcb", ("libglib-2.0.so.0", "libgthread-2.0.so.0"))
    assert glib.message().endswith("(sudo apt install libglib2.0-0)")
    elsewhere = PlatformProblem("xcb", ("libxcb-icccm.so.4",), apt=False)
    assert elsewhere.message().endswith("libxcb-icccm.so.4, which is not installed")
    assert "\n" not in glib.message()


# -- the gui command ---------------------------------------------------------------------------


def _gui_environ(plugin: Path | None, **changes: str | None) -> dict[str, str]:
    seam = {XCB_PLUGIN_ENV: str(plugin)} if plugin else {}
    return _environ(DISPLAY=":99", PYTHONPATH=str(ROOT), **seam, **changes)


@needs_ldd
def test_without_a_terminal_the_gui_command_prints_the_line_and_exits_2(
    built: dict[str, Path],
) -> None:
    """No traceback, no Qt: the process never imports PySide6 before refusing."""
    script = (
        "import sys\nfrom app.cli.main import main\ncode = main(['gui'])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'PySide6'))\nsys.exit(code)\n"
    )
    environ = _gui_environ(built["plugin"], LD_LIBRARY_PATH=str(built["middle"]))
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=environ, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    if shutil.which("apt"):
        assert lines[0] == BROKEN_LINE
    assert done.stdout.strip() == "[]"


@needs_ldd
def test_the_cli_entry_refuses_the_same_way(built: dict[str, Path]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "gui"], cwd=ROOT, env=_gui_environ(built["plugin"]),
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("shardchat: the desktop window cannot start: ")
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


@needs_ldd
def test_on_a_terminal_the_gui_command_says_why_and_starts_the_terminal_chat(
    built: dict[str, Path],
) -> None:
    environ = _gui_environ(built["plugin"], LD_LIBRARY_PATH=str(built["middle"]))
    argv = [sys.executable, "-m", "app.cli.main", "gui", "--ctx", "512"]
    with Terminal(argv=argv, environ=environ) as term:
        said = term.expect("; starting the terminal chat instead")
        assert f"Qt's xcb platform needs {GHOST_A}, {GHOST_B}" in said
        term.expect("/exit")  # the chat's help: the model is loaded
        term.expect("> ")
        term.type("/exit\n")
        assert term.exit_code() == 0
    assert "Traceback" not in term.screen


@pytest.mark.parametrize("verbose", [False, True])
def test_the_terminal_chat_gets_exactly_the_chat_commands_arguments(verbose: bool) -> None:
    """Every flag the chat command has, with its default: a flag added to chat and not
    to the fallback fails here, not on someone's desktop."""
    argv = ["--verbose"] * verbose + ["chat", "--model", "m.gguf", "--ctx", "512"]
    parsed = vars(cli_parser().parse_args(argv))
    for name in ("run", "command", "selftest"):
        del parsed[name]
    assert vars(terminal_chat_args("m.gguf", 512, verbose)) == parsed


def test_without_a_display_the_gui_command_runs_the_chat_command_on_piped_input() -> None:
    """The chat command's own handling of the pipe: an empty one is its one-line refusal
    (the fallback once crashed on arguments the chat command did not get)."""
    done = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "gui", "--ctx", "512"], cwd=ROOT,
        env=_environ(PYTHONPATH=str(ROOT)), input="  \n", capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "shardchat: no display here; starting the terminal chat instead",
        "shardchat: error: the prompt is empty; give PROMPT or pipe text to standard input",
    ]
