"""Build the one llama-cpp-python wheel ShardChat runs on.

    python installer/llama_wheel.py wheel --out DIR   # the wheel `make` and the installers use
    python installer/llama_wheel.py args              # the CMake flags for this system
    python installer/llama_wheel.py version           # the llama-cpp-python release
    python installer/llama_wheel.py source --work DIR # the patched sources, for llama-server

The version and the CMake flags come from the Makefile (LLAMA_VERSION,
LLAMA_CMAKE_ARGS), so `make run`, `make test`, the benches and the installer CI
build the same llama.cpp: every backend a loadable module, the CPU backend once
per x86 level, Vulkan and RPC. The patches in installer/patches/ are applied to
the release's sdist first (installing the modules beside libggml, the CPU
variants' score checking what the OS enables, Debian 12's Vulkan headers). On
macOS the Metal build stays the single-library one llama-cpp-python makes.

installer/cuda_module.py adds ggml's CUDA module to this build, from the same
patched sources.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = ROOT / "Makefile"
PATCHES = ROOT / "installer" / "patches"
DARWIN_ARGS = "-DGGML_NATIVE=OFF -DGGML_METAL=ON"


def makefile_variable(name: str) -> str:
    text = MAKEFILE.read_text(encoding="utf-8")
    found = re.search(rf"^{name} := ((?:.*\\\n)*.*)$", text, re.MULTILINE)
    if not found:
        raise SystemExit(f"{name} is not defined in {MAKEFILE}")
    return " ".join(found.group(1).replace("\\\n", " ").split())


def cmake_args(platform: str = sys.platform) -> str:
    if platform == "darwin":
        return DARWIN_ARGS
    return makefile_variable("LLAMA_CMAKE_ARGS")


def patched_source(work: Path) -> Path:
    """The release's sdist, unpacked into `work` with every patch applied."""
    version = makefile_variable("LLAMA_VERSION")
    sdist = work / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.is_file():
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
        source = ["--no-binary", ":all:", "-d", str(work), f"llama-cpp-python=={version}"]
        subprocess.run([*pip, *source], check=True)
    tree = work / f"llama_cpp_python-{version}"
    shutil.rmtree(tree, ignore_errors=True)
    with tarfile.open(sdist) as archive:
        archive.extractall(work, filter="data")
    for patch in sorted(PATCHES.glob(f"llama-cpp-python-{version}-*.patch")):
        print(f"applying {patch.name}", flush=True)
        with patch.open("rb") as text:
            subprocess.run(["patch", "-p1", "--quiet"], stdin=text, cwd=tree, check=True)
    return tree


def build_wheel(out: Path, work: Path) -> Path:
    tree = patched_source(work)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("llama_cpp_python-*.whl"):
        old.unlink()
    env = {**os.environ, "CMAKE_ARGS": cmake_args(), "CMAKE_BUILD_PARALLEL_LEVEL": _jobs()}
    print(f"CMAKE_ARGS={env['CMAKE_ARGS']}", flush=True)
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir"]
    subprocess.run([*pip, "--wheel-dir", str(out), str(tree)], env=env, check=True)
    (wheel,) = out.glob("llama_cpp_python-*.whl")
    return wheel


def _jobs() -> str:
    return str(os.cpu_count() or 2)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    wheel = commands.add_parser("wheel", help="build the llama-cpp-python wheel")
    wheel.add_argument("--out", type=Path, required=True)
    wheel.add_argument("--work", type=Path, default=ROOT / ".cache" / "llama-build")
    commands.add_parser("args", help="print the CMake flags for this system")
    commands.add_parser("version", help="print the llama-cpp-python version")
    source = commands.add_parser("source", help="unpack and patch the sources; print their path")
    source.add_argument("--work", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "args":
        print(cmake_args())
    elif args.command == "version":
        print(makefile_variable("LLAMA_VERSION"))
    elif args.command == "source":
        args.work.mkdir(parents=True, exist_ok=True)
        print(patched_source(args.work))
    else:
        args.work.mkdir(parents=True, exist_ok=True)
        print(build_wheel(args.out, args.work))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
