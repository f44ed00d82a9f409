"""ggml's device list and the hardware probe on a real Vulkan device: Mesa's lavapipe.

Run under the one llama.cpp build (its Vulkan module) with lavapipe made visible:
GGML_VK_VISIBLE_DEVICES=0 GGML_VK_DISABLE_F16=1 GGML_VK_DISABLE_COOPMAT=1
.venv/bin/python -m pytest -m gpu tests/gpu (make test-gpu). lavapipe
runs on the CPU, but Vulkan reports it as a device of its own with a 2 GiB heap,
and ggml lists it as a discrete GPU: the case of an AMD or Intel card.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import llama_cpp
import pytest

from engine.llama.ggml_devices import DeviceType, device_memory, list_devices
from engine.llama.ggml_library import is_library_file
from engine.machine.gpu_probe import probe_gpus
from engine.machine.hardware import probe_hardware


def has_vulkan_backend() -> bool:
    """Whether this llama-cpp-python ships ggml's Vulkan backend (whatever devices it sees)."""
    folder = Path(llama_cpp.__file__).parent / "lib"
    return any(is_library_file(path.name, "ggml-vulkan") for path in folder.iterdir())


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not has_vulkan_backend(), reason="a llama.cpp build without Vulkan"),
]


def vulkan_devices() -> list:
    return [device for device in list_devices() if device.backend == "Vulkan"]


def test_lavapipe_is_a_vulkan_gpu_with_memory() -> None:
    devices = vulkan_devices()
    assert devices, "no Vulkan device: is GGML_VK_VISIBLE_DEVICES=0 set?"
    vulkan0 = devices[0]
    assert vulkan0.name == "Vulkan0" and vulkan0.is_gpu
    assert vulkan0.type in (DeviceType.GPU, DeviceType.IGPU)
    assert vulkan0.memory_total_bytes > 0
    assert 0 < vulkan0.memory_free_bytes <= vulkan0.memory_total_bytes
    free, total = device_memory("Vulkan0")
    assert total == vulkan0.memory_total_bytes and 0 < free <= total


def test_the_probe_finds_the_vulkan_gpu_without_nvml() -> None:
    (vulkan0, *_) = vulkan_devices()
    gpus, reason, _, _ = probe_gpus()
    assert reason is None
    gpu = next(gpu for gpu in gpus if gpu.ggml_device == "Vulkan0")
    assert gpu.backend == "Vulkan" and gpu.name == vulkan0.description
    assert gpu.vram_total_bytes == vulkan0.memory_total_bytes > 0
    assert gpu.integrated == (vulkan0.type is DeviceType.IGPU)
    if "llvmpipe" in gpu.name:  # lavapipe: what only ggml can see of a GPU
        assert gpu.uuid == "" and gpu.pcie_width_max is None and not gpu.other_processes_known
        assert gpus[0] == gpu  # llama.cpp's main GPU


def test_the_machine_probe_and_its_fingerprint_name_the_backend() -> None:
    info = probe_hardware()
    assert any(gpu.ggml_device == "Vulkan0" for gpu in info.gpus)
    assert info.fingerprint() == probe_hardware().fingerprint()
    # llama_print_system_info() names no Vulkan feature, so the build id alone does not
    # tell this build from the CPU one: the GPU's backend in the fingerprint does.
    as_cuda = [dataclasses.replace(gpu, backend="CUDA") for gpu in info.gpus]
    assert dataclasses.replace(info, gpus=tuple(as_cuda)).fingerprint() != info.fingerprint()


def test_info_devices_lists_vulkan0_as_the_gpu_used() -> None:
    shardchat = str(Path(sys.executable).parent / "shardchat")
    done = subprocess.run([shardchat, "info", "--devices"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "  libggml-vulkan.so: loaded (devices: Vulkan0)" in lines
    assert any(line.startswith("  Vulkan0 ") and "llvmpipe" in line for line in lines)
    assert lines[-1].startswith("GPU used       Vulkan0 (llvmpipe")


def test_the_hardware_probe_carries_the_backend_report() -> None:
    info = probe_hardware()
    assert any(line.startswith("backends: modules from ") for line in info.backends)
    assert "  libggml-vulkan.so: loaded (devices: Vulkan0)" in info.backends
