"""ggml's CUDA module for the installed llama-cpp-python build, built from the same sources.

    python installer/cuda_module.py detect   # the NVIDIA GPUs' architectures ("89"), or nothing
    python installer/cuda_module.py build [--archs "86;89"] [--bundle-runtime]

The wheel (installer/llama_wheel.py) ships the CPU, Vulkan and RPC modules;
CUDA is NVIDIA's faster path, and its toolkit is large, so it is built apart:
only the `ggml-cuda` target of the same patched llama.cpp, for the GPU
architectures at hand (default: those NVML or nvidia-smi report), with
llama.cpp's size compression. The module goes into this interpreter's
`llama_cpp/lib`, beside libggml-base, where engine/llama/backends.py loads it
before the Vulkan module: where both see one GPU, CUDA drives it.

The toolkit: the system's nvcc (CUDA_HOME, /usr/local/cuda, PATH); what it
lacks (cuBLAS is a separate download) is taken from PyPI's nvidia-* packages
and merged with it in a folder of links; with no nvcc at all, the compiler
comes from PyPI too. At run time the module needs the CUDA runtime and cuBLAS:
`build` installs them into this environment from PyPI and points the module's
RPATH at them; `--bundle-runtime` copies them beside the module instead (for
the installers, whose bundle must carry them).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llama_wheel import ROOT, patched_source  # noqa: E402

CUDA_MAJOR = "13"
RUNTIME_PACKAGES = [f"nvidia-cuda-runtime=={CUDA_MAJOR}.*", f"nvidia-cublas=={CUDA_MAJOR}.*"]
COMPILER_PACKAGES = [f"nvidia-cuda-nvcc=={CUDA_MAJOR}.*", f"nvidia-cuda-cccl=={CUDA_MAJOR}.*"]
# the CUDA module alone: the CPU backend and every other module come from the wheel
CMAKE_ARGS = [
    "-DGGML_BACKEND_DL=ON", "-DGGML_NATIVE=OFF", "-DGGML_CUDA=ON", "-DGGML_CUDA_NO_VMM=ON",
    "-DGGML_CUDA_COMPRESSION_MODE=size", "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
]  # fmt: skip
IS_WINDOWS = sys.platform == "win32"
RUNTIME_LIBRARIES = (
    ("cudart64_*.dll", "cublas64_*.dll", "cublasLt64_*.dll")
    if IS_WINDOWS
    else ("libcudart.so.*", "libcublas.so.*", "libcublasLt.so.*")
)
MINUTES_PER_ARCH = 20  # measured: about 20 minutes per architecture on 2 cores


def detect_archs() -> list[str]:
    """Compute capabilities of the NVIDIA GPUs here ("89" for 8.9), through NVML or nvidia-smi."""
    found: set[str] = set()
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
                found.add(f"{major}{minor}")
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no pynvml: ask nvidia-smi
        smi = shutil.which("nvidia-smi")
        if smi:
            query = [smi, "--query-gpu=compute_cap", "--format=csv,noheader"]
            done = subprocess.run(query, capture_output=True, text=True)
            if done.returncode == 0:
                found |= {line.strip().replace(".", "") for line in done.stdout.splitlines()}
    return sorted(arch for arch in found if arch.isdigit())


def llama_lib() -> Path:
    import llama_cpp

    return Path(llama_cpp.__file__).resolve().parent / "lib"


def system_nvcc() -> Path | None:
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return Path(home).resolve() / "bin" / "nvcc"
    found = shutil.which("nvcc")
    return Path(found).resolve() if found else None


def pip_install(packages: list[str], target: Path | None = None) -> None:
    where = ["--target", str(target)] if target else []
    command = [sys.executable, "-m", "pip", "install", "--quiet", *where, *packages]
    subprocess.run(command, check=True)


def nvidia_folders(site: Path) -> list[Path]:
    """The per-package folders of PyPI's nvidia-* wheels (nvidia/cu13, nvidia/cublas, ...)."""
    roots = [p for p in (site / "nvidia").glob("*") if p.is_dir()]
    return [p for p in roots if (p / "lib").is_dir() or (p / "include").is_dir()]


def toolkit(work: Path) -> Path:
    """A CUDA toolkit root with nvcc, the runtime and cuBLAS: the system's, completed from PyPI."""
    nvcc = system_nvcc()
    if nvcc is not None and _has_cublas(nvcc.parent.parent):
        return nvcc.parent.parent  # a whole toolkit (Windows installers, most workstations)
    extra = work / "pypi"
    pip_install(RUNTIME_PACKAGES + ([] if nvcc else COMPILER_PACKAGES), target=extra)
    tree = work / "toolkit"
    shutil.rmtree(tree, ignore_errors=True)
    lib, include, bin_dir = tree / "lib64", tree / "include", tree / "bin"
    for folder in (lib, include, bin_dir):
        folder.mkdir(parents=True)
    sources = [nvcc.parent.parent] if nvcc else []
    sources += nvidia_folders(extra)
    for source in sources:  # the system's files first: PyPI's only fill the gaps
        for sub, dest in (("bin", bin_dir), ("include", include), ("lib64", lib), ("lib", lib)):
            _link_missing(source / sub, dest)
        targets = source / "targets" / ("x64" if IS_WINDOWS else "x86_64-linux")
        _link_missing(targets / "include", include)
        _link_missing(targets / "lib", lib)
        for folder in ("nvvm", "share"):
            if (source / folder).is_dir() and not (tree / folder).exists():
                (tree / folder).symlink_to(source / folder)
    for soname in glob.glob(str(lib / "libcublas*.so.*")) + glob.glob(str(lib / "libcudart.so.*")):
        plain = Path(soname.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(soname)
    return tree


def _has_cublas(root: Path) -> bool:
    headers = [root / "include", root / "targets" / "x86_64-linux" / "include"]
    return any((folder / "cublas_v2.h").is_file() for folder in headers)


def _link_missing(source: Path, dest: Path) -> None:
    if not source.is_dir():
        return
    for entry in source.iterdir():
        target = dest / entry.name
        if not target.exists() and not target.is_symlink():
            target.symlink_to(entry)


def build(archs: list[str], work: Path, bundle_runtime: bool, into: Path | None = None) -> Path:
    label = ";".join(archs)
    expected = MINUTES_PER_ARCH * len(archs)
    print(f"building ggml's CUDA module for {label} (about {expected} minutes on 2 cores)")
    tree = patched_source(work)
    kit = toolkit(work)
    build_dir = work / "build"
    args = [
        *CMAKE_ARGS,
        f"-DCMAKE_CUDA_ARCHITECTURES={label}",
        f"-DCUDAToolkit_ROOT={kit}",
        f"-DCMAKE_CUDA_COMPILER={kit / 'bin' / 'nvcc'}",
        f"-DCMAKE_CUDA_FLAGS=-I{kit / 'include'}",
    ]
    source = tree / "vendor" / "llama.cpp"
    subprocess.run(["cmake", "-S", str(source), "-B", str(build_dir), *args], check=True)
    started = time.monotonic()
    jobs = str(os.cpu_count() or 2)
    make = ["cmake", "--build", str(build_dir), "--target", "ggml-cuda", "--parallel", jobs]
    subprocess.run(make, check=True)
    print(f"built ggml-cuda for {label} in {(time.monotonic() - started) / 60:.1f} minutes")
    module = next(p for p in build_dir.rglob("*ggml-cuda*") if p.suffix in (".so", ".dll"))
    carried = into is not None  # the runtime is the other machine's (LD_LIBRARY_PATH there)
    into = into or llama_lib()
    into.mkdir(parents=True, exist_ok=True)
    target = into / module.name
    shutil.copy2(module, target)
    if bundle_runtime:
        runtime = kit / ("bin" if IS_WINDOWS else "lib64")
        for pattern in RUNTIME_LIBRARIES:
            for library in glob.glob(str(runtime / pattern)):
                shutil.copy2(os.path.realpath(library), into / Path(library).name)
        if IS_WINDOWS:  # Windows finds a DLL's dependencies beside it only when they are
            return target  # in the loading program's folder or on PATH: the bundle's job
        rpath = "$ORIGIN"
    elif carried:
        rpath = "$ORIGIN"
    else:
        pip_install(RUNTIME_PACKAGES)  # the runtime and cuBLAS, into this environment
        site = into.parent.parent  # site-packages
        folders = [p / "lib" for p in nvidia_folders(site) if (p / "lib").is_dir()]
        rpath = ":".join(["$ORIGIN", *(f"$ORIGIN/{os.path.relpath(f, into)}" for f in folders)])
    subprocess.run(["patchelf", "--set-rpath", rpath, str(target)], check=True)
    print(f"installed {target} ({target.stat().st_size / 2**20:.0f} MiB)")
    return target


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("detect", help="print the NVIDIA GPUs' architectures (nothing if none)")
    make = commands.add_parser("build", help="build the CUDA module into llama_cpp/lib")
    make.add_argument("--archs", help='e.g. "89" or "86;89;120" (default: the GPUs here)')
    make.add_argument("--work", type=Path, default=ROOT / ".cache" / "cuda-build")
    make.add_argument("--bundle-runtime", action="store_true", help="copy cudart/cuBLAS beside it")
    make.add_argument(
        "--into", type=Path, help="put it here instead (a bundle for another machine)"
    )
    args = parser.parse_args(argv)
    if args.command == "detect":
        print(";".join(detect_archs()))
        return 0
    archs = args.archs.replace(",", ";").split(";") if args.archs else detect_archs()
    if not archs:
        print("no NVIDIA GPU here: name the architectures with --archs (CUDA_ARCHS=...)")
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    build([a for a in archs if a], args.work, args.bundle_runtime, args.into)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
