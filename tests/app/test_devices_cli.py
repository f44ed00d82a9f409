"""`shardchat devices`: lent computers are probed before they are kept, over TCP or through
an SSH forward to a server that listens on 127.0.0.1 only (a real sshd on loopback)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.remote.rpc_probe import RemoteUnreachable, probe
from engine.remote.sharing import SharingServer
from tests.lent_computers import free_port


@pytest.fixture
def lent(lend) -> SharingServer:
    """`shardchat share`'s server on 127.0.0.1, serving the CPU device."""
    return lend()


def test_a_lent_computer_is_probed_kept_listed_and_removed(shardchat, lent) -> None:
    address = f"tcp://127.0.0.1:{lent.settings.port}"
    added = shardchat("devices", "add", address)
    assert added.returncode == 0, added.stderr
    assert f"Added {address}  (" in added.stdout and "GiB free of" in added.stdout
    assert shardchat("devices", "add", address).returncode == 0  # again: still one entry
    listed = json.loads(shardchat("devices", "--json").stdout)
    assert [entry["address"] for entry in listed] == [address]
    assert listed[0]["protocol"] == "7.0.0" and listed[0]["devices"][0]["total_bytes"] > 0
    link = listed[0]["link"]  # measured through the server: timed transfers, a round trip
    assert 0 < link["round_trip_s"] < 1 and link["upload_bytes_per_s"] > 1e6
    assert link["download_bytes_per_s"] > 1e6
    speed = listed[0]["speed"]  # a model's blocks timed on the lent device, through llama.cpp
    assert speed["block_s"] > 0 and speed["local_block_s"] > 0 and speed["block_bytes"] > 2**20
    assert "round trip" in shardchat("devices").stdout
    assert "x this computer's speed" in shardchat("devices").stdout
    removed = shardchat("devices", "remove", address)
    assert removed.returncode == 0 and "Removed" in removed.stdout
    assert "No other computers" in shardchat("devices").stdout


@pytest.mark.parametrize(
    ("address", "said"),
    [
        ("http://127.0.0.1:8080", "not a remote address"),
        ("tcp://", "not a remote address"),
        ("ssh://me@host?colour=red", "unknown option 'colour'"),
    ],
)
def test_a_bad_address_is_one_line_and_exit_2(shardchat, address: str, said: str) -> None:
    run = shardchat("devices", "add", address)
    assert run.returncode == 2 and said in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr


def test_an_unreachable_computer_is_not_kept(shardchat) -> None:
    port = free_port()
    run = shardchat("devices", "add", f"tcp://127.0.0.1:{port}")
    assert run.returncode == 2 and f"cannot reach 127.0.0.1:{port}" in run.stderr
    assert "No other computers" in shardchat("devices").stdout


def test_removing_an_unknown_computer_is_exit_2(shardchat) -> None:
    run = shardchat("devices", "remove", "tcp://127.0.0.1:1")
    assert run.returncode == 2 and "no computer at tcp://127.0.0.1:1" in run.stderr


# -- through SSH ------------------------------------------------------------------------


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """OpenSSH's server on a loopback port, taking one throwaway key; (port, that key)."""
    folder = tmp_path / "sshd"
    folder.mkdir()
    for name in ("host_key", "client_key"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True
        )
    shutil.copy(folder / "client_key.pub", folder / "authorized_keys")
    port = free_port()
    config = folder / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host_key'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPidFile {folder / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nPermitRootLogin prohibit-password\nAllowTcpForwarding local\n",
        encoding="utf-8",
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege separation folder
    server = subprocess.Popen(
        [shutil.which("sshd") or "/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
        stderr=subprocess.PIPE,
    )
    try:
        assert server.stderr is not None
        for line in server.stderr:  # sshd says when it listens
            if b"Server listening" in line:
                break
        yield port, folder / "client_key"
    finally:
        server.terminate()
        server.wait(10)


def ssh_options(tmp_path: Path, key: Path) -> list[str]:
    known = tmp_path / "known_hosts"
    return [
        f"--ssh-option=IdentityFile={key}",
        f"--ssh-option=UserKnownHostsFile={known}",
        "--ssh-option=StrictHostKeyChecking=accept-new",
    ]


def test_a_computer_lent_on_loopback_is_reached_through_an_ssh_forward(
    shardchat, lent, sshd, tmp_path: Path
) -> None:
    ssh_port, key = sshd
    rpc_port = lent.settings.port
    address = f"ssh://root@127.0.0.1:{ssh_port}"
    run = shardchat(
        "devices", "add", address, "--rpc-port", str(rpc_port), *ssh_options(tmp_path, key)
    )
    assert run.returncode == 0, run.stderr
    kept = f"{address}?rpc-port={rpc_port}"
    assert f"Added {kept}  (" in run.stdout and "a step through the link" in run.stdout
    assert [entry["address"] for entry in json.loads(shardchat("devices", "--json").stdout)] == [
        kept
    ]
    # the server answers on 127.0.0.1 only: another address of this computer is refused
    with pytest.raises(RemoteUnreachable):
        probe("127.0.0.2", rpc_port, connect_timeout_s=1.0)


def test_a_refused_key_is_sshs_own_words_and_exit_2(shardchat, lent, sshd, tmp_path) -> None:
    ssh_port, _key = sshd
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    run = shardchat(
        "devices",
        "add",
        f"ssh://root@127.0.0.1:{ssh_port}",
        "--rpc-port",
        str(lent.settings.port),
        *ssh_options(tmp_path, stranger),
    )
    assert run.returncode == 2 and "Permission denied" in run.stderr
    assert "No other computers" in shardchat("devices").stdout


def test_no_share_running_on_the_ssh_host_is_said_so(shardchat, sshd, tmp_path) -> None:
    ssh_port, key = sshd
    run = shardchat(
        "devices",
        "add",
        f"ssh://root@127.0.0.1:{ssh_port}",
        "--rpc-port",
        str(free_port()),
        *ssh_options(tmp_path, key),
    )
    assert run.returncode == 2 and "is `shardchat share` running on it?" in run.stderr
