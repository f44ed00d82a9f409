"""Build ShardChat's bundle and, on Linux, its .deb and portable archive (`make installer`).

    python installer/build.py [--out DIST] [--work WORK] [--deb-compression xz1|xz|gzip]

1. icons from assets/shardchat.svg (installer/make_icons.py)    -> WORK/icons
2. the PyInstaller bundle (installer/shardchat.spec)           -> WORK/dist/shardchat
3. a check that it holds no tests, caches or loose bytecode
4. Linux: DIST/shardchat_VERSION_ARCH.deb (installer/linux/build_deb.py) and
   DIST/shardchat-VERSION-linux-ARCH.tar.gz (the bundle, `shardchat` at its top)
5. DIST/build-info.json: the paths, sizes and build times; the same figures are printed.

Windows and macOS run steps 1-3 here and make their installers with
installer/windows/shardchat.iss and installer/macos/make_dmg.sh (see
.github/workflows/installers.yml).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bundle_tools import leftovers  # noqa: E402

MiB = 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where installers go")
    parser.add_argument("--work", type=Path, default=HERE / "build", help="scratch folder")
    parser.add_argument("--deb-compression", default="xz1", choices=("xz1", "xz", "gzip"))
    parser.add_argument(
        "--variant",
        default="",
        choices=("", "nvidia"),
        help="nvidia: the bundle carries the CUDA module (installer/cuda_module.py "
        "--bundle-runtime built it into llama_cpp/lib) and is named shardchat-nvidia",
    )
    args = parser.parse_args(argv)
    out, work = args.out.resolve(), args.work.resolve()
    out.mkdir(parents=True, exist_ok=True)
    ver = version("shardchat")
    info: dict[str, object] = {"version": ver, "platform": sys.platform, "variant": args.variant}
    timings: dict[str, float] = {}

    started = time.perf_counter()
    icons = work / "icons"
    _step("icons", timings, lambda: _python(HERE / "make_icons.py", str(icons)))
    bundle = _step("bundle", timings, lambda: build_bundle(work, icons))
    found = leftovers(bundle)
    if found:
        raise SystemExit(f"the bundle holds build leftovers: {found[:10]}")
    info["bundle"] = str(bundle)
    info["bundle_bytes"] = _tree_bytes(bundle)
    if sys.platform.startswith("linux"):
        sys.path.insert(0, str(HERE / "linux"))
        from build_deb import build_deb

        deb = _step(
            "deb",
            timings,
            lambda: build_deb(
                bundle, icons, out, ver, compression=args.deb_compression, variant=args.variant
            ),
        )
        archive = _step(
            "archive", timings, lambda: build_archive(bundle, out, ver, work, args.variant)
        )
        info.update(
            deb=str(deb),
            deb_bytes=deb.stat().st_size,
            archive=str(archive),
            archive_bytes=archive.stat().st_size,
        )
    timings["total"] = time.perf_counter() - started
    info["build_seconds"] = {k: round(v, 1) for k, v in timings.items()}
    (out / "build-info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    _report(info)
    return 0


def build_bundle(work: Path, icons: Path) -> Path:
    """Run PyInstaller on the spec; returns WORK/dist/shardchat."""
    dist = work / "dist"
    if dist.exists():
        shutil.rmtree(dist)
    command = [
        sys.executable,
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--clean",
        "--log-level",
        "WARN",
        "--distpath",
        str(dist),
        "--workpath",
        str(work / "pyinstaller"),
        str(HERE / "shardchat.spec"),
    ]
    env = {**os.environ, "SHARDCHAT_ICONS": str(icons)}
    subprocess.run(command, check=True, cwd=ROOT, env=env)
    return dist / "shardchat"


def build_archive(bundle: Path, out: Path, ver: str, work: Path, variant: str = "") -> Path:
    """The portable archive: shardchat-VERSION/ with the `shardchat` launcher at its top,
    the bundle's _internal/ beside it, the desktop entry, icon and a README."""
    from build_deb import elf_files, needed_and_glibc

    machine = platform.machine().lower() or "unknown"
    top = f"shardchat-{ver}"
    name = f"shardchat-{variant}" if variant else "shardchat"
    archive = out / f"{name}-{ver}-linux-{machine}.tar.gz"
    glibc = ".".join(map(str, needed_and_glibc(elf_files(bundle))[1]))
    readme = work / "README.txt"
    text = (HERE / "linux" / "portable-README.txt").read_text(encoding="utf-8")
    for key, value in {"@VERSION@": ver, "@MACHINE@": machine, "@GLIBC@": glibc}.items():
        text = text.replace(key, value)
    readme.write_text(text, encoding="utf-8")
    extras = {
        "shardchat.desktop": HERE / "linux" / "shardchat.desktop",
        "shardchat.svg": ROOT / "assets" / "shardchat.svg",
        "README.txt": readme,
    }

    def owned_by_root(member: tarfile.TarInfo) -> tarfile.TarInfo:
        member.uid = member.gid = 0
        member.uname = member.gname = "root"
        return member

    with tarfile.open(archive, "w:gz", compresslevel=6) as tar:
        tar.add(bundle, arcname=top, filter=owned_by_root)
        for name, source in extras.items():
            tar.add(source, arcname=f"{top}/{name}", filter=owned_by_root)
    return archive


def _python(script: Path, *args: str) -> None:
    subprocess.run([sys.executable, str(script), *args], check=True)


def _step(name: str, timings: dict[str, float], action):
    print(f"== {name}", flush=True)
    started = time.perf_counter()
    result = action()
    timings[name] = time.perf_counter() - started
    return result


def _tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _report(info: dict) -> None:
    print(f"bundle   {info['bundle']}: {info['bundle_bytes'] / MiB:.0f} MiB unpacked")
    for kind in ("deb", "archive"):
        if kind in info:
            print(f"{kind:8} {info[kind]}: {info[f'{kind}_bytes'] / MiB:.0f} MiB")
    steps = ", ".join(f"{k} {v:.0f} s" for k, v in info["build_seconds"].items())
    print(f"build    {steps}")


if __name__ == "__main__":
    sys.exit(main())
