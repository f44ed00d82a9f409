"""Lent computers' devices in this process, through llama.cpp's RPC client.

Each server is added with `ggml_backend_rpc_add_server` (found on the "RPC" registry),
which returns a registry of its own; its devices (`RPC<n>`, described `host:port`)
join ggml's device list once that registry is registered, as llama.cpp's own tools do.
From then on a model load can place tensors on them like on any GPU.

The RPC client aborts the process when a server cannot be reached, speaks another
protocol version, or dies mid-call. So a server is added here only after
engine.remote.rpc_probe has checked it, and only in a process that may die: a child
engine process, never the window's.
"""

from __future__ import annotations

import ctypes
import threading

from engine.errors import ShardChatError
from engine.llama.backends import start_ggml
from engine.llama.ggml_library import registered_device_pointers, typed_function

_ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
_added: dict[str, list[int]] = {}  # endpoint -> its devices: a registry is added once
_adding = threading.Lock()


def rpc_server_devices(endpoints: tuple[str, ...]) -> list[int]:
    """The ggml devices of these (probed) servers, in order, each server added once per
    process: llama.cpp never removes a registry, and a second one would list its devices
    twice."""
    with _adding:
        for endpoint in endpoints:
            if endpoint not in _added:
                _added[endpoint] = add_rpc_server(endpoint)
        return [device for endpoint in endpoints for device in _added[endpoint]]


def add_rpc_server(endpoint: str) -> list[int]:
    """Register the (probed) RPC server at host:port; the ggml devices it added."""
    start_ggml()
    by_name = typed_function("ggml", "ggml_backend_reg_by_name", ctypes.c_void_p, ctypes.c_char_p)
    rpc = by_name(b"RPC")
    if not rpc:
        raise ShardChatError("this llama.cpp build has no RPC backend")
    proc = typed_function(
        "ggml-base",
        "ggml_backend_reg_get_proc_address",
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_char_p,
    )(rpc, b"ggml_backend_rpc_add_server")
    if not proc:
        raise ShardChatError("this llama.cpp build's RPC backend cannot add servers")
    before = set(registered_device_pointers())
    registry = _ADD_SERVER(proc)(endpoint.encode())
    if not registry:
        raise ShardChatError(f"llama.cpp could not add the RPC server {endpoint}")
    typed_function("ggml", "ggml_backend_register", None, ctypes.c_void_p)(registry)
    return [device for device in registered_device_pointers() if device not in before]
