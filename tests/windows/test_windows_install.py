"""ShardChat's setup.exe, installed and used under Wine as a Windows user would use it.

In file order: the silent per-user install; the command line (selftest on the CPU, the
device list, the GPU path on lavapipe through winevulkan, a one-shot chat); the API server
answering a streamed request from the Linux side; a lent computer's RPC server ending with
ShardChat (the Job object); a folder summary on a path with spaces and non-ASCII letters;
a chat stopped by Ctrl-C; the window answering one message with its picture saved; the
uninstaller, which keeps the user's data unless asked. Each check runs the installed
shardchat.exe, so each is also a check of the bundle (its Python, wheels and DLLs).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from wine_install import ROOT, Installed

# Mesa's software GPU, as the GPU tier sees it on Linux (Makefile's GPU_ENV): Wine's
# winevulkan hands Vulkan calls to the host's loader and driver
LAVAPIPE = {
    "GGML_VK_VISIBLE_DEVICES": "0",
    "GGML_VK_DISABLE_F16": "1",
    "GGML_VK_DISABLE_COOPMAT": "1",
}
# kept with the build; docs/assets/screenshots/main-window-windows.png is a copy of one
SCREENSHOT = ROOT / "dist" / "windows-window.png"


def lines_starting(text: str, prefix: str) -> list[str]:
    return [line.removeprefix(prefix) for line in text.splitlines() if line.startswith(prefix)]


def linux_cpu_variant() -> str | None:
    """The CPU variant the Linux build picks on this machine: the Windows build's own
    scoring (the same patched sources) must pick the same one."""
    from engine.llama.backends import start_ggml

    return start_ggml().cpu_variant


def test_setup_installs_for_the_user_alone_with_a_start_menu_entry_and_an_uninstaller(
    installed: Installed,
) -> None:
    assert b'level="asInvoker"' in installed.setup.read_bytes(), "setup must not ask for admin"
    for name in ("shardchat.exe", "shardchatw.exe", "uninstall.exe", "python313.dll"):
        assert (installed.folder / name).is_file(), name
    assert list((installed.folder / "Lib" / "site-packages" / "llama_cpp" / "lib").glob("*.dll"))
    (user,) = (installed.prefix / "drive_c" / "users").glob("*/AppData/Roaming")
    entry = user / "Microsoft" / "Windows" / "Start Menu" / "Programs" / "ShardChat.lnk"
    assert entry.is_file(), "no Start menu entry"
    key = r"HKCU\Software\Microsoft\Windows\CurrentVersion\Uninstall\ShardChat"
    listed = subprocess.run(
        ["wine", "reg", "query", key], env=installed.env, capture_output=True, text=True
    )
    assert "DisplayName" in listed.stdout and "uninstall.exe" in listed.stdout, listed.stdout


def test_selftest_answers_on_the_cpu_with_the_variant_that_fits(installed: Installed) -> None:
    done = installed.run("--selftest")
    assert done.returncode == 0, done.stdout + done.stderr
    (variant,) = lines_starting(done.stdout, "selftest: CPU variant: ")
    assert variant == linux_cpu_variant(), done.stdout
    (device,) = lines_starting(done.stdout, "selftest: device: ")
    assert device.startswith("CPU"), done.stdout


def test_info_devices_lists_every_backend_module_and_why_each_is_or_is_not_used(
    installed: Installed,
) -> None:
    done = installed.run("info", "--devices")
    assert done.returncode == 0, done.stdout + done.stderr
    for module in ("ggml-cpu-x64.dll", "ggml-cpu-haswell.dll", "ggml-vulkan.dll", "ggml-rpc.dll"):
        assert module in done.stdout, done.stdout


def test_the_gpu_path_runs_on_lavapipe_through_winevulkan(
    installed: Installed, x_display: str, say
) -> None:
    """Without a display Wine loads no graphics driver and winevulkan answers nothing
    ("Vulkan 1.2 required": version 1.0); a Windows desktop always has one."""
    env = {**LAVAPIPE, "DISPLAY": x_display}
    devices = installed.run("info", "--devices", env=env)
    assert devices.returncode == 0, devices.stdout + devices.stderr
    assert "Vulkan0" in devices.stdout, devices.stdout
    done = installed.run("--selftest", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    (device,) = lines_starting(done.stdout, "selftest: device: ")
    assert device.startswith("Vulkan0"), done.stdout
    (buffers,) = lines_starting(done.stdout, "selftest: buffers: ")
    assert "Vulkan0 model " in buffers, buffers
    say(f"under Wine on {device}: {buffers}")


def test_a_one_shot_chat_prints_its_reply(installed: Installed) -> None:
    done = installed.run("chat", "--max-tokens", "8", "--temperature", "0", "Say hello.")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip(), done.stderr


def test_serve_answers_a_streamed_openai_request_from_the_linux_side(
    installed: Installed,
) -> None:
    from openai import OpenAI

    server = installed.start("serve", "--port", "0", "--threads", "2")
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:"), line
        client = OpenAI(base_url=f"{line.split()[2]}/v1", api_key="unused", timeout=300)
        stream = client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "Count to three."}],
            max_tokens=12,
            temperature=0,
            stream=True,
        )
        pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
        assert len(pieces) > 1 and "".join(pieces).strip(), pieces
    finally:
        server.terminate()
        server.wait(60)


def test_a_lent_computer_s_rpc_server_ends_when_shardchat_is_killed(installed: Installed) -> None:
    """`shardchat share` keeps ggml-rpc-server.exe in a Job object that kills it when the
    job's last handle closes: Windows' way of PR_SET_PDEATHSIG. ShardChat killed outright
    (no handler runs) must not leave this computer lent."""
    with socket.socket() as probe:  # a free port (Wine's sockets are this machine's)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sharing = installed.start("share", "--port", str(port), "--threads", "1")
    try:
        assert sharing.stdout is not None
        said = sharing.stdout.readline()
        assert said.strip(), sharing.stderr.read() if sharing.poll() is not None else said
        deadline = time.monotonic() + 60
        while not rpc_servers():  # started: Wine names the process once it runs
            assert time.monotonic() < deadline, f"no ggml-rpc-server.exe running after: {said}"
            time.sleep(0.2)
        sharing.kill()  # SIGKILL to the Windows process: nothing of ShardChat runs after it
        sharing.wait(60)
        deadline = time.monotonic() + 60
        while rpc_servers():  # wineserver closes the dead process's handles, then the job
            assert time.monotonic() < deadline, "the RPC server outlived ShardChat"
            time.sleep(0.2)
    finally:
        if sharing.poll() is None:
            sharing.kill()


def rpc_servers() -> list[str]:
    # ww: whole command lines (ps cuts them at 80 columns when its output is not a terminal)
    command = ["ps", "-eww", "-o", "pid=,args="]
    listed = subprocess.run(command, capture_output=True, text=True).stdout
    return [line for line in listed.splitlines() if "ggml-rpc-server.exe" in line]


def test_summarize_reads_a_folder_whose_path_has_spaces_and_non_ascii_letters(
    installed: Installed,
) -> None:
    # on C: itself: the prefix's Documents is a link to this machine's home folder
    documents = installed.prefix / "drive_c" / "Notizen für Ärzte — 2026"
    documents.mkdir(parents=True)
    (documents / "über das Wetter.txt").write_text(
        "Der Sommer war heiß und trocken. Im Herbst kam der Regen zurück.\n", encoding="utf-8"
    )
    (documents / "plan.md").write_text("# Plan\n\nBuy milk. Call the bank.\n", encoding="utf-8")
    windows_path = "C:\\" + "\\".join(documents.relative_to(installed.prefix / "drive_c").parts)
    done = installed.run("summarize", "--max-words", "20", windows_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = documents.parent / f"{documents.name}-summaries"
    assert (out / "über das Wetter.txt.md").read_text(encoding="utf-8").strip()
    assert (out / "plan.md").read_text(encoding="utf-8").strip()
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert "über das Wetter.txt" in json.dumps(report, ensure_ascii=False), report


def test_a_chat_stopped_mid_reply_by_ctrl_c_keeps_what_was_said(installed: Installed) -> None:
    """Ctrl-C as Wine delivers it to a console program (SIGINT becomes the console's
    CTRL_C_EVENT, Python's KeyboardInterrupt): the reply stops, what it said stays on the
    screen, and the program ends cleanly. (The interactive session is not driven here: on
    a pseudo-terminal Wine 8's console never hands the typed Enter to input().)"""
    chat = subprocess.Popen(
        ["wine", str(installed.exe), "chat", "--temperature", "0", "--max-tokens", "2000",
         "Write a very long story about a dragon."],
        env=installed.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        assert chat.stdout is not None
        said = b""
        while len(said) < 80:  # the reply streaming
            piece = os.read(chat.stdout.fileno(), 4096)
            assert piece, chat.stderr.read() if chat.stderr else ""
            said += piece
        assert chat.poll() is None, "the reply ended before Ctrl-C could stop it"
        os.killpg(chat.pid, signal.SIGINT)  # a terminal's Ctrl-C goes to its process group
        signalled = time.monotonic()
        # 2,000 tokens at under 10 tokens/s would take minutes: a minute means it stopped
        rest, errors = chat.communicate(timeout=60)
        assert time.monotonic() - signalled < 60
    finally:
        if chat.poll() is None:
            chat.kill()
    assert chat.returncode in (0, 130), errors
    assert b"Traceback" not in errors, errors
    shown = (said + rest).decode("utf-8")  # what was said before Ctrl-C, not lost
    assert len(shown) >= 80 and len(shown.split()) < 1500, "Ctrl-C did not stop the reply"


def test_the_window_answers_a_message_and_saves_its_picture(
    installed: Installed, tmp_path: Path, say
) -> None:
    """Offscreen (Qt's offscreen platform plugin: no screen here), after a stored profile,
    so the window opens at once as for a returning user."""
    profiled = installed.run("profile", "--smoke", env={"SHARDCHAT_PROFILE_KEEP_BUSY": "1"})
    assert profiled.returncode == 0, profiled.stdout + profiled.stderr
    shown = installed.run("profile", "--show")  # the CPU as Windows' registry names it
    host = Path("/proc/cpuinfo").read_text().split("model name", 1)[1].split(":", 1)[1]
    assert host.splitlines()[0].strip() in shown.stdout, shown.stdout
    picture = tmp_path / "window.png"
    env = {
        "QT_QPA_PLATFORM": "offscreen",
        "SHARDCHAT_EXIT_WHEN_READY": "1",
        "SHARDCHAT_READY_MESSAGE": "What is the capital of France?",
        "SHARDCHAT_READY_SCREENSHOT": f"Z:{picture}".replace("/", "\\"),
    }
    done = installed.run("gui", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "shardchat: ready: message answered" in done.stdout, done.stdout
    assert picture.is_file(), done.stdout
    from PIL import Image

    with Image.open(picture) as image:
        assert image.width >= 400 and image.height >= 300
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50, "a blank window"
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(picture, SCREENSHOT)
    say(f"the window under Wine: {SCREENSHOT.relative_to(ROOT)}")


def test_the_uninstaller_removes_the_program_and_keeps_the_user_s_chats(
    installed: Installed,
) -> None:
    chats = list(installed.user_data.rglob("chats.sqlite3"))
    assert chats, "the window's chat should be stored by now"
    subprocess.run(["wine", str(installed.folder / "uninstall.exe"), "/S"], env=installed.env)
    subprocess.run(["wineserver", "-w"], env=installed.env, check=True, timeout=300)
    assert not installed.exe.exists() and not (installed.folder / "Lib").exists()
    assert all(chat.is_file() for chat in chats), "the user's chats went with the program"


def test_uninstalling_with_purge_also_deletes_the_user_s_data(installed: Installed) -> None:
    subprocess.run(["wine", str(installed.setup), "/S"], env=installed.env, check=True)
    subprocess.run(["wineserver", "-w"], env=installed.env, check=True, timeout=300)
    assert installed.exe.is_file()
    command = ["wine", str(installed.folder / "uninstall.exe"), "/S", "/PURGE"]
    subprocess.run(command, env=installed.env)
    subprocess.run(["wineserver", "-w"], env=installed.env, check=True, timeout=300)
    assert not installed.exe.exists()
    assert not installed.user_data.exists(), list(installed.user_data.rglob("*"))[:5]
