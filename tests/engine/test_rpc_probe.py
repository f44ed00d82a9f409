"""engine.remote: the probe of a llama.cpp RPC server, against the real server of this build
and against peers that fail in each way a lent computer can."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.errors import BadInputError, ShardChatError
from engine.remote.rpc_probe import (
    PROTOCOL_VERSION,
    RemoteBusy,
    RemoteRefused,
    RemoteUnreachable,
    probe,
)
from engine.remote.sharing import ShareSettings, SharingServer, checked_settings
from tests.lent_computers import free_port, lent_computer


@pytest.fixture
def lent(tmp_path: Path) -> Iterator[SharingServer]:
    """This build's RPC server on a loopback port, serving the CPU device (not started)."""
    server = lent_computer(tmp_path)
    yield server
    server.stop()


def test_this_builds_server_answers_the_probe_with_its_version_and_memory(lent) -> None:
    started = lent.start()
    again = probe("127.0.0.1", lent.settings.port)
    assert started.version == again.version == PROTOCOL_VERSION
    assert len(again.devices) == 1 and again.devices[0].total_bytes > 2**30
    assert 0 < again.devices[0].free_bytes <= again.devices[0].total_bytes
    assert "Starting RPC server v" + ".".join(map(str, PROTOCOL_VERSION)) in (
        lent_log(lent)
    )  # the version the server prints is the one the probe expects


def lent_log(server: SharingServer) -> str:
    return server.log_path.read_text(encoding="utf-8")


def test_stopping_sharing_closes_the_port(lent) -> None:
    lent.start()
    lent.stop()
    assert not lent.running
    with pytest.raises(RemoteUnreachable):
        probe("127.0.0.1", lent.settings.port, connect_timeout_s=1.0)


def test_a_server_started_from_a_passing_thread_outlives_it(lent) -> None:
    """The window starts sharing from a worker thread that ends at once: the server, which
    the kernel ends with the thread that started it, must not end with that one."""
    starting = threading.Thread(target=lent.start)
    starting.start()
    starting.join()
    assert lent.running
    assert probe("127.0.0.1", lent.settings.port).version == PROTOCOL_VERSION
    assert lent.running


def test_a_port_in_use_is_the_servers_own_reason(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = SharingServer(
            ShareSettings(port=port, devices=("CPU",)), tmp_path / "c", tmp_path / "log"
        )
        with pytest.raises(ShardChatError, match="did not start: .*(socket|bind)"):
            server.start()
        assert not server.running


def test_an_unknown_device_is_refused_with_the_servers_words(tmp_path: Path) -> None:
    server = SharingServer(
        ShareSettings(port=free_port(), devices=("NoSuchGPU7",)), tmp_path / "c", tmp_path / "l"
    )
    with pytest.raises(ShardChatError, match="NoSuchGPU7"):
        server.start()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "my-laptop", "300.1.1.1"])
def test_sharing_never_listens_everywhere_nor_on_a_name(host: str) -> None:
    with pytest.raises(BadInputError, match="0.0.0.0|every network|not an IP address"):
        checked_settings(ShareSettings(host=host))


def test_only_a_non_loopback_address_is_on_the_network() -> None:
    assert not ShareSettings(host="127.0.0.1").on_network
    assert not ShareSettings(host="::1").on_network
    assert ShareSettings(host="192.168.1.20").on_network


def test_a_closed_port_is_unreachable_at_once() -> None:
    port = free_port()  # bound and closed again: nothing listens
    began = time.monotonic()
    with pytest.raises(RemoteUnreachable, match=f"cannot reach 127.0.0.1:{port}"):
        probe("127.0.0.1", port)
    assert time.monotonic() - began < 2.0


# -- peers that are not (this) llama.cpp RPC server ---------------------------------------


def peer(answer: Callable[[socket.socket], None]) -> Iterator[int]:
    """A loopback server that handles one connection with `answer`; yields its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    done = threading.Event()

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn:
                answer(conn)
                done.wait(10)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    done.set()
    thread.join(10)


def read_request(conn: socket.socket) -> tuple[int, bytes]:
    command, size = struct.unpack("<BQ", conn.recv(9, socket.MSG_WAITALL))
    return command, conn.recv(size, socket.MSG_WAITALL) if size else b""


def hello_of(version: tuple[int, int, int]) -> Callable[[socket.socket], None]:
    def answer(conn: socket.socket) -> None:
        command, payload = read_request(conn)
        assert command == 14 and payload == bytes(24)
        conn.sendall(struct.pack("<Q", 28) + bytes([*version, 0]) + bytes(24))

    return answer


def test_another_protocol_version_is_refused_with_both_versions() -> None:
    for port in peer(hello_of((6, 1, 0))):
        with pytest.raises(RemoteRefused, match=r"protocol 6\.1\.0, this build speaks 7\.0\.0"):
            probe("127.0.0.1", port)


def test_a_server_that_takes_the_connection_and_says_nothing_is_busy() -> None:
    for port in peer(lambda conn: None):
        began = time.monotonic()
        with pytest.raises(RemoteBusy, match="serving another computer"):
            probe("127.0.0.1", port, reply_timeout_s=0.5)
        assert time.monotonic() - began < 3.0


def test_a_web_server_is_not_an_rpc_server() -> None:
    def http(conn: socket.socket) -> None:
        conn.recv(64)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        conn.shutdown(socket.SHUT_WR)

    for port in peer(http):
        with pytest.raises(RemoteRefused, match="not a llama.cpp RPC server"):
            probe("127.0.0.1", port)


def test_a_server_that_hangs_up_after_hello_is_refused() -> None:
    def hang_up(conn: socket.socket) -> None:
        hello_of(PROTOCOL_VERSION)(conn)
        conn.shutdown(socket.SHUT_RDWR)

    for port in peer(hang_up):
        with pytest.raises(RemoteRefused, match="closed the connection"):
            probe("127.0.0.1", port)
