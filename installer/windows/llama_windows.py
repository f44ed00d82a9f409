"""llama.cpp for Windows, cross-compiled on Linux with mingw-w64 (`make windows`).

    python installer/windows/llama_windows.py build --out DIR   # DIR/llama_cpp, ready to bundle
    python installer/windows/llama_windows.py key               # the cache key of that build

The same patched sources and CMake flags as the Linux wheel (installer/llama_wheel.py: the
release's sdist, installer/patches/, the Makefile's LLAMA_CMAKE_ARGS): every backend a
loadable DLL, the CPU backend once per x86 level, Vulkan, RPC and its server. What differs
is only what Windows needs:

- the compilers are Debian's mingw-w64 (posix threads: llama.cpp uses std::thread), set by
  installer/windows/mingw-w64.cmake; there is no MSVC on Linux;
- Vulkan is built against the Khronos headers the Linux build uses, with an import library
  for the loader every Windows GPU driver installs (vulkan-1.dll), made here with dlltool
  from the headers' prototypes: the Vulkan SDK's vulkan-1.lib is a Windows download;
- the GCC runtime DLLs the modules link (libstdc++, libgcc, winpthread, OpenMP's libgomp)
  are carried beside them in llama_cpp/lib, where the engine puts the folder on the DLL
  search path (engine/llama/backends.py).

The result is the llama_cpp package, its Python files from the sdist and its DLLs in lib/,
kept under a key of everything that goes into it, so a second `make windows` reuses it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import llama_wheel  # noqa: E402

TOOLCHAIN = HERE / "mingw-w64.cmake"
# mingw-w64's own gaps, applied after the patches every build takes
WINDOWS_PATCHES = llama_wheel.PATCHES / "windows"
TARGET = "x86_64-w64-mingw32"
# the Khronos headers the Linux build uses (Debian's libvulkan-dev and spirv-headers), copied
# apart: the cross-compiler must not see the rest of the host's /usr/include
KHRONOS_HEADERS = ("vulkan", "vk_video", "spirv")
VULKAN_HEADER = Path("/usr/include/vulkan/vulkan_core.h")
# the GCC runtime of Debian's posix-thread mingw-w64, which the modules and llama.dll import
RUNTIME_DLLS = ("libstdc++-6.dll", "libgcc_s_seh-1.dll", "libwinpthread-1.dll", "libgomp-1.dll")
RUNTIME_DIRS = (
    Path("/usr/lib/gcc/x86_64-w64-mingw32/12-posix"),
    Path("/usr/x86_64-w64-mingw32/lib"),
)
WINDOWS_ARGS = (
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_OPENSSL=OFF",
    # ggml's CPU modules need Windows 8's PrefetchVirtualMemory; 0x0A00 is Windows 10
    "-DGGML_WIN_VER=0x0A00",
)


def key() -> str:
    """What the build is made of: the release, the patches, the flags, this script and
    its toolchain file. The cached build is used only while all of these are unchanged."""
    digest = hashlib.sha256()
    digest.update(llama_wheel.makefile_variable("LLAMA_VERSION").encode())
    digest.update(llama_wheel.cmake_args("win32").encode())
    patches = [*sorted(llama_wheel.PATCHES.glob("*.patch")), *_windows_patches()]
    for path in [*patches, Path(__file__), TOOLCHAIN]:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _windows_patches() -> list[Path]:
    version = llama_wheel.makefile_variable("LLAMA_VERSION")
    return sorted(WINDOWS_PATCHES.glob(f"llama-cpp-python-{version}-*.patch"))


def vulkan_import_library(work: Path) -> Path:
    """libvulkan-1.a for vulkan-1.dll, from every function the Khronos header declares."""
    names = re.findall(r"VKAPI_ATTR \w+ VKAPI_CALL (vk\w+)\(", VULKAN_HEADER.read_text())
    definition = work / "vulkan-1.def"
    definition.write_text("LIBRARY vulkan-1.dll\nEXPORTS\n" + "\n".join(sorted(set(names))) + "\n")
    library = work / "libvulkan-1.a"
    dlltool = [f"{TARGET}-dlltool", "-d", str(definition), "-l", str(library)]
    subprocess.run([*dlltool, "-D", "vulkan-1.dll"], check=True)
    return library


def khronos_headers(work: Path) -> Path:
    """The Vulkan and SPIR-V headers in a folder of their own, with a SPIRV-Headers
    package config that points there (Debian's points at /usr/include)."""
    include = work / "khronos" / "include"
    shutil.rmtree(include.parent, ignore_errors=True)
    for name in KHRONOS_HEADERS:
        shutil.copytree(Path("/usr/include") / name, include / name)
    config = include.parent / "SPIRV-HeadersConfig.cmake"
    config.write_text(
        "add_library(SPIRV-Headers::SPIRV-Headers INTERFACE IMPORTED)\n"
        "set_target_properties(SPIRV-Headers::SPIRV-Headers PROPERTIES\n"
        f'    INTERFACE_INCLUDE_DIRECTORIES "{include}")\n',
        encoding="utf-8",
    )
    return include


def build(out: Path, work: Path) -> Path:
    """Cross-compile, install into out/llama_cpp/lib, copy the package's Python files."""
    work.mkdir(parents=True, exist_ok=True)
    tree = llama_wheel.patched_source(work)
    for patch in _windows_patches():
        print(f"applying {patch.name}", flush=True)
        with patch.open("rb") as text:
            subprocess.run(["patch", "-p1", "--quiet"], stdin=text, cwd=tree, check=True)
    staged = work / "staged"
    shutil.rmtree(staged, ignore_errors=True)
    build_dir = work / "build"
    configure = [
        "cmake", "-S", str(tree), "-B", str(build_dir), "-G", "Ninja",
        f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}",
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DSKBUILD_PLATLIB_DIR={staged}",
        f"-DVulkan_INCLUDE_DIR={khronos_headers(work)}",
        f"-DSPIRV-Headers_DIR={work / 'khronos'}",
        f"-DVulkan_LIBRARY={vulkan_import_library(work)}",
        f"-DVulkan_GLSLC_EXECUTABLE={shutil.which('glslc')}",
        *llama_wheel.cmake_args("win32").split(),
        *WINDOWS_ARGS,
    ]  # fmt: skip
    print(" ".join(configure), flush=True)
    subprocess.run(configure, check=True)
    jobs = str(os.cpu_count() or 2)
    subprocess.run(["cmake", "--build", str(build_dir), "-j", jobs], check=True)
    # the package's own install rules write to SKBUILD_PLATLIB_DIR; llama.cpp's (headers,
    # import libraries, CMake files) to a prefix in the work folder, never the system's
    install = ["cmake", "--install", str(build_dir), "--prefix", str(work / "prefix")]
    subprocess.run(install, check=True)
    package = out / "llama_cpp"
    shutil.rmtree(package, ignore_errors=True)
    shutil.copytree(tree / "llama_cpp", package, ignore=shutil.ignore_patterns("lib"))
    lib = package / "lib"
    shutil.copytree(staged / "llama_cpp" / "lib", lib)
    for leftover in lib.glob("*.a"):
        leftover.unlink()  # import libraries: for linking, not for running
    for name in RUNTIME_DLLS:
        source = next(d / name for d in RUNTIME_DIRS if (d / name).is_file())
        shutil.copy2(source, lib / name)
    shutil.rmtree(tree)
    shutil.rmtree(build_dir)  # gigabytes of objects; a new key means a new configure anyway
    return package


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    built = commands.add_parser("build", help="cross-compile llama.cpp for Windows")
    built.add_argument("--out", type=Path, required=True)
    built.add_argument("--work", type=Path, default=llama_wheel.ROOT / ".cache" / "llama-windows")
    commands.add_parser("key", help="print the cache key of this build")
    args = parser.parse_args(argv)
    if args.command == "key":
        print(key())
        return 0
    print(build(args.out, args.work))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
