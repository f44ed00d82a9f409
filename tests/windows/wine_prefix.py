"""A fresh Wine prefix that runs ShardChat's Windows build as Windows 10 would.

Wine 8 (Debian 12) lacks three things every Windows 10 and 11 has, and ShardChat's
dependencies use all three. Each is made good in the prefix, never in the product:

- **C99 complex functions in ucrtbase.dll** (crealf, cabs, cexp, ...: Wine exports them as
  unimplemented stubs). numpy 2 calls them from its first import. The prefix's ucrtbase.dll
  is a proxy (wine_prefix/ucrt_complex.c) that forwards each of Wine's 2,487 functions to
  Wine's own ucrtbase, copied beside it as ucrtwine.dll, and answers the complex ones
  with mingw-w64's libm.
- **The system ICU, icuuc.dll** (Windows 10 1703 and later). Qt6Core imports 18 ucnv_*
  converter functions from it and does not load without it. The prefix gets an ICU with
  no converter data (wine_prefix/icuuc.c): every converter is unavailable, and Qt falls
  back to its own codecs, which are the ones ShardChat uses.
- **WMI that answers** (wbemprox calls propsys.VariantToString, which Wine 8 leaves
  unimplemented, so Python's platform.platform() aborts the process). The prefix disables
  wbemprox: the query fails as on a Windows whose WMI service is stopped, and Python
  falls back to the version the OS reports.

Each prefix is new (wineboot -i in a temporary folder), so no run sees another's state.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "wine_prefix"
WINE_DLLS = Path("/usr/lib/x86_64-linux-gnu/wine/x86_64-windows")
CROSS = "x86_64-w64-mingw32"
# Wine's builtin DLLs carry this at offset 0x40; a copy without it loads as a native DLL
BUILTIN_MARK = b"Wine builtin DLL"
OVERRIDES = {"ucrtbase": "native,builtin", "wbemprox": ""}  # "": disabled


def wine_env(prefix: Path) -> dict[str, str]:
    """The environment every Wine command of the tier runs with."""
    # nothing of this machine's own display, Qt or ShardChat settings (the suite's
    # SHARDCHAT_HOME among them: the Windows install keeps its data where Windows does)
    foreign = ("WINE", "QT_", "DISPLAY", "SHARDCHAT_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(foreign)}
    env.update(
        WINEPREFIX=str(prefix),
        WINEARCH="win64",
        WINEDEBUG="-all",
        # no desktop integration in the host's menus; no Mono or Gecko download prompts
        WINEDLLOVERRIDES="winemenubuilder.exe=d;mscoree=d;mshtml=d",
    )
    return env


def make_prefix(prefix: Path, work: Path) -> dict[str, str]:
    """Create the prefix, add what Wine lacks, and return the environment to run it with."""
    env = wine_env(prefix)
    subprocess.run(["wineboot", "-i"], env=env, check=True, capture_output=True, timeout=300)
    subprocess.run(["wineserver", "-w"], env=env, check=True, timeout=300)
    system32 = prefix / "drive_c" / "windows" / "system32"
    _install_ucrt_proxy(system32, work)
    _compile(SOURCES / "icuuc.c", system32 / "icuuc.dll")
    for dll, mode in OVERRIDES.items():
        key = r"HKCU\Software\Wine\DllOverrides"
        reg = ["wine", "reg", "add", key, "/v", dll, "/d", mode, "/f"]
        subprocess.run(reg, env=env, check=True, capture_output=True, timeout=120)
    subprocess.run(["wineserver", "-w"], env=env, check=True, timeout=300)
    return env


def _install_ucrt_proxy(system32: Path, work: Path) -> None:
    wine_ucrt = (WINE_DLLS / "ucrtbase.dll").read_bytes()
    if wine_ucrt[0x40 : 0x40 + len(BUILTIN_MARK)] != BUILTIN_MARK:
        raise RuntimeError(f"{WINE_DLLS / 'ucrtbase.dll'} is not the Wine builtin this expects")
    native = bytearray(wine_ucrt)
    native[0x40 : 0x40 + len(BUILTIN_MARK)] = bytes(len(BUILTIN_MARK))
    (system32 / "ucrtwine.dll").write_bytes(bytes(native))
    definition = work / "ucrtbase.def"
    definition.write_text(_proxy_definition(work), encoding="utf-8")
    _compile(SOURCES / "ucrt_complex.c", system32 / "ucrtbase.dll", definition)


def _proxy_definition(work: Path) -> str:
    """Every export of Wine's ucrtbase forwarded to ucrtwine.dll, but those ucrt_complex.c
    defines (as fix_NAME)."""
    listing = subprocess.run(
        [f"{CROSS}-objdump", "-p", str(WINE_DLLS / "ucrtbase.dll")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    table = listing.split("[Ordinal/Name Pointer] Table", 1)[1]
    exports = [line.split("] ", 1)[1].strip() for line in table.splitlines() if "] " in line]
    fixed = _defined_functions(work)
    lines = ["LIBRARY ucrtbase.dll", "EXPORTS"]
    for name in exports:
        lines.append(f"  {name} = fix_{name}" if name in fixed else f"  {name} = ucrtwine.{name}")
    return "\n".join(lines) + "\n"


def _defined_functions(work: Path) -> set[str]:
    """The fix_* functions ucrt_complex.c defines, read from its object file's symbols."""
    obj = work / "ucrt_complex.o"
    compile_only = [f"{CROSS}-gcc", "-O2", "-c", "-o", str(obj), str(SOURCES / "ucrt_complex.c")]
    subprocess.run(compile_only, check=True)
    symbols = subprocess.run(
        [f"{CROSS}-nm", "--defined-only", str(obj)], capture_output=True, text=True, check=True
    ).stdout
    return {
        line.split()[-1].removeprefix("fix_")
        for line in symbols.splitlines()
        if line.split()[-1].startswith("fix_")
    }


def _compile(source: Path, out: Path, definition: Path | None = None) -> None:
    command = [f"{CROSS}-gcc", "-O2", "-s", "-shared", "-static-libgcc", "-o", str(out)]
    command += [str(source), *([str(definition)] if definition else [])]
    if definition is not None:
        command += ["-nostartfiles", "-Wl,--entry=0"]
    subprocess.run(command, check=True)


def remove_prefix(prefix: Path) -> None:
    env = wine_env(prefix)
    subprocess.run(["wineserver", "-k"], env=env, check=False, timeout=60)
    shutil.rmtree(prefix, ignore_errors=True)
