"""`shardchat share`: this build's RPC server lent until Ctrl-C or SIGTERM, which stop it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from engine.remote.rpc_probe import PROTOCOL_VERSION, RemoteUnreachable, probe
from tests.lent_computers import free_port
from tests.terminal_signals import ctrl_c_as_a_terminal_gives_it

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_sharing_lends_this_computer_on_loopback_until_stopped(stop: signal.Signals) -> None:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "app.cli.main",
        "share",
        "--port",
        str(port),
        "--device",
        "CPU",
    ]
    with ctrl_c_as_a_terminal_gives_it():
        sharing = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    try:
        assert sharing.stdout is not None
        said = []
        for line in sharing.stdout:  # the command says when the server answers
            said.append(line)
            if line.startswith("Stop sharing"):
                break
        text = "".join(said)
        assert f"Lending this computer on 127.0.0.1:{port}" in text, sharing.stderr
        assert "Only this computer can reach it" in text and "ssh://" in text
        assert probe("127.0.0.1", port).version == PROTOCOL_VERSION
        sharing.send_signal(stop)
        out, err = sharing.communicate(timeout=30)
    finally:
        if sharing.poll() is None:
            sharing.kill()
    assert sharing.returncode == 0, err
    assert "Stopped sharing this computer." in out and "Traceback" not in err
    with pytest.raises(RemoteUnreachable):  # nothing stays lent
        probe("127.0.0.1", port, connect_timeout_s=1.0)


def test_a_killed_share_command_leaves_nothing_lent() -> None:
    """SIGKILL gives the command no chance to stop its server: the kernel ends it."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "app.cli.main",
        "share",
        "--port",
        str(port),
        "--device",
        "CPU",
    ]
    sharing = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert sharing.stdout is not None
        for line in sharing.stdout:  # the command says when the server answers
            if line.startswith("Stop sharing"):
                break
        (server,) = psutil.Process(sharing.pid).children()
        assert server.name() == "ggml-rpc-server"
    finally:
        sharing.kill()
        sharing.wait(30)
    assert server.wait(30) is not None or not server.is_running()
    with pytest.raises(RemoteUnreachable):
        probe("127.0.0.1", port, connect_timeout_s=1.0)


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "my-laptop"])
def test_sharing_on_every_network_or_a_name_is_refused(shardchat, address: str) -> None:
    run = shardchat("share", "--listen", address)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
    assert "every network" in run.stderr or "not an IP address" in run.stderr
