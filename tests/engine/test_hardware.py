"""The hardware probe: the real one on this machine, and NVML through a described fake GPU.

No NVIDIA GPU can exist on the machines these tests run on, so the NVML part is
checked against `FakeNvml`, which behaves like pynvml for a described machine:
same function names, same return types (pynvml's own structs), and pynvml's own
exception classes raised the way the library raises them. ggml's half is given
as a described device list (what ggml_backend_dev_get_props reports on such a
machine), so these tests do not depend on the llama.cpp build they run under;
the real list is checked in tests/engine/test_ggml_devices.py and tests/gpu.
"""

from __future__ import annotations

import ctypes.util
import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml
import pytest

from engine.llama.ggml_devices import DeviceType, GgmlDevice
from engine.machine import cpu_probe, gpu_probe, hardware
from engine.machine.cpu_probe import probe_cpu, probe_memory
from engine.machine.gpu_probe import NO_GPU_FOUND, probe_gpus
from engine.machine.hardware import compact_system_info, llama_build_id, probe_hardware
from engine.machine.hardware_info import CpuInfo, GpuInfo, HardwareInfo, MemoryInfo

GIB = 1024**3
MIB = 1024**2
OTHER_PID = 4242  # a game holding VRAM next to us


@dataclass
class DescribedGpu:
    """One GPU of a described machine, as NVML would report it."""

    name: str = "NVIDIA GeForce RTX 4060 Laptop GPU"
    uuid: str = "GPU-5f0e1c2a-7b3d-4e8f-9a10-2b3c4d5e6f70"
    total_bytes: int = 8 * GIB
    used_bytes: int = 2 * GIB + 256 * MIB
    pcie_generation: tuple[int, int] = (1, 4)  # (current, max): idle laptops drop to gen 1
    pcie_width: tuple[int, int] = (8, 8)
    compute_capability: tuple[int, int] = (8, 9)
    compute_processes: dict[int, int] = field(
        default_factory=lambda: {OTHER_PID: 3 * GIB // 2, os.getpid(): 512 * MIB}
    )
    graphics_processes: dict[int, int] = field(default_factory=dict)
    pci_bus_id: str | None = None  # NVML's form, "00000000:01:00.0"; None: not reported


class FakeNvml:
    """pynvml for a described machine; `failing` maps a function name to the NVML error code."""

    NVMLError = pynvml.NVMLError

    def __init__(
        self,
        gpus: list[DescribedGpu],
        driver: str = "560.35.03",
        cuda_version: int = 12060,
        init_error: int | None = None,
        failing: dict[str, int] | None = None,
    ) -> None:
        self.gpus = gpus
        self.driver = driver
        self.cuda_version = cuda_version
        self.init_error = init_error
        self.failing = failing or {}
        self.initialized = False
        self.shutdown_calls = 0

    def _enter(self, function: str) -> None:
        if not self.initialized:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        if function in self.failing:
            raise pynvml.NVMLError(self.failing[function])

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized = False
        self.shutdown_calls += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> DescribedGpu:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    def nvmlDeviceGetName(self, gpu: DescribedGpu) -> str:
        self._enter("nvmlDeviceGetName")
        return gpu.name

    def nvmlDeviceGetUUID(self, gpu: DescribedGpu) -> str:
        self._enter("nvmlDeviceGetUUID")
        return gpu.uuid

    def nvmlDeviceGetMemoryInfo(self, gpu: DescribedGpu) -> Any:
        self._enter("nvmlDeviceGetMemoryInfo")
        free = gpu.total_bytes - gpu.used_bytes
        return pynvml.c_nvmlMemory_t(total=gpu.total_bytes, free=free, used=gpu.used_bytes)

    def nvmlDeviceGetCudaComputeCapability(self, gpu: DescribedGpu) -> tuple[int, int]:
        self._enter("nvmlDeviceGetCudaComputeCapability")
        return gpu.compute_capability

    def nvmlDeviceGetCurrPcieLinkGeneration(self, gpu: DescribedGpu) -> int:
        self._enter("nvmlDeviceGetCurrPcieLinkGeneration")
        return gpu.pcie_generation[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, gpu: DescribedGpu) -> int:
        self._enter("nvmlDeviceGetMaxPcieLinkGeneration")
        return gpu.pcie_generation[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, gpu: DescribedGpu) -> int:
        self._enter("nvmlDeviceGetCurrPcieLinkWidth")
        return gpu.pcie_width[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, gpu: DescribedGpu) -> int:
        self._enter("nvmlDeviceGetMaxPcieLinkWidth")
        return gpu.pcie_width[1]

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: DescribedGpu) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        return _process_infos(gpu.compute_processes)

    def nvmlDeviceGetGraphicsRunningProcesses(self, gpu: DescribedGpu) -> list[Any]:
        self._enter("nvmlDeviceGetGraphicsRunningProcesses")
        return _process_infos(gpu.graphics_processes)

    def nvmlDeviceGetPciInfo(self, gpu: DescribedGpu) -> Any:
        self._enter("nvmlDeviceGetPciInfo")
        if gpu.pci_bus_id is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.nvmlPciInfo_t(busId=gpu.pci_bus_id.encode())


# What ggml_backend_dev_get_props reports for the CPU of any build.
CPU_DEVICE = GgmlDevice("CPU", "AMD Ryzen 7 7840HS", DeviceType.CPU, "CPU", 30 * GIB, 32 * GIB)


def ggml_lists(*devices: GgmlDevice) -> Any:
    """A ggml device list for probe_gpus: the CPU first, as every build registers it."""
    return lambda: ((*devices, CPU_DEVICE), None)


CPU_BUILD = ggml_lists()


def probe(fake: Any, *devices: GgmlDevice) -> Any:
    """probe_gpus of a described machine: NVML's fake and ggml's devices (a CPU build if none)."""
    return probe_gpus(nvml=fake, ggml=ggml_lists(*devices))


def no_gpu_reason(nvml_reason: str) -> str:
    return f"{NO_GPU_FOUND} (NVML: {nvml_reason}; ggml: no GPU device, only CPU)"


def _process_infos(used_by_pid: dict[int, int]) -> list[Any]:
    return [
        pynvml.nvmlFriendlyObject(
            {"pid": pid, "usedGpuMemory": used, "gpuInstanceId": 0, "computeInstanceId": 0}
        )
        for pid, used in used_by_pid.items()
    ]


def _cpuinfo_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith(("flags", "Features")))
    return set(line.partition(":")[2].split())


def _machine(fake: FakeNvml) -> HardwareInfo:
    """A HardwareInfo of this machine's CPU with the fake's GPUs."""
    gpus, reason, driver, cuda = probe(fake)
    return HardwareInfo(
        cpu=CpuInfo("AMD Ryzen 7 7840HS", 8, 16, ("avx", "avx2", "avx512f", "f16c", "fma")),
        memory=MemoryInfo(total_bytes=32 * GIB, available_bytes=20 * GIB),
        gpus=gpus,
        gpu_reason=reason,
        driver_version=driver,
        cuda_driver_version=cuda,
        os="Linux-6.8.0-x86_64-with-glibc2.39",
        llama_build="llama-cpp-python 0.3.36; CUDA: ARCHS=890 USE_GRAPHS; CPU: AVX AVX2",
    )


# --- the real probe on this machine ----------------------------------------------------


def test_real_cpu_and_memory_probe_is_plausible() -> None:
    cpu = probe_cpu()
    memory = probe_memory()
    assert cpu.model.strip() and cpu.model != "unknown"
    assert 1 <= cpu.physical_cores <= cpu.logical_cores
    assert memory.total_bytes > GIB
    assert 0 < memory.available_bytes <= memory.total_bytes
    assert list(cpu.flags) == sorted(set(cpu.flags))
    assert all(flag == flag.lower() for flag in cpu.flags)


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="reads /proc/cpuinfo")
def test_real_cpu_flags_match_proc_cpuinfo() -> None:
    listed = _cpuinfo_flags()
    flags = set(probe_cpu().flags)
    for flag in ("avx", "avx2", "avx512f", "avx512_vnni", "avx_vnni", "fma", "f16c", "bmi2"):
        assert (flag in flags) == (flag in listed), flag
    assert flags <= set(cpu_probe._RELEVANT_CPU_FLAGS.values())


def test_real_gpu_probe_never_raises_and_explains_missing_gpu() -> None:
    gpus, reason, driver, _ = probe_gpus()
    assert bool(gpus) != bool(reason)  # either GPUs, or a reason why none
    if ctypes.util.find_library("nvidia-ml") is None:
        assert driver is None
        assert all(gpu.ggml_device and not gpu.other_processes_known for gpu in gpus)
        if not gpus:  # the CPU build, or a Vulkan build with lavapipe hidden
            assert reason and reason.startswith(NO_GPU_FOUND) and "driver" in reason.lower()


def test_real_hardware_probe_and_llama_build() -> None:
    import llama_cpp

    info = probe_hardware()
    assert info.llama_build.startswith(f"llama-cpp-python {llama_cpp.__version__}; ")
    assert "CPU" in info.llama_build
    assert info.llama_build == llama_build_id()
    assert info.os and (info.gpus == ()) == (info.gpu_reason is not None)


# --- NVML absent or failing ------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVIDIA driver not found (libnvidia-ml)"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "NVIDIA driver not loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "NVML error: Insufficient Permissions"),
    ],
)
def test_nvml_init_failure_gives_reason_and_no_gpus(code: int, expected: str) -> None:
    fake = FakeNvml([DescribedGpu()], init_error=code)
    assert probe(fake) == ((), no_gpu_reason(expected), None, None)
    assert fake.shutdown_calls == 0


def test_binding_without_nvml_functions_is_handled() -> None:
    gpus, reason, driver, cuda = probe_gpus(nvml=object(), ggml=CPU_BUILD)
    assert gpus == () and reason and reason.startswith(f"{NO_GPU_FOUND} (NVML: NVML error")
    assert driver is None and cuda is None


def test_missing_nvml_module_is_handled(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` now raises ImportError
    gpus, reason, _, _ = probe_gpus(ggml=CPU_BUILD)
    assert gpus == () and reason and "nvidia-ml-py" in reason


def test_no_devices_gives_reason_and_shuts_down() -> None:
    fake = FakeNvml([])
    assert probe(fake) == ((), no_gpu_reason("no NVIDIA GPU"), "560.35.03", "12.6")
    assert fake.shutdown_calls == 1 and not fake.initialized


def test_device_count_failure_gives_reason_and_shuts_down() -> None:
    fake = FakeNvml([DescribedGpu()], failing={"nvmlDeviceGetCount": pynvml.NVML_ERROR_GPU_IS_LOST})
    gpus, reason, _, _ = probe(fake)
    assert gpus == () and reason == no_gpu_reason("NVML error: GPU is lost")
    assert fake.shutdown_calls == 1


def test_failing_field_queries_become_none_and_rest_is_filled() -> None:
    not_supported = pynvml.NVML_ERROR_NOT_SUPPORTED
    fake = FakeNvml(
        [DescribedGpu()],
        failing={
            "nvmlDeviceGetCurrPcieLinkGeneration": not_supported,
            "nvmlDeviceGetMaxPcieLinkWidth": not_supported,
            "nvmlDeviceGetGraphicsRunningProcesses": not_supported,
            "nvmlSystemGetCudaDriverVersion": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        },
    )
    (gpu,), reason, driver, cuda = probe(fake)
    assert gpu.pcie_generation_current is None and gpu.pcie_width_max is None
    assert gpu.pcie_generation_max == 4 and gpu.pcie_width_current == 8
    assert gpu.vram_total_bytes == 8 * GIB and gpu.other_processes_bytes == 3 * GIB // 2
    assert (reason, driver, cuda) == (None, "560.35.03", None)
    assert fake.shutdown_calls == 1


def test_failing_memory_and_process_queries_become_zero() -> None:
    fake = FakeNvml(
        [DescribedGpu()],
        failing={
            "nvmlDeviceGetMemoryInfo": pynvml.NVML_ERROR_UNKNOWN,
            "nvmlDeviceGetComputeRunningProcesses": pynvml.NVML_ERROR_NO_PERMISSION,
        },
    )
    (gpu,), _, _, _ = probe(fake)
    assert (gpu.vram_total_bytes, gpu.vram_free_bytes, gpu.vram_used_bytes) == (0, 0, 0)
    assert gpu.other_processes_bytes == 0
    assert gpu.name == "NVIDIA GeForce RTX 4060 Laptop GPU"


# --- the described laptop GPU ----------------------------------------------------------


def test_described_laptop_gpu_is_read_correctly() -> None:
    fake = FakeNvml([DescribedGpu()])
    gpus, reason, driver, cuda = probe(fake)
    assert gpus == (
        GpuInfo(
            index=0,
            name="NVIDIA GeForce RTX 4060 Laptop GPU",
            uuid="GPU-5f0e1c2a-7b3d-4e8f-9a10-2b3c4d5e6f70",
            vram_total_bytes=8 * GIB,
            vram_free_bytes=8 * GIB - (2 * GIB + 256 * MIB),
            vram_used_bytes=2 * GIB + 256 * MIB,
            other_processes_bytes=3 * GIB // 2,  # our own 512 MiB are not counted
            pcie_generation_current=1,
            pcie_generation_max=4,
            pcie_width_current=8,
            pcie_width_max=8,
            compute_capability=(8, 9),
        ),
    )
    assert (reason, driver, cuda) == (None, "560.35.03", "12.6")
    assert fake.shutdown_calls == 1 and not fake.initialized


def test_process_in_compute_and_graphics_lists_counts_once() -> None:
    gpu = DescribedGpu(
        compute_processes={OTHER_PID: GIB, os.getpid(): GIB},
        graphics_processes={OTHER_PID: GIB, 1500: 300 * MIB, os.getpid(): GIB},
    )
    (info,), _, _, _ = probe(FakeNvml([gpu]))
    assert info.other_processes_bytes == GIB + 300 * MIB


def test_bytes_strings_from_older_bindings_are_decoded() -> None:
    class OldBindingNvml(FakeNvml):
        def nvmlDeviceGetName(self, gpu: DescribedGpu) -> bytes:  # type: ignore[override]
            return super().nvmlDeviceGetName(gpu).encode()

        def nvmlSystemGetDriverVersion(self) -> bytes:  # type: ignore[override]
            return super().nvmlSystemGetDriverVersion().encode()

    (gpu,), _, driver, _ = probe(OldBindingNvml([DescribedGpu()]))
    assert gpu.name == "NVIDIA GeForce RTX 4060 Laptop GPU" and driver == "560.35.03"


def test_two_gpus_are_indexed_in_order() -> None:
    second = DescribedGpu(name="NVIDIA RTX A2000", uuid="GPU-2", total_bytes=6 * GIB)
    gpus, _, _, _ = probe(FakeNvml([DescribedGpu(), second]))
    assert [(gpu.index, gpu.name) for gpu in gpus] == [
        (0, "NVIDIA GeForce RTX 4060 Laptop GPU"),
        (1, "NVIDIA RTX A2000"),
    ]


# --- GPUs ggml sees: other vendors, and NVIDIA seen by both ---------------------------

RADEON = GgmlDevice(
    "Vulkan1", "AMD Radeon RX 7600 (RADV NAVI33)", DeviceType.GPU, "Vulkan",
    7 * GIB, 8 * GIB, "0000:03:00.0",
)  # fmt: skip
IRIS = GgmlDevice(
    "Vulkan0", "Intel(R) Iris(R) Xe Graphics (RPL-P)", DeviceType.IGPU, "Vulkan",
    15 * GIB, 16 * GIB, "0000:00:02.0",
)  # fmt: skip


def vulkan_on(gpu: DescribedGpu, name: str = "Vulkan2", device_id: str | None = None) -> GgmlDevice:
    """The Vulkan device an NVIDIA GPU is: its marketing name; heap figures from the driver."""
    free = gpu.total_bytes - gpu.used_bytes
    return GgmlDevice(name, gpu.name, DeviceType.GPU, "Vulkan", free, gpu.total_bytes, device_id)


def test_vulkan_gpus_of_other_vendors_and_an_nvidia_seen_by_both() -> None:
    laptop = DescribedGpu()
    gpus, reason, driver, _ = probe(FakeNvml([laptop]), IRIS, RADEON, vulkan_on(laptop))
    assert reason is None and driver == "560.35.03"
    assert [(gpu.index, gpu.ggml_device, gpu.backend, gpu.integrated) for gpu in gpus] == [
        (0, "Vulkan1", "Vulkan", False),  # llama.cpp's order: discrete GPUs first
        (1, "Vulkan2", "Vulkan", False),
        (2, "Vulkan0", "Vulkan", True),  # used by llama.cpp only without a discrete GPU
    ]
    radeon, nvidia, iris = gpus
    assert radeon == GpuInfo(
        index=0,
        name="AMD Radeon RX 7600 (RADV NAVI33)",
        uuid="",
        vram_total_bytes=8 * GIB,
        vram_free_bytes=7 * GIB,
        vram_used_bytes=GIB,
        other_processes_bytes=0,
        pcie_generation_current=None,
        pcie_generation_max=None,
        pcie_width_current=None,
        pcie_width_max=None,
        compute_capability=None,
        backend="Vulkan",
        ggml_device="Vulkan1",
        other_processes_known=False,
    )
    (nvml_view,), _, _, _ = probe(FakeNvml([laptop]))  # the same GPU as NVML alone sees it
    assert nvidia == dataclasses.replace(
        nvml_view, index=1, backend="Vulkan", ggml_device="Vulkan2"
    )
    assert nvidia.other_processes_bytes == 3 * GIB // 2 and nvidia.pcie_generation_max == 4
    assert iris.vram_total_bytes == 16 * GIB and not iris.other_processes_known


def test_cuda_and_vulkan_devices_of_one_gpu_are_matched_by_pci_address() -> None:
    """Two identical GPUs, CUDA ordering them fastest first: the PCI address decides."""
    first = DescribedGpu(uuid="GPU-1", pci_bus_id="00000000:01:00.0")
    second = DescribedGpu(uuid="GPU-2", pci_bus_id="00000000:02:00.0", used_bytes=GIB)
    cuda = [
        GgmlDevice(f"CUDA{i}", first.name, DeviceType.GPU, "CUDA", GIB, 8 * GIB, bus)
        for i, bus in enumerate(("0000:02:00.0", "0000:01:00.0"))
    ]
    vulkan = [vulkan_on(first, f"Vulkan{i}", bus) for i, bus in enumerate(("0000:01:00.0",))]
    gpus, _, _, _ = probe(FakeNvml([first, second]), *cuda, *vulkan)
    assert [(gpu.uuid, gpu.ggml_device, gpu.backend) for gpu in gpus] == [
        ("GPU-2", "CUDA0", "CUDA"),
        ("GPU-1", "CUDA1", "CUDA"),
    ]
    assert gpus[0].vram_used_bytes == GIB  # NVML's figures, not ggml's


def test_an_nvidia_gpu_this_build_cannot_drive_is_listed_after_the_usable_ones() -> None:
    gpus, _, _, _ = probe(FakeNvml([DescribedGpu()]), RADEON)
    assert [(gpu.index, gpu.ggml_device) for gpu in gpus] == [(0, "Vulkan1"), (1, None)]
    assert gpus[1].backend == "CUDA" and gpus[1].other_processes_known


def test_a_gpu_only_ggml_sees_is_found_without_nvml() -> None:
    fake = FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    (gpu,), reason, driver, cuda = probe(fake, IRIS)
    assert (reason, driver, cuda) == (None, None, None)
    assert gpu.integrated and gpu.ggml_device == "Vulkan0" and gpu.uuid == ""


def test_ggml_failure_and_nvml_failure_both_explain_the_missing_gpu() -> None:
    fake = FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    broken = ((), "ggml unavailable (OSError: libggml.so: cannot open shared object file)")
    _, reason, _, _ = probe_gpus(nvml=fake, ggml=lambda: broken)
    assert reason == (
        f"{NO_GPU_FOUND} (NVML: NVIDIA driver not found (libnvidia-ml); "
        "ggml: ggml unavailable (OSError: libggml.so: cannot open shared object file))"
    )

    def raising() -> Any:
        raise RuntimeError("registry gone")

    gpus, reason, _, _ = probe_gpus(nvml=fake, ggml=raising)
    assert gpus == () and reason and reason.endswith("ggml: ggml error: registry gone)")


@pytest.mark.parametrize(
    ("bus_id", "address"),
    [
        ("00000000:01:00.0", (0, 1, 0, 0)),
        ("0000:c1:00.1", (0, 0xC1, 0, 1)),
        (b"0000:C1:1F.7", (0, 0xC1, 0x1F, 7)),
        ("0000:01:00.0-v1", None),  # a CUDA virtual device
        ("", None),
        (None, None),
    ],
)
def test_pci_addresses_of_nvml_and_ggml_compare_equal(bus_id: Any, address: Any) -> None:
    assert gpu_probe.pci_address(bus_id) == address


def test_gpu_stored_before_backends_were_probed_loads_as_cuda() -> None:
    (gpu,), _, _, _ = probe(FakeNvml([DescribedGpu()]))
    old = {
        key: value
        for key, value in gpu.to_dict().items()
        if key not in ("backend", "ggml_device", "integrated", "other_processes_known")
    }
    assert GpuInfo.from_dict(old) == gpu
    assert (gpu.backend, gpu.ggml_device, gpu.integrated) == ("CUDA", None, False)


def test_fingerprint_changes_with_the_backend_that_drives_the_gpu() -> None:
    laptop = DescribedGpu()
    through_cuda = _machine(FakeNvml([laptop]))
    through_vulkan = dataclasses.replace(
        through_cuda,
        gpus=probe(FakeNvml([laptop]), vulkan_on(laptop, "Vulkan0"))[0],
    )
    assert through_vulkan.gpus[0].backend == "Vulkan"
    assert through_vulkan.fingerprint() != through_cuda.fingerprint()


def test_integrated_gpu_is_logged_as_system_ram(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(hardware, "probe_gpus", lambda: probe(FakeNvml([]), IRIS))
    with caplog.at_level("INFO", logger="engine.machine.hardware"):
        info = probe_hardware()
    assert info.gpus[0].integrated
    assert "integrated: its 16.0 GiB are system RAM" in caplog.text
    assert "Vulkan Vulkan0, 16.0 GiB shared system RAM" in caplog.text


# --- fingerprint -----------------------------------------------------------------------


def test_fingerprint_is_stable_across_real_probes() -> None:
    first, second = probe_hardware(), probe_hardware()
    assert first.fingerprint() == second.fingerprint()
    assert len(first.fingerprint()) == 16
    int(first.fingerprint(), 16)


def test_fingerprint_ignores_free_memory_free_vram_and_current_pcie_link() -> None:
    base = _machine(FakeNvml([DescribedGpu()]))
    busier_gpu = DescribedGpu(used_bytes=6 * GIB, pcie_generation=(4, 4), pcie_width=(4, 8))
    busier = _machine(FakeNvml([busier_gpu]))
    busier = dataclasses.replace(busier, memory=MemoryInfo(32 * GIB, 3 * GIB))
    assert busier.gpus != base.gpus
    assert busier.fingerprint() == base.fingerprint()


@pytest.mark.parametrize(
    "change",
    [
        {"gpus": [DescribedGpu(name="NVIDIA GeForce RTX 4070 Laptop GPU")]},
        {"gpus": [DescribedGpu(total_bytes=12 * GIB)]},
        {"gpus": [DescribedGpu(pcie_generation=(1, 3))]},
        {"gpus": []},
        {"driver": "565.57.01"},
    ],
    ids=["gpu-model", "vram", "pcie-max", "gpu-removed", "driver"],
)
def test_fingerprint_changes_with_gpu_or_driver(change: dict[str, Any]) -> None:
    base = _machine(FakeNvml([DescribedGpu()]))
    changed = _machine(FakeNvml(**{"gpus": [DescribedGpu()], **change}))
    assert changed.fingerprint() != base.fingerprint()


def test_fingerprint_changes_with_cores_ram_and_llama_build() -> None:
    base = _machine(FakeNvml([DescribedGpu()]))
    variants = [
        dataclasses.replace(base, cpu=dataclasses.replace(base.cpu, physical_cores=6)),
        dataclasses.replace(base, cpu=dataclasses.replace(base.cpu, logical_cores=12)),
        dataclasses.replace(base, memory=MemoryInfo(64 * GIB, 20 * GIB)),
        dataclasses.replace(base, llama_build="llama-cpp-python 0.3.37; CPU: AVX AVX2"),
    ]
    fingerprints = {variant.fingerprint() for variant in variants} | {base.fingerprint()}
    assert len(fingerprints) == len(variants) + 1


# --- serialisation ---------------------------------------------------------------------


def test_round_trip_through_json() -> None:
    for info in (_machine(FakeNvml([DescribedGpu()])), probe_hardware()):
        data = info.to_dict()
        assert json.loads(json.dumps(data)) == data
        restored = HardwareInfo.from_dict(json.loads(json.dumps(data)))
        assert restored == info
        assert restored.fingerprint() == info.fingerprint()


def test_from_dict_ignores_unknown_keys_from_newer_versions() -> None:
    info = _machine(FakeNvml([DescribedGpu()]))
    data = info.to_dict()
    data["nvlink"] = {"peers": 0}
    data["cpu"]["l3_cache_bytes"] = 16 * MIB
    data["memory"]["swap_bytes"] = 0
    data["gpus"][0]["power_limit_watts"] = 115
    assert HardwareInfo.from_dict(data) == info


def test_gpu_without_compute_capability_round_trips() -> None:
    (gpu,), _, _, _ = probe(
        FakeNvml(
            [DescribedGpu()],
            failing={"nvmlDeviceGetCudaComputeCapability": pynvml.NVML_ERROR_NOT_SUPPORTED},
        )
    )
    assert gpu.compute_capability is None
    assert GpuInfo.from_dict(gpu.to_dict()) == gpu


# --- pure helpers ----------------------------------------------------------------------


def test_compact_system_info_keeps_backends_and_enabled_features() -> None:
    cuda_build = (
        "CUDA : ARCHS = 890 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | "
        "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 0 | F16C = 1 | "
    )
    assert compact_system_info(cuda_build) == (
        "CUDA: ARCHS=890 USE_GRAPHS PEER_MAX_BATCH_SIZE=128; CPU: SSE3 AVX AVX2 F16C"
    )
    assert compact_system_info("AVX = 1 | AVX_VNNI = 0 | NEON = 0 | ") == "AVX"
    assert compact_system_info("") == ""


def test_relevant_cpu_flags_from_arm_features_line() -> None:
    features = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics asimddp sve i8mm"
    assert cpu_probe.relevant_cpu_flags(features) == ("dotprod", "i8mm", "neon", "sve")
