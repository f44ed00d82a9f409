"""ggml's device list, read from the llama.cpp build these tests run under.

Without a GPU the build has exactly one device, the CPU (its Vulkan module finds
no device while lavapipe is hidden); lavapipe made visible is checked in
tests/gpu/test_ggml_devices.py. The loader's failure paths are
checked by breaking it on purpose: a broken native library must never raise.
"""

from __future__ import annotations

import ctypes

import pytest

from engine.llama import ggml_devices, ggml_library
from engine.llama.ggml_devices import DeviceType, device_memory, list_devices, probe_devices
from engine.machine.gpu_probe import probe_gpus

cpu_build_only = pytest.mark.skipif(
    ggml_devices.has_gpu_backend(),  # true only while a GPU device is visible
    reason="llama.cpp sees a GPU device here; tests/gpu checks it",
)


@cpu_build_only
def test_the_cpu_build_lists_only_the_cpu() -> None:
    (cpu,) = list_devices()
    assert cpu.name == "CPU" and cpu.backend == "CPU" and cpu.type is DeviceType.CPU
    assert not cpu.is_gpu and cpu.description.strip()
    assert cpu.memory_total_bytes > 0
    gpus, reason, _, _ = probe_gpus(ggml=probe_devices)
    assert all(gpu.ggml_device is None for gpu in gpus)  # at most NVML's, none driven
    if not gpus:
        assert reason and "ggml: no GPU device, only CPU: libggml-vulkan.so: " in reason


def test_every_device_has_a_name_the_registry_knows() -> None:
    devices = list_devices()
    assert devices and devices[-1].type is DeviceType.CPU  # the CPU registers last
    for device in devices:
        free, total = device_memory(device.name)
        assert total == device.memory_total_bytes and 0 <= free <= total
    assert [d.name for d in devices] == [
        ggml_library.device_name(pointer) for pointer in ggml_devices.device_pointers()
    ]


def test_an_unknown_device_has_no_memory() -> None:
    assert device_memory("Vulkan99") == (0, 0)


def test_a_broken_library_gives_no_devices_and_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def unloadable() -> list[int]:
        raise OSError("libggml.so: cannot open shared object file")

    monkeypatch.setattr(ggml_devices, "device_pointers", unloadable)
    devices, reason = probe_devices()
    assert devices == () and list_devices() == ()
    assert reason == "ggml unavailable (OSError: libggml.so: cannot open shared object file)"


def test_an_unknown_device_type_is_never_a_gpu() -> None:
    assert ggml_devices._device_type(7) is DeviceType.UNKNOWN
    assert ggml_devices._device_type(2) is DeviceType.IGPU


def test_the_loader_reuses_llama_cpps_own_copy_of_each_library() -> None:
    assert ggml_library.is_library_file("libggml-base.so.0.25.3", "ggml-base")
    assert ggml_library.is_library_file("ggml.dll", "ggml")
    assert not ggml_library.is_library_file("libggml-base.so", "ggml")
    base = ggml_library.loaded_library("ggml-base")
    count = ggml_library.typed_function("ggml", "ggml_backend_dev_count", ctypes.c_size_t)
    assert count() == len(list_devices()) and base is ggml_library.loaded_library("ggml-base")
