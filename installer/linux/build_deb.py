"""The Linux .deb, made from the PyInstaller bundle with `fakeroot dpkg-deb`.

    python installer/linux/build_deb.py BUNDLE ICONS OUT_DIR

Layout (nothing under /opt, no maintainer scripts, so removing the package
removes every file it installed and nothing else):

    /usr/lib/shardchat/                     the bundle (shardchat + _internal/)
    /usr/bin/shardchat                      -> ../lib/shardchat/shardchat
    /usr/share/applications/shardchat.desktop
    /usr/share/icons/hicolor/scalable/apps/shardchat.svg (+ PNGs 16..512)
    /usr/share/man/man1/shardchat.1.gz
    /usr/share/doc/shardchat/copyright, changelog.gz
    /usr/share/lintian/overrides/shardchat

Depends lists the system libraries the bundle links to but does not carry
(glibc, OpenGL/EGL, libxcb and the xcb utility libraries Qt's xcb platform
needs, Wayland's client libraries): each is found with ldconfig and `dpkg -S`,
and a library not installed on the build machine is named by Debian's
soname rule (libxcb-icccm.so.4 -> libxcb-icccm4).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))

from system_libraries import is_driver, is_optional_module  # noqa: E402

PACKAGE = "shardchat"
MAINTAINER = "ShardChat maintainers <maintainers@users.noreply.github.com>"
HELPER_EXECUTABLES = {"ggml-rpc-server"}  # beside the backend modules in llama_cpp/lib
SUMMARY = "desktop chat with big local language models on small GPUs"
DESCRIPTION = """\
 ShardChat runs dense, mixture-of-experts and vision-language models from GGUF
 files through llama.cpp. It profiles the machine once, then plans which parts
 of a model live in VRAM, which run on the CPU and which stream over PCIe, so
 large models stay usable on small GPUs.
 .
 This package is self-contained: Python, Qt (PySide6), llama.cpp and the small
 SmolLM2-135M-Instruct default model are inside. `shardchat --selftest` checks
 the installation without a display."""
# dpkg-deb's compression. Measured on 2 cores for this package (308 MB unpacked, 98 MB of
# it the model, which barely compresses): gzip -6 10 s / 180 MB; xz -1 36 s / 164 MB;
# xz -6 178 s / 152 MB. xz -1 is the default: most of xz's gain for a fifth of its time.
COMPRESSION = {"gzip": ("gzip", "6"), "xz1": ("xz", "1"), "xz": ("xz", "6")}
# sonames the bundle may need from the system but that are never worth a dependency
IGNORED = {"ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "linux-vdso.so.1"}


def build_deb(
    bundle: Path,
    icons: Path,
    out_dir: Path,
    version: str,
    compression: str = "xz1",
    variant: str = "",
) -> Path:
    """Stage the package tree next to OUT_DIR, write DEBIAN/, and build the .deb.

    `variant` ("nvidia": the bundle carries the CUDA module and its runtime) names a
    package of its own, shardchat-nvidia, that installs the same files in place of
    shardchat: one conflicts with and replaces the other.
    """
    check_changelog(version)
    name = f"{PACKAGE}-{variant}" if variant else PACKAGE
    stage = out_dir / f"{name}-deb-root"
    if stage.exists():
        shutil.rmtree(stage)
    lib = stage / "usr" / "lib" / PACKAGE
    shutil.copytree(bundle, lib, symlinks=True)
    _install_files(stage, icons, name)
    _normalise_permissions(stage)
    arch = _run(["dpkg", "--print-architecture"]).strip()
    depends, recommends = shlib_depends(lib)
    debian = stage / "DEBIAN"
    debian.mkdir(mode=0o755)
    control = {
        "Package": name,
        "Version": version,
        "Architecture": arch,
        "Maintainer": MAINTAINER,
        "Installed-Size": str(_installed_size_kib(stage)),
        "Depends": ", ".join(depends),
        **({"Recommends": ", ".join(recommends)} if recommends else {}),
        **({"Provides": PACKAGE, "Conflicts": PACKAGE, "Replaces": PACKAGE} if variant else {}),
        "Section": "utils",
        "Priority": "optional",
        "Description": f"{SUMMARY}\n{DESCRIPTION}",
    }
    text = "".join(f"{key}: {value}\n" for key, value in control.items())
    (debian / "control").write_text(text, encoding="utf-8")
    (debian / "md5sums").write_text(_md5sums(stage), encoding="utf-8")
    for path in debian.iterdir():
        path.chmod(0o644)
    deb = out_dir / f"{name}_{version}_{arch}.deb"
    kind, level = COMPRESSION[compression]
    _run(["fakeroot", "dpkg-deb", f"-Z{kind}", f"-z{level}", "--build", str(stage), str(deb)])
    shutil.rmtree(stage)
    return deb


def check_changelog(version: str) -> None:
    """installer/linux/changelog must start with this version (lintian and users read it)."""
    first = (HERE / "changelog").read_text(encoding="utf-8").splitlines()[0]
    found = re.match(rf"{PACKAGE} \(([^)]+)\)", first)
    if not found or found.group(1) != version:
        raise SystemExit(
            f"installer/linux/changelog starts with {first!r}: add an entry for {version}"
        )


def _install_files(stage: Path, icons: Path, name: str) -> None:
    usr = stage / "usr"
    (usr / "bin").mkdir(parents=True)
    (usr / "bin" / PACKAGE).symlink_to(f"../lib/{PACKAGE}/{PACKAGE}")
    _copy(HERE / "shardchat.desktop", usr / "share" / "applications" / "shardchat.desktop")
    hicolor = usr / "share" / "icons" / "hicolor"
    _copy(ROOT / "assets" / "shardchat.svg", hicolor / "scalable" / "apps" / "shardchat.svg")
    for png in sorted((icons / "hicolor").glob("*/apps/shardchat.png")):
        _copy(png, hicolor / png.relative_to(icons / "hicolor"))
    doc = usr / "share" / "doc" / name
    _copy(HERE / "copyright", doc / "copyright")
    _gzip(HERE / "changelog", doc / "changelog.gz")
    _gzip(HERE / "shardchat.1", usr / "share" / "man" / "man1" / "shardchat.1.gz")
    _copy(HERE / "lintian-overrides", usr / "share" / "lintian" / "overrides" / name)


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def _gzip(source: Path, target: Path) -> None:
    """gzip -9n: no name or time stamp inside, so the output is reproducible."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as raw, gzip.GzipFile("", "wb", 9, raw, mtime=0) as out:
        out.write(source.read_bytes())


def _normalise_permissions(stage: Path) -> None:
    """Directories 0755; the executables 0755 (the app, and llama.cpp's RPC server that
    `shardchat share` runs); everything else (shared libraries too) 0644."""
    executable = stage / "usr" / "lib" / PACKAGE / PACKAGE
    for folder, dirs, files in os.walk(stage):
        Path(folder).chmod(0o755)
        for name in files:
            path = Path(folder) / name
            if not path.is_symlink():
                runs = path == executable or name in HELPER_EXECUTABLES
                path.chmod(0o755 if runs else 0o644)
        for name in dirs:
            (Path(folder) / name).chmod(0o755)


def _installed_size_kib(stage: Path) -> int:
    total = 0
    for folder, _dirs, files in os.walk(stage):
        total += 1
        for name in files:
            path = Path(folder) / name
            total += 1 if path.is_symlink() else -(-path.stat().st_size // 1024)
    return total


def _md5sums(stage: Path) -> str:
    lines = []
    for folder, _dirs, files in sorted(os.walk(stage)):
        for name in sorted(files):
            path = Path(folder) / name
            if path.is_symlink() or path.relative_to(stage).parts[0] == "DEBIAN":
                continue
            digest = hashlib.md5(path.read_bytes()).hexdigest()
            lines.append(f"{digest}  {path.relative_to(stage).as_posix()}\n")
    return "".join(lines)


# --- Depends ------------------------------------------------------------------------------


def elf_files(folder: Path) -> list[Path]:
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as handle:
                if handle.read(4) == b"\x7fELF":
                    found.append(path)
    return found


def needed_and_glibc(files: list[Path]) -> tuple[set[str], tuple[int, ...]]:
    """Every DT_NEEDED soname, and the newest GLIBC_x.y symbol version any file needs."""
    needed: set[str] = set()
    newest: tuple[int, ...] = (2, 2)
    for start in range(0, len(files), 200):
        chunk = [str(p) for p in files[start : start + 200]]
        text = _run(["readelf", "-dVW", *chunk])
        needed.update(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", text))
        for version in re.findall(r"Name: GLIBC_(\d+(?:\.\d+)+)", text):
            newest = max(newest, tuple(int(n) for n in version.split(".")))
    return needed, newest


def shlib_depends(lib: Path) -> tuple[list[str], list[str]]:
    """(Depends, Recommends) for the system libraries the bundle needs and does not carry.

    A library only an optional backend module needs (libvulkan.so.1, for
    libggml-vulkan.so) is recommended: without it that module is skipped and the app
    runs on. A GPU driver's own library (libcuda.so.1) is named nowhere.
    """
    files = elf_files(lib)
    optional = [path for path in files if is_optional_module(path.name)]
    needed, glibc = needed_and_glibc([path for path in files if path not in optional])
    wanted, _ = needed_and_glibc(optional) if optional else (set(), ())
    carried = {p.name for p in lib.rglob("*") if p.is_file() or p.is_symlink()}
    external = sorted(needed - carried - IGNORED)
    recommended = sorted(wanted - needed - carried - IGNORED)
    packages = {"libc6": f"libc6 (>= {'.'.join(map(str, glibc))})"}
    for soname, package in packages_of([s for s in external if not is_driver(s)]).items():
        if package not in packages:
            packages[package] = package
        print(f"  depends: {soname} -> {package}")
    recommends = []
    for soname, package in packages_of([s for s in recommended if not is_driver(s)]).items():
        if package not in packages and package not in recommends:
            recommends.append(package)
        print(f"  recommends: {soname} -> {package}")
    return [packages[name] for name in sorted(packages)], sorted(recommends)


def packages_of(sonames: list[str]) -> dict[str, str]:
    """soname -> Debian package: the installed file's owner, else Debian's naming rule."""
    cache = _ldconfig_cache()
    owners: dict[str, str] = {}
    for soname in sonames:
        path = cache.get(soname)
        owner = _dpkg_owner(path) if path else None
        owners[soname] = owner or package_name_for(soname)
    return owners


def package_name_for(soname: str) -> str:
    """Debian policy 8.1: libfoo.so.N -> libfooN, libfoo2.so.N -> libfoo2-N."""
    found = re.fullmatch(r"(lib.+)\.so\.(\d+)(?:\..*)?", soname)
    if not found:
        raise SystemExit(f"cannot name a package for {soname}: add it to build_deb.py")
    name, major = found.groups()
    name = name.lower().replace("_", "-")
    return f"{name}-{major}" if name[-1].isdigit() else f"{name}{major}"


def _ldconfig_cache() -> dict[str, str]:
    text = _run(["/sbin/ldconfig", "-p"])
    cache: dict[str, str] = {}
    wide = sys.maxsize > 2**32  # a 64-bit system lists 32-bit libraries too: skip those
    for line in text.splitlines():
        found = re.match(r"\s+(\S+) \(([^)]*)\) => (\S+)", line)
        if found and ("64" in found.group(2)) == wide:
            cache.setdefault(found.group(1), found.group(3))
    return cache


def _dpkg_owner(path: str) -> str | None:
    candidates = {path, os.path.realpath(path)}
    candidates |= {c.replace("/usr/lib/", "/lib/", 1) for c in set(candidates)}
    candidates |= {c.replace("/lib/", "/usr/lib/", 1) for c in set(candidates) if c[:5] == "/lib/"}
    for candidate in sorted(candidates):
        done = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout.split(":")[0].strip()
    return None


def _run(command: list[str]) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: build_deb.py BUNDLE ICONS OUT_DIR VERSION", file=sys.stderr)
        return 2
    bundle, icons, out_dir, version = Path(argv[0]), Path(argv[1]), Path(argv[2]), argv[3]
    out_dir.mkdir(parents=True, exist_ok=True)
    print(build_deb(bundle, icons, out_dir, version))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
