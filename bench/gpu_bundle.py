"""The folder bench/gpu_check.sh carries to a lent NVIDIA machine, packed here (at most 64 MiB).

That machine has Python 3.12 with numpy, psutil, nvidia-ml-py, jinja2 and the CUDA 13
runtime as pip packages, no llama-cpp-python and no network (as the workplace
describes it; the script prints what it finds). This packs:
- llama_cpp.tar.xz: the installed llama-cpp-python package with the libraries a CUDA
  run needs: libllama, ggml, the CPU variants, and ggml's CUDA module built from the
  same patched sources (installer/cuda_module.py build --archs 90 --into DIR); not
  the Vulkan module, which would drive the same GPU a second time; libgomp beside
  them, for ggml's CPU threads;
- wheels of the pure-Python packages the engine imports that the machine lacks.

    .venv/bin/python bench/gpu_bundle.py --cuda .cache/cuda-sm90/libggml-cuda.so [--out .gpu]

`make gpu-bundle` builds the module and runs this.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import llama_cpp

LIMIT = 64 << 20
WHEELS = [
    "gguf", "pyyaml", "tqdm", "requests", "urllib3", "idna", "charset-normalizer", "certifi",
    "platformdirs", "diskcache", "typing_extensions",
]  # fmt: skip
LEFT_OUT = ("libggml-vulkan", "ggml-rpc-server")
LIBGOMP = Path("/usr/lib/x86_64-linux-gnu/libgomp.so.1")


def package_members(cuda: Path) -> list[tuple[Path, str]]:
    """(file here, name in the archive) for the llama_cpp package, as the machine needs it."""
    package = Path(llama_cpp.__file__).resolve().parent
    members = []
    for path in sorted(package.rglob("*")):
        relative = path.relative_to(package)
        if not path.is_file() or "__pycache__" in relative.parts or relative.parts[0] == "server":
            continue
        if any(path.name.startswith(prefix) for prefix in LEFT_OUT):
            continue
        members.append((path, f"llama_cpp/{relative.as_posix()}"))
    members.append((cuda, f"llama_cpp/lib/{cuda.name}"))
    if LIBGOMP.exists():
        members.append((LIBGOMP.resolve(), "llama_cpp/lib/libgomp.so.1"))
    return members


def pack(members: list[tuple[Path, str]], target: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as archive:
        for path, name in members:
            archive.add(path, arcname=name)
    target.write_bytes(buffer.getvalue())  # whole, so a failed run leaves no half archive


def download_wheels(folder: Path) -> None:
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
        "--python-version", "3.12", "--implementation", "cp", "--platform",
        "manylinux_2_17_x86_64", "--platform", "any", "-d", str(folder), *WHEELS,
    ]  # fmt: skip
    subprocess.run(command, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuda", type=Path, required=True, help="the built libggml-cuda.so")
    parser.add_argument("--out", type=Path, default=Path(".gpu"))
    args = parser.parse_args()
    if not args.cuda.is_file():
        print(f"gpu_bundle: no CUDA module at {args.cuda}; build it first (make gpu-bundle)")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.whl"):
        old.unlink()
    pack(package_members(args.cuda), args.out / "llama_cpp.tar.xz")
    download_wheels(args.out)
    total = sum(p.stat().st_size for p in args.out.iterdir() if p.is_file())
    print(f"gpu_bundle: {args.out} holds {total / (1 << 20):.1f} MiB (limit 64 MiB)")
    if total > LIMIT:
        print("gpu_bundle: over the limit a device run carries: leave out CPU variants")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
