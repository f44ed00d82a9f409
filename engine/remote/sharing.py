"""Lending this computer: llama.cpp's RPC server from this build, as a child process.

The server (`ggml-rpc-server`, built from the vendored llama.cpp beside the backend
modules it loads) serves this machine's devices to another computer's llama.cpp. Its
protocol has no authentication and has had remote exploits, so it listens on
127.0.0.1 unless the user names another address, and never on every interface at
once: the other computer reaches it through an SSH forward, with the user's own SSH
key. `-c` keeps the tensors it was sent (those over 10 MiB) on disk, so loading the
same model again sends no weights.

Nothing may stay lent when ShardChat is gone, even killed before it could stop the
server: it is started as a kept helper (engine.remote.processes), which the kernel
ends with this process.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from engine.errors import BadInputError, ShardChatError
from engine.remote.addresses import DEFAULT_RPC_PORT, LOOPBACK
from engine.remote.processes import KeptProcess, end_process, start_kept
from engine.remote.rpc_probe import RemoteBusy, RemoteServer, RemoteUnreachable, probe

START_TIMEOUT_S = 30.0
_ANY_ADDRESS = {"0.0.0.0", "::"}


@dataclass(frozen=True)
class ShareSettings:
    """How this computer is lent: where the server listens and what it serves."""

    host: str = LOOPBACK
    port: int = DEFAULT_RPC_PORT
    threads: int | None = None  # the CPU device's threads; llama.cpp's default otherwise
    devices: tuple[str, ...] = ()  # ggml device names (CPU, Vulkan0, ...); all GPUs otherwise
    cache: bool = True

    @property
    def on_network(self) -> bool:
        """Whether other computers can reach it directly, without an SSH forward."""
        return not ipaddress.ip_address(self.host).is_loopback


def checked_settings(settings: ShareSettings) -> ShareSettings:
    """The settings, or BadInputError: a listening address must be one address of this
    computer's, never every interface at once."""
    if settings.host in _ANY_ADDRESS:
        raise BadInputError(
            f"refusing to listen on {settings.host} (every network at once): name the one "
            "interface address other computers should reach"
        )
    try:
        ipaddress.ip_address(settings.host)
    except ValueError:
        raise BadInputError(f"not an IP address to listen on: {settings.host!r}") from None
    if not 0 < settings.port < 65536:
        raise BadInputError(f"not a port: {settings.port}")
    return settings


def rpc_server_binary() -> Path:
    """The RPC server of the llama.cpp build this app runs, beside its backend modules."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        raise ShardChatError("llama-cpp-python is not installed")
    name = "ggml-rpc-server.exe" if sys.platform == "win32" else "ggml-rpc-server"
    binary = Path(spec.origin).parent / "lib" / name
    if not binary.is_file():
        raise ShardChatError(f"this llama.cpp build has no RPC server ({binary} is missing)")
    return binary


def server_command(binary: Path, settings: ShareSettings) -> list[str]:
    """The server's command line for these settings."""
    command = [str(binary), "-H", settings.host, "-p", str(settings.port)]
    if settings.threads is not None:
        command += ["-t", str(settings.threads)]
    if settings.devices:
        command += ["-d", ",".join(settings.devices)]
    if settings.cache:
        command.append("-c")
    return command


class SharingServer:
    """One running RPC server: started, checked through a probe of our own, stopped."""

    def __init__(self, settings: ShareSettings, cache_root: Path, log_path: Path) -> None:
        """`cache_root`: where the server keeps the tensors it was sent (in `rpc/` below it);
        `log_path`: the server's own output, for when it fails."""
        self.settings = checked_settings(settings)
        self._cache_root, self.log_path = cache_root, log_path
        self._process: KeptProcess | None = None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> RemoteServer:
        """Start the server and wait until it answers a probe; what it serves, or
        ShardChatError with the server's own last words (a port in use, a device unknown)."""
        self._cache_root.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "LLAMA_CACHE": str(self._cache_root)}
        command = server_command(rpc_server_binary(), self.settings)
        with self.log_path.open("wb") as log:
            self._process = start_kept(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        return self._wait_until_answering(timeout_s)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Wait for the server to end by itself; its exit code, or None if it still runs."""
        if self._process is None:
            return None
        return self._process.wait(timeout_s)

    def stop(self) -> None:
        """Stop the server: nothing is lent once this returns."""
        process, self._process = self._process, None
        if process is not None:
            end_process(process.process)

    def _wait_until_answering(self, timeout_s: float) -> RemoteServer:
        """The server's own probe, once it answers. Whatever else holds the port answers
        too, or takes the connection and says nothing, until our server fails to bind it
        and exits: so an answer counts only while our process still runs."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                found = probe(self.settings.host, self.settings.port, 1.0, reply_timeout_s=1.0)
            except (RemoteUnreachable, RemoteBusy):
                found = None
            if not self.running:
                self.stop()
                raise ShardChatError(f"the RPC server did not start: {self.last_words()}")
            if found is not None:
                return found
            if time.monotonic() > deadline:
                self.stop()
                raise ShardChatError(f"the RPC server did not answer within {timeout_s:g} s")
            time.sleep(0.1)  # polling a port that is not open yet: nothing to wait on

    def last_words(self) -> str:
        """The server's last error line (or last line): why it stopped."""
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "no output"
        said = [line.strip() for line in lines if line.strip()]
        errors = [line for line in said if "error" in line.lower() or "fail" in line.lower()]
        return (errors or said or ["no output"])[-1]
