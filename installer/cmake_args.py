"""What the installer CI builds llama-cpp-python with: the Makefile's portable build.

    python installer/cmake_args.py            # CMAKE_ARGS for this system
    python installer/cmake_args.py --version  # the llama-cpp-python version to build

Both come from the Makefile (PORTABLE_CMAKE_ARGS, LLAMA_VERSION), so the installers ship
the same portable llama.cpp as `make run`. On macOS the x86 instruction-set flags do not
apply (Apple silicon); llama.cpp's Metal backend is switched on instead.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MAKEFILE = Path(__file__).resolve().parent.parent / "Makefile"


def makefile_variable(name: str) -> str:
    text = MAKEFILE.read_text(encoding="utf-8")
    found = re.search(rf"^{name} := ((?:.*\\\n)*.*)$", text, re.MULTILINE)
    if not found:
        raise SystemExit(f"{name} is not defined in {MAKEFILE}")
    return " ".join(found.group(1).replace("\\\n", " ").split())


def cmake_args(platform: str = sys.platform) -> str:
    if platform == "darwin":
        return "-DGGML_NATIVE=OFF -DGGML_METAL=ON"
    return makefile_variable("PORTABLE_CMAKE_ARGS")


if __name__ == "__main__":
    wanted = sys.argv[1:] == ["--version"]
    print(makefile_variable("LLAMA_VERSION") if wanted else cmake_args())
